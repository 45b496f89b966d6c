// What a plan means on its device, in one set of numbers: the summary that
// `hyperoffload plan` prints, that each row of `compare` holds, and that the
// Python session's summary() returns. One walk of the schedule (the simulator,
// which validates it on the same walk) gives every number, so the three never
// disagree.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/timeline.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/model/device.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/sim/simulator.h"

namespace hyperoffload {

struct PlanSummaryOptions {
  // The budget the plan was made for (nullopt: none, nothing to hold the
  // device to); on a DeviceMemory::kBudget device it is the memory's size.
  std::optional<std::int64_t> budget_bytes;
  DeviceMemory device_memory = kDefaultDeviceMemory;
  CopyEngines copy_engines = kDefaultCopyEngines;
  RecordTimeline record_timeline = RecordTimeline::kNo;  // the memory curve, for plots
  // Host bytes the plan may hold (nullopt: unlimited): a peak host above it
  // is a problem of the simulation's validation (SimulatorOptions).
  std::optional<std::int64_t> host_budget_bytes;
};

struct PlanSummary {
  std::string planner;  // the schedule's
  std::optional<std::int64_t> budget_bytes;
  OpIndex op_count = 0;
  StorageIndex storage_count = 0;
  PeakBytes unplanned;                     // the trace's op-granular peak without a plan
  std::optional<UnavoidableFloor> floor;   // the planner's, when it gave one
  std::int64_t pre_actions = 0;            // actions in ops' pre phase
  std::int64_t post_actions = 0;           // and in their post phase
  // The schedule on the device: the validator's verdict (op-granular peak,
  // copies, faults, problems) and the step in time (timed peak, stall,
  // recomputes, overhead).
  SimulationResult simulation;

  std::int64_t op_peak_bytes() const { return simulation.validation.peak_bytes; }
  std::int64_t timed_peak_bytes() const { return simulation.peak_bytes_timed; }
  // The budget as a percentage of the unplanned peak (0 without either).
  double budget_percent() const {
    return budget_bytes && unplanned.bytes > 0
               ? 100.0 * static_cast<double>(*budget_bytes) / static_cast<double>(unplanned.bytes)
               : 0.0;
  }
};

// Simulates `schedule` on `trace` with the options' device (which validates
// it on the same walk) and gathers the plan's numbers; `floor` is passed
// through. Never fails: an invalid schedule is summarised with its problems.
PlanSummary summarize_plan(const Trace& trace, const Schedule& schedule, std::optional<UnavoidableFloor> floor,
                           const PlanSummaryOptions& options);

}  // namespace hyperoffload
