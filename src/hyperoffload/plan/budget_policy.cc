#include "hyperoffload/plan/budget_policy.h"

#include <fmt/format.h>

#include <array>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "hyperoffload/ir/byte_format.h"

namespace hyperoffload {

const char* to_string(BudgetOutcome outcome) {
  switch (outcome) {
    case BudgetOutcome::kWithinBudget: return "within budget";
    case BudgetOutcome::kBelowFloor: return "below the floor";
    case BudgetOutcome::kOverBudget: return "over budget";
    case BudgetOutcome::kRefused: return "refused";
    case BudgetOutcome::kBelowHostFloor: return "below the host floor";
  }
  return "?";
}

namespace {

// The planners the host-budget fallback tries, in order: the peak planner,
// then the hybrid planner, which also finds plans below the host floor
// (recomputing some of what the peak planner offloads), then the
// recompute-only plan. The note of a named planner that missed lists the same.
constexpr std::array<std::string_view, 3> kHostFallbackOrder = {"peak", kDefaultPlannerName, "recompute"};

Status check_valid(const std::string& planner, const ValidationReport& validation) {
  if (validation.valid()) return ok_status();
  return make_error(ErrorCode::kInternal,
                    fmt::format("planner \"{}\" produced a schedule the validator rejects: {}", planner,
                                validation.problems.empty() ? std::string("(no details)") : validation.problems.front()));
}

struct CheckedPlan {
  PlanResult result;
  ValidationReport validation;
};

// `planner`'s plan of `trace` for `budget`, validated.
Result<CheckedPlan> plan_checked(const Trace& trace, std::int64_t budget, std::string_view planner,
                                 const PlannerOptions& options) {
  HO_ASSIGN_OR_RETURN(std::unique_ptr<Planner> made, make_planner(planner, options));
  HO_ASSIGN_OR_RETURN(PlanResult result, made->plan(trace, budget));
  CheckedPlan checked{std::move(result), {}};
  checked.validation = validate_schedule(trace, checked.result.schedule);
  HO_RETURN_IF_ERROR(check_valid(std::string(planner), checked.validation));
  return checked;
}

// "planner "greedy" peaked at 1.20 MiB (1,258,291 bytes), over the budget of
// 1.00 MiB by 200.00 KiB".
std::string over_budget(std::string_view planner, const ValidationReport& validation, std::int64_t budget) {
  return fmt::format("planner \"{}\" peaked at {} ({} bytes), over the budget of {} by {}", planner,
                     format_bytes(validation.peak_bytes), validation.peak_bytes, format_bytes(budget),
                     format_bytes(validation.peak_bytes - budget));
}

// The host floor (budget_policy.h) for a device budget at or above the device
// floor, and the recompute-only plan's device floor.
struct HostFloor {
  std::int64_t host_bytes = 0;
  std::optional<std::int64_t> recompute_floor_bytes;
};
Result<HostFloor> host_floor(const Trace& trace, std::int64_t budget, const PlannerOptions& options) {
  PlannerOptions unlimited_host = options;
  unlimited_host.host_budget_bytes.reset();
  PlannerOptions recompute_options = unlimited_host;
  recompute_options.score_weights.clear();  // recompute has no offloads to weigh
  HostFloor floor;
  Result<CheckedPlan> recompute = plan_checked(trace, budget, "recompute", recompute_options);
  if (!recompute && recompute.error().code != ErrorCode::kInvalidArgument) return std::unexpected(recompute.error());
  if (recompute) {
    if (recompute->result.floor) floor.recompute_floor_bytes = recompute->result.floor->bytes;
    if (recompute->validation.peak_bytes <= budget) return floor;
  }
  HO_ASSIGN_OR_RETURN(CheckedPlan peak, plan_checked(trace, budget, "peak", unlimited_host));
  floor.host_bytes = peak.validation.peak_host_bytes;
  return floor;
}

// The policy with a host budget, once the plan in `budgeted` missed the device
// budget at or above the device floor (budget_policy.h).
Result<BudgetedPlan> within_both_budgets(const Trace& trace, std::int64_t budget, std::int64_t host_budget,
                                         std::string_view planner, const PlannerOptions& options,
                                         FallbackToPeak fallback, BudgetedPlan budgeted) {
  HO_ASSIGN_OR_RETURN(const HostFloor floor, host_floor(trace, budget, options));
  budgeted.host_floor_bytes = floor.host_bytes;
  budgeted.recompute_floor_bytes = floor.recompute_floor_bytes;
  const bool below_host_floor = host_budget < floor.host_bytes;
  if (fallback == FallbackToPeak::kNo) {
    budgeted.outcome = below_host_floor ? BudgetOutcome::kBelowHostFloor : BudgetOutcome::kOverBudget;
    if (!below_host_floor) {
      // At or above both floors one of the fallback's planners keeps both
      // budgets; the named one just did not, so it is left out of the list.
      std::vector<std::string> others;
      for (const std::string_view other : kHostFallbackOrder) {
        if (other != planner) others.push_back(fmt::format("\"{}\"", other));
      }
      const std::string listed =
          others.size() == 3 ? fmt::format("{}, {} or {}", others[0], others[1], others[2])
                             : fmt::format("{} or {}", others[0], others[1]);
      budgeted.result.notes.insert(
          budgeted.result.notes.begin(),
          fmt::format("{}; {} would fit: at or above the floors ({} device, {} host) one of them keeps both budgets "
                      "(the budget policy's fallback takes the first that does)",
                      over_budget(planner, budgeted.validation, budget), listed,
                      format_bytes(budgeted.floor->bytes), format_bytes(floor.host_bytes)));
    }
    return budgeted;
  }
  // The peak planner keeps both budgets at or above both floors unless the
  // recompute-only plan fits (then the host floor is 0 and that one does).
  const std::string missed = fmt::format(
      "planner \"{}\" peaked at {} ({} bytes), above the budget of {}, within the host budget of {}", planner,
      format_bytes(budgeted.validation.peak_bytes), budgeted.validation.peak_bytes, format_bytes(budget),
      format_bytes(host_budget));
  for (const std::string_view other : kHostFallbackOrder) {
    if (other == planner) continue;
    PlannerOptions other_options = options;
    if (other == "recompute") other_options.score_weights.clear();
    Result<CheckedPlan> tried = plan_checked(trace, budget, other, other_options);
    if (!tried) {
      if (tried.error().code == ErrorCode::kInvalidArgument) continue;
      return std::unexpected(std::move(tried.error()));
    }
    const bool fits = tried->validation.peak_bytes <= budget && tried->validation.peak_host_bytes <= host_budget;
    if (fits || (below_host_floor && tried->validation.peak_host_bytes <= host_budget &&
                 tried->validation.peak_bytes < budgeted.validation.peak_bytes)) {
      std::vector<std::string> notes = std::move(budgeted.result.notes);
      budgeted.result = std::move(tried->result);
      budgeted.validation = std::move(tried->validation);
      if (!budgeted.result.floor) budgeted.result.floor = budgeted.floor;
      if (fits) {
        budgeted.result.notes.insert(budgeted.result.notes.begin(),
                                     fmt::format("{}; the step was planned with \"{}\", which keeps both", missed, other));
        for (std::string& note : notes) budgeted.result.notes.push_back(std::move(note));
        budgeted.outcome = BudgetOutcome::kWithinBudget;
        return budgeted;
      }
    }
  }
  if (!below_host_floor) {
    return make_error(ErrorCode::kInternal,
                      fmt::format("{}, and neither the peak nor the recompute-only plan keeps both although the "
                                  "budgets are at or above their floors ({} device, {} host)",
                                  missed, format_bytes(budgeted.floor->bytes), format_bytes(floor.host_bytes)));
  }
  budgeted.outcome = BudgetOutcome::kBelowHostFloor;
  return budgeted;
}

}  // namespace

std::string describe_host_shortfall(const BudgetedPlan& plan, std::int64_t budget_bytes,
                                    std::int64_t host_budget_bytes) {
  const std::int64_t host_floor = plan.host_floor_bytes.value_or(0);
  std::string text = fmt::format(
      "no plan found keeps both the device budget of {} ({} bytes; floor {}) and the host budget of {} ({} bytes; "
      "host floor {} = {} bytes): raise the host budget to {}",
      format_bytes(budget_bytes), budget_bytes, format_bytes(plan.floor ? plan.floor->bytes : 0),
      format_bytes(host_budget_bytes), host_budget_bytes, format_bytes(host_floor), host_floor, format_bytes(host_floor));
  if (plan.recompute_floor_bytes) {
    text += fmt::format(" or the device budget to {} ({} bytes), where recompute needs no host memory",
                        format_bytes(*plan.recompute_floor_bytes), *plan.recompute_floor_bytes);
  }
  return text;
}

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
  const std::optional<std::int64_t> host_budget = options.host_budget_bytes;
  const bool within_host = !host_budget || budgeted.validation.peak_host_bytes <= *host_budget;
  if (budgeted.validation.peak_bytes <= budget && within_host) return budgeted;
  if (budgeted.floor->bytes > budget) {
    budgeted.outcome = BudgetOutcome::kBelowFloor;
    return budgeted;
  }
  if (host_budget) {
    return within_both_budgets(trace, budget, *host_budget, planner, options, fallback, std::move(budgeted));
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
    budgeted.result.notes.insert(
        budgeted.result.notes.begin(),
        fmt::format("{}; \"peak\" would fit: it keeps every budget at or above the floor ({})",
                    over_budget(planner, budgeted.validation, budget), format_bytes(budgeted.floor->bytes)));
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
