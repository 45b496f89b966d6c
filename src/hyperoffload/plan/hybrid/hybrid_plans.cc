#include "hyperoffload/plan/hybrid/hybrid_plans.h"

#include <algorithm>
#include <future>
#include <limits>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/common/plan_order.h"
#include "hyperoffload/plan/common/stall_estimate.h"
#include "hyperoffload/plan/dtr_planner.h"
#include "hyperoffload/plan/recompute/augmented_trace.h"

namespace hyperoffload::internal {
namespace {

// The peak planner's weights for a second try at the offloads, made when the
// trace is small enough for four plans or more: credit for hiding outweighs
// credit for size, so several small copies that hide beat one large copy that
// resolves the peak but cannot hide. (In a small MLP whose last activations
// are read right after the peak, the default weights offload one of those and
// stall on its copy back; the MILP offloads weights and early activations
// instead and hides every copy.) Its ties go to the smallest candidate. The
// plan it gives is one more candidate: the quicker plan wins, so it never
// makes a plan worse.
constexpr PeakScoreWeights kHidingFirstWeights{
    .peak_reduction = 0.1, .hiding = 4.0, .coverage = 1.0, .neighbor_impact = 1.0};
constexpr std::string_view kHidingFirstLabel = "offload-only, hidden copies first";

}  // namespace

bool better(const HybridPlan& a, const HybridPlan& b, std::int64_t budget_bytes) {
  return better_outcome({a.peak_bytes, a.time_ms}, {b.peak_bytes, b.time_ms}, budget_bytes);
}

HybridPlan ruled_out_plan(std::string label) {
  HybridPlan plan;
  plan.label = std::move(label);
  plan.ruled_out = true;
  plan.peak_bytes = std::numeric_limits<std::int64_t>::max();
  plan.time_ms = std::numeric_limits<double>::infinity();
  return plan;
}

std::int64_t count_copies(std::span<const Action> actions) {
  std::int64_t copies = 0;
  for (const Action& action : actions) {
    copies += action.kind == ActionKind::kCopyD2H || action.kind == ActionKind::kCopyH2D ? 1 : 0;
  }
  return copies;
}

double PlanMaker::estimated_time_ms(std::span<const Action> actions, double recompute_ms) const {
  return models_.trace.total_compute_ms() + recompute_ms +
         estimate_stall_ms(models_.trace, actions, models_.memory_cap());
}

HybridPlan PlanMaker::offload_only(const PeakPlannerOptions& options, std::string label, std::stop_token stop,
                                   std::function<PlacementThreads()> threads) const {
  HybridPlan plan;
  plan.label = std::move(label);
  PeakRun run = run_peak_planner(models_.trace, models_.peak, options, models_.budget_bytes,
                                 {.timer = {}, .stop = std::move(stop), .threads = std::move(threads)});
  if (run.stopped) {
    plan.stopped = true;
    return plan;
  }
  PlanResult& result = run.result;
  plan.time_ms = models_.trace.total_compute_ms() + run.stall_ms;
  plan.peak_bytes = result.planned_peak_bytes;
  plan.floor = result.floor;
  plan.actions = std::move(result.schedule.actions);
  for (std::string& note : result.notes) {
    if (note.find("boundary candidate") != std::string::npos) plan.notes.push_back(std::move(note));
  }
  return plan;
}

HybridPlan PlanMaker::with_offloads(std::span<const RecomputeDecision> chosen, std::string label,
                                    const PeakPlannerOptions& options, double slower_than_ms) const {
  const Trace& trace = models_.trace;
  // Note [Actions made when chosen]. Of the plans made for a trace, one is
  // chosen; a plan is compared with the others by its step, peak and floor
  // alone. Where the compute plus the re-runs of `chosen` rule the plan out,
  // or the re-runs alone bring the augmented trace within the budget, those
  // come from one walk of the augmented trace that does not build it
  // (augmented_peak: its peak, the peak planner's floor on it and its
  // re-runs). The first plan is not made. The second is the plan the peak
  // planner would give (it selects nothing, and its schedule is the releases
  // after the last access, timed without a stall: Note [A plan without
  // copies waits for nothing]), and its actions are made only if it is
  // chosen (make_deferred_actions). On the 1M-op chain at 50% the decision
  // set's plan is such a plan, and not chosen: the walk (0.16 s) replaces
  // its augmented trace, accesses, peak model and releases (0.4 s), and
  // before those the peak planner's pass over the trace took 0.45 s to add
  // nothing.
  const AugmentedPeak walked = augmented_peak(trace, models_.recompute, chosen);
  const auto floor_of = [&]() -> std::optional<UnavoidableFloor> {
    if (walked.floor.op < 0) return std::nullopt;
    return walked.floor;
  };
  if (trace.total_compute_ms() + walked.recompute_ms > slower_than_ms) {
    HybridPlan ruled_out = ruled_out_plan(std::move(label));
    ruled_out.floor = floor_of();
    ruled_out.recompute_count = walked.recompute_count;
    ruled_out.recompute_ms = walked.recompute_ms;
    return ruled_out;
  }
  if (walked.original_op >= 0 && walked.bytes <= models_.budget_bytes) {
    // Within the budget, which is the device's cap when it has one.
    HybridPlan plan =
        without_copies(std::move(label), walked.bytes, walked.original_op, walked.recompute_count, walked.recompute_ms);
    plan.floor = floor_of();
    plan.deferred_decisions.emplace(chosen.begin(), chosen.end());
    return plan;
  }
  const AugmentedTrace augmented = build_augmented_trace(trace, models_.recompute, chosen);
  const StorageAccesses accesses(augmented.trace);
  const PeakModel model = build_peak_model(augmented.trace, accesses);
  const std::optional<std::int64_t> memory_cap = models_.memory_cap();
  const ScheduleTimer timer = [&](std::vector<Action> actions) {
    TimedSchedule timed{map_back(augmented, actions), 0.0};
    timed.stall_ms = estimate_stall_ms(trace, timed.actions, memory_cap);
    return timed;
  };
  PeakRun run = run_peak_planner(augmented.trace, model, options, models_.budget_bytes,
                                 {.timer = timer, .stop = {}, .threads = {}});
  const PlanResult& result = run.result;
  HybridPlan plan;
  plan.label = std::move(label);
  plan.peak_bytes = result.planned_peak_bytes;
  if (result.floor) {
    plan.floor = UnavoidableFloor{augmented.original_op[static_cast<std::size_t>(result.floor->op)], result.floor->bytes};
  }
  plan.recompute_count = augmented.recompute_count;
  plan.recompute_ms = augmented.recompute_ms;
  plan.actions = std::move(run.result.schedule.actions);
  plan.time_ms = trace.total_compute_ms() + plan.recompute_ms + run.stall_ms;
  return plan;
}

PlanMaker::RecomputeOnlyDraft PlanMaker::draft_without_offloads(std::span<const RecomputeDecision> chosen) const {
  AugmentedTrace augmented = build_augmented_trace(models_.trace, models_.recompute, chosen);
  StorageAccesses accesses(augmented.trace);
  const PeakBytes peak = unplanned_peak(augmented.trace, accesses);
  return RecomputeOnlyDraft{std::move(augmented), std::move(accesses), peak};
}

HybridPlan PlanMaker::finish_without_offloads(const RecomputeOnlyDraft& draft, std::string label) const {
  return finish_without_offloads(draft.augmented, draft.accesses, draft.peak, std::move(label));
}

HybridPlan PlanMaker::finish_without_offloads(const AugmentedTrace& augmented, const StorageAccesses& accesses,
                                              PeakBytes peak, std::string label) const {
  const std::vector<Action> actions = end_of_life_releases(augmented.trace, accesses);
  HybridPlan plan = without_copies(std::move(label), peak.bytes,
                                   peak.op >= 0 ? augmented.original_op[static_cast<std::size_t>(peak.op)] : -1,
                                   augmented.recompute_count, augmented.recompute_ms);
  plan.actions = map_back(augmented, actions);
  const std::optional<std::int64_t> cap = models_.memory_cap();
  if (cap && plan.peak_bytes > *cap) plan.time_ms = estimated_time_ms(plan.actions, plan.recompute_ms);
  return plan;
}

HybridPlan PlanMaker::without_copies(std::string label, std::int64_t peak_bytes, OpIndex peak_op,
                                     std::int64_t recompute_count, double recompute_ms) const {
  HybridPlan plan;
  plan.label = std::move(label);
  plan.peak_bytes = peak_bytes;
  plan.peak_op = peak_op;
  plan.recompute_count = recompute_count;
  plan.recompute_ms = recompute_ms;
  // Note [A plan without copies waits for nothing]: its releases are on the
  // compute stream and it has no copies, so on a device that holds its
  // op-granular peak no op waits for memory and the step player's stall is 0
  // (when this was written, played beside on the 28,830 such plans of the
  // plan and CLI tests and 280 CLI plans of the examples and corpus: 0 every
  // time; HybridPlannerProperty.ReRunsThatFitGiveThePeakPlannersPlanWithoutIt
  // keeps checking it). The walk costs a quarter of a draft on a 1M-op trace;
  // finish_without_offloads plays it only where the plan goes over the device.
  plan.time_ms = models_.trace.total_compute_ms() + recompute_ms;
  return plan;
}

void PlanMaker::make_deferred_actions(HybridPlan& plan) const {
  if (!plan.deferred_decisions) return;
  plan.actions = without_offloads(*plan.deferred_decisions, "").actions;
  plan.deferred_decisions.reset();
}

HybridPlan PlanMaker::without_offloads(std::span<const RecomputeDecision> chosen, std::string label) const {
  return finish_without_offloads(draft_without_offloads(chosen), std::move(label));
}

std::size_t PlanMaker::profile_fitting_length(const RecomputeSelection& sequence) const {
  const std::size_t total = sequence.decisions.size();
  std::size_t length = 0;
  while (length < total && sequence.peak_after[length] > models_.budget_bytes) ++length;
  return length < total ? length + 1 : total;  // with the decision that brought the profile within the budget
}

std::optional<PlanMaker::FittingPrefix> PlanMaker::shortest_fitting_prefix(
    const RecomputeSelection& sequence, std::optional<RecomputeOnlyDraft> first) const {
  const std::int64_t budget = models_.budget_bytes;
  const std::size_t total = sequence.decisions.size();
  std::size_t length = profile_fitting_length(sequence);
  std::size_t step = std::max<std::size_t>(1, length / 16);
  while (length < total) {
    RecomputeOnlyDraft prefix = first ? std::move(*first) : draft_without_offloads(sequence.prefix(length));
    first.reset();
    if (prefix.peak.bytes <= budget) return FittingPrefix{std::move(prefix), length};
    length = std::min(total, length + step);
    step *= 2;
  }
  RecomputeOnlyDraft whole = draft_without_offloads(sequence.decisions);
  if (whole.peak.bytes > budget) return std::nullopt;
  return FittingPrefix{std::move(whole), total};
}

HybridPlan PlanMaker::recompute_only(const RecomputeSelection& sequence) const {
  const std::size_t total = sequence.decisions.size();
  const std::size_t first_length = profile_fitting_length(sequence);
  auto made = [&](const RecomputeOnlyDraft& draft, UnavoidableFloor floor) {
    HybridPlan plan = finish_without_offloads(draft, "recompute-only");
    plan.floor = floor;
    plan.chain_work_cut = sequence.cut;
    return plan;
  };
  // The whole sequence is its own first prefix: one draft, its peak the floor.
  if (first_length == total) {
    const RecomputeOnlyDraft whole = draft_without_offloads(sequence.decisions);
    const PeakBytes peak = whole.peak;
    return made(whole, {peak.op >= 0 ? whole.augmented.original_op[static_cast<std::size_t>(peak.op)] : -1, peak.bytes});
  }
  // Note [The whole sequence beside its first prefix]: the whole sequence's
  // peak gives the floor and whether any prefix fits, without its augmented
  // trace (augmented_peak); the prefix at which the selection's profile fits
  // is the plan almost always. On a large trace the two are made at once, the
  // whole sequence's peak on a second thread (on the 1M-op chain the first
  // prefix's draft takes 0.2 s and the peak 0.1 s); on a small one, where a
  // thread costs more than it saves, one after the other.
  constexpr std::int64_t kMinWorkForTwoThreads = 100'000;  // ops + accesses; 10 ms a draft
  const Trace& trace = models_.trace;
  const auto whole_peak = [&] { return augmented_peak(trace, models_.recompute, sequence.decisions); };
  std::optional<RecomputeOnlyDraft> first;
  AugmentedPeak peak;
  if (static_cast<std::int64_t>(trace.op_count()) + static_cast<std::int64_t>(trace.access_count()) >=
      kMinWorkForTwoThreads) {
    std::future<AugmentedPeak> later = std::async(std::launch::async, whole_peak);
    first = draft_without_offloads(sequence.prefix(first_length));
    peak = later.get();
  } else {
    peak = whole_peak();
  }
  const UnavoidableFloor floor{peak.original_op, peak.bytes};
  if (peak.bytes > models_.budget_bytes) {
    first.reset();
    return made(draft_without_offloads(sequence.decisions), floor);  // below the floor: the whole sequence
  }
  // The whole sequence fits, so some prefix does.
  return made(shortest_fitting_prefix(sequence, std::move(first))->draft, floor);
}

std::size_t exclusion_evaluations(const Trace& trace) {
  const std::int64_t work = static_cast<std::int64_t>(trace.op_count()) + static_cast<std::int64_t>(trace.access_count());
  const std::int64_t evaluations = kExclusionSearchWork / std::max<std::int64_t>(work, 1);
  return evaluations < kMinExclusionEvaluations
             ? 0
             : static_cast<std::size_t>(std::min<std::int64_t>(evaluations, kMaxExclusionEvaluations));
}

std::optional<PlanMaker::ExcludingSequence> PlanMaker::with_fitting_prefix(RecomputeSelection sequence) const {
  std::optional<FittingPrefix> prefix = shortest_fitting_prefix(sequence);
  if (!prefix) return std::nullopt;
  return ExcludingSequence{std::move(sequence), std::move(*prefix)};
}

std::optional<HybridPlan> PlanMaker::recompute_only_excluding(const RecomputeSelection& sequence) const {
  std::size_t evaluations = exclusion_evaluations(models_.trace);
  if (evaluations == 0) return std::nullopt;
  std::vector<std::int32_t> excluded;
  std::optional<ExcludingSequence> current = with_fitting_prefix(sequence);
  --evaluations;  // the sequence it starts from counts as the first
  if (!current) return std::nullopt;
  HybridPlan best = finish_without_offloads(current->prefix.draft, "");
  best.chain_work_cut = current->sequence.cut;
  // First improvement: the first exclusion, in the order the prefix took its
  // candidates, that gives a quicker plan within the budget is kept, and the
  // search goes on from it.
  for (bool improved = true; improved && evaluations > 0;) {
    improved = false;
    for (std::size_t i = 0; i < current->prefix.length && evaluations > 0; ++i) {
      --evaluations;
      std::vector<std::int32_t> tried = excluded;
      tried.push_back(current->sequence.decisions[i].candidate);
      // The whole sequence, not one stopped at the budget: the selection
      // ranks by what a candidate frees of the excess over where it stops,
      // so stopping earlier would rank differently.
      std::optional<ExcludingSequence> other =
          with_fitting_prefix(recompute_only_sequence(RegenerationRule::kWhileThePeakAllows, false, tried));
      // Without copies a plan within the budget never waits for memory (its
      // releases are on the compute stream), so its step is the compute plus
      // its re-runs: one that re-runs no fewer ms is not quicker and is not
      // made whole.
      if (!other || other->prefix.draft.augmented.recompute_ms >= best.recompute_ms) continue;
      HybridPlan plan = finish_without_offloads(other->prefix.draft, "");
      if (plan.time_ms >= best.time_ms) continue;
      plan.chain_work_cut = other->sequence.cut;
      best = std::move(plan);
      excluded = std::move(tried);
      current = std::move(other);
      improved = true;
      break;
    }
  }
  best.label = fmt::format("recompute-only, {} candidate(s) excluded by a local search", excluded.size());
  return best;
}

RecomputeSelection PlanMaker::recompute_only_sequence(RegenerationRule regeneration, bool keep_dead_inputs,
                                                      std::span<const std::int32_t> excluded) const {
  return select_recomputes(models_.trace, models_.peak.resident_bytes, models_.recompute,
                           {kNoRatioLimit, 0, regeneration, keep_dead_inputs}, excluded);
}

HybridPlan PlanMaker::best_recompute_only() const {
  const RecomputeSelection sequence = recompute_only_sequence();
  return or_within_an_eighth(sequence, recompute_only(sequence));
}

bool PlanMaker::room_for_more_plans() const {
  constexpr std::int64_t kMaxSize = 250'000;  // where four plans or more can be made
  return static_cast<std::int64_t>(models_.trace.op_count()) + static_cast<std::int64_t>(models_.trace.access_count()) <=
         kMaxSize;
}

HybridPlan PlanMaker::or_within_an_eighth(const RecomputeSelection& sequence, HybridPlan plan) const {
  if (!room_for_more_plans()) return plan;
  const std::int64_t budget = models_.budget_bytes;
  HybridPlan other = recompute_only(recompute_only_sequence(RegenerationRule::kWithinAnEighth));
  UnavoidableFloor floor = plan.floor->bytes <= other.floor->bytes ? *plan.floor : *other.floor;
  const bool fits = plan.peak_bytes <= budget;
  const bool other_fits = other.peak_bytes <= budget;
  const bool take_other = other_fits ? !fits || other.time_ms < plan.time_ms
                                     : !fits && other.peak_bytes < plan.peak_bytes;
  HybridPlan chosen = take_other ? std::move(other) : std::move(plan);
  if (std::ranges::any_of(models_.recompute.candidates, &RecomputeCandidate::can_keep_inputs)) {
    HybridPlan kept = recompute_only(recompute_only_sequence(RegenerationRule::kWhileThePeakAllows, true));
    kept.label = "recompute-only, dead inputs kept where that pays";
    if (kept.floor->bytes < floor.bytes) floor = *kept.floor;
    if (better(kept, chosen, budget)) chosen = std::move(kept);
  }
  if (std::optional<HybridPlan> excluding = recompute_only_excluding(sequence)) {
    excluding->floor = floor;
    if (better(*excluding, chosen, budget)) chosen = std::move(*excluding);
  }
  // DTR's walk evicts and regenerates op by op, so it can go below the
  // decision sequences' floors where their greedy order gets stuck (a re-run
  // that needs what an earlier decision dropped; docs/HYBRID_PLANNER.md, "No
  // artificial floor"), and now and then it is quicker. One more plan, for
  // the cost of one walk.
  HybridPlan walk = walk_or_segments();
  if (walk.floor->bytes < floor.bytes) floor = *walk.floor;
  if (better(walk, chosen, budget)) chosen = std::move(walk);
  chosen.floor = floor;
  return chosen;
}

HybridPlan PlanMaker::walk_or_segments() const {
  HybridPlan walk = dtr_recompute_only();
  HybridPlan segments = segment_reruns();
  UnavoidableFloor floor = *walk.floor;
  if (segments.floor && segments.floor->bytes < floor.bytes) floor = *segments.floor;
  HybridPlan chosen = better(segments, walk, models_.budget_bytes) ? std::move(segments) : std::move(walk);
  chosen.floor = floor;
  return chosen;
}

HybridPlan PlanMaker::segment_reruns() const {
  const SegmentSearch::Best best = segments_.best(models_.trace, models_.recompute, models_.peak.resident_bytes,
                                                  models_.budget_bytes);
  if (!best.shape) {
    HybridPlan none;
    none.label = "recompute-only, segment re-runs";
    none.peak_bytes = std::numeric_limits<std::int64_t>::max();
    return none;
  }
  const SegmentSearch::Shape& shape = *best.shape;
  HybridPlan plan = without_offloads(
      shape.decisions, fmt::format("recompute-only, segment re-runs ({} of {} segments of equal {})", shape.dropped,
                                   shape.count, shape.balance == SegmentBalance::kBytes ? "bytes" : "compute"));
  plan.floor = UnavoidableFloor{best.floor.op, best.floor.bytes};
  return plan;
}

HybridPlan PlanMaker::dtr_recompute_only() const {
  HybridPlan chosen = dtr_walk(DtrHeuristic::kEquivalenceClasses);
  for (const DtrHeuristic heuristic :
       {DtrHeuristic::kLocal, DtrHeuristic::kNextUse, DtrHeuristic::kFarthestNextUse}) {
    HybridPlan other = dtr_walk(heuristic);
    if (better(other, chosen, models_.budget_bytes)) chosen = std::move(other);
  }
  return chosen;
}

HybridPlan PlanMaker::dtr_walk(DtrHeuristic heuristic) const {
  DtrPlan walk = plan_dtr(models_.trace, models_.budget_bytes, DtrOptions{.heuristic = heuristic});
  HybridPlan plan;
  switch (heuristic) {
    case DtrHeuristic::kEquivalenceClasses:
      plan.label = "recompute-only, DTR's eviction walk";
      break;
    case DtrHeuristic::kLocal:
      plan.label = "recompute-only, DTR's eviction walk with local costs";
      break;
    case DtrHeuristic::kNextUse:
      plan.label = "recompute-only, DTR's eviction walk by next use";
      break;
    case DtrHeuristic::kFarthestNextUse:
      plan.label = "recompute-only, eviction walk by furthest next use";
      break;
  }
  plan.peak_bytes = walk.result.planned_peak_bytes;
  plan.peak_op = walk.peak_op;
  plan.floor = UnavoidableFloor{walk.peak_op, walk.result.planned_peak_bytes};
  plan.recompute_count = walk.recompute_count;
  plan.recompute_ms = walk.recompute_ms;
  plan.actions = std::move(walk.result.schedule.actions);
  plan.time_ms = estimated_time_ms(plan.actions, plan.recompute_ms);
  if (walk.cut_op >= 0) plan.notes.push_back(std::move(walk.result.notes.back()));  // the cut (dtr_planner.h)
  return plan;
}

std::optional<RecomputeSelection> PlanMaker::recompute_only_sequence_if_it_can_fit() const {
  const std::int64_t budget = models_.budget_bytes;
  const std::vector<std::int64_t>& resident = models_.peak.resident_bytes;
  const auto ops = static_cast<std::size_t>(models_.trace.op_count());
  std::vector<std::int64_t> reducible_delta(ops + 1, 0);
  for (const RecomputeCandidate& c : models_.recompute.candidates) {
    reducible_delta[static_cast<std::size_t>(c.interior_first())] += c.size_bytes;
    reducible_delta[static_cast<std::size_t>(c.end_op)] -= c.size_bytes;
  }
  std::int64_t reducible = 0;
  for (std::size_t op = 0; op < ops; ++op) {
    reducible += reducible_delta[op];
    if (resident[op] - reducible > budget) return std::nullopt;
  }
  RecomputeSelection sequence = recompute_only_sequence();
  const std::int64_t lowest =
      sequence.peak_after.empty() ? *std::max_element(resident.begin(), resident.end()) : sequence.peak_after.back();
  if (lowest > budget) return std::nullopt;
  return sequence;
}

double PlanMaker::compute_and_reruns_ms(const RecomputeSelection& sequence) const {
  double ms = models_.trace.total_compute_ms();
  for (const RecomputeDecision& d : sequence.decisions) {
    ms += models_.recompute.candidates[static_cast<std::size_t>(d.candidate)].cost_ms;
  }
  return ms;
}

PeakPlannerOptions PlanMaker::around_recomputes() const {
  PeakPlannerOptions options = peak_options_;
  options.windows = CopyBackWindows::kBeforePlanning;
  return options;
}

PeakPlannerOptions PlanMaker::hiding_first() const {
  PeakPlannerOptions options = around_recomputes();
  options.weights = kHidingFirstWeights;
  options.ties = SelectionTies::kSmallestFirst;
  return options;
}

PeakPlannerOptions PlanMaker::least_lateness(PeakPlannerOptions options) {
  options.host_copies = HostCopySequencing::kLeastLateness;
  return options;
}

void PlanMaker::more_offload_only_plans(std::vector<HybridPlan>& plans) const {
  plans.push_back(offload_only(least_lateness(peak_options_), "offload-only, least-lateness copies to host"));
  plans.push_back(offload_only(around_recomputes(), "offload-only, copy-back windows"));
  plans.push_back(offload_only(hiding_first(), std::string(kHidingFirstLabel)));
  PeakPlannerOptions two_pass = hiding_first();
  two_pass.windows = CopyBackWindows::kAfterAFirstPass;
  plans.push_back(offload_only(two_pass, std::string(kHidingFirstLabel) + ", copy-back windows of a first pass"));
}

}  // namespace hyperoffload::internal
