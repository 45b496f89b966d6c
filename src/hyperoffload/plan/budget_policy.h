// The budget policy, in one home: plan a trace for a budget with a named
// planner, validate the schedule, check the floor and, where the policy says
// so, fall back — and say which of these happened as a typed outcome. The
// runtime session, the CLI's `plan`, `compare` and the Python binding all plan
// through it, so one trace and one budget give one plan everywhere.
//
// The policy:
//  - A planner that refuses the trace or budget (the MILP above its limits:
//    kInvalidArgument) gives BudgetOutcome::kRefused with its reason.
//  - A schedule the validator rejects is a bug: kInternal.
//  - The floor is the planner's own when it reports one, else the offload-only
//    floor (planner.h, offload_floor).
//  - Below the floor every planner's plan is its best effort (kBelowFloor):
//    no schedule keeps the budget; what a caller does with it is its own
//    choice (the CLI prints it with the shortfall, the session refuses to
//    replay it).
//  - At or above the floor a plan over the budget (greedy, the reference, can
//    miss it) is replaced, with FallbackToPeak::kYes, by the peak planner's,
//    which keeps every budget at or above the floor, with a note; with kNo it
//    is kept and reported as kOverBudget (compare shows each planner as it is).
//
// The peak checked is the op-granular one. On the device the plan was made
// for that is the truth: with DeviceMemory::kBudget the memory held in time
// never exceeds the budget when the op-granular peak does not (model/
// capped_memory.h; tests/plan/timed_peak_property_test.cc holds it).
//
//   Result<BudgetedPlan> planned = plan_within_budget(trace, budget, "hybrid", {});
//   if (planned && planned->outcome == BudgetOutcome::kWithinBudget) replay(planned->result.schedule);
//
// Thread-safety: a pure function of its inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload {

enum class BudgetOutcome : std::uint8_t {
  kWithinBudget,  // the plan keeps the budget (or there is none)
  kBelowFloor,    // no plan can: the best effort, at or near the floor
  kOverBudget,    // the planner missed a budget the floor allows (FallbackToPeak::kNo only)
  kRefused,       // the planner refused the trace or budget: no plan
};
const char* to_string(BudgetOutcome outcome);  // "within budget", "below the floor", ...

// Whether a plan over a budget the floor allows is replaced by the peak
// planner's (the policy of every caller but `compare`).
enum class FallbackToPeak : std::uint8_t { kYes, kNo };

struct BudgetedPlan {
  BudgetOutcome outcome = BudgetOutcome::kWithinBudget;
  // The plan (kRefused: empty). Its schedule's planner says whose it is: the
  // peak planner's after a fallback (a note says so).
  PlanResult result;
  std::optional<UnavoidableFloor> floor;  // the planner's, or the offload-only floor; with a budget
  ValidationReport validation;            // of result.schedule
  std::string refusal;                    // kRefused: the planner's reason
};

// Plans `trace` for `budget_bytes` (nullopt: unlimited) with the planner
// named `planner`. Errors: an unknown planner or bad options (as
// make_planner), a planner failure other than a refusal, and kInternal for a
// schedule the validator rejects or a fallback that misses the budget.
Result<BudgetedPlan> plan_within_budget(const Trace& trace, std::optional<std::int64_t> budget_bytes,
                                        std::string_view planner, const PlannerOptions& options,
                                        FallbackToPeak fallback = FallbackToPeak::kYes);

}  // namespace hyperoffload
