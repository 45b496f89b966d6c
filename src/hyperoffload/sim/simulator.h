// Event simulator: plays a schedule against a trace in time, with one compute
// stream and one or two copy engines, and reports stalls and the memory curve.
//
// Model (docs/FORMATS.md, "Simulator"; docs/SIMULATOR.md has a worked example):
//  - The compute stream runs ops in order for their duration_ms.
//  - Copy engines are FIFO queues: with 2 (default), one for D2H and one for H2D;
//    with 1, both directions share one queue, in program order. Transfer time =
//    size / bandwidth (the trace's GiB/s, 2^30 bytes per second).
//  - An action is issued when its op ends (post) or when the previous op ends
//    (pre; time 0 for op 0), in program order: one that waits for memory (with
//    DeviceMemory::kBudget, below) holds up the host, and the actions after it.
//  - A copy_d2h starts when it is issued and its engine is free.
//  - A copy_h2d starts when it is issued, its engine is free and the storage's
//    last D2H has completed; its device memory is taken when the copy starts.
//  - An op starts when the previous op has ended, its faults are done and every
//    in-flight H2D of a storage it accesses has completed; the wait is stall.
//  - A fault (an access the validator counts as one) is a synchronous H2D on the
//    compute stream before the op starts, after the storage's last D2H has
//    completed; its memory is taken when it starts and its time counts as stall.
//    Faults run in access order before the wait for in-flight H2Ds, so they
//    overlap with prefetches still on the copy engine.
//  - A storage's memory is taken when the op that first accesses it starts. An
//    access the validator reports as data loss takes memory the same way (there
//    is nothing to copy) and no time.
//  - release_device frees memory when it is issued or, if later, when the
//    storage's last D2H and any in-flight H2D complete.
//  - Memory events at equal times apply in program order: an op's pre actions,
//    its own allocations (faults, first accesses), its post actions; a delayed
//    free keeps the place of the release_device that issued it.
//  - Copies that the validator deems no-ops (or errors) take no time and move no
//    bytes; actions the validator drops (unknown storage, op out of range) are
//    ignored, and actions out of execution order run in execution order, as in
//    the validator.
//  - A recompute of op k (schedule format v2) is issued like any action of its
//    phase. The storages it regenerates are allocated when it is issued (with
//    kBudget the host waits for room, as for a prefetch). It runs on the compute
//    stream for op k's duration_ms once the stream is free and every in-flight
//    H2D of its inputs has completed (the wait is stall); the next op or
//    recompute starts no earlier than its end. The actions after it in its
//    phase are issued at once, but a release_device of one of its inputs or
//    outputs frees memory, and a copy_d2h of one of its outputs starts, no
//    earlier than its end. Its run time is recompute_ms, overhead but not stall.
//  - Ops do not wait for an in-flight D2H of a storage they write. Schedules
//    from the planners never need it (the D2H is issued after the storage's last
//    write before its gap), so the model leaves write-after-read hazards to the
//    validator's version rules.
//
// With DeviceMemory::kBudget the device holds only the budget, as a real device
// (or the runtime with an arena of that size) does. Allocations are made by the
// host in program order — an op's first accesses and faults when it starts, a
// prefetch's buffer when its copy_h2d is issued (a runtime reserves it when it
// enqueues the copy), a recompute's outputs when it is issued — and each waits
// until enough released memory has really been freed (releases wait for their
// D2H; model/capped_memory.h).
//
// The simulator is the execution model's step player (model/step_player.h:
// the timing rules, copy engines and capped allocator of model/step_clock.h)
// on the one schedule walk (model/schedule_walk.h), which also runs the
// validator's observer, so what happens is the validator's and when is the
// planners' stall estimate's, by construction. The host, and the compute
// stream behind it, waits meanwhile: memory_stall_ms, part of stall_ms. The timed peak
// then never exceeds the budget when the op-granular peak does not; for a
// schedule over budget at op granularity, an allocation that cannot fit once
// every issued release has completed goes ahead and the timed peak shows it.
//
// makespan_ms is when the last op, recompute or copy ends; stall_ms is the
// compute stream's total waiting (including faults, before ops and before
// recomputes), so compute_ms + stall_ms + recompute_ms is when the compute
// stream's last op or recompute ends. The timed peak is at least the validator's op-granular peak when every
// prefetch is taken by the time the validator counts it (greedy's last-moment
// prefetches, or any schedule with DeviceMemory::kBudget, which
// reserves at issue); a prefetch issued early that waits in the H2D queue takes
// its memory only when its copy starts, so the timed peak can then be lower.
//
// Cost: O((ops + actions + accesses) + d log d) time for d delayed frees, and
// O(storages + actions) memory (plus the timeline when recorded).
// Thread-safety: a pure function of its inputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/ir/timeline.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/model/device.h"

namespace hyperoffload {


struct SimulatorOptions {
  CopyEngines copy_engines = CopyEngines::kTwo;
  RecordTimeline record_timeline = RecordTimeline::kNo;
  // Budget reported and drawn as a line on the timeline, in bytes; nullopt = the
  // trace's memory_limit_bytes (none when that is unlimited too). It changes the
  // simulation only with DeviceMemory::kBudget.
  std::optional<std::int64_t> budget_bytes;
  // kBudget: allocations wait for memory to be freed (no effect without a budget).
  DeviceMemory device_memory = kDefaultDeviceMemory;
  // Host bytes the schedule may hold (nullopt: unlimited): over it, the
  // validation reports a problem (ValidatorOptions::host_budget_bytes).
  std::optional<std::int64_t> host_budget_bytes;
};

struct SimulationResult {
  ValidationReport validation;   // the validator's verdict on the same schedule
  CopyEngines copy_engines = CopyEngines::kTwo;
  std::int64_t budget_bytes = -1;     // the options' or the trace's budget; -1 when unknown
  std::int64_t peak_bytes_timed = 0;  // maximum over time of allocated device bytes
  double peak_time_ms = 0.0;          // when it is first reached
  double compute_ms = 0.0;            // sum of op durations
  double makespan_ms = 0.0;
  double stall_ms = 0.0;              // includes fault_ms and memory_stall_ms
  double fault_ms = 0.0;              // time the compute stream spent in faults
  // DeviceMemory::kBudget: compute-stream time spent waiting for memory to be freed.
  double memory_stall_ms = 0.0;
  double recompute_ms = 0.0;          // compute-stream time spent re-running ops (not stall)
  std::int64_t recompute_count = 0;   // recompute actions run
  DeviceMemory device_memory = kDefaultDeviceMemory;
  std::int64_t d2h_bytes = 0;         // bytes of the copies simulated
  std::int64_t h2d_bytes = 0;         // includes faults
  std::int64_t d2h_count = 0;
  std::int64_t h2d_count = 0;         // excludes faults
  Timeline timeline;                  // only with RecordTimeline::kYes

  bool valid() const { return validation.valid(); }
  std::size_t faults() const { return validation.faults.size(); }
  std::int64_t peak_bytes() const { return validation.peak_bytes; }
  // Stall as a percentage of compute time (0 when compute is 0).
  double stall_percent() const { return percent_of_compute(stall_ms); }
  // What the schedule costs on top of compute, stall and recompute together,
  // as a percentage of compute time: makespan / compute - 1 whenever an op
  // ends last (0 when compute is 0). Without recomputes it is stall_percent().
  double overhead_percent() const { return percent_of_compute(stall_ms + recompute_ms); }
  // `ms` as a percentage of compute time (0 when compute is 0). A compute time
  // so small that the ratio exceeds every double (1e-323 ms of compute, a 1 ms
  // stall) gives the largest double rather than an infinity no JSON can hold.
  double percent_of_compute(double ms) const {
    if (!(compute_ms > 0)) return 0.0;
    return std::min(100.0 * ms / compute_ms, std::numeric_limits<double>::max());
  }
};

// Simulates `schedule` on `trace`. Never fails: an invalid schedule is reported in
// result.validation (as validate_schedule would) and simulated as the validator
// executes it.
SimulationResult simulate(const Trace& trace, const Schedule& schedule, const SimulatorOptions& options = {});

// The --json object: valid, faults, peak_bytes, peak_op, peak_bytes_timed,
// peak_time_ms, compute_ms, makespan_ms, stall_ms, fault_ms, recompute_ms,
// recompute_count, overhead_percent,
// d2h_bytes, h2d_bytes, d2h_count, h2d_count, copy_engines, budget_bytes (when
// known), memory_cap ("unlimited" / "budget"), memory_stall_ms, problem_count,
// problems (docs/FORMATS.md).
std::string simulation_to_json(const SimulationResult& result);

}  // namespace hyperoffload
