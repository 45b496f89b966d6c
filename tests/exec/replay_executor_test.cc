#include "hyperoffload/exec/replay_executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "exec/exec_fixture.h"
#include "exec/step_driver.h"
#include "hyperoffload/check/validator.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using testing::actions;
using ::testing::HasSubstr;
using testing::HostRuntime;
using testing::StepDriver;
using testing::TraceDsl;

// op0 a: W1 | op1 b: R1 W2 | op2 c: W3 | op3 d: R1 R3
Trace four_op_trace() {
  return TraceDsl()
      .storage(1, 100)
      .storage(2, 100)
      .storage(3, 100)
      .op("a", "W1", 1.0)
      .op("b", "R1 W2", 1.0)
      .op("c", "W3", 1.0)
      .op("d", "R1 R3", 1.0)
      .limit(300)
      .build();
}

std::shared_ptr<const ReplayPlan> plan_of(Trace trace, std::string_view schedule_text) {
  Schedule schedule{"test", actions(schedule_text)};
  Result<std::shared_ptr<const ReplayPlan>> plan = ReplayPlan::create(std::move(trace), std::move(schedule));
  EXPECT_TRUE(plan.has_value()) << plan.error().message;
  return *plan;
}

std::unique_ptr<ReplayExecutor> start(HostRuntime& rt, std::shared_ptr<const ReplayPlan> plan,
                                      RecordTimeline timeline = RecordTimeline::kNo) {
  Result<std::unique_ptr<ReplayExecutor>> replay = ReplayExecutor::start(rt.residency, std::move(plan), {timeline});
  EXPECT_TRUE(replay.has_value()) << replay.error().message;
  return std::move(*replay);
}

// The traced program with caller ids offset by 100 (a replayed step's new ids).
Status run_four_ops(StepDriver& step, std::optional<StorageId> free_after_b = std::nullopt) {
  HO_RETURN_IF_ERROR(step.op("a", {}, {{101, 100}}));
  HO_RETURN_IF_ERROR(step.op("b", {101}, {{102, 100}}));
  if (free_after_b) HO_RETURN_IF_ERROR(step.free(*free_after_b));
  HO_RETURN_IF_ERROR(step.op("c", {}, {{103, 100}}));
  return step.op("d", {101, 103}, {});
}

TEST(ReplayExecutor, RunsPreActionsBeforeAndPostActionsAfterEachOp) {
  // resident:  a:100  b:200, post: d2h 1 + release 1 → 100  c:200  pre d: h2d 1 → 300
  HostRuntime rt;
  auto replay = start(
      rt,
      plan_of(four_op_trace(), "post 1 copy_d2h 1; post 1 release_device 1; pre 3 copy_h2d 1; post 3 release_host 1"));
  StepDriver step(*replay);
  ASSERT_TRUE(step.op("a", {}, {{101, 100}}));
  ASSERT_TRUE(step.op("b", {101}, {{102, 100}}));
  EXPECT_FALSE(rt.residency.resident(101));
  EXPECT_TRUE(rt.residency.has_current_host_copy(101));
  ASSERT_TRUE(step.op("c", {}, {{103, 100}}));
  EXPECT_FALSE(rt.residency.resident(101));
  ASSERT_TRUE(step.op("d", {101, 103}, {}));  // checks 101's bytes after the prefetch
  EXPECT_FALSE(rt.residency.has_host_copy(101));
  Result<ReplayResult> result = replay->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->stats.kind, StepKind::kReplay);
  EXPECT_EQ(result->stats.ops, 4);
  EXPECT_EQ(result->stats.d2h_count, 1);
  EXPECT_EQ(result->stats.h2d_count, 1);
  EXPECT_EQ(result->stats.faults, 0);
  EXPECT_EQ(result->stats.peak_resident_bytes, 300);
  EXPECT_EQ(validate_schedule(four_op_trace(), Schedule{"", actions("post 1 copy_d2h 1; post 1 release_device 1; "
                                                                    "pre 3 copy_h2d 1; post 3 release_host 1")})
                .peak_bytes,
            300);
  replay.reset();
  rt.expect_nothing_held();
}

TEST(ReplayExecutor, AnAccessWithoutAPrefetchIsACountedFaultAsInTheValidator) {
  HostRuntime rt;
  const std::string_view schedule = "post 1 copy_d2h 1; post 1 release_device 1";
  auto replay = start(rt, plan_of(four_op_trace(), schedule));
  StepDriver step(*replay);
  ASSERT_TRUE(run_four_ops(step));
  Result<ReplayResult> result = replay->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  const ValidationReport report = validate_schedule(four_op_trace(), Schedule{"", actions(schedule)});
  EXPECT_EQ(result->stats.faults, static_cast<std::int64_t>(report.faults.size()));
  EXPECT_EQ(result->stats.faults, 1);
  EXPECT_EQ(result->stats.h2d_bytes, report.h2d_bytes);
  replay.reset();
  rt.expect_nothing_held();
}

TEST(ReplayExecutor, SkipsActionsOnStoragesTheCallerFreed) {
  HostRuntime rt;
  auto replay = start(rt, plan_of(four_op_trace(), "post 2 copy_d2h 2; post 2 release_device 2"));
  StepDriver step(*replay);
  ASSERT_TRUE(run_four_ops(step, /*free_after_b=*/102));
  ASSERT_TRUE(replay->finish());
  EXPECT_EQ(rt.residency.stats().d2h_count, 0);
  replay.reset();
  rt.expect_nothing_held();
}

TEST(ReplayExecutor, CopiesOfStoragesNotYetProducedFailButReleasesAreNoOps) {
  HostRuntime rt;
  {
    auto replay = start(rt, plan_of(four_op_trace(), "pre 0 release_device 3; pre 0 release_host 3"));
    StepDriver step(*replay);
    ASSERT_TRUE(run_four_ops(step));
    ASSERT_TRUE(replay->finish());
  }
  rt.expect_nothing_held();
  {
    auto replay = start(rt, plan_of(four_op_trace(), "pre 1 copy_d2h 3"));
    StepDriver step(*replay);
    Status status = run_four_ops(step);
    ASSERT_FALSE(status.has_value());
    EXPECT_THAT(status.error().message,
                HasSubstr("op 1 (b): op 1 pre copy_d2h storage 3: the storage does not exist yet"));
  }
  rt.expect_nothing_held();
}

TEST(ReplayExecutor, ADifferentOpIsADivergenceNamingTheIndexAndBothNames) {
  HostRuntime rt;
  auto replay = start(rt, plan_of(four_op_trace(), ""));
  StepDriver step(*replay);
  ASSERT_TRUE(step.op("a", {}, {{101, 100}}));
  ASSERT_TRUE(step.op("b", {101}, {{102, 100}}));
  Status status = step.op("softmax", {}, {{103, 100}});
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, ErrorCode::kDiverged);
  EXPECT_THAT(status.error().message, HasSubstr("op 2: the step runs \"softmax\" where the traced step ran \"c\""));
  EXPECT_THAT(status.error().message, HasSubstr("skip_offload"));
  replay.reset();
  rt.expect_nothing_held();
}

TEST(ReplayExecutor, MoreOrFewerOpsThanTracedAreDivergences) {
  HostRuntime rt;
  {
    auto replay = start(rt, plan_of(four_op_trace(), ""));
    StepDriver step(*replay);
    ASSERT_TRUE(run_four_ops(step));
    Status extra = step.op("e", {}, {});
    ASSERT_FALSE(extra.has_value());
    EXPECT_EQ(extra.error().code, ErrorCode::kDiverged);
    EXPECT_THAT(extra.error().message, HasSubstr("op 4 (\"e\"): the traced step has only 4 ops"));
  }
  rt.expect_nothing_held();
  {
    auto replay = start(rt, plan_of(four_op_trace(), ""));
    StepDriver step(*replay);
    ASSERT_TRUE(step.op("a", {}, {{101, 100}}));
    ASSERT_TRUE(step.op("b", {101}, {{102, 100}}));
    ASSERT_TRUE(step.op("c", {}, {{103, 100}}));
    Result<ReplayResult> early = replay->finish();
    ASSERT_FALSE(early.has_value());
    EXPECT_EQ(early.error().code, ErrorCode::kDiverged);
    EXPECT_THAT(early.error().message, HasSubstr("it ended after 3 ops; the traced step has 4 (op 3 was \"d\")"));
  }
  rt.expect_nothing_held();
  {
    // Offloaded after b, 101 is still held when the step ends early: it comes
    // back first, so the caller keeps its data.
    auto replay = start(rt, plan_of(four_op_trace(), "post 1 copy_d2h 1; post 1 release_device 1"));
    StepDriver step(*replay);
    ASSERT_TRUE(step.op("a", {}, {{101, 100}}));
    ASSERT_TRUE(step.op("b", {101}, {{102, 100}}));
    EXPECT_FALSE(rt.residency.resident(101));
    Result<ReplayResult> early = replay->finish();
    ASSERT_FALSE(early.has_value());
    EXPECT_EQ(early.error().code, ErrorCode::kDiverged);
    EXPECT_TRUE(rt.residency.resident(101));
    step.check("after the early end", 101);
  }
  rt.expect_nothing_held();
}

TEST(ReplayExecutor, DifferentOutputsOrInputsAreDivergences) {
  HostRuntime rt;
  auto expect_diverged = [&](auto&& run, std::string_view message) {
    auto replay = start(rt, plan_of(four_op_trace(), ""));
    StepDriver step(*replay);
    Status status = run(step);
    ASSERT_FALSE(status.has_value());
    EXPECT_EQ(status.error().code, ErrorCode::kDiverged);
    EXPECT_THAT(status.error().message, HasSubstr(message));
    replay.reset();
    rt.expect_nothing_held();
  };
  expect_diverged(
      [](StepDriver& s) {
        return s.op("a", {}, {{101, 100}, {102, 8}});
      },
      "op 0 (a): it allocates more than the 1 outputs the traced op produced");
  expect_diverged(
      [](StepDriver& s) {
        return s.op("a", {}, {{101, 50}});
      },
      "op 0 (a): output 0 is 50 bytes; the traced output (storage 1) was 100");
  expect_diverged(
      [](StepDriver& s) -> Status {
        HO_RETURN_IF_ERROR(s.op("a", {}, {{101, 100}}));
        return s.op("b", {}, {{102, 100}});
      },
      "op 1 (b): it reads 0 tracked storages; the traced op read 1");
  expect_diverged(
      [](StepDriver& s) -> Status {
        HO_RETURN_IF_ERROR(s.op("a", {}, {{101, 100}}));
        HO_RETURN_IF_ERROR(s.op("b", {101}, {{102, 100}}));
        HO_RETURN_IF_ERROR(s.op("c", {}, {{103, 100}}));
        return s.op("d", {103, 101}, {});
      },
      "op 3 (d): input 0 is the storage traced as 3; the traced op read storage 1 there");
}

TEST(ReplayExecutor, RecordsATimelineInTheSimulatorsSchema) {
  HostRuntime rt;
  auto replay = start(rt, plan_of(four_op_trace(), "post 1 copy_d2h 1; post 1 release_device 1; pre 3 copy_h2d 1"),
                      RecordTimeline::kYes);
  StepDriver step(*replay);
  ASSERT_TRUE(run_four_ops(step));
  Result<ReplayResult> result = replay->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  const Timeline& timeline = result->timeline;
  std::vector<OpIndex> op_spans;
  int d2h = 0, h2d = 0;
  for (const TimelineSpan& span : timeline.spans) {
    EXPECT_LE(span.start_ms, span.end_ms);
    EXPECT_GE(span.start_ms, 0.0);
    if (span.kind == SpanKind::kOp) {
      EXPECT_EQ(span.lane, Lane::kCompute);
      op_spans.push_back(span.op);
    } else if (span.kind == SpanKind::kCopyD2H) {
      ++d2h;
      EXPECT_EQ(span.lane, Lane::kCopy0);
      EXPECT_EQ(span.op, 1);
      EXPECT_EQ(span.storage, 1);  // the traced id, not the caller's 101
      EXPECT_EQ(span.bytes, 100);
    } else if (span.kind == SpanKind::kCopyH2D) {
      ++h2d;
      EXPECT_EQ(span.lane, Lane::kCopy1);
      EXPECT_EQ(span.op, 3);
      EXPECT_EQ(span.storage, 1);
    }
  }
  EXPECT_EQ(op_spans, (std::vector<OpIndex>{0, 1, 2, 3}));
  EXPECT_EQ(d2h, 1);
  EXPECT_EQ(h2d, 1);
  for (std::size_t i = 1; i < timeline.spans.size(); ++i) {
    EXPECT_LE(timeline.spans[i - 1].start_ms, timeline.spans[i].start_ms);
  }
  ASSERT_FALSE(timeline.memory.empty());
  std::int64_t peak = 0;
  for (const MemorySample& sample : timeline.memory) peak = std::max(peak, sample.device_bytes);
  EXPECT_EQ(peak, 300);
  EXPECT_EQ(timeline.budget_bytes, 300);
  replay.reset();
  rt.expect_nothing_held();
}

TEST(ReplayPlan, RejectsSchedulesThatDoNotFitTheTrace) {
  auto error_of = [](std::string_view text) {
    Result<std::shared_ptr<const ReplayPlan>> plan =
        ReplayPlan::create(four_op_trace(), Schedule{"test", actions(text)});
    EXPECT_FALSE(plan.has_value());
    return plan ? std::string() : plan.error().message;
  };
  EXPECT_THAT(error_of("post 0 release_device 9"), HasSubstr("unknown storage 9"));
  EXPECT_THAT(error_of("post 7 release_device 1"), HasSubstr("op 7 is out of range"));
  EXPECT_THAT(error_of("post 2 release_device 1; pre 1 copy_h2d 1"), HasSubstr("out of execution order"));
}

TEST(ReplayPlan, RejectsRecomputeActionsAtPlanLoadTime) {
  // Runtime recompute is not built yet: a schedule holding one fails when the
  // plan is made, naming the action, rather than mid-step.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50)
                          .op("a", "W1")
                          .op("b", "R1 W2", 0.0, Recomputable::kYes)
                          .op("c", "R2")
                          .build();
  Result<std::shared_ptr<const ReplayPlan>> plan =
      ReplayPlan::create(trace, Schedule{"test", actions("post 1 release_device 2; pre 2 recompute 1")});
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code, ErrorCode::kInvalidInput);
  EXPECT_EQ(plan.error().message,
            "actions[1] (op 2 pre recompute op 1): the replay executor does not run recompute actions yet; replay a "
            "schedule from a planner that only offloads (--planner peak)");
  // A recompute that is invalid anyway is reported as the validator does.
  Result<std::shared_ptr<const ReplayPlan>> invalid =
      ReplayPlan::create(trace, Schedule{"test", actions("pre 2 recompute 0")});
  ASSERT_FALSE(invalid.has_value());
  EXPECT_THAT(invalid.error().message, HasSubstr("actions[0] (op 2 pre recompute op 0): op 0 (a) is not recomputable"));
}

}  // namespace
}  // namespace hyperoffload
