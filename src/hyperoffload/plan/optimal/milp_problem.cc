#include "hyperoffload/plan/optimal/milp_problem.h"

#include <algorithm>
#include <cmath>

namespace hyperoffload::internal {

void MilpProblem::add_row(std::span<const MilpTerm> terms, double lower, double upper) {
  std::vector<MilpTerm> sorted(terms.begin(), terms.end());
  std::sort(sorted.begin(), sorted.end(), [](const MilpTerm& a, const MilpTerm& b) { return a.column < b.column; });
  for (std::size_t i = 0; i < sorted.size();) {
    double sum = 0.0;
    const int column = sorted[i].column;
    for (; i < sorted.size() && sorted[i].column == column; ++i) sum += sorted[i].coefficient;
    if (sum == 0.0) continue;
    entry_column_.push_back(column);
    entry_value_.push_back(sum);
  }
  row_begin_.push_back(entry_column_.size());
  row_lower_.push_back(lower);
  row_upper_.push_back(upper);
}

std::size_t MilpProblem::integer_count() const {
  return static_cast<std::size_t>(std::count(col_integer_.begin(), col_integer_.end(), std::uint8_t{1}));
}

double MilpProblem::objective(std::span<const double> values) const {
  double total = cost_offset;
  for (std::size_t c = 0; c < col_cost_.size(); ++c) total += col_cost_[c] * values[c];
  return total;
}

double MilpProblem::max_violation(std::span<const double> values) const {
  double worst = 0.0;
  for (std::size_t c = 0; c < col_lower_.size(); ++c) {
    worst = std::max({worst, col_lower_[c] - values[c], values[c] - col_upper_[c]});
    if (col_integer_[c] != 0) worst = std::max(worst, std::abs(values[c] - std::round(values[c])));
  }
  for (std::size_t r = 0; r + 1 < row_begin_.size(); ++r) {
    double sum = 0.0;
    for (std::size_t e = row_begin_[r]; e < row_begin_[r + 1]; ++e) {
      sum += entry_value_[e] * values[static_cast<std::size_t>(entry_column_[e])];
    }
    worst = std::max({worst, row_lower_[r] - sum, sum - row_upper_[r]});
  }
  return worst;
}

}  // namespace hyperoffload::internal
