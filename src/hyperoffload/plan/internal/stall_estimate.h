// Internal: the compute stall a schedule will cause, estimated with the timing
// rules of the event simulator (docs/SIMULATOR.md) — one compute stream, one
// FIFO copy engine per direction, a copy to device that waits for its storage's
// copy to host, ops that wait for the copies to device of the storages they
// access. Memory is not modelled, nor faults: the peak planner uses it to pick
// between two prefetch orders for its own (fault-free) schedules, and the
// planning layer cannot call the simulator.
//
// Thread-safety: a pure function. O(ops + actions log accesses).
#pragma once

#include <span>

#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload::internal {

// Precondition: `actions` are in execution order; `accesses` is of `trace`.
double estimate_stall_ms(const Trace& trace, const StorageAccesses& accesses, std::span<const Action> actions);

}  // namespace hyperoffload::internal
