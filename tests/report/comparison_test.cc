// The comparison runner: every planner at every budget, validated and
// simulated, on a hand-built trace whose results are derived below.
#include "hyperoffload/report/comparison.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "report/retained_trace.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::hyperoffload::testing::TraceDsl;
using ::testing::HasSubstr;

// 100 bytes per ms each way; every op runs 1 ms. s1 (100, retained) W@0 R@1;
// s2 100 W@2 R@4; s3 100 W@3.
//   op:        0    1    2    3    4
//   resident: 100  100  200  300  200    (s1 stays: retained)
// At budget 200 the greedy planner counts s1 only to op 1, sees 200 at op 3 and
// plans nothing: op peak 300, infeasible, no copies, no stall. The peak planner
// evicts s2 over op 3: copy after op 2 (3-4 ms), release after op 2 (freed at 4
// ms, when the copy ends), prefetch before op 4 (4-5 ms), so op 4 starts at 5:
// 1 ms of stall on 5 ms of compute (20%), 200 bytes moved, op peak 200. In time,
// op 3 allocates s3 at 3 ms while s2 is still being copied out: 300 bytes.
using testing::retained_trace;

TEST(Comparison, OnTheDefaultCappedDeviceTheTimedPeakStaysWithinTheBudgetAndTheWaitIsStall) {
  // The retained trace at budget 200 on a device that holds only the budget
  // (the default). The peak planner's plan is the one derived above, but op d
  // cannot allocate s3 at 3 ms while s2's copy to host (3-4 ms) still holds
  // its buffer: d waits for memory until 4 ms (1 ms) and runs 4-5; s2's copy
  // back is issued before e, when d ends (5-6 ms): e runs 6-7. Stall 2 ms
  // (1 of it waiting for memory), makespan 7, overhead 2 / 5 = 40%, and the
  // device never holds more than 200 bytes. The offload-only bound is the
  // same 2 ms: s2 is the only storage that can be off during d.
  ComparisonOptions options;
  options.planners = {"peak"};
  options.budgets = {BudgetSpec{BudgetSpec::Unit::kBytes, 200}};
  const Result<Comparison> comparison = run_comparison(retained_trace(), options);
  ASSERT_TRUE(comparison.has_value()) << comparison.error().message;
  EXPECT_EQ(comparison->device_memory, DeviceMemory::kBudget);
  ASSERT_EQ(comparison->rows.size(), 1U);
  const ComparisonRow& peak = comparison->rows[0];
  EXPECT_TRUE(peak.feasible());
  EXPECT_EQ(peak.op_peak_bytes, 200);
  EXPECT_EQ(peak.timed_peak_bytes, 200);
  EXPECT_TRUE(peak.timed_within_budget());
  EXPECT_NEAR(peak.stall_ms, 2.0, 1e-9);
  EXPECT_NEAR(peak.memory_stall_ms, 1.0, 1e-9);
  EXPECT_NEAR(peak.overhead_percent, 40.0, 1e-9);
  EXPECT_NEAR(peak.makespan_ms, 7.0, 1e-9);
  ASSERT_TRUE(comparison->stall_bound_ms(0).has_value());
  EXPECT_NEAR(*comparison->stall_bound_ms(0), 2.0, 1e-9);
}

TEST(Comparison, RunsEveryPlannerThroughTheValidatorAndTheSimulator) {
  ComparisonOptions options;
  options.budgets = {BudgetSpec{BudgetSpec::Unit::kBytes, 200}};
  options.device_memory = DeviceMemory::kUnlimited;  // the derivation above
  const Result<Comparison> comparison = run_comparison(retained_trace(), options);
  ASSERT_TRUE(comparison.has_value()) << comparison.error().message;
  EXPECT_EQ(comparison->unplanned_peak_bytes, 300);
  EXPECT_EQ(comparison->unplanned_peak_op, 3);
  EXPECT_DOUBLE_EQ(comparison->compute_ms, 5.0);
  ASSERT_EQ(comparison->rows.size(), 4U);

  const ComparisonRow& greedy = comparison->rows[0];
  EXPECT_EQ(greedy.planner, "greedy");
  EXPECT_EQ(greedy.budget_bytes, 200);
  EXPECT_TRUE(greedy.valid);
  EXPECT_FALSE(greedy.feasible());
  EXPECT_EQ(greedy.op_peak_bytes, 300);
  EXPECT_EQ(greedy.timed_peak_bytes, 300);
  EXPECT_DOUBLE_EQ(greedy.stall_ms, 0.0);
  EXPECT_EQ(greedy.bytes_moved(), 0);
  EXPECT_FALSE(greedy.floor.has_value());

  const ComparisonRow& peak = comparison->rows[1];
  EXPECT_EQ(peak.planner, "peak");
  EXPECT_TRUE(peak.feasible());
  EXPECT_EQ(peak.faults, 0U);
  EXPECT_EQ(peak.op_peak_bytes, 200);
  EXPECT_EQ(peak.timed_peak_bytes, 300);
  EXPECT_FALSE(peak.timed_within_budget());
  EXPECT_NEAR(peak.stall_ms, 1.0, 1e-9);
  EXPECT_NEAR(peak.overhead_percent, 20.0, 1e-9);
  EXPECT_NEAR(peak.makespan_ms, 6.0, 1e-9);
  EXPECT_EQ(peak.d2h_bytes, 100);
  EXPECT_EQ(peak.h2d_bytes, 100);
  ASSERT_TRUE(peak.floor.has_value());
  EXPECT_EQ(peak.floor->bytes, 200);
  EXPECT_TRUE(peak.memory.empty());  // no timeline asked for
  EXPECT_GE(peak.planning_ms, 0.0);

  // The stall bound: s2 is the only storage that can be off during op 3, its
  // copy to host runs 3-4 ms at the earliest (after c), its copy back after op
  // d ends (4 ms): 4-5 ms, so e starts at 5 ms at the earliest, 1 ms late. The
  // peak plan reaches it; greedy's plan is not feasible, so the bound says
  // nothing about it.
  ASSERT_EQ(comparison->stall_bounds_ms.size(), 1U);
  ASSERT_TRUE(comparison->stall_bounds_ms[0].has_value());
  EXPECT_NEAR(*comparison->stall_bounds_ms[0], 1.0, 1e-9);
  EXPECT_NEAR(*peak.stall_above_bound_ms(comparison->stall_bound_ms(0)), 0.0, 1e-9);
  EXPECT_FALSE(greedy.stall_above_bound_ms(comparison->stall_bound_ms(0)).has_value());

  // Nothing is recomputable: the hybrid planner makes the peak planner's plan,
  // and recompute-only can only release after last use: op peak 300.
  const ComparisonRow& hybrid = comparison->rows[2];
  EXPECT_EQ(hybrid.planner, "hybrid");
  EXPECT_TRUE(hybrid.feasible());
  EXPECT_NEAR(hybrid.stall_ms, 1.0, 1e-9);
  EXPECT_EQ(hybrid.recompute_count, 0);
  const ComparisonRow& recompute = comparison->rows[3];
  EXPECT_EQ(recompute.planner, "recompute");
  EXPECT_TRUE(recompute.valid);
  EXPECT_FALSE(recompute.feasible());
  EXPECT_EQ(recompute.op_peak_bytes, 300);
}

TEST(Comparison, CountsRecomputeTimeAsOverheadAndBelowTheOffloadOnlyBound) {
  // 1 MiB per ms each way. s1 (1 MiB) written by f (recomputable, 0.2 ms) and
  // read at op 3; s2 (1 MiB) only at op 2 (0.5 ms); budget 1 MiB.
  // Offload-only: s1 out 0.2..1.2 ms, back 1.2..2.2 ms: op 3 at 2.2, 1.5 ms of
  // stall, which is also the bound (nothing else can leave). Hybrid: f
  // re-runs before op 3 (0.2 ms): overhead 0.2 / 0.7 = 28.57%, 1.3 ms below
  // the bound. Copying nothing, s1's 1 MiB must go by f's 0.2 ms re-run: the
  // recompute-only bound is 0.2 ms, what the hybrid plan re-runs.
  constexpr std::int64_t kMiB = 1 << 20;
  const Trace trace = TraceDsl()
                          .storage(1, kMiB)
                          .storage(2, kMiB)
                          .storage(9, 0)
                          .bandwidth(1000.0 / 1024.0)
                          .op("load", "W9")
                          .op("f", "R9 W1", 0.2, Recomputable::kYes)
                          .op("peak", "W2", 0.5)
                          .op("use", "R1")
                          .build();
  ComparisonOptions options;
  options.planners = {"peak", "hybrid"};
  options.budgets = {BudgetSpec{BudgetSpec::Unit::kBytes, kMiB}};
  options.device_memory = DeviceMemory::kUnlimited;  // the derivation above
  const Result<Comparison> comparison = run_comparison(trace, options);
  ASSERT_TRUE(comparison.has_value()) << comparison.error().message;
  ASSERT_TRUE(comparison->stall_bound_ms(0).has_value());
  EXPECT_NEAR(*comparison->stall_bound_ms(0), 1.5, 1e-9);
  ASSERT_TRUE(comparison->recompute_only_bound_ms(0).has_value());
  EXPECT_NEAR(*comparison->recompute_only_bound_ms(0), 0.2, 1e-9);
  const ComparisonRow& peak = comparison->rows[0];
  EXPECT_NEAR(peak.stall_ms, 1.5, 1e-9);
  EXPECT_NEAR(peak.overhead_percent, 100.0 * 1.5 / 0.7, 1e-9);
  const ComparisonRow& hybrid = comparison->rows[1];
  EXPECT_TRUE(hybrid.feasible());
  EXPECT_EQ(hybrid.recompute_count, 1);
  EXPECT_NEAR(hybrid.recompute_ms, 0.2, 1e-9);
  EXPECT_NEAR(hybrid.stall_ms, 0.0, 1e-9);
  EXPECT_NEAR(hybrid.overhead_percent, 100.0 * 0.2 / 0.7, 1e-9);
  EXPECT_NEAR(*hybrid.overhead_above_bound_ms(comparison->stall_bound_ms(0)), -1.3, 1e-9);
}

TEST(Comparison, SweepsBudgetsInOrderWithPlannersInTheGivenOrder) {
  ComparisonOptions options;
  options.planners = {"peak", "greedy"};
  // 50% of the unplanned 300 is 150, below the floor of 200: the peak planner
  // says so in a note.
  options.budgets = {BudgetSpec{BudgetSpec::Unit::kBytes, 250}, BudgetSpec{BudgetSpec::Unit::kPercentOfPeak, 50}};
  options.record_timeline = RecordTimeline::kYes;
  const Result<Comparison> comparison = run_comparison(retained_trace(), options);
  ASSERT_TRUE(comparison.has_value()) << comparison.error().message;
  EXPECT_EQ(comparison->budgets_bytes, (std::vector<std::int64_t>{250, 150}));
  ASSERT_EQ(comparison->rows.size(), 4U);
  EXPECT_EQ(comparison->rows[0].planner, "peak");
  EXPECT_EQ(comparison->rows[1].planner, "greedy");
  EXPECT_EQ(comparison->rows[2].budget_bytes, 150);
  ASSERT_FALSE(comparison->rows[2].notes.empty());
  EXPECT_THAT(comparison->rows[2].notes.front(), HasSubstr("below the unavoidable floor"));
  EXPECT_DOUBLE_EQ(comparison->budget_percent(150), 50.0);
  // Timelines were recorded: each memory curve starts at 0 ms and ends with
  // nothing allocated beyond the retained storage.
  for (const ComparisonRow& row : comparison->rows) {
    ASSERT_FALSE(row.memory.empty());
    EXPECT_DOUBLE_EQ(row.memory.front().time_ms, 0.0);
    EXPECT_GE(row.end_ms, 5.0);
  }
}

TEST(Comparison, UsesTheTraceLimitWhenNoBudgetIsGiven) {
  Trace trace = retained_trace();
  trace.set_memory_limit_bytes(250);
  const Result<Comparison> comparison = run_comparison(trace, {});
  ASSERT_TRUE(comparison.has_value());
  EXPECT_EQ(comparison->budgets_bytes, (std::vector<std::int64_t>{250}));
}

TEST(Comparison, RejectsBadOptionsWithMessages) {
  ComparisonOptions none;
  none.planners = {};
  none.budgets = {BudgetSpec{BudgetSpec::Unit::kBytes, 200}};
  Result<Comparison> result = run_comparison(retained_trace(), none);
  ASSERT_FALSE(result.has_value());
  EXPECT_THAT(result.error().message, HasSubstr("no planner to compare (available: greedy, peak, hybrid, recompute)"));

  ComparisonOptions unknown = none;
  unknown.planners = {"greedy", "best"};
  result = run_comparison(retained_trace(), unknown);
  ASSERT_FALSE(result.has_value());
  EXPECT_THAT(result.error().message, HasSubstr("unknown planner \"best\" (available: greedy, peak, hybrid, recompute, optimal, dtr)"));

  ComparisonOptions weights = none;
  weights.planners = {"greedy"};
  weights.score_weights = {{"hiding", 2.0}};
  result = run_comparison(retained_trace(), weights);
  ASSERT_FALSE(result.has_value());
  EXPECT_THAT(result.error().message, HasSubstr("score weights apply to the peak and hybrid planners"));

  ComparisonOptions bad_weight = none;
  bad_weight.planners = {"peak"};
  bad_weight.score_weights = {{"speed", 2.0}};
  result = run_comparison(retained_trace(), bad_weight);
  ASSERT_FALSE(result.has_value());
  EXPECT_THAT(result.error().message, HasSubstr("valid: peak_reduction, hiding, coverage, neighbor_impact"));

  result = run_comparison(retained_trace(), ComparisonOptions{});  // no budget, no trace limit
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(result.error().message, HasSubstr("no budget"));
}

}  // namespace
}  // namespace hyperoffload
