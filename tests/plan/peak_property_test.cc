// Property tests of the peak planner over random traces and budgets: every
// schedule is valid with zero faults, its op-granular peak (as the validator
// measures it) matches the planner's own model, stays within the budget when
// the budget is at or above the floor and equals the floor otherwise, and the
// floor never exceeds the unplanned peak.
#include <gtest/gtest.h>

#include <random>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/internal/stall_estimate.h"
#include "hyperoffload/plan/peak_planner.h"
#include "hyperoffload/sim/simulator.h"

namespace hyperoffload {
namespace {

struct Case {
  RandomTraceOptions trace;
  double budget_fraction;
};

Case random_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + 17);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  Case c;
  c.trace.seed = seed;
  c.trace.op_count = static_cast<std::int32_t>(uniform(1, 160));
  c.trace.storage_count = static_cast<std::int32_t>(uniform(0, 120));
  c.trace.min_size_bytes = 1;
  c.trace.max_size_bytes = static_cast<std::int64_t>(uniform(1, 1 << 20));
  c.trace.zero_size_fraction = uniform(0.0, 0.2);
  c.trace.retained_fraction = uniform(0.0, 0.3);
  c.trace.max_extra_accesses = static_cast<std::int32_t>(uniform(0, 10));
  c.trace.write_fraction = uniform(0.0, 0.5);
  c.trace.in_place_fraction = uniform(0.0, 0.3);
  c.trace.max_duration_ms = seed % 5 == 0 ? 0.0 : uniform(0.0, 2.0);
  c.trace.bandwidth_gib_per_s = uniform(0.001, 32.0);
  c.trace.limit_fraction = std::nullopt;
  c.budget_fraction = uniform(0.0, 1.1);
  return c;
}

void check_case(std::uint64_t seed, const PeakPlannerOptions& options) {
  const Case c = random_case(seed);
  const Trace trace = generate_random_trace(c.trace);
  const PeakBytes unplanned = unplanned_peak(trace);
  const auto budget = static_cast<std::int64_t>(c.budget_fraction * static_cast<double>(unplanned.bytes));
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ", " << trace.op_count() << " ops, " << trace.storage_count()
                                    << " storages, budget " << budget << " of " << unplanned.bytes);

  Result<PlanResult> plan = PeakPlanner(options).plan(trace, budget);
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  const ValidationReport report = validate_schedule(trace, plan->schedule);
  ASSERT_TRUE(report.valid()) << report.problems.front();
  EXPECT_TRUE(report.faults.empty());
  if (trace.op_count() == 0) return;

  ASSERT_TRUE(plan->floor.has_value());
  const UnavoidableFloor floor = *plan->floor;
  EXPECT_LE(floor.bytes, unplanned.bytes);
  EXPECT_EQ(plan->initial_peak_bytes, unplanned.bytes);
  EXPECT_EQ(report.peak_bytes, plan->planned_peak_bytes);
  if (budget >= floor.bytes) {
    EXPECT_LE(report.peak_bytes, budget);
    EXPECT_TRUE(plan->notes.empty() || plan->notes.front().find("floor") == std::string::npos);
  } else {
    EXPECT_EQ(report.peak_bytes, floor.bytes);
    ASSERT_FALSE(plan->notes.empty());
    EXPECT_NE(plan->notes.front().find("below the unavoidable floor"), std::string::npos);
  }
}

TEST(PeakPlannerProperty, RandomTracesGiveValidFaultFreeSchedulesWithinBudgetDownToTheFloor) {
  for (std::uint64_t seed = 1; seed <= 1500; ++seed) {
    check_case(seed, {});
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(PeakPlannerProperty, HoldsForEveryWeightSetting) {
  // Weights change which candidates are chosen, never the guarantees.
  const PeakScoreWeights settings[] = {{0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0},
                                       {0, 0, 1, 0}, {0, 0, 0, 5}, {3, 0.5, 2, 0.25}};
  for (const PeakScoreWeights& weights : settings) {
    for (std::uint64_t seed = 1000; seed < 1060; ++seed) {
      check_case(seed, PeakPlannerOptions{weights});
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(PeakPlannerProperty, HoldsWhenTunedForADeviceThatHoldsOnlyTheBudget) {
  // DeviceMemory::kBudget reorders the copies to host and picks the prefetch
  // order by the capped estimate, never at the cost of the guarantees.
  PeakPlannerOptions options;
  options.device_memory = DeviceMemory::kBudget;
  for (std::uint64_t seed = 1; seed <= 600; ++seed) {
    check_case(seed, options);
    if (::testing::Test::HasFatalFailure()) return;
  }
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
  }
}

TEST(PeakPlannerProperty, StallEstimateMatchesTheSimulatorOnPeakSchedules) {
  // The planner picks its prefetch order by this estimate, so it must agree
  // with the simulator (two copy engines) on the schedules it produces.
  for (std::uint64_t seed = 1; seed <= 150; ++seed) {
    const Case c = random_case(seed);
    const Trace trace = generate_random_trace(c.trace);
    const auto budget = static_cast<std::int64_t>(c.budget_fraction * static_cast<double>(unplanned_peak(trace).bytes));
    Result<PlanResult> plan = PeakPlanner().plan(trace, budget);
    ASSERT_TRUE(plan.has_value());
    const SimulationResult sim = simulate(trace, plan->schedule);
    const double estimate = internal::estimate_stall_ms(trace, StorageAccesses(trace), plan->schedule.actions);
    ASSERT_NEAR(estimate, sim.stall_ms, 1e-6 * std::max(1.0, sim.stall_ms)) << "seed " << seed;
  }
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
    const auto budget = static_cast<std::int64_t>(c.budget_fraction * static_cast<double>(unplanned_peak(trace).bytes));
    Result<PlanResult> plan = PeakPlanner(options).plan(trace, budget);
    ASSERT_TRUE(plan.has_value());
    SimulatorOptions sim_options;
    sim_options.budget_bytes = budget;
    sim_options.device_memory = DeviceMemory::kBudget;
    const SimulationResult sim = simulate(trace, plan->schedule, sim_options);
    const double estimate =
        internal::estimate_stall_ms(trace, StorageAccesses(trace), plan->schedule.actions, budget);
    ASSERT_NEAR(estimate, sim.stall_ms, 1e-6 * std::max(1.0, sim.stall_ms)) << "seed " << seed;
    memory_waits += sim.memory_stall_ms > 0.0 ? 1 : 0;
  }
  EXPECT_GT(memory_waits, 20);  // the cap really is exercised
}

}  // namespace
}  // namespace hyperoffload
