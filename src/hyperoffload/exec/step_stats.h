// What one executed step measured.
#pragma once

#include <chrono>
#include <cstdint>

#include "hyperoffload/ir/ids.h"
#include "hyperoffload/runtime/residency_manager.h"

namespace hyperoffload {

enum class StepKind : std::uint8_t { kWarmup, kReplay };
const char* to_string(StepKind kind);  // "warmup" / "replay"

struct StepStats {
  StepKind kind = StepKind::kWarmup;
  OpIndex ops = 0;
  // Resident bytes of tracked storages, measured by the runtime at every
  // change (so it includes transients inside an op's action list).
  std::int64_t peak_resident_bytes = 0;
  // Device bytes held for tracked storages in time (runtime/residency_manager.h,
  // Note [Held bytes]): resident ones, buffers whose free waits for a copy,
  // outputs reserved before their op runs. What an out-of-memory depends on;
  // at most the budget whenever the budget is at or above the floor and the
  // step holds no memory the plan does not know of (over_budget_allocations).
  std::int64_t peak_held_bytes = 0;
  // Host time the step's thread waited for copies to finish so that their
  // buffers could be freed to make room (the capped device's memory stall).
  double memory_wait_ms = 0.0;
  // Allocations that went over the budget with no copy left to wait for.
  std::int64_t over_budget_allocations = 0;
  std::int64_t resident_at_end_bytes = 0;
  std::int64_t peak_host_bytes = 0;  // bytes of host copies
  std::int64_t d2h_count = 0;        // effective copies (no-op copies excluded)
  std::int64_t d2h_bytes = 0;        // = offloaded bytes
  std::int64_t h2d_count = 0;        // excludes faults
  std::int64_t h2d_bytes = 0;        // includes faults
  std::int64_t faults = 0;           // synchronous demand pages of accessed storages
  std::int64_t fault_bytes = 0;
  std::int64_t evictions = 0;     // warmup: storages evicted online
  // warmup: storages kept on the device because the pinned host pool was full
  // (Note [A full host pool in the warmup], exec/warmup_executor.cc)
  std::int64_t host_full_kept_storages = 0;
  std::int64_t end_restores = 0;  // held storages paged back at the end of the step
  std::int64_t recompute_count = 0;      // replay: recompute actions run (exec/recompute.h)
  std::int64_t regenerated_bytes = 0;    // bytes of the storages they regenerated
  double recompute_ms = 0.0;             // compute-stream time of those recomputes
  double step_ms = 0.0;           // host wall time from begin to finish
};

// Where a step began, for an executor that continues a step another executor
// of the same step began (the session's plan switch, exec/session.h): its stats
// count from here, so a step that switched reports the whole step.
struct StepOrigin {
  ResidencyStats stats;
  std::chrono::steady_clock::time_point time;
};

}  // namespace hyperoffload
