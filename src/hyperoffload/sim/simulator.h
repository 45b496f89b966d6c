// Event simulator: plays a schedule against a trace in time, with one compute
// stream and one or two copy engines, and reports stalls and the memory curve.
//
// Model (docs/FORMATS.md, "Simulator"):
//  - The compute stream runs ops in order for their duration_ms.
//  - Copy engines are FIFO queues: with 2 (default), one for D2H and one for H2D;
//    with 1, both directions share one queue, in program order. Transfer time =
//    size / bandwidth (the trace's GiB/s).
//  - A post-op copy_d2h starts when its op ends and its engine is free (a pre-op
//    one when the previous op has ended).
//  - A pre-op copy_h2d starts when the previous op has ended, its engine is free
//    and the storage's last D2H has completed; its device memory is taken when
//    the copy starts.
//  - An op starts when the previous op has ended and every in-flight H2D of a
//    storage it accesses has completed; the wait is stall.
//  - A storage's memory is taken when the op that first accesses it starts.
//  - release_device frees memory when its action is issued (its op ends; for a
//    pre action, when the previous op ends) or, if later, when the storage's last
//    D2H (and any in-flight H2D) completes.
//  - A fault is a synchronous H2D on the compute stream after the storage's last
//    D2H has completed, before the op starts; its time counts as stall.
//  - Memory events at equal times apply in program order: pre actions, the op's
//    own allocations, post actions.
//  - Copies that the validator deems no-ops take no time.
// makespan_ms is when the last op or copy ends; stall_ms is the compute stream's
// total waiting (including faults), so compute_ms + stall_ms is when the last op ends.
//
// Thread-safety: a pure function of its inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/ir/timeline.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

enum class CopyEngines : std::uint8_t { kOne = 1, kTwo = 2 };

// Whether simulate() records the full timeline (spans and memory samples).
enum class RecordTimeline : std::uint8_t { kNo, kYes };

struct SimulatorOptions {
  CopyEngines copy_engines = CopyEngines::kTwo;
  RecordTimeline record_timeline = RecordTimeline::kNo;
};

struct SimulationResult {
  ValidationReport validation;   // the validator's verdict on the same schedule
  std::int64_t peak_bytes_timed = 0;  // maximum over time of allocated device bytes
  double peak_time_ms = 0.0;          // when it is first reached
  double compute_ms = 0.0;            // sum of op durations
  double makespan_ms = 0.0;
  double stall_ms = 0.0;
  std::int64_t d2h_bytes = 0;
  std::int64_t h2d_bytes = 0;         // includes faults
  Timeline timeline;                  // only with RecordTimeline::kYes

  bool valid() const { return validation.valid(); }
  std::size_t faults() const { return validation.faults.size(); }
  std::int64_t peak_bytes() const { return validation.peak_bytes; }
  // Stall as a percentage of compute time (0 when compute is 0).
  double overhead_percent() const { return compute_ms > 0 ? 100.0 * stall_ms / compute_ms : 0.0; }
};

SimulationResult simulate(const Trace& trace, const Schedule& schedule, const SimulatorOptions& options = {});

// The --json object: valid, faults, peak_bytes, peak_bytes_timed, compute_ms,
// makespan_ms, stall_ms, d2h_bytes, h2d_bytes, and more (docs/FORMATS.md).
std::string simulation_to_json(const SimulationResult& result);

}  // namespace hyperoffload
