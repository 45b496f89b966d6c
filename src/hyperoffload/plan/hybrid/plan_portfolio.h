// Internal: the hybrid planner's portfolio (hybrid_planner.h, steps 4 and 5):
// chooses between the plans made for a budget, and between those and the
// plans made for lower budgets, and writes the notes that say how.
//
// Bound, with W = ops + accesses: choose_plan O(plans + the chosen plan's
// actions) (its copies are counted for the note); take_quicker_lower one stall
// estimate (stall_estimate.h: O(ops + accesses + actions + releases log
// releases)) per plan of `lower` within its budget and this one;
// lower_budget_overhead_ms one overhead_lower_bound_ms (overhead_bound.h: O(ops
// + accesses) plus O(storages + accesses) per evaluated op, at most 32), once
// per rung; lower_budget_cannot_win and beats_offload_only O(1); plan_result
// O(ops + notes). Memory: the plans passed in, moved, not copied.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "hyperoffload/plan/hybrid/hybrid_plans.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload::internal {

// Whether the offload-only plan is stopped once another plan is quicker than
// any offload-only plan can be (offload_step_bound.h).
enum class OffloadOnlyStop : std::uint8_t {
  kWhenBeaten,
  kNever,  // a plan for a lower budget: it is timed again at a larger one, where it may win
};

// Whether `plan` fits the budget and is quicker than any offload-only plan can
// be (`offload_only_bound_ms`): the offload-only plan cannot win against it.
bool beats_offload_only(const HybridPlan& plan, std::int64_t budget_bytes, double offload_only_bound_ms);

// The best of the offload-only plan and `others` (better(); ties keep the
// earlier, the offload-only plan first), with a note on how it was chosen.
// An offload-only plan that one of `others` beats is passed over as though
// stopped, whether or not its thread was stopped in time, so the choice and
// the notes do not depend on the threads' timing. A plan of `others` that
// is `ruled_out` is passed over and counted apart in the note. Lowers `floor`
// to the lowest floor among the plans, the ruled-out ones included (a budget
// at or above it is met by that plan, so by the best).
HybridPlan choose_plan(HybridPlan offload, std::vector<HybridPlan> others, std::int64_t budget_bytes,
                       double offload_only_bound_ms, std::optional<UnavoidableFloor>& floor);

// Note [Plans for lower budgets]: times `lower` (plans made for one lower
// budget, its plans_for_larger_budgets) at this budget with `maker`; the last
// of them that fits its own budget and this one and is strictly quicker than
// `chosen` (or fits where `chosen` does not) replaces it. Whether one did.
bool take_quicker_lower(const PlanMaker& maker, HybridPlan& chosen, std::vector<HybridPlan> lower);

// The least stall plus recompute of any plan within `lower_budget`, on this
// budget's device (plan/common/overhead_bound.h); nullopt when no plan fits
// `lower_budget`. Independent of the plans made, so computed once per rung.
std::optional<double> lower_budget_overhead_ms(const PlanMaker& maker, std::int64_t lower_budget);

// Whether no plan made for a lower budget (one that fits it), whose least
// overhead here is `overhead_ms` (lower_budget_overhead_ms), can be strictly
// quicker here than `chosen`, which fits. Saves making the plans of that
// budget; the choice is the same.
bool lower_budget_cannot_win(const PlanMaker& maker, const HybridPlan& chosen, std::optional<double> overhead_ms);

// The planner's result: `chosen`, with a note naming `lower_budget` when a
// plan made for it was chosen (take_quicker_lower) and one when the budget is
// below `floor`, and the chosen plan's notes.
PlanResult plan_result(std::string_view planner_name, const PlanMaker& maker, HybridPlan chosen,
                       const UnavoidableFloor& floor, std::optional<std::int64_t> lower_budget);

}  // namespace hyperoffload::internal
