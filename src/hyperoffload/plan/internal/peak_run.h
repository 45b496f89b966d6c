// Internal: the peak planner's run (docs/PEAK_PLANNER.md) on a trace whose
// StorageAccesses and PeakModel the caller has already built, returning the
// chosen schedule's estimated stall with it. PeakPlanner::plan is this with
// its own accesses and model; the hybrid planner calls it for its offload-only
// plan, on the accesses and model it builds anyway, and takes the stall the
// run already estimated (plan/internal/stall_estimate.h on the same schedule
// and device) instead of timing the schedule again.
//
// Thread-safety: a pure function of its arguments.
#pragma once

#include <cstdint>

#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/internal/peak_model.h"
#include "hyperoffload/plan/peak_planner.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload::internal {

struct PeakRun {
  PlanResult result;
  // estimate_stall_ms of result.schedule on `trace`, on the device of
  // options.device_memory (memory cap = the budget for DeviceMemory::kBudget).
  double stall_ms = 0.0;
};

// Preconditions: trace.op_count() > 0; `accesses` is of `trace` and `model`
// is build_peak_model(trace, accesses).
PeakRun run_peak_planner(const Trace& trace, const StorageAccesses& accesses, const PeakModel& model,
                         const PeakPlannerOptions& options, std::int64_t budget_bytes);

}  // namespace hyperoffload::internal
