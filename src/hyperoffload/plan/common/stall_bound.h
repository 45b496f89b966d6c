// A lower bound on the stall of any plan within a budget: how far from optimal a
// planner's stall can be at most, shown by `hyperoffload compare`
// (docs/PEAK_PLANNER.md, "How far from optimal").
//
// Scope: every valid, fault-free schedule whose op-granular peak is within the
// budget and that keeps retained storages resident after their last access
// (both planners' plans). Such a plan keeps a storage off the device only
// inside a gap between two of its accesses, copies the data to host after the
// last write before the gap and back before the access after it. The bound
// holds for the simulator's timing (sim/simulator.h) with the given copy
// engines and memory cap.
//
// With R(q) the unplanned resident bytes at op q and E(q) = max(0, R(q) -
// budget) the bytes that must be off the device during op q, times in ms of
// compute without stalls (C(q) = when op q starts then), S(q) a lower bound of
// when op q really starts:
//
//  1. Copies to host. The storages off during op q were copied to host by
//     copies issued before op q. T_D(q) = the earliest the D2H engine can have
//     finished E(q) bytes of the gaps covering q, each no earlier than its last
//     write before the gap ends (fluid: earliest-written bytes first, a copy
//     may be split). Any copy to host issued after op q queues behind them (the
//     engine is FIFO in program order).
//  2. Copies back. Of the bytes off during op q, at least N = E(q) - (bytes of
//     the gaps covering q that end after op j) are needed by op j, so must come
//     back between the end of op q and the start of op j, each after its own
//     copy to host (which queued behind 1. at its copy op): S(j) >= the earliest
//     the H2D engine can have moved N such bytes (fluid, earliest available
//     first). With one shared engine the copies back also queue behind every
//     copy to host issued before op q.
//  3. Memory cap (DeviceMemory::kBudget): an op that allocates a storage starts
//     only once E(q) bytes of releases have completed, each after its copy to
//     host: S(q) >= T_D(q).
//  4. S(q) >= C(q), S(q) >= S(q-1) + duration(q-1); the stall is at least
//     S(last) - C(last).
//
// Cost: O((ops + accesses + gaps) log gaps) for 1. and 3., plus O(k log k) per
// over-budget op q evaluated in 2. (k = gaps covering q). Evaluated are all
// over-budget ops when their k sum to at most max(2^20, 4 * (ops + gaps)),
// otherwise every s-th in op order with s chosen to stay within that (and the
// op with the largest excess): evaluating fewer only weakens the bound.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <optional>

#include "hyperoffload/ir/trace.h"
#include "hyperoffload/model/device.h"

namespace hyperoffload {

struct StallBoundOptions {
  CopyEngines copy_engines = CopyEngines::kTwo;
  DeviceMemory device_memory = kDefaultDeviceMemory;
};

// The least stall, in ms, of any plan in the scope above; nullopt when no such
// plan fits the budget (some op holds more than the budget even with every
// storage it could do without off the device).
std::optional<double> stall_lower_bound_ms(const Trace& trace, std::int64_t budget_bytes,
                                           const StallBoundOptions& options = {});

}  // namespace hyperoffload
