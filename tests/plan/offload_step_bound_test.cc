// The hybrid planner's quick lower bound on any offload-only plan's step
// (plan/hybrid/offload_step_bound.h), derived by hand and checked against the
// peak planner's simulated plan; and the peak planner's run stopping when
// asked (the hybrid planner stops its offload-only plan with it).
#include <gtest/gtest.h>

#include <stop_token>

#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/hybrid/offload_step_bound.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/peak/peak_run.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/sim/simulator.h"
#include "testing/trace_dsl.h"

namespace hyperoffload::internal {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr double kMiBPerMs = 1000.0 / 1024.0;  // GiB/s: a MiB moves in 1 ms

// s1 (2 MiB) written by op 0 (0.5 ms), read by op 2; op 1 writes s2 (4 MiB).
// Resident 2, 6, 2 MiB; at a budget of 4 MiB op 1 must run with 2 MiB off the
// device.
Trace two_mib_off_at_op_1(double spike_ms = 0.5, double read_ms = 5.0) {
  return testing::TraceDsl()
      .storage(1, 2 * kMiB)
      .storage(2, 4 * kMiB)
      .bandwidth(kMiBPerMs)
      .op("write", "W1", 0.5)
      .op("spike", "W2", spike_ms)
      .op("read", "R1", read_ms)
      .build();
}

double bound_ms(const Trace& trace, std::int64_t budget, DeviceMemory device) {
  const StorageAccesses accesses(trace);
  return offload_only_step_bound_ms(trace, accesses, build_peak_model(trace, accesses).resident_bytes, budget, device);
}

double simulated_peak_plan_ms(const Trace& trace, DeviceMemory device) {
  PlannerOptions options;
  options.device_memory = device;
  const std::unique_ptr<Planner> planner = value_or_throw(make_planner("peak", options));
  const PlanResult plan = value_or_throw(planner->plan(trace, 4 * kMiB));
  SimulatorOptions sim;
  sim.budget_bytes = 4 * kMiB;
  sim.device_memory = device;
  return simulate(trace, plan.schedule, sim).makespan_ms;
}

TEST(OffloadOnlyStepBound, BoundsTheStepByTheCopiesOfTheExcess) {
  // E(1) = 2 MiB, compute 6 ms, C(1) = 0.5, C(2) = 1.
  //  - Unlimited: the 2 MiB come back after op 1 ends: 1 + 2 = 3 ms, below
  //    the compute: 6 ms.
  //  - Capped: op 1 allocates s2, so it starts once 2 MiB have left, 2 ms of
  //    D2H: 2 + (6 - 0.5) = 7.5 ms.
  // The peak plan copies s1 out after op 0 (0.5-2.5 ms) and back after op 1.
  //  - Unlimited: op 1 0.5-1; the copy back waits for the copy out: 2.5-4.5;
  //    op 2 4.5-9.5 ms.
  //  - Capped: op 1 waits for s1's room: 2.5-3; the copy back 3-5; op 2 5-10.
  const Trace trace = two_mib_off_at_op_1();
  const StorageAccesses accesses(trace);
  ASSERT_EQ(build_peak_model(trace, accesses).resident_bytes,
            (std::vector<std::int64_t>{2 * kMiB, 6 * kMiB, 2 * kMiB}));
  EXPECT_DOUBLE_EQ(bound_ms(trace, 4 * kMiB, DeviceMemory::kUnlimited), 6.0);
  EXPECT_DOUBLE_EQ(bound_ms(trace, 4 * kMiB, DeviceMemory::kBudget), 7.5);
  EXPECT_DOUBLE_EQ(simulated_peak_plan_ms(trace, DeviceMemory::kUnlimited), 9.5);
  EXPECT_DOUBLE_EQ(simulated_peak_plan_ms(trace, DeviceMemory::kBudget), 10.0);
}

TEST(OffloadOnlyStepBound, TheCopiesBackBoundTheStepWhenTheExcessComesLate) {
  // Op durations 0.5, 5, 0.5: C(2) = 5.5, so the copies back give 5.5 + 2 =
  // 7.5 ms against 6 ms of compute (both devices; capped: 2 + 5.5 = 7.5 too).
  const Trace trace = two_mib_off_at_op_1(/*spike_ms=*/5.0, /*read_ms=*/0.5);
  EXPECT_DOUBLE_EQ(bound_ms(trace, 4 * kMiB, DeviceMemory::kUnlimited), 7.5);
  EXPECT_DOUBLE_EQ(bound_ms(trace, 4 * kMiB, DeviceMemory::kBudget), 7.5);
  // Within the budget nothing must leave: the compute.
  EXPECT_DOUBLE_EQ(bound_ms(trace, 6 * kMiB, DeviceMemory::kBudget), 6.0);
}

TEST(PeakRun, StopsWhenAsked) {
  const Trace trace = two_mib_off_at_op_1();
  const StorageAccesses accesses(trace);
  const PeakModel model = build_peak_model(trace, accesses);
  std::stop_source stop;
  EXPECT_FALSE(run_peak_planner(trace, model, {}, 4 * kMiB, {.timer = {}, .stop = stop.get_token(), .threads = {}}).stopped);
  stop.request_stop();
  const PeakRun run = run_peak_planner(trace, model, {}, 4 * kMiB, {.timer = {}, .stop = stop.get_token(), .threads = {}});
  EXPECT_TRUE(run.stopped);
  EXPECT_TRUE(run.result.schedule.actions.empty());
}

}  // namespace
}  // namespace hyperoffload::internal
