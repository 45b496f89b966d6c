#include "hyperoffload/plan/hybrid/plan_portfolio.h"

#include <algorithm>
#include <cmath>
#include <ranges>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "hyperoffload/ir/byte_format.h"
#include "hyperoffload/plan/common/lower_budgets.h"
#include "hyperoffload/plan/common/overhead_bound.h"
#include "hyperoffload/plan/recompute/recompute_model.h"

namespace hyperoffload::internal {

bool beats_offload_only(const HybridPlan& plan, std::int64_t budget_bytes, double offload_only_bound_ms) {
  return plan.peak_bytes <= budget_bytes && plan.time_ms < offload_only_bound_ms;
}

HybridPlan choose_plan(HybridPlan offload, std::vector<HybridPlan> others, std::int64_t budget_bytes,
                       double offload_only_bound_ms, std::optional<UnavoidableFloor>& floor) {
  if (std::any_of(others.begin(), others.end(), [&](const HybridPlan& plan) {
        return beats_offload_only(plan, budget_bytes, offload_only_bound_ms);
      })) {
    offload.stopped = true;
    offload.floor.reset();
  }
  const auto ruled_out = static_cast<std::size_t>(std::ranges::count_if(others, &HybridPlan::ruled_out));
  // The recompute-only plan ruled out (Note [The recompute-only plan after
  // the decision sets], hybrid_planner.cc), with the least re-runs of any.
  const auto recompute_only_ruled_out =
      std::ranges::find_if(others, [](const HybridPlan& plan) { return plan.ruled_out && plan.recompute_only; });
  const std::size_t evaluated = others.size() - ruled_out + (offload.stopped ? 0 : 1);
  auto lower = [&](const HybridPlan& plan) {
    if (plan.floor && (!floor || plan.floor->bytes < floor->bytes)) floor = plan.floor;
  };
  lower(offload);
  for (const HybridPlan& plan : others) lower(plan);
  // A stopped offload-only plan was beaten by one of `others`.
  std::string comparison =
      offload.stopped
          ? fmt::format("offload-only stopped: no offload-only plan takes less than {:.3f} ms", offload_only_bound_ms)
          : fmt::format("offload-only {:.3f} ms", offload.time_ms);
  double recompute_only_ms = -1.0;
  HybridPlan best = std::move(offload);
  for (HybridPlan& plan : others) {
    if (plan.ruled_out) continue;
    if (plan.recompute_only && plan.peak_bytes <= budget_bytes) recompute_only_ms = plan.time_ms;
    if (best.stopped || better(plan, best, budget_bytes)) best = std::move(plan);
  }
  if (recompute_only_ms >= 0.0) comparison += fmt::format(", recompute-only {:.3f} ms", recompute_only_ms);
  if (recompute_only_ruled_out != others.end()) {
    const double least_ms = recompute_only_ruled_out->recompute_ms;
    comparison += std::isinf(least_ms)
                      ? std::string(", recompute-only not made: re-runs alone cannot take the excess off the device")
                      : fmt::format(", recompute-only not made: its re-runs alone take at least {:.3f} ms", least_ms);
  }
  const std::size_t other_ruled_out = ruled_out - (recompute_only_ruled_out != others.end() ? 1 : 0);
  if (other_ruled_out > 0) comparison += fmt::format(", {} more ruled out by their re-runs alone", other_ruled_out);
  best.notes.push_back(fmt::format(
      "hybrid: {} recompute(s) ({:.3f} ms) and {} copies: {}; estimated step {:.3f} ms, the best of {} plan(s) "
      "({})",
      best.recompute_count, best.recompute_ms, count_copies(best.actions), best.label, best.time_ms, evaluated,
      comparison));
  return best;
}

bool take_quicker_lower(const PlanMaker& maker, HybridPlan& chosen, std::vector<HybridPlan> lower) {
  const std::int64_t budget = maker.models().budget_bytes;
  bool taken = false;
  // Only when strictly quicker: among plans equally quick, the one made for
  // the largest budget (no lower timed peak than a smaller budget's plan for
  // no gain); the caller offers the largest lower budget first. A plan over
  // the budget it was made for is left out: the bound that spares making
  // the plans of a lower budget (lower_budget_cannot_win) holds only for
  // plans within it, and only those keep the curve monotone.
  for (HybridPlan& plan : std::views::reverse(lower)) {
    if (plan.peak_bytes > plan.planned_for_bytes || plan.peak_bytes > budget) continue;
    plan.time_ms = maker.estimated_time_ms(plan.actions, plan.recompute_ms);
    if (chosen.peak_bytes > budget || plan.time_ms < chosen.time_ms) {
      chosen = std::move(plan);
      taken = true;
    }
  }
  return taken;
}

std::optional<double> lower_budget_overhead_ms(const PlanMaker& maker, std::int64_t lower_budget) {
  const HybridModels& models = maker.models();
  return overhead_lower_bound_ms(
      models.trace, lower_budget,
      StallBoundOptions{.copy_engines = CopyEngines::kTwo, .device_memory = models.device_memory},
      models.budget_bytes);
}

bool lower_budget_cannot_win(const PlanMaker& maker, const HybridPlan& chosen, std::optional<double> overhead_ms) {
  const HybridModels& models = maker.models();
  if (chosen.peak_bytes > models.budget_bytes) return false;
  if (!overhead_ms) return true;  // nothing fits the lower budget
  return internal::cannot_beat(models.trace.total_compute_ms() + *overhead_ms, chosen.time_ms);
}

PlanResult plan_result(std::string_view planner_name, const PlanMaker& maker, HybridPlan chosen,
                       const UnavoidableFloor& floor, std::optional<std::int64_t> lower_budget) {
  const HybridModels& models = maker.models();
  const std::int64_t budget = models.budget_bytes;
  PlanResult result;
  result.schedule.planner = std::string(planner_name);
  result.initial_peak_bytes = *std::max_element(models.peak.resident_bytes.begin(), models.peak.resident_bytes.end());
  result.floor = floor;
  if (lower_budget) {
    chosen.notes.insert(chosen.notes.begin(),
                        fmt::format("the plan made for {} ({} bytes), a lower budget, is quicker within this one: "
                                    "estimated step {:.3f} ms; as planned there:",
                                    format_bytes(*lower_budget), *lower_budget, chosen.time_ms));
  }
  if (budget < floor.bytes) {
    result.notes.push_back(fmt::format(
        "budget {} ({} bytes) is below the floor of {} ({} bytes) at op {} ({}): the planned peak cannot go "
        "below the floor; planned as close to the budget as possible",
        format_bytes(budget), budget, format_bytes(floor.bytes), floor.bytes, floor.op,
        models.trace.op_name(floor.op)));
  }
  result.notes.insert(result.notes.end(), chosen.notes.begin(), chosen.notes.end());
  if (models.recompute.chain_work_cut || chosen.chain_work_cut) {
    result.notes.push_back(fmt::format(
        "{}: the searches for recompute chains reached their work bound ({} × (ops + accesses), Note [Chain "
        "work]): {} whose chain needed more than its producer were left out",
        planner_name, kChainWorkFactor, models.recompute.chain_work_cut ? "candidate gaps" : "decisions"));
  }
  result.planned_peak_bytes = chosen.peak_bytes;
  result.schedule.actions = std::move(chosen.actions);
  return result;
}

}  // namespace hyperoffload::internal
