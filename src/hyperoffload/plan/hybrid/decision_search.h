// Internal: the hybrid planner's search over decision sets (hybrid_planner.h,
// steps 2–4): which sets of recompute decisions to plan offloads around, in
// what order, and how many the trace's size allows.
//
// Bound (Note [Planning bounds], planner.h): at most plans_allowed() decision
// sets are planned, clamp(evaluation_budget / (ops + accesses), 1,
// max_decision_sets), plus at most ten more plans on a trace with room for
// four or more (kScarceDecisionSets); each is a selection (recompute_selection.h)
// and the peak planner on its augmented trace (augmented_trace.h), whose
// sizes Note [Chain work] bounds. Parameters already tried and decision sets
// already planned are skipped (a linear look-up among at most a few dozen),
// and so is the peak planner for a plan whose re-runs alone make it slower
// than one made before (Note [Plans ruled out by their re-runs],
// decision_search.cc).
//
// A decision set has three parameters (DecisionParams): a cost limit (cost /
// H2D time of the bytes), a target (the budget plus a share of what the copy
// engine can take off before the peak) and a deadline: the candidates the copy
// engine can take off by that fraction of the time before the peak — the
// oldest data, costliest to recompute first — are left to the offloads. The
// search plans a fixed grid of them in order, then the neighbours of the best
// while that improves it; with room for more, also plans that leave the oldest
// data to offloads on a capped device, the other offload-only plans and the
// best set's offloads made two other ways.
//
// Thread-safety: search_decision_sets may run beside the offload-only plan's
// thread; it reads the models read-only and calls `on_plan` on its own thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "hyperoffload/plan/hybrid/hybrid_plans.h"
#include "hyperoffload/plan/hybrid_planner.h"

namespace hyperoffload::internal {

// With fewer plans than this to make, a decision set that lowers the peak by
// less than 1% of the excess is not planned: its plan would be the
// offload-only plan's but for a few recomputes away from the peak. With this
// many or more, the other offload-only plans are made too.
inline constexpr std::size_t kScarceDecisionSets = 4;

// How many decision-set plans the trace's size allows:
// clamp(evaluation_budget / (ops + accesses), 1, max_decision_sets).
std::size_t plans_allowed(const Trace& trace, const HybridPlannerOptions& options);

// Called with each decision set's plan as soon as it is made (the
// orchestrator stops the offload-only plan once one beats it).
using OnPlan = std::function<void(const HybridPlan&)>;

// The plans of the search, in the order the portfolio compares them: the
// extra plans (oldest-to-offloads, other offload-only plans, the best set's
// offloads made two other ways) first, then the decision sets' plans in the
// order they were made. Precondition: the models' recompute model is built
// and has candidates.
std::vector<HybridPlan> search_decision_sets(const PlanMaker& maker, const HybridPlannerOptions& options,
                                             const OnPlan& on_plan);

}  // namespace hyperoffload::internal
