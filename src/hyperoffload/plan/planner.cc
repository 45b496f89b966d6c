#include "hyperoffload/plan/planner.h"

#include <array>

#include <fmt/format.h>

#include "hyperoffload/ir/byte_format.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/common/host_budget.h"
#include "hyperoffload/plan/common/offload_floor_rule.h"
#include "hyperoffload/plan/dtr_planner.h"
#include "hyperoffload/plan/greedy_planner.h"
#include "hyperoffload/plan/hybrid_planner.h"
#include "hyperoffload/plan/optimal_planner.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/peak_planner.h"
#include "hyperoffload/plan/recompute/recompute_model.h"

namespace hyperoffload {

namespace {

// A planner whose schedules know nothing of host memory (greedy, optimal)
// made to keep a host budget: its schedule is trimmed to it
// (plan/common/host_budget.h), keeping on the device what does not fit.
class HostBudgetPlanner final : public Planner {
 public:
  HostBudgetPlanner(std::unique_ptr<Planner> planner, std::int64_t host_budget_bytes)
      : planner_(std::move(planner)), host_budget_bytes_(host_budget_bytes) {}
  std::string_view name() const override { return planner_->name(); }
  Result<PlanResult> plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const override {
    HO_ASSIGN_OR_RETURN(PlanResult result, planner_->plan(trace, budget_bytes));
    internal::HostTrim trim =
        internal::trim_to_host_budget(trace, std::move(result.schedule.actions), host_budget_bytes_);
    result.schedule.actions = std::move(trim.actions);
    if (trim.storages_kept > 0) {
      result.planned_peak_bytes = trim.peak_bytes;
      result.notes.push_back(fmt::format(
          "host budget {} ({} bytes): {} storage(s) kept on the device instead of offloaded; peak host {}{}",
          format_bytes(host_budget_bytes_), host_budget_bytes_, trim.storages_kept, format_bytes(trim.peak_host_bytes),
          trim.cut_rounds > 0 ? "; " + internal::describe_cut_rounds(trim.cut_rounds) : std::string()));
    }
    return result;
  }

 private:
  std::unique_ptr<Planner> planner_;
  std::int64_t host_budget_bytes_;
};

std::unique_ptr<Planner> with_host_budget(std::unique_ptr<Planner> planner, const PlannerOptions& options) {
  if (!options.host_budget_bytes) return planner;
  return std::make_unique<HostBudgetPlanner>(std::move(planner), *options.host_budget_bytes);
}

}  // namespace

std::span<const std::string_view> planner_names() {
  static constexpr std::array<std::string_view, 4> kNames = {"greedy", "peak", "hybrid", "recompute"};
  return kNames;
}

Result<std::unique_ptr<Planner>> make_planner(std::string_view name, const PlannerOptions& options) {
  if (options.host_budget_bytes && *options.host_budget_bytes < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("host budget: {} bytes is negative", *options.host_budget_bytes));
  }
  if (name == "greedy") {
    if (!options.score_weights.empty()) {
      return make_error(ErrorCode::kInvalidArgument, "score weights apply to the peak and hybrid planners, not to greedy");
    }
    return with_host_budget(std::make_unique<GreedyPlanner>(), options);
  }
  if (name == kDtrPlannerName) {
    if (!options.score_weights.empty()) {
      return make_error(ErrorCode::kInvalidArgument, "score weights apply to the peak and hybrid planners, not to dtr");
    }
    return std::unique_ptr<Planner>(std::make_unique<DtrPlanner>());
  }
  if (name == "peak") {
    HO_ASSIGN_OR_RETURN(PeakPlannerOptions peak_options, peak_planner_options(options.score_weights));
    peak_options.device_memory = options.device_memory;
    peak_options.host_budget_bytes = options.host_budget_bytes;
    return std::unique_ptr<Planner>(std::make_unique<PeakPlanner>(peak_options));
  }
  if (name == kOptimalPlannerName) {
    if (!options.score_weights.empty()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "score weights apply to the peak and hybrid planners, not to optimal");
    }
    OptimalPlannerOptions optimal_options;
    optimal_options.device_memory = options.device_memory;
    optimal_options.time_limit_s = options.time_limit_s;
    optimal_options.progress = options.solver_progress;
    return with_host_budget(std::make_unique<OptimalPlanner>(std::move(optimal_options)), options);
  }
  if (name == "hybrid" || name == "recompute") {
    // The hybrid planner places its offloads with the peak planner, so it takes
    // the same score weights; recompute-only has no offloads to place.
    if (name == "recompute" && !options.score_weights.empty()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "score weights apply to the peak and hybrid planners, not to recompute");
    }
    HybridPlannerOptions hybrid_options;
    HO_ASSIGN_OR_RETURN(hybrid_options.peak, peak_planner_options(options.score_weights));
    hybrid_options.peak.device_memory = options.device_memory;
    hybrid_options.peak.host_budget_bytes = options.host_budget_bytes;
    hybrid_options.offload = name == "hybrid" ? OffloadUse::kOffloadAndRecompute : OffloadUse::kRecomputeOnly;
    return std::unique_ptr<Planner>(std::make_unique<HybridPlanner>(hybrid_options));
  }
  return make_error(ErrorCode::kInvalidArgument,
                    fmt::format("unknown planner \"{}\" (available: {}, {}, {})", name,
                                fmt::join(planner_names(), ", "), kOptimalPlannerName, kDtrPlannerName));
}

// The peak model's floor (peak_model.h) without the model: resident bytes
// from each storage's first access through its last (through the end when
// retained), less, per op, the storages an interior gap (two accesses at
// least two ops apart) covers there. One pass over the ops with each
// storage's last access so far, instead of the storages' access lists and
// every version and candidate: on the 1M-op random trace a tenth of greedy's
// `plan`. Same arithmetic and ties as build_peak_model (tests/plan/planner_test.cc
// compares them).
UnavoidableFloor offload_floor(const Trace& trace) {
  const auto ops = static_cast<std::size_t>(trace.op_count());
  if (ops == 0) return UnavoidableFloor{-1, 0};
  std::vector<OpIndex> last(static_cast<std::size_t>(trace.storage_count()), -1);
  std::vector<std::int64_t> resident_delta(ops + 1, 0);
  std::vector<std::int64_t> reducible_delta(ops + 1, 0);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    for (const Access& access : trace.accesses(op)) {
      const std::int64_t size = trace.storage(access.storage).size_bytes;
      if (size <= 0) continue;
      OpIndex& previous = last[static_cast<std::size_t>(access.storage)];
      if (previous < 0) {
        resident_delta[static_cast<std::size_t>(op)] += size;
      } else {
        internal::add_offloadable_gap(reducible_delta, previous, op, size);
      }
      previous = op;
    }
  }
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    const OpIndex previous = last[static_cast<std::size_t>(s)];
    if (previous < 0) continue;
    const StorageInfo& info = trace.storage(s);
    const OpIndex end = info.retained() ? trace.op_count() - 1 : previous;
    resident_delta[static_cast<std::size_t>(end) + 1] -= info.size_bytes;
  }
  internal::FloorScan floor;
  std::int64_t resident = 0;
  std::int64_t reducible = 0;
  for (std::size_t op = 0; op < ops; ++op) {
    resident += resident_delta[op];
    reducible += reducible_delta[op];
    floor.add(static_cast<OpIndex>(op), resident, reducible);
  }
  return floor.floor();
}

UnavoidableFloor recompute_only_limit(const Trace& trace) {
  const StorageAccesses accesses(trace);
  const internal::PeakModel peak = internal::build_peak_model(trace, accesses);
  const internal::RecomputeModel model = internal::build_recompute_model(trace, accesses);
  // A storage's gaps do not overlap, so the bytes candidates can free at an
  // op add up: a difference array over their interiors.
  const auto ops = static_cast<std::size_t>(trace.op_count());
  std::vector<std::int64_t> reducible_delta(ops + 1, 0);
  for (const internal::RecomputeCandidate& c : model.candidates) {
    reducible_delta[static_cast<std::size_t>(c.interior_first())] += c.size_bytes;
    reducible_delta[static_cast<std::size_t>(c.end_op)] -= c.size_bytes;
  }
  UnavoidableFloor limit;
  std::int64_t reducible = 0;
  for (std::size_t op = 0; op < ops; ++op) {
    reducible += reducible_delta[op];
    const std::int64_t left = peak.resident_bytes[op] - reducible;
    if (limit.op < 0 || left > limit.bytes) limit = {static_cast<OpIndex>(op), left};
  }
  return limit;
}

}  // namespace hyperoffload
