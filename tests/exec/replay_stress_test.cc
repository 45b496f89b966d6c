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
#include <optional>
#include <random>
#include <string>

#include "exec/checksum_program.h"
#include "exec/exec_fixture.h"
#include "hyperoffload/check/validator.h"
#include "hyperoffload/exec/replay_executor.h"
#include "hyperoffload/exec/session.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/planner.h"
#include "testing/stress_traces.h"

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

// Replays `schedule` on `trace` for two steps (different caller ids); returns
// the per-step stats or the first error.
Result<std::vector<StepStats>> replay_twice(HostRuntime& rt, const Trace& trace, const Schedule& schedule) {
  HO_ASSIGN_OR_RETURN(std::shared_ptr<const ReplayPlan> plan, ReplayPlan::create(trace, schedule));
  std::vector<StepStats> stats;
  for (StorageId offset : {StorageId{1} << 20, StorageId{3} << 20}) {
    ChecksumProgram program(plan->trace());
    ReplayOptions options;
    options.recompute = [&program](RecomputeCall& call) { return program.recompute(call); };
    HO_ASSIGN_OR_RETURN(std::unique_ptr<ReplayExecutor> replay, ReplayExecutor::start(rt.residency, plan, options));
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
  std::int64_t replayed = 0, offloaded = 0, faulted = 0, host_reused = 0, recomputed = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t seed = 1000 + static_cast<std::uint64_t>(i);
    const Trace trace = generate_random_trace(testing::stress_trace_options(seed));
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
        EXPECT_EQ(stats.recompute_count, report.recompute_count);
        if (stats.recompute_count == 0) {
          // Measured continuously, the peak also sees transients inside an
          // action list, so it is at least the validator's op-granular peak.
          EXPECT_GE(stats.peak_resident_bytes, report.peak_bytes);
        } else {
          // A recompute regenerates only outputs someone still uses; the
          // validator counts every output of the op re-run (the program frees
          // a storage after its last access), so the runtime holds at most
          // what the validator counts.
          EXPECT_LE(stats.peak_resident_bytes, report.peak_bytes);
        }
        // Host copies change only at actions, which both count the same way
        // (the program frees a storage after its last access, where every
        // planner has released its host copy already).
        EXPECT_EQ(stats.peak_host_bytes, report.peak_host_bytes);
        ++replayed;
        offloaded += stats.d2h_bytes > 0;
        faulted += stats.faults > 0;
        // Fewer host bytes at the peak than copied: host memory was given
        // back (release_host) or refreshed in place before later copies.
        host_reused += report.peak_host_bytes < report.d2h_bytes;
        recomputed += stats.recompute_count > 0;
      }
      if (::testing::Test::HasFailure()) return;
    }
    rt.expect_nothing_held();
  }
  // The test must exercise what it claims: offloading happened in most steps,
  // and in many of them host memory was given back before later copies.
  EXPECT_GT(offloaded, replayed / 2);
  EXPECT_GT(host_reused, replayed / 4);
  // Recomputes ran (each checksummed its inputs; later accesses checked what
  // it regenerated). At most a quarter of the steps can recompute: half the
  // traces have recomputable ops, and two of the planners recompute; 4.5% of
  // 6400 steps did at 800 iterations.
  EXPECT_GT(recomputed, replayed / 50);
  RecordProperty("steps_with_recomputes", static_cast<int>(recomputed));
  RecordProperty("replayed_steps", static_cast<int>(replayed));
  RecordProperty("steps_with_offloads", static_cast<int>(offloaded));
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

// What the runtime does with a schedule while ChecksumProgram runs the trace,
// in the validator's terms. The program frees every non-retained storage right
// after its last op (after that op's post actions), which drops its device and
// host copies, and the replay skips actions on a freed storage; the validator
// keeps a storage until the schedule releases it. So: drop the actions on such
// a storage after its last op, and release both copies at the end of its last
// op's post actions.
Schedule as_the_program_runs_it(const Trace& trace, const Schedule& schedule) {
  const StorageAccesses accesses(trace);
  std::vector<std::vector<StorageId>> freed_after(static_cast<std::size_t>(trace.op_count()));
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    if (trace.storage(s).retained() || !accesses.accessed(s)) continue;
    freed_after[static_cast<std::size_t>(accesses.last_op(s))].push_back(trace.storage(s).id);
  }
  Schedule result{schedule.planner, {}};
  auto free_up_to = [&, next = OpIndex{0}](OpIndex op) mutable {  // frees after ops [next, op)
    for (; next < op; ++next) {
      for (StorageId id : freed_after[static_cast<std::size_t>(next)]) {
        result.actions.push_back({next, Phase::kPost, ActionKind::kReleaseDevice, id});
        result.actions.push_back({next, Phase::kPost, ActionKind::kReleaseHost, id});
      }
    }
  };
  for (const Action& action : schedule.actions) {
    // The frees after op k follow every action of op k.
    free_up_to(action.op);
    const StorageIndex s = *trace.find_storage(action.storage);
    if (!trace.storage(s).retained() && accesses.accessed(s) && action.op > accesses.last_op(s)) continue;
    result.actions.push_back(action);
  }
  free_up_to(trace.op_count());
  return result;
}

// `trace` with one more op that reads every retained storage: the end of the
// step, where the replay hands each storage the caller still holds back on
// the device — paging it in (an end restore) or failing when its data is gone.
Trace with_the_end_of_the_step(const Trace& trace) {
  TraceBuilder builder;
  builder.set_d2h_bandwidth_gib_per_s(trace.d2h_bandwidth_gib_per_s());
  builder.set_h2d_bandwidth_gib_per_s(trace.h2d_bandwidth_gib_per_s());
  for (const StorageInfo& info : trace.storages()) (void)builder.add_storage(info.id, info.size_bytes, info.retention);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    (void)builder.add_op(trace.op_name(op), trace.op_duration_ms(op));
    for (const Access& access : trace.accesses(op)) builder.add_access(trace.storage(access.storage).id, access.kind);
  }
  (void)builder.add_op("end of step");
  for (const StorageInfo& info : trace.storages()) {
    if (info.retained()) builder.add_access(info.id, AccessKind::kRead);
  }
  return value_or_throw(std::move(builder).build());
}

TEST(ReplayProperty, RandomSchedulesFailExactlyWhereTheValidatorSaysSo) {
  // Both directions: the runtime fails exactly when the validator finds a
  // problem in the schedule as the program runs it, to the end of the step;
  // and where it succeeds, it moves what the validator counts.
  const int n = iterations();
  int valid = 0, invalid = 0, restored = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t seed = 5000 + static_cast<std::uint64_t>(i);
    RandomTraceOptions options = testing::stress_trace_options(seed);
    options.op_count = std::min(options.op_count, 30);
    options.storage_count = std::min(options.storage_count, 10);
    const Trace trace = generate_random_trace(options);
    if (trace.storage_count() == 0) continue;
    const Schedule schedule = random_schedule(trace, seed);
    SCOPED_TRACE(fmt::format("seed {}", seed));
    const ValidationReport report =
        validate_schedule(with_the_end_of_the_step(trace), as_the_program_runs_it(trace, schedule));
    HostRuntime rt;
    Result<std::vector<StepStats>> steps = replay_twice(rt, trace, schedule);
    if (!steps) {
      const std::string& message = steps.error().message;
      ASSERT_NE(steps.error().code, ErrorCode::kInternal) << message;  // a checksum mismatch
      ASSERT_FALSE(report.valid()) << "the runtime failed a schedule the validator accepts: " << message;
      ++invalid;
    } else {
      ASSERT_TRUE(report.valid()) << "the runtime ran a schedule the validator rejects: " << report.problems.front();
      // Faults at the extra op are the end restores.
      std::int64_t end_faults = 0;
      for (const Fault& fault : report.faults) end_faults += fault.op == trace.op_count() ? 1 : 0;
      for (const StepStats& stats : *steps) {
        EXPECT_EQ(stats.faults, static_cast<std::int64_t>(report.faults.size()) - end_faults);
        EXPECT_EQ(stats.end_restores, end_faults);
        EXPECT_EQ(stats.d2h_count, report.d2h_count);
        EXPECT_EQ(stats.d2h_bytes, report.d2h_bytes);
        EXPECT_EQ(stats.h2d_count, report.h2d_count);
        EXPECT_EQ(stats.h2d_bytes, report.h2d_bytes);
        EXPECT_EQ(stats.peak_host_bytes, report.peak_host_bytes);
        EXPECT_GE(stats.peak_resident_bytes, report.peak_bytes);
      }
      restored += end_faults > 0 ? 1 : 0;
      ++valid;
    }
    rt.expect_nothing_held();
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(valid, n / 10);
  EXPECT_GT(invalid, n / 10);
  RecordProperty("valid_schedules", valid);
  RecordProperty("invalid_schedules", invalid);
  RecordProperty("valid_with_end_restores", restored);
}

// The whole loop on random programs: a warmup with online eviction (device
// capacity = budget), planning, replays — checksummed throughout. Budgets lie
// between the floor and the unplanned peak, so the warmup must evict and the
// replays must offload.
// Recompute-only cannot offload: a budget drawn down to the offload floor can
// be below what recomputing alone reaches on `trace`.
bool recompute_only_reaches(const Trace& trace, std::int64_t budget) {
  Result<PlanResult> alone = (*make_planner("recompute"))->plan(trace, budget);
  return alone && !(alone->floor && alone->floor->bytes > budget);
}

// Runs three steps of `program` through `session` (a warmup, then replays)
// and checks that each kept every byte, held at most `budget` in time and made
// no allocation over it; `check(step, stats)` checks the rest of each step.
template <class Check>
void run_three_steps_within_budget(Session& session, ChecksumProgram& program, std::int64_t budget, Check&& check) {
  for (int step = 0; step < 3; ++step) {
    const StorageId offset = StorageId{step + 1} << 20;
    ASSERT_TRUE(session.begin_step());
    Status ran = program.run(session, offset);
    ASSERT_TRUE(ran.has_value()) << "step " << step << ": " << ran.error().message;
    Status ended = session.end_step();
    ASSERT_TRUE(ended.has_value()) << "step " << step << ": " << ended.error().message;
    Status retained = program.verify_retained(session, offset);
    ASSERT_TRUE(retained.has_value()) << retained.error().message;
    const StepStats& stats = session.last_step_stats();
    EXPECT_LE(stats.peak_held_bytes, budget) << "step " << step;
    EXPECT_EQ(stats.over_budget_allocations, 0) << "step " << step;
    check(step, stats);
  }
}

TEST(SessionStress, RandomProgramsRunCorrectlyThroughWarmupAndReplays) {
  const int n = std::max(1, iterations() / 4);
  int cases = 0, below_peak = 0, recomputed_steps = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t seed = 9000 + static_cast<std::uint64_t>(i);
    RandomTraceOptions options = testing::stress_trace_options(seed);
    options.zero_size_fraction = 0.0;
    const Trace trace = generate_random_trace(options);
    const std::int64_t unplanned = unplanned_peak(trace).bytes;
    // The budget is the trace's limit (30-80% of the unplanned peak), but at
    // least the unavoidable floor: the session refuses a budget below it. The
    // floor is measured on the trace a warmup records (without a budget), as
    // the session will: it lists an op's accesses in its own order, which can
    // move the floor slightly from the generated trace's.
    std::int64_t budget = *trace.memory_limit_bytes();
    std::optional<Trace> recorded;
    {
      auto backend = std::move(*HostBackend::create({.device_capacity_bytes = 2 * unplanned + (256 << 10)}));
      ChecksumProgram program(trace);
      SessionOptions probe_options;
      probe_options.recompute = [&program](RecomputeCall& call) { return program.recompute(call); };
      auto session = std::move(*Session::create(*backend, probe_options));
      ASSERT_TRUE(session->begin_step());
      ASSERT_TRUE(program.run(*session, 1 << 20));
      ASSERT_TRUE(session->end_step());
      ASSERT_NE(session->trace(), nullptr);
      Result<PlanResult> probe = (*make_planner("peak"))->plan(*session->trace(), unplanned);
      ASSERT_TRUE(probe.has_value() && probe->floor.has_value());
      budget = std::max(budget, probe->floor->bytes);
      recorded = *session->trace();
      ASSERT_TRUE(session->abort_step());
    }
    ++cases;
    below_peak += budget < unplanned ? 1 : 0;
    for (std::string_view name : planner_names()) {
      if (name == "recompute" && !recompute_only_reaches(*recorded, budget)) continue;
      SCOPED_TRACE(fmt::format("seed {} planner {}, budget {} of {}", seed, name, budget, unplanned));
      // The device holds twice the budget, so arena fragmentation cannot fail a step.
      auto backend = std::move(
          *HostBackend::create({.device_capacity_bytes = 2 * budget + (256 << 10), .device_alignment_bytes = 64}));
      SessionOptions session_options;
      session_options.budget_bytes = budget;
      session_options.planner = std::string(name);
      ChecksumProgram program(trace);
      session_options.recompute = [&program](RecomputeCall& call) { return program.recompute(call); };
      auto session = std::move(*Session::create(*backend, session_options));
      run_three_steps_within_budget(*session, program, budget, [&](int step, const StepStats& stats) {
        recomputed_steps += stats.recompute_count > 0 ? 1 : 0;
        if (budget < unplanned) {
          // Below the unplanned peak the warmup must evict online, and the
          // replays, planned within the budget, must offload.
          if (step == 0) {
            EXPECT_EQ(stats.kind, StepKind::kWarmup);
            EXPECT_GT(stats.evictions, 0);
          } else {
            EXPECT_EQ(stats.kind, StepKind::kReplay);
            if (name == "recompute") {  // it cannot offload: it must recompute
              EXPECT_GT(stats.recompute_count, 0) << "step " << step;
            } else if (name == "hybrid") {  // either lever, or both
              EXPECT_GT(stats.d2h_count + stats.recompute_count, 0) << "step " << step;
            } else {
              EXPECT_GT(stats.d2h_count, 0) << "step " << step;
              EXPECT_GT(stats.h2d_count, 0) << "step " << step;
            }
          }
        }
      });
      if (::testing::Test::HasFatalFailure()) return;
      ASSERT_TRUE(session->abort_step());
      EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
      EXPECT_EQ(session->host_pool().stats().current_bytes, 0);
      if (::testing::Test::HasFailure()) return;
    }
  }
  // Most budgets are below the unplanned peak; the others are on traces
  // where nothing can be evicted (floor = peak).
  EXPECT_GE(below_peak, cases * 2 / 3);
  // The hybrid and recompute-only plans re-ran ops in replays, checksummed.
  EXPECT_GT(recomputed_steps, 0);
  RecordProperty("replays_with_recomputes", recomputed_steps);
  RecordProperty("cases", cases);
  RecordProperty("cases_below_the_unplanned_peak", below_peak);
}

// The whole loop on a slow emulated link (runtime/host_backend.h, Note
// [Emulated link]): 0.01-0.1 GiB/s, 100-1000 times slower than this machine's
// memcpy, so nearly every copy to host is still reading its buffer when the
// next allocations come. Every step of every planner must hold at most the
// budget in time (Note [Held bytes]) — before held bytes were kept, the device
// held a released buffer and its successor together — with every byte intact.
TEST(SessionStress, OnASlowLinkEveryStepHoldsAtMostTheBudgetInTime) {
  const int n = std::max(3, iterations() / 20);
  const double links_gib_per_s[] = {0.01, 0.03, 0.1};
  int steps_that_waited = 0, replays = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t seed = 12000 + static_cast<std::uint64_t>(i);
    RandomTraceOptions options = testing::stress_trace_options(seed);
    options.zero_size_fraction = 0.0;
    options.op_count = 12 + static_cast<std::int32_t>(seed % 12);  // a short step: the link is slow
    options.storage_count = 6 + static_cast<std::int32_t>(seed % 10);
    options.min_size_bytes = 1 << 10;
    const Trace trace = generate_random_trace(options);
    Result<PlanResult> probe = (*make_planner("peak"))->plan(trace, trace.memory_limit_bytes());
    ASSERT_TRUE(probe.has_value() && probe->floor.has_value());
    // At or above the floor (with headroom for the order in which a warmup
    // records an op's accesses), below the unplanned peak where possible.
    const std::int64_t unplanned = unplanned_peak(trace).bytes;
    const std::int64_t budget =
        std::min(unplanned, std::max(*trace.memory_limit_bytes(), probe->floor->bytes + probe->floor->bytes / 8));
    const double link = links_gib_per_s[static_cast<std::size_t>(i) % std::size(links_gib_per_s)];
    for (std::string_view name : planner_names()) {
      if (name == "recompute" && !recompute_only_reaches(trace, budget)) continue;
      SCOPED_TRACE(fmt::format("seed {} planner {}, budget {} of {}, link {} GiB/s", seed, name, budget, unplanned,
                               link));
      auto backend = std::move(*HostBackend::create({.device_capacity_bytes = 2 * budget + (256 << 10),
                                                     .device_alignment_bytes = 64,
                                                     .copy_engines = i % 2 == 0 ? CopyEngines::kTwo : CopyEngines::kOne,
                                                     .emulated_copy_bandwidth_gib_per_s = link}));
      SessionOptions session_options;
      session_options.budget_bytes = budget;
      session_options.planner = std::string(name);
      session_options.copy_bandwidth_gib_per_s = link;  // plan for the link (no calibration copy)
      ChecksumProgram program(trace);
      session_options.recompute = [&program](RecomputeCall& call) { return program.recompute(call); };
      auto session = std::move(*Session::create(*backend, session_options));
      run_three_steps_within_budget(*session, program, budget, [&](int, const StepStats& stats) {
        steps_that_waited += stats.memory_wait_ms > 0.0 ? 1 : 0;
        replays += stats.kind == StepKind::kReplay ? 1 : 0;
      });
      if (::testing::Test::HasFatalFailure()) return;
      ASSERT_TRUE(session->abort_step());
      EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
      if (::testing::Test::HasFailure()) return;
    }
  }
  // The link is slow enough that steps did wait for copies to free memory.
  EXPECT_GT(steps_that_waited, 0);
  EXPECT_GT(replays, 0);
  RecordProperty("steps_that_waited_for_memory", steps_that_waited);
}

}  // namespace
}  // namespace hyperoffload
