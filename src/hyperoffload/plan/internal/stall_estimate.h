// Internal: the compute stall a schedule will cause, estimated with the timing
// rules of the event simulator (docs/SIMULATOR.md) — one compute stream, one
// FIFO copy engine per direction, a copy to device that waits for its storage's
// copy to host, ops that wait for the copies to device of the storages they
// access — optionally on a device that holds only `memory_cap_bytes` (the
// simulator's DeviceMemory::kBudget): allocations are made in program order, an
// op's first accesses when it starts and a prefetch's buffer when it is
// issued, and each waits until released memory has really been freed (a
// release completes once its storage's copies have). Faults are not modelled:
// the peak planner uses it to pick between prefetch orders for its own
// (fault-free) schedules, and the planning layer cannot call the simulator.
//
// Thread-safety: a pure function. O(ops + accesses + actions log accesses +
// releases log releases).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload::internal {

// Precondition: `actions` are in execution order and fault-free for `trace`;
// `accesses` is of `trace`. memory_cap_bytes: nullopt models unlimited memory.
double estimate_stall_ms(const Trace& trace, const StorageAccesses& accesses, std::span<const Action> actions,
                         std::optional<std::int64_t> memory_cap_bytes = std::nullopt);

}  // namespace hyperoffload::internal
