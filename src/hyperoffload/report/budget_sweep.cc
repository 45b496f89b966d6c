#include "hyperoffload/report/budget_sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hyperoffload/plan/budget.h"

namespace hyperoffload {

const char* to_string(SweepProperty property) {
  switch (property) {
    case SweepProperty::kTimedPeakAboveBudget:
      return "timed peak above the budget";
    case SweepProperty::kTimedPeakDecreases:
      return "timed peak lower than at a smaller budget";
    case SweepProperty::kOverheadIncreases:
      return "overhead higher than at a smaller budget";
    case SweepProperty::kFeasibilityLost:
      return "infeasible, but feasible at a smaller budget";
  }
  return "?";
}

bool BudgetSweep::violates(std::size_t budget, std::size_t planner) const {
  return std::any_of(violations.begin(), violations.end(),
                     [&](const SweepViolation& v) { return v.budget == budget && v.planner == planner; });
}

std::vector<SweepViolation> find_sweep_violations(const Comparison& comparison, double overhead_relative_tolerance) {
  std::vector<SweepViolation> violations;
  const std::size_t planners = comparison.planner_count;
  const std::size_t budgets = comparison.budgets_bytes.size();
  auto row = [&](std::size_t b, std::size_t p) -> const ComparisonRow& { return comparison.rows[b * planners + p]; };
  // Per planner, over the smaller budgets at which it was feasible: the first
  // one, the one with the highest timed peak, the one with the lowest overhead.
  std::vector<std::optional<std::size_t>> first_feasible(planners), highest_peak(planners), lowest_overhead(planners);
  for (std::size_t b = 0; b < budgets; ++b) {
    for (std::size_t p = 0; p < planners; ++p) {
      const ComparisonRow& here = row(b, p);
      auto flag = [&](SweepProperty property, std::size_t reference, double value, double reference_value) {
        violations.push_back(SweepViolation{p, here.planner, property, b, reference, value, reference_value});
      };
      if (!here.feasible()) {
        if (first_feasible[p]) flag(SweepProperty::kFeasibilityLost, *first_feasible[p], 0.0, 1.0);
        continue;
      }
      if (here.timed_peak_bytes > here.budget_bytes) {
        flag(SweepProperty::kTimedPeakAboveBudget, b, static_cast<double>(here.timed_peak_bytes),
             static_cast<double>(here.budget_bytes));
      }
      if (highest_peak[p]) {
        const ComparisonRow& before = row(*highest_peak[p], p);
        if (here.timed_peak_bytes < before.timed_peak_bytes) {
          flag(SweepProperty::kTimedPeakDecreases, *highest_peak[p], static_cast<double>(here.timed_peak_bytes),
               static_cast<double>(before.timed_peak_bytes));
        }
      }
      if (lowest_overhead[p]) {
        // Tolerance relative to the reference step: 100% of compute plus its overhead.
        const ComparisonRow& before = row(*lowest_overhead[p], p);
        const double slack = overhead_relative_tolerance * (100.0 + before.overhead_percent);
        if (here.overhead_percent > before.overhead_percent + slack) {
          flag(SweepProperty::kOverheadIncreases, *lowest_overhead[p], here.overhead_percent,
               before.overhead_percent);
        }
      }
      if (!first_feasible[p]) first_feasible[p] = b;
      if (!highest_peak[p] || here.timed_peak_bytes > row(*highest_peak[p], p).timed_peak_bytes) highest_peak[p] = b;
      if (!lowest_overhead[p] || here.overhead_percent < row(*lowest_overhead[p], p).overhead_percent) {
        lowest_overhead[p] = b;
      }
    }
  }
  return violations;
}

Result<BudgetSweep> run_budget_sweep(const Trace& trace, const BudgetSweepOptions& options) {
  if (!(options.step_percent > 0.0 && options.step_percent <= 100.0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("sweep step {}%: must be above 0% and at most 100% (e.g. 5%)", options.step_percent));
  }
  if (!(options.overhead_relative_tolerance >= 0.0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("overhead tolerance {}: must be >= 0", options.overhead_relative_tolerance));
  }
  ComparisonOptions comparison_options;
  comparison_options.planners = options.planners;
  comparison_options.score_weights = options.score_weights;
  comparison_options.copy_engines = options.copy_engines;
  comparison_options.device_memory = options.device_memory;
  comparison_options.time_limit_s = options.time_limit_s;

  // The floor: what each planner reports when asked for nothing (0 bytes),
  // the lowest of them. A planner plans as close to the budget as it can, so
  // this is the lowest budget it says it reaches.
  comparison_options.budgets = {BudgetSpec{BudgetSpec::Unit::kBytes, 0.0}};
  HO_ASSIGN_OR_RETURN(const Comparison at_zero, run_comparison(trace, comparison_options));
  BudgetSweep sweep;
  sweep.step_percent = options.step_percent;
  sweep.floor_bytes = at_zero.unplanned_peak_bytes;
  for (const ComparisonRow& row : at_zero.rows) {
    if (row.floor) sweep.floor_bytes = std::min(sweep.floor_bytes, row.floor->bytes);
  }

  comparison_options.budgets.clear();
  for (const std::int64_t budget : budget_ladder(sweep.floor_bytes, at_zero.unplanned_peak_bytes, options.step_percent)) {
    comparison_options.budgets.push_back(BudgetSpec{BudgetSpec::Unit::kBytes, static_cast<double>(budget)});
  }
  comparison_options.record_timeline = options.record_timeline;
  HO_ASSIGN_OR_RETURN(sweep.comparison, run_comparison(trace, comparison_options));
  sweep.violations = find_sweep_violations(sweep.comparison, options.overhead_relative_tolerance);
  return sweep;
}

}  // namespace hyperoffload
