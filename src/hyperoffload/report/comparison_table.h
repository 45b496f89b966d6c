// Text and JSON renderings of a planner Comparison (report/comparison.h).
//
// The text form is one block per budget:
//
//   budget 12.04 GiB (50.0% of the unplanned peak), floor 9.19 GiB at op 1331; stall lower bound 0.800 ms
//   planner  feasible  op peak    timed peak   stall ms  above bound  overhead %  bytes moved  planning ms
//   greedy   yes       12.02 GiB  12.61 GiB !   812.340      811.540      13.75%    24.30 GiB         0.25
//   peak     yes       12.04 GiB  12.04 GiB       1.200        0.400       0.02%    24.26 GiB         1.86
//
// "feasible" means valid, fault-free and within the budget at op granularity;
// "!" marks a timed peak above the budget; "above bound" is the stall minus
// the budget's lower bound (report/stall_bound.h), "-" for a plan the bound
// does not cover (not feasible).
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
// "stall_lower_bound_ms": ... (null: no plan fits), "stall_above_bound_ms": ... (null:
// not feasible), "overhead_percent": ..., "bytes_moved": ..., "planning_ms": ..., ...}, ...]}
std::string comparison_to_json(const Comparison& comparison, std::string_view trace_label);

}  // namespace hyperoffload
