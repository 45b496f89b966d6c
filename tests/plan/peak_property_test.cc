// Property tests of the peak planner over random traces and budgets: every
// schedule is valid with zero faults, its op-granular peak (as the validator
// measures it) matches the planner's own model, stays within the budget when
// the budget is at or above the floor and equals the floor otherwise, and the
// floor never exceeds the unplanned peak. Budgets are drawn relative to each
// trace's floor and unplanned peak (BudgetRange), and every test counts what
// it exercised: most cases must offload between the floor and the peak.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/common/stall_estimate.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/peak/peak_run.h"
#include "hyperoffload/plan/peak_planner.h"
#include "hyperoffload/sim/simulator.h"
#include "plan/random_plan_case.h"

namespace hyperoffload {
namespace {

using testing::budget_for;
using testing::Case;
using testing::random_case;

// What one case exercised, so that each test can prove it reached the
// behaviour its name promises.
struct Exercised {
  int cases = 0;
  int offloaded = 0;    // budget in [floor, peak): copies both ways, peak within the budget and below the unplanned one
  int below_floor = 0;  // budget below the floor: the planner stopped at it
  int untouched = 0;    // budget at or above the unplanned peak (or no ops): nothing needs to move

  void add(const Exercised& other) {
    cases += other.cases;
    offloaded += other.offloaded;
    below_floor += other.below_floor;
    untouched += other.untouched;
  }
};

Exercised check_case(std::uint64_t seed, const PeakPlannerOptions& options) {
  Exercised exercised;
  exercised.cases = 1;
  const Case c = random_case(seed);
  const Trace trace = generate_random_trace(c.trace);
  const PeakBytes unplanned = unplanned_peak(trace);
  const std::int64_t budget = budget_for(c, trace);
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ", " << trace.op_count() << " ops, " << trace.storage_count()
                                    << " storages, budget " << budget << " of " << unplanned.bytes);

  Result<PlanResult> plan = PeakPlanner(options).plan(trace, budget);
  EXPECT_TRUE(plan.has_value()) << plan.error().message;
  if (!plan) return exercised;
  const ValidationReport report = validate_schedule(trace, plan->schedule);
  EXPECT_TRUE(report.valid()) << report.problems.front();
  EXPECT_TRUE(report.faults.empty());
  if (trace.op_count() == 0) {
    ++exercised.untouched;
    return exercised;
  }

  EXPECT_TRUE(plan->floor.has_value());
  if (!plan->floor) return exercised;
  const UnavoidableFloor floor = *plan->floor;
  EXPECT_LE(floor.bytes, unplanned.bytes);
  EXPECT_EQ(plan->initial_peak_bytes, unplanned.bytes);
  EXPECT_EQ(report.peak_bytes, plan->planned_peak_bytes);
  if (budget >= floor.bytes) {
    EXPECT_LE(report.peak_bytes, budget);
    EXPECT_TRUE(plan->notes.empty() || plan->notes.front().find("floor") == std::string::npos);
    if (budget < unplanned.bytes) {
      // Without recompute the only way under the unplanned peak is to copy
      // something out and back.
      EXPECT_GT(report.d2h_count, 0);
      EXPECT_GT(report.h2d_count, 0);
      ++exercised.offloaded;
    } else {
      EXPECT_EQ(report.d2h_count, 0);
      ++exercised.untouched;
    }
  } else {
    EXPECT_EQ(report.peak_bytes, floor.bytes);
    EXPECT_FALSE(plan->notes.empty());
    if (!plan->notes.empty()) {
      EXPECT_NE(plan->notes.front().find("below the unavoidable floor"), std::string::npos);
    }
    ++exercised.below_floor;
  }
  return exercised;
}

// Most cases must offload within the budget, and both edges must be reached.
// (Of 1500 seeds 886 offload, 145 are below the floor; the rest have a budget
// at or above the peak, or a trace where nothing can be evicted: floor = peak.)
void expect_mix(const Exercised& exercised, double offloaded_share) {
  EXPECT_GE(exercised.offloaded, static_cast<int>(offloaded_share * exercised.cases));
  EXPECT_GT(exercised.below_floor, 0);
  EXPECT_GT(exercised.untouched, 0);
  ::testing::Test::RecordProperty("cases", exercised.cases);
  ::testing::Test::RecordProperty("offloaded_within_budget", exercised.offloaded);
  ::testing::Test::RecordProperty("below_floor", exercised.below_floor);
}

TEST(PeakPlannerProperty, RandomTracesGiveValidFaultFreeSchedulesWithinBudgetDownToTheFloor) {
  Exercised exercised;
  for (std::uint64_t seed = 1; seed <= 1500; ++seed) {
    exercised.add(check_case(seed, {}));
    if (::testing::Test::HasFailure()) return;
  }
  expect_mix(exercised, 0.55);
}

TEST(PeakPlannerProperty, HoldsForEveryWeightSetting) {
  // Weights change which candidates are chosen, never the guarantees.
  const PeakScoreWeights settings[] = {{0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0},
                                       {0, 0, 1, 0}, {0, 0, 0, 5}, {3, 0.5, 2, 0.25}};
  for (const PeakScoreWeights& weights : settings) {
    Exercised exercised;
    for (std::uint64_t seed = 1000; seed < 1060; ++seed) {
      exercised.add(check_case(seed, PeakPlannerOptions{weights}));
      if (::testing::Test::HasFailure()) return;
    }
    expect_mix(exercised, 0.5);
  }
}

TEST(PeakPlannerProperty, HoldsWhenTunedForADeviceThatHoldsOnlyTheBudget) {
  // DeviceMemory::kBudget reorders the copies to host and picks the prefetch
  // order by the capped estimate, never at the cost of the guarantees.
  PeakPlannerOptions options;
  options.device_memory = DeviceMemory::kBudget;
  Exercised exercised;
  for (std::uint64_t seed = 1; seed <= 600; ++seed) {
    exercised.add(check_case(seed, options));
    if (::testing::Test::HasFailure()) return;
  }
  expect_mix(exercised, 0.55);
}

TEST(PeakPlannerProperty, LargerTracesStayWithinBudget) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    RandomTraceOptions options;
    options.op_count = 3000;
    options.storage_count = 1500;
    options.seed = seed;
    options.limit_fraction = 0.2 + 0.12 * static_cast<double>(seed);
    const Trace trace = generate_random_trace(options);
    Result<PlanResult> plan = PeakPlanner().plan(trace, trace.memory_limit_bytes());
    ASSERT_TRUE(plan.has_value());
    const ValidationReport report = validate_schedule(trace, plan->schedule);
    ASSERT_TRUE(report.valid()) << report.problems.front();
    EXPECT_TRUE(report.faults.empty());
    EXPECT_LE(report.peak_bytes, std::max(*trace.memory_limit_bytes(), plan->floor->bytes));
    // Every limit is below the unplanned peak, and on traces this size the
    // floor is too: the plan must move data and lower the peak.
    EXPECT_GT(report.d2h_count, 0);
    EXPECT_LT(report.peak_bytes, unplanned_peak(trace).bytes);
  }
}

TEST(PeakPlannerProperty, PlacingOnOneThreadGivesTheSameScheduleAsOnTwo) {
  // The hybrid planner's offload-only plan places its two prefetch orders one
  // after the other (PlacementThreads::kOne); the schedule, its stall and its
  // peak must be the two-thread run's exactly, on either device. Counts the
  // cases where both orders were placed (something was selected), and the
  // times the run asked how many threads to place on: once per run that
  // placed anything (PeakRunControl::threads), never with nothing selected.
  int placed = 0;
  int asked = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const Case c = random_case(seed);
    const Trace trace = generate_random_trace(c.trace);
    if (trace.op_count() == 0) continue;
    const std::int64_t budget = budget_for(c, trace);
    const StorageAccesses accesses(trace);
    const internal::PeakModel model = internal::build_peak_model(trace, accesses);
    PeakPlannerOptions options;
    options.device_memory = seed % 2 == 0 ? DeviceMemory::kBudget : DeviceMemory::kUnlimited;
    const internal::PeakRun two = internal::run_peak_planner(trace, model, options, budget);
    const int asked_before = asked;
    const internal::PeakRun one = internal::run_peak_planner(trace, model, options, budget,
                                                             {.timer = {}, .stop = {}, .threads = [&asked] {
                                                                ++asked;
                                                                return internal::PlacementThreads::kOne;
                                                              }});
    ASSERT_LE(asked - asked_before, 1) << "seed " << seed;
    ASSERT_EQ(one.result.schedule.actions, two.result.schedule.actions) << "seed " << seed;
    ASSERT_EQ(one.stall_ms, two.stall_ms) << "seed " << seed;
    ASSERT_EQ(one.result.planned_peak_bytes, two.result.planned_peak_bytes) << "seed " << seed;
    placed += two.result.planned_peak_bytes < unplanned_peak(trace).bytes ? 1 : 0;
  }
  EXPECT_GT(placed, 100);
  EXPECT_GE(asked, placed);
}

TEST(PeakPlannerProperty, PassesBesideTheRunGiveTheSameScheduleAsInLine) {
  // On a large trace the run builds the selection's covering index, the
  // boundary order and the copy ops' ready times on threads of their own
  // (PeakPlannerOptions::beside_min_candidates, plan/common/beside.h); here
  // every run does (0) or none does (the largest value), on traces of every
  // size: the schedules, peaks and notes must be equal. Under the
  // ThreadSanitizer build (make test-tsan) this is also the race check of
  // those threads. Counts the cases that selected something.
  int selected = 0;
  for (std::uint64_t seed = 1; seed <= 120; ++seed) {
    const Case c = random_case(seed);
    const Trace trace = generate_random_trace(c.trace);
    if (trace.op_count() == 0) continue;
    const std::int64_t budget = budget_for(c, trace);
    PeakPlannerOptions beside;
    beside.device_memory = seed % 2 == 0 ? DeviceMemory::kBudget : DeviceMemory::kUnlimited;
    beside.windows = seed % 3 == 0 ? CopyBackWindows::kAfterAFirstPass : CopyBackWindows::kNone;
    beside.beside_min_candidates = 0;
    PeakPlannerOptions in_line = beside;
    in_line.beside_min_candidates = std::numeric_limits<std::size_t>::max();
    const Result<PlanResult> a = PeakPlanner(beside).plan(trace, budget);
    const Result<PlanResult> b = PeakPlanner(in_line).plan(trace, budget);
    ASSERT_TRUE(a.has_value() && b.has_value()) << "seed " << seed;
    ASSERT_EQ(a->schedule.actions, b->schedule.actions) << "seed " << seed;
    ASSERT_EQ(a->planned_peak_bytes, b->planned_peak_bytes) << "seed " << seed;
    ASSERT_EQ(a->notes, b->notes) << "seed " << seed;
    selected += a->planned_peak_bytes < unplanned_peak(trace).bytes ? 1 : 0;
  }
  EXPECT_GT(selected, 60);
}

TEST(PeakPlannerProperty, StallEstimateMatchesTheSimulatorOnPeakSchedules) {
  // The planner picks its prefetch order by this estimate, so it must agree
  // with the simulator (two copy engines) on the schedules it produces.
  int stalled = 0;
  for (std::uint64_t seed = 1; seed <= 150; ++seed) {
    const Case c = random_case(seed);
    const Trace trace = generate_random_trace(c.trace);
    Result<PlanResult> plan = PeakPlanner().plan(trace, budget_for(c, trace));
    ASSERT_TRUE(plan.has_value());
    const SimulationResult sim = simulate(trace, plan->schedule);
    const double estimate = internal::estimate_stall_ms(trace, plan->schedule.actions);
    ASSERT_NEAR(estimate, sim.stall_ms, 1e-6 * std::max(1.0, sim.stall_ms)) << "seed " << seed;
    stalled += sim.stall_ms > 0.0 ? 1 : 0;
  }
  EXPECT_GT(stalled, 50);  // the estimate is compared where there is stall to estimate
}

TEST(PeakPlannerProperty, CappedStallEstimateMatchesTheSimulatorWithADeviceMemory) {
  // Tuned for a device that holds only the budget, the planner picks its
  // prefetch order by the capped estimate: it must agree with the simulator's
  // DeviceMemory::kBudget, memory waits included.
  PeakPlannerOptions options;
  options.device_memory = DeviceMemory::kBudget;
  int memory_waits = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const Case c = random_case(seed);
    const Trace trace = generate_random_trace(c.trace);
    const std::int64_t budget = budget_for(c, trace);
    Result<PlanResult> plan = PeakPlanner(options).plan(trace, budget);
    ASSERT_TRUE(plan.has_value());
    SimulatorOptions sim_options;
    sim_options.budget_bytes = budget;
    sim_options.device_memory = DeviceMemory::kBudget;
    const SimulationResult sim = simulate(trace, plan->schedule, sim_options);
    const double estimate =
        internal::estimate_stall_ms(trace, plan->schedule.actions, budget);
    ASSERT_NEAR(estimate, sim.stall_ms, 1e-6 * std::max(1.0, sim.stall_ms)) << "seed " << seed;
    memory_waits += sim.memory_stall_ms > 0.0 ? 1 : 0;
  }
  EXPECT_GT(memory_waits, 20);  // the cap really is exercised
}

}  // namespace
}  // namespace hyperoffload
