// Internal: the compute stall a schedule will cause, estimated with the
// execution model's timing rules (model/step_clock.h, shared with the event
// simulator; docs/SIMULATOR.md) — one compute stream, one FIFO copy engine per
// direction, a copy to device that waits for its storage's copy to host, ops
// and recomputes that wait for the copies to device of the storages they use
// — optionally on a device that holds only `memory_cap_bytes` (the
// simulator's DeviceMemory::kBudget, model/capped_memory.h). Faults are not
// modelled: the planners use it to pick between candidate schedules of their
// own, which are fault-free, and the planning layer cannot call the simulator.
// For such a schedule it equals the simulator's stall_ms on two copy engines
// (Note [The estimate and the simulator] in the .cc).
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

// Precondition: `actions` are in execution order, valid and fault-free for
// `trace` (the validator finds no problem and no fault); `accesses` is of
// `trace`. memory_cap_bytes: nullopt models unlimited memory.
double estimate_stall_ms(const Trace& trace, const StorageAccesses& accesses, std::span<const Action> actions,
                         std::optional<std::int64_t> memory_cap_bytes = std::nullopt);

}  // namespace hyperoffload::internal
