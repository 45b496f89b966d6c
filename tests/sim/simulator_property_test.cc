// Simulator properties over random traces planned by greedy, and over the same
// schedules with random actions dropped (which makes faults and data loss).
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/plan/greedy_planner.h"
#include "hyperoffload/sim/simulator.h"
#include "testing/recomputable.h"

namespace hyperoffload {
namespace {

// Relative slack for comparing sums of the same durations added in different
// orders (compute_ms adds durations; op end times add durations to starts).
double slack(double value) { return 1e-9 * std::max(1.0, value); }

// The checks every simulation must pass, whatever the schedule. The simulator
// decides effective copies and faults with its own state machine, so comparing
// its counts with the validator's holds the two together.
void check_invariants(const Trace& trace, const SimulationResult& result, const std::string& where) {
  SCOPED_TRACE(where);
  const ValidationReport& v = result.validation;
  std::int64_t fault_spans = 0;
  std::int64_t d2h_spans = 0;
  std::int64_t h2d_spans = 0;
  std::int64_t recompute_spans = 0;
  double last_op_end_ms = 0.0;
  double last_compute_end_ms = 0.0;  // of an op or a recompute
  for (const TimelineSpan& span : result.timeline.spans) {
    ASSERT_LE(span.start_ms, span.end_ms);
    fault_spans += span.kind == SpanKind::kFault ? 1 : 0;
    d2h_spans += span.kind == SpanKind::kCopyD2H ? 1 : 0;
    h2d_spans += span.kind == SpanKind::kCopyH2D ? 1 : 0;
    recompute_spans += span.kind == SpanKind::kRecompute ? 1 : 0;
    if (span.kind == SpanKind::kOp) last_op_end_ms = span.end_ms;
    if (span.kind == SpanKind::kOp || span.kind == SpanKind::kRecompute) {
      ASSERT_GE(span.start_ms, last_compute_end_ms);  // one compute stream
      last_compute_end_ms = span.end_ms;
    }
  }
  EXPECT_EQ(recompute_spans, result.recompute_count);
  EXPECT_EQ(result.recompute_count, v.recompute_count);
  EXPECT_EQ(fault_spans, static_cast<std::int64_t>(result.faults()));
  EXPECT_EQ(result.d2h_bytes, v.d2h_bytes);
  EXPECT_EQ(result.h2d_bytes, v.h2d_bytes);
  EXPECT_EQ(result.d2h_count, v.d2h_count);
  EXPECT_EQ(result.h2d_count, v.h2d_count);
  EXPECT_EQ(d2h_spans, v.d2h_count);
  EXPECT_EQ(h2d_spans, v.h2d_count);

  EXPECT_GE(result.stall_ms, 0.0);
  EXPECT_GE(result.fault_ms, 0.0);
  EXPECT_LE(result.fault_ms, result.stall_ms + slack(result.stall_ms));
  EXPECT_NEAR(result.compute_ms, trace.total_compute_ms(), slack(result.compute_ms));
  EXPECT_GE(result.makespan_ms, result.compute_ms - slack(result.compute_ms));
  EXPECT_NEAR(result.compute_ms + result.stall_ms + result.recompute_ms, last_compute_end_ms,
              slack(last_compute_end_ms));
  EXPECT_GE(result.makespan_ms, last_compute_end_ms);
  EXPECT_GE(last_compute_end_ms, last_op_end_ms);

  // Memory is taken no later and freed no earlier than the validator assumes:
  // these schedules (greedy's, or random subsets of them) prefetch at the last
  // moment, and capped runs reserve prefetches when they are issued.
  EXPECT_GE(result.peak_bytes_timed, result.peak_bytes());
  EXPECT_GE(result.peak_bytes_timed, 0);
  std::int64_t max_sample = 0;
  for (std::size_t i = 0; i < result.timeline.memory.size(); ++i) {
    const MemorySample& sample = result.timeline.memory[i];
    ASSERT_GE(sample.device_bytes, 0);
    if (i > 0) {
      ASSERT_LE(result.timeline.memory[i - 1].time_ms, sample.time_ms);
    }
    max_sample = std::max(max_sample, sample.device_bytes);
  }
  EXPECT_EQ(max_sample, result.peak_bytes_timed);
}

Trace random_trace(std::uint64_t seed) {
  RandomTraceOptions options;
  options.seed = seed * 104729;
  options.op_count = 1 + static_cast<std::int32_t>(seed % 150);
  options.storage_count = 1 + static_cast<std::int32_t>((seed * 37) % 90);
  options.limit_fraction = 0.1 + 0.05 * static_cast<double>(seed % 16);
  // Slow links make stalls common; fast ones hide most copies.
  options.bandwidth_gib_per_s = seed % 3 == 0 ? 1.0 : 16.0;
  return generate_random_trace(options);
}

SimulationResult simulate_with(const Trace& trace, const Schedule& schedule, CopyEngines engines) {
  SimulatorOptions options;
  options.copy_engines = engines;
  options.record_timeline = RecordTimeline::kYes;
  return simulate(trace, schedule, options);
}

TEST(SimulatorProperty, AgreesWithTheValidatorOnGreedySchedules) {
  int stalled = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const Trace trace = random_trace(seed);
    Result<PlanResult> plan = GreedyPlanner().plan(trace, trace.memory_limit_bytes());
    ASSERT_TRUE(plan) << "seed " << seed;
    for (const CopyEngines engines : {CopyEngines::kOne, CopyEngines::kTwo}) {
      const SimulationResult result = simulate_with(trace, plan->schedule, engines);
      const std::string where = "seed " + std::to_string(seed) + ", engines " +
                                std::to_string(static_cast<int>(engines));
      ASSERT_TRUE(result.valid()) << where << ": " << result.validation.problems.front();
      EXPECT_EQ(result.faults(), 0u) << where;
      check_invariants(trace, result, where);
      stalled += result.stall_ms > 0 ? 1 : 0;
    }
  }
  EXPECT_GT(stalled, 100);  // the property ran on schedules that do stall
}

TEST(SimulatorProperty, KeepsTheTimedPeakWithinTheBudgetWhenMemoryIsCapped) {
  // Every plan within the budget at op granularity stays within it at every
  // instant on a capped device; the waiting shows up as stall instead.
  int waited = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const Trace trace = random_trace(seed);
    Result<PlanResult> plan = GreedyPlanner().plan(trace, trace.memory_limit_bytes());
    ASSERT_TRUE(plan) << "seed " << seed;
    SimulatorOptions options;
    options.record_timeline = RecordTimeline::kYes;
    options.device_memory = DeviceMemory::kBudget;
    const SimulationResult result = simulate(trace, plan->schedule, options);
    const std::string where = "seed " + std::to_string(seed);
    check_invariants(trace, result, where);
    if (result.peak_bytes() <= result.budget_bytes) {
      EXPECT_LE(result.peak_bytes_timed, result.budget_bytes) << where;
    }
    EXPECT_GE(result.stall_ms, result.memory_stall_ms) << where;
    waited += result.memory_stall_ms > 0 ? 1 : 0;
  }
  EXPECT_GT(waited, 20);  // the cap bound on many of them
}

TEST(SimulatorProperty, SharingOneEngineNeverStallsLess) {
  // One shared queue only adds waiting: every copy starts no earlier than with
  // two queues, so the compute stream cannot stall less.
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const Trace trace = random_trace(seed);
    Result<PlanResult> plan = GreedyPlanner().plan(trace, trace.memory_limit_bytes());
    ASSERT_TRUE(plan);
    const SimulationResult one = simulate_with(trace, plan->schedule, CopyEngines::kOne);
    const SimulationResult two = simulate_with(trace, plan->schedule, CopyEngines::kTwo);
    EXPECT_GE(one.stall_ms, two.stall_ms - slack(two.stall_ms)) << "seed " << seed;
  }
}

TEST(SimulatorProperty, MatchesTheOpPeakWithoutActions) {
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const Trace trace = random_trace(seed);
    const SimulationResult result = simulate_with(trace, Schedule{}, CopyEngines::kTwo);
    const std::string where = "seed " + std::to_string(seed);
    check_invariants(trace, result, where);
    EXPECT_EQ(result.peak_bytes_timed, result.peak_bytes()) << where;
    EXPECT_EQ(result.stall_ms, 0.0) << where;
    EXPECT_NEAR(result.makespan_ms, result.compute_ms, slack(result.compute_ms)) << where;
  }
}

TEST(SimulatorProperty, AgreesWithTheValidatorWhenActionsAreMissing) {
  // Dropping actions from greedy plans leaves storages released without a
  // prefetch (faults), without a host copy (data loss) or copies that find
  // nothing to copy: the simulator must still agree on what happens.
  int faulted = 0;
  int invalid = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const Trace trace = random_trace(seed);
    Result<PlanResult> plan = GreedyPlanner().plan(trace, trace.memory_limit_bytes());
    ASSERT_TRUE(plan);
    std::mt19937_64 rng(seed);
    Schedule damaged{"damaged", {}};
    for (const Action& action : plan->schedule.actions) {
      if (rng() % 4 != 0) damaged.actions.push_back(action);
    }
    for (const CopyEngines engines : {CopyEngines::kOne, CopyEngines::kTwo}) {
      const SimulationResult result = simulate_with(trace, damaged, engines);
      check_invariants(trace, result, "seed " + std::to_string(seed));
      faulted += result.faults() > 0 ? 1 : 0;
      invalid += result.valid() ? 0 : 1;
    }
  }
  EXPECT_GT(faulted, 50);
  EXPECT_GT(invalid, 50);
}

TEST(SimulatorProperty, AgreesWithTheValidatorOnRandomRecomputes) {
  // Greedy plans with actions dropped and recomputes of random earlier
  // recomputable ops inserted: some regenerate what a release lost, some find
  // an input missing or stale, some an output stale. On unlimited and capped
  // devices the simulator must agree with the validator on what happens and
  // keep the compute stream's books: compute + stall + recompute = its end.
  int recomputed = 0;
  int regenerating = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const Trace trace = testing::with_recomputable_ops(random_trace(seed));
    std::vector<OpIndex> recomputable;
    for (OpIndex op = 0; op < trace.op_count(); ++op) {
      if (trace.op_recomputable(op)) recomputable.push_back(op);
    }
    if (recomputable.empty()) continue;
    Result<PlanResult> plan = GreedyPlanner().plan(trace, trace.memory_limit_bytes());
    ASSERT_TRUE(plan);
    std::mt19937_64 rng(seed);
    Schedule mixed{"mixed", {}};
    auto maybe_recompute = [&](OpIndex op, Phase phase) {
      if (rng() % 3 != 0) return;
      const OpIndex source = recomputable[rng() % recomputable.size()];
      if (recompute_source_precedes(source, op, phase)) mixed.add_recompute(op, phase, source);
    };
    std::size_t next = 0;
    for (OpIndex op = 0; op < trace.op_count(); ++op) {
      for (const Phase phase : {Phase::kPre, Phase::kPost}) {
        maybe_recompute(op, phase);  // before the planned actions of the slot...
        for (; next < plan->schedule.actions.size() && plan->schedule.actions[next].op == op &&
               plan->schedule.actions[next].phase == phase;
             ++next) {
          if (rng() % 5 != 0) mixed.actions.push_back(plan->schedule.actions[next]);
        }
        maybe_recompute(op, phase);  // ...and after them
      }
    }
    for (const DeviceMemory device : {DeviceMemory::kUnlimited, DeviceMemory::kBudget}) {
      SimulatorOptions options;
      options.record_timeline = RecordTimeline::kYes;
      options.device_memory = device;
      const SimulationResult result = simulate(trace, mixed, options);
      const std::string where = "seed " + std::to_string(seed);
      check_invariants(trace, result, where);
      recomputed += result.recompute_count > 0 ? 1 : 0;
      if (device == DeviceMemory::kBudget && result.peak_bytes() <= result.budget_bytes) {
        EXPECT_LE(result.peak_bytes_timed, result.budget_bytes) << where;
      }
    }
    // The validator's peak counts recomputes: never below the op profile's.
    const ValidationReport report = validate_schedule(trace, mixed, ValidatorOptions{KeepProfile::kYes});
    const std::int64_t op_max =
        report.resident_bytes.empty() ? 0 : *std::max_element(report.resident_bytes.begin(), report.resident_bytes.end());
    EXPECT_GE(report.peak_bytes, op_max);
    regenerating += report.peak_recompute_source >= 0 ? 1 : 0;
  }
  EXPECT_GT(recomputed, 200);
  EXPECT_GT(regenerating, 0);  // some recomputes set the peak
}

}  // namespace
}  // namespace hyperoffload
