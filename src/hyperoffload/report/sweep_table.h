// Text and JSON renderings of a BudgetSweep (report/budget_sweep.h).
//
// The text form is one line per budget of the ladder, each planner's overhead
// and timed peak side by side, a point that breaks Note [Monotone in the
// budget] marked with "*" and explained under the table:
//
//   budget      % peak  peak overhead  peak timed  hybrid overhead  hybrid timed
//   3.01 GiB     23.1%        108.68%    3.01 GiB            3.63%      3.01 GiB
//   3.26 GiB     25.0%         98.10%    3.26 GiB           *3.70%      3.25 GiB
//   ...
//   * hybrid at 3.26 GiB (25.0%): overhead higher than at a smaller budget: 3.70% against 3.63% at 3.01 GiB (23.1%)
//
// "-" stands for a point that is not feasible (below that planner's floor, or
// not within the budget at op granularity).
#pragma once

#include <string>
#include <string_view>

#include "hyperoffload/report/budget_sweep.h"

namespace hyperoffload {

// The trace summary, the ladder's table and the violations (or a line saying
// there are none). Ends with a newline.
std::string format_sweep_table(const BudgetSweep& sweep, std::string_view trace_label);

// {"trace": {...}, "copy_engines": 2, "memory_cap": "budget", "floor_bytes": ..., "step_percent": 5,
//  "budgets": [{"budget_bytes": ..., "budget_percent": ..., "stall_lower_bound_ms": ...,
//  "overhead_lower_bound_ms": ..., "results": [{"planner": ..., "feasible": ..., "op_peak_bytes": ...,
//  "timed_peak_bytes": ..., "overhead_percent": ..., "stall_ms": ..., "recompute_ms": ..., "planning_ms": ...,
//  "violations": ["overhead higher than at a smaller budget", ...]}, ...]}, ...],
//  "violations": [{"planner": ..., "property": ..., "budget_bytes": ..., "reference_budget_bytes": ...,
//  "value": ..., "reference_value": ...}, ...]}
std::string sweep_to_json(const BudgetSweep& sweep, std::string_view trace_label);

}  // namespace hyperoffload
