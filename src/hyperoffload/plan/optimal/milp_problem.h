// Internal: a mixed-integer linear program in solver-neutral form — columns
// with bounds, costs and integrality, rows as sparse sums with two-sided
// bounds. The optimal planner's formulation (residency_milp.h) builds one; the
// CBC adapter (cbc_solver.h) solves it. Keeping the two apart lets tests
// inspect the formulation without a solver and keeps CBC's headers out of
// everything but one file.
//
// Bound, with c columns, r rows and z nonzeros (after add_row merges terms):
// add_column O(1) amortized; add_row O(t log t) for t terms (sorted by column
// to merge repeats); integer_count and objective O(c); max_violation O(c +
// z). Memory O(c + r + z), the terms kept once, row by row. Nothing here caps
// the program: the formulation refuses a trace of more than
// OptimalPlannerOptions::max_ops ops or a program of more than max_columns
// columns (residency_milp.h).
//
// Thread-safety: a plain value type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace hyperoffload::internal {

inline constexpr double kMilpInfinity = std::numeric_limits<double>::infinity();

struct MilpTerm {
  int column = 0;
  double coefficient = 0.0;
};

class MilpProblem {
 public:
  // Adds a column; returns its index. lower <= upper; an integer column with
  // bounds [0, 1] is binary.
  int add_column(double lower, double upper, double cost, bool integer) {
    col_lower_.push_back(lower);
    col_upper_.push_back(upper);
    col_cost_.push_back(cost);
    col_integer_.push_back(integer ? 1 : 0);
    return static_cast<int>(col_lower_.size()) - 1;
  }
  int add_binary(double cost = 0.0) { return add_column(0.0, 1.0, cost, true); }

  // Adds lower <= sum(terms) <= upper (either side may be infinite). Terms
  // naming the same column are summed; zero coefficients are dropped.
  void add_row(std::span<const MilpTerm> terms, double lower, double upper);

  std::size_t column_count() const { return col_lower_.size(); }
  std::size_t row_count() const { return row_lower_.size(); }
  std::size_t integer_count() const;

  std::span<const double> column_lower() const { return col_lower_; }
  std::span<const double> column_upper() const { return col_upper_; }
  std::span<const double> column_cost() const { return col_cost_; }
  bool column_integer(int column) const { return col_integer_[static_cast<std::size_t>(column)] != 0; }
  std::span<const double> row_lower() const { return row_lower_; }
  std::span<const double> row_upper() const { return row_upper_; }
  // Row r's terms are entries [row_begin()[r], row_begin()[r + 1]).
  std::span<const std::size_t> row_begin() const { return row_begin_; }
  std::span<const int> entry_column() const { return entry_column_; }
  std::span<const double> entry_value() const { return entry_value_; }

  // Constant added to the objective (the columns' costs do not include it).
  double cost_offset = 0.0;

  // The objective of an assignment of every column (cost_offset included), and
  // the largest violation of a bound or a row by it (0 when it satisfies all).
  double objective(std::span<const double> values) const;
  double max_violation(std::span<const double> values) const;

 private:
  std::vector<double> col_lower_, col_upper_, col_cost_;
  std::vector<std::uint8_t> col_integer_;
  std::vector<std::size_t> row_begin_{0};
  std::vector<int> entry_column_;
  std::vector<double> entry_value_;
  std::vector<double> row_lower_, row_upper_;
};

}  // namespace hyperoffload::internal
