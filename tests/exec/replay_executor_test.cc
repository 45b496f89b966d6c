#include "hyperoffload/exec/replay_executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>

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
  Result<std::unique_ptr<ReplayExecutor>> replay = ReplayExecutor::start(rt.residency, std::move(plan), ReplayOptions{timeline, {}});
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

// ---- Recompute -------------------------------------------------------------------

// The StepDriver's byte for a storage it produced (step_driver.h).
unsigned char driver_byte(StorageId id) { return static_cast<unsigned char>(id * 13 + 1); }

// A RecomputeFn for StepDriver programs: re-running source op k writes the
// bytes the driver wrote for its outputs (`caller_outputs[k]`, caller ids),
// after checking each input holds the driver's bytes for `caller_inputs[k]`.
struct DriverRecompute {
  std::map<OpIndex, std::vector<StorageId>> caller_inputs;
  std::map<OpIndex, std::vector<StorageId>> caller_outputs;
  std::map<StorageId, std::int64_t> sizes;
  std::vector<std::string> log;  // "k:needed outputs"

  Status operator()(RecomputeCall& call) {
    const OpIndex k = call.source_op();
    const std::vector<StorageId>& inputs = caller_inputs.at(k);
    if (call.input_ids().size() != inputs.size()) return make_error(ErrorCode::kInternal, "input count");
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto* bytes = static_cast<const unsigned char*>(call.input_ptrs()[i]);
      for (std::int64_t b = 0; b < sizes.at(inputs[i]); ++b) {
        if (bytes[b] != driver_byte(inputs[i])) {
          return make_error(ErrorCode::kInternal, fmt::format("input {} byte {} is wrong", inputs[i], b));
        }
      }
    }
    std::string needed;
    for (std::size_t j = 0; j < call.output_count(); ++j) {
      if (!call.output_needed(j)) continue;
      const StorageId id = caller_outputs.at(k)[j];
      HO_ASSIGN_OR_RETURN(void* ptr, call.allocate_output(j));
      std::memset(ptr, driver_byte(id), static_cast<std::size_t>(call.output_size_bytes(j)));
      needed += fmt::format("{}{}", needed.empty() ? "" : ",", id);
    }
    log.push_back(fmt::format("{}:{}{}", k, needed, call.last_of_step(0) ? " last" : ""));
    return ok_status();
  }
};

std::unique_ptr<ReplayExecutor> start_recomputing(HostRuntime& rt, std::shared_ptr<const ReplayPlan> plan,
                                                  DriverRecompute& recompute) {
  ReplayOptions options;
  options.recompute = [&recompute](RecomputeCall& call) { return recompute(call); };
  Result<std::unique_ptr<ReplayExecutor>> replay = ReplayExecutor::start(rt.residency, std::move(plan), options);
  EXPECT_TRUE(replay.has_value()) << replay.error().message;
  return std::move(*replay);
}

// a: W1 (100 B); b: R1 W2 (50 B, recomputable); c: R1; d: R2.
Trace one_recompute_trace() {
  return TraceDsl()
      .storage(1, 100)
      .storage(2, 50)
      .op("a", "W1")
      .op("b", "R1 W2", 0.0, Recomputable::kYes)
      .op("c", "R1")
      .op("d", "R2")
      .build();
}

TEST(ReplayExecutor, ARecomputeRegeneratesAReleasedStorageBitForBit) {
  // Resident bytes: a 100; b 150; post b: release 2 → 100; c 100; pre d:
  // recompute b regenerates 2 → 150 (inputs and outputs resident while it
  // runs); d reads 2, which the driver checks byte for byte. Peak 150, as the
  // validator counts it; one recompute regenerating 50 bytes.
  const std::string_view schedule = "post 1 release_device 2; pre 3 recompute 1";
  HostRuntime rt;
  DriverRecompute recompute{{{1, {101}}}, {{1, {102}}}, {{101, 100}, {102, 50}}, {}};
  auto replay = start_recomputing(rt, plan_of(one_recompute_trace(), schedule), recompute);
  StepDriver step(*replay);
  ASSERT_TRUE(step.op("a", {}, {{101, 100}}));
  ASSERT_TRUE(step.op("b", {101}, {{102, 50}}));
  EXPECT_FALSE(rt.residency.resident(102));
  EXPECT_FALSE(rt.residency.has_host_copy(102));  // released with no copy: only a recompute can bring it back
  ASSERT_TRUE(step.op("c", {101}, {}));
  ASSERT_TRUE(step.op("d", {102}, {}));
  EXPECT_EQ(recompute.log, std::vector<std::string>{"1:102 last"});
  Result<ReplayResult> result = replay->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->stats.recompute_count, 1);
  EXPECT_EQ(result->stats.regenerated_bytes, 50);
  EXPECT_GE(result->stats.recompute_ms, 0.0);
  EXPECT_EQ(result->stats.peak_resident_bytes, 150);
  EXPECT_EQ(result->stats.d2h_count + result->stats.h2d_count + result->stats.faults, 0);
  const ValidationReport report = validate_schedule(one_recompute_trace(), Schedule{"", actions(schedule)});
  EXPECT_EQ(report.peak_bytes, 150);
  EXPECT_EQ(report.recompute_count, 1);
  replay.reset();
  rt.expect_nothing_held();
}

TEST(ReplayExecutor, RecomputesChainAndKeepAFreedInputUntilTheLastRecomputeReadingIt) {
  // a: W1 (100); b: R1 W2 (50, rec); c: R2 W3 (30, rec); d: R1; e: R3.
  // After c the plan releases 2 and 3 and the caller frees 2 (c was its last
  // traced use). Before e it recomputes b (regenerating 2 from 1), then c
  // (regenerating 3 from the regenerated 2), then releases 2. So the runtime
  // must keep 2 after the caller freed it, until recompute c has read it.
  // Resident: a 100, b 150, c 180, post c → 100, d 100, recompute b → 150,
  // recompute c → 180 (its footprint), release 2 → 130, e 130. Peak 180.
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50)
                          .storage(3, 30)
                          .op("a", "W1")
                          .op("b", "R1 W2", 0.0, Recomputable::kYes)
                          .op("c", "R2 W3", 0.0, Recomputable::kYes)
                          .op("d", "R1")
                          .op("e", "R3")
                          .build();
  const std::string_view schedule =
      "post 2 release_device 2; post 2 release_device 3; pre 4 recompute 1; pre 4 recompute 2; "
      "pre 4 release_device 2";
  HostRuntime rt;
  DriverRecompute recompute{{{1, {101}}, {2, {102}}},
                            {{1, {102}}, {2, {103}}},
                            {{101, 100}, {102, 50}, {103, 30}},
                            {}};
  auto replay = start_recomputing(rt, plan_of(trace, schedule), recompute);
  StepDriver step(*replay);
  ASSERT_TRUE(step.op("a", {}, {{101, 100}}));
  ASSERT_TRUE(step.op("b", {101}, {{102, 50}}));
  ASSERT_TRUE(step.op("c", {102}, {{103, 30}}));
  ASSERT_TRUE(step.free(102));
  EXPECT_FALSE(rt.residency.tracked(102));                  // the caller's id is free again
  EXPECT_EQ(rt.residency.stats().storages, 3);              // 1, 3 and the kept 2
  ASSERT_TRUE(step.op("d", {101}, {}));
  ASSERT_TRUE(step.op("e", {103}, {}));  // checks 3's regenerated bytes
  // The output ids are the caller's; the kept 2 is logged by the driver's id.
  EXPECT_EQ(recompute.log, (std::vector<std::string>{"1:102 last", "2:103 last"}));
  EXPECT_EQ(rt.residency.stats().storages, 2);  // the kept 2 is gone after recompute c
  Result<ReplayResult> result = replay->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->stats.recompute_count, 2);
  EXPECT_EQ(result->stats.regenerated_bytes, 80);
  EXPECT_EQ(result->stats.peak_resident_bytes, 180);
  EXPECT_EQ(validate_schedule(trace, Schedule{"", actions(schedule)}).peak_bytes, 180);
  replay.reset();
  rt.expect_nothing_held();
}

// Runs one_recompute_trace() with `recompute` as the RecomputeFn up to op d,
// whose pre phase recomputes b; returns the error d's on_op_begin gives.
std::string recompute_failure(RecomputeFn recompute) {
  HostRuntime rt;
  ReplayOptions options;
  options.recompute = std::move(recompute);
  std::string message;
  {
    auto replay = std::move(*ReplayExecutor::start(
        rt.residency, plan_of(one_recompute_trace(), "post 1 release_device 2; pre 3 recompute 1"), options));
    StepDriver step(*replay);
    EXPECT_TRUE(step.op("a", {}, {{101, 100}}));
    EXPECT_TRUE(step.op("b", {101}, {{102, 50}}));
    EXPECT_TRUE(step.op("c", {101}, {}));
    Status failed = replay->on_op_begin("d", std::vector<StorageId>{102}, {});
    EXPECT_FALSE(failed.has_value());
    if (!failed) message = failed.error().message;
  }
  rt.expect_nothing_held();
  return message;
}

TEST(ReplayExecutor, AFailedRecomputeFailsTheStepNamingTheActionAndLeaksNothing) {
  EXPECT_EQ(recompute_failure([](RecomputeCall&) -> Status { return make_error(ErrorCode::kInternal, "kernel failed"); }),
            "op 3 (d): op 3 pre recompute op 1 (b): kernel failed");
}

TEST(ReplayExecutor, ARecomputeThatLeavesANeededOutputUnwrittenIsAnError) {
  EXPECT_EQ(recompute_failure([](RecomputeCall&) { return ok_status(); }),
            "op 3 (d): op 3 pre recompute op 1 (b): the recompute did not regenerate output 0 (storage traced as 2)");
}

TEST(ReplayPlan, APlanThatRecomputesNeedsTheFrameworksRecomputeHook) {
  HostRuntime rt;
  Result<std::unique_ptr<ReplayExecutor>> replay = ReplayExecutor::start(
      rt.residency, plan_of(one_recompute_trace(), "post 1 release_device 2; pre 3 recompute 1"));
  ASSERT_FALSE(replay.has_value());
  EXPECT_EQ(replay.error().message,
            "replay: the plan has 1 recompute actions but the framework gives no way to re-run an op "
            "(ReplayOptions::recompute)");
}

TEST(ReplayPlan, RejectsRecomputeSchedulesTheValidatorRejects) {
  const Trace trace = one_recompute_trace();
  // The source op is not recomputable: resolve_actions names the action.
  Result<std::shared_ptr<const ReplayPlan>> invalid =
      ReplayPlan::create(trace, Schedule{"test", actions("pre 2 recompute 0")});
  ASSERT_FALSE(invalid.has_value());
  EXPECT_THAT(invalid.error().message, HasSubstr("actions[0] (op 2 pre recompute op 0): op 0 (a) is not recomputable"));
  // Its input released with no copy: the runtime would re-run b on nothing.
  Result<std::shared_ptr<const ReplayPlan>> missing = ReplayPlan::create(
      trace, Schedule{"test", actions("post 2 release_device 1; post 2 release_device 2; pre 3 recompute 1")});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kInvalidInput);
  EXPECT_THAT(missing.error().message,
              HasSubstr("the schedule recomputes ops but is not valid for the trace: actions[2] (op 3 pre recompute "
                        "op 1): input storage 1"));
}

}  // namespace
}  // namespace hyperoffload
