// Internal: the hybrid planner's plans (hybrid_planner.h) — what a plan of the
// original trace carries for the choice between plans (HybridPlan), and how
// each kind is made from the models (PlanMaker): offload-only (the peak
// planner on the trace), offloads around a set of recompute decisions (the
// peak planner on the augmented trace, mapped back) and recomputes without
// offloads (the recompute-only plan).
//
// Bound, with W = ops + accesses, S storages, d the most accesses of one op
// and D ≤ candidates the decisions of a sequence. An augmented trace has at
// most W + 64 W + candidates × (1 + d) ops plus accesses (augmented_trace.h);
// a draft is one built, its accesses and its unplanned peak; finishing a plan
// is its releases, map_back and one stall estimate (stall_estimate.h).
//  - offload_only: one peak-planner run on the trace (peak_run.h);
//    more_offload_only_plans: four (one of them two selection passes).
//  - with_offloads: one walk of the augmented trace without building it
//    (augmented_peak); unless that rules it out or its re-runs fit the
//    budget (then its actions are made only if it is chosen:
//    make_deferred_actions, one draft finished), the augmented trace and its
//    peak model, and one peak-planner run on it whose two schedules are each
//    mapped back and timed on the trace.
//  - without_offloads: one draft, finished.
//  - recompute_only: the whole sequence's peak (augmented_peak, one walk
//    of an augmented trace without building it), then at most
//    ⌈log₂(D + 1)⌉ + 1 drafts (prefixes with a step doubling from max(1,
//    length / 16), or the whole sequence below its floor; the whole
//    sequence's peak and the first prefix on two threads when W ≥
//    100,000), one finished.
//  - recompute_only_excluding: nothing when W > 1,562; else at most
//    exclusion_evaluations() ≤ kMaxExclusionEvaluations (128) evaluations,
//    each a select_recomputes and its fitting prefix's drafts, and a plan
//    finished per improvement.
//  - best_recompute_only, or_within_an_eighth: one sequence and its
//    recompute_only; on a trace with room_for_more_plans() (W ≤ 250,000) up
//    to two more, the exclusion search and walk_or_segments: four DTR walks
//    (dtr_recompute_only; O(260 W + S d) each, dtr_planner.h, and a stall
//    estimate) and segment_reruns (SegmentSearch::best, shared by the rungs,
//    and one without_offloads).
//  - recompute_only_sequence: one select_recomputes;
//    recompute_only_sequence_if_it_can_fit: O(ops + candidates) first;
//    compute_and_reruns_ms O(D); count_copies O(actions).
// Memory: each plan's actions, and at most two drafts at once (the exclusion
// search's current and tried sequences), each of its augmented trace's
// size.
//
// Thread-safety: PlanMaker's methods are const and may run concurrently; they
// read the models only after HybridModels::wait_for_recompute_model, except
// offload_only and estimated_time_ms, which never read the recompute model.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/dtr_planner.h"
#include "hyperoffload/plan/hybrid/hybrid_models.h"
#include "hyperoffload/plan/hybrid/segment_search.h"
#include "hyperoffload/plan/peak/peak_run.h"
#include "hyperoffload/plan/peak_planner.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/plan/recompute/augmented_trace.h"
#include "hyperoffload/plan/recompute/recompute_selection.h"

namespace hyperoffload::internal {

// A plan for the original trace with what the choice between plans needs.
struct HybridPlan {
  std::string label;
  bool recompute_only = false;  // the recompute-only plan
  std::vector<Action> actions;
  std::int64_t peak_bytes = 0;  // op-granular, over ops and recomputes (planner's model)
  double time_ms = 0.0;         // compute + recomputes + estimated stall
  OpIndex peak_op = -1;         // where peak_bytes is reached (an original op); without offloads only
  // The lowest peak the way this plan was made reaches: a budget at or above
  // it is met (the peak planner's floor on the trace it planned).
  std::optional<UnavoidableFloor> floor;
  std::int64_t recompute_count = 0;
  double recompute_ms = 0.0;
  std::vector<std::string> notes;
  bool stopped = false;  // its making was stopped: no plan (the portfolio passes it over)
  // Not made: its re-runs alone make it slower than a plan made before it
  // (PlanMaker::with_offloads' `slower_than_ms`). Only its floor and re-runs
  // are set; the portfolio passes it over and takes its floor.
  bool ruled_out = false;
  // The budget it was planned for, when that was a lower one (Note [Plans for
  // lower budgets], lower_budgets.h).
  std::int64_t planned_for_bytes = 0;
  // Its recompute decisions were selected with the chain work budget spent
  // (RecomputeSelection::cut, Note [Chain work]).
  bool chain_work_cut = false;
  // Note [Actions made when chosen]: a plan without copies whose actions are
  // not made yet (`actions` is empty): its recompute decisions, from which
  // PlanMaker::make_deferred_actions makes them. Everything else is set.
  std::optional<std::vector<RecomputeDecision>> deferred_decisions;
};

class PlanMaker {
 public:
  // `peak_options` are the hybrid planner's (HybridPlannerOptions::peak): the
  // offload-only plan's, and the base of the variants below.
  // `segments`: the segment plans measured so far, shared by the plans of
  // one trace (segment_search.h).
  PlanMaker(const HybridModels& models, const PeakPlannerOptions& peak_options, SegmentSearch& segments)
      : models_(models), peak_options_(peak_options), segments_(segments) {}

  // The step's time for a plan of the original trace: compute, the re-runs
  // and the stall, played with the simulator's rules (the estimate is exact
  // for valid, fault-free schedules, which every plan here is).
  double estimated_time_ms(std::span<const Action> actions, double recompute_ms) const;

  // The peak planner on the trace itself, on the models' accesses and peak
  // model; its own stall estimate is the one estimated_time_ms would compute
  // (same schedule, trace and device). A stopped run gives a plan marked
  // `stopped`. `threads`: PeakRunControl::threads.
  HybridPlan offload_only(const PeakPlannerOptions& options, std::string label, std::stop_token stop = {},
                          std::function<PlacementThreads()> threads = {}) const;
  // Offloads planned around the recomputes of `chosen`: the peak planner on
  // the augmented trace, each of its schedules mapped back to the original
  // trace and timed there (so it picks its prefetch order by the schedule
  // that is used). Where the re-runs alone fit the budget, the plan the peak
  // planner would give (no copies), made without it. When the compute plus the re-runs of `chosen` is above
  // `slower_than_ms` the plan could only be slower than that, whatever its
  // offloads (a stall only adds), and the peak planner is not run: the plan
  // comes back `ruled_out`, with its floor and re-runs.
  HybridPlan with_offloads(std::span<const RecomputeDecision> chosen, std::string label,
                           const PeakPlannerOptions& options,
                           double slower_than_ms = std::numeric_limits<double>::infinity()) const;
  // Makes the actions of a plan whose making deferred them (Note [Actions
  // made when chosen], hybrid_plans.cc); nothing for any other plan. The
  // orchestrator calls it on the plan chosen.
  void make_deferred_actions(HybridPlan& plan) const;
  // Releases after the last access and the recomputes of `chosen`, no copies.
  HybridPlan without_offloads(std::span<const RecomputeDecision> chosen, std::string label) const;

  // The recompute-only plan: the shortest prefix of `sequence` (the full
  // decision sequence) whose peak over ops and recomputes fits the budget,
  // found by trying the prefix at which the selection's profile fits and then
  // longer ones (doubling the step). Its floor is the full sequence's peak;
  // below it, the plan is the full sequence's.
  // Only the plan returned is made whole (releases, actions, timing); of the
  // others only the peak is measured (RecomputeOnlyDraft).
  HybridPlan recompute_only(const RecomputeSelection& sequence) const;
  // The length of the prefix of `sequence` at which the selection's profile
  // fits the budget (the whole sequence when it never does).
  std::size_t profile_fitting_length(const RecomputeSelection& sequence) const;
  // The recompute-only plan of Note [Excluding candidates] (below):
  // `sequence` (recompute_only_sequence() with its defaults) re-selected with
  // some candidates excluded, the exclusions found by a bounded local search;
  // nullopt when no sequence the search tries fits the budget, or the trace
  // is too large for it (exclusion_evaluations() is 0).
  std::optional<HybridPlan> recompute_only_excluding(const RecomputeSelection& sequence) const;
  // Every recompute decision at any cost, down to nothing, never taking an
  // `excluded` candidate. `keep_dead_inputs`:
  // RecomputeSelectionParams::keep_dead_inputs.
  RecomputeSelection recompute_only_sequence(RegenerationRule regeneration = RegenerationRule::kWhileThePeakAllows,
                                             bool keep_dead_inputs = false,
                                             std::span<const std::int32_t> excluded = {}) const;
  // The recompute-only planner's plan: recompute_only of the sequence and, on
  // a trace small enough for four plans or more (ops + accesses <= 250,000),
  // also of the sequence under RegenerationRule::kWithinAnEighth, of the
  // sequence that may keep dead inputs (when a candidate can: Note [Keeping a
  // dead input], recompute_model.h), the search of Note [Excluding
  // candidates] (on a trace small enough for it) and DTR's eviction walk
  // (dtr_recompute_only): each is greedy and each wins on some example
  // traces (docs/HYBRID_PLANNER.md, "Recompute-only"). The best by better();
  // its floor is the lowest of the sequences' floors and the walk's peak.
  HybridPlan best_recompute_only() const;
  // `plan` (recompute_only of `sequence`, recompute_only_sequence() with its
  // defaults), or on such a small trace the best of it and the others (as
  // above). The hybrid planner's recompute-only plan goes through it too, so
  // the hybrid plan is never slower than the recompute-only planner's.
  HybridPlan or_within_an_eighth(const RecomputeSelection& sequence, HybridPlan plan) const;
  // DTR's eviction walk at the budget (plan/dtr_planner.h) as a plan: the
  // best of the walk with DTR's costs (equivalence classes: the `dtr`
  // planner's, so the recompute-only plans are never slower than it), and
  // the other heuristics of DtrHeuristic, which win on some traces.
  HybridPlan dtr_recompute_only() const;
  // The better of dtr_recompute_only() and segment_reruns(), with the lower
  // of their floors.
  HybridPlan walk_or_segments() const;
  // The segment plan SegmentSearch chooses for the budget (segment_search.h),
  // with its floor; a plan of no peak bound when no candidate spans the peak.
  HybridPlan segment_reruns() const;
  // One walk with `heuristic`.
  HybridPlan dtr_walk(DtrHeuristic heuristic) const;
  // Whether the trace is small enough for four plans or more (ops + accesses
  // <= 250,000): the extra recompute-only plans above are made only there.
  bool room_for_more_plans() const;
  // That sequence when the recompute-only plan can fit the budget. At real
  // ops the augmented trace holds exactly the selection's profile (re-runs can
  // only add), which never goes below the resident bytes less every candidate
  // covering the op; so when that is above the budget somewhere, or the
  // sequence's profile ends above it, the plan cannot fit and is not made.
  std::optional<RecomputeSelection> recompute_only_sequence_if_it_can_fit() const;
  // The compute plus the re-runs of every decision of `sequence`.
  double compute_and_reruns_ms(const RecomputeSelection& sequence) const;

  // The peak planner's options for offloads around recomputes: the given
  // ones with the copy-back windows of the profile before planning (which
  // suit offloads planned around recomputes better on the GPT presets).
  PeakPlannerOptions around_recomputes() const;
  // Those with weights that favour hiding over size (kHidingFirstWeights in
  // hybrid_plans.cc), ties to the smallest.
  PeakPlannerOptions hiding_first() const;
  // `options` with the copies to host sequenced by least lateness.
  static PeakPlannerOptions least_lateness(PeakPlannerOptions options);

  // The other offload-only plans of a small trace, appended to `plans`: the
  // given weights with the copies to host by least lateness and with the
  // copy-back windows before planning, and the hiding-first weights with those
  // windows and with the windows of a first selection pass (none is better on
  // every trace).
  void more_offload_only_plans(std::vector<HybridPlan>& plans) const;

  const HybridModels& models() const { return models_; }
  const PeakPlannerOptions& peak_options() const { return peak_options_; }

 private:
  // A recompute-only plan before its releases, actions and timing: the
  // augmented trace of its decisions, that trace's accesses and its peak,
  // which decides whether the plan is made whole.
  struct RecomputeOnlyDraft {
    AugmentedTrace augmented;
    StorageAccesses accesses;
    PeakBytes peak;
  };
  RecomputeOnlyDraft draft_without_offloads(std::span<const RecomputeDecision> chosen) const;
  // The shortest prefix of `sequence` whose draft fits the budget, and its
  // length: tried from the prefix at which the selection's profile fits
  // (whose draft is `first` when the caller has made it already), then
  // longer ones (doubling the step); nullopt when not even the whole
  // sequence fits.
  struct FittingPrefix {
    RecomputeOnlyDraft draft;
    std::size_t length = 0;
  };
  std::optional<FittingPrefix> shortest_fitting_prefix(const RecomputeSelection& sequence,
                                                       std::optional<RecomputeOnlyDraft> first = std::nullopt) const;
  // A sequence of Note [Excluding candidates] and its shortest fitting
  // prefix; nullopt when none fits.
  struct ExcludingSequence {
    RecomputeSelection sequence;
    FittingPrefix prefix;
  };
  std::optional<ExcludingSequence> with_fitting_prefix(RecomputeSelection sequence) const;
  HybridPlan finish_without_offloads(const RecomputeOnlyDraft& draft, std::string label) const;
  // The plan of an augmented trace without copies: `accesses` are its
  // accesses, `peak` its peak with releases after the last access.
  HybridPlan finish_without_offloads(const AugmentedTrace& augmented, const StorageAccesses& accesses,
                                     PeakBytes peak, std::string label) const;
  // A plan without copies but for its actions: its peak (an original op),
  // its re-runs, and its step as on a device that holds its peak (Note [A
  // plan without copies waits for nothing], hybrid_plans.cc).
  HybridPlan without_copies(std::string label, std::int64_t peak_bytes, OpIndex peak_op,
                            std::int64_t recompute_count, double recompute_ms) const;

  const HybridModels& models_;
  const PeakPlannerOptions& peak_options_;
  SegmentSearch& segments_;
};

// Note [Excluding candidates]
// The decision sequences are greedy: each takes the candidate that frees the
// most excess per re-run ms at the current peak, and a candidate taken early
// can be one that a plan needs no longer once later ones are taken, or that
// blocks a cheaper way down (its locks, its moves of earlier decisions). So
// on a small trace the recompute-only plan also tries sequences selected with
// some candidates excluded (select_recomputes' `excluded`, so each sequence
// is one the selection makes, valid by its rules): from the default rule's
// sequence, it excludes each candidate of the shortest prefix that fits, in
// the order the prefix took them, re-selects and keeps the first exclusion
// whose fitting prefix is quicker (first improvement), then goes on from
// there until no single further exclusion helps or its evaluations are spent.
// On U-Net at 50% of its peak (DTR's families, examples/traces/dtr_unet.json)
// five exclusions take the quickest recompute-only plan from 15.93% of the
// compute re-run to 14.23% (BENCHMARKS.md, "Recompute-only against DTR").
// An evaluation is a selection and the drafts of its prefixes, O(W log W)
// with W = ops + accesses, and the search makes at most
// exclusion_evaluations() of them: kExclusionSearchWork / W, at most
// kMaxExclusionEvaluations, none when that is below
// kMinExclusionEvaluations (W > 1,562: a search of fewer could
// rarely go past the first exclusions), so it costs at most about
// kExclusionSearchWork units of selection work per plan at any size.
// Deterministic: the same trace and budget give the same plan.
inline constexpr std::int64_t kExclusionSearchWork = 100'000;
inline constexpr std::int64_t kMaxExclusionEvaluations = 128;
inline constexpr std::int64_t kMinExclusionEvaluations = 64;

// How many evaluations the search of Note [Excluding candidates] may make on
// `trace`.
std::size_t exclusion_evaluations(const Trace& trace);

// Whether a beats b at the budget (common/plan_order.h, better_outcome).
bool better(const HybridPlan& a, const HybridPlan& b, std::int64_t budget_bytes);

// A plan that is not made because it cannot be chosen (HybridPlan::ruled_out):
// no actions, no peak within any budget, no time; the caller sets what it
// knows (re-runs, floor).
HybridPlan ruled_out_plan(std::string label);

// The number of copies (to host and back) among `actions`.
std::int64_t count_copies(std::span<const Action> actions);

}  // namespace hyperoffload::internal
