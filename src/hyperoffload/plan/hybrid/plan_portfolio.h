// Internal: the hybrid planner's portfolio (hybrid_planner.h, steps 4 and 5):
// chooses between the plans made for a budget, and between those and the
// plans made for lower budgets, and writes the notes that say how.
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
// the notes do not depend on the threads' timing. Lowers `floor` to the
// lowest floor among the plans (a budget at or above it is met by that plan,
// so by the best).
HybridPlan choose_plan(HybridPlan offload, std::vector<HybridPlan> others, std::int64_t budget_bytes,
                       double offload_only_bound_ms, std::optional<UnavoidableFloor>& floor);

// The planner's result: `chosen`, or one of `lower` (plans made for lower
// budgets, ascending; Note [Plans for lower budgets]) when it fits and is
// strictly quicker at this budget, timed here with `maker`; with a note when
// the budget is below `floor` and the chosen plan's notes.
PlanResult plan_result(std::string_view planner_name, const PlanMaker& maker, HybridPlan chosen,
                       const UnavoidableFloor& floor, std::vector<HybridPlan> lower);

}  // namespace hyperoffload::internal
