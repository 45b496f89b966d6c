#include "hyperoffload/plan/peak_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <future>
#include <latch>
#include <ranges>
#include <thread>

#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/budget.h"
#include "hyperoffload/plan/common/beside.h"
#include "hyperoffload/plan/common/host_budget.h"
#include "hyperoffload/plan/common/lower_budgets.h"
#include "hyperoffload/plan/common/profile_tree.h"
#include "hyperoffload/plan/common/range_max_tree.h"
#include "hyperoffload/plan/common/stall_estimate.h"
#include "hyperoffload/plan/peak/host_copies.h"
#include "hyperoffload/plan/peak/peak_actions.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/peak/peak_placement.h"
#include "hyperoffload/plan/peak/peak_run.h"
#include "hyperoffload/plan/peak/peak_selection.h"

namespace hyperoffload {

std::span<const std::string_view> peak_score_weight_names() {
  static constexpr std::array<std::string_view, 4> kNames = {"peak_reduction", "hiding", "coverage", "neighbor_impact"};
  return kNames;
}

Result<PeakPlannerOptions> peak_planner_options(std::span<const std::pair<std::string, double>> score_weights) {
  PeakPlannerOptions options;
  PeakScoreWeights& w = options.weights;
  for (const auto& [name, value] : score_weights) {
    double* field = name == "peak_reduction"    ? &w.peak_reduction
                    : name == "hiding"          ? &w.hiding
                    : name == "coverage"        ? &w.coverage
                    : name == "neighbor_impact" ? &w.neighbor_impact
                                                : nullptr;
    if (field == nullptr) {
      return make_error(ErrorCode::kInvalidArgument, fmt::format("unknown score weight \"{}\" (valid: {})", name,
                                                                 fmt::join(peak_score_weight_names(), ", ")));
    }
    if (!std::isfinite(value) || value < 0.0) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("score weight {}={}: must be a finite number >= 0", name, value));
    }
    *field = value;
  }
  return options;
}

// The planner's steps (docs/PEAK_PLANNER.md) live in plan/peak/: the model
// (peak_model.h), selection (peak_selection.h), placement and boundaries
// (peak_placement.h), job sequencing on a copy engine (engine_jobs.h), the
// copies to host (host_copies.h) and schedule assembly (peak_actions.h).
using internal::boundaries_by_edge;
using internal::copy_op_ready_ms;
using internal::emit_actions;
using internal::EngineRule;
using internal::first_releases;
using internal::HostCopy;
using internal::HostTrim;
using internal::trim_to_host_budget;
using internal::HostCopyOrder;
using internal::issue_host_copies;
using internal::order_host_copies;
using internal::PeakModel;
using internal::place;
using internal::prefetch_room;
using internal::Placement;
using internal::ProfileTree;
using internal::RangeMaxTree;
using internal::select_boundaries;

Result<PlanResult> PeakPlanner::plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const {
  if (trace.op_count() == 0 || !budget_bytes) {
    PlanResult result;
    result.schedule.planner = std::string(name());
    return result;
  }
  const StorageAccesses accesses(trace);
  const PeakModel model = internal::build_peak_model(trace, accesses);
  internal::PeakRun chosen = internal::run_peak_planner(trace, model, options_, *budget_bytes);
  if (options_.lower_budgets == LowerBudgetPlans::kNone || !internal::lower_budget_plans_fit(trace)) {
    return std::move(chosen.result);
  }
  // Note [Plans for lower budgets]: the plans of the rungs below the budget,
  // timed at it. With unlimited memory a schedule's stall does not depend on
  // the budget.
  const std::int64_t unplanned = *std::max_element(model.resident_bytes.begin(), model.resident_bytes.end());
  // From the largest rung down, and only when strictly quicker: among plans
  // equally quick, the one made for the largest budget (no lower timed peak
  // than a smaller budget's plan for no gain).
  std::optional<std::int64_t> lower_budget;
  const std::vector<std::int64_t> rungs = internal::lower_budgets(trace, model.floor.bytes, unplanned, *budget_bytes);
  for (const std::int64_t rung : std::views::reverse(rungs)) {
    internal::PeakRun lower = internal::run_peak_planner(trace, model, options_, rung);
    if (lower.result.planned_peak_bytes > *budget_bytes) continue;
    if (options_.device_memory == DeviceMemory::kBudget) {
      lower.stall_ms = internal::estimate_stall_ms(trace, lower.result.schedule.actions, *budget_bytes);
    }
    // A plan over the budget (one trimmed to the host budget) gives way to
    // any that fits.
    if (lower.stall_ms < chosen.stall_ms || chosen.result.planned_peak_bytes > *budget_bytes) {
      chosen = std::move(lower);
      lower_budget = rung;
    }
  }
  if (lower_budget) {
    chosen.result.notes.push_back(fmt::format(
        "the plan made for {} ({} bytes), a lower budget, is quicker within this one: {:.3f} ms of stall",
        format_bytes(*lower_budget), *lower_budget, chosen.stall_ms));
  }
  return std::move(chosen.result);
}

namespace internal {

PeakRun run_peak_planner(const Trace& trace, const PeakModel& model, const PeakPlannerOptions& options,
                         std::int64_t budget_bytes, const PeakRunControl& control) {
  const ScheduleTimer& timer = control.timer;
  const std::stop_token& stop = control.stop;
  PlanResult result;
  result.schedule.planner = "peak";
  const std::int64_t limit = budget_bytes;
  result.floor = model.floor;
  ProfileTree selection_profile(model.resident_bytes, limit);
  result.initial_peak_bytes = selection_profile.max();
  if (limit < model.floor.bytes) {
    result.notes.push_back(fmt::format(
        "budget {} ({} bytes) is below the unavoidable floor of {} ({} bytes) at op {} ({}): the planned peak "
        "cannot go below the floor; planned as close to the budget as possible",
        format_bytes(limit), limit, format_bytes(model.floor.bytes), model.floor.bytes, model.floor.op,
        trace.op_name(model.floor.op)));
  }

  // Read only from the model: ordered beside the selection (common/beside.h).
  std::future<std::vector<std::int32_t>> by_edge_beside =
      std::async(internal::beside_when_large(model.interior.size(), options.beside_min_candidates),
                 [&model] { return boundaries_by_edge(model); });
  internal::PeakSelection selection =
      internal::select_peak_candidates(trace, model, options, limit, selection_profile, stop);
  if (stop.stop_requested()) return PeakRun{.result = {}, .stall_ms = 0.0, .stopped = true};
  const std::vector<std::int32_t> selected = std::move(selection.picks);
  if (selection.cut_picks > 0) {
    result.notes.push_back(fmt::format(
        "selection: {} of {} picks stopped re-evaluating candidates at the cap per pick and took the best "
        "re-evaluated so far",
        selection.cut_picks, selected.size()));
  }
  // Below the floor the selection stops at the floor; placement then keeps to
  // what was reached instead of the unreachable budget.
  const std::int64_t placement_limit = std::max(limit, selection_profile.max());
  const std::vector<double> start_ms = op_start_ms(trace);
  const internal::PeakPass pass{trace, model, start_ms, placement_limit, options.device_memory};
  // The first placement's copies to host follow their copy ops: found
  // beside the lean profile and the prefetch room.
  std::future<std::vector<double>> copy_op_ready_beside =
      std::async(internal::beside_when_large(model.interior.size(), options.beside_min_candidates),
                 [&] { return copy_op_ready_ms(trace, model, selected, start_ms); });
  // The placements only add and search for thresholds: they go on the lean
  // tree (range_max_tree.h), each on its own copy of the profile after
  // selection.
  RangeMaxTree profile(selection_profile.values());
  const std::vector<OpIndex> room_from = prefetch_room(pass, selected, profile);
  const std::vector<std::int32_t> by_edge = by_edge_beside.get();
  const std::vector<double> copy_op_ready = copy_op_ready_beside.get();
  // The stall estimate models the device the schedule is tuned for.
  const std::optional<std::int64_t> memory_cap =
      options.device_memory == DeviceMemory::kBudget ? std::optional<std::int64_t>(limit) : std::nullopt;
  struct Variant {
    std::vector<Action> actions;
    std::size_t boundary_picks = 0;
    std::int64_t peak_bytes = 0;
    double stall_ms = 0.0;
    std::int32_t host_cut_rounds = 0;  // HostTrim::cut_rounds
  };
  // Placement runs twice (docs/PEAK_PLANNER.md, "Copies to host"). The first
  // placement, with copies to host in op order and the idle-filling prefetch
  // order, gives the releases and copies back that say when each version is
  // needed; the copies to host are sequenced from them. Then each prefetch
  // order is placed again with the copies to host in that sequence, and the
  // schedule with the smaller estimated stall is kept.
  auto first_placement = [&] {
    RangeMaxTree first = profile;
    const std::vector<Placement> placements =
        place(pass, selected, room_from, copy_op_ready, first, EngineRule::kFillIdleEngine);
    return order_host_copies(pass, placements, options.host_copies);
  };
  auto build = [&](EngineRule rule, RangeMaxTree& tree, const HostCopyOrder& host_order) {
    const std::vector<Placement> placements = place(pass, selected, room_from, host_order.ready_ms, tree, rule);
    const std::vector<std::int32_t> boundary_picks = select_boundaries(model, placements, limit, by_edge);
    const std::vector<HostCopy> host_copies =
        issue_host_copies(model, host_order.versions, first_releases(model, placements, boundary_picks));
    std::vector<Action> actions = emit_actions(trace, model, placements, boundary_picks, host_copies);
    std::int64_t peak_bytes = tree.max();
    std::int32_t host_cut_rounds = 0;
    if (options.host_budget_bytes) {
      HostTrim trim = trim_to_host_budget(trace, std::move(actions), *options.host_budget_bytes);
      actions = std::move(trim.actions);
      if (trim.storages_kept > 0) peak_bytes = trim.peak_bytes;
      host_cut_rounds = trim.cut_rounds;
    }
    TimedSchedule timed;
    if (timer) {
      timed = timer(std::move(actions));
    } else {
      timed.stall_ms = internal::estimate_stall_ms(trace, actions, memory_cap);
      timed.actions = std::move(actions);
    }
    return Variant{std::move(timed.actions), boundary_picks.size(), peak_bytes, timed.stall_ms, host_cut_rounds};
  };
  Variant chosen;
  if (selected.empty()) {
    chosen = build(EngineRule::kSoonestNeeded, profile, HostCopyOrder{});
  } else if (control.threads && control.threads() == PlacementThreads::kOne) {
    const HostCopyOrder host_order = first_placement();
    if (stop.stop_requested()) return PeakRun{.result = {}, .stall_ms = 0.0, .stopped = true};
    RangeMaxTree fill_profile = profile;
    chosen = build(EngineRule::kSoonestNeeded, profile, host_order);
    Variant fill = build(EngineRule::kFillIdleEngine, fill_profile, host_order);
    if (fill.stall_ms < chosen.stall_ms) chosen = std::move(fill);
  } else {
    // The idle-filling order is built on a second thread, on its own copy of
    // the profile, taken while this thread runs the first placement.
    HostCopyOrder host_order;
    std::latch profile_copied(1), order_ready(1);
    Variant fill;
    bool stopped = false;  // written before order_ready opens, read after
    std::jthread worker([&] {
      RangeMaxTree fill_profile = profile;
      profile_copied.count_down();
      order_ready.wait();
      if (!stopped) fill = build(EngineRule::kFillIdleEngine, fill_profile, host_order);
    });
    host_order = first_placement();
    stopped = stop.stop_requested();
    order_ready.count_down();
    if (stopped) {
      worker.join();
      return PeakRun{.result = {}, .stall_ms = 0.0, .stopped = true};
    }
    profile_copied.wait();
    chosen = build(EngineRule::kSoonestNeeded, profile, host_order);
    worker.join();
    if (fill.stall_ms < chosen.stall_ms) chosen = std::move(fill);
  }
  if (chosen.boundary_picks > 0) {
    result.notes.push_back(
        fmt::format("{} boundary candidate(s) used to lower edge memory between ops", chosen.boundary_picks));
  }
  if (chosen.host_cut_rounds > 0) {
    result.notes.push_back(internal::describe_cut_rounds(chosen.host_cut_rounds));
  }
  result.planned_peak_bytes = chosen.peak_bytes;
  result.schedule.actions = std::move(chosen.actions);
  return PeakRun{std::move(result), chosen.stall_ms};
}

}  // namespace internal
}  // namespace hyperoffload
