// Stress and property tests: random traces (gen/random_trace.h), schedules
// from every registered planner and random schedules, replayed on the
// HostBackend with every storage checksummed at every access.
//
// HYPEROFFLOAD_STRESS_ITERATIONS scales the number of random traces (default
// kDefaultIterations, small enough for `make test`; `make test-asan` and
// `make test-tsan` raise it to thousands).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include "exec/checksum_program.h"
#include "exec/exec_fixture.h"
#include "hyperoffload/check/validator.h"
#include "hyperoffload/exec/replay_executor.h"
#include "hyperoffload/exec/session.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload {
namespace {

using testing::ChecksumProgram;
using testing::HostRuntime;

constexpr int kDefaultIterations = 120;

int iterations() {
  if (const char* text = std::getenv("HYPEROFFLOAD_STRESS_ITERATIONS")) {
    const int value = std::atoi(text);
    if (value > 0) return value;
  }
  return kDefaultIterations;
}

RandomTraceOptions small_trace(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  RandomTraceOptions options;
  options.seed = seed;
  options.op_count = 20 + static_cast<std::int32_t>(rng() % 60);
  options.storage_count = 5 + static_cast<std::int32_t>(rng() % 40);
  options.min_size_bytes = 8;
  options.max_size_bytes = 16 << 10;
  options.limit_fraction = 0.3 + 0.5 * static_cast<double>(rng() % 100) / 100.0;
  return options;
}

// Replays `schedule` on `trace` for two steps (different caller ids); returns
// the per-step stats or the first error.
Result<std::vector<StepStats>> replay_twice(HostRuntime& rt, const Trace& trace, const Schedule& schedule) {
  HO_ASSIGN_OR_RETURN(std::shared_ptr<const ReplayPlan> plan, ReplayPlan::create(trace, schedule));
  std::vector<StepStats> stats;
  for (StorageId offset : {StorageId{1} << 20, StorageId{3} << 20}) {
    HO_ASSIGN_OR_RETURN(std::unique_ptr<ReplayExecutor> replay, ReplayExecutor::start(rt.residency, plan));
    ChecksumProgram program(plan->trace());
    HO_RETURN_IF_ERROR(program.run(*replay, offset));
    HO_ASSIGN_OR_RETURN(ReplayResult result, replay->finish());
    HO_RETURN_IF_ERROR(program.verify_retained(*replay, offset));
    stats.push_back(result.stats);
    replay.reset();
    HO_RETURN_IF_ERROR(rt.residency.reset());
  }
  return stats;
}

TEST(ReplayStress, EveryPlannersScheduleKeepsEveryByteIntactAndMatchesTheValidator) {
  const int n = iterations();
  std::int64_t replayed = 0, offloaded = 0, faulted = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t seed = 1000 + static_cast<std::uint64_t>(i);
    const Trace trace = generate_random_trace(small_trace(seed));
    // One or two copy engines; waiters that spin first or sleep at once.
    const CopyEngines engines = i % 3 == 0 ? CopyEngines::kOne : CopyEngines::kTwo;
    HostRuntime rt(64 << 20, std::int64_t{1} << 40, engines, i % 2 == 0 ? 50 : 0);
    for (std::string_view name : planner_names()) {
      SCOPED_TRACE(fmt::format("seed {} planner {}", seed, name));
      Result<PlanResult> plan = (*make_planner(name))->plan(trace, trace.memory_limit_bytes());
      ASSERT_TRUE(plan.has_value()) << plan.error().message;
      const ValidationReport report = validate_schedule(trace, plan->schedule);
      ASSERT_TRUE(report.valid()) << report.problems.front();
      Result<std::vector<StepStats>> steps = replay_twice(rt, trace, plan->schedule);
      ASSERT_TRUE(steps.has_value()) << steps.error().message;
      for (const StepStats& stats : *steps) {
        EXPECT_EQ(stats.faults, static_cast<std::int64_t>(report.faults.size()));
        EXPECT_EQ(stats.d2h_bytes, report.d2h_bytes);
        EXPECT_EQ(stats.h2d_bytes, report.h2d_bytes);
        EXPECT_EQ(stats.d2h_count, report.d2h_count);
        EXPECT_EQ(stats.h2d_count, report.h2d_count);
        // Measured continuously, the peak also sees transients inside an
        // action list, so it is at least the validator's op-granular peak.
        EXPECT_GE(stats.peak_resident_bytes, report.peak_bytes);
        ++replayed;
        offloaded += stats.d2h_bytes > 0;
        faulted += stats.faults > 0;
      }
      if (::testing::Test::HasFailure()) return;
    }
    rt.expect_nothing_held();
  }
  // The test must exercise what it claims: offloading happened in most steps.
  EXPECT_GT(offloaded, replayed / 2);
  RecordProperty("replayed_steps", static_cast<int>(replayed));
  RecordProperty("steps_with_faults", static_cast<int>(faulted));
}

// Random actions, valid or not: the runtime fails only where the validator
// finds a problem, and where the validator finds none the runtime succeeds
// with the same faults — the runtime and the validator share one semantics.
Schedule random_schedule(const Trace& trace, std::uint64_t seed) {
  // Mostly plausible offloads (copy_d2h + release_device after some op of a
  // storage's lifetime, usually a copy_h2d before a later one), plus random
  // actions of any kind anywhere: valid, faulting and invalid schedules all occur.
  std::mt19937_64 rng(seed);
  const StorageAccesses accesses(trace);
  std::vector<Action> actions;
  const int offloads = static_cast<int>(rng() % 6);
  for (int k = 0; k < offloads; ++k) {
    const auto s = static_cast<StorageIndex>(rng() % static_cast<std::uint64_t>(trace.storage_count()));
    if (!accesses.accessed(s)) continue;
    const OpIndex first = accesses.first_op(s), last = accesses.last_op(s);
    const OpIndex a = first + static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(last - first + 1));
    const StorageId id = trace.storage(s).id;
    actions.push_back({a, Phase::kPost, ActionKind::kCopyD2H, id});
    actions.push_back({a, Phase::kPost, ActionKind::kReleaseDevice, id});
    if (a < last && rng() % 5 != 0) {
      const OpIndex b = a + 1 + static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(last - a));
      actions.push_back({b, Phase::kPre, ActionKind::kCopyH2D, id});
    }
  }
  const int noise = static_cast<int>(rng() % 4);
  for (int k = 0; k < noise; ++k) {
    actions.push_back(
        {static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(trace.op_count())),
         rng() % 2 == 0 ? Phase::kPre : Phase::kPost, static_cast<ActionKind>(rng() % 4),
         trace.storage(static_cast<StorageIndex>(rng() % static_cast<std::uint64_t>(trace.storage_count()))).id});
  }
  std::stable_sort(actions.begin(), actions.end(), [](const Action& x, const Action& y) {
    return std::pair(x.op, x.phase) < std::pair(y.op, y.phase);
  });
  return Schedule{"random", std::move(actions)};
}

TEST(ReplayProperty, RandomSchedulesFailExactlyWhereTheValidatorSaysSo) {
  const int n = iterations();
  int valid = 0, invalid = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t seed = 5000 + static_cast<std::uint64_t>(i);
    RandomTraceOptions options = small_trace(seed);
    options.op_count = std::min(options.op_count, 30);
    options.storage_count = std::min(options.storage_count, 10);
    const Trace trace = generate_random_trace(options);
    if (trace.storage_count() == 0) continue;
    const Schedule schedule = random_schedule(trace, seed);
    SCOPED_TRACE(fmt::format("seed {}", seed));
    const ValidationReport report = validate_schedule(trace, schedule);
    HostRuntime rt;
    Result<std::vector<StepStats>> steps = replay_twice(rt, trace, schedule);
    if (!steps) {
      const std::string& message = steps.error().message;
      ASSERT_NE(steps.error().code, ErrorCode::kInternal) << message;  // a checksum mismatch
      // A retained storage whose data the schedule dropped cannot be handed
      // back at the end; the validator does not check the end of the step.
      if (message.find("restoring held storage") == std::string::npos) {
        ASSERT_FALSE(report.valid()) << "the runtime failed a schedule the validator accepts: " << message;
      }
      ++invalid;
    } else {
      // Actions on storages already freed are skipped at runtime, so only a
      // valid report pins the runtime's counts.
      if (report.valid()) {
        for (const StepStats& stats : *steps) EXPECT_EQ(stats.faults, static_cast<std::int64_t>(report.faults.size()));
      }
      ++valid;
    }
    rt.expect_nothing_held();
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(valid, 0);
  EXPECT_GT(invalid, 0);
  RecordProperty("valid_schedules", valid);
  RecordProperty("invalid_schedules", invalid);
}

// The whole loop on random programs: a warmup with online eviction (device
// capacity = budget), planning, replays — checksummed throughout.
TEST(SessionStress, RandomProgramsRunCorrectlyThroughWarmupAndReplays) {
  const int n = std::max(1, iterations() / 4);
  for (int i = 0; i < n; ++i) {
    const std::uint64_t seed = 9000 + static_cast<std::uint64_t>(i);
    RandomTraceOptions options = small_trace(seed);
    options.zero_size_fraction = 0.0;
    const Trace trace = generate_random_trace(options);
    for (std::string_view name : planner_names()) {
      SCOPED_TRACE(fmt::format("seed {} planner {}", seed, name));
      // The budget is the trace's limit, but at least 64 KiB and an eighth
      // above the unavoidable floor (the session refuses a budget below it for
      // every planner, measured with the peak planner's model; the warmup's
      // trace lists an op's accesses in another order, which can move the floor
      // slightly). The device holds twice that, so arena fragmentation cannot
      // fail a step.
      std::int64_t budget = std::max<std::int64_t>(*trace.memory_limit_bytes(), 64 << 10);
      Result<PlanResult> probe = (*make_planner("peak"))->plan(trace, budget);
      ASSERT_TRUE(probe.has_value()) << probe.error().message;
      if (probe->floor) budget = std::max(budget, probe->floor->bytes + probe->floor->bytes / 8);
      auto backend = std::move(
          *HostBackend::create({.device_capacity_bytes = 2 * budget + (256 << 10), .device_alignment_bytes = 64}));
      SessionOptions session_options;
      session_options.budget_bytes = budget;
      session_options.planner = std::string(name);
      auto session = std::move(*Session::create(*backend, session_options));
      ChecksumProgram program(trace);
      for (int step = 0; step < 3; ++step) {
        const StorageId offset = StorageId{step + 1} << 20;
        ASSERT_TRUE(session->begin_step());
        Status ran = program.run(*session, offset);
        ASSERT_TRUE(ran.has_value()) << "step " << step << ": " << ran.error().message;
        Status ended = session->end_step();
        ASSERT_TRUE(ended.has_value()) << "step " << step << ": " << ended.error().message;
        Status retained = program.verify_retained(*session, offset);
        ASSERT_TRUE(retained.has_value()) << retained.error().message;
      }
      ASSERT_TRUE(session->abort_step());
      EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
      EXPECT_EQ(session->host_pool().stats().current_bytes, 0);
    }
  }
}

}  // namespace
}  // namespace hyperoffload
