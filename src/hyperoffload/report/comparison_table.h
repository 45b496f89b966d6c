// Text and JSON renderings of a planner Comparison (report/comparison.h).
//
// The text form is one block per budget:
//
//   budget 28.45 GiB (50.0% of the unplanned peak), floor 6.14 GiB at op 243; offload-only stall bound 1855.1 ms
//   planner    feasible    op peak  timed peak  stall ms  recompute ms (n)  above bound  overhead %  ...
//   peak       yes       28.45 GiB  28.45 GiB   1860.231                 -        5.131     108.68%
//   hybrid     yes       28.44 GiB  28.44 GiB      7.012       55.102 (74)    -1793.0         3.63%
//
// "feasible" means valid, fault-free and within the budget at op granularity;
// "!" marks a timed peak above the budget; "recompute" the time re-running ops
// and how many re-runs; "above bound" is the stall plus the recompute time
// minus the budget's lower bound on the stall of offload-only plans
// (plan/common/stall_bound.h) — negative where recomputing beats every such plan —
// and "-" for a plan the bound does not cover (not feasible).
#pragma once

#include <string>
#include <string_view>

#include "hyperoffload/report/comparison.h"

namespace hyperoffload {

// The trace summary and one table per budget; `trace_label` names the trace
// (e.g. its path). Ends with a newline.
std::string format_comparison_table(const Comparison& comparison, std::string_view trace_label);

// {"trace": {...}, "copy_engines": 2, "results": [{"planner": ..., "budget_bytes": ...,
// "feasible": ..., "op_peak_bytes": ..., "timed_peak_bytes": ..., "stall_ms": ...,
// "stall_lower_bound_ms": ... (the offload-only bound; null: no offload-only plan fits),
// "stall_above_bound_ms": ... (stall - bound; null: not feasible), "overhead_above_bound_ms":
// ... (stall + recompute - bound), "recompute_ms": ..., "recompute_count": ...,
// "overhead_percent": ..., "bytes_moved": ..., "planning_ms": ..., ...}, ...]}
std::string comparison_to_json(const Comparison& comparison, std::string_view trace_label);

}  // namespace hyperoffload
