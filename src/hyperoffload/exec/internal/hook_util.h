// Internal: small helpers shared by the warmup and replay executors.
#pragma once

#include <algorithm>
#include <chrono>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "hyperoffload/ir/ids.h"
#include "hyperoffload/ir/status.h"
#include "hyperoffload/exec/step_stats.h"
#include "hyperoffload/runtime/residency_manager.h"

namespace hyperoffload::internal {

// Prefixes an error's message with where it happened ("op 12 (aten::mm): ...").
inline Error in_context(Error error, std::string_view context) {
  error.message = fmt::format("{}: {}", context, error.message);
  return error;
}

inline bool contains(std::span<const StorageId> ids, StorageId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// A step's stats from the residency manager's counters at its start and end.
// Paging held storages back at the end (`restores`, `restored_bytes`) is
// reported as end_restores, not as faults.
inline StepStats step_stats_between(StepKind kind, OpIndex ops, const ResidencyStats& start,
                                    const ResidencyStats& now, std::int64_t restores, std::int64_t restored_bytes,
                                    std::chrono::steady_clock::time_point start_time) {
  StepStats stats;
  stats.kind = kind;
  stats.ops = ops;
  stats.peak_resident_bytes = now.peak_resident_bytes;
  stats.peak_held_bytes = now.peak_held_bytes;
  stats.memory_wait_ms = now.memory_wait_ms - start.memory_wait_ms;
  stats.over_budget_allocations = now.over_budget_allocations - start.over_budget_allocations;
  stats.resident_at_end_bytes = now.resident_bytes;
  stats.peak_host_bytes = now.peak_host_bytes;
  stats.d2h_count = now.d2h_count - start.d2h_count;
  stats.d2h_bytes = now.d2h_bytes - start.d2h_bytes;
  stats.h2d_count = now.h2d_count - start.h2d_count;
  stats.h2d_bytes = now.h2d_bytes - start.h2d_bytes;
  stats.faults = now.faults - start.faults - restores;
  stats.fault_bytes = now.fault_bytes - start.fault_bytes - restored_bytes;
  stats.end_restores = restores;
  stats.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_time).count();
  return stats;
}

}  // namespace hyperoffload::internal
