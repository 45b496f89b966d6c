#include "hyperoffload/plan/internal/stall_estimate.h"

#include <algorithm>
#include <vector>

#include "hyperoffload/model/residency_rules.h"
#include "hyperoffload/model/step_clock.h"

namespace hyperoffload::internal {
namespace {

// Note [The estimate and the simulator]: both play a schedule with the
// execution model's clocks (model/step_clock.h) and residency rules
// (model/residency_rules.h), so for a valid fault-free schedule on two copy
// engines the estimate's stall is the simulator's: copies and releases the
// rules make no-ops take no time, and a recompute allocates what it
// regenerates. What the estimate leaves out is what such a schedule never
// needs: faults, data loss, the memory curve and the timeline. An op's
// allocation on a capped device is the storages it accesses first (without
// faults and data loss, all it allocates).
class Estimate {
 public:
  Estimate(const Trace& trace, const StorageAccesses& accesses, std::span<const Action> actions,
           std::optional<std::int64_t> memory_cap_bytes)
      : trace_(trace),
        accesses_(accesses),
        actions_(actions),
        clock_(CopyEngines::kTwo, memory_cap_bytes, trace.storage_count()),
        wait_until_ms_(static_cast<std::size_t>(trace.op_count()), 0.0),
        storages_(static_cast<std::size_t>(trace.storage_count())) {
    for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
      storages_[static_cast<std::size_t>(s)].size_bytes = trace.storage(s).size_bytes;
    }
    if (clock_.capped()) {
      first_access_bytes_.assign(static_cast<std::size_t>(trace.op_count()), 0);
      for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
        if (accesses.accessed(s)) {
          first_access_bytes_[static_cast<std::size_t>(accesses.first_op(s))] += trace.storage(s).size_bytes;
        }
      }
    }
    if (std::any_of(actions.begin(), actions.end(),
                    [](const Action& a) { return a.kind == ActionKind::kRecompute; })) {
      versions_ = AccessVersions(trace);
    }
  }

  double run() {
    double host_ms = 0.0;
    std::size_t next = 0;
    for (OpIndex op = 0; op < trace_.op_count(); ++op) {
      // Pre actions are issued when the previous op ends (the simulator's Note
      // [Host and stream clocks]); on a capped device a prefetch or recompute
      // among them can hold the host, and the op, up.
      host_ms = std::max(host_ms, op_end_ms_);
      for (; next < actions_.size() && actions_[next].op == op && actions_[next].phase == Phase::kPre; ++next) {
        host_ms = apply(actions_[next], host_ms);
      }
      run_op(op, host_ms);
      host_ms = op_end_ms_;
      for (; next < actions_.size() && actions_[next].op == op; ++next) host_ms = apply(actions_[next], host_ms);
    }
    return stall_ms_;
  }

 private:
  void run_op(OpIndex op, double host_ms) {
    std::size_t position = trace_.access_offset(op);
    for (const Access& access : trace_.accesses(op)) {
      ResidencyState& state = storages_[static_cast<std::size_t>(access.storage)].state;
      apply_access(state, access.kind);
      versions_.record(position++, state.version);
    }
    const double free_ms = clock_.stream_free_ms();
    if (clock_.capped()) {
      host_ms = clock_.allocate(std::max(host_ms, free_ms), first_access_bytes_[static_cast<std::size_t>(op)]);
    }
    const double start_ms = std::max({host_ms, wait_until_ms_[static_cast<std::size_t>(op)], free_ms});
    stall_ms_ += start_ms - free_ms;
    op_end_ms_ = start_ms + trace_.op_duration_ms(op);
    clock_.compute_ends(op_end_ms_);
  }

  // Applies one action issued at `issue_ms`; returns when the host is done
  // issuing it (later only for a capped prefetch or recompute that waited).
  double apply(const Action& action, double issue_ms) {
    if (action.kind == ActionKind::kRecompute) return recompute(action, issue_ms);
    const std::optional<StorageIndex> storage = trace_.find_storage(action.storage);
    if (!storage) return issue_ms;
    PerStorage& at = storages_[static_cast<std::size_t>(*storage)];
    const std::int64_t bytes = at.size_bytes;
    switch (action.kind) {
      case ActionKind::kCopyD2H:
        if (classify_d2h(at.state) != CopyOutcome::kCopies) return issue_ms;
        apply_d2h(at.state);
        clock_.copy_to_host(*storage, at.timing, issue_ms, trace_.d2h_ms(bytes));
        return issue_ms;
      case ActionKind::kCopyH2D: {
        if (classify_h2d(at.state) != CopyOutcome::kCopies) return issue_ms;
        apply_h2d(at.state);
        const StepClock::ToDevice copy = clock_.copy_to_device(at.timing, issue_ms, bytes, trace_.h2d_ms(bytes));
        // A copy waits for nothing but is waited for by the first op at or
        // after the one it is issued for that accesses its storage.
        const std::span<const StorageAccess> list = accesses_.of(*storage);
        const OpIndex from = action.phase == Phase::kPre ? action.op : action.op + 1;
        const auto it = std::lower_bound(list.begin(), list.end(), from,
                                         [](const StorageAccess& a, OpIndex op) { return a.op < op; });
        if (it != list.end()) {
          double& wait = wait_until_ms_[static_cast<std::size_t>(it->op)];
          wait = std::max(wait, copy.copy.end_ms);
        }
        return copy.host_ms;
      }
      case ActionKind::kReleaseDevice:
        if (!apply_release_device(at.state)) return issue_ms;
        clock_.release(*storage, at.timing, issue_ms, bytes);
        return issue_ms;
      case ActionKind::kReleaseHost:
        apply_release_host(at.state);
        return issue_ms;
      case ActionKind::kRecompute:  // handled above
        return issue_ms;
    }
    return issue_ms;
  }

  // A recompute, as the simulator times it (StepClock::recompute): its wait
  // for the stream's free time is stall.
  double recompute(const Action& action, double issue_ms) {
    recompute_accesses(trace_, versions_, action.source_op, scratch_);
    const std::int64_t regenerated_bytes = regenerate_outputs(
        scratch_, [this](StorageIndex s) -> ResidencyState& { return storages_[static_cast<std::size_t>(s)].state; },
        [this](StorageIndex s) { return storages_[static_cast<std::size_t>(s)].size_bytes; });
    double inputs_ready_ms = 0.0;
    for (const RecomputeAccess& input : scratch_.inputs) {
      inputs_ready_ms =
          std::max(inputs_ready_ms, storages_[static_cast<std::size_t>(input.storage)].timing.ready_ms());
    }
    const double free_ms = clock_.stream_free_ms();
    const StepClock::Recompute run = clock_.recompute(scratch_, issue_ms, regenerated_bytes, inputs_ready_ms,
                                                      trace_.op_duration_ms(action.source_op));
    stall_ms_ += run.start_ms - free_ms;
    return run.host_ms;
  }

  const Trace& trace_;
  const StorageAccesses& accesses_;
  std::span<const Action> actions_;
  StepClock clock_;
  // Per op: when the last copy to device that it waits for ends.
  std::vector<double> wait_until_ms_;
  // Bytes each op allocates on a capped device: the storages it accesses first.
  std::vector<std::int64_t> first_access_bytes_;
  // What the estimate keeps per storage, side by side: on a large trace each
  // action's storage is a cache miss, one instead of three.
  struct PerStorage {
    ResidencyState state;
    std::int64_t size_bytes = 0;
    StorageTiming timing;
  };
  std::vector<PerStorage> storages_;
  AccessVersions versions_;  // enabled when the schedule recomputes
  RecomputeAccesses scratch_;
  double op_end_ms_ = 0.0;
  double stall_ms_ = 0.0;
};

}  // namespace

double estimate_stall_ms(const Trace& trace, const StorageAccesses& accesses, std::span<const Action> actions,
                         std::optional<std::int64_t> memory_cap_bytes) {
  return Estimate(trace, accesses, actions, memory_cap_bytes).run();
}

}  // namespace hyperoffload::internal
