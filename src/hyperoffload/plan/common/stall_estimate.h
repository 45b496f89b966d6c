// Internal: the compute stall a schedule will cause, on one compute stream
// and one FIFO copy engine per direction, optionally on a device that holds
// only `memory_cap_bytes` (the simulator's DeviceMemory::kBudget,
// model/capped_memory.h). It is the simulator's step player
// (model/step_player.h) on the one schedule walk, recording nothing: the
// planning layer cannot call the simulator, but it plays the same rules, so
// the estimate equals the simulator's stall_ms on two copy engines.
//
// Thread-safety: a pure function. O(ops + accesses + actions + releases log
// releases).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload::internal {

// Any schedule gives the simulator's stall_ms on two copy engines (the same
// step player, model/step_player.h); the planners pass their own, valid and
// fault-free. memory_cap_bytes: nullopt models unlimited memory.
double estimate_stall_ms(const Trace& trace, std::span<const Action> actions,
                         std::optional<std::int64_t> memory_cap_bytes = std::nullopt);

}  // namespace hyperoffload::internal
