// HybridPlanner ("hybrid", and "recompute" with offloading disabled): plans
// every gap of every storage as keep, offload or recompute, to minimise the
// step's time under a device-memory budget. docs/HYBRID_PLANNER.md describes it
// in full; in short:
//
//  1. Candidates (plan/internal/recompute_model.h). A gap of a storage created
//     by a recomputable op k can be freed by dropping the storage after the
//     gap's start and re-running k before its end — with k's inputs where they
//     are (kept, offloaded and brought back, or themselves regenerated), and
//     the inputs that are dead by then regenerated first (a chain, up to
//     internal::kMaxChainLevels levels). Its cost is the chain's compute time.
//  2. Recompute decisions: peak-driven, like the peak planner's selection —
//     while the peak of the profile exceeds a target, take the candidate
//     covering the peak op that removes the most of the excess per ms of
//     recompute (min(size, excess) / cost), among those whose cost is at most
//     `ratio` times the copy back they replace (cost / H2D time of the bytes).
//     A decision set is one (ratio, target) pair; the target lies between the
//     budget (recompute all the way down) and the unplanned peak (offload the
//     rest).
//  3. Offloads: each decision set becomes an augmented trace
//     (plan/internal/augmented_trace.h) — every recompute an inserted op that
//     writes fresh storages, which later accesses read — that the peak planner
//     plans as any trace; its schedule maps back to the original trace, each
//     inserted op becoming a recompute action in the pre phase of the op it
//     precedes.
//  4. Choice: the offload-only plan (the peak planner on the trace itself), the
//     recompute-only plan (below) and every decision set's plan are compared
//     with the timing rules of the simulator on the device of
//     PeakPlannerOptions::device_memory (plan/internal/stall_estimate.h: the
//     step's compute, its recomputes and its stall); the quickest within the
//     budget wins (the lowest peak when none fits). So the hybrid plan is never
//     slower than `peak` or `recompute` by that measure, and fits the budget
//     whenever either does.
//
// Recompute-only ("recompute", OffloadUse::kRecomputeOnly): the decisions of
// step 2 with no ratio limit, down to the budget, and no offload: the plan
// releases every storage after its last access and regenerates what it drops —
// the stand-in for activation checkpointing, what a user would pick instead.
// It takes the shortest prefix of its decision sequence whose peak — over ops
// and recomputes — fits the budget.
//
// Floor (PlanResult::floor): the lowest op-granular peak the planner
// guarantees. Hybrid: the peak planner's floor, or lower when recompute frees
// gaps that offloading cannot (inside a leading run of writes) — what an op or
// a recompute itself touches still bounds it. Recompute-only: the peak of its
// longest decision sequence (every candidate covering the peak taken). Below
// the floor the planner plans as close to it as it can and says so in notes.
//
// Guarantees: the schedule is valid (trace and schedule format v2: recompute
// actions); its op-granular peak is within the budget whenever the budget is
// at or above the floor. Cost: the peak planner's, once on the trace and once
// per decision set; the number of decision sets shrinks with the trace's size
// (HybridPlannerOptions::evaluation_budget) down to one, and the offload-only
// plan is made on a second thread while the others are.
//
// Thread-safety: plan() is const and may run concurrently.
#pragma once

#include <cstdint>
#include <string_view>

#include "hyperoffload/plan/peak_planner.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload {

// Whether the hybrid planner may offload.
enum class OffloadUse : std::uint8_t {
  kOffloadAndRecompute,  // "hybrid"
  kRecomputeOnly,        // "recompute": activation checkpointing's stand-in
};

struct HybridPlannerOptions {
  // The peak planner that places the offloads, and the device to tune for
  // (peak.device_memory): the plans are compared on that device.
  PeakPlannerOptions peak;
  OffloadUse offload = OffloadUse::kOffloadAndRecompute;
  // How many decision sets may be evaluated at most, and how much planning work
  // they may take together: the planner evaluates
  // clamp(evaluation_budget / (ops + accesses), 1, max_decision_sets) of them
  // (a 1M-op trace gets one, a GPT step all of them).
  std::int32_t max_decision_sets = 32;
  double evaluation_budget = 4.0e6;
};

class HybridPlanner final : public Planner {
 public:
  explicit HybridPlanner(HybridPlannerOptions options = {}) : options_(options) {}
  std::string_view name() const override {
    return options_.offload == OffloadUse::kRecomputeOnly ? "recompute" : "hybrid";
  }
  Result<PlanResult> plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const override;

 private:
  HybridPlannerOptions options_;
};

}  // namespace hyperoffload
