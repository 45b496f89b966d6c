#include "hyperoffload/plan/hybrid_planner.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <ranges>
#include <thread>

#include <fmt/format.h>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/budget.h"
#include "hyperoffload/plan/internal/augmented_trace.h"
#include "hyperoffload/plan/internal/lower_budgets.h"
#include "hyperoffload/plan/internal/offload_step_bound.h"
#include "hyperoffload/plan/internal/peak_model.h"
#include "hyperoffload/plan/internal/peak_run.h"
#include "hyperoffload/plan/internal/recompute_model.h"
#include "hyperoffload/plan/internal/recompute_selection.h"
#include "hyperoffload/plan/internal/stall_estimate.h"

namespace hyperoffload {
namespace {

using internal::AugmentedTrace;
using internal::PeakModel;
using internal::RecomputeDecision;
using internal::RecomputeModel;
using internal::RecomputeSelection;

constexpr double kNoRatioLimit = std::numeric_limits<double>::infinity();
// With fewer plans than this to make, a decision set that lowers the peak by
// less than kNegligibleShare of the excess is not planned: its plan would be
// the offload-only plan's but for a few recomputes away from the peak.
constexpr std::size_t kScarceDecisionSets = 4;
constexpr double kNegligibleShare = 0.01;

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

// One decision set (hybrid_planner.h, step 2). Recompute candidates whose
// cost is at most `max_ratio` times the H2D time of their bytes, down to the
// budget plus `offload_share` of the bytes the copy engine can take off the
// device before the peak (its bandwidth times the compute before the peak op,
// at most the excess), which are left to the offloads. With offload_deadline
// > 0, the candidates that the copy engine can take off by that fraction of
// the compute before the peak are left to the offloads first
// (reserve_for_offload): the oldest data, which an offload can hide best.
struct DecisionParams {
  double max_ratio;
  double offload_share;
  double offload_deadline;

  friend bool operator==(const DecisionParams&, const DecisionParams&) = default;
};

// The first decision sets tried, in order; on a large trace only the first
// few are (HybridPlannerOptions::evaluation_budget), then the neighbours of the
// best are (see hybrid()). The order comes from the GPT presets at 30/50/70%
// on both devices (BENCHMARKS.md, "Hybrid planner"): the first has the lowest
// mean and worst-case gap to the best of the whole list when it is the only
// one tried; the next eight, added greedily, each close most of what the ones
// before leave; the rest vary one parameter at a time around them, and the
// last three cover the corner of the largest deadline (everything the copy
// engine can move in several steps' time left to the offloads) with cheap
// recomputes only: a dense sweep of the three parameters on the GPT-2 presets
// found its best plans there (gpt2-medium at 50% on unlimited memory: 6.5%
// overhead against 8.2% from the rest of the list).
constexpr DecisionParams kDecisionGrid[] = {
    {kNoRatioLimit, 0.0, 1.5}, {0.25, 0.0, 0.8}, {0.05, 0.5, 0.0},           {kNoRatioLimit, 0.5, 1.5},
    {kNoRatioLimit, 0.0, 3.0}, {kNoRatioLimit, 1.0, 0.0}, {kNoRatioLimit, 0.0, 5.0},  {kNoRatioLimit, 0.0, 2.0},
    {kNoRatioLimit, 0.25, 0.8}, {kNoRatioLimit, 0.0, 0.8}, {kNoRatioLimit, 0.0, 0.0}, {1.0, 0.5, 0.0},
    {kNoRatioLimit, 0.5, 0.0}, {0.1, 0.0, 0.0},           {kNoRatioLimit, 0.0, 1.0},  {0.25, 0.5, 0.0},
    {1.0, 0.0, 0.8},           {kNoRatioLimit, 0.0, 0.5}, {1.0, 0.0, 0.0},            {0.25, 0.0, 0.0},
    {0.05, 0.0, 0.0},          {1.0, 1.0, 0.0},           {0.1, 0.5, 0.0},            {0.25, 1.0, 0.0},
    {1.0, 0.0, 1.5},           {0.05, 0.0, 8.0},          {0.25, 0.0, 8.0},           {kNoRatioLimit, 0.0, 8.0},
};

// A plan for the original trace with what the choice between plans needs.
struct Candidate {
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
  bool stopped = false;  // its making was stopped: no plan (finish() passes it over)
  // The budget it was planned for, when that was a lower one (Note [Plans for
  // lower budgets]).
  std::int64_t planned_for_bytes = 0;
};

// Whether a beats b: fitting the budget first, then the quicker, then the
// lower peak; ties keep b (the one evaluated first).
bool better(const Candidate& a, const Candidate& b, std::int64_t budget) {
  const bool a_fits = a.peak_bytes <= budget;
  const bool b_fits = b.peak_bytes <= budget;
  if (a_fits != b_fits) return a_fits;
  if (!a_fits && a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
  if (a.time_ms != b.time_ms) return a.time_ms < b.time_ms;
  return a.peak_bytes < b.peak_bytes;
}

std::int64_t count_copies(std::span<const Action> actions) {
  std::int64_t copies = 0;
  for (const Action& action : actions) {
    copies += action.kind == ActionKind::kCopyD2H || action.kind == ActionKind::kCopyH2D ? 1 : 0;
  }
  return copies;
}

// Whether the offload-only plan is stopped once another plan is quicker than
// any offload-only plan can be (stop_offload_only_if_beaten).
enum class OffloadOnlyStop : std::uint8_t {
  kWhenBeaten,
  kNever,  // a plan for a lower budget: it is timed again at a larger one, where it may win
};

class HybridPlanning {
 public:
  HybridPlanning(const Trace& trace, const HybridPlannerOptions& options, std::int64_t budget,
                 OffloadOnlyStop offload_stop = OffloadOnlyStop::kWhenBeaten)
      : trace_(trace),
        options_(options),
        budget_(budget),
        accesses_(trace),
        model_build_(std::async(std::launch::async,
                                [this] { return internal::build_recompute_model(trace_, accesses_); })),
        peak_model_(internal::build_peak_model(trace, accesses_)),
        memory_cap_(options.peak.device_memory == DeviceMemory::kBudget ? std::optional<std::int64_t>(budget)
                                                                        : std::nullopt),
        offload_stop_rule_(offload_stop) {
    // The recompute model is built on a thread of its own while this one
    // builds the peak model. The offload-only plan goes on a second thread,
    // the largest single job. When the recompute-only plan can stop it
    // (offload_worker), that plan goes first on the same thread, which needs
    // the recompute model; otherwise the offload-only plan starts now.
    const bool offloads = options_.offload != OffloadUse::kRecomputeOnly;
    recompute_first_ = offloads && offload_only_bound_ms_ > trace_.total_compute_ms();
    if (offloads && !recompute_first_) offload_worker_ = std::jthread([this] { offload_worker(); });
    model_ = model_build_.get();
    if (recompute_first_) offload_worker_ = std::jthread([this] { offload_worker(); });
  }

  // The plan for the budget, or one of `lower` (plans made for lower budgets,
  // plans_for_larger_budgets, ascending) when it fits and is quicker here
  // (Note [Plans for lower budgets]).
  Result<PlanResult> run(std::string_view planner_name, std::vector<Candidate> lower) {
    PlanResult result;
    result.schedule.planner = std::string(planner_name);
    result.initial_peak_bytes = *std::max_element(peak_model_.resident_bytes.begin(), peak_model_.resident_bytes.end());
    Candidate chosen = choose(&result.floor);
    std::optional<std::int64_t> lower_budget;
    // From the largest budget down, and only when strictly quicker: among
    // plans equally quick, the one made for the largest budget (no lower
    // timed peak than a smaller budget's plan for no gain).
    for (Candidate& candidate : std::views::reverse(lower)) {
      candidate.time_ms = estimated_time_ms(candidate.actions, candidate.recompute_ms);
      const bool fits = candidate.peak_bytes <= budget_;
      if (fits && (chosen.peak_bytes > budget_ || candidate.time_ms < chosen.time_ms)) {
        lower_budget = candidate.planned_for_bytes;
        chosen = std::move(candidate);
      }
    }
    if (lower_budget) {
      chosen.notes.insert(chosen.notes.begin(),
                          fmt::format("the plan made for {} ({} bytes), a lower budget, is quicker within this one: "
                                      "estimated step {:.3f} ms; as planned there:",
                                      format_bytes(*lower_budget), *lower_budget, chosen.time_ms));
    }
    if (budget_ < result.floor->bytes) {
      result.notes.push_back(fmt::format(
          "budget {} ({} bytes) is below the floor of {} ({} bytes) at op {} ({}): the planned peak cannot go "
          "below the floor; planned as close to the budget as possible",
          format_bytes(budget_), budget_, format_bytes(result.floor->bytes), result.floor->bytes, result.floor->op,
          trace_.op_name(result.floor->op)));
    }
    result.notes.insert(result.notes.end(), chosen.notes.begin(), chosen.notes.end());
    result.planned_peak_bytes = chosen.peak_bytes;
    result.schedule.actions = std::move(chosen.actions);
    return result;
  }

  // The plans made here that a larger budget times again (Note [Plans for
  // lower budgets]): the chosen one and, when it is another, the offload-only
  // plan — which the peak planner also makes for this budget, so that the
  // hybrid plan stays at least as quick as the peak planner's.
  std::vector<Candidate> plans_for_larger_budgets() {
    std::optional<UnavoidableFloor> floor;
    std::vector<Candidate> plans;
    plans.push_back(choose(&floor));
    if (kept_offload_) plans.push_back(std::move(*kept_offload_));
    for (Candidate& plan : plans) plan.planned_for_bytes = budget_;
    return plans;
  }

 private:
  Candidate choose(std::optional<UnavoidableFloor>* floor) {
    if (options_.offload == OffloadUse::kRecomputeOnly) {
      Candidate chosen = recompute_only(recompute_only_sequence(), floor);
      chosen.notes.push_back(fmt::format("recompute: {} recompute(s) ({:.3f} ms); estimated step {:.3f} ms",
                                         chosen.recompute_count, chosen.recompute_ms, chosen.time_ms));
      return chosen;
    }
    return hybrid(floor);
  }

  // The step's time for a plan of the original trace: compute, the re-runs
  // and the stall, played with the simulator's rules (the estimate is exact
  // for valid, fault-free schedules, which every plan here is).
  double estimated_time_ms(std::span<const Action> actions, double recompute_ms) const {
    return trace_.total_compute_ms() + recompute_ms +
           internal::estimate_stall_ms(trace_, actions, memory_cap_);
  }

  // The peak planner on the trace itself, on the accesses and model built
  // here; its own stall estimate is the one estimated_time_ms would compute
  // (same schedule, trace and device).
  Candidate offload_only(const PeakPlannerOptions& options, std::string label, std::stop_token stop = {},
                         internal::PlacementThreads threads = internal::PlacementThreads::kTwo) const {
    Candidate candidate;
    candidate.label = std::move(label);
    internal::PeakRun run =
        internal::run_peak_planner(trace_, accesses_, peak_model_, options, budget_, {}, stop, threads);
    if (run.stopped) {
      candidate.stopped = true;
      return candidate;
    }
    PlanResult& plan = run.result;
    candidate.time_ms = trace_.total_compute_ms() + run.stall_ms;
    candidate.peak_bytes = plan.planned_peak_bytes;
    candidate.floor = plan.floor;
    candidate.actions = std::move(plan.schedule.actions);
    for (std::string& note : plan.notes) {
      if (note.find("boundary candidate") != std::string::npos) candidate.notes.push_back(std::move(note));
    }
    return candidate;
  }

  // Offloads planned around the recomputes of `chosen`: the peak planner on
  // the augmented trace, each of its schedules mapped back to the original
  // trace and timed there (so it picks its prefetch order by the schedule
  // that is used).
  Candidate with_offloads(std::span<const RecomputeDecision> chosen, std::string label,
                          const PeakPlannerOptions& options) const {
    const AugmentedTrace augmented = internal::build_augmented_trace(trace_, model_, chosen);
    const StorageAccesses accesses(augmented.trace);
    const PeakModel model = internal::build_peak_model(augmented.trace, accesses);
    const internal::ScheduleTimer timer = [&](std::vector<Action> actions) {
      internal::TimedSchedule timed{internal::map_back(augmented, actions), 0.0};
      timed.stall_ms = internal::estimate_stall_ms(trace_, timed.actions, memory_cap_);
      return timed;
    };
    internal::PeakRun run =
        internal::run_peak_planner(augmented.trace, accesses, model, options, budget_, timer);
    const PlanResult& plan = run.result;
    Candidate candidate;
    candidate.label = std::move(label);
    candidate.peak_bytes = plan.planned_peak_bytes;
    if (plan.floor) {
      candidate.floor =
          UnavoidableFloor{augmented.original_op[static_cast<std::size_t>(plan.floor->op)], plan.floor->bytes};
    }
    candidate.recompute_count = augmented.recompute_count;
    candidate.recompute_ms = augmented.recompute_ms;
    candidate.actions = std::move(run.result.schedule.actions);
    candidate.time_ms = trace_.total_compute_ms() + candidate.recompute_ms + run.stall_ms;
    return candidate;
  }

  // Releases after the last access and the recomputes of `chosen`, no copies.
  Candidate without_offloads(std::span<const RecomputeDecision> chosen, std::string label) const {
    const AugmentedTrace augmented = internal::build_augmented_trace(trace_, model_, chosen);
    const StorageAccesses accesses(augmented.trace);
    const std::vector<Action> actions = internal::end_of_life_releases(augmented.trace, accesses);
    Candidate candidate;
    candidate.label = std::move(label);
    const PeakBytes peak = unplanned_peak(augmented.trace, accesses);
    candidate.peak_bytes = peak.bytes;
    candidate.peak_op = peak.op >= 0 ? augmented.original_op[static_cast<std::size_t>(peak.op)] : -1;
    candidate.recompute_count = augmented.recompute_count;
    candidate.recompute_ms = augmented.recompute_ms;
    candidate.actions = internal::map_back(augmented, actions);
    candidate.time_ms = estimated_time_ms(candidate.actions, candidate.recompute_ms);
    return candidate;
  }

  // The recompute-only plan: the shortest prefix of the full decision sequence
  // whose peak over ops and recomputes fits the budget, found by trying the
  // prefix at which the selection's profile fits and then longer ones
  // (doubling the step); the full sequence is the floor.
  Candidate recompute_only(const RecomputeSelection& sequence, std::optional<UnavoidableFloor>* floor) const {
    Candidate full = without_offloads(sequence.decisions, "recompute-only");
    *floor = UnavoidableFloor{full.peak_op, full.peak_bytes};
    full.floor = *floor;
    if (full.peak_bytes > budget_) return full;
    const std::size_t total = sequence.decisions.size();
    std::size_t length = 0;
    while (length < total && sequence.peak_after[length] > budget_) ++length;
    if (length < total) ++length;  // the decision that brought the profile within the budget
    std::size_t step = std::max<std::size_t>(1, length / 16);
    while (length < total) {
      Candidate prefix = without_offloads(sequence.prefix(length), "recompute-only");
      prefix.floor = *floor;
      if (prefix.peak_bytes <= budget_) return prefix;
      length = std::min(total, length + step);
      step *= 2;
    }
    return full;
  }

  Candidate hybrid(std::optional<UnavoidableFloor>* floor) {
    // Every gap is an offload candidate, so the peak planner's floor is what
    // the ops touch plus the retained storages past their last access; a
    // plan's re-runs can lower it only there, and finish() reports the lowest
    // floor among the plans made.
    *floor = peak_model_.floor;
    if (model_.candidates.empty()) {
      // Small enough for several plans: the other offload-only plans too.
      std::vector<Candidate> others;
      if (plans_allowed() >= kScarceDecisionSets) more_offload_only_plans(others);
      offload_worker_.join();
      offload_.label = "offload-only (nothing recomputable)";
      return finish(std::move(offload_), std::move(others), floor);
    }
    // The recompute-only plan: first, here, unless it goes on the offload-only
    // plan's thread (offload_worker).
    if (!recompute_first_) {
      if (const std::optional<RecomputeSelection> sequence = recompute_only_sequence_if_it_can_fit()) {
        make_recompute_only(*sequence);
      }
    }
    std::vector<Candidate> candidates;
    search_decision_sets(candidates);
    offload_worker_.join();
    if (recompute_) candidates.insert(candidates.begin(), std::move(*recompute_));
    return finish(std::move(offload_), std::move(candidates), floor);
  }

  // The second thread: the offload-only plan, stopped once another plan beats
  // it (stop_offload_only_if_beaten). When the offload-only step bound is above
  // the compute, so that the recompute-only plan can stop it, that plan is made
  // here first when it looks quicker than the bound (the compute plus the
  // re-runs of its whole decision sequence, which the plan, a prefix of it,
  // rarely exceeds), and after the offload-only plan otherwise. Deep
  // transformers at tight budgets are the first case: the offload-only plan is
  // the longest job and hopeless, and running it beside the recompute-only
  // plan and the decision sets would slow both on two cores. The plan chosen
  // does not depend on the order (see stop_offload_only_if_beaten).
  void offload_worker() {
    std::optional<RecomputeSelection> sequence;
    if (recompute_first_ && !model_.candidates.empty()) {
      sequence = recompute_only_sequence_if_it_can_fit();
      if (sequence && compute_and_reruns_ms(*sequence) < offload_only_bound_ms_) {
        make_recompute_only(*sequence);
        sequence.reset();
      }
    }
    if (offload_stop_.stop_requested()) {
      offload_.stopped = true;
    } else {
      // One thread: the decision sets keep the other core busy, and their
      // runs are the longer path.
      offload_ = offload_only(options_.peak, "offload-only", offload_stop_.get_token(),
                              internal::PlacementThreads::kOne);
    }
    if (sequence) make_recompute_only(*sequence);
  }

  // The compute plus the re-runs of every decision of `sequence`.
  double compute_and_reruns_ms(const RecomputeSelection& sequence) const {
    double ms = trace_.total_compute_ms();
    for (const RecomputeDecision& d : sequence.decisions) {
      ms += model_.candidates[static_cast<std::size_t>(d.candidate)].cost_ms;
    }
    return ms;
  }

  // The recompute-only plan from its decision sequence
  // (recompute_only_sequence_if_it_can_fit), which may stop the offload-only
  // plan.
  void make_recompute_only(const RecomputeSelection& sequence) {
    std::optional<UnavoidableFloor> unused;
    Candidate candidate = recompute_only(sequence, &unused);
    candidate.recompute_only = true;
    stop_offload_only_if_beaten(candidate);
    recompute_ = std::move(candidate);
  }

  // Stops the offload-only plan (on its thread) once `candidate` fits the
  // budget and is quicker than any offload-only plan can be
  // (offload_step_bound.h): that plan could not win, so the plan chosen does not
  // depend on whether it finished first. On deep transformers at tight
  // budgets it is the longest job and many times slower than the plans with
  // recomputes. Thread-safe.
  void stop_offload_only_if_beaten(const Candidate& candidate) {
    if (offload_stop_rule_ == OffloadOnlyStop::kWhenBeaten && beats_offload_only(candidate)) {
      offload_stop_.request_stop();
    }
  }
  bool beats_offload_only(const Candidate& candidate) const {
    return candidate.peak_bytes <= budget_ && candidate.time_ms < offload_only_bound_ms_;
  }

  // How many decision-set plans the trace's size allows.
  std::size_t plans_allowed() const {
    const double work = static_cast<double>(trace_.op_count()) + static_cast<double>(trace_.access_count());
    return static_cast<std::size_t>(std::clamp(std::floor(options_.evaluation_budget / std::max(work, 1.0)), 1.0,
                                               static_cast<double>(std::max(1, options_.max_decision_sets))));
  }

  // The peak planner's options for the decision sets' offloads: the given
  // ones with the copy-back windows of the profile before planning (which
  // suit offloads planned around recomputes better on the GPT presets).
  PeakPlannerOptions around_recomputes() const {
    PeakPlannerOptions options = options_.peak;
    options.windows = CopyBackWindows::kBeforePlanning;
    return options;
  }

  // The peak planner's options for the hiding-first plans (kHidingFirstWeights).
  PeakPlannerOptions hiding_first() const {
    PeakPlannerOptions options = around_recomputes();
    options.weights = kHidingFirstWeights;
    options.ties = SelectionTies::kSmallestFirst;
    return options;
  }

  // The peak planner's options with the copies to host sequenced by least
  // lateness (HostCopySequencing).
  static PeakPlannerOptions least_lateness(PeakPlannerOptions options) {
    options.host_copies = HostCopySequencing::kLeastLateness;
    return options;
  }

  // The other offload-only plans of a small trace: the given weights with the
  // copies to host by least lateness and with the copy-back windows before
  // planning, and the hiding-first weights with those windows and with the
  // windows of a first selection pass (none is better on every trace).
  void more_offload_only_plans(std::vector<Candidate>& candidates) const {
    candidates.push_back(offload_only(least_lateness(options_.peak), "offload-only, least-lateness copies to host"));
    candidates.push_back(offload_only(around_recomputes(), "offload-only, copy-back windows"));
    candidates.push_back(offload_only(hiding_first(), std::string(kHidingFirstLabel)));
    PeakPlannerOptions two_pass = hiding_first();
    two_pass.windows = CopyBackWindows::kAfterAFirstPass;
    candidates.push_back(
        offload_only(two_pass, std::string(kHidingFirstLabel) + ", copy-back windows of a first pass"));
  }

  // Plans decision sets (hybrid_planner.h, step 4): the grid in order, then the
  // neighbours of the best while that improves it, within the evaluations the
  // trace's size allows.
  void search_decision_sets(std::vector<Candidate>& candidates) {
    const std::size_t sets = plans_allowed();
    DecisionSearch search;
    search.budget = budget_;
    search.scarce = sets < kScarceDecisionSets;
    // Selections are cheap next to plans, but not free on a large trace:
    // at most three per plan.
    const std::size_t tries = 3 * sets;
    for (const DecisionParams& params : kDecisionGrid) {
      if (search.plans.size() >= sets || search.tried.size() >= tries) break;
      evaluate(params, search);
    }
    // Refine around the best: half and double its ratio, a quarter more or
    // less of its share, a tenth more or less of its deadline.
    while (search.plans.size() < sets && search.tried.size() < tries && !search.plans.empty()) {
      const DecisionParams best = search.plans[search.best()].first;
      const double ratio = best.max_ratio;
      const double share = best.offload_share;
      const double deadline = best.offload_deadline;
      const DecisionParams neighbours[] = {
          {ratio == kNoRatioLimit ? 4.0 : ratio * 2.0, share, deadline},
          {ratio == kNoRatioLimit ? 2.0 : ratio / 2.0, share, deadline},
          {ratio, std::min(1.0, share + 0.25), deadline},
          {ratio, std::max(0.0, share - 0.25), deadline},
          {ratio, share, deadline + 0.1},
          {ratio, share, std::max(0.0, deadline - 0.1)},
      };
      const std::size_t best_before = search.best();
      for (const DecisionParams& params : neighbours) {
        if (search.plans.size() >= sets || search.tried.size() >= tries) break;
        evaluate(params, search);
      }
      if (search.best() == best_before) break;
    }
    // With room for more plans: the other offload-only plans, and the best
    // decision set's offloads with the hiding-first weights and with the
    // copies to host by least lateness.
    if (!search.scarce) {
      if (options_.peak.device_memory == DeviceMemory::kBudget) leave_the_oldest_to_offloads(candidates);
      more_offload_only_plans(candidates);
      if (!search.plans.empty()) {
        const DecisionParams best = search.plans[search.best()].first;
        const std::vector<RecomputeDecision> decisions = select(best).decisions;
        candidates.push_back(with_offloads(decisions, decision_label(best) + ", hidden copies first", hiding_first()));
        candidates.push_back(with_offloads(decisions, decision_label(best) + ", least-lateness copies to host",
                                           least_lateness(around_recomputes())));
      }
    }
    for (auto& [params, candidate] : search.plans) candidates.push_back(std::move(candidate));
  }

  // The decision sets for a device that holds only the budget, made where
  // there is room for several plans: the candidates that the copy engine can
  // take off by kOldestDeadlines of the compute before the peak
  // (reserve_for_offload) are left to the offloads — not recomputed, and the
  // recomputes stop that many bytes above the budget — and the offloads are
  // planned with HostCopyDeadline::kBeforePeak, so that the peak planner takes
  // data whose copy to host ends before the memory is needed. Without that it
  // offloads late activations that the copy engine cannot take off in time, and
  // the capped device waits for them (gpt2-medium at 50%: 2.7 ms of waiting
  // for one layer's attention probabilities copied after op 232; with these
  // sets the first five layers' MLP activations, the costliest to re-run per
  // byte, are offloaded instead, fewer attention probabilities are re-run, and
  // the step is 1.2 ms quicker than the best plan without them). Each with the
  // given weights and with the hiding-first ones.
  static constexpr double kOldestDeadlines[] = {0.5, 0.8, 1.0};
  void leave_the_oldest_to_offloads(std::vector<Candidate>& candidates) const {
    PeakPlannerOptions options = around_recomputes();
    options.host_copy_deadline = HostCopyDeadline::kBeforePeak;
    PeakPlannerOptions hidden_first = hiding_first();
    hidden_first.host_copy_deadline = HostCopyDeadline::kBeforePeak;
    std::vector<std::int32_t> previous;
    for (const double deadline : kOldestDeadlines) {
      const std::vector<std::int32_t> reserved =
          internal::reserve_for_offload(trace_, model_, peak_op_, deadline * compute_before_peak_ms_);
      if (reserved.empty() || reserved == previous) continue;
      previous = reserved;
      std::int64_t reserved_bytes = 0;
      for (const std::int32_t g : reserved) reserved_bytes += model_.candidates[static_cast<std::size_t>(g)].size_bytes;
      const RecomputeSelection selection = internal::select_recomputes(
          trace_, peak_model_.resident_bytes, model_, {kNoRatioLimit, budget_ + reserved_bytes}, reserved);
      if (selection.decisions.empty()) continue;
      const std::string label =
          fmt::format("recompute at any cost except what the copy engine can move by {:.0f}% of the time before "
                      "the peak, offload that, copies to host by the peak",
                      100.0 * deadline);
      candidates.push_back(with_offloads(selection.decisions, label, options));
      candidates.push_back(with_offloads(selection.decisions, label + ", hidden copies first", hidden_first));
    }
  }

  // Decision sets tried so far, the decisions already planned (different
  // parameters can give the same decisions) and the plans made.
  struct DecisionSearch {
    std::vector<DecisionParams> tried;
    std::vector<std::vector<std::pair<std::int32_t, OpIndex>>> seen;
    std::vector<std::pair<DecisionParams, Candidate>> plans;
    std::int64_t budget = 0;
    // Few plans can be made (a large trace): skip decision sets that barely
    // lower the peak, whose plans would be the offload-only plan's.
    bool scarce = false;

    std::size_t best() const {
      std::size_t best = 0;
      for (std::size_t i = 1; i < plans.size(); ++i) {
        if (better(plans[i].second, plans[best].second, budget)) best = i;
      }
      return best;
    }
  };

  // The unplanned profile's peak op, and the compute before it, in ms.
  OpIndex peak_op() const {
    const auto& resident = peak_model_.resident_bytes;
    return static_cast<OpIndex>(std::max_element(resident.begin(), resident.end()) - resident.begin());
  }
  double compute_before_peak_ms() const {
    double before_ms = 0.0;
    for (OpIndex op = 0; op < peak_op_; ++op) before_ms += trace_.op_duration_ms(op);
    return before_ms;
  }
  // Bytes the copy engine can take off the device before the peak op, at most
  // the excess.
  std::int64_t offloadable_at_peak() const {
    const double bytes =
        compute_before_peak_ms_ / 1e3 * trace_.d2h_bandwidth_gib_per_s() * static_cast<double>(kBytesPerGiB);
    const std::int64_t excess = peak_model_.resident_bytes[static_cast<std::size_t>(peak_op_)] - budget_;
    return static_cast<std::int64_t>(std::min(bytes, static_cast<double>(std::max<std::int64_t>(0, excess))));
  }

  // The recompute decisions of `params` (DecisionParams).
  RecomputeSelection select(const DecisionParams& params) const {
    const std::vector<std::int32_t> reserved =
        params.offload_deadline > 0.0
            ? internal::reserve_for_offload(trace_, model_, peak_op_, params.offload_deadline * compute_before_peak_ms_)
            : std::vector<std::int32_t>{};
    const std::int64_t target =
        budget_ + static_cast<std::int64_t>(params.offload_share * static_cast<double>(offloadable_at_peak_));
    return internal::select_recomputes(trace_, peak_model_.resident_bytes, model_, {params.max_ratio, target},
                                       reserved);
  }

  // Plans the decision set of `params` unless it was tried or gives decisions
  // already planned.
  void evaluate(const DecisionParams& params, DecisionSearch& search) {
    if (std::find(search.tried.begin(), search.tried.end(), params) != search.tried.end()) return;
    search.tried.push_back(params);
    const RecomputeSelection selection = select(params);
    const std::vector<RecomputeDecision>& chosen = selection.decisions;
    if (search.scarce && !selection.peak_after.empty()) {
      const std::int64_t unplanned = peak_model_.resident_bytes[static_cast<std::size_t>(peak_op_)];
      const double lowered = static_cast<double>(unplanned - selection.peak_after.back());
      if (lowered < kNegligibleShare * static_cast<double>(unplanned - budget_)) return;
    }
    std::vector<std::pair<std::int32_t, OpIndex>> key;
    key.reserve(chosen.size());
    for (const RecomputeDecision& d : chosen) key.push_back({d.candidate, d.regenerate_before});
    std::sort(key.begin(), key.end());
    if (key.empty() || std::find(search.seen.begin(), search.seen.end(), key) != search.seen.end()) return;
    search.seen.push_back(std::move(key));
    search.plans.push_back({params, with_offloads(chosen, decision_label(params), around_recomputes())});
    stop_offload_only_if_beaten(search.plans.back().second);
  }

  static std::string decision_label(const DecisionParams& params) {
    std::string label = params.max_ratio == kNoRatioLimit
                            ? std::string("recompute at any cost")
                            : fmt::format("recompute what costs at most {}x its copy back", params.max_ratio);
    if (params.offload_deadline > 0.0) {
      label += fmt::format(" except what the copy engine can move by {:.0f}% of the time before the peak",
                           100.0 * params.offload_deadline);
    }
    if (params.offload_share > 0.0) {
      label += fmt::format(", down to {:.0f}% of what it can move before the peak above the budget",
                           100.0 * params.offload_share);
    }
    return label + ", offload the rest";
  }

  RecomputeSelection recompute_only_sequence() const {
    return internal::select_recomputes(trace_, peak_model_.resident_bytes, model_, {kNoRatioLimit, 0});
  }

  // The recompute-only plan's decision sequence when the plan can fit the
  // budget. At real ops the augmented trace holds exactly the selection's
  // profile (re-runs can only add), which never goes below the resident bytes
  // less every candidate covering the op; so when that is above the budget
  // somewhere, or the sequence's profile ends above it, the plan cannot fit
  // and is not made.
  std::optional<RecomputeSelection> recompute_only_sequence_if_it_can_fit() const {
    const auto ops = static_cast<std::size_t>(trace_.op_count());
    std::vector<std::int64_t> reducible_delta(ops + 1, 0);
    for (const internal::RecomputeCandidate& c : model_.candidates) {
      reducible_delta[static_cast<std::size_t>(c.interior_first())] += c.size_bytes;
      reducible_delta[static_cast<std::size_t>(c.end_op)] -= c.size_bytes;
    }
    std::int64_t reducible = 0;
    for (std::size_t op = 0; op < ops; ++op) {
      reducible += reducible_delta[op];
      if (peak_model_.resident_bytes[op] - reducible > budget_) return std::nullopt;
    }
    RecomputeSelection sequence = recompute_only_sequence();
    const std::vector<std::int64_t>& resident = peak_model_.resident_bytes;
    const std::int64_t lowest = sequence.peak_after.empty() ? *std::max_element(resident.begin(), resident.end())
                                                            : sequence.peak_after.back();
    if (lowest > budget_) return std::nullopt;
    return sequence;
  }

  // The best of the offload-only plan and `others`, with a note on how it was
  // chosen; lowers `floor` to the lowest floor among them (a budget at or above
  // it is met by that plan, so by the best).
  Candidate finish(Candidate offload, std::vector<Candidate> others, std::optional<UnavoidableFloor>* floor) {
    // An offload-only plan that another plan beats is passed over as though
    // stopped, whether or not its thread was stopped in time, so the notes do
    // not depend on the threads' timing either.
    if (offload_stop_rule_ == OffloadOnlyStop::kNever && !offload.stopped) kept_offload_ = offload;
    if (std::any_of(others.begin(), others.end(),
                    [&](const Candidate& candidate) { return beats_offload_only(candidate); })) {
      offload.stopped = true;
      offload.floor.reset();
    }
    const std::size_t evaluated = others.size() + (offload.stopped ? 0 : 1);
    auto lower = [&](const Candidate& candidate) {
      if (candidate.floor && (!*floor || candidate.floor->bytes < (*floor)->bytes)) *floor = candidate.floor;
    };
    lower(offload);
    for (const Candidate& candidate : others) lower(candidate);
    // A stopped offload-only plan was beaten by one of `others`.
    std::string comparison =
        offload.stopped
            ? fmt::format("offload-only stopped: no offload-only plan takes less than {:.3f} ms", offload_only_bound_ms_)
            : fmt::format("offload-only {:.3f} ms", offload.time_ms);
    double recompute_only_ms = -1.0;
    Candidate best = std::move(offload);
    for (Candidate& candidate : others) {
      if (candidate.recompute_only && candidate.peak_bytes <= budget_) recompute_only_ms = candidate.time_ms;
      if (best.stopped || better(candidate, best, budget_)) best = std::move(candidate);
    }
    if (recompute_only_ms >= 0.0) comparison += fmt::format(", recompute-only {:.3f} ms", recompute_only_ms);
    best.notes.push_back(fmt::format(
        "hybrid: {} recompute(s) ({:.3f} ms) and {} copies: {}; estimated step {:.3f} ms, the best of {} plan(s) "
        "({})",
        best.recompute_count, best.recompute_ms, count_copies(best.actions), best.label, best.time_ms, evaluated,
        comparison));
    return best;
  }

  const Trace& trace_;
  const HybridPlannerOptions& options_;
  std::int64_t budget_;
  const StorageAccesses accesses_;
  std::future<RecomputeModel> model_build_;  // taken into model_ in the constructor
  const PeakModel peak_model_;
  std::optional<std::int64_t> memory_cap_;
  OffloadOnlyStop offload_stop_rule_;
  // With OffloadOnlyStop::kNever: the offload-only plan, kept by finish().
  std::optional<Candidate> kept_offload_;
  OpIndex peak_op_ = peak_op();
  double compute_before_peak_ms_ = compute_before_peak_ms();
  std::int64_t offloadable_at_peak_ = offloadable_at_peak();
  // The least step time of any offload-only plan (offload_step_bound.h).
  double offload_only_bound_ms_ = internal::offload_only_step_bound_ms(
      trace_, accesses_, peak_model_.resident_bytes, budget_, options_.peak.device_memory);
  RecomputeModel model_;  // built in the constructor, read-only after it
  // Whether the recompute-only plan is made on the offload-only plan's thread
  // (offload_worker).
  bool recompute_first_ = false;
  std::stop_source offload_stop_;
  // Written by offload_worker_ (recompute_ also by the planning thread when
  // recompute_first_ is false), read after joining it.
  Candidate offload_;
  std::optional<Candidate> recompute_;
  std::jthread offload_worker_;  // last: joined before the rest is destroyed
};

}  // namespace

Result<PlanResult> HybridPlanner::plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const {
  if (trace.op_count() == 0 || !budget_bytes) {
    PlanResult result;
    result.schedule.planner = std::string(name());
    return result;
  }
  // Note [Plans for lower budgets]: the plans of the rungs below the budget,
  // each made as at its rung, are timed at the budget with the plans made for it.
  std::vector<Candidate> lower;
  if (options_.lower_budgets == LowerBudgetPlans::kRungs && internal::lower_budget_plans_fit(trace)) {
    const UnavoidableFloor floor = offload_floor(trace);
    for (const std::int64_t rung : internal::lower_budgets(trace, floor.bytes, unplanned_peak(trace).bytes, *budget_bytes)) {
      std::vector<Candidate> plans = HybridPlanning(trace, options_, rung, OffloadOnlyStop::kNever).plans_for_larger_budgets();
      for (Candidate& plan : plans) lower.push_back(std::move(plan));
    }
  }
  return HybridPlanning(trace, options_, *budget_bytes).run(name(), std::move(lower));
}

}  // namespace hyperoffload
