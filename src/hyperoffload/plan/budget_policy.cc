#include "hyperoffload/plan/budget_policy.h"

#include <fmt/format.h>

#include <utility>

#include "hyperoffload/ir/byte_format.h"

namespace hyperoffload {

const char* to_string(BudgetOutcome outcome) {
  switch (outcome) {
    case BudgetOutcome::kWithinBudget: return "within budget";
    case BudgetOutcome::kBelowFloor: return "below the floor";
    case BudgetOutcome::kOverBudget: return "over budget";
    case BudgetOutcome::kRefused: return "refused";
  }
  return "?";
}

namespace {

Status check_valid(const std::string& planner, const ValidationReport& validation) {
  if (validation.valid()) return ok_status();
  return make_error(ErrorCode::kInternal,
                    fmt::format("planner \"{}\" produced a schedule the validator rejects: {}", planner,
                                validation.problems.empty() ? std::string("(no details)") : validation.problems.front()));
}

}  // namespace

Result<BudgetedPlan> plan_within_budget(const Trace& trace, std::optional<std::int64_t> budget_bytes,
                                        std::string_view planner, const PlannerOptions& options,
                                        FallbackToPeak fallback) {
  HO_ASSIGN_OR_RETURN(std::unique_ptr<Planner> made, make_planner(planner, options));
  BudgetedPlan budgeted;
  Result<PlanResult> planned = made->plan(trace, budget_bytes);
  if (!planned) {
    if (planned.error().code != ErrorCode::kInvalidArgument) return std::unexpected(std::move(planned.error()));
    budgeted.outcome = BudgetOutcome::kRefused;
    budgeted.refusal = std::move(planned.error().message);
    return budgeted;
  }
  budgeted.result = std::move(*planned);
  budgeted.validation = validate_schedule(trace, budgeted.result.schedule);
  HO_RETURN_IF_ERROR(check_valid(std::string(planner), budgeted.validation));
  if (!budget_bytes) return budgeted;

  // Planners that do not compute the floor (greedy) get the peak planner's
  // model of it, which every offload-only plan is above.
  budgeted.floor = budgeted.result.floor ? budgeted.result.floor : std::optional(offload_floor(trace));
  const std::int64_t budget = *budget_bytes;
  if (budgeted.validation.peak_bytes <= budget) return budgeted;
  if (budgeted.floor->bytes > budget) {
    budgeted.outcome = BudgetOutcome::kBelowFloor;
    return budgeted;
  }
  if (fallback == FallbackToPeak::kNo || planner == "peak") {
    // The peak planner keeps every budget at or above its floor.
    if (planner == "peak") {
      return make_error(ErrorCode::kInternal,
                        fmt::format("the peak planner's plan peaks at {} ({} bytes) at op {}, above the budget of {} "
                                    "although its floor is {}",
                                    format_bytes(budgeted.validation.peak_bytes), budgeted.validation.peak_bytes,
                                    budgeted.validation.peak_op, format_bytes(budget), format_bytes(budgeted.floor->bytes)));
    }
    budgeted.outcome = BudgetOutcome::kOverBudget;
    return budgeted;
  }
  // A heuristic planner (greedy) can miss a budget the floor allows; the
  // budget is a promise, so the peak planner's plan replaces it.
  HO_ASSIGN_OR_RETURN(BudgetedPlan replanned,
                      plan_within_budget(trace, budget_bytes, "peak", options, FallbackToPeak::kNo));
  if (replanned.outcome != BudgetOutcome::kWithinBudget) {
    return make_error(ErrorCode::kInternal,
                      fmt::format("the peak planner missed the budget of {} ({}) above the floor of {}",
                                  format_bytes(budget), to_string(replanned.outcome),
                                  format_bytes(budgeted.floor->bytes)));
  }
  replanned.result.notes.insert(
      replanned.result.notes.begin(),
      fmt::format("planner \"{}\" peaked at {} ({} bytes), above the budget of {}; the step was planned with \"peak\", "
                  "which keeps to it",
                  planner, format_bytes(budgeted.validation.peak_bytes), budgeted.validation.peak_bytes,
                  format_bytes(budget)));
  for (std::string& note : budgeted.result.notes) replanned.result.notes.push_back(std::move(note));
  if (!replanned.result.floor) replanned.result.floor = budgeted.floor;
  return replanned;
}

}  // namespace hyperoffload
