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
//    is kept and reported as kOverBudget, with a note saying by how much it
//    goes over and that "peak" keeps the budget (compare shows each planner
//    as it is; the CLI's `plan` keeps a named planner's own plan).
//    FallbackToPeak::kYes is the default of the session and of `plan` when no
//    planner is named.
//
// With a host budget (PlannerOptions::host_budget_bytes) every planner keeps
// its schedule's peak host bytes within it, and may miss the device budget to
// do so. Two floors then: the device floor above, and the **host floor**, a
// host budget at which the policy guarantees a plan within a device budget at
// or above its floor — 0 when the recompute-only plan fits the device budget
// (recompute needs no host memory), else the peak host bytes of the peak
// planner's plan without a host budget. It is sufficient, not the least: the
// hybrid planner often keeps both budgets below it. A plan over the device
// budget at or above the device floor is replaced, with FallbackToPeak::kYes,
// by the first of the peak, hybrid and recompute-only plans (each with the
// host budget) that keeps both budgets; at or above the host floor one always
// does. When none does (below the host floor) the outcome is kBelowHostFloor
// naming both floors (BudgetedPlan::host_floor_bytes and
// recompute_floor_bytes, the device budget at which no host memory is needed)
// with the best effort of the plans tried (the lowest device peak).
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
  // With a host budget: the device budget is at or above its floor but no
  // plan keeps both it and the host budget (below the host floor); the best
  // effort keeps the host budget and misses the device budget.
  kBelowHostFloor,
};
const char* to_string(BudgetOutcome outcome);  // "within budget", "below the floor", ...

// Whether a plan over a budget the floor allows is replaced by the peak
// planner's (the policy of the session, and of `plan` unless a planner is
// named or --fallback none is given; `compare` never replaces one).
enum class FallbackToPeak : std::uint8_t { kYes, kNo };

struct BudgetedPlan {
  BudgetOutcome outcome = BudgetOutcome::kWithinBudget;
  // The plan (kRefused: empty). Its schedule's planner says whose it is: the
  // peak planner's after a fallback (a note says so).
  PlanResult result;
  std::optional<UnavoidableFloor> floor;  // the planner's, or the offload-only floor; with a budget
  ValidationReport validation;            // of result.schedule
  std::string refusal;                    // kRefused: the planner's reason
  // With a device and a host budget, when the plan misses either: the host
  // floor (above) and the device floor of the recompute-only plan, the device
  // budget at which no host memory is needed (nullopt: the trace has nothing
  // recomputable or the plan was refused).
  std::optional<std::int64_t> host_floor_bytes;
  std::optional<std::int64_t> recompute_floor_bytes;
};

// "no plan found keeps both the device budget of 1 MiB (floor 512 KiB) and the host
// budget of 0 B (host floor 256 KiB): raise the host budget to 256 KiB or the
// device budget to 900 KiB, where recompute needs no host memory" — for
// kBelowHostFloor outcomes (the session's error, the CLI's note).
std::string describe_host_shortfall(const BudgetedPlan& plan, std::int64_t budget_bytes, std::int64_t host_budget_bytes);

// Plans `trace` for `budget_bytes` (nullopt: unlimited) with the planner
// named `planner`. Errors: an unknown planner or bad options (as
// make_planner), a planner failure other than a refusal, and kInternal for a
// schedule the validator rejects or a fallback that misses the budget.
Result<BudgetedPlan> plan_within_budget(const Trace& trace, std::optional<std::int64_t> budget_bytes,
                                        std::string_view planner, const PlannerOptions& options,
                                        FallbackToPeak fallback = FallbackToPeak::kYes);

}  // namespace hyperoffload
