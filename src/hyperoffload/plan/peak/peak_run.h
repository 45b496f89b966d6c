// Internal: the peak planner's run (docs/PEAK_PLANNER.md) on a trace whose
// PeakModel the caller has already built, returning the
// chosen schedule's estimated stall with it. PeakPlanner::plan is this with
// its own model; the hybrid planner calls it for its offload-only
// plan, on the model it builds anyway, and takes the stall the
// run already estimated (plan/common/stall_estimate.h on the same schedule
// and device) instead of timing the schedule again.
//
// Bound (Note [Planning bounds], planner.h), with n ops, W = ops + accesses
// and C ≤ accesses candidates, per call: O(n) for the profile; one selection
// (peak_selection.h, O(C log² n + n log n) with its cap on re-evaluations); three placements
// (the first, then one per prefetch order: peak_placement.h) and the copies to
// host ordered once (host_copies.h); per prefetch order (two schedules, one
// when nothing is selected) the boundaries, the copies to host issued and the
// actions (peak_actions.h), O(W log W) with the placement; then, when
// options.host_budget_bytes is set, trim_to_host_budget (host_budget.h, with
// its cap on re-evaluations per storage kept) and the timer: estimate_stall_ms
// (stall_estimate.h, O(ops + accesses + actions + releases log releases)), or
// the caller's ScheduleTimer at the caller's cost. Memory O(W), with the
// selection's profile tree and at most three O(n) lean copies of it at once
// (range_max_tree.h: the first placement's and one per prefetch order);
// PlacementThreads::kTwo runs the two prefetch orders on two threads, no more
// work in all. On a trace of at least 65,536 candidates
// (PeakPlannerOptions::beside_min_candidates, plan/common/beside.h) three
// passes that need no result of the run go on threads of their own, also no
// more work: the selection's covering index beside its records, the boundary
// candidates' order beside the selection, and the copy ops' ready times
// beside the lean profile and the prefetch room.
//
// Thread-safety: a pure function of its arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <stop_token>
#include <vector>

#include "hyperoffload/ir/trace.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/peak_planner.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload::internal {

struct PeakRun {
  PlanResult result;
  // The stall of result.schedule as the run's timer measured it; by default
  // estimate_stall_ms on `trace`, on the device of options.device_memory
  // (memory cap = the budget for DeviceMemory::kBudget).
  double stall_ms = 0.0;
  // The run's stop token was triggered before it finished: result and
  // stall_ms are empty.
  bool stopped = false;
};

// A schedule as a run keeps it and its stall, for choosing between the
// schedules a run makes (one per prefetch order).
struct TimedSchedule {
  std::vector<Action> actions;
  double stall_ms = 0.0;
};

// Turns a schedule of the planned trace into the one the run returns, timed.
// The hybrid planner plans an augmented trace: its timer maps each schedule
// back to the original trace and times it there, so the run chooses by the
// stall of the schedule that is used, and each mapping and timing runs on the
// thread that made the schedule. Called once per schedule, from two threads at
// once: it must be safe to call concurrently.
using ScheduleTimer = std::function<TimedSchedule(std::vector<Action> actions)>;

// How many threads a run's placements use: the two prefetch orders are
// placed on two threads (the peak planner on its own), or one after the other
// on the calling thread, for a caller that already keeps both cores busy with
// runs of its own (the hybrid planner's offload-only plan, beside its decision
// sets: with a third thread the run on the critical path got two thirds of a
// core). The schedule is the same either way.
enum class PlacementThreads : std::uint8_t { kTwo, kOne };

// How a run is driven, beside what it plans: how its schedules are timed,
// when it stops, and on how many threads it places.
struct PeakRunControl {
  // Without a timer, schedules are timed with estimate_stall_ms on the trace
  // and returned as made.
  ScheduleTimer timer;
  // Once requested, the run returns a stopped PeakRun at its next check
  // (during selection and between its placements).
  std::stop_token stop;
  // Asked once, when the selection is done and the placements start, so a
  // caller can decide while the run selects: the hybrid planner's
  // offload-only plan places on one thread while the decision sets keep the
  // other core busy, and on two once they are done (Note [Two placement
  // threads once the decision sets are done], hybrid_planner.cc). Without
  // it, PlacementThreads::kTwo. Called on the run's thread: it must be safe
  // to call there.
  std::function<PlacementThreads()> threads;
};

// Preconditions: trace.op_count() > 0; `model` is build_peak_model(trace, its
// accesses).
PeakRun run_peak_planner(const Trace& trace, const PeakModel& model, const PeakPlannerOptions& options,
                         std::int64_t budget_bytes, const PeakRunControl& control = {});

}  // namespace hyperoffload::internal
