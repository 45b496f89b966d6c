// ScheduleWalk: the one walk of a schedule over its trace. Every layer that
// checks, times or estimates a schedule — the validator (check/), the
// simulator (sim/) and the planners' stall estimate (plan/common/), the last
// two through model/step_player.h — is an observer of this walk, with no op
// loop, action switch or residency bookkeeping of its own. The walk owns:
//  - the op loop: op k's pre actions, then its accesses, then its post actions;
//  - each storage's ResidencyState and versions (AccessVersions, turned on
//    when the schedule recomputes);
//  - classifying every access and action with the residency rules
//    (model/residency_rules.h) and applying it;
//  - recomputes: what op k read and wrote, each input and output classified,
//    the regenerated outputs made resident;
//  - the op-granular device-memory model: bytes resident and bytes held on
//    the host between ops (what the validator reports; the timed model,
//    unlimited or capped, is the StepClock's, model/step_clock.h).
//
// An observer is a class with the hooks below (inherit WalkObserver for
// no-op defaults and override by name hiding; calls are resolved at compile
// time, so an empty hook costs nothing). Each hook sees the storage after
// classification; `access`, `recompute_input` and `recompute_output` run
// before the walk applies the outcome, the action hooks after it:
//
//   using StorageData = ...;   // kept beside each storage's residency
//   void begin_op(OpIndex op);                         // before op's pre actions
//   void access(OpIndex op, const Access&, StorageIndex, Storage, AccessOutcome);
//   void run_op(OpIndex op);                           // its accesses applied, before its post actions
//   void copy_to_host(const ResolvedAction&, Storage, CopyOutcome);
//   void copy_to_device(const ResolvedAction&, Storage, CopyOutcome);
//   void release_device(const ResolvedAction&, Storage, bool released);
//   void release_host(const ResolvedAction&, Storage, bool released);
//   void recompute_input(const ResolvedAction&, const RecomputeAccess&, Storage, RecomputeInput);
//   void recompute_output(const ResolvedAction&, const RecomputeAccess&, Storage, RecomputeOutput);
//   void recompute(const ResolvedAction&, const RecomputeAccesses&, std::int64_t regenerated_bytes);
//
// `Storage` is StorageRef<StorageData>: the storage's residency, size and the
// observer's data. Every action reaches exactly one of the five action hooks (copy_to_host,
// copy_to_device, release_device, release_host, recompute), in execution
// order, whatever its outcome.
//
//   struct Count : WalkObserver<Count> { ... void run_op(OpIndex op) { ... } };
//   const std::vector<ResolvedAction> resolved = resolve_actions(trace, schedule, {});
//   ScheduleWalk<Count> walk(trace, resolved);
//   Count count;
//   walk.run(count);
//
// Cost: O(ops + accesses + actions) plus what the observer does; one
// StorageIndex-indexed vector of {residency, size, observer data}, so that an
// access touches one cache line (Note [Prefetching storage states]).
// Thread-safety: not shared.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "hyperoffload/ir/trace.h"
#include "hyperoffload/model/residency_rules.h"

namespace hyperoffload {

// The walk's op-granular device-memory model: bytes of the storages resident
// now, and of the host copies held now. Observers read it in their hooks.
struct WalkMemory {
  std::int64_t device_bytes = 0;
  std::int64_t host_bytes = 0;
};

// One storage as the walk keeps it: its residency, its size and the
// observer's data side by side.
template <class Data>
struct WalkStorage {
  ResidencyState residency;
  std::int64_t size_bytes = 0;
  Data data;
};

// What a hook sees of one storage (by value: three words, inlined away).
template <class Data>
struct StorageRef {
  ResidencyState& residency;
  std::int64_t size_bytes;
  Data& data;
};

// No-op defaults for every hook (see the header comment).
template <class Derived, class Data = char>
struct WalkObserver {
  using StorageData = Data;
  using Storage = StorageRef<Data>;
  void begin_op(OpIndex) {}
  void access(OpIndex, const Access&, StorageIndex, Storage, AccessOutcome) {}
  void run_op(OpIndex) {}
  void copy_to_host(const ResolvedAction&, Storage, CopyOutcome) {}
  void copy_to_device(const ResolvedAction&, Storage, CopyOutcome) {}
  void release_device(const ResolvedAction&, Storage, bool) {}
  void release_host(const ResolvedAction&, Storage, bool) {}
  void recompute_input(const ResolvedAction&, const RecomputeAccess&, Storage, RecomputeInput) {}
  void recompute_output(const ResolvedAction&, const RecomputeAccess&, Storage, RecomputeOutput) {}
  void recompute(const ResolvedAction&, const RecomputeAccesses&, std::int64_t) {}
};

// Two observers of one walk (the simulator's player and the validator's
// report, so that simulate() walks a schedule once): each hook goes to `first`
// and then to `second`, each with its own data.
template <class First, class Second>
class BothObservers {
 public:
  struct StorageData {
    typename First::StorageData first;
    typename Second::StorageData second;
  };
  using Storage = StorageRef<StorageData>;

  BothObservers(First& first, Second& second) : first_(first), second_(second) {}

  void begin_op(OpIndex op) {
    first_.begin_op(op);
    second_.begin_op(op);
  }
  void access(OpIndex op, const Access& access, StorageIndex s, Storage state, AccessOutcome outcome) {
    first_.access(op, access, s, a(state), outcome);
    second_.access(op, access, s, b(state), outcome);
  }
  void run_op(OpIndex op) {
    first_.run_op(op);
    second_.run_op(op);
  }
  void copy_to_host(const ResolvedAction& action, Storage state, CopyOutcome outcome) {
    first_.copy_to_host(action, a(state), outcome);
    second_.copy_to_host(action, b(state), outcome);
  }
  void copy_to_device(const ResolvedAction& action, Storage state, CopyOutcome outcome) {
    first_.copy_to_device(action, a(state), outcome);
    second_.copy_to_device(action, b(state), outcome);
  }
  void release_device(const ResolvedAction& action, Storage state, bool released) {
    first_.release_device(action, a(state), released);
    second_.release_device(action, b(state), released);
  }
  void release_host(const ResolvedAction& action, Storage state, bool released) {
    first_.release_host(action, a(state), released);
    second_.release_host(action, b(state), released);
  }
  void recompute_input(const ResolvedAction& action, const RecomputeAccess& input, Storage state,
                       RecomputeInput outcome) {
    first_.recompute_input(action, input, a(state), outcome);
    second_.recompute_input(action, input, b(state), outcome);
  }
  void recompute_output(const ResolvedAction& action, const RecomputeAccess& output, Storage state,
                        RecomputeOutput outcome) {
    first_.recompute_output(action, output, a(state), outcome);
    second_.recompute_output(action, output, b(state), outcome);
  }
  void recompute(const ResolvedAction& action, const RecomputeAccesses& accesses, std::int64_t regenerated_bytes) {
    first_.recompute(action, accesses, regenerated_bytes);
    second_.recompute(action, accesses, regenerated_bytes);
  }

 private:
  static typename First::Storage a(Storage s) { return {s.residency, s.size_bytes, s.data.first}; }
  static typename Second::Storage b(Storage s) { return {s.residency, s.size_bytes, s.data.second}; }
  First& first_;
  Second& second_;
};

template <class Observer>
class ScheduleWalk {
 public:
  using Data = typename Observer::StorageData;
  using Storage = WalkStorage<Data>;
  using Ref = StorageRef<Data>;

  // `actions` (resolve_actions: in execution order, storages resolved)
  // outlive the walk.
  ScheduleWalk(const Trace& trace, std::span<const ResolvedAction> actions)
      : trace_(trace), actions_(actions), storages_(static_cast<std::size_t>(trace.storage_count())) {
    for (StorageIndex s = 0; s < trace.storage_count(); ++s) storage(s).size_bytes = trace.storage(s).size_bytes;
    if (std::any_of(actions.begin(), actions.end(),
                    [](const ResolvedAction& a) { return a.action().kind == ActionKind::kRecompute; })) {
      versions_ = AccessVersions(trace);
    }
  }

  void run(Observer& observer) {
    std::size_t next = 0;
    for (OpIndex op = 0; op < trace_.op_count(); ++op) {
      observer.begin_op(op);
      prefetch_actions(next);
      for (; next < actions_.size() && actions_[next].action().op == op && actions_[next].action().phase == Phase::kPre;
           ++next) {
        apply(actions_[next], observer);
      }
      run_op(op, observer);
      for (; next < actions_.size() && actions_[next].action().op == op; ++next) apply(actions_[next], observer);
    }
  }

  const Trace& trace() const { return trace_; }
  Storage& storage(StorageIndex s) { return storages_[static_cast<std::size_t>(s)]; }
  const Storage& storage(StorageIndex s) const { return storages_[static_cast<std::size_t>(s)]; }
  const WalkMemory& memory() const { return memory_; }

 private:
  // Note [Prefetching storage states]: ops touch storages in effectively
  // random order, so on a large trace most accesses miss the cache on their
  // storage. The accesses are one flat array, so the storages a few ops ahead
  // are known; touching them early overlaps those misses with this op's
  // work. The same holds for the actions.
  static constexpr std::size_t kPrefetchDistance = 64;  // accesses or actions: a dozen ops ahead
  void prefetch_storage(StorageIndex s) { __builtin_prefetch(&storages_[static_cast<std::size_t>(s)], 1); }
  void prefetch_accesses(std::size_t from) {
    const std::span<const Access> all = trace_.all_accesses();
    const std::size_t end = std::min(all.size(), from + kPrefetchDistance);
    for (std::size_t i = std::max(from, accesses_prefetched_); i < end; ++i) prefetch_storage(all[i].storage);
    accesses_prefetched_ = std::max(accesses_prefetched_, end);
  }
  void prefetch_actions(std::size_t from) {
    const std::size_t end = std::min(actions_.size(), from + kPrefetchDistance);
    for (std::size_t i = std::max(from, actions_prefetched_); i < end; ++i) {
      if (actions_[i].storage >= 0) prefetch_storage(actions_[i].storage);
    }
    actions_prefetched_ = std::max(actions_prefetched_, end);
  }

  void run_op(OpIndex op, Observer& observer) {
    std::size_t position = trace_.access_offset(op);  // of the access in AccessVersions
    prefetch_accesses(position + trace_.accesses(op).size());
    for (const Access& access : trace_.accesses(op)) {
      Storage& state = storage(access.storage);
      const AccessOutcome outcome = classify_access(state.residency);
      // A first access, a fault and a data loss (reported once, then resident
      // with whatever it holds) all take the storage's memory.
      if (outcome != AccessOutcome::kResident) memory_.device_bytes += state.size_bytes;
      observer.access(op, access, access.storage, ref(state), outcome);
      apply_access(state.residency, access.kind);
      versions_.record(position++, state.residency.version);
    }
    observer.run_op(op);
  }

  void recompute(const ResolvedAction& resolved, Observer& observer) {
    recompute_accesses(trace_, versions_, resolved.action().source_op, recompute_);
    for (const RecomputeAccess& input : recompute_.inputs) {
      Storage& state = storage(input.storage);
      observer.recompute_input(resolved, input, ref(state), classify_recompute_input(state.residency, input.version));
    }
    std::int64_t regenerated_bytes = 0;
    for (const RecomputeAccess& output : recompute_.outputs) {
      Storage& state = storage(output.storage);
      const RecomputeOutput outcome = classify_recompute_output(state.residency, output.version);
      observer.recompute_output(resolved, output, ref(state), outcome);
      if (outcome != RecomputeOutput::kRegenerates) continue;
      apply_recompute_output(state.residency);
      regenerated_bytes += state.size_bytes;
    }
    memory_.device_bytes += regenerated_bytes;
    observer.recompute(resolved, recompute_, regenerated_bytes);
  }

  void apply(const ResolvedAction& resolved, Observer& observer) {
    if (resolved.action().kind == ActionKind::kRecompute) {
      recompute(resolved, observer);
      return;
    }
    Storage& state = storage(resolved.storage);
    ResidencyState& residency = state.residency;
    switch (resolved.action().kind) {
      case ActionKind::kCopyD2H: {
        const CopyOutcome outcome = classify_d2h(residency);
        if (outcome == CopyOutcome::kCopies) {
          if (!residency.host_present) memory_.host_bytes += state.size_bytes;
          apply_d2h(residency);
        }
        observer.copy_to_host(resolved, ref(state), outcome);
        return;
      }
      case ActionKind::kCopyH2D: {
        const CopyOutcome outcome = classify_h2d(residency);
        if (outcome == CopyOutcome::kCopies) {
          apply_h2d(residency);
          memory_.device_bytes += state.size_bytes;
        }
        observer.copy_to_device(resolved, ref(state), outcome);
        return;
      }
      case ActionKind::kReleaseDevice: {
        const bool released = apply_release_device(residency);
        if (released) memory_.device_bytes -= state.size_bytes;
        observer.release_device(resolved, ref(state), released);
        return;
      }
      case ActionKind::kReleaseHost: {
        const bool released = apply_release_host(residency);
        if (released) memory_.host_bytes -= state.size_bytes;
        observer.release_host(resolved, ref(state), released);
        return;
      }
      case ActionKind::kRecompute: return;  // handled above
    }
  }

  static Ref ref(Storage& state) { return Ref{state.residency, state.size_bytes, state.data}; }

  const Trace& trace_;
  std::span<const ResolvedAction> actions_;
  std::vector<Storage> storages_;
  AccessVersions versions_;      // enabled when the schedule recomputes
  RecomputeAccesses recompute_;  // of the current recompute
  WalkMemory memory_;
  std::size_t accesses_prefetched_ = 0;
  std::size_t actions_prefetched_ = 0;
};

}  // namespace hyperoffload
