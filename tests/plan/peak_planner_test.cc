// The peak planner's numbered behaviours (docs/PEAK_PLANNER.md), each on a
// hand-built trace with the exact schedule derived in a comment.
//
// Conventions in the derivations: sN is storage id N; "res" lists resident
// bytes per op before planning; durations are 0 unless given, so the hiding
// term is 0 unless a test sets durations; the excess E is peak - budget.
#include "hyperoffload/plan/peak_planner.h"

#include <gtest/gtest.h>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/greedy_planner.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/sim/simulator.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::hyperoffload::testing::actions;
using ::hyperoffload::testing::copied_to_host;
using ::hyperoffload::testing::TraceDsl;

PlanResult plan_peak(const Trace& trace, std::int64_t budget, const PeakPlannerOptions& options) {
  Result<PlanResult> plan = PeakPlanner(options).plan(trace, budget);
  EXPECT_TRUE(plan.has_value()) << plan.error().message;
  if (!plan) return {};
  const ValidationReport report = validate_schedule(trace, plan->schedule);
  EXPECT_TRUE(report.valid()) << (report.problems.empty() ? "" : report.problems.front());
  EXPECT_TRUE(report.faults.empty());
  EXPECT_EQ(report.peak_bytes, plan->planned_peak_bytes);
  return std::move(*plan);
}

// The hand derivations below are for the unlimited device unless a test says
// capped (DeviceMemory::kBudget, the planner's default), so this helper asks
// for it explicitly.
PlanResult plan_peak(const Trace& trace, std::int64_t budget, PeakScoreWeights weights = {}) {
  PeakPlannerOptions options{weights};
  options.device_memory = DeviceMemory::kUnlimited;
  return plan_peak(trace, budget, options);
}

internal::PeakModel model_of(const Trace& trace) { return internal::build_peak_model(trace, StorageAccesses(trace)); }

// ---- 1. Lifetimes ---------------------------------------------------------

TEST(PeakPlannerLifetimes, ProfilesResidentBytesPerOpAndEdgeBytesPerBoundary) {
  // s1 100 ops 0..2; s2 50 (retained) from op 1 to the end; s3 size 0 ignored;
  // s4 30 only at op 3.
  //   op:    0    1    2    3
  //   res:  100  150  150   80      edge (i -> i+1): 100, 150, 50
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50, Retention::kRetained)
                          .storage(3, 0)
                          .storage(4, 30)
                          .op("a", "W1")
                          .op("b", "R1 W2 W3")
                          .op("c", "R1")
                          .op("d", "W4 R3")
                          .build();
  const internal::PeakModel model = model_of(trace);
  EXPECT_EQ(model.resident_bytes, (std::vector<std::int64_t>{100, 150, 150, 80}));
  EXPECT_EQ(model.edge_bytes, (std::vector<std::int64_t>{100, 150, 50}));
}

TEST(PeakPlannerLifetimes, KeepsRetainedStoragesResidentToTheEnd) {
  // s1 (retained, 100) is last used at op 1 but stays; s2 60 W@2 R@4; s3 60 at op 3.
  //   op:    0    1    2    3    4
  //   res:  100  100  160  220  160        budget 180, E = 40 at op 3
  // Only s2's gap (2,4) covers op 3: copy after its write at op 2, release after
  // op 2 (op 3 cannot hold it: 160 + 60 > 180), prefetch before op 4.
  const Trace trace = TraceDsl()
                          .storage(1, 100, Retention::kRetained)
                          .storage(2, 60)
                          .storage(3, 60)
                          .op("w1", "W1")
                          .op("r1", "R1")
                          .op("w2", "W2")
                          .op("w3", "W3")
                          .op("r2", "R2")
                          .build();
  const PlanResult plan = plan_peak(trace, 180);
  EXPECT_EQ(plan.schedule.actions, actions("post 2 copy_d2h 2; post 2 release_device 2; post 3 release_device 3;"
                                           "pre 4 copy_h2d 2; post 4 release_device 2; post 4 release_host 2"));
  EXPECT_EQ(plan.planned_peak_bytes, 160);

  // The greedy planner's model drops s1 after op 1, sees op 3 at 120 and plans
  // nothing, so the real peak stays at 220.
  const Result<PlanResult> greedy = GreedyPlanner().plan(trace, 180);
  ASSERT_TRUE(greedy.has_value());
  EXPECT_EQ(validate_schedule(trace, greedy->schedule).peak_bytes, 220);
}

TEST(PeakPlannerLifetimes, ExtendsTheLastUseOverAliasForwardOps) {
  // Op 3 only reads and writes s1 (a view-like op): s1 lives through op 3, so
  // it is released after op 3, not after its last ordinary use at op 1.
  //   op:    0    1    2    3
  //   res:  100  100  150  100
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50)
                          .op("w1", "W1")
                          .op("r1", "R1")
                          .op("w2", "W2")
                          .op("view", "R1 W1")
                          .build();
  EXPECT_TRUE(internal::is_alias_forward(trace, 3, 0));
  EXPECT_FALSE(internal::is_alias_forward(trace, 1, 0));  // reads only
  const internal::PeakModel model = model_of(trace);
  EXPECT_EQ(model.resident_bytes, (std::vector<std::int64_t>{100, 100, 150, 100}));
  EXPECT_EQ(model.last_use[0], 3);
  const PlanResult plan = plan_peak(trace, 1000);
  EXPECT_EQ(plan.schedule.actions, actions("post 2 release_device 2; post 3 release_device 1"));
}

// ---- 2. Versions ------------------------------------------------------------

TEST(PeakPlannerVersions, CopiesAVersionOnceAndReusesTheHostCopyForEveryEviction) {
  // s1 100: W@0 R@2 R@4 (one version, copy op 0); s2 100 at op 1; s3 100 at op 3.
  //   op:    0    1    2    3    4
  //   res:  100  200  100  200  100        budget 150
  // Peak op 1: only s1's gap (0,2) covers it; then peak op 3: s1's gap (2,4).
  // Both evictions reuse the single copy taken after op 0; the host copy is
  // released after op 4, where it was last used.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 100)
                          .storage(3, 100)
                          .op("a", "W1")
                          .op("b", "W2")
                          .op("c", "R1")
                          .op("d", "W3")
                          .op("e", "R1")
                          .build();
  const PlanResult plan = plan_peak(trace, 150);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 1; post 0 release_device 1; post 1 release_device 2; pre 2 copy_h2d 1;"
                    "post 2 release_device 1; post 3 release_device 3; pre 4 copy_h2d 1;"
                    "post 4 release_device 1; post 4 release_host 1"));
  const ValidationReport report = validate_schedule(trace, plan.schedule);
  EXPECT_EQ(report.d2h_count, 1);
  EXPECT_EQ(report.h2d_count, 2);
}

TEST(PeakPlannerVersions, ReleasesTheStaleHostCopyBeforeTheRewriteAndCopiesTheNewVersionFresh) {
  // s1 100: W@0 R@2 | W@4 R@6 — the write at op 4 follows a read, so it starts
  // version 2 (copy op 4). s2 100 at op 3, s3 100 at op 5.
  //   op:    0    1    2    3    4    5    6
  //   res:  100  100  100  200  100  200  100      budget 150
  // Peak op 3: s1's gap (2,4) of version 1 (copy after op 0). Its prefetch feeds
  // op 4, which overwrites s1, so the now-stale host copy goes before op 4.
  // Peak op 5: s1's gap (4,6) of version 2, copied fresh after op 4.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 100)
                          .storage(3, 100)
                          .op("a", "W1")
                          .op("b", "")
                          .op("c", "R1")
                          .op("d", "W2")
                          .op("e", "W1")
                          .op("f", "W3")
                          .op("g", "R1")
                          .build();
  const PlanResult plan = plan_peak(trace, 150);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 1; post 2 release_device 1; post 3 release_device 2;"
                    "pre 4 copy_h2d 1; pre 4 release_host 1; post 4 copy_d2h 1; post 4 release_device 1;"
                    "post 5 release_device 3; pre 6 copy_h2d 1; post 6 release_device 1; post 6 release_host 1"));
  EXPECT_EQ(validate_schedule(trace, plan.schedule).d2h_count, 2);
}

TEST(PeakPlannerVersions, EvictsBetweenTwoWritesFromTheFirstWritesCopy) {
  // s1 100: W@0 W@2 R@4 is two versions, what op 0 wrote (copy op 0) and what
  // op 2 wrote (copy op 2): gap (0, 2) is a candidate whose data comes back
  // before op 2 (a write may be partial), gap (2, 4) another. s2 100 at op 1.
  //   op:    0    1    2    3    4
  //   res:  100  200  100  100  100
  //   floor 100  100  100    0  100   (s1 can leave over ops 1 and 3)
  // At a budget of 100 only op 1 is over: the plan copies op 0's version,
  // drops it over op 1 and brings it back for op 2.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 100)
                          .op("a", "W1")
                          .op("b", "W2")
                          .op("c", "W1")
                          .op("d", "")
                          .op("e", "R1")
                          .build();
  const internal::PeakModel model = model_of(trace);
  ASSERT_EQ(model.versions.size(), 3U);  // s1: op 0's, op 2's; s2: op 1's
  ASSERT_EQ(model.interior.size(), 2U);
  EXPECT_EQ(model.interior[0].start_op, 0);
  EXPECT_EQ(model.interior[0].end_op, 2);
  EXPECT_TRUE(model.interior[0].end_op_writes);
  EXPECT_EQ(model.interior[1].start_op, 2);
  EXPECT_EQ(model.interior[1].end_op, 4);
  EXPECT_EQ(model.floor.op, 0);
  EXPECT_EQ(model.floor.bytes, 100);
  const PlanResult plan = plan_peak(trace, 100);
  EXPECT_EQ(plan.planned_peak_bytes, 100);
  EXPECT_EQ(plan.schedule.actions, actions("post 0 copy_d2h 1; post 0 release_device 1; post 1 release_device 2;"
                                           "pre 2 copy_h2d 1; pre 2 release_host 1; post 4 release_device 1"));
}

// ---- 3. Candidates ------------------------------------------------------------

TEST(PeakPlannerCandidates, SplitsGapsIntoInteriorAndBoundaryCandidates) {
  // s1: W@0 R@1 R@4 → boundary (0,1), interior (1,4); s2: W@2 R@3 → boundary (2,3).
  const Trace trace = TraceDsl()
                          .storage(1, 10)
                          .storage(2, 20)
                          .op("a", "W1")
                          .op("b", "R1")
                          .op("c", "W2")
                          .op("d", "R2")
                          .op("e", "R1")
                          .build();
  const internal::PeakModel model = model_of(trace);
  ASSERT_EQ(model.interior.size(), 1U);
  EXPECT_EQ(model.interior[0].start_op, 1);
  EXPECT_EQ(model.interior[0].end_op, 4);
  ASSERT_EQ(model.boundary.size(), 2U);
  EXPECT_EQ(model.boundary[0].start_op, 0);
  EXPECT_EQ(model.boundary[1].start_op, 2);
}

TEST(PeakPlannerCandidates, UsesTheSmallestBoundaryCandidateThatClearsTheEdgeExcess) {
  // s1 100, s2 30, s3 60: all W@0 R@1. No interior gaps, so the floor is the
  // whole 190 and the budget 140 is below it. Edge 0->1 holds 190: excess 50.
  // Reductions: s1 50, s2 30, s3 50 → s3, the smallest of the best.
  const Trace trace =
      TraceDsl().storage(1, 100).storage(2, 30).storage(3, 60).op("a", "W1 W2 W3").op("b", "R1 R2 R3").build();
  const PlanResult plan = plan_peak(trace, 140);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 3; post 0 release_device 3; pre 1 copy_h2d 3; post 1 release_device 1;"
                    "post 1 release_device 2; post 1 release_device 3; post 1 release_host 3"));
  EXPECT_EQ(plan.planned_peak_bytes, 190);  // boundaries never lower an op's bytes
}

TEST(PeakPlannerCandidates, TakesTheLargestBoundaryCandidateWhileNoneClearsTheExcess) {
  // Same trace, budget 40: excess 150. Nothing clears it → s1 (100), leaving 90,
  // excess 50 → s3 (60) clears it, leaving 30.
  const Trace trace =
      TraceDsl().storage(1, 100).storage(2, 30).storage(3, 60).op("a", "W1 W2 W3").op("b", "R1 R2 R3").build();
  const PlanResult plan = plan_peak(trace, 40);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 1; post 0 copy_d2h 3; post 0 release_device 1; post 0 release_device 3;"
                    "pre 1 copy_h2d 1; pre 1 copy_h2d 3; post 1 release_device 1; post 1 release_device 2;"
                    "post 1 release_device 3; post 1 release_host 1; post 1 release_host 3"));
}

TEST(PeakPlannerCandidates, LeavesAnEdgeItsBoundaryCandidatesCannotBringWithinTheLimit) {
  // As above plus s4 (50, retained) written at op 0: edge 0->1 holds 240 and
  // only 190 can leave it. At budget 40 the excess is 200 > 190: moving them all
  // would still leave the edge over, so none moves. At budget 60 (excess 180)
  // they can: s1, then s3 (excess 80), then s2 (excess 20, 30 clears it).
  TraceDsl dsl;
  dsl.storage(1, 100).storage(2, 30).storage(3, 60).storage(4, 50, Retention::kRetained);
  dsl.op("a", "W1 W2 W3 W4").op("b", "R1 R2 R3");
  const Trace trace = dsl.build();
  EXPECT_EQ(plan_peak(trace, 40).schedule.actions,
            actions("post 1 release_device 1; post 1 release_device 2; post 1 release_device 3"));
  const PlanResult fixable = plan_peak(trace, 60);
  EXPECT_EQ(validate_schedule(trace, fixable.schedule).d2h_count, 3);
}

TEST(PeakPlannerCandidates, LeavesBoundaryCandidatesAloneWhenTheBudgetIsReachable) {
  const Trace trace = TraceDsl().storage(1, 100).storage(2, 30).op("a", "W1 W2").op("b", "R1 R2").build();
  const PlanResult plan = plan_peak(trace, 130);
  EXPECT_EQ(plan.schedule.actions, actions("post 1 release_device 1; post 1 release_device 2"));
}

// ---- 4. Unavoidable floor ------------------------------------------------------

TEST(PeakPlannerFloor, ReportsABudgetBelowTheFloorAndStillReducesToIt) {
  // s1 100: W@0 R@2; s2 80 at op 1.
  //   op:      0    1    2
  //   res:    100  180  100
  //   floor:  100   80  100    (s1 can leave op 1) → 100 at op 0 ("fwd")
  // Budget 90 < 100: the plan still evicts s1 over op 1 and reaches 100.
  const Trace trace = TraceDsl().storage(1, 100).storage(2, 80).op("fwd", "W1").op("mid", "W2").op("bwd", "R1").build();
  const PlanResult plan = plan_peak(trace, 90);
  ASSERT_TRUE(plan.floor.has_value());
  EXPECT_EQ(plan.floor->op, 0);
  EXPECT_EQ(plan.floor->bytes, 100);
  ASSERT_EQ(plan.notes.size(), 1U);
  EXPECT_EQ(plan.notes[0],
            "budget 90 B (90 bytes) is below the unavoidable floor of 100 B (100 bytes) at op 0 (fwd): the "
            "planned peak cannot go below the floor; planned as close to the budget as possible");
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 1; post 0 release_device 1; post 1 release_device 2; pre 2 copy_h2d 1;"
                    "post 2 release_device 1; post 2 release_host 1"));
  EXPECT_EQ(plan.planned_peak_bytes, 100);
  EXPECT_EQ(plan.initial_peak_bytes, 180);
}

TEST(PeakPlannerFloor, IsReportedWithoutANoteWhenTheBudgetIsReachable) {
  const Trace trace = TraceDsl().storage(1, 100).storage(2, 80).op("fwd", "W1").op("mid", "W2").op("bwd", "R1").build();
  const PlanResult plan = plan_peak(trace, 100);
  ASSERT_TRUE(plan.floor.has_value());
  EXPECT_EQ(plan.floor->bytes, 100);
  EXPECT_TRUE(plan.notes.empty());
}

// ---- 5. Peak-driven selection -----------------------------------------------------

TEST(PeakPlannerSelection, PicksTheCandidateThatRemovesMoreOfThePeakExcess) {
  // s1 40: W@0 R@9 (the longest gap); s2 100: W@3 R@5; s3 110 at op 4.
  //   op:   0   1   2   3    4    5   6..9
  //   res:  40  40  40  140  250  140  40      budget 200: peak op 4, E = 50
  // Both gaps cover op 4 with equal factors (no compute, one over-budget op, no
  // neighbours); s1 removes 40, s2 removes 50 → s2, and one eviction suffices.
  // (The greedy planner's longest-gap-first ranking would evict both.)
  const Trace trace = TraceDsl()
                          .storage(1, 40)
                          .storage(2, 100)
                          .storage(3, 110)
                          .op("a", "W1")
                          .op("b", "")
                          .op("c", "")
                          .op("d", "W2")
                          .op("e", "W3")
                          .op("f", "R2")
                          .op("g", "")
                          .op("h", "")
                          .op("i", "")
                          .op("j", "R1")
                          .build();
  const PlanResult plan = plan_peak(trace, 200);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 3 copy_d2h 2; post 3 release_device 2; post 4 release_device 3; pre 5 copy_h2d 2;"
                    "post 5 release_device 2; post 5 release_host 2; post 9 release_device 1"));
}

// Two equal gaps that both cover the peak op 4; compute (1 ms at op 7) lies
// only inside s2's gap.
//   s1 100: W@0 R@6 (interior 1..5); s2 100: W@2 R@8 (interior 3..7); s3 50 at op 4.
//   op:    0    1    2    3    4    5    6    7    8
//   res:  100  100  200  200  250  200  200  100  100     budget 200, E = 50
Trace two_gaps_one_hidden() {
  return TraceDsl()
      .storage(1, 100)
      .storage(2, 100)
      .storage(3, 50)
      .op("a", "W1")
      .op("b", "")
      .op("c", "W2")
      .op("d", "")
      .op("e", "W3")
      .op("f", "")
      .op("g", "R1")
      .op("h", "", 1.0)
      .op("i", "R2")
      .build();
}

TEST(PeakPlannerSelection, PrefersTheGapWhoseComputeHidesTheTransfers) {
  // Factors: s1 1 + 0 (no compute inside), s2 1 + 1 (1 ms ≫ 200 B of copies).
  // Placement of s2 (copy after op 2): ops 3, 5..7 hold it again within 200, op 4
  // does not → release after op 3, prefetch before op 5.
  const PlanResult plan = plan_peak(two_gaps_one_hidden(), 200);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 2 copy_d2h 2; post 3 release_device 2; post 4 release_device 3; pre 5 copy_h2d 2;"
                    "post 6 release_device 1; post 8 release_device 2; post 8 release_host 2"));
}

TEST(PeakPlannerSelection, FallsBackToGenerationOrderWhenHidingHasNoWeight) {
  // hiding=0: both factors are 1; the tie goes to s1, generated first.
  const PlanResult plan = plan_peak(two_gaps_one_hidden(), 200, PeakScoreWeights{1, 0, 1, 1});
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 1; post 3 release_device 1; post 4 release_device 3; pre 5 copy_h2d 1;"
                    "post 6 release_device 1; post 6 release_host 1; post 8 release_device 2"));
}

// The cap on lazy re-evaluations (Note [A cap on re-evaluations]): a pick
// that must re-evaluate two candidates, cut at one.
//   s1 100: W@0 R@6; s2 60: W@2 R@8; s3 50 at op 4; 1 ms at ops 1 and 7.
//   op:    0    1    2    3    4    5    6    7    8
//   res:  100  100  160  160  210  160  160   60   60     budget 160, E = 50
// compute_before: 0 at ops 0-1, 1 at ops 2-7, 2 at op 8. Before any pick both
// bounds assume full hiding (each window holds 1 ms, the copies take
// nanoseconds): F = 1 + 1 = 2, and both sizes reach E, so both are keyed by F;
// with SelectionTies::kSmallestFirst s2 (60) leads s1 (100) by the size
// tie-break. Re-evaluated with HostCopyDeadline::kBeforePeak, s2's copy to host
// (after op 2, at 1 ms + ε) ends after the peak op starts (1 ms): hiding 0, F =
// 1, value 50. s1's copy (after op 0, at ε) is in time: F stays 2, value 100.
// Uncapped the pick re-evaluates s1 too and takes it; capped at one it takes
// s2, the best re-evaluated so far, and the note counts the cut pick.
TEST(PeakPlannerSelection, ACappedPickTakesTheBestReEvaluatedSoFar) {
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 60)
                          .storage(3, 50)
                          .op("a", "W1")
                          .op("b", "", 1.0)
                          .op("c", "W2")
                          .op("d", "")
                          .op("e", "W3")
                          .op("f", "")
                          .op("g", "R1")
                          .op("h", "", 1.0)
                          .op("i", "R2")
                          .build();
  PeakPlannerOptions options;
  options.device_memory = DeviceMemory::kUnlimited;
  options.lower_budgets = LowerBudgetPlans::kNone;
  options.ties = SelectionTies::kSmallestFirst;
  options.host_copy_deadline = HostCopyDeadline::kBeforePeak;
  auto copied = [](const PlanResult& plan) {
    std::vector<StorageId> storages;
    for (const Action& action : plan.schedule.actions) {
      if (action.kind == ActionKind::kCopyD2H) storages.push_back(action.storage);
    }
    return storages;
  };
  auto cut_notes = [](const PlanResult& plan) {
    return std::ranges::count_if(plan.notes, [](const std::string& note) { return note.starts_with("selection: "); });
  };
  const PlanResult uncapped = plan_peak(trace, 160, options);
  EXPECT_EQ(copied(uncapped), std::vector<StorageId>{1});
  EXPECT_EQ(cut_notes(uncapped), 0);
  options.max_refreshes_per_pick = 1;
  const PlanResult capped = plan_peak(trace, 160, options);
  EXPECT_EQ(copied(capped), std::vector<StorageId>{2});
  EXPECT_NE(std::ranges::find(capped.notes, "selection: 1 of 1 picks stopped re-evaluating candidates at the cap per "
                                           "pick and took the best re-evaluated so far"),
            capped.notes.end());
}

TEST(PeakPlannerSelection, DoesNotOverrateACandidateLargerThanTheExcess) {
  // s1 1000: W@0 R@6 (no compute inside); s2 60: W@2 R@8 (1 ms at op 7); s3 50
  // at op 4. Budget 1100: op 4 holds 1110, E = 10. Both remove only 10, so the
  // better hidden s2 wins although s1 is 16x larger.
  const Trace trace = TraceDsl()
                          .storage(1, 1000)
                          .storage(2, 60)
                          .storage(3, 50)
                          .op("a", "W1")
                          .op("b", "")
                          .op("c", "W2")
                          .op("d", "")
                          .op("e", "W3")
                          .op("f", "")
                          .op("g", "R1")
                          .op("h", "", 1.0)
                          .op("i", "R2")
                          .build();
  const PlanResult plan = plan_peak(trace, 1100);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 2 copy_d2h 2; post 3 release_device 2; post 4 release_device 3; pre 5 copy_h2d 2;"
                    "post 6 release_device 1; post 8 release_device 2; post 8 release_host 2"));
}

// Peak op 1 can be fixed by s1 (0,2), s5 (0,2) or s2 (0,4); s2 also covers the
// other over-budget op 3; s5 (2,4) covers only op 3. Sizes 100 except s3 60
// (op 1) and s4 150 (op 3).
//   op:    0    1    2    3    4
//   res:  300  360  300  350  200     budget 300: over ops 1 (E 60) and 3
Trace two_peaks_one_wide_gap() {
  return TraceDsl()
      .storage(1, 100)
      .storage(2, 100)
      .storage(3, 60)
      .storage(4, 150)
      .storage(5, 100)
      .op("a", "W1 W5 W2")
      .op("b", "W3")
      .op("c", "R1 R5")
      .op("d", "W4")
      .op("e", "R2 R5")
      .build();
}

TEST(PeakPlannerSelection, PrefersTheGapThatAlsoCoversOtherOverBudgetOps) {
  // Coverage: s2's gap holds op 3 too → (2-1)/(2-1) = 1; the others 0. One
  // eviction of s2 fixes both ops; it leaves after op 0 (op 1 cannot hold it)
  // and returns before op 4 (op 3 cannot either).
  const PlanResult plan = plan_peak(two_peaks_one_wide_gap(), 300);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 2; post 0 release_device 2; post 1 release_device 3; post 2 release_device 1;"
                    "post 3 release_device 4; pre 4 copy_h2d 2; post 4 release_device 2; post 4 release_device 5;"
                    "post 4 release_host 2"));
}

TEST(PeakPlannerSelection, FixesEachPeakSeparatelyWithoutTheCoverageTerm) {
  // coverage=0: op 1 takes s1 (first generated of three ties), op 3 then takes
  // s5's gap (2,4) (generated before s2's). s1 and s5 share the copy op 0.
  const PlanResult plan = plan_peak(two_peaks_one_wide_gap(), 300, PeakScoreWeights{1, 1, 0, 1});
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 1; post 0 copy_d2h 5; post 0 release_device 1; post 1 release_device 3;"
                    "pre 2 copy_h2d 1; post 2 release_device 1; post 2 release_device 5; post 2 release_host 1;"
                    "post 3 release_device 4; pre 4 copy_h2d 5; post 4 release_device 2; post 4 release_device 5;"
                    "post 4 release_host 5"));
}

// Bandwidth for tests with durations: 100 bytes per ms, so a 100-byte storage
// takes 1 ms each way.
constexpr double kHundredBytesPerMs = 100.0 * 1000.0 / static_cast<double>(kBytesPerGiB);

// Every op runs 1 ms. Peak op 1 is fixed first by X = s1 (copied after op 0,
// interior ops 1..3). Peak op 5 can then take Y = s2 (copied after op 2,
// interior 3..6), whose interior shares op 3 with X's, or Z = s3 (copied after
// op 4, interior 5..6). Sizes 100 except fillers s4 250 (op 1), s5 150 (op 5).
//   op:    0    1    2    3    4    5    6    7
//   res:  100  350  200  200  300  350  200  200     budget 300
Trace peaks_with_overlapping_gaps() {
  return TraceDsl()
      .storage(1, 100)
      .storage(2, 100)
      .storage(3, 100)
      .storage(4, 250)
      .storage(5, 150)
      .bandwidth(kHundredBytesPerMs)
      .op("a", "W1", 1)
      .op("b", "W4", 1)
      .op("c", "W2", 1)
      .op("d", "", 1)
      .op("e", "R1 W3", 1)
      .op("f", "W5", 1)
      .op("g", "", 1)
      .op("h", "R2 R3", 1)
      .build();
}

TEST(PeakPlannerSelection, PenalizesGapsWhoseCopyEngineTimeIsAlreadyTaken) {
  // Op 1 (E 50): only X covers it. Op 5 (E 50): Y and Z both remove 50 and
  // cover no other over-budget op. Both hide: Y's data is on the host at 4 ms
  // (copy after op 2 ends at 3 ms, 1 ms long, behind X's 1 ms copy from 1 ms)
  // and is needed at 7 ms; Z's at 6 ms (after op 4 ends at 5 ms), needed at 7
  // ms — 1 ms of slack covers the 1 ms copy back. X's 2 ms of copies are spread
  // over its window (ops 1..3, 3 ms); Y's window (ops 3..6, 4 ms) holds 2/3 ms
  // of them: neighbour impact 1/6 → factor 2 - 1/6 for Y, 2 for Z → Z.
  // Placement, budget 300: X returns before op 2 (op 1 holds 250), leaves after
  // op 0; Z returns before op 6 (op 5 holds 250), leaves after op 4.
  const PlanResult plan = plan_peak(peaks_with_overlapping_gaps(), 300);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 1; post 0 release_device 1; post 1 release_device 4; pre 2 copy_h2d 1;"
                    "post 4 copy_d2h 3; post 4 release_device 1; post 4 release_device 3; post 4 release_host 1;"
                    "post 5 release_device 5; pre 6 copy_h2d 3; post 7 release_device 2; post 7 release_device 3;"
                    "post 7 release_host 3"));
}

TEST(PeakPlannerSelection, IgnoresCopyEngineContentionWhenNeighbourImpactHasNoWeight) {
  // neighbor_impact=0: Y and Z tie at factor 2; Y was generated first. Y is
  // copied after its write at op 2; ops 3..4 can hold it again (at most 200),
  // op 5 cannot: it leaves after op 4 and returns before op 6.
  const PlanResult plan = plan_peak(peaks_with_overlapping_gaps(), 300, PeakScoreWeights{1, 1, 1, 0});
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 1; post 0 release_device 1; post 1 release_device 4; pre 2 copy_h2d 1;"
                    "post 2 copy_d2h 2; post 4 release_device 1; post 4 release_device 2; post 4 release_host 1;"
                    "post 5 release_device 5; pre 6 copy_h2d 2; post 7 release_device 2; post 7 release_device 3;"
                    "post 7 release_host 2"));
}

TEST(PeakPlannerSelection, WithCopyBackWindowsCannotHideACopyBackAcrossTheGapsLastOverBudgetOp) {
  // 1 MiB per ms each way. s1, s2 2 MiB: W@0, s1 R@3, s2 R@5; s3 1 MiB at op 2.
  //   op:    0    1      2    3    4      5
  //   ms:    0    10     0    0    10     0
  //   res:   4    4      5    4    2      2  MiB     budget 4 MiB: peak op 2, E = 1 MiB
  // Both gaps cover op 2, both remove E and reach the host by 2 ms. s1's copy
  // back cannot start before op 2, the last over-budget op of its gap, ends
  // (10 ms), and op 3 starts then: H = 0, factor 1. s2's has op 4 (10 ms) for
  // its 2 ms: H = 1, factor 2 → s2, and nothing stalls. Without the windows
  // (the default, CopyBackWindows::kNone) the copy back is timed from the data
  // reaching the host: both H = 1, the tie goes to s1, and its copy back,
  // which cannot start before op 2 ends, stalls op 3 for 2 ms.
  constexpr std::int64_t kMiB = 1 << 20;
  const Trace trace = TraceDsl()
                          .storage(1, 2 * kMiB)
                          .storage(2, 2 * kMiB)
                          .storage(3, kMiB)
                          .bandwidth(1000.0 / 1024.0)
                          .op("a", "W1 W2")
                          .op("b", "", 10.0)
                          .op("c", "W3")
                          .op("d", "R1")
                          .op("e", "", 10.0)
                          .op("f", "R2")
                          .build();
  const PlanResult plain = plan_peak(trace, 4 * kMiB);
  EXPECT_EQ(copied_to_host(plain.schedule.actions), std::vector<StorageId>{1});
  EXPECT_DOUBLE_EQ(simulate(trace, plain.schedule).stall_ms, 2.0);
  PeakPlannerOptions windows;
  windows.windows = CopyBackWindows::kBeforePlanning;
  const PlanResult plan = plan_peak(trace, 4 * kMiB, windows);
  EXPECT_EQ(copied_to_host(plan.schedule.actions), std::vector<StorageId>{2});
  EXPECT_DOUBLE_EQ(simulate(trace, plan.schedule).stall_ms, 0.0);
}

TEST(PeakPlannerSelection, BreaksTiesTowardsTheSmallestWhenAsked) {
  // s1 200, s2 100: W@0 R@2; s3 100 at op 1.
  //   op:   0    1    2
  //   res:  300  400  300     budget 300: peak op 1, E = 100
  // No compute (H = 0), one over-budget op (C = 0), nothing selected (N = 0):
  // both factors are 1 and both remove E. The tie goes to s1, generated first,
  // or with SelectionTies::kSmallestFirst to s2.
  const Trace trace =
      TraceDsl().storage(1, 200).storage(2, 100).storage(3, 100).op("a", "W1 W2").op("b", "W3").op("c", "R1 R2").build();
  EXPECT_EQ(copied_to_host(plan_peak(trace, 300).schedule.actions), std::vector<StorageId>{1});
  PeakPlannerOptions smallest;
  smallest.ties = SelectionTies::kSmallestFirst;
  EXPECT_EQ(copied_to_host(plan_peak(trace, 300, smallest).schedule.actions), std::vector<StorageId>{2});
}

// The trace of the host-copy-deadline and lower-budget tests below (their
// comments derive its numbers).
Trace host_copy_deadline_trace() {
  return TraceDsl()
      .storage(1, 120)
      .storage(2, 100)
      .storage(3, 50)
      .bandwidth(40e3 / static_cast<double>(kBytesPerGiB))
      .op("a", "W1", 1)
      .op("b", "", 1)
      .op("c", "", 1)
      .op("d", "W2", 1)
      .op("e", "W3", 1)
      .op("f", "", 1)
      .op("g", "R1", 1)
      .op("h", "", 4)
      .op("i", "R2")
      .build();
}

TEST(PeakPlannerSelection, WithAHostCopyDeadlineCreditsHidingOnlyToCopiesDoneBeforeThePeak) {
  // Copies at 40 B per ms; ops 1 ms but h, 4 ms. s1 (120 B) W@0 R@6, s2
  // (100 B) W@3 R@8, s3 (50 B) at op 4.
  //   op:   0    1    2    3    4    5    6    7    8
  //   res:  120  120  120  220  270  220  220  100  100    budget 220: E = 50 at op 4
  // Both remove E; one over-budget op (no coverage term). Hiding: s1 is on the
  // host at 1 + 3 = 4 ms and needed at 6: (6 - 4) / 3 = 2/3; s2 on the host at
  // 4 + 2.5 = 6.5 and needed at 11: 1. So s2 (factor 2 against 5/3) — but op 4
  // starts at 4 ms, before s2 is on the host: on a device that holds only the
  // budget it waits 2.5 ms for that memory. With HostCopyDeadline::kBeforePeak
  // s2 gets no hiding credit (1 < 5/3) and s1, on the host by 4 ms, is taken:
  // op 6 waits 2 ms for its copy back (5 to 8 ms) instead.
  const Trace trace = host_copy_deadline_trace();
  PeakPlannerOptions capped;
  capped.device_memory = DeviceMemory::kBudget;
  capped.lower_budgets = LowerBudgetPlans::kNone;  // the selection for 220 itself
  SimulatorOptions sim;
  sim.device_memory = DeviceMemory::kBudget;
  sim.budget_bytes = 220;
  const PlanResult late = plan_peak(trace, 220, capped);
  EXPECT_EQ(copied_to_host(late.schedule.actions), std::vector<StorageId>{2});
  EXPECT_NEAR(simulate(trace, late.schedule, sim).stall_ms, 2.5, 1e-9);
  capped.host_copy_deadline = HostCopyDeadline::kBeforePeak;
  const PlanResult early = plan_peak(trace, 220, capped);
  EXPECT_EQ(copied_to_host(early.schedule.actions), std::vector<StorageId>{1});
  EXPECT_NEAR(simulate(trace, early.schedule, sim).stall_ms, 2.0, 1e-9);
}

TEST(PeakPlannerLowerBudgets, KeepsThePlanOfALowerBudgetWhenItIsQuickerWithinThisOne) {
  // The trace of WithAHostCopyDeadlineCreditsHidingOnlyToCopiesDoneBeforeThePeak:
  // unplanned peak 270 at op 4, floor 120 at op 6 (s1 is read there; s2 can
  // leave over it), so the budget ladder is 120, then every 5% of 270 above it
  // (rounded down): 121 (45%), 135, 148, 162, 175, 189, 202, 216, 229, ...
  // At 220 the selection takes s2 alone, which stalls 2.5 ms on the capped
  // device (above). At rung 162 (60%) ops 4 and 6 are both over: it evicts s1
  // for op 4 and s2 for op 6; within 220 that plan stalls 2.0 ms (op g waits
  // for s1's copy back, as in the kBeforePeak plan above, and s2's copy to
  // host is done before op e needs the room). No rung's plan is quicker, and
  // the highest one wins ties, so the plan for 162 is kept, with a note.
  const Trace trace = host_copy_deadline_trace();
  PeakPlannerOptions capped;
  capped.device_memory = DeviceMemory::kBudget;
  SimulatorOptions sim;
  sim.device_memory = DeviceMemory::kBudget;
  sim.budget_bytes = 220;
  const PlanResult plan = plan_peak(trace, 220, capped);
  EXPECT_EQ(copied_to_host(plan.schedule.actions), (std::vector<StorageId>{1, 2}));
  EXPECT_NEAR(simulate(trace, plan.schedule, sim).stall_ms, 2.0, 1e-9);
  ASSERT_FALSE(plan.notes.empty());
  EXPECT_EQ(plan.notes.back(),
            "the plan made for 162 B (162 bytes), a lower budget, is quicker within this one: 2.000 ms of stall");
  capped.lower_budgets = LowerBudgetPlans::kNone;  // the plan made for 220 itself
  EXPECT_NEAR(simulate(trace, plan_peak(trace, 220, capped).schedule, sim).stall_ms, 2.5, 1e-9);
}

TEST(PeakPlannerSelection, TakesCopyBackWindowsFromAFirstPassWhenAsked) {
  // A 6-layer MLP step (scripts/optimal-gap-benchmarks.sh, mlp-6-s3): sN is
  // storage N in MiB, weights (1, 3, 5, 7, 9, 11) and their gradients retained;
  // 16 GiB/s, so a copy of 16 MiB takes 1/1024 s = 0.9765625 ms. Unplanned, the
  // peak is 85 MiB at bwd5 (op 8); bwd4 (op 9) holds 70 MiB and bwd3 (op 10)
  // 66 MiB. Budget 61.6 MiB: E = 23.4 MiB at op 8, and ops 9 and 10 are over too.
  // Hiding-first weights (no neighbour term), ties to the smallest.
  // - Windows before planning: ops 9 and 10 are over the budget, so every gap
  //   ending at op 10 or 11 (s4, s5, s6, s7: read by bwd3 and bwd2) cannot start
  //   its copy back before op 9 or 10 ends: H = 0, as for s8 (16 MiB, read by
  //   bwd4). After s0, s2, s3 and s1 (11 MiB, all hidden: read by bwd1 and bwd0,
  //   with bwd3's 4 ms before them), E = 12.4 MiB and every candidate left
  //   scores the base credit: s8 removes the most → its copy back starts when
  //   bwd5 ends and stalls bwd4 for 0.9765625 ms.
  // - Windows of a first pass: after that pass's picks ops 9 and 10 are within
  //   the budget with s4..s7 resident, so their copies back can run during bwd4
  //   (1 ms) and bwd3: H = 1, and they beat s8. Every copy hides: no stall, and
  //   the step takes its compute, 19.05 ms.
  constexpr std::int64_t kMiB = 1 << 20;
  TraceDsl dsl;
  const std::pair<StorageId, std::int64_t> sizes[] = {{0, 4},  {1, 1},   {2, 4},  {3, 2},   {4, 8},  {5, 1},  {6, 2},
                                                      {7, 2},  {8, 16},  {9, 1},  {10, 4},  {11, 2}, {12, 16}, {13, 16},
                                                      {14, 4}, {15, 2},  {16, 16}, {17, 1}, {18, 2}, {19, 2}, {20, 8},
                                                      {21, 1}, {22, 4},  {23, 2}, {24, 4},  {25, 1}};
  for (const auto& [id, mib] : sizes) {
    const bool retained = id == 1 || id == 3 || id == 5 || id == 7 || id == 9 || id == 11 || id == 15 || id == 17 ||
                          id == 19 || id == 21 || id == 23 || id == 25;
    dsl.storage(id, mib * kMiB, retained ? Retention::kRetained : Retention::kReleasable);
  }
  const Trace trace = dsl.bandwidth(16.0)
                          .op("load", "W0", 0.1)
                          .op("fwd0", "R0 R1 W2", 0.5)
                          .op("fwd1", "R2 R3 W4", 1.0)
                          .op("fwd2", "R4 R5 W6", 0.25)
                          .op("fwd3", "R6 R7 W8", 2.0)
                          .op("fwd4", "R8 R9 W10", 0.5)
                          .op("fwd5", "R10 R11 W12", 2.0)
                          .op("loss", "R12 W13", 0.2)
                          .op("bwd5", "R13 R10 R12 R11 W14 W15", 4.0)
                          .op("bwd4", "R14 R8 R10 R9 W16 W17", 1.0)
                          .op("bwd3", "R16 R6 R8 R7 W18 W19", 4.0)
                          .op("bwd2", "R18 R4 R6 R5 W20 W21", 0.5)
                          .op("bwd1", "R20 R2 R4 R3 W22 W23", 2.0)
                          .op("bwd0", "R22 R0 R2 R1 W24 W25", 1.0)
                          .build();
  const std::int64_t budget = 64'592'281;
  PeakPlannerOptions options;
  options.weights = PeakScoreWeights{0.1, 4.0, 1.0, 0.0};
  options.ties = SelectionTies::kSmallestFirst;
  auto stall_ms = [&](CopyBackWindows windows) {
    options.windows = windows;
    const PlanResult plan = plan_peak(trace, budget, options);
    EXPECT_LE(plan.planned_peak_bytes, budget);
    return simulate(trace, plan.schedule).stall_ms;
  };
  EXPECT_DOUBLE_EQ(stall_ms(CopyBackWindows::kBeforePlanning), 0.9765625);
  EXPECT_DOUBLE_EQ(stall_ms(CopyBackWindows::kAfterAFirstPass), 0.0);
  EXPECT_DOUBLE_EQ(trace.total_compute_ms(), 19.05);
}

TEST(PeakPlannerSelection, StopsWhenNothingCoversThePeak) {
  // Both storages are accessed at op 1, the only op: nothing can move.
  const Trace trace = TraceDsl().storage(1, 100).storage(2, 100).op("a", "W1 W2").build();
  const PlanResult plan = plan_peak(trace, 50);
  EXPECT_EQ(plan.planned_peak_bytes, 200);
  EXPECT_EQ(plan.schedule.actions, actions("post 0 release_device 1; post 0 release_device 2"));
}

// ---- 6. Placement --------------------------------------------------------------------

TEST(PeakPlannerPlacement, CopiesAfterTheLastWriteReleasesLatestAndPrefetchesEarliest) {
  // s1 100: W@0 R@1 R@2 R@8; s2 100 at op 6 only.
  //   op:    0    1    2    3    4    5    6    7    8
  //   res:  100  100  100  100  100  100  200  100  100     budget 150
  // Gap (2,8) covers op 6. The copy follows the write at op 0 (not the gap
  // start); ops 3..5 and 7 can still hold s1, so it leaves after op 5 and comes
  // back before op 7.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 100)
                          .op("a", "W1")
                          .op("b", "R1")
                          .op("c", "R1")
                          .op("d", "")
                          .op("e", "")
                          .op("f", "")
                          .op("g", "W2")
                          .op("h", "")
                          .op("i", "R1")
                          .build();
  const PlanResult plan = plan_peak(trace, 150);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 1; post 5 release_device 1; post 6 release_device 2; pre 7 copy_h2d 1;"
                    "post 8 release_device 1; post 8 release_host 1"));
}

TEST(PeakPlannerPlacement, GivesBackEveryOpThatHasRoomForTheStorage) {
  // s1 100: W@0 R@6; s2 60: W@1 R@5 (a second tenant the whole time); s3 50 at
  // op 3. Budget 160: ops 1..5 hold 160 with s1, op 3 holds 210.
  //   op:    0    1    2    3    4    5    6
  //   res:  100  160  160  210  160  160  100
  // s2 (60) removes 50 too, but s1 is generated first; after selecting it, ops
  // 1..5 sit at 60, 60, 110, 60, 60 and may take s1 back only where <= 60:
  // ops 1..2 and 4..5 → release after op 2, prefetch before op 4.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 60)
                          .storage(3, 50)
                          .op("a", "W1")
                          .op("b", "W2")
                          .op("c", "")
                          .op("d", "W3")
                          .op("e", "")
                          .op("f", "R2")
                          .op("g", "R1")
                          .build();
  const PlanResult plan = plan_peak(trace, 160);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 1; post 2 release_device 1; post 3 release_device 3; pre 4 copy_h2d 1;"
                    "post 5 release_device 2; post 6 release_device 1; post 6 release_host 1"));
}

TEST(PeakPlannerPlacement, DropsACandidateThatLaterSelectionsMadeRedundant) {
  // s1 100: W@0 R@2; s2 100: W@0 R@4; s3 60 at op 1; s4 150 at op 3.
  //   op:    0    1    2    3    4
  //   res:  200  260  200  250  100      budget 200
  // Without the coverage term op 1 first takes s1 (a tie with s2, generated
  // first), then op 3 takes s2, whose gap covers op 1 as well. Placing s1 after
  // that: op 1 is at 60 and can hold s1 again → s1's eviction is dropped.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 100)
                          .storage(3, 60)
                          .storage(4, 150)
                          .op("a", "W1 W2")
                          .op("b", "W3")
                          .op("c", "R1")
                          .op("d", "W4")
                          .op("e", "R2")
                          .build();
  const PlanResult plan = plan_peak(trace, 200, PeakScoreWeights{1, 1, 0, 1});
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 2; post 0 release_device 2; post 1 release_device 3; post 2 release_device 1;"
                    "post 3 release_device 4; pre 4 copy_h2d 2; post 4 release_device 2; post 4 release_host 2"));
}

TEST(PeakPlannerPlacement, IssuesSimultaneousPrefetchesSoonestNeededFirst) {
  // s2 100: W@0 R@6; s1 100: W@1 R@9; s3 200 at op 3. Budget 200. Zero compute.
  //   op:    0    1    2    3    4    5    6    7    8    9
  //   res:  100  200  200  400  200  200  200  100  100  100
  // E = 200 at op 3: s2 (generated first) then s1 leave. After both, ops 1..8
  // hold 100 0 200 0 0 100 0 0; with each prefetch placed as early as the budget
  // allows, soonest needed first, both come back before op 4 and both leave
  // after op 2. In pre 4, s2 (needed at op 6) is copied before s1 (op 9)
  // although its id is higher; its data is on the host first, too (copied
  // after op 0, s1 after op 1).
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 100)
                          .storage(3, 200)
                          .op("a", "W2")
                          .op("b", "W1")
                          .op("c", "")
                          .op("d", "W3")
                          .op("e", "")
                          .op("f", "")
                          .op("g", "R2")
                          .op("h", "")
                          .op("i", "")
                          .op("j", "R1")
                          .build();
  const PlanResult plan = plan_peak(trace, 200);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 2; post 1 copy_d2h 1; post 2 release_device 1; post 2 release_device 2;"
                    "post 3 release_device 3; pre 4 copy_h2d 2; pre 4 copy_h2d 1; post 6 release_device 2;"
                    "post 6 release_host 2; post 9 release_device 1; post 9 release_host 1"));
}

TEST(PeakPlannerPlacement, RunsALaterPrefetchWhileTheSoonerOneWaitsForItsData) {
  // Copies of 100 bytes take 1 ms; op b runs 1 ms, the others 0. s1 100: W@0
  // R@9; s2 100: W@1 R@6; s3 200 at op 3. Budget 200.
  //   op:     0    1    2    3    4    5    6    7    8    9
  //   res:   100  200  200  400  200  200  200  100  100  100
  //   start:  0    0    1    1    1    1    1    1    1    1   (ms, no stall)
  // Both leave after op 2 (op 3 cannot hold them) and may return before op 4.
  // Copies to host, by when their copies back must start at the latest (s2's
  // use at 6 comes first: by -1 ms; s1's at 9: by 0 ms): s2 is due first but
  // cannot start before b ends at 1 ms, so s1 runs 0-1 and s2 1-2.
  // Soonest-needed order would copy s2 back first, idle until 2 ms, then s1:
  // g starts at 3, j at 4 (3 ms of stall). Running s1 (ready at 1) in that idle
  // time finishes by 2 without delaying s2: g starts at 3, j at 3 (2 ms), so
  // the stall estimate picks it: pre 4 copies s1 first.
  //   D2H   [s1][s2]
  //   H2D       [s1][s2]
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 100)
                          .storage(3, 200)
                          .bandwidth(100.0 * 1000.0 / static_cast<double>(kBytesPerGiB))
                          .op("a", "W1")
                          .op("b", "W2", 1)
                          .op("c", "")
                          .op("d", "W3")
                          .op("e", "")
                          .op("f", "")
                          .op("g", "R2")
                          .op("h", "")
                          .op("i", "")
                          .op("j", "R1")
                          .build();
  const PlanResult plan = plan_peak(trace, 200);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 1; post 1 copy_d2h 2; post 2 release_device 1; post 2 release_device 2;"
                    "post 3 release_device 3; pre 4 copy_h2d 1; pre 4 copy_h2d 2; post 6 release_device 2;"
                    "post 6 release_host 2; post 9 release_device 1; post 9 release_host 1"));
  EXPECT_DOUBLE_EQ(simulate(trace, plan.schedule).stall_ms, 2.0);
}

TEST(PeakPlannerCopiesToHost, RunsTheCopyNeededFirstFirst) {
  // s1 and s2 (100 bytes, 1 ms per copy) are both written by op a; ops h and i
  // run 1 ms, the others 0. Both must leave during op d (s3 takes the whole
  // budget of 200 there); s2 is read again at op g (starts at 0 ms without
  // stall), s1 at op j (2 ms).
  //   op:     0    1    2    3    4    5    6    7    8    9
  //   res:   200  200  200  400  200  200  200  100  100  100
  // Copies to host are due by the latest start of their copies back, scheduled
  // backwards from the last use: s1 by 2 - 1 = 1 ms, s2 by min(1, 0) - 1 = -1
  // ms. So s2 is copied first although s1 comes first in the op (the order
  // copies used to run in):
  //   D2H   [s2][s1]           g waits for s2 until 2 ms; h, i run 2-4; s1
  //   H2D       [s2][s1]       is back at 3, before j: 2 ms of stall.
  // In write order (s1 first) s2 would be back at 3 at the earliest: 3 ms.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 100)
                          .storage(3, 200)
                          .bandwidth(100.0 * 1000.0 / static_cast<double>(kBytesPerGiB))
                          .op("a", "W1 W2")
                          .op("b", "")
                          .op("c", "")
                          .op("d", "W3")
                          .op("e", "")
                          .op("f", "")
                          .op("g", "R2")
                          .op("h", "", 1)
                          .op("i", "", 1)
                          .op("j", "R1")
                          .build();
  const PlanResult plan = plan_peak(trace, 200);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 0 copy_d2h 2; post 0 copy_d2h 1; post 2 release_device 1; post 2 release_device 2;"
                    "post 3 release_device 3; pre 4 copy_h2d 2; pre 4 copy_h2d 1; post 6 release_device 2;"
                    "post 6 release_host 2; post 9 release_device 1; post 9 release_host 1"));
  EXPECT_DOUBLE_EQ(simulate(trace, plan.schedule).stall_ms, 2.0);
}

TEST(PeakPlannerPlacement, OnACappedDeviceReleasesFirstWhatReachesTheHostFirst) {
  // Every op runs 1 ms; copies of 100 bytes take 1 ms. Budget 200. s1 (100,
  // W@0 R@9) and s2 (100, W@1 R@6) must make room for s3 (100, W@2 R@3) and s4
  // (100, W@3 R@4), which live across no op.
  //   op:     a(0) b(1) c(2) d(3) e(4) f(5) g(6) h(7) i(8) j(9)
  //   res:    100  200  300  400  300  200  200  100  100  100
  // Copies to host: s1 1-2 ms (after a), s2 2-3 ms (after b). s2 comes back
  // before e, s1 before f. Op c has room for only one of them, so one is
  // released after b and the other after c.
  //  - unlimited memory: the later release goes to s1, copied back last; s2 is
  //    released after b, before its copy to host has even started — harmless,
  //    nothing waits for a release. No stall.
  //  - capped: the later release goes to s2, whose copy to host completes last;
  //    s1's (done at 2 ms) frees room for c on time. No stall, where the
  //    unlimited plan makes c wait for s2's copy until 3 ms (1 ms of stall).
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 100)
                          .storage(3, 100)
                          .storage(4, 100)
                          .bandwidth(100.0 * 1000.0 / static_cast<double>(kBytesPerGiB))
                          .op("a", "W1", 1)
                          .op("b", "W2", 1)
                          .op("c", "W3", 1)
                          .op("d", "R3 W4", 1)
                          .op("e", "R4", 1)
                          .op("f", "", 1)
                          .op("g", "R2", 1)
                          .op("h", "", 1)
                          .op("i", "", 1)
                          .op("j", "R1", 1)
                          .build();
  const char* rest =
      "post 3 release_device 3; pre 4 copy_h2d 2; post 4 release_device 4; pre 5 copy_h2d 1;"
      "post 6 release_device 2; post 6 release_host 2; post 9 release_device 1; post 9 release_host 1";
  SimulatorOptions capped;
  capped.device_memory = DeviceMemory::kBudget;
  capped.budget_bytes = 200;

  const PlanResult unlimited = plan_peak(trace, 200);
  EXPECT_EQ(unlimited.schedule.actions,
            actions(std::string("post 0 copy_d2h 1; post 1 copy_d2h 2; post 1 release_device 2;"
                                "post 2 release_device 1;") +
                    rest));
  EXPECT_DOUBLE_EQ(simulate(trace, unlimited.schedule).stall_ms, 0.0);
  EXPECT_DOUBLE_EQ(simulate(trace, unlimited.schedule, capped).stall_ms, 1.0);

  PeakPlannerOptions options;
  options.device_memory = DeviceMemory::kBudget;
  const Result<PlanResult> tuned = PeakPlanner(options).plan(trace, 200);
  ASSERT_TRUE(tuned.has_value());
  EXPECT_EQ(tuned->schedule.actions,
            actions(std::string("post 0 copy_d2h 1; post 1 copy_d2h 2; post 1 release_device 1;"
                                "post 2 release_device 2;") +
                    rest));
  EXPECT_DOUBLE_EQ(simulate(trace, tuned->schedule, capped).stall_ms, 0.0);
}

TEST(PeakPlannerCopiesToHost, OnACappedDeviceRunsFirstTheCopyWhoseReleaseFreesMemoryFirst) {
  // As above, but s1 and s2 are both written by op a (s1 first).
  //   op:     a(0) b(1) c(2) d(3) e(4) f(5) g(6) h(7) i(8) j(9)
  //   res:    200  200  300  400  300  200  200  100  100  100
  // Both copies to host can start at 1 ms. One of s1, s2 is released after b,
  // the other after c.
  //  - unlimited memory: s2 is copied back first (for g), so its copy to host
  //    runs first; s1, copied back last, gets the later release.
  //  - capped: the first placement's copies in op order finish s1 at 2 ms and
  //    s2 at 3, so s2 gets the later release; s1's release must free memory by
  //    c (2 ms), s2's by d (3 ms): s1's copy runs first.
  // Either way nothing waits (c needs the first release's copy done by 2 ms).
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 100)
                          .storage(3, 100)
                          .storage(4, 100)
                          .bandwidth(100.0 * 1000.0 / static_cast<double>(kBytesPerGiB))
                          .op("a", "W1 W2", 1)
                          .op("b", "", 1)
                          .op("c", "W3", 1)
                          .op("d", "R3 W4", 1)
                          .op("e", "R4", 1)
                          .op("f", "", 1)
                          .op("g", "R2", 1)
                          .op("h", "", 1)
                          .op("i", "", 1)
                          .op("j", "R1", 1)
                          .build();
  const char* rest =
      "post 3 release_device 3; pre 4 copy_h2d 2; post 4 release_device 4; pre 5 copy_h2d 1;"
      "post 6 release_device 2; post 6 release_host 2; post 9 release_device 1; post 9 release_host 1";
  SimulatorOptions capped;
  capped.device_memory = DeviceMemory::kBudget;
  capped.budget_bytes = 200;

  const PlanResult unlimited = plan_peak(trace, 200);
  EXPECT_EQ(unlimited.schedule.actions,
            actions(std::string("post 0 copy_d2h 2; post 0 copy_d2h 1; post 1 release_device 2;"
                                "post 2 release_device 1;") +
                    rest));
  EXPECT_DOUBLE_EQ(simulate(trace, unlimited.schedule).stall_ms, 0.0);

  PeakPlannerOptions options;
  options.device_memory = DeviceMemory::kBudget;
  const Result<PlanResult> tuned = PeakPlanner(options).plan(trace, 200);
  ASSERT_TRUE(tuned.has_value());
  EXPECT_EQ(tuned->schedule.actions,
            actions(std::string("post 0 copy_d2h 1; post 0 copy_d2h 2; post 1 release_device 1;"
                                "post 2 release_device 2;") +
                    rest));
  EXPECT_DOUBLE_EQ(simulate(trace, tuned->schedule, capped).stall_ms, 0.0);
}

// ---- Options and edge cases -------------------------------------------------------------

TEST(PeakPlannerOptions, AcceptsEachNamedWeight) {
  const std::vector<std::pair<std::string, double>> weights = {
      {"peak_reduction", 2}, {"hiding", 0.5}, {"coverage", 0}, {"neighbor_impact", 3}, {"hiding", 4}};
  const Result<PeakPlannerOptions> options = peak_planner_options(weights);
  ASSERT_TRUE(options.has_value());
  EXPECT_EQ(options->weights.peak_reduction, 2);
  EXPECT_EQ(options->weights.hiding, 4);  // the later value wins
  EXPECT_EQ(options->weights.coverage, 0);
  EXPECT_EQ(options->weights.neighbor_impact, 3);
}

TEST(PeakPlannerOptions, RejectsAnUnknownNameListingTheValidOnes) {
  const std::vector<std::pair<std::string, double>> weights = {{"speed", 1}};
  const Result<PeakPlannerOptions> options = peak_planner_options(weights);
  ASSERT_FALSE(options.has_value());
  EXPECT_EQ(options.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(options.error().message,
            "unknown score weight \"speed\" (valid: peak_reduction, hiding, coverage, neighbor_impact)");
  PlannerOptions planner_options;
  planner_options.score_weights = weights;
  EXPECT_FALSE(make_planner("peak", planner_options).has_value());
}

TEST(PeakPlannerOptions, RejectsNegativeAndNonFiniteWeights) {
  const std::vector<std::pair<std::string, double>> negative = {{"hiding", -1}};
  EXPECT_FALSE(peak_planner_options(negative).has_value());
  const std::vector<std::pair<std::string, double>> infinite = {{"coverage", std::numeric_limits<double>::infinity()}};
  EXPECT_FALSE(peak_planner_options(infinite).has_value());
}

TEST(PeakPlannerOptions, IsCreatedByNameAfterGreedy) {
  ASSERT_EQ(planner_names().size(), 4U);
  EXPECT_EQ(planner_names()[0], "greedy");
  EXPECT_EQ(planner_names()[1], "peak");
  EXPECT_EQ(planner_names()[2], "hybrid");
  EXPECT_EQ(planner_names()[3], "recompute");
  const Result<std::unique_ptr<Planner>> planner = make_planner("peak");
  ASSERT_TRUE(planner.has_value());
  EXPECT_EQ((*planner)->name(), "peak");
}

TEST(PeakPlannerEdgeCases, PlansNothingWithoutABudgetOrOps) {
  const Trace trace = TraceDsl().storage(1, 100).op("a", "W1").op("b", "").op("c", "R1").build();
  const Result<PlanResult> unlimited = PeakPlanner().plan(trace, std::nullopt);
  ASSERT_TRUE(unlimited.has_value());
  EXPECT_TRUE(unlimited->schedule.actions.empty());
  EXPECT_EQ(unlimited->schedule.planner, "peak");
  const Result<PlanResult> empty = PeakPlanner().plan(Trace(), 100);
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->schedule.actions.empty());
}

}  // namespace
}  // namespace hyperoffload
