// The DTR reference planner (plan/dtr_planner.h): its evictions and
// rematerializations on hand-built traces, each schedule derived in a comment,
// and its guarantees over random traces.
//
// Conventions: sN is storage id N; "rec" marks a recomputable op; durations in
// ms; s9 (size 0) is an input every op may read, never released.
#include "hyperoffload/plan/dtr_planner.h"

#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/sim/simulator.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::hyperoffload::testing::actions;
using ::hyperoffload::testing::TraceDsl;
using ::testing::HasSubstr;
constexpr Recomputable kRec = Recomputable::kYes;
constexpr std::int64_t kMiB = 1 << 20;

PlanResult planned_by_dtr(const Trace& trace, std::optional<std::int64_t> budget) {
  Result<std::unique_ptr<Planner>> made = make_planner("dtr");
  EXPECT_TRUE(made.has_value());
  if (!made) return {};
  Result<PlanResult> plan = (*made)->plan(trace, budget);
  EXPECT_TRUE(plan.has_value()) << plan.error().message;
  if (!plan) return {};
  const ValidationReport report = validate_schedule(trace, plan->schedule);
  EXPECT_TRUE(report.valid()) << (report.problems.empty() ? "" : report.problems.front());
  EXPECT_TRUE(report.faults.empty());
  if (budget) {
    EXPECT_EQ(report.peak_bytes, plan->planned_peak_bytes);
    // The walk as a plan (the recompute-only planner's portfolio) names the
    // validator's peak op and counts the recompute actions.
    const DtrPlan walk = plan_dtr(trace, *budget);
    EXPECT_EQ(walk.peak_op, report.peak_op);
    EXPECT_EQ(walk.recompute_count, report.recompute_count);
  }
  return std::move(*plan);
}

TEST(DtrPlanner, EvictsTheStorageWithTheLowestCostPerByteAndStaleness) {
  //   op0 load W9 | op1 a R9 W1 (rec, 1 ms) | op2 b R9 W2 (rec, 4 ms)
  //   op3 c W3 (0.5 ms) | op4 use R1 | op5 use R2 R3          s1..s3: 1 MiB
  // Budget 2 MiB. Before op 3, s1 and s2 hold 2 MiB and s3 needs 1 more:
  // h(s1) = 1 ms / (1 MiB × 4 ms stale) and h(s2) = 4 ms / (1 MiB × ~0 ms)
  // (op 2 just wrote it), so s1 goes. Before op 4 s1 comes back (re-run a),
  // which needs 1 MiB: of s2 and s3 only s2 has a producer, so s2 goes. Op 4
  // is s1's last access; before op 5 s2 comes back into the room s1 left.
  // s3 (no producer) is never evicted. Peak: 2 MiB everywhere from op 3 on.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(3, kMiB)
                          .storage(9, 0)
                          .op("load", "W9")
                          .op("a", "R9 W1", 1.0, kRec)
                          .op("b", "R9 W2", 4.0, kRec)
                          .op("c", "W3", 0.5)
                          .op("use", "R1")
                          .op("use", "R2 R3")
                          .build();
  const PlanResult plan = planned_by_dtr(trace, 2 * kMiB);
  EXPECT_EQ(plan.schedule.actions,
            actions("pre 3 release_device 1; pre 4 release_device 2; pre 4 recompute 1; post 4 release_device 1; "
                    "pre 5 recompute 2; post 5 release_device 2; post 5 release_device 3"));
  EXPECT_EQ(plan.planned_peak_bytes, 2 * kMiB);
  EXPECT_EQ(plan.initial_peak_bytes, 3 * kMiB);
}

TEST(DtrPlanner, PricesTheWholeEvictedNeighbourhoodAsDtrsEquivalenceClasses) {
  //   op0 load W9 | op1 a R9 W1 (rec, 1 ms) | op2 b R1 W2 (rec, 1 ms: s2 is s1's child)
  //   op3 d R9 W4 (rec, 1.5 ms) | op4 touch R1 R4 (1 ms) | op5 e W5 (0.5 ms) | op6 f W6 (0.5 ms)
  //   op7 use R5 R6 | op8 use R1 R2 R4                          s1, s2, s4, s5, s6: 1 MiB
  // Budget 3 MiB. Before op 5, s1, s2 and s4 hold 3 MiB and s5 needs 1 more:
  // s2 was last used 2.5 ms ago (ops 3 and 4), s1 and s4 just now, so s2
  // goes under either pricing (its producer's input s1 is on the device:
  // cost 1 ms both ways). Before op 6, s1, s4 and s5 hold 3 MiB; s5 cannot be
  // regenerated, s1 and s4 were both last used at the end of op 4 (0.5 ms):
  //  - local costs: h(s1) = 1 ms / 0.5, h(s4) = 1.5 ms / 0.5: s1 goes;
  //  - equivalence classes (DTR's h_DTR^eq, the reference): evicting s1 also
  //    makes its evicted child s2 dearer to regenerate, so s1 costs 1 + 1 ms
  //    (s2's class) against s4's 1.5: s4 goes.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(4, kMiB)
                          .storage(5, kMiB)
                          .storage(6, kMiB)
                          .storage(9, 0)
                          .op("load", "W9", 0.0)
                          .op("a", "R9 W1", 1.0, kRec)
                          .op("b", "R1 W2", 1.0, kRec)
                          .op("d", "R9 W4", 1.5, kRec)
                          .op("touch", "R1 R4", 1.0)
                          .op("e", "W5", 0.5)
                          .op("f", "W6", 0.5)
                          .op("use", "R5 R6")
                          .op("use", "R1 R2 R4")
                          .build();
  const std::vector<Action> classes = planned_by_dtr(trace, 3 * kMiB).schedule.actions;
  const std::vector<Action> local = plan_dtr(trace, 3 * kMiB, {.heuristic = DtrHeuristic::kLocal}).result.schedule.actions;
  ASSERT_GE(classes.size(), 2u);
  ASSERT_GE(local.size(), 2u);
  EXPECT_EQ(std::vector<Action>(classes.begin(), classes.begin() + 2),
            actions("pre 5 release_device 2; pre 6 release_device 4"));
  EXPECT_EQ(std::vector<Action>(local.begin(), local.begin() + 2),
            actions("pre 5 release_device 2; pre 6 release_device 1"));
}

TEST(DtrPlanner, NextUseEvictsWhatIsNeededLastWhereStalenessEvictsWhatIsNeededNext) {
  //   op0 load W9 | op1 a R9 W1 (rec, 1 ms) | op2 b R9 W2 (rec, 1 ms) | op3 touch R2 (1 ms)
  //   op4 big W3 (1 ms) | op5 use R1 R3 (1 ms) | op6 use R3 (1 ms) | op7 use R2
  // s1, s2, s3: 1 MiB; budget 2 MiB. Before op 4, s1 and s2 hold 2 MiB and s3
  // needs 1 more; both cost 1 ms to regenerate (s9 is always there).
  //  - DTR's staleness (the reference): s1 was last used at the end of op 1
  //    (1 ms), s2 at the end of op 3 (3 ms), now is 3 ms: s1 has sat 2 ms, s2
  //    0, so s1 goes. Op 5 needs it back: its re-run needs 1 MiB beside s2 and
  //    s3, so s2 goes too, and op 7 re-runs b. Two re-runs.
  //  - kNextUse: from the start of op 4 (3 ms of compute before it) s1 is
  //    next used at op 5 (4 ms: 1 ms away), s2 at op 7 (6 ms: 3 ms away):
  //    h(s2) = 1 / (1 MiB x 3) < h(s1) = 1 / (1 MiB x 1), so s2 goes, and
  //    only op 7 re-runs b. One re-run.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(3, kMiB)
                          .storage(9, 0)
                          .op("load", "W9", 0.0)
                          .op("a", "R9 W1", 1.0, kRec)
                          .op("b", "R9 W2", 1.0, kRec)
                          .op("touch", "R2", 1.0)
                          .op("big", "W3", 1.0)
                          .op("use", "R1 R3", 1.0)
                          .op("use", "R3", 1.0)
                          .op("use", "R2", 1.0)
                          .build();
  EXPECT_EQ(planned_by_dtr(trace, 2 * kMiB).schedule.actions,
            actions("pre 4 release_device 1; pre 5 release_device 2; pre 5 recompute 1; post 5 release_device 1; "
                    "post 6 release_device 3; pre 7 recompute 2; post 7 release_device 2"));
  const DtrPlan next_use = plan_dtr(trace, 2 * kMiB, {.heuristic = DtrHeuristic::kNextUse});
  EXPECT_EQ(next_use.result.schedule.actions,
            actions("pre 4 release_device 2; post 5 release_device 1; post 6 release_device 3; pre 7 recompute 2; "
                    "post 7 release_device 2"));
  EXPECT_EQ(next_use.recompute_count, 1);
  EXPECT_EQ(next_use.result.planned_peak_bytes, 2 * kMiB);
  EXPECT_TRUE(validate_schedule(trace, next_use.result.schedule).valid());
}

TEST(DtrPlanner, FarthestNextUseEvictsWhatIsNeededLastWhateverItCosts) {
  //   op0 load W9 | op1 a R9 W1 (rec, 10 ms) | op2 b R9 W2 (rec, 1 ms) | op3 big W3 (1 ms)
  //   op4 use R3 (1 ms) | op5 use R2 (1 ms) | op6 use R1 (1 ms)
  // s1, s2, s3: 1 MiB; budget 2 MiB. Before op 3 (11 ms of compute before
  // it), s1 and s2 hold 2 MiB and s3 needs 1 more. s2 is next used at op 5
  // (13 ms: 2 ms away), s1 at op 6 (14 ms: 3 ms away).
  //  - kNextUse: h(s1) = 10 ms / (1 MiB x 3), h(s2) = 1 ms / (1 MiB x 2): s2
  //    goes and op 5 re-runs b (1 ms).
  //  - kFarthestNextUse: s1 is used last, so it goes, and op 6 re-runs a
  //    (10 ms).
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(3, kMiB)
                          .storage(9, 0)
                          .op("load", "W9", 0.0)
                          .op("a", "R9 W1", 10.0, kRec)
                          .op("b", "R9 W2", 1.0, kRec)
                          .op("big", "W3", 1.0)
                          .op("use", "R3", 1.0)
                          .op("use", "R2", 1.0)
                          .op("use", "R1", 1.0)
                          .build();
  const DtrPlan next_use = plan_dtr(trace, 2 * kMiB, {.heuristic = DtrHeuristic::kNextUse});
  EXPECT_EQ(next_use.result.schedule.actions,
            actions("pre 3 release_device 2; post 4 release_device 3; pre 5 recompute 2; post 5 release_device 2; "
                    "post 6 release_device 1"));
  EXPECT_EQ(next_use.recompute_ms, 1.0);
  const DtrPlan farthest = plan_dtr(trace, 2 * kMiB, {.heuristic = DtrHeuristic::kFarthestNextUse});
  EXPECT_EQ(farthest.result.schedule.actions,
            actions("pre 3 release_device 1; post 4 release_device 3; post 5 release_device 2; pre 6 recompute 1; "
                    "post 6 release_device 1"));
  EXPECT_EQ(farthest.recompute_ms, 10.0);
  EXPECT_TRUE(validate_schedule(trace, farthest.result.schedule).valid());
}

TEST(DtrPlanner, RematerializesADeadChainRecursivelyAndDropsItAfter) {
  //   op0 load W9 | op1 a R9 W1 (rec) | op2 b R1 W2 (rec) | op3 c R2 W3 (rec)
  //   op4 big W4 | op5 use R3         s1..s3: 1 MiB, s4: 3 MiB, budget 3 MiB
  // s1 and s2 die after ops 2 and 3. Before op 4, s3 + s4 = 4 MiB: s3, the
  // only storage with a producer, is evicted. Before op 5 s3 needs c, whose
  // input s2 is dead and needs b, whose input s1 is dead and needs a: three
  // re-runs, a first, holding 1, 2, then 3 MiB. s1 and s2 are dead at op 5
  // and are dropped once the re-runs are done.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(3, kMiB)
                          .storage(4, 3 * kMiB)
                          .storage(9, 0)
                          .op("load", "W9")
                          .op("a", "R9 W1", 1.0, kRec)
                          .op("b", "R1 W2", 1.0, kRec)
                          .op("c", "R2 W3", 1.0, kRec)
                          .op("big", "W4", 1.0)
                          .op("use", "R3")
                          .build();
  const PlanResult plan = planned_by_dtr(trace, 3 * kMiB);
  EXPECT_EQ(plan.schedule.actions,
            actions("post 2 release_device 1; post 3 release_device 2; pre 4 release_device 3; "
                    "post 4 release_device 4; pre 5 recompute 1; pre 5 recompute 2; pre 5 recompute 3; "
                    "pre 5 release_device 1; pre 5 release_device 2; post 5 release_device 3"));
  EXPECT_EQ(plan.planned_peak_bytes, 3 * kMiB);
}

TEST(DtrPlanner, KeepsWhatCannotBeRegeneratedAndSaysWhenTheBudgetIsMissed) {
  // The same trace at 2 MiB: op 4 alone touches 3 MiB. s3 is evicted before
  // it (the only candidate) and regenerated before op 5 as above, but op 4
  // holds 3 MiB: the plan is valid, 1 MiB over, and a note says so.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(3, kMiB)
                          .storage(4, 3 * kMiB)
                          .storage(9, 0)
                          .op("load", "W9")
                          .op("a", "R9 W1", 1.0, kRec)
                          .op("b", "R1 W2", 1.0, kRec)
                          .op("c", "R2 W3", 1.0, kRec)
                          .op("big", "W4", 1.0)
                          .op("use", "R3")
                          .build();
  const PlanResult plan = planned_by_dtr(trace, 2 * kMiB);
  EXPECT_EQ(plan.planned_peak_bytes, 3 * kMiB);
  ASSERT_FALSE(plan.notes.empty());
  EXPECT_THAT(plan.notes.front(), HasSubstr("is not met"));
}

TEST(DtrPlanner, NeverEvictsAStorageWrittenAgainInPlace) {
  //   op0 a W1 (rec) | op1 inplace R1 W1 | op2 big W2 | op3 use R1
  // s1 (1 MiB) was rewritten by op 1, so re-running a would give the old
  // version: s1 cannot be evicted, and op 2 (s1 + s2 = 2 MiB) misses 1 MiB.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .op("a", "W1", 1.0, kRec)
                          .op("inplace", "R1 W1", 1.0)
                          .op("big", "W2", 1.0)
                          .op("use", "R1")
                          .build();
  const PlanResult plan = planned_by_dtr(trace, kMiB);
  EXPECT_EQ(plan.schedule.actions, actions("post 2 release_device 2; post 3 release_device 1"));
  EXPECT_EQ(plan.planned_peak_bytes, 2 * kMiB);
}

TEST(DtrPlanner, StopsEvictingOnceItsReRunsPassTheWorkBound) {
  // The trace of EvictsTheStorageWithTheLowestCostPerByteAndStaleness (budget
  // 2 MiB): uncut, s1 is evicted before op 3, re-run (a: 1 + 2 accesses = 3
  // of work) before op 4 after evicting s2, and s2 re-run (b: 3 more) before
  // op 5.
  //  - Bound 3: the first re-run does 3, not past it; the second, 6, is: the
  //    walk is cut before op 5, where no eviction is needed any more — the
  //    schedule is the uncut one.
  //  - Bound 0: the first re-run passes it, before op 4: s2 is not evicted to
  //    make room for s1, so op 4 holds s1 + s2 + s3 = 3 MiB, over the budget,
  //    and s2 is never re-run.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(3, kMiB)
                          .storage(9, 0)
                          .op("load", "W9")
                          .op("a", "R9 W1", 1.0, kRec)
                          .op("b", "R9 W2", 4.0, kRec)
                          .op("c", "W3", 0.5)
                          .op("use", "R1")
                          .op("use", "R2 R3")
                          .build();
  const DtrPlan late = plan_dtr(trace, 2 * kMiB, {.max_rerun_work = 3});
  EXPECT_EQ(late.cut_op, 5);
  EXPECT_EQ(late.result.schedule.actions,
            actions("pre 3 release_device 1; pre 4 release_device 2; pre 4 recompute 1; post 4 release_device 1; "
                    "pre 5 recompute 2; post 5 release_device 2; post 5 release_device 3"));
  EXPECT_EQ(late.result.planned_peak_bytes, 2 * kMiB);

  const DtrPlan early = plan_dtr(trace, 2 * kMiB, {.max_rerun_work = 0});
  EXPECT_EQ(early.cut_op, 4);
  EXPECT_EQ(early.result.schedule.actions,
            actions("pre 3 release_device 1; pre 4 recompute 1; post 4 release_device 1; post 5 release_device 2; "
                    "post 5 release_device 3"));
  EXPECT_EQ(early.result.planned_peak_bytes, 3 * kMiB);
  EXPECT_EQ(early.recompute_count, 1);
  const ValidationReport report = validate_schedule(trace, early.result.schedule);
  EXPECT_TRUE(report.valid());
  EXPECT_EQ(report.peak_bytes, 3 * kMiB);
  EXPECT_THAT(early.result.notes.front(), HasSubstr("is not met"));
  EXPECT_THAT(early.result.notes.back(), HasSubstr("cut before op 4"));

  // Eviction work instead, bound 0: the eviction before op 3 looks at s1 and
  // s2 (2 + their producers' 2 accesses each = 6) and prices their
  // equivalence classes through the ops that read them (op 4's 1 access for
  // s1, op 5's 2 for s2: 9), then s1 joins its class (op 4's access again:
  // 10, over 0); before op 4 the re-run of s1 needs room and finds the walk
  // cut: the early schedule again.
  const DtrPlan scanned = plan_dtr(trace, 2 * kMiB, {.max_scan_work = 0});
  EXPECT_EQ(scanned.cut_op, 4);
  EXPECT_EQ(scanned.result.schedule.actions, early.result.schedule.actions);
  EXPECT_THAT(scanned.result.notes.back(), HasSubstr("evictions had done 10 of work"));
}

TEST(DtrPlanner, KeepsWhatItRegeneratesForAChainOnceCut) {
  // The trace of RematerializesADeadChainRecursivelyAndDropsItAfter (budget
  // 3 MiB) with a bound of 4: before op 5 the re-runs of a (3 of work) and b
  // (3 more: 6 > 4) cut the walk; c is re-run too, and the dead s1 and s2,
  // regenerated for the chain, now stay (no chain could regenerate them
  // again): s1 + s2 + s3 = 3 MiB at op 5, within the budget.
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(3, kMiB)
                          .storage(4, 3 * kMiB)
                          .storage(9, 0)
                          .op("load", "W9")
                          .op("a", "R9 W1", 1.0, kRec)
                          .op("b", "R1 W2", 1.0, kRec)
                          .op("c", "R2 W3", 1.0, kRec)
                          .op("big", "W4", 1.0)
                          .op("use", "R3")
                          .build();
  const DtrPlan plan = plan_dtr(trace, 3 * kMiB, {.max_rerun_work = 4});
  EXPECT_EQ(plan.cut_op, 5);
  EXPECT_EQ(plan.result.schedule.actions,
            actions("post 2 release_device 1; post 3 release_device 2; pre 4 release_device 3; "
                    "post 4 release_device 4; pre 5 recompute 1; pre 5 recompute 2; pre 5 recompute 3; "
                    "post 5 release_device 3"));
  EXPECT_EQ(plan.result.planned_peak_bytes, 3 * kMiB);
  EXPECT_TRUE(validate_schedule(trace, plan.result.schedule).valid());
}

TEST(DtrPlanner, PlansNothingWithoutABudget) {
  const Trace trace = TraceDsl().storage(1, kMiB).op("a", "W1", 1.0, kRec).op("use", "R1").build();
  EXPECT_TRUE(planned_by_dtr(trace, std::nullopt).schedule.actions.empty());
}

// Over random traces with recomputable ops and random budgets, for each
// heuristic (DTR's as the `dtr` planner runs it, checked in full): the schedule
// is valid, fault-free, its validator peak is the planner's own, it is within
// the budget whenever it reports no miss, it recomputes nothing when the
// budget holds the unplanned peak, and the simulator agrees on the recomputes.
TEST(DtrPlannerProperty, ValidAndWithinBudgetWheneverItSaysSoOnRandomTraces) {
  constexpr int kCases = 1500;
  int within = 0;
  int recomputing = 0;
  for (std::uint64_t seed = 0; seed < kCases; ++seed) {
    std::mt19937_64 rng(seed * 7919 + 11);
    auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
    RandomTraceOptions options;
    options.seed = seed;
    options.op_count = static_cast<std::int32_t>(uniform(1, 150));
    options.storage_count = static_cast<std::int32_t>(uniform(0, 100));
    options.min_size_bytes = 1;
    options.max_size_bytes = static_cast<std::int64_t>(uniform(1, 1 << 20));
    options.zero_size_fraction = uniform(0.0, 0.2);
    options.retained_fraction = uniform(0.0, 0.3);
    options.max_extra_accesses = static_cast<std::int32_t>(uniform(0, 8));
    options.write_fraction = uniform(0.0, 0.5);
    options.in_place_fraction = uniform(0.0, 0.3);
    options.max_duration_ms = seed % 5 == 0 ? 0.0 : uniform(0.0, 2.0);
    options.recomputable_fraction = uniform(0.2, 1.0);
    options.limit_fraction = std::nullopt;
    const Trace trace = generate_random_trace(options);
    const std::int64_t unplanned = unplanned_peak(trace).bytes;
    const auto budget = static_cast<std::int64_t>(static_cast<double>(unplanned) * (seed % 2 == 0 ? uniform(0.0, 1.1) : uniform(0.7, 1.1)));
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", budget " << budget << " of " << unplanned);
    const PlanResult plan = planned_by_dtr(trace, budget);
    const bool missed = !plan.notes.empty() && plan.notes.front().find("is not met") != std::string::npos;
    EXPECT_EQ(missed, plan.planned_peak_bytes > budget);
    if (budget >= unplanned) {
      EXPECT_FALSE(missed);
      EXPECT_EQ(plan.planned_peak_bytes, unplanned);
    }
    SimulatorOptions sim_options;
    sim_options.budget_bytes = budget;
    const SimulationResult simulation = simulate(trace, plan.schedule, sim_options);
    EXPECT_TRUE(simulation.validation.valid());
    // The walks the recompute-only plans weigh beside it: the same guarantees.
    for (const DtrHeuristic heuristic :
         {DtrHeuristic::kLocal, DtrHeuristic::kNextUse, DtrHeuristic::kFarthestNextUse}) {
      SCOPED_TRACE(::testing::Message() << "heuristic " << static_cast<int>(heuristic));
      const PlanResult other = plan_dtr(trace, budget, {.heuristic = heuristic}).result;
      const ValidationReport report = validate_schedule(trace, other.schedule);
      EXPECT_TRUE(report.valid()) << (report.problems.empty() ? "" : report.problems.front());
      EXPECT_TRUE(report.faults.empty());
      EXPECT_EQ(report.peak_bytes, other.planned_peak_bytes);
      EXPECT_EQ(other.notes.front().find("is not met") != std::string::npos, other.planned_peak_bytes > budget);
      if (budget >= unplanned) {
        EXPECT_EQ(other.planned_peak_bytes, unplanned);
      }
    }
    within += missed ? 0 : 1;
    recomputing += simulation.validation.recompute_count > 0 ? 1 : 0;
    if (::testing::Test::HasFailure()) return;
  }
  // Enough cases exercise both the budget kept and rematerialization.
  EXPECT_GE(within, kCases / 6);  // 285 of 1500 when written
  EXPECT_GE(recomputing, kCases / 5);  // 462
  ::testing::Test::RecordProperty("within_budget", within);
  ::testing::Test::RecordProperty("recomputing", recomputing);
}

}  // namespace
}  // namespace hyperoffload
