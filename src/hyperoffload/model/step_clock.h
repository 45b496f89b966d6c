// StepClock: the clocks of one step played in time — the compute stream, the
// copy engines (copy_engines.h), device memory capped at the budget or not
// (capped_memory.h) and what recomputes hold (storage_timing.h) — with the
// timing rules of copies, releases and recomputes applied in one place. The
// simulator (sim/) plays every event with it and adds what it records
// (spans, the memory curve, faults); the planners' stall estimate
// (plan/common/stall_estimate.h) plays fault-free schedules with it. Each
// caller keeps the StorageTiming of its storages itself, next to its other
// per-storage state (one cache line per storage on large traces).
//
// Times are milliseconds from the start of the step. Calls come in program
// order: an action is issued by the host when its phase begins (pre: when the
// previous op ends; post: when its op ends), after the actions before it; an
// allocation that must wait for memory holds the host up (the returned host
// time). The compute stream runs ops and recomputes one after the other.
//
// Thread-safety: not shared.
#pragma once

#include <cstdint>
#include <optional>

#include "hyperoffload/model/capped_memory.h"
#include "hyperoffload/model/copy_engines.h"
#include "hyperoffload/model/device.h"
#include "hyperoffload/model/residency_rules.h"
#include "hyperoffload/model/storage_timing.h"

namespace hyperoffload {

class StepClock {
 public:
  // memory_cap_bytes: the budget of a DeviceMemory::kBudget device; nullopt
  // for unlimited memory (allocations never wait).
  StepClock(CopyEngines engines, std::optional<std::int64_t> memory_cap_bytes, StorageIndex storage_count);

  bool capped() const { return memory_.has_value(); }

  // ---- Host ------------------------------------------------------------------------
  // When the host has allocated `bytes` it asks for at `at_ms` (later only on a
  // capped device waiting for releases).
  double allocate(double at_ms, std::int64_t bytes) { return memory_ ? memory_->allocate(at_ms, bytes) : at_ms; }

  // ---- Copies and releases ------------------------------------------------------------
  // An effective copy_d2h of storage s issued at `issue_ms`; updates `timing`.
  CopyWindow copy_to_host(StorageIndex s, StorageTiming& timing, double issue_ms, double duration_ms);
  // An effective copy_h2d issued at `issue_ms`: its buffer is allocated first
  // (the host may wait), then it runs after the storage's copy to host.
  struct ToDevice {
    double host_ms;  // when the host has issued it (and allocated its buffer)
    CopyWindow copy;
  };
  ToDevice copy_to_device(StorageTiming& timing, double issue_ms, std::int64_t bytes, double duration_ms);
  // An effective release_device issued at `issue_ms`: returns when its memory
  // is freed (and frees it then on a capped device).
  double release(StorageIndex s, const StorageTiming& timing, double issue_ms, std::int64_t bytes);

  // ---- Compute stream -------------------------------------------------------------------
  // When the last op or recompute ends (0 before any).
  double stream_free_ms() const { return stream_free_ms_; }
  void compute_ends(double end_ms) { stream_free_ms_ = end_ms; }

  // A recompute issued at `issue_ms` (Note [Recompute timing] in
  // sim/simulator.cc): allocates `regenerated_bytes` (the host may wait), then
  // runs for `duration_ms` once the stream is free and its inputs are ready
  // (`inputs_ready_ms`, the latest StorageTiming::ready_ms() of its inputs);
  // holds its inputs and outputs until its end and moves the stream to it.
  struct Recompute {
    double host_ms;
    double start_ms;
    double end_ms;
  };
  Recompute recompute(const RecomputeAccesses& accesses, double issue_ms, std::int64_t regenerated_bytes,
                      double inputs_ready_ms, double duration_ms);

  // When the last copy ends (0 before any).
  double copies_end_ms() const { return engines_.last_end_ms(); }
  Lane lane(CopyDirection direction) const { return engines_.lane(direction); }

 private:
  CopyEngineClock engines_;
  std::optional<CappedMemory> memory_;
  RecomputeHolds holds_;
  std::size_t storage_count_;
  double stream_free_ms_ = 0.0;
};

}  // namespace hyperoffload
