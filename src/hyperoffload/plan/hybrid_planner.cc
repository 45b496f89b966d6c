#include "hyperoffload/plan/hybrid_planner.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/common/lower_budgets.h"
#include "hyperoffload/plan/common/overhead_bound.h"
#include "hyperoffload/plan/hybrid/decision_search.h"
#include "hyperoffload/plan/hybrid/hybrid_models.h"
#include "hyperoffload/plan/hybrid/hybrid_plans.h"
#include "hyperoffload/plan/hybrid/plan_portfolio.h"
#include "hyperoffload/plan/hybrid/segment_search.h"

namespace hyperoffload {
namespace {

using internal::HybridPlan;
using internal::OffloadOnlyStop;
using internal::RecomputeSelection;

// The orchestrator: plans a trace at one budget, in the order of
// hybrid_planner.h's steps, with the parts of the hybrid planner —
// internal::HybridModels (what the plans are made from), internal::PlanMaker
// (how each kind of plan is made), internal::search_decision_sets (which
// decision sets to plan) and the portfolio (plan_portfolio.h: which plan wins,
// and the notes). It owns the threads: the recompute model is built beside
// the peak model (in HybridModels), and the offload-only plan is made on a
// second thread beside the decision sets and stopped once another plan beats
// any offload-only plan; run() makes the lower budgets' rungs on threads of
// their own (Note [Rungs beside the plan], lower_budgets.h).
class HybridPlanning {
 public:
  // `segments`: the segment plans measured for the trace so far, which the
  // plans of the lower budgets' rungs share with the plan at the budget.
  HybridPlanning(const Trace& trace, const HybridPlannerOptions& options, std::int64_t budget,
                 std::shared_ptr<internal::SegmentSearch> segments,
                 OffloadOnlyStop offload_stop = OffloadOnlyStop::kWhenBeaten)
      : options_(options),
        segments_(std::move(segments)),
        models_(trace, options.peak.device_memory, budget),
        maker_(models_, options.peak, *segments_),
        offload_stop_rule_(offload_stop) {
    // 1. The models: the accesses, then the recompute model on a thread of
    //    its own while this one built the peak model and the peak's facts
    //    (HybridModels' constructor).
    // 2. The offload-only plan goes on a second thread, the largest single
    //    job. When the recompute-only plan can stop it (offload_worker), that
    //    plan goes first on the same thread, which needs the recompute model;
    //    otherwise the offload-only plan starts now, beside the recompute
    //    model's build. On a trace with room for several plans the
    //    recompute-only plan comes after the decision sets instead (Note [The
    //    recompute-only plan after the decision sets]).
    const bool offloads = options_.offload != OffloadUse::kRecomputeOnly;
    defer_recompute_only_ =
        offloads && options_.cannot_win == PlansThatCannotWin::kSkip && maker_.room_for_more_plans();
    recompute_first_ =
        offloads && !defer_recompute_only_ && models_.offload_only_bound_ms > trace.total_compute_ms();
    if (offloads && !recompute_first_) offload_worker_ = std::jthread([this] { offload_worker(); });
    // 3. The recompute model, which everything below reads.
    models_.wait_for_recompute_model();
    if (recompute_first_) offload_worker_ = std::jthread([this] { offload_worker(); });
  }

  // The plan for the budget, or one made for a lower budget, `rungs`
  // (ascending), when it fits and is quicker here (Note [Plans for lower
  // budgets]). The rungs go from the largest down, each planned only when a
  // plan within it could be quicker than the best so far.
  PlanResult run(std::string_view planner_name, const Trace& trace, std::span<const std::int64_t> rungs) {
    // Note [Rungs beside the plan] (lower_budgets.h): the rungs' plans are
    // made on threads of their own, up to rungs_beside() ahead, while the plan
    // at the budget and the rungs above them are made; each is taken or
    // passed over in order, as if made one after the other.
    const auto plan_rung = [this, &trace](std::int64_t rung) {
      return std::async(std::launch::async, [this, &trace, rung] {
        return HybridPlanning(trace, options_, rung, segments_, OffloadOnlyStop::kNever).plans_for_larger_budgets();
      });
    };
    const std::vector<std::int64_t> order(rungs.rbegin(), rungs.rend());  // the largest first
    std::vector<std::future<std::vector<HybridPlan>>> made(order.size());
    if (!made.empty()) made.front() = plan_rung(order.front());  // beside the plan at the budget
    std::optional<UnavoidableFloor> floor;
    HybridPlan chosen = choose(floor);
    // Whether the best so far rules out rung i; its bound, which does not
    // depend on the best, is computed once.
    std::vector<std::optional<std::optional<double>>> overhead_ms(order.size());
    const auto cannot_win = [&](std::size_t i) {
      if (!overhead_ms[i]) overhead_ms[i] = internal::lower_budget_overhead_ms(maker_, order[i]);
      return internal::lower_budget_cannot_win(maker_, chosen, *overhead_ms[i]);
    };
    // Starts the rungs up to `until` that the best so far does not rule out:
    // it only gets quicker, so a rung it rules out now is ruled out when its
    // turn comes.
    std::size_t started = made.empty() ? 0 : 1;
    const auto start_until = [&](std::size_t until) {
      for (; started < std::min(until, order.size()); ++started) {
        if (!cannot_win(started)) made[started] = plan_rung(order[started]);
      }
    };
    const std::size_t ahead = internal::rungs_beside();
    std::optional<std::int64_t> lower_budget;
    for (std::size_t i = 0; i < order.size(); ++i) {
      start_until(i + 1 + ahead);
      // Started before the best ruled it out, or never started: passed over.
      if (cannot_win(i)) continue;
      // Started above unless ruled out, which the best getting quicker keeps
      // it; made here should that rule ever stop being monotone.
      if (!made[i].valid()) made[i] = plan_rung(order[i]);
      if (internal::take_quicker_lower(maker_, chosen, made[i].get())) lower_budget = order[i];
    }
    return internal::plan_result(planner_name, maker_, std::move(chosen), *floor, lower_budget);
  }

  // The plans made here that a larger budget times again (Note [Plans for
  // lower budgets]): the chosen one and, when it is another, the offload-only
  // plan — which the peak planner also makes for this budget, so that the
  // hybrid plan stays at least as quick as the peak planner's.
  std::vector<HybridPlan> plans_for_larger_budgets() {
    std::optional<UnavoidableFloor> floor;
    std::vector<HybridPlan> plans;
    plans.push_back(choose(floor));
    if (kept_offload_) plans.push_back(std::move(*kept_offload_));
    for (HybridPlan& plan : plans) plan.planned_for_bytes = models_.budget_bytes;
    return plans;
  }

 private:
  // The chosen plan and the planner's floor (hybrid_planner.h, "Floor").
  HybridPlan choose(std::optional<UnavoidableFloor>& floor) {
    if (options_.offload == OffloadUse::kRecomputeOnly) {
      HybridPlan chosen = maker_.best_recompute_only();
      floor = chosen.floor;
      chosen.notes.push_back(fmt::format("recompute: {} recompute(s) ({:.3f} ms): {}; estimated step {:.3f} ms",
                                         chosen.recompute_count, chosen.recompute_ms, chosen.label, chosen.time_ms));
      return chosen;
    }
    return hybrid(floor);
  }

  HybridPlan hybrid(std::optional<UnavoidableFloor>& floor) {
    // Every gap is an offload candidate, so the peak planner's floor is what
    // the ops touch plus the retained storages past their last access; a
    // plan's re-runs can lower it only there, and the portfolio reports the
    // lowest floor among the plans made.
    floor = models_.peak.floor;
    if (models_.recompute.candidates.empty()) {
      // Small enough for several plans: the other offload-only plans too.
      std::vector<HybridPlan> others;
      if (internal::plans_allowed(models_.trace, options_) >= internal::kScarceDecisionSets) {
        maker_.more_offload_only_plans(others);
      }
      join_offload_worker();
      offload_.label = "offload-only (nothing recomputable)";
      return finish(std::move(others), floor);
    }
    // 4. The recompute-only plan: first, here, unless it goes on the
    //    offload-only plan's thread (offload_worker) or after the decision
    //    sets (defer_recompute_only_).
    if (!recompute_first_ && !defer_recompute_only_) {
      if (const std::optional<RecomputeSelection> sequence = maker_.recompute_only_sequence_if_it_can_fit()) {
        make_recompute_only(*sequence);
      }
    }
    // 5. The decision sets, each stopping the offload-only plan once it beats it.
    std::vector<HybridPlan> plans = internal::search_decision_sets(
        maker_, options_, [this](const HybridPlan& plan) { stop_offload_only_if_beaten(plan); });
    std::optional<double> recompute_only_ruled_out;  // the least re-runs of any recompute-only plan
    if (defer_recompute_only_) {
      recompute_only_ruled_out = recompute_only_cannot_win(plans);
      if (!recompute_only_ruled_out) {
        if (const std::optional<RecomputeSelection> sequence = maker_.recompute_only_sequence_if_it_can_fit()) {
          make_recompute_only(*sequence);
        }
      }
    }
    // 6. The portfolio, once the offload-only plan is made or stopped.
    join_offload_worker();
    // Where the decision sequences cannot fit the budget, DTR's walk may
    // (PlanMaker::or_within_an_eighth): the recompute-only planner would take
    // it, so the hybrid planner weighs it too.
    if (recompute_only_ruled_out) {
      HybridPlan ruled_out = internal::ruled_out_plan("recompute-only");
      ruled_out.recompute_only = true;
      ruled_out.recompute_ms = *recompute_only_ruled_out;
      plans.push_back(std::move(ruled_out));
    } else if (!recompute_ && maker_.room_for_more_plans()) {
      HybridPlan walk = maker_.walk_or_segments();
      if (walk.peak_bytes <= models_.budget_bytes) {
        walk.recompute_only = true;
        recompute_ = std::move(walk);
      }
    }
    if (recompute_) plans.insert(plans.begin(), std::move(*recompute_));
    return finish(std::move(plans), floor);
  }

  // Note [The recompute-only plan after the decision sets]. On a trace with
  // room for several plans, the recompute-only plan is a family (the
  // decision sequence, its variants, DTR's walks, the segment re-runs) that
  // costs as much as several decision sets, and it rarely wins where offloads
  // can hide: its step is the compute plus its re-runs, and no recompute-only
  // plan re-runs less than recompute_only_lower_bound_ms (overhead_bound.h).
  // So there it is made after the decision sets, and not at all when the
  // compute plus that bound is above the quickest plan they made that fits:
  // none of the family could be chosen. The floor reported is then the
  // lowest of the other plans' (the same as with the family on every example
  // trace and in the 600 cases of HybridPlannerProperty.
  // PlansRuledOutByTheirReRunsChangeNothing). On the demo at 50% the bound is
  // 144.9 ms of re-runs against 51.3 ms for the plan chosen. The threshold is
  // the decision sets' own plans, so the choice does not depend on the
  // offload-only plan's thread.
  //
  // The least re-runs of any recompute-only plan when they rule the
  // recompute-only plan out; nullopt when it could win.
  std::optional<double> recompute_only_cannot_win(const std::vector<HybridPlan>& made) const {
    double quickest_ms = std::numeric_limits<double>::infinity();
    for (const HybridPlan& plan : made) {
      if (!plan.ruled_out && plan.peak_bytes <= models_.budget_bytes) quickest_ms = std::min(quickest_ms, plan.time_ms);
    }
    if (quickest_ms == std::numeric_limits<double>::infinity()) return std::nullopt;
    const std::optional<double> least_ms = recompute_only_lower_bound_ms(models_.trace, models_.budget_bytes);
    if (!least_ms || models_.trace.total_compute_ms() + *least_ms <= quickest_ms) return std::nullopt;
    return least_ms;
  }

  // The portfolio's choice between the offload-only plan and `others`.
  HybridPlan finish(std::vector<HybridPlan> others, std::optional<UnavoidableFloor>& floor) {
    if (offload_stop_rule_ == OffloadOnlyStop::kNever && !offload_.stopped) kept_offload_ = offload_;
    HybridPlan chosen = internal::choose_plan(std::move(offload_), std::move(others), models_.budget_bytes,
                                              models_.offload_only_bound_ms, floor);
    maker_.make_deferred_actions(chosen);
    return chosen;
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
    if (recompute_first_ && !models_.recompute.candidates.empty()) {
      sequence = maker_.recompute_only_sequence_if_it_can_fit();
      if (sequence && maker_.compute_and_reruns_ms(*sequence) < models_.offload_only_bound_ms) {
        make_recompute_only(*sequence);
        sequence.reset();
      }
    }
    if (offload_stop_.stop_requested()) {
      offload_.stopped = true;
    } else {
      // One placement thread while the decision sets keep the other core
      // busy (their runs are the longer path), two once the planning thread
      // only waits for this plan.
      offload_ = maker_.offload_only(options_.peak, "offload-only", offload_stop_.get_token(), [this] {
        return planning_thread_waits_.load(std::memory_order_relaxed) ? internal::PlacementThreads::kTwo
                                                                        : internal::PlacementThreads::kOne;
      });
    }
    if (sequence) make_recompute_only(*sequence);
  }

  // Note [Two placement threads once the decision sets are done]. The
  // offload-only plan places its two prefetch orders one after the other
  // while the planning thread makes decision sets: a third thread would give
  // the run on the critical path two thirds of a core. Once the planning
  // thread only waits for it (nothing recomputable, as on the 1M-storage
  // random trace, or the decision sets done before its selection is), the
  // placements take both cores. The run asks when its placements start; the
  // schedule is the same either way (PeakPlannerProperty.
  // PlacingOnOneThreadGivesTheSameScheduleAsOnTwo), so the timing of the
  // flag changes only how long the plan takes.
  void join_offload_worker() {
    planning_thread_waits_.store(true, std::memory_order_relaxed);
    offload_worker_.join();
  }

  // The recompute-only plan from its decision sequence
  // (recompute_only_sequence_if_it_can_fit), which may stop the offload-only
  // plan.
  void make_recompute_only(const RecomputeSelection& sequence) {
    HybridPlan plan = maker_.or_within_an_eighth(sequence, maker_.recompute_only(sequence));
    plan.recompute_only = true;
    stop_offload_only_if_beaten(plan);
    recompute_ = std::move(plan);
  }

  // Stops the offload-only plan (on its thread) once `plan` fits the budget
  // and is quicker than any offload-only plan can be (offload_step_bound.h):
  // that plan could not win, so the plan chosen does not depend on whether it
  // finished first. On deep transformers at tight budgets it is the longest
  // job and many times slower than the plans with recomputes. Thread-safe.
  void stop_offload_only_if_beaten(const HybridPlan& plan) {
    if (offload_stop_rule_ == OffloadOnlyStop::kWhenBeaten &&
        internal::beats_offload_only(plan, models_.budget_bytes, models_.offload_only_bound_ms)) {
      offload_stop_.request_stop();
    }
  }

  const HybridPlannerOptions& options_;
  const std::shared_ptr<internal::SegmentSearch> segments_;
  internal::HybridModels models_;
  const internal::PlanMaker maker_;
  const OffloadOnlyStop offload_stop_rule_;
  // Whether the recompute-only plan is made on the offload-only plan's thread
  // (offload_worker), or after the decision sets, unless they rule it out
  // (Note [The recompute-only plan after the decision sets]).
  bool recompute_first_ = false;
  bool defer_recompute_only_ = false;
  // With OffloadOnlyStop::kNever: the offload-only plan, kept by finish().
  std::optional<HybridPlan> kept_offload_;
  std::stop_source offload_stop_;
  // Set once the planning thread only waits for offload_worker_ (Note [Two
  // placement threads once the decision sets are done]).
  std::atomic<bool> planning_thread_waits_{false};
  // Written by offload_worker_ (recompute_ also by the planning thread when
  // recompute_first_ is false), read after joining it.
  HybridPlan offload_;
  std::optional<HybridPlan> recompute_;
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
  std::vector<std::int64_t> rungs;
  if (options_.lower_budgets == LowerBudgetPlans::kRungs && internal::lower_budget_plans_fit(trace)) {
    rungs = internal::lower_budgets(trace, offload_floor(trace).bytes, unplanned_peak(trace).bytes, *budget_bytes);
  }
  return HybridPlanning(trace, options_, *budget_bytes, std::make_shared<internal::SegmentSearch>())
      .run(name(), trace, rungs);
}

}  // namespace hyperoffload
