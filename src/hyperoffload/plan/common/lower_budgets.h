// Internal: the lower budgets at which the peak and hybrid planners also plan,
// so that their plans are monotone in the budget.
//
// Note [Plans for lower budgets]
// A plan within a budget is within every larger one, and on either device it
// is no slower there: with unlimited memory its timing does not depend on the
// budget, and on a device that holds only the budget an allocation waits only
// until the memory it needs is free, which a larger cap never delays. So a
// planner can always do at least as well with more memory. The peak and hybrid
// planners are heuristics whose choices depend on the budget (the excess at
// the peak, the decision sets' targets), and on their own they are not:
// gpt3-1.3b's offload-only plan stalled 12 ms at 90% of the unplanned peak and
// none at 85%; its hybrid plan took 9.30% over compute at 40% and 8.92% at 35%
// (capped device; `hyperoffload compare --sweep`, docs/PEAK_PLANNER.md).
//
// Construction. The rungs of a trace are budget_ladder(floor, unplanned peak,
// kLowerBudgetStepPercent) (plan/budget.h): the floor of the peak planner's
// model and every 5% of the unplanned peak — they depend on the trace only.
// At budget B the planner plans as it always did, and also, for every rung
// r < B, makes the plan it makes at r (without this step), times it at B on
// the device it plans for, with the same estimate it chooses by
// (plan/common/stall_estimate.h, exact), and keeps the quickest within B;
// ties go to the plan made for the largest budget. Then for rungs r1 < r2 the plan at r2 had the
// plans made at every rung up to r1 to choose from, each at least as quick at
// r2 as at r1, so it is at least as quick as the plan at r1 — the curve is
// monotone on the rungs — and at any budget the plan is at least as quick as
// at every rung below it. (Between two rungs it is not guaranteed: the plan
// made for B1 may be quicker than every plan at a larger B2 that is not a
// rung. `compare --sweep --sweep-step 1%` shows how much.)
//
// Only plans within the rung they were made for take part: a plan over its
// rung (the recompute-only planner below its floor, a plan trimmed to a host
// budget) was not that rung's plan, and the bounds below hold only for plans
// within it.
//
// Sparing rungs. The hybrid planner makes its plan at B first, then goes down
// the rungs and skips a rung r when no plan within r, timed at B, can be
// strictly quicker than the best so far: when the least stall plus recompute
// of any plan within r on B's device (plan/common/overhead_bound.h, with the
// device's B - r bytes of slack) is at least the best's. What is skipped
// could not have been chosen (up to 1e-10 of the step, cannot_beat), so the
// plan is the one the full ladder gives, and the argument above is unchanged:
// each rung's plan is either timed at a larger budget or provably no quicker
// there. The peak planner plans every rung: a rung costs it one offload-only
// plan, less than the bounds would (gpt3-1.3b at 50%: 26 ms with every rung,
// 38 ms with the bounds).
//
// Cost: at most one more plan per rung below the budget, up to 19 (a budget
// near the unplanned peak, a floor below 5%), so on traces where a plan is
// cheap only: at most kLowerBudgetMaxWork ops plus accesses (every shipped
// example trace and GPT preset; none of the scale benchmarks' traces, whose
// planning time is unchanged). At or above the unplanned peak nothing is
// planned anyway. The hybrid planner skips most rungs where its plan at B is
// close to the least any plan adds (gpt3-1.3b at 50%: 3 of 8 rungs planned).
//
// Note [Rungs beside the plan]
// The hybrid planner makes the rungs' plans on threads of their own: the
// largest rung beside the plan at the budget, and then, while it goes down
// the rungs in order, up to rungs_beside() rungs ahead of the one it takes
// or passes over, each started only when the best plan so far does not
// already rule it out. The best only gets quicker as it goes down, so a rung
// ruled out when it would start is ruled out in its turn; a rung started
// before the best ruled it out is made and then passed over. Each rung's
// plans are what it makes alone (the segment memo they share does not change
// them, segment_search.h), and they are taken or passed over in the order
// and with the best of the sequential ladder above, so the plan is the same
// byte for byte, whatever the threads' timing and the number of cores. What
// it costs is the plans started and then passed over, made on otherwise idle
// cores. On two cores (rungs_beside() 1) the demo's hybrid plan at 50% took
// 65–70 ms against 101–120 ms one rung after the other, and 22–28 ms without
// the ladder (BENCHMARKS.md, "Rungs beside the plan"); since plans that cannot
// win are not made (Note [Plans ruled out by their re-runs]), 37–48 ms and
// 11–13 ms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hyperoffload/ir/trace.h"

namespace hyperoffload::internal {

inline constexpr double kLowerBudgetStepPercent = 5.0;
inline constexpr std::int64_t kLowerBudgetMaxWork = 20'000;

// Whether a plan whose step takes at least `bound_ms` cannot be strictly
// quicker than one of `best_ms`, up to rounding: the bound and a plan's timing
// add the same times in other orders, so a plan passed over may be quicker by
// at most 1e-10 of the step, a tenth of the tolerance the budget sweep allows
// a curve (report/budget_sweep.h).
inline bool cannot_beat(double bound_ms, double best_ms) { return bound_ms >= best_ms * (1.0 - 1e-10); }

// How many rungs the hybrid planner makes ahead of the one it takes or
// passes over (Note [Rungs beside the plan]): half the hardware threads (each
// plan uses two), at least 1, at most 8.
std::size_t rungs_beside();

// Whether a trace is small enough for plans at lower budgets: at most
// kLowerBudgetMaxWork ops plus accesses. O(1), so a planner asks it before
// computing what lower_budgets needs.
bool lower_budget_plans_fit(const Trace& trace);

// The rungs below `budget_bytes` at which a planner also plans (Note [Plans
// for lower budgets]), ascending: empty when the trace has more than
// kLowerBudgetMaxWork ops plus accesses or the budget is at or above the
// unplanned peak. `floor_bytes` is the peak planner's floor
// (offload_floor, plan/planner.h); `unplanned_peak_bytes` the trace's
// unplanned op-granular peak.
std::vector<std::int64_t> lower_budgets(const Trace& trace, std::int64_t floor_bytes,
                                        std::int64_t unplanned_peak_bytes, std::int64_t budget_bytes);

}  // namespace hyperoffload::internal
