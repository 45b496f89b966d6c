#include "hyperoffload/plan/hybrid/decision_search.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace hyperoffload::internal {
namespace {

// See kScarceDecisionSets.
constexpr double kNegligibleShare = 0.01;

// One decision set. Recompute candidates whose cost is at most `max_ratio`
// times the H2D time of their bytes, down to the budget plus `offload_share`
// of the bytes the copy engine can take off the device before the peak (its
// bandwidth times the compute before the peak op, at most the excess), which
// are left to the offloads. With offload_deadline > 0, the candidates that the
// copy engine can take off by that fraction of the compute before the peak are
// left to the offloads first (reserve_for_offload): the oldest data, which an
// offload can hide best.
struct DecisionParams {
  double max_ratio;
  double offload_share;
  double offload_deadline;

  friend bool operator==(const DecisionParams&, const DecisionParams&) = default;
};

// The first decision sets tried, in order; on a large trace only the first
// few are (HybridPlannerOptions::evaluation_budget), then the neighbours of the
// best are (see search_decision_sets). The order comes from the GPT presets at
// 30/50/70% on both devices (BENCHMARKS.md, "Hybrid planner"): the first has
// the lowest mean and worst-case gap to the best of the whole list when it is
// the only one tried; the next eight, added greedily, each close most of what
// the ones before leave; the rest vary one parameter at a time around them,
// and the last three cover the corner of the largest deadline (everything the
// copy engine can move in several steps' time left to the offloads) with cheap
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

// The deadlines of the decision sets that leave the oldest data to offloads
// on a capped device (DecisionSearch::leave_the_oldest_to_offloads).
constexpr double kOldestDeadlines[] = {0.5, 0.8, 1.0};

std::string decision_label(const DecisionParams& params) {
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

// One search: the decision sets tried so far, the decisions already planned
// (different parameters can give the same decisions) and the plans made.
class DecisionSearch {
 public:
  DecisionSearch(const PlanMaker& maker, std::size_t sets, PlansThatCannotWin cannot_win, const OnPlan& on_plan)
      : maker_(maker),
        models_(maker.models()),
        sets_(sets),
        // Selections are cheap next to plans, but not free on a large trace:
        // at most three per plan.
        tries_(3 * sets),
        // Few plans can be made (a large trace): skip decision sets that
        // barely lower the peak, whose plans would be the offload-only plan's.
        scarce_(sets < kScarceDecisionSets),
        skip_(cannot_win == PlansThatCannotWin::kSkip),
        on_plan_(on_plan) {}

  std::vector<HybridPlan> run() {
    std::vector<HybridPlan> plans;
    for (const DecisionParams& params : kDecisionGrid) {
      if (!room()) break;
      evaluate(params);
    }
    // Refine around the best: half and double its ratio, a quarter more or
    // less of its share, a tenth more or less of its deadline.
    while (room() && !plans_.empty()) {
      const DecisionParams best = plans_[best_index()].first;
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
      const std::size_t best_before = best_index();
      for (const DecisionParams& params : neighbours) {
        if (!room()) break;
        evaluate(params);
      }
      if (best_index() == best_before) break;
    }
    // With room for more plans: the other offload-only plans, and the best
    // decision set's offloads with the hiding-first weights and with the
    // copies to host by least lateness.
    if (!scarce_) {
      if (models_.device_memory == DeviceMemory::kBudget) leave_the_oldest_to_offloads(plans);
      // Not when a plan made here beats every offload-only plan: none of
      // them could be chosen (offload_step_bound.h), as the offload-only
      // plan is stopped then (plan_portfolio.h).
      if (quickest_ms_ >= models_.offload_only_bound_ms) maker_.more_offload_only_plans(plans);
      if (!plans_.empty()) {
        const DecisionParams best = plans_[best_index()].first;
        const std::vector<RecomputeDecision> decisions = select(best).decisions;
        made(plans, maker_.with_offloads(decisions, decision_label(best) + ", hidden copies first",
                                         maker_.hiding_first(), quickest_ms_));
        made(plans, maker_.with_offloads(decisions, decision_label(best) + ", least-lateness copies to host",
                                         PlanMaker::least_lateness(maker_.around_recomputes()), quickest_ms_));
      }
    }
    for (auto& [params, plan] : plans_) plans.push_back(std::move(plan));
    return plans;
  }

 private:
  bool room() const { return plans_.size() < sets_ && tried_.size() < tries_; }

  // Note [Plans ruled out by their re-runs]. A plan's step is its compute,
  // its re-runs and its stall, and the stall is never negative, so a plan
  // whose re-runs alone make it slower than one already made cannot be
  // chosen: with_offloads is given the quickest step made so far here and
  // does not run the peak planner for it (the costliest part of a plan). The
  // search goes on as if it had been made: a ruled-out decision set still
  // counts towards room() and is never the best that the neighbours are
  // taken around (strictly slower than one made), so the same decision sets
  // are tried and the same plan is chosen as when every plan is made. Only
  // plans made in this search set the threshold, in the search's own order,
  // so which plans are ruled out does not depend on the offload-only
  // plan's thread. The other offload-only plans are left unmade by the same
  // rule that stops the offload-only plan (beats_offload_only). On the
  // built-in demo at 50%, of the 27 plans made before, 9 are ruled out here
  // and the 4 other offload-only plans left unmade (and the recompute-only
  // family, by Note [The recompute-only plan after the decision sets]:
  // BENCHMARKS.md, "Plans ruled out by their re-runs").
  void made(std::vector<HybridPlan>& plans, HybridPlan plan) {
    note_made(plan);
    plans.push_back(std::move(plan));
  }
  void note_made(const HybridPlan& plan) {
    if (skip_ && !plan.ruled_out && plan.peak_bytes <= models_.budget_bytes) {
      quickest_ms_ = std::min(quickest_ms_, plan.time_ms);
    }
  }

  std::size_t best_index() const {
    std::size_t best = 0;
    for (std::size_t i = 1; i < plans_.size(); ++i) {
      if (better(plans_[i].second, plans_[best].second, models_.budget_bytes)) best = i;
    }
    return best;
  }

  // The candidates left to the offloads at `deadline` (a fraction of the
  // compute before the peak; reserve_for_offload), each deadline computed
  // once: the decision sets repeat a few deadlines many times.
  const std::vector<std::int32_t>& reserved_at(double deadline) {
    for (const auto& [at, reserved] : reserved_) {
      if (at == deadline) return reserved;
    }
    reserved_.emplace_back(deadline, reserve_for_offload(models_.trace, models_.recompute, models_.peak_op,
                                                         deadline * models_.compute_before_peak_ms));
    return reserved_.back().second;
  }

  // The recompute decisions of `params` (DecisionParams).
  RecomputeSelection select(const DecisionParams& params) {
    static const std::vector<std::int32_t> kNone;
    const std::vector<std::int32_t>& reserved =
        params.offload_deadline > 0.0 ? reserved_at(params.offload_deadline) : kNone;
    const std::int64_t target =
        models_.budget_bytes +
        static_cast<std::int64_t>(params.offload_share * static_cast<double>(models_.offloadable_at_peak));
    return select_recomputes(models_.trace, models_.peak.resident_bytes, models_.recompute,
                             {params.max_ratio, target}, reserved);
  }

  // Plans the decision set of `params` unless it was tried or gives decisions
  // already planned.
  void evaluate(const DecisionParams& params) {
    if (std::find(tried_.begin(), tried_.end(), params) != tried_.end()) return;
    tried_.push_back(params);
    const RecomputeSelection selection = select(params);
    const std::vector<RecomputeDecision>& chosen = selection.decisions;
    if (scarce_ && !selection.peak_after.empty()) {
      const std::int64_t unplanned = models_.peak.resident_bytes[static_cast<std::size_t>(models_.peak_op)];
      const double lowered = static_cast<double>(unplanned - selection.peak_after.back());
      if (lowered < kNegligibleShare * static_cast<double>(unplanned - models_.budget_bytes)) return;
    }
    std::vector<std::pair<std::int32_t, OpIndex>> key;
    key.reserve(chosen.size());
    for (const RecomputeDecision& d : chosen) key.push_back({d.candidate, d.regenerate_before});
    std::sort(key.begin(), key.end());
    if (key.empty() || std::find(seen_.begin(), seen_.end(), key) != seen_.end()) return;
    seen_.push_back(std::move(key));
    plans_.push_back(
        {params, maker_.with_offloads(chosen, decision_label(params), maker_.around_recomputes(), quickest_ms_)});
    HybridPlan& plan = plans_.back().second;
    plan.chain_work_cut = selection.cut;
    note_made(plan);
    if (!plan.ruled_out) on_plan_(plan);
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
  void leave_the_oldest_to_offloads(std::vector<HybridPlan>& plans) {
    PeakPlannerOptions options = maker_.around_recomputes();
    options.host_copy_deadline = HostCopyDeadline::kBeforePeak;
    PeakPlannerOptions hidden_first = maker_.hiding_first();
    hidden_first.host_copy_deadline = HostCopyDeadline::kBeforePeak;
    const std::vector<std::int32_t>* previous = nullptr;
    for (const double deadline : kOldestDeadlines) {
      const std::vector<std::int32_t>& reserved = reserved_at(deadline);
      if (reserved.empty() || (previous != nullptr && reserved == *previous)) continue;
      previous = &reserved;
      std::int64_t reserved_bytes = 0;
      for (const std::int32_t g : reserved) {
        reserved_bytes += models_.recompute.candidates[static_cast<std::size_t>(g)].size_bytes;
      }
      const RecomputeSelection selection =
          select_recomputes(models_.trace, models_.peak.resident_bytes, models_.recompute,
                            {kNoRatioLimit, models_.budget_bytes + reserved_bytes}, reserved);
      if (selection.decisions.empty()) continue;
      const std::string label =
          fmt::format("recompute at any cost except what the copy engine can move by {:.0f}% of the time before "
                      "the peak, offload that, copies to host by the peak",
                      100.0 * deadline);
      made(plans, maker_.with_offloads(selection.decisions, label, options, quickest_ms_));
      made(plans, maker_.with_offloads(selection.decisions, label + ", hidden copies first", hidden_first,
                                       quickest_ms_));
      plans[plans.size() - 2].chain_work_cut = plans.back().chain_work_cut = selection.cut;
    }
  }

  const PlanMaker& maker_;
  const HybridModels& models_;
  const std::size_t sets_;
  const std::size_t tries_;
  const bool scarce_;
  const bool skip_;  // PlansThatCannotWin::kSkip: quickest_ms_ stays infinite otherwise
  const OnPlan& on_plan_;
  std::vector<DecisionParams> tried_;
  std::vector<std::vector<std::pair<std::int32_t, OpIndex>>> seen_;
  std::vector<std::pair<DecisionParams, HybridPlan>> plans_;
  // reserved_at's deadlines and what they leave to the offloads; a deque, so
  // a reference it returned stays valid.
  std::deque<std::pair<double, std::vector<std::int32_t>>> reserved_;
  // The quickest step among the plans made here that fit the budget (Note
  // [Plans ruled out by their re-runs]).
  double quickest_ms_ = std::numeric_limits<double>::infinity();
};

}  // namespace

std::size_t plans_allowed(const Trace& trace, const HybridPlannerOptions& options) {
  const double work = static_cast<double>(trace.op_count()) + static_cast<double>(trace.access_count());
  return static_cast<std::size_t>(std::clamp(std::floor(options.evaluation_budget / std::max(work, 1.0)), 1.0,
                                             static_cast<double>(std::max(1, options.max_decision_sets))));
}

std::vector<HybridPlan> search_decision_sets(const PlanMaker& maker, const HybridPlannerOptions& options,
                                             const OnPlan& on_plan) {
  return DecisionSearch(maker, plans_allowed(maker.models().trace, options), options.cannot_win, on_plan).run();
}

}  // namespace hyperoffload::internal
