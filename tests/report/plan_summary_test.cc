// summarize_plan: the numbers `plan`, `compare` and the Python summary share,
// on the hand-derived retained trace (report/retained_trace.h).
#include "hyperoffload/report/plan_summary.h"

#include <gtest/gtest.h>

#include "report/retained_trace.h"

namespace hyperoffload {
namespace {

using testing::retained_trace;

// The peak planner's plan at budget 200: storage 2 copied to host and
// released after op c, brought back before op e; s3 released after its only
// access, s2 (and its host copy) after its last.
Schedule evict_s2_over_d() {
  Schedule schedule;
  schedule.planner = "peak";
  schedule.actions = {{.op = 2, .phase = Phase::kPost, .kind = ActionKind::kCopyD2H, .storage = 2, .source_op = -1},
                      {.op = 2, .phase = Phase::kPost, .kind = ActionKind::kReleaseDevice, .storage = 2, .source_op = -1},
                      {.op = 3, .phase = Phase::kPost, .kind = ActionKind::kReleaseDevice, .storage = 3, .source_op = -1},
                      {.op = 4, .phase = Phase::kPre, .kind = ActionKind::kCopyH2D, .storage = 2, .source_op = -1},
                      {.op = 4, .phase = Phase::kPost, .kind = ActionKind::kReleaseDevice, .storage = 2, .source_op = -1},
                      {.op = 4, .phase = Phase::kPost, .kind = ActionKind::kReleaseHost, .storage = 2, .source_op = -1}};
  return schedule;
}

TEST(PlanSummary, GathersThePlansNumbersOnTheCappedDevice) {
  // Capped at 200 bytes (comparison_test.cc derives the timeline): d waits
  // 3-4 ms for s2's copy to host to free its buffer, e waits for the copy
  // back (5-6 ms): stall 2 ms, 1 of it for memory, makespan 7, overhead
  // 2 / 5 = 40%; never more than 200 bytes held. Op-granular: 200 at op c
  // (s1 + s2; at d s1 + s3). One copy each way of 100 bytes; one pre action,
  // five post. Unplanned peak 300 at op d, so 200 is 66.7% of it.
  const PlanSummary summary = summarize_plan(retained_trace(), evict_s2_over_d(), UnavoidableFloor{3, 200},
                                             {.budget_bytes = 200,
                                              .device_memory = DeviceMemory::kBudget,
                                              .copy_engines = CopyEngines::kTwo,
                                              .record_timeline = RecordTimeline::kNo});
  EXPECT_EQ(summary.planner, "peak");
  EXPECT_EQ(summary.op_count, 5);
  EXPECT_EQ(summary.storage_count, 3);
  EXPECT_EQ(summary.unplanned.bytes, 300);
  EXPECT_EQ(summary.unplanned.op, 3);
  ASSERT_TRUE(summary.floor.has_value());
  EXPECT_EQ(summary.floor->bytes, 200);
  EXPECT_NEAR(summary.budget_percent(), 200.0 / 3.0, 1e-9);
  EXPECT_EQ(summary.pre_actions, 1);
  EXPECT_EQ(summary.post_actions, 5);
  EXPECT_TRUE(summary.simulation.valid());
  EXPECT_EQ(summary.op_peak_bytes(), 200);
  EXPECT_EQ(summary.timed_peak_bytes(), 200);
  EXPECT_EQ(summary.simulation.d2h_bytes, 100);
  EXPECT_EQ(summary.simulation.h2d_count, 1);
  EXPECT_NEAR(summary.simulation.stall_ms, 2.0, 1e-9);
  EXPECT_NEAR(summary.simulation.memory_stall_ms, 1.0, 1e-9);
  EXPECT_NEAR(summary.simulation.overhead_percent(), 40.0, 1e-9);
}

TEST(PlanSummary, OnTheUnlimitedDeviceTheCopyInFlightShowsInTheTimedPeak) {
  // Unlimited: d allocates s3 at 3 ms while s2's copy to host (3-4 ms) still
  // reads its buffer: 300 bytes in time; only e waits, for the copy back (4-5
  // ms): stall 1 ms, overhead 20%. Without a budget the percentage is 0.
  const PlanSummary summary = summarize_plan(retained_trace(), evict_s2_over_d(), std::nullopt,
                                             {.budget_bytes = std::nullopt,
                                              .device_memory = DeviceMemory::kUnlimited,
                                              .copy_engines = CopyEngines::kTwo,
                                              .record_timeline = RecordTimeline::kNo});
  EXPECT_FALSE(summary.floor.has_value());
  EXPECT_EQ(summary.budget_percent(), 0.0);
  EXPECT_EQ(summary.op_peak_bytes(), 200);
  EXPECT_EQ(summary.timed_peak_bytes(), 300);
  EXPECT_NEAR(summary.simulation.stall_ms, 1.0, 1e-9);
  EXPECT_NEAR(summary.simulation.overhead_percent(), 20.0, 1e-9);
}

}  // namespace
}  // namespace hyperoffload
