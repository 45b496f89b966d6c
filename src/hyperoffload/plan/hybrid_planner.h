// HybridPlanner ("hybrid", and "recompute" with offloading disabled): plans
// every gap of every storage as keep, offload or recompute, to minimise the
// step's time under a device-memory budget. docs/HYBRID_PLANNER.md describes it
// in full; in short:
//
//  1. Candidates (plan/recompute/recompute_model.h). A gap of a storage created
//     by a recomputable op k can be freed by dropping the storage after the
//     gap's start and re-running k before its end — with k's inputs where they
//     are (kept, offloaded and brought back, or themselves regenerated), and
//     the inputs that are dead by then regenerated first (a chain, as deep
//     as it goes: internal::kMaxChainOps). Its cost is the chain's compute time.
//  2. Recompute decisions (plan/recompute/recompute_selection.h): peak-driven,
//     like the peak planner's selection — while the peak of the profile
//     exceeds a target, take the candidate covering the peak op that removes
//     the most of the excess per ms of recompute (min(size, excess) / cost);
//     re-runs lock what they read, so the decisions agree with each other. A
//     decision set has three parameters: a cost limit (cost / H2D time of the
//     bytes), a target (the budget plus a share of what the copy engine can
//     take off before the peak) and a deadline: the candidates the copy engine
//     can take off by that fraction of the time before the peak — the oldest
//     data, costliest to recompute first — are left to the offloads.
//  3. Offloads: each decision set becomes an augmented trace
//     (plan/recompute/augmented_trace.h) — every re-run an inserted op that
//     writes fresh storages, which later accesses read — that the peak planner
//     plans as any trace; its schedule maps back to the original trace, each
//     inserted op becoming a recompute action in the pre phase of the op it
//     precedes. The peak planner times each schedule it makes there mapped
//     back, on the original trace.
//  4. Choice: the offload-only plan (the peak planner on the trace itself, on
//     a second thread), the recompute-only plan (below; on that thread
//     before it when it can stop it) and the plans of
//     decision sets — a fixed list, then the neighbours of the best, as many as
//     the trace's size allows (HybridPlannerOptions) — plus, on a trace small
//     enough for four of those, the offloads planned again with weights that
//     favour hiding over size (alone, with either kind of copy-back window,
//     and around the best decision set), with the copies to host by least
//     lateness (alone and around the best decision set) and, on a device that
//     holds only the budget, around decision sets that leave the oldest data
//     to offloads copied to host before the peak, are timed on the
//     original trace with the simulator's rules on the device of
//     PeakPlannerOptions::device_memory (plan/common/stall_estimate.h, exact
//     for these schedules: compute, recomputes and stall); the quickest within
//     the budget wins (the lowest peak when none fits). The offload-only plan
//     is stopped unfinished once a plan that fits is quicker than any
//     offload-only plan can be (plan/hybrid/offload_step_bound.h). A plan
//     that cannot be chosen is not made: a decision set whose re-runs alone
//     make it slower than a plan made before it (Note [Plans ruled out by
//     their re-runs], hybrid/decision_search.cc), and, on a trace small
//     enough for four decision sets, the recompute-only plan, made after them,
//     when the least re-runs of any recompute-only plan already make it slower
//     than their quickest (Note [The recompute-only plan after the decision
//     sets], hybrid_planner.cc).
//     So the hybrid plan's simulated step (two copy engines) is never longer
//     than the `peak` or `recompute` plan's, and it fits the budget whenever
//     either does.
//  5. Lower budgets: on a small trace, the plans chosen at every rung of the
//     trace's budget ladder below the budget (and the offload-only plans made
//     there) are timed at the budget too, and the quickest is kept (Note
//     [Plans for lower budgets], plan/common/lower_budgets.h): so more
//     budget never gives a slower plan on that ladder.
//
// Recompute-only ("recompute", OffloadUse::kRecomputeOnly): the decisions of
// step 2 with no cost limit, down to nothing, and no offload: the plan takes
// the shortest prefix of that sequence whose peak — over ops and recomputes —
// fits the budget, and releases every storage after its last access. On a
// trace small enough, also DTR's walk and activation checkpointing's plan
// with segments chosen for the budget (plan/recompute/segment_reruns.h);
// the quickest that fits wins. What a user would pick instead of
// checkpointing.
//
// Floor (PlanResult::floor): the lowest op-granular peak the planner
// guarantees for the budget given. Hybrid: the lowest floor among the plans it
// made (each the peak planner's floor on the trace it planned); every gap is an
// offload candidate (plan/peak/peak_model.h), so the offload-only plan's
// floor is already what the ops touch plus the retained storages past their
// last access (a re-run can give one of those a later access, hence a gap).
// Recompute-only: the peak of its longest decision sequence. Below the floor
// the planner plans as close to it as it can and says so in notes.
//
// Guarantees: the schedule is valid (trace and schedule format v2: recompute
// actions); its op-granular peak is within the budget whenever the budget is
// at or above the floor.
//
// Bound (Note [Planning bounds], planner.h), with W = ops + accesses and d
// the most accesses of one op. Time: the peak planner's on the trace, plus one
// run per decision set planned (clamp(evaluation_budget / W, 1,
// max_decision_sets): one on a 1M-op trace) and, on a trace small enough for
// four decision sets, six more (four extra offload-only plans, one of them two
// selection passes, and the best decision set's offloads twice) and up to six
// on a capped device (three decision sets, each planned twice) — each on an
// augmented trace of at most W + 64 W + candidates × (1 + d) (its re-runs come
// from chain searches within Note [Chain work]'s budget); the recompute model
// and each selection O(W log W + 64 W + candidates × d); the recompute-only
// plan O(log W) augmented traces of the same size, and on a trace of at most
// 250,000 ops plus accesses two selections more, DTR's walk (dtr_planner.h,
// O(260 W + storages × d)) and the segment plans (segment_reruns.h: at most
// clamp(4·10⁶ / W, 12, 60) augmented traces, each built at most four times, shared by the rungs);
// on a trace of at most
// internal::kLowerBudgetMaxWork ops plus accesses, all of that once more per
// rung below the budget (step 5, at most 19 rungs). Memory: O(W) per plan
// and augmented trace held, at most a few at once, on two threads.
//
// Code: hybrid_planner.cc is the orchestrator, whose constructor and hybrid()
// run these steps in order; the parts are in plan/hybrid/: the models
// (hybrid_models.h), the plans and how each is made (hybrid_plans.h), the
// decision-set search (decision_search.h) and the portfolio that chooses and
// writes the notes (plan_portfolio.h).
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

// Whether the hybrid planner leaves unmade the plans that cannot be chosen
// (Note [Plans ruled out by their re-runs], hybrid/decision_search.cc): the
// same plan either way, made sooner. kMakeAll is for the tests that check that.
enum class PlansThatCannotWin : std::uint8_t {
  kSkip,
  kMakeAll,
};

struct HybridPlannerOptions {
  // The peak planner that places the offloads, and the device to tune for
  // (peak.device_memory): the plans are compared on that device.
  PeakPlannerOptions peak;
  OffloadUse offload = OffloadUse::kOffloadAndRecompute;
  // How many decision sets may be planned at most, and how much planning work
  // they may take together: the planner plans
  // clamp(evaluation_budget / (ops + accesses), 1, max_decision_sets) of them
  // (a 1M-op trace gets one, a 100k-op trace a few, a GPT step all of them).
  std::int32_t max_decision_sets = 32;
  double evaluation_budget = 1.0e6;
  // Whether plan() also makes the plans of the rungs of the trace's budget
  // ladder below the budget and keeps the quickest (Note [Plans for lower
  // budgets], plan/common/lower_budgets.h); small traces only.
  LowerBudgetPlans lower_budgets = LowerBudgetPlans::kRungs;
  PlansThatCannotWin cannot_win = PlansThatCannotWin::kSkip;
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
