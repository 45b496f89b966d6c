// OptimalPlanner: the MILP reference, checked on tiny traces whose optimum is
// derived by hand (each derivation is in the comment above its test), on the
// errors it owes the user, on its time limit and progress reports, and on its
// program's internals (plan/internal/residency_milp.h).
//
// Units in the hand-built traces: copies run at 1000 MiB/s each way
// (0.9765625 GiB/s), so a storage of N MiB takes N ms to copy; durations in ms.
#include "hyperoffload/plan/optimal_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/internal/residency_milp.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::actions;
using testing::TraceDsl;

constexpr double kMiBPerMs = 0.9765625;  // GiB/s: 1 MiB takes 1 ms
constexpr std::int64_t kMiB = std::int64_t{1} << 20;

PlanResult plan_optimal(const Trace& trace, std::int64_t budget, DeviceMemory device = DeviceMemory::kUnlimited) {
  OptimalPlannerOptions options;
  options.device_memory = device;
  options.time_limit_s = 30.0;
  Result<PlanResult> result = OptimalPlanner(options).plan(trace, budget);
  EXPECT_TRUE(result.has_value()) << result.error().message;
  return result ? *result : PlanResult{};
}

// Storage 1 (2 MiB) is written by op a and read by op e; storage 2 (4 MiB)
// lives over ops b, c. Budget 4 MiB, and nothing is recomputable.
//   op:        a(1)  b(3)  c(3)  d(1)  e(1)      durations in ms, compute 9
//   storage 1:  W     .     .     .     R        2 MiB
//   storage 2:  .     W     R     .     .        4 MiB
//   unplanned:  2     6     6     2     2        > 4 at b and c
// Storage 1 must be off the device during b and c: released after a, copied
// to host (2 ms) during b; it can come back only before d (during b or c it
// does not fit). Unlimited memory: the copy back is issued when c ends (7 ms)
// and takes 2 ms; d runs 7-8 and e waits until 9: 1 ms of stall, makespan 10,
// and nothing can do better (no op lies between c and d to hide more).
Trace offload_trace() {
  return TraceDsl()
      .storage(1, 2 * kMiB)
      .storage(2, 4 * kMiB)
      .bandwidth(kMiBPerMs)
      .op("a", "W1", 1)
      .op("b", "W2", 3)
      .op("c", "R2", 3)
      .op("d", "", 1)
      .op("e", "R1", 1)
      .build();
}

TEST(OptimalPlanner, PureOffloadOptimumHidesWhatTheComputeAllows) {
  const PlanResult plan = plan_optimal(offload_trace(), 4 * kMiB);
  EXPECT_THAT(plan.schedule.actions,
              ElementsAreArray(actions("post 0 copy_d2h 1; post 0 release_device 1; post 2 release_device 2; "
                                       "pre 3 copy_h2d 1; post 4 release_host 1; post 4 release_device 1")));
  EXPECT_EQ(plan.schedule.planner, "optimal");
  EXPECT_EQ(plan.planned_peak_bytes, 4 * kMiB);
  EXPECT_EQ(plan.initial_peak_bytes, 6 * kMiB);
  ASSERT_TRUE(plan.solver.has_value());
  EXPECT_EQ(plan.solver->status, SolverStatus::kOptimal);
  EXPECT_NEAR(plan.solver->objective_ms, 10.0, 1e-6);
  EXPECT_NEAR(plan.solver->bound_ms, 10.0, 1e-3);
  EXPECT_LT(plan.solver->gap, 1e-4);
  EXPECT_THAT(plan.notes.front(), HasSubstr("proven optimal; model makespan 10 ms (compute 9 + recompute 0 in 0 + "
                                            "stall 1)"));
}

// The same trace on a device that holds only the budget: b needs storage 1's
// memory, which is free only once its copy to host is done: a ends at 1, the
// copy runs 1-3, b runs 3-6 (2 ms of stall), c 6-9; the copy back is issued at
// 9 and runs 9-11 while d runs 9-10; e waits until 11 (1 ms). Makespan 9 + 3.
TEST(OptimalPlanner, PureOffloadOnACappedDeviceWaitsForTheCopyToHost) {
  const PlanResult plan = plan_optimal(offload_trace(), 4 * kMiB, DeviceMemory::kBudget);
  EXPECT_THAT(plan.schedule.actions,
              ElementsAreArray(actions("post 0 copy_d2h 1; post 0 release_device 1; post 2 release_device 2; "
                                       "pre 3 copy_h2d 1; post 4 release_host 1; post 4 release_device 1")));
  ASSERT_TRUE(plan.solver.has_value());
  EXPECT_EQ(plan.solver->status, SolverStatus::kOptimal);
  EXPECT_NEAR(plan.solver->objective_ms, 12.0, 1e-6);
}

// Storage 2 (A, 4 MiB) is made from storage 1 (X, 1 MiB) by the recomputable
// op f, and read again by bwd; storage 3 (4 MiB) fills the middle.
//   op:        load(1) f(0.5) big(1) use(1) bwd(1)    compute 4.5
//   storage 1:  W       R      .      .      R        1 MiB
//   storage 2:  .       W      .      .      R        4 MiB, recomputable from 1
//   storage 3:  .       .      W      R      .        4 MiB
//   unplanned:  1       5      9      9      5        budget 5: A must go over big, use
// Offloading A: its copy to host (4 ms) starts when f ends (1.5) and ends at
// 5.5; the copy back cannot start before, ends at 9.5 at best: bwd starts at
// 9.5 instead of 3.5, makespan 10.5. Recomputing f before bwd costs 0.5 ms
// (X is resident anyway: bwd reads it); while f re-runs, X and A hold 5 MiB.
// Optimum 4.5 + 0.5 = 5, on either device (a release with no copy frees at once).
Trace recompute_trace() {
  return TraceDsl()
      .storage(1, 1 * kMiB)
      .storage(2, 4 * kMiB)
      .storage(3, 4 * kMiB)
      .bandwidth(kMiBPerMs)
      .op("load", "W1", 1)
      .op("f", "R1 W2", 0.5, Recomputable::kYes)
      .op("big", "W3", 1)
      .op("use", "R3", 1)
      .op("bwd", "R2 R1", 1)
      .build();
}

TEST(OptimalPlanner, PureRecomputeOptimumReRunsTheCheapOp) {
  for (const DeviceMemory device : {DeviceMemory::kUnlimited, DeviceMemory::kBudget}) {
    const PlanResult plan = plan_optimal(recompute_trace(), 5 * kMiB, device);
    EXPECT_THAT(plan.schedule.actions,
                ElementsAreArray(actions("post 1 release_device 2; post 3 release_device 3; pre 4 recompute 1; "
                                         "post 4 release_device 1; post 4 release_device 2")));
    EXPECT_EQ(plan.planned_peak_bytes, 5 * kMiB);
    ASSERT_TRUE(plan.solver.has_value());
    EXPECT_EQ(plan.solver->status, SolverStatus::kOptimal);
    EXPECT_NEAR(plan.solver->objective_ms, 5.0, 1e-6);
    EXPECT_THAT(plan.notes.front(), HasSubstr("recompute 0.5 in 1 + stall 0"));
  }
}

// Two storages must leave; only one of them can be recomputed.
//   op:        load(1) f(.5) drop(1) big(2) use(2) bwd_b(1) bwd_a(1)   compute 8.5
//   storage 1:  W       R     .       .      .      .        R         X 1 MiB
//   storage 2:  .       W     .       .      .      .        R         A 4 MiB, recomputable from X
//   storage 3:  .       .     W       .      .      R        .         B 1 MiB (not recomputable)
//   storage 4:  .       .     .       W      R      .        .         C 4 MiB
//   unplanned:  1       5     6       10     10     6        5         budget 5
// Over budget: drop (1 too many: X or A), big and use (5: A and one of X, B),
// bwd_b (1: X or A). Pure recompute cannot do it (only A is recomputable).
// Best: A dropped after f and recomputed before bwd_a (0.5 ms, X and A are
// 5 MiB then), and X copied to host during drop (1 ms) and back before bwd_b,
// the copy running during bwd_b's 1 ms: no stall, makespan 8.5 + 0.5 = 9.
// (B instead of X: B's copy back is issued when use ends and bwd_b reads B, so
// it waits 1 ms: 10. Offloading A: its 4 ms copy back stalls at least 3 ms.)
// On a capped device the same: X's copy to host can run during f and drop,
// before big allocates.
Trace mixed_trace() {
  return TraceDsl()
      .storage(1, 1 * kMiB)
      .storage(2, 4 * kMiB)
      .storage(3, 1 * kMiB)
      .storage(4, 4 * kMiB)
      .bandwidth(kMiBPerMs)
      .op("load", "W1", 1)
      .op("f", "R1 W2", 0.5, Recomputable::kYes)
      .op("drop", "W3", 1)
      .op("big", "W4", 2)
      .op("use", "R4", 2)
      .op("bwd_b", "R3", 1)
      .op("bwd_a", "R2 R1", 1)
      .build();
}

TEST(OptimalPlanner, MixedOptimumRecomputesOneStorageAndOffloadsAnother) {
  for (const DeviceMemory device : {DeviceMemory::kUnlimited, DeviceMemory::kBudget}) {
    const PlanResult plan = plan_optimal(mixed_trace(), 5 * kMiB, device);
    ASSERT_TRUE(plan.solver.has_value());
    EXPECT_EQ(plan.solver->status, SolverStatus::kOptimal);
    EXPECT_NEAR(plan.solver->objective_ms, 9.0, 1e-6);
    EXPECT_LE(plan.planned_peak_bytes, 5 * kMiB);
    // X leaves and comes back before bwd_b; A is dropped and recomputed.
    const std::vector<Action>& got = plan.schedule.actions;
    auto has = [&](std::string_view text) {
      const Action wanted = actions(text).front();
      return std::find(got.begin(), got.end(), wanted) != got.end();
    };
    EXPECT_TRUE(has("pre 5 copy_h2d 1"));
    EXPECT_TRUE(has("pre 6 recompute 1"));
    EXPECT_TRUE(has("post 1 release_device 2"));
    EXPECT_FALSE(has("pre 5 copy_h2d 3"));
  }
}

TEST(OptimalPlanner, RefusesABudgetBelowWhatAnOpTouches) {
  // f reads X and writes A: 5 MiB while it runs, so 4 MiB cannot work.
  const Result<PlanResult> result = OptimalPlanner().plan(recompute_trace(), 4 * kMiB);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(result.error().message,
              HasSubstr("budget 4.00 MiB (4194304 bytes) is below what op 1 (f) needs on the device while it runs: "
                        "5.00 MiB (5242880 bytes); no schedule fits (raise the budget to at least 5242880 bytes)"));
}

TEST(OptimalPlanner, CountsRetainedStoragesAfterTheirLastAccessInTheFloor) {
  // Storage 1 is retained: it stays from op 0 to the end, so op 1 holds 2 + 3.
  const Trace trace = TraceDsl()
                          .storage(1, 2 * kMiB, Retention::kRetained)
                          .storage(2, 3 * kMiB)
                          .op("a", "W1", 1)
                          .op("b", "W2", 1)
                          .build();
  const Result<PlanResult> result = OptimalPlanner().plan(trace, 4 * kMiB);
  ASSERT_FALSE(result.has_value());
  EXPECT_THAT(result.error().message, HasSubstr("op 1 (b) needs on the device while it runs: 5.00 MiB (5242880 bytes, "
                                                "of which 2097152 bytes are retained storages after their last access)"));
}

TEST(OptimalPlanner, RefusesTracesAboveItsOpLimit) {
  OptimalPlannerOptions options;
  options.max_ops = 4;
  const Result<PlanResult> result = OptimalPlanner(options).plan(offload_trace(), 4 * kMiB);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(result.error().message,
              HasSubstr("the optimal planner takes traces of at most 4 ops; this one has 5 (use --planner hybrid or peak)"));
  EXPECT_FALSE(optimal_planner_accepts(offload_trace(), options));
  EXPECT_TRUE(optimal_planner_accepts(offload_trace()));
}

TEST(OptimalPlanner, RefusesProgramsAboveItsVariableLimit) {
  OptimalPlannerOptions options;
  options.max_columns = 10;
  const Result<PlanResult> result = OptimalPlanner(options).plan(offload_trace(), 4 * kMiB);
  ASSERT_FALSE(result.has_value());
  EXPECT_THAT(result.error().message, HasSubstr("variables, more than the 10 it takes (use --planner hybrid or peak)"));
}

TEST(OptimalPlanner, RejectsANonPositiveTimeLimit) {
  OptimalPlannerOptions options;
  options.time_limit_s = 0.0;
  const Result<PlanResult> result = OptimalPlanner(options).plan(offload_trace(), 4 * kMiB);
  ASSERT_FALSE(result.has_value());
  EXPECT_THAT(result.error().message, HasSubstr("time limit 0 s: expected a positive number of seconds"));
}

TEST(OptimalPlanner, PlansNothingWithoutABudget) {
  const Result<PlanResult> result = OptimalPlanner().plan(offload_trace(), std::nullopt);
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->schedule.actions.empty());
  EXPECT_FALSE(result->solver.has_value());
}

TEST(OptimalPlanner, OnlyReleasesAtLastUseWhenTheBudgetIsNotExceeded) {
  // Nothing is over 6 MiB: no variable is free and the schedule only frees
  // each storage after its last access, with no stall.
  const PlanResult plan = plan_optimal(offload_trace(), 6 * kMiB);
  EXPECT_THAT(plan.schedule.actions, ElementsAreArray(actions("post 2 release_device 2; post 4 release_device 1")));
  ASSERT_TRUE(plan.solver.has_value());
  EXPECT_NEAR(plan.solver->objective_ms, 9.0, 1e-9);
}

TEST(OptimalPlanner, ReportsProgressWithIncumbentBoundAndGap) {
  std::vector<SolverProgress> reports;
  OptimalPlannerOptions options;
  options.progress = [&](const SolverProgress& progress) { reports.push_back(progress); };
  ASSERT_TRUE(OptimalPlanner(options).plan(mixed_trace(), 5 * kMiB).has_value());
  ASSERT_FALSE(reports.empty());
  const SolverProgress& last = reports.back();
  ASSERT_TRUE(last.incumbent_ms.has_value());
  ASSERT_TRUE(last.gap.has_value());
  EXPECT_NEAR(*last.incumbent_ms, 9.0, 1e-6);
  EXPECT_LE(last.bound_ms, *last.incumbent_ms + 1e-9);
  for (std::size_t i = 1; i < reports.size(); ++i) EXPECT_GE(reports[i].elapsed_s, reports[i - 1].elapsed_s);
}

// A program CBC cannot close in a fraction of a second: many storages of
// similar size on a 200-op random trace with recomputable ops, at a budget
// well above the floor (many ways to fit, little to tell them apart).
Trace hard_trace() {
  RandomTraceOptions options;
  options.op_count = 200;
  options.storage_count = 160;
  options.seed = 11;
  options.min_size_bytes = 1 << 20;
  options.max_size_bytes = 4 << 20;
  options.zero_size_fraction = 0.0;
  options.retained_fraction = 0.0;
  options.recomputable_fraction = 0.6;
  options.limit_fraction = std::nullopt;
  return generate_random_trace(options);
}

TEST(Scratch, Explore) {
  for (double f : {0.4, 0.5, 0.6}) {
    const Trace trace = hard_trace();
    const std::int64_t peak = unplanned_peak(trace).bytes;
    OptimalPlannerOptions options;
    options.time_limit_s = 1.0;
    const auto start = std::chrono::steady_clock::now();
    const Result<PlanResult> result = OptimalPlanner(options).plan(trace, static_cast<std::int64_t>(peak * f));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!result) { printf("f %g error %s\n", f, result.error().message.c_str()); continue; }
    printf("f %g wall %.2f status %s obj %g bound %g gap %g cols %lld\n", f, s, to_string(result->solver->status),
           result->solver->objective_ms, result->solver->bound_ms, result->solver->gap, (long long)result->solver->columns);
  }
}

}  // namespace
}  // namespace hyperoffload
