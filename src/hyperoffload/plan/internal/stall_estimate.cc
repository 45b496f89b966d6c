#include "hyperoffload/plan/internal/stall_estimate.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <vector>

namespace hyperoffload::internal {
namespace {

// Note [Capped memory in the estimate]: mirrors the simulator's Note [Memory
// cap] for fault-free schedules. The host allocates in program order; an
// allocation fits once the bytes allocated so far, minus the releases that have
// completed by then, leave room, and otherwise waits for the next completion.
// With nothing left to wait for, an allocation over the cap goes ahead (a plan
// below the floor), as in the simulator.
class CappedMemory {
 public:
  explicit CappedMemory(std::int64_t cap_bytes) : cap_bytes_(cap_bytes) {}

  // When `bytes` can be allocated, at or after `at_ms`; allocates them.
  double allocate(double at_ms, std::int64_t bytes) {
    if (bytes == 0) return at_ms;
    retire_until(at_ms);
    while (allocated_bytes_ - retired_bytes_ + bytes > cap_bytes_ && !pending_.empty()) {
      at_ms = std::max(at_ms, pending_.top().time_ms);
      retire_until(at_ms);
    }
    allocated_bytes_ += bytes;
    return at_ms;
  }

  void release(double free_ms, std::int64_t bytes) { pending_.push({free_ms, bytes}); }

 private:
  struct PendingFree {
    double time_ms;
    std::int64_t bytes;
    bool operator>(const PendingFree& other) const { return time_ms > other.time_ms; }
  };
  void retire_until(double time_ms) {
    while (!pending_.empty() && pending_.top().time_ms <= time_ms) {
      retired_bytes_ += pending_.top().bytes;
      pending_.pop();
    }
  }

  std::int64_t cap_bytes_;
  std::int64_t allocated_bytes_ = 0;
  std::int64_t retired_bytes_ = 0;
  std::priority_queue<PendingFree, std::vector<PendingFree>, std::greater<>> pending_;
};

}  // namespace

double estimate_stall_ms(const Trace& trace, const StorageAccesses& accesses, std::span<const Action> actions,
                         std::optional<std::int64_t> memory_cap_bytes) {
  const auto storages = static_cast<std::size_t>(trace.storage_count());
  const auto ops = static_cast<std::size_t>(trace.op_count());
  std::vector<double> to_host_done_ms(storages, 0.0);
  std::vector<double> to_device_done_ms(storages, 0.0);
  // Per op: when the last copy to device that it waits for ends. A copy waits
  // for nothing but is waited for by the next op that accesses its storage.
  std::vector<double> wait_until_ms(ops, 0.0);
  std::optional<CappedMemory> memory;
  // Bytes each op allocates on a capped device: the storages it accesses first.
  std::vector<std::int64_t> first_access_bytes;
  if (memory_cap_bytes) {
    memory.emplace(*memory_cap_bytes);
    first_access_bytes.assign(ops, 0);
    for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
      if (accesses.accessed(s)) first_access_bytes[static_cast<std::size_t>(accesses.first_op(s))] += trace.storage(s).size_bytes;
    }
  }
  double d2h_free_ms = 0.0, h2d_free_ms = 0.0;
  double previous_end_ms = 0.0, stall_ms = 0.0;
  double stream_free_ms = 0.0;            // when the last op or recompute ends
  std::vector<double> recomputed_until_ms;  // per storage: end of the last recompute using it
  std::size_t next = 0;
  // A recompute (the simulator's Note [Recompute timing]): its outputs are
  // allocated when it is issued — all of them, as a fault-free schedule
  // recomputes what it released — and it runs on the compute stream once the
  // stream is free and its inputs' copies to device are done.
  auto recompute = [&](const Action& action, double issue_ms) {
    if (recomputed_until_ms.empty()) recomputed_until_ms.assign(storages, 0.0);
    std::int64_t bytes = 0;
    double start_ms = stream_free_ms;
    for (const Access& access : trace.accesses(action.source_op)) {
      const auto s = static_cast<std::size_t>(access.storage);
      if (access.kind == AccessKind::kWrite) {
        bytes += trace.storage(access.storage).size_bytes;
      } else {
        start_ms = std::max(start_ms, to_device_done_ms[s]);
      }
    }
    if (memory) issue_ms = memory->allocate(issue_ms, bytes);
    start_ms = std::max(start_ms, issue_ms);
    stall_ms += start_ms - stream_free_ms;
    stream_free_ms = start_ms + trace.op_duration_ms(action.source_op);
    for (const Access& access : trace.accesses(action.source_op)) {
      double& until = recomputed_until_ms[static_cast<std::size_t>(access.storage)];
      until = std::max(until, stream_free_ms);
    }
    return issue_ms;
  };
  // Applies one action issued at `issue_ms`; returns when the host is done
  // issuing it (later only for a capped prefetch that waited for memory).
  auto apply = [&](const Action& action, double issue_ms) {
    if (action.kind == ActionKind::kRecompute) return recompute(action, issue_ms);
    const std::optional<StorageIndex> storage = trace.find_storage(action.storage);
    if (!storage) return issue_ms;
    const auto s = static_cast<std::size_t>(*storage);
    const std::int64_t bytes = trace.storage(*storage).size_bytes;
    switch (action.kind) {
      case ActionKind::kCopyD2H:
        d2h_free_ms = std::max(d2h_free_ms, issue_ms) + trace.d2h_ms(bytes);
        to_host_done_ms[s] = d2h_free_ms;
        return issue_ms;
      case ActionKind::kCopyH2D: {
        if (memory) issue_ms = memory->allocate(issue_ms, bytes);
        h2d_free_ms = std::max({h2d_free_ms, issue_ms, to_host_done_ms[s]}) + trace.h2d_ms(bytes);
        to_device_done_ms[s] = h2d_free_ms;
        // The first access at or after the op the copy is issued for.
        const std::span<const StorageAccess> list = accesses.of(*storage);
        const OpIndex from = action.phase == Phase::kPre ? action.op : action.op + 1;
        const auto it = std::lower_bound(list.begin(), list.end(), from,
                                         [](const StorageAccess& a, OpIndex op) { return a.op < op; });
        if (it != list.end()) {
          double& wait = wait_until_ms[static_cast<std::size_t>(it->op)];
          wait = std::max(wait, h2d_free_ms);
        }
        return issue_ms;
      }
      case ActionKind::kReleaseDevice:
        if (memory) {
          memory->release(std::max({issue_ms, to_host_done_ms[s], to_device_done_ms[s],
                                    recomputed_until_ms.empty() ? 0.0 : recomputed_until_ms[s]}),
                          bytes);
        }
        return issue_ms;
      case ActionKind::kReleaseHost:
      case ActionKind::kRecompute:  // handled above
        return issue_ms;
    }
    return issue_ms;
  };
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    // Pre actions are issued when the previous op ends; on a capped device a
    // prefetch among them can hold the host, and the op, up.
    double host_ms = previous_end_ms;
    for (; next < actions.size() && actions[next].op == op && actions[next].phase == Phase::kPre; ++next) {
      host_ms = apply(actions[next], host_ms);
    }
    if (memory) host_ms = memory->allocate(host_ms, first_access_bytes[static_cast<std::size_t>(op)]);
    const double start_ms = std::max({host_ms, wait_until_ms[static_cast<std::size_t>(op)], stream_free_ms});
    stall_ms += start_ms - stream_free_ms;
    previous_end_ms = stream_free_ms = start_ms + trace.op_duration_ms(op);
    for (; next < actions.size() && actions[next].op == op; ++next) apply(actions[next], previous_end_ms);
  }
  return stall_ms;
}

}  // namespace hyperoffload::internal
