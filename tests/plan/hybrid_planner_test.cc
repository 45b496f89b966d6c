// The hybrid planner's decisions (docs/HYBRID_PLANNER.md), each on a hand-built
// trace with the exact schedule derived in a comment.
//
// Conventions: sN is storage id N; "rec" marks a recomputable op; the copy
// bandwidth is 1 MiB per ms (1000/1024 GiB/s), so a 1 MiB copy takes 1 ms;
// durations are in ms; s9 (size 0) is an input every op may read, never
// released.
#include "hyperoffload/plan/hybrid_planner.h"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/gen/transformer_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/hybrid/hybrid_plans.h"
#include "hyperoffload/plan/hybrid/segment_search.h"
#include "hyperoffload/plan/hybrid/hybrid_models.h"
#include "hyperoffload/plan/common/stall_estimate.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/peak/peak_run.h"
#include "hyperoffload/sim/simulator.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::hyperoffload::testing::actions;
using ::hyperoffload::testing::copied_to_host;
using ::hyperoffload::testing::TraceDsl;
constexpr Recomputable kRec = Recomputable::kYes;
constexpr std::int64_t kMiB = 1 << 20;
constexpr double kMiBPerMs = 1000.0 / 1024.0;  // GiB/s

PlanResult plan_with(std::string_view planner, const Trace& trace, std::int64_t budget,
                     DeviceMemory device = DeviceMemory::kUnlimited) {
  PlannerOptions options;
  options.device_memory = device;
  Result<std::unique_ptr<Planner>> made = make_planner(planner, options);
  EXPECT_TRUE(made.has_value());
  if (!made) return {};
  Result<PlanResult> plan = (*made)->plan(trace, budget);
  EXPECT_TRUE(plan.has_value()) << plan.error().message;
  if (!plan) return {};
  const ValidationReport report = validate_schedule(trace, plan->schedule);
  EXPECT_TRUE(report.valid()) << (report.problems.empty() ? "" : report.problems.front());
  EXPECT_TRUE(report.faults.empty());
  EXPECT_EQ(report.peak_bytes, plan->planned_peak_bytes);
  return std::move(*plan);
}

double simulated_ms(const Trace& trace, const PlanResult& plan, std::int64_t budget, DeviceMemory device) {
  SimulatorOptions options;
  options.budget_bytes = budget;
  options.device_memory = device;
  const SimulationResult result = simulate(trace, plan.schedule, options);
  return result.makespan_ms;
}

// s1 (1 MiB) written by f, read again at op 3; s2 (1 MiB) lives only at op 2,
// the peak. The budget of 1 MiB leaves room for one of them.
//   op0 load W9 | op1 f R9 W1 (rec, f_ms) | op2 peak W2 (peak_ms) | op3 use R1
Trace one_gap(double f_ms, double peak_ms) {
  return TraceDsl()
      .storage(1, kMiB)
      .storage(2, kMiB)
      .storage(9, 0)
      .bandwidth(kMiBPerMs)
      .op("load", "W9")
      .op("f", "R9 W1", f_ms, kRec)
      .op("peak", "W2", peak_ms)
      .op("use", "R1")
      .build();
}

TEST(HybridPlanner, RecomputesWhenTheLinkIsTooSlowToHideTheCopy) {
  // f 0.2 ms, peak 0.5 ms: compute 0.7 ms. Offloading s1 copies it out from
  // 0.2 to 1.2 ms and back from 1.2 to 2.2 ms: op 3 waits until 2.2 ms.
  // Recomputing f before op 3 costs 0.2 ms: the step ends at 0.9 ms. The plan
  // drops s1 after op 1 and re-runs f before op 3; every storage is released
  // after its last access.
  const Trace trace = one_gap(0.2, 0.5);
  for (const DeviceMemory device : {DeviceMemory::kUnlimited, DeviceMemory::kBudget}) {
    const PlanResult plan = plan_with("hybrid", trace, kMiB, device);
    EXPECT_EQ(plan.schedule.actions, actions("post 1 release_device 1; post 2 release_device 2; pre 3 recompute 1; "
                                             "post 3 release_device 1"));
    EXPECT_EQ(plan.planned_peak_bytes, kMiB);
    EXPECT_NEAR(simulated_ms(trace, plan, kMiB, device), 0.9, 1e-9);
  }
}

// Note [Plans ruled out by their re-runs] (hybrid/decision_search.cc): on
// one_gap(5, 3) (compute 8 ms), re-running f (5 ms) before op 3 keeps the
// peak at 1 MiB with no copy: the plan takes 8 + 5 = 13 ms, no stall. Given
// a quicker plan made before (12.999 ms), no plan with those re-runs can be
// quicker, and with_offloads does not make it; at exactly 13 ms it could tie,
// and it is made. The ruled-out plan keeps the re-runs and the floor the
// made one reports: every op touches at most one 1 MiB storage.
TEST(HybridPlanner, WithOffloadsRulesOutAPlanWhoseReRunsAloneAreSlowerThanOneMade) {
  const Trace trace = one_gap(5.0, 3.0);
  internal::HybridModels models(trace, DeviceMemory::kUnlimited, kMiB);
  models.wait_for_recompute_model();
  internal::SegmentSearch segments;
  const PeakPlannerOptions options;
  const internal::PlanMaker maker(models, options, segments);
  const std::vector<internal::RecomputeDecision> decisions = maker.recompute_only_sequence().decisions;
  ASSERT_EQ(decisions.size(), 1u);
  internal::HybridPlan made = maker.with_offloads(decisions, "made", options);
  EXPECT_FALSE(made.ruled_out);
  // Note [Actions made when chosen] (hybrid_plans.cc): its re-runs fit, so
  // its actions wait until it is chosen.
  EXPECT_TRUE(made.actions.empty());
  ASSERT_TRUE(made.deferred_decisions.has_value());
  maker.make_deferred_actions(made);
  EXPECT_FALSE(made.deferred_decisions.has_value());
  EXPECT_EQ(made.actions, actions("post 1 release_device 1; post 2 release_device 2; pre 3 recompute 1; "
                                  "post 3 release_device 1"));
  EXPECT_DOUBLE_EQ(made.recompute_ms, 5.0);
  EXPECT_DOUBLE_EQ(made.time_ms, 13.0);
  ASSERT_TRUE(made.floor.has_value());
  EXPECT_EQ(made.floor->bytes, kMiB);

  const internal::HybridPlan ruled_out = maker.with_offloads(decisions, "ruled out", options, 12.999);
  EXPECT_TRUE(ruled_out.ruled_out);
  EXPECT_TRUE(ruled_out.actions.empty());
  EXPECT_DOUBLE_EQ(ruled_out.recompute_ms, 5.0);
  EXPECT_EQ(ruled_out.recompute_count, 1);
  ASSERT_TRUE(ruled_out.floor.has_value());
  EXPECT_EQ(ruled_out.floor->bytes, made.floor->bytes);
  EXPECT_EQ(ruled_out.floor->op, made.floor->op);

  internal::HybridPlan tie = maker.with_offloads(decisions, "tie", options, 13.0);
  EXPECT_FALSE(tie.ruled_out);
  maker.make_deferred_actions(tie);
  EXPECT_EQ(tie.actions, made.actions);
}

// Note [Actions made when chosen] (hybrid_plans.cc): where the re-runs alone
// bring the augmented trace within the budget, with_offloads makes the plan
// without the peak planner, its actions once it is chosen. Over small
// transformer steps of random shapes at 40-90% of their peak, on both
// devices, its plan is the one the peak planner gives on the augmented trace
// (mapped back and timed on the original, as with_offloads does otherwise):
// the same actions, peak, time and floor. The decisions are prefixes of the
// recompute-only sequence around the one at which its profile fits, and the
// whole sequence, so both sides of the shortcut are compared.
TEST(HybridPlannerProperty, ReRunsThatFitGiveThePeakPlannersPlanWithoutIt) {
  int fitting = 0;
  int over = 0;
  for (std::uint64_t seed = 0; seed < 80; ++seed) {
    std::mt19937_64 rng(seed * 104729);
    TransformerOptions shape;
    shape.layers = 1 + static_cast<std::int32_t>(rng() % 3);
    shape.hidden = 32 << (rng() % 3);
    shape.heads = 2;
    shape.seq = 16 << (rng() % 3);
    shape.batch = 1 + static_cast<std::int64_t>(rng() % 3);
    shape.vocab = 100;
    shape.dropout = rng() % 2 == 0 ? Dropout::kOff : Dropout::kOn;
    const Trace trace = value_or_throw(generate_transformer_trace(shape));
    const std::int64_t budget =
        unplanned_peak(trace).bytes * (40 + static_cast<std::int64_t>(rng() % 51)) / 100;
    const DeviceMemory device = seed % 2 == 0 ? DeviceMemory::kBudget : DeviceMemory::kUnlimited;
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", budget " << budget);
    internal::HybridModels models(trace, device, budget);
    models.wait_for_recompute_model();
    internal::SegmentSearch segments;
    PeakPlannerOptions peak_options;
    peak_options.device_memory = device;
    const internal::PlanMaker maker(models, peak_options, segments);
    const internal::RecomputeSelection sequence = maker.recompute_only_sequence();
    const std::size_t fits = maker.profile_fitting_length(sequence);
    const std::size_t total = sequence.decisions.size();
    for (const std::size_t length : {fits - 1, fits, fits + 1, fits + 4, total}) {
      if (length == 0 || length > total) continue;
      const std::vector<internal::RecomputeDecision> decisions = sequence.prefix(length);
      internal::HybridPlan made = maker.with_offloads(decisions, "made", peak_options);
      const internal::AugmentedTrace augmented = internal::build_augmented_trace(trace, models.recompute, decisions);
      const internal::PeakModel model = internal::build_peak_model(augmented.trace, StorageAccesses(augmented.trace));
      const internal::ScheduleTimer timer = [&](std::vector<Action> actions) {
        internal::TimedSchedule timed{internal::map_back(augmented, actions), 0.0};
        timed.stall_ms = internal::estimate_stall_ms(trace, timed.actions, models.memory_cap());
        return timed;
      };
      const internal::PeakRun run = internal::run_peak_planner(augmented.trace, model, peak_options, budget,
                                                               {.timer = timer, .stop = {}, .threads = {}});
      (run.result.initial_peak_bytes <= budget ? fitting : over) += 1;
      // Note [Actions made when chosen]: deferred exactly where the re-runs fit.
      EXPECT_EQ(made.deferred_decisions.has_value(), run.result.initial_peak_bytes <= budget) << "length " << length;
      maker.make_deferred_actions(made);
      EXPECT_EQ(made.actions, run.result.schedule.actions) << "length " << length;
      EXPECT_EQ(made.peak_bytes, run.result.planned_peak_bytes) << "length " << length;
      EXPECT_DOUBLE_EQ(made.time_ms, trace.total_compute_ms() + augmented.recompute_ms + run.stall_ms)
          << "length " << length;
      ASSERT_TRUE(made.floor.has_value());
      ASSERT_TRUE(run.result.floor.has_value());
      EXPECT_EQ(made.floor->op, augmented.original_op[static_cast<std::size_t>(run.result.floor->op)]);
      EXPECT_EQ(made.floor->bytes, run.result.floor->bytes);
      if (::testing::Test::HasFailure()) return;
    }
  }
  // Both sides, many times: the seeds above give 81 plans whose re-runs
  // fit and 198 that leave the offloads work.
  EXPECT_GE(fitting, 50);
  EXPECT_GE(over, 50);
  ::testing::Test::RecordProperty("fitting", fitting);
  ::testing::Test::RecordProperty("over", over);
}

// Note [The whole sequence beside its first prefix] (hybrid_plans.cc): on a
// trace of at least 100,000 ops and accesses, recompute_only measures the
// whole decision sequence's peak on a second thread beside the draft of the
// prefix at which the selection's profile fits. The plan is still that
// prefix where its draft fits (an 850-layer transformer step at 50%: it
// does), with the whole sequence's peak as its floor, each measured here on
// its own.
TEST(RecomputePlanner, OnALargeTraceMeasuresTheWholeSequenceBesideItsFirstPrefix) {
  TransformerOptions shape;
  shape.layers = 850;
  shape.hidden = 64;
  shape.heads = 2;
  shape.seq = 64;
  shape.batch = 2;
  shape.vocab = 100;
  shape.dropout = Dropout::kOn;
  const Trace trace = value_or_throw(generate_transformer_trace(shape));
  ASSERT_GE(trace.op_count() + trace.access_count(), 100'000);
  const std::int64_t budget = unplanned_peak(trace).bytes / 2;
  internal::HybridModels models(trace, DeviceMemory::kBudget, budget);
  models.wait_for_recompute_model();
  internal::SegmentSearch segments;
  const PeakPlannerOptions options;
  const internal::PlanMaker maker(models, options, segments);
  const internal::RecomputeSelection sequence = maker.recompute_only_sequence();
  const std::size_t first = maker.profile_fitting_length(sequence);
  ASSERT_LT(first, sequence.decisions.size());
  const internal::AugmentedTrace prefix =
      internal::build_augmented_trace(trace, models.recompute, sequence.prefix(first));
  const PeakBytes prefix_peak = unplanned_peak(prefix.trace);
  ASSERT_LE(prefix_peak.bytes, budget);
  const internal::AugmentedTrace whole = internal::build_augmented_trace(trace, models.recompute, sequence.decisions);
  const PeakBytes whole_peak = unplanned_peak(whole.trace);

  const internal::HybridPlan plan = maker.recompute_only(sequence);
  EXPECT_EQ(plan.peak_bytes, prefix_peak.bytes);
  EXPECT_EQ(plan.recompute_count, prefix.recompute_count);
  EXPECT_DOUBLE_EQ(plan.recompute_ms, prefix.recompute_ms);
  ASSERT_TRUE(plan.floor.has_value());
  EXPECT_EQ(plan.floor->bytes, whole_peak.bytes);
  EXPECT_EQ(plan.floor->op, whole.original_op[static_cast<std::size_t>(whole_peak.op)]);
  Schedule schedule;
  schedule.actions = plan.actions;
  EXPECT_TRUE(validate_schedule(trace, schedule).valid());
}

TEST(HybridPlanner, OffloadsWhenRecomputeCostsMoreThanTheCopyItReplaces) {
  // f 5 ms, peak 3 ms: compute 8 ms. Unlimited memory: s1 goes to host from 5
  // to 6 ms; op 2 leaves no room for it, so the copy back is issued before op
  // 3, when op 2 ends at 8 ms: 8..9 ms, and op 3 starts at 9 ms. Recomputing
  // would end at 13 ms. The peak planner's plan: copy and release s1 after op
  // 1, bring it back before op 3, free the host copy after it.
  const Trace trace = one_gap(5.0, 3.0);
  const PlanResult plan = plan_with("hybrid", trace, kMiB);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 1 copy_d2h 1; post 1 release_device 1; post 2 release_device 2; pre 3 copy_h2d 1; "
                    "post 3 release_device 1; post 3 release_host 1"));
  EXPECT_NEAR(simulated_ms(trace, plan, kMiB, DeviceMemory::kUnlimited), 9.0, 1e-9);
  // A device that holds only the budget: op 2 waits for s1's copy to host (6
  // ms) and ends at 9 ms; the copy back then runs 9 to 10 ms: 10 ms, still
  // less than the 13 ms of recomputing.
  const PlanResult capped = plan_with("hybrid", trace, kMiB, DeviceMemory::kBudget);
  EXPECT_EQ(capped.schedule.actions, plan.schedule.actions);
  EXPECT_NEAR(simulated_ms(trace, capped, kMiB, DeviceMemory::kBudget), 10.0, 1e-9);
}

TEST(HybridPlanner, RecomputesThroughADeadInputAsAChainOfTwoOps) {
  // g reads s1 (f's output) and writes s2, read again at op 4; s1 is dead
  // after op 2; s3 (2 MiB) makes op 3 the peak (3 MiB, budget 2 MiB).
  //   op0 load W9 | op1 f R9 W1 (rec, 0.1) | op2 g R1 W2 (rec, 0.1) |
  //   op3 peak W3 (1.0) | op4 use R2
  // Offloading s2: out 0.2..1.2 ms, back 1.2..2.2 ms, op 4 at 2.2 ms.
  // Recomputing s2 before op 4 needs s1 again: f then g (0.2 ms): 1.4 ms.
  // The short-lived s1 is released right after g's re-run.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(3, 2 * kMiB)
                          .storage(9, 0)
                          .bandwidth(kMiBPerMs)
                          .op("load", "W9")
                          .op("f", "R9 W1", 0.1, kRec)
                          .op("g", "R1 W2", 0.1, kRec)
                          .op("peak", "W3", 1.0)
                          .op("use", "R2")
                          .build();
  const PlanResult plan = plan_with("hybrid", trace, 2 * kMiB);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 2 release_device 1; post 2 release_device 2; post 3 release_device 3; pre 4 recompute 1; "
                    "pre 4 recompute 2; pre 4 release_device 1; post 4 release_device 2"));
  EXPECT_NEAR(simulated_ms(trace, plan, 2 * kMiB, DeviceMemory::kUnlimited), 1.4, 1e-9);
}

TEST(HybridPlanner, RecomputesAGapBetweenTwoWritesWhereItsOffloadWouldStall) {
  // f writes s1 at op 1 and op 3 overwrites it before any read. The gap (1, 3)
  // is what f wrote, copied after op 1 (plan/peak/peak_model.h,
  // starts_version), so the peak planner frees op 2 too: both floors are 1 MiB,
  // first reached at op 1. Its round trip (1 ms each way at 1 MiB/ms) has only
  // op 2's 1 ms to hide behind: the copy to host ends at 1.1 ms, the copy back
  // at 2.1 ms, so op 3 waits 1.0 ms and the step (1.1 ms of compute) takes
  // 2.1 ms. Re-running f (0.1 ms) before op 3 instead takes 1.2 ms.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(9, 0)
                          .bandwidth(kMiBPerMs)
                          .op("load", "W9")
                          .op("f", "R9 W1", 0.1, kRec)
                          .op("peak", "W2", 1.0)
                          .op("overwrite", "W1")
                          .op("mid", "R9")
                          .op("use", "R1")
                          .build();
  const PlanResult peak = plan_with("peak", trace, kMiB);
  ASSERT_TRUE(peak.floor.has_value());
  EXPECT_EQ(peak.floor->bytes, kMiB);
  EXPECT_EQ(peak.planned_peak_bytes, kMiB);
  EXPECT_EQ(peak.schedule.actions, actions("post 1 copy_d2h 1; post 1 release_device 1; post 2 release_device 2; "
                                           "pre 3 copy_h2d 1; pre 3 release_host 1; post 5 release_device 1"));
  EXPECT_NEAR(simulated_ms(trace, peak, kMiB, DeviceMemory::kUnlimited), 2.1, 1e-9);
  const PlanResult plan = plan_with("hybrid", trace, kMiB);
  ASSERT_TRUE(plan.floor.has_value());
  EXPECT_EQ(plan.floor->bytes, kMiB);
  EXPECT_EQ(plan.floor->op, 1);
  EXPECT_EQ(plan.schedule.actions, actions("post 1 release_device 1; post 2 release_device 2; pre 3 recompute 1; "
                                           "post 5 release_device 1"));
  EXPECT_EQ(plan.planned_peak_bytes, kMiB);
  EXPECT_NEAR(simulated_ms(trace, plan, kMiB, DeviceMemory::kUnlimited), 1.2, 1e-9);
}

TEST(HybridPlanner, WithNothingRecomputableIsThePeakPlanner) {
  // one_gap without the recomputable mark: the offload-only plan, action for
  // action.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(9, 0)
                          .bandwidth(kMiBPerMs)
                          .op("load", "W9")
                          .op("f", "R9 W1", 5.0)
                          .op("peak", "W2", 3.0)
                          .op("use", "R1")
                          .build();
  const PlanResult peak = plan_with("peak", trace, kMiB);
  const PlanResult hybrid = plan_with("hybrid", trace, kMiB);
  EXPECT_EQ(hybrid.schedule.actions, peak.schedule.actions);
  EXPECT_EQ(hybrid.schedule.planner, "hybrid");
  ASSERT_TRUE(hybrid.floor.has_value());
  EXPECT_EQ(hybrid.floor->bytes, peak.floor->bytes);
}

TEST(HybridPlanner, AlsoPlansTheOffloadsHidingFirstWhenOneLargeCopyCannotHide) {
  // Nothing recomputable. s1 4 MiB: W@0 R@3; s2, s3, s4 0.75 MiB: W@0 R@5; s6
  // 2 MiB at op 2.
  //   op:   0     1      2     3     4      5
  //   ms:   0     10     0     0     10     0
  //   res:  6.25  6.25   8.25  6.25  2.25   2.25 MiB    budget 6.25 MiB: peak op 2, E = 2 MiB
  // s1's copy back cannot start before op 2 ends and op 3 reads it then: H = 0.
  // s2..s4 have op 4's 10 ms for theirs: H = 1. No coverage term (one
  // over-budget op), no contention at first.
  // - Default weights: s1 removes all of E with factor 1 (value 2), s2 0.75
  //   with factor 2 (1.5) → s1. Its copy back starts when op 2 ends (10 ms)
  //   and takes 4 ms: op 3 stalls 4 ms, makespan 24 ms (the peak plan).
  // - Hiding first (peak_reduction 0.1, hiding 4): s1 0.2 against s2 3.075 →
  //   s2, s3, s4 (0.75 each, 2.25 ≥ E); their copies to host take 2.25 ms of
  //   op 1 and their copies back 2.25 ms of op 4: makespan 20 ms, the compute.
  const Trace trace = TraceDsl()
                          .storage(1, 4 * kMiB)
                          .storage(2, 3 * kMiB / 4)
                          .storage(3, 3 * kMiB / 4)
                          .storage(4, 3 * kMiB / 4)
                          .storage(6, 2 * kMiB)
                          .bandwidth(kMiBPerMs)
                          .op("a", "W1 W2 W3 W4")
                          .op("b", "", 10.0)
                          .op("c", "W6")
                          .op("d", "R1")
                          .op("e", "", 10.0)
                          .op("f", "R2 R3 R4")
                          .build();
  const std::int64_t budget = 25 * kMiB / 4;
  const PlanResult peak = plan_with("peak", trace, budget);
  EXPECT_DOUBLE_EQ(simulated_ms(trace, peak, budget, DeviceMemory::kUnlimited), 24.0);
  const PlanResult hybrid = plan_with("hybrid", trace, budget);
  EXPECT_DOUBLE_EQ(simulated_ms(trace, hybrid, budget, DeviceMemory::kUnlimited), 20.0);
  std::vector<StorageId> copied = copied_to_host(hybrid.schedule.actions);
  std::sort(copied.begin(), copied.end());
  EXPECT_EQ(copied, (std::vector<StorageId>{2, 3, 4}));
  ASSERT_FALSE(hybrid.notes.empty());
  EXPECT_NE(hybrid.notes.back().find("offload-only, hidden copies first"), std::string::npos) << hybrid.notes.back();
}

TEST(HybridPlanner, AlsoSequencesTheCopiesToHostByLeastLateness) {
  // Nothing recomputable; every op takes 1 ms and a MiB moves in 1 ms. s0 (L,
  // 3 MiB) and s1 (S, 1 MiB) are written by op 0; op 1 reads L and writes
  // s2 (1 MiB), op 2 writes s3 (3 MiB), op 3 reads L, op 5 reads S.
  //   op:   0  1  2  3  4  5
  //   res:  4  5  7  4  1  1 MiB    budget 4 MiB
  // Selection takes L at op 2 (7 → 4), then S at op 1 (5 → 4). Placement
  // releases S after op 0 (off at op 1) and L after op 1 (off at op 2); both
  // copies to host can start at 1 ms. On the capped device L is needed by
  // min(3 - 3, 2) = 0 ms (its copy back's latest start; the op after its
  // release), S by min(5 - 1, 1) = 1 ms: both late at 1 ms.
  //  - Soonest needed: D2H [L 1-4][S 4-5]. Op 1 waits for S's room: 5-6; op 2
  //    6-7; L's copy back waits for s3's room: 7-10; op 3 10-11, S's copy back
  //    10-11, ops 4 and 5: makespan 13 ms (the peak plan).
  //  - Least lateness at 1 ms: L's key max(0, 1 + 3) = 4, S's max(1, 1 + 1) = 2:
  //    [S 1-2][L 2-5]. Op 1 2-3; op 2 waits for L's room: 5-6; L back 6-9,
  //    op 3 9-10, S back 9-10, ops 4 and 5: 12 ms.
  const Trace trace = TraceDsl()
                          .storage(0, 3 * kMiB)
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(3, 3 * kMiB)
                          .bandwidth(kMiBPerMs)
                          .op("write", "W0 W1", 1.0)
                          .op("read_l", "R0 W2", 1.0)
                          .op("spike", "W3", 1.0)
                          .op("read_l_again", "R0", 1.0)
                          .op("idle", "", 1.0)
                          .op("read_s", "R1", 1.0)
                          .build();
  const std::int64_t budget = 4 * kMiB;
  const PlanResult peak = plan_with("peak", trace, budget, DeviceMemory::kBudget);
  EXPECT_EQ(copied_to_host(peak.schedule.actions), (std::vector<StorageId>{0, 1}));
  EXPECT_DOUBLE_EQ(simulated_ms(trace, peak, budget, DeviceMemory::kBudget), 13.0);
  const PlanResult hybrid = plan_with("hybrid", trace, budget, DeviceMemory::kBudget);
  EXPECT_EQ(copied_to_host(hybrid.schedule.actions), (std::vector<StorageId>{1, 0}));
  EXPECT_DOUBLE_EQ(simulated_ms(trace, hybrid, budget, DeviceMemory::kBudget), 12.0);
  ASSERT_FALSE(hybrid.notes.empty());
  EXPECT_NE(hybrid.notes.back().find("offload-only, least-lateness copies to host"), std::string::npos)
      << hybrid.notes.back();
}

TEST(HybridPlanner, OnACappedDeviceLeavesTheOldestActivationsToOffloadsCopiedBeforeThePeak) {
  // gpt2-medium at 50% on a device that holds only the budget (BENCHMARKS.md,
  // "Hybrid planner"): recompute-only adds 8.6%. Offloads of whatever the
  // recomputes leave wait for memory at the peak (the late layers' attention
  // probabilities reach the host after it), so without the decision sets that
  // leave the oldest data to offloads copied to host before the peak, the best
  // plan was recompute-only-like, 8.45%; with them it offloads early layers'
  // activations, recomputes less and is within the 8%.
  const Trace trace = value_or_throw(generate_transformer_trace(value_or_throw(transformer_preset("gpt2-medium"))));
  const std::int64_t budget = unplanned_peak(trace).bytes / 2;
  const PlanResult hybrid = plan_with("hybrid", trace, budget, DeviceMemory::kBudget);
  const PlanResult recompute = plan_with("recompute", trace, budget, DeviceMemory::kBudget);
  ASSERT_FALSE(hybrid.notes.empty());
  EXPECT_NE(hybrid.notes.back().find("copies to host by the peak"), std::string::npos) << hybrid.notes.back();
  EXPECT_FALSE(copied_to_host(hybrid.schedule.actions).empty());
  const double compute_ms = trace.total_compute_ms();
  const double hybrid_ms = simulated_ms(trace, hybrid, budget, DeviceMemory::kBudget);
  EXPECT_LT(hybrid_ms, simulated_ms(trace, recompute, budget, DeviceMemory::kBudget));
  EXPECT_LT(hybrid_ms / compute_ms - 1.0, 0.08);
}

TEST(RecomputePlanner, RecomputesWithoutCopiesAndReportsItsFloor) {
  // one_gap with the expensive f (5 ms): recompute-only never copies, so it
  // re-runs f (13 ms in all) where the hybrid planner offloaded. Its floor is
  // the peak of its longest decision sequence: s1 dropped, 1 MiB.
  const Trace trace = one_gap(5.0, 3.0);
  const PlanResult plan = plan_with("recompute", trace, kMiB);
  EXPECT_EQ(plan.schedule.planner, "recompute");
  EXPECT_EQ(plan.schedule.actions, actions("post 1 release_device 1; post 2 release_device 2; pre 3 recompute 1; "
                                           "post 3 release_device 1"));
  ASSERT_TRUE(plan.floor.has_value());
  EXPECT_EQ(plan.floor->bytes, kMiB);
  EXPECT_NEAR(simulated_ms(trace, plan, kMiB, DeviceMemory::kUnlimited), 13.0, 1e-9);
}

// Found by fuzzing (fuzz/planners_fuzzer.cc): a recomputable op listing its
// output twice (an op returning two views of one storage) was re-run into two
// instances of it; the first, never read, was released right after the
// recompute, so op c found s3 gone (data lost). With one instance: s3 dropped
// after a, regenerated before c, released after c, its last access; s2 is
// retained. At budget 0 nothing else can go.
//   op0 a W3 W3 (rec) | op1 b W2 | op2 c W3
TEST(RecomputePlanner, RegeneratesAnOutputTheOpListsTwiceOnce) {
  const Trace trace = TraceDsl()
                          .storage(3, 10)
                          .storage(2, 10, Retention::kRetained)
                          .op("a", "W3 W3", 1.0, kRec)
                          .op("b", "W2", 1.0)
                          .op("c", "W3", 1.0)
                          .build();
  const PlanResult plan = plan_with("recompute", trace, 0);  // valid, fault-free (plan_with checks)
  EXPECT_EQ(plan.schedule.actions, actions("post 0 release_device 3; pre 2 recompute 0; post 2 release_device 3"));
  plan_with("hybrid", trace, 0);  // builds the same augmented trace among its candidates
}

TEST(RecomputePlanner, BelowItsFloorPlansAsCloseAsItCanAndSaysSo) {
  // Budget 0.5 MiB: op 2 alone holds s2 (1 MiB), which nothing regenerates.
  const Trace trace = one_gap(0.2, 0.5);
  const PlanResult plan = plan_with("recompute", trace, kMiB / 2);
  ASSERT_TRUE(plan.floor.has_value());
  EXPECT_EQ(plan.floor->bytes, kMiB);
  EXPECT_EQ(plan.planned_peak_bytes, kMiB);
  ASSERT_FALSE(plan.notes.empty());
  EXPECT_NE(plan.notes.front().find("below the floor"), std::string::npos);
}

TEST(RecomputePlanner, UsesTheShortestDecisionPrefixThatFits) {
  // s1 (1 MiB) and s2 (2 MiB) are written by cheap ops (0.1 ms) and read at
  // the end in reverse order; s3 (1 MiB) makes op 4 the peak.
  //   op0 load W9 | op1 f R9 W1 (rec) | op2 g R9 W2 (rec) | op3 mid R9 |
  //   op4 peak W3 | op5 use R2 | op6 use R1
  //   res:  0 1 3 3 4 3 1 (MiB)      gaps: s1 (1, 6) over 2..5, s2 (2, 5) over 3..4
  // The decision sequence: at op 4 s2 removes more per ms (2 MiB vs 1), then
  // the peak is op 2 (3 MiB), which only s1 covers; then op 2 holds s2 alone
  // (2 MiB) and nothing covers it. Peaks after each: 3, 2 MiB; the floor is 2.
  // Budget 3 MiB: the first decision fits (the re-run of g before op 5 holds
  // s1 + s2 = 3 MiB). Budget 2 MiB: both.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, 2 * kMiB)
                          .storage(3, kMiB)
                          .storage(9, 0)
                          .bandwidth(kMiBPerMs)
                          .op("load", "W9")
                          .op("f", "R9 W1", 0.1, kRec)
                          .op("g", "R9 W2", 0.1, kRec)
                          .op("mid", "R9")
                          .op("peak", "W3")
                          .op("use", "R2")
                          .op("use", "R1")
                          .build();
  const PlanResult one = plan_with("recompute", trace, 3 * kMiB);
  EXPECT_EQ(one.schedule.actions, actions("post 2 release_device 2; post 4 release_device 3; pre 5 recompute 2; "
                                          "post 5 release_device 2; post 6 release_device 1"));
  ASSERT_TRUE(one.floor.has_value());
  EXPECT_EQ(one.floor->bytes, 2 * kMiB);
  const PlanResult both = plan_with("recompute", trace, 2 * kMiB);
  EXPECT_EQ(both.schedule.actions,
            actions("post 1 release_device 1; post 2 release_device 2; post 4 release_device 3; pre 5 recompute 2; "
                    "post 5 release_device 2; pre 6 recompute 1; post 6 release_device 1"));
  EXPECT_EQ(both.planned_peak_bytes, 2 * kMiB);
}

// Note [Excluding candidates]: the decision sequence takes the cheapest way
// down at each peak, and one it took first can be needless once a later one
// is taken.
//   op0 w R9 W7 (rec, 3) | op1 x R9 W1 (rec, 0.5) | op2 z R9 W3 (rec, 0.6) |
//   op3 p1 W4 (1) | op4 long R9 (10) | op5 ux R1 (0.1) | op6 y R9 W5 (rec, 0.7) |
//   op7 p2 W6 (1) | op8 uz R3 (0.1) | op9 uy R5 (0.1) | op10 uw R7 (0.1)
//   s1, s3, s5, s7 1 MiB; s4, s6 2 MiB.
//   res:  1 2 3 5 3 3 3 5 3 2 1 (MiB)
//   gaps: s7 (w, 0..10) over 1..9, cost 3; s1 (x, 1..5) over 2..4, 0.5;
//         s3 (z, 2..8) over 3..7, 0.6; s5 (y, 6..9) over 7..8, 0.7.
// Budget 4 MiB: ops 3 and 7 are 1 MiB over. At op 3 the sequence takes s1
// (1 MiB per 0.5 ms, against s3's per 0.6 and s7's per 3), then at op 7 s3
// (against s5's per 0.7 and s7's): 1.1 ms of re-runs. s3 alone covers both
// peaks: excluding s1, the sequence takes s3 at op 3 and is done, 0.6 ms.
// DTR's walks do no better: with DTR's costs, local ones or by next use
// they evict s1 at op 3 (its staleness 0.6 ms and next use 11 ms away
// against s3's just written and 12.8 ms away) and s3 at op 7, 1.1 ms; by
// furthest next use they evict s7 at op 3, 3 ms. So the plan drops s3 after
// op 2 and re-runs z before op 8: 17.2 ms of compute + 0.6 ms.
TEST(RecomputePlanner, ExcludesACandidateTheGreedySequenceTookNeedlessly) {
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(3, kMiB)
                          .storage(4, 2 * kMiB)
                          .storage(5, kMiB)
                          .storage(6, 2 * kMiB)
                          .storage(7, kMiB)
                          .storage(9, 0)
                          .bandwidth(kMiBPerMs)
                          .op("w", "R9 W7", 3.0, kRec)
                          .op("x", "R9 W1", 0.5, kRec)
                          .op("z", "R9 W3", 0.6, kRec)
                          .op("p1", "W4", 1.0)
                          .op("long", "R9", 10.0)
                          .op("ux", "R1", 0.1)
                          .op("y", "R9 W5", 0.7, kRec)
                          .op("p2", "W6", 1.0)
                          .op("uz", "R3", 0.1)
                          .op("uy", "R5", 0.1)
                          .op("uw", "R7", 0.1)
                          .build();
  const PlanResult plan = plan_with("recompute", trace, 4 * kMiB, DeviceMemory::kBudget);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 2 release_device 3; post 3 release_device 4; post 5 release_device 1; "
                    "post 7 release_device 6; pre 8 recompute 2; post 8 release_device 3; "
                    "post 9 release_device 5; post 10 release_device 7"));
  EXPECT_NEAR(simulated_ms(trace, plan, 4 * kMiB, DeviceMemory::kBudget), 17.8, 1e-9);
  ASSERT_FALSE(plan.notes.empty());
  EXPECT_NE(plan.notes.back().find("1 candidate(s) excluded by a local search"), std::string::npos)
      << plan.notes.back();
}

// The search's bound: kExclusionSearchWork (100,000) / W evaluations, W =
// ops + accesses, at most 128, none below 64. Each op here reads s9 once: W
// = 2 × ops. 50 ops: 1,000, capped at 128; 400 ops: 100,000 / 800 = 125;
// 781 ops: 100,000 / 1,562 = 64.02, so 64; 782 ops: 63.9, below 64, so none.
TEST(RecomputePlanner, ExclusionSearchEvaluationsAreBoundedByTheTraceSize) {
  auto trace_of = [](int ops) {
    TraceDsl dsl;
    dsl.storage(9, 0);
    for (int op = 0; op < ops; ++op) dsl.op("read", "R9", 1.0);
    return dsl.build();
  };
  EXPECT_EQ(internal::exclusion_evaluations(trace_of(50)), 128u);
  EXPECT_EQ(internal::exclusion_evaluations(trace_of(400)), 125u);
  EXPECT_EQ(internal::exclusion_evaluations(trace_of(781)), 64u);
  EXPECT_EQ(internal::exclusion_evaluations(trace_of(782)), 0u);
}

TEST(HybridPlanner, PlannerNamesCreateTheHybridPlanners) {
  for (const std::string_view name : {"hybrid", "recompute"}) {
    Result<std::unique_ptr<Planner>> planner = make_planner(name);
    ASSERT_TRUE(planner.has_value());
    EXPECT_EQ((*planner)->name(), name);
  }
  // The hybrid planner places offloads with the peak planner, so it takes its
  // score weights and rejects unknown ones the same way.
  PlannerOptions options;
  options.score_weights = {{"hiding", 2.0}};
  EXPECT_TRUE(make_planner("hybrid", options).has_value());
  options.score_weights = {{"nonsense", 1.0}};
  const Result<std::unique_ptr<Planner>> bad = make_planner("hybrid", options);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("unknown score weight"), std::string::npos);
}

}  // namespace
}  // namespace hyperoffload
