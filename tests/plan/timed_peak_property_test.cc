// Property tests of every planner on both device models (issue 27, "the
// budget holds on the device in time"): over random traces with recomputable
// ops and random budgets,
//  - tuned for a device that holds only the budget (DeviceMemory::kBudget, the
//    default), a planner's schedule keeps the memory held *in time* — the
//    capped simulation's timed peak — within the budget whenever the budget is
//    at or above the planner's floor (peak, hybrid, recompute, optimal), and
//    whenever its op-granular peak is within the budget (greedy, which keeps
//    no such promise above the floor: the session replans with peak then);
//  - tuned for the unlimited device, the same planners keep the op-granular
//    peak within the budget (the reference system's promise), while the timed
//    peak there may run above it — and does, on some cases, which is why the
//    capped device is the default.
// Each test counts what it exercised, so a test that checked nothing fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/sim/simulator.h"

namespace hyperoffload {
namespace {

struct Case {
  RandomTraceOptions trace;
  // Where the budget lies between the lowest floor (the hybrid planner's)
  // and the unplanned peak: below 0 under the floor, above 1 over the peak.
  double budget_position = 0.0;
};

Case random_case(std::uint64_t seed, std::int32_t max_ops) {
  std::mt19937_64 rng(seed * 15485863 + 5);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  Case c;
  c.trace.seed = seed;
  c.trace.op_count = static_cast<std::int32_t>(uniform(1, max_ops));
  c.trace.storage_count = static_cast<std::int32_t>(uniform(0, 0.8 * max_ops));
  c.trace.min_size_bytes = 1;
  c.trace.max_size_bytes = static_cast<std::int64_t>(uniform(1, 1 << 20));
  c.trace.zero_size_fraction = uniform(0.0, 0.2);
  c.trace.retained_fraction = uniform(0.0, 0.3);
  c.trace.max_extra_accesses = static_cast<std::int32_t>(uniform(0, 8));
  c.trace.write_fraction = uniform(0.0, 0.5);
  c.trace.in_place_fraction = uniform(0.0, 0.3);
  c.trace.max_duration_ms = uniform(0.01, 2.0);
  // Slow links make copies outlast the ops between a release and the next
  // allocation: the case where memory held in time exceeds memory between ops.
  c.trace.bandwidth_gib_per_s = uniform(0.0005, 4.0);
  c.trace.recomputable_fraction = uniform(0.0, 1.0);
  c.trace.limit_fraction = std::nullopt;
  c.budget_position = uniform(-0.1, 1.05);
  return c;
}

// The case's budget on its trace (Case::budget_position). The floor comes from
// a hybrid plan at the unplanned peak, which costs only its models.
std::int64_t budget_for(const Case& c, const Trace& trace) {
  const std::int64_t peak = unplanned_peak(trace).bytes;
  Result<std::unique_ptr<Planner>> hybrid = make_planner("hybrid");
  Result<PlanResult> probe = (*hybrid)->plan(trace, peak);
  const std::int64_t floor = probe && probe->floor ? probe->floor->bytes : peak;
  return std::max<std::int64_t>(
      0, floor + static_cast<std::int64_t>(c.budget_position * static_cast<double>(peak - floor)));
}

struct Exercised {
  int planned_within_floor = 0;    // budget at or above the planner's floor, below the unplanned peak
  int timed_over_on_unlimited = 0; // unlimited device: op-granular within, timed above the budget
};

SimulationResult simulate_on(const Trace& trace, const Schedule& schedule, std::int64_t budget, DeviceMemory device) {
  SimulatorOptions options;
  options.budget_bytes = budget;
  options.device_memory = device;
  return simulate(trace, schedule, options);
}

// Plans one case with `name` tuned for `device` and checks the promise above.
void check(const std::string& name, const Trace& trace, std::int64_t budget, DeviceMemory device,
           Exercised& exercised, double time_limit_s = 60.0) {
  PlannerOptions options;
  options.device_memory = device;
  options.time_limit_s = time_limit_s;
  Result<std::unique_ptr<Planner>> planner = make_planner(name, options);
  ASSERT_TRUE(planner.has_value()) << planner.error().message;
  Result<PlanResult> plan = (*planner)->plan(trace, budget);
  if (!plan && name == kOptimalPlannerName && plan.error().code == ErrorCode::kInvalidArgument) {
    return;  // the MILP refuses a budget below its floor: nothing planned, nothing to hold
  }
  ASSERT_TRUE(plan.has_value()) << name << ": " << plan.error().message;
  const SimulationResult sim = simulate_on(trace, plan->schedule, budget, device);
  SCOPED_TRACE(::testing::Message() << name << (device == DeviceMemory::kBudget ? ", capped" : ", unlimited")
                                    << ", op-granular peak " << sim.peak_bytes() << ", timed peak "
                                    << sim.peak_bytes_timed);
  ASSERT_TRUE(sim.valid()) << sim.validation.problems.front();
  const std::int64_t floor = plan->floor ? plan->floor->bytes : offload_floor(trace).bytes;
  const bool keeps_op_granular = name != "greedy" ? budget >= floor : sim.peak_bytes() <= budget;
  if (!keeps_op_granular) return;
  EXPECT_LE(sim.peak_bytes(), budget);
  if (device == DeviceMemory::kBudget) {
    EXPECT_LE(sim.peak_bytes_timed, budget);
  } else if (sim.peak_bytes_timed > budget) {
    ++exercised.timed_over_on_unlimited;
  }
  if (budget < unplanned_peak(trace).bytes) ++exercised.planned_within_floor;
}

TEST(TimedPeakProperty, EveryHeuristicPlannerKeepsTheBudgetInTimeOnTheCappedDeviceAndBetweenOpsOnTheUnlimitedOne) {
  Exercised exercised;
  constexpr int kCases = 240;
  for (std::uint64_t seed = 0; seed < kCases; ++seed) {
    const Case c = random_case(seed, 100);
    const Trace trace = generate_random_trace(c.trace);
    const std::int64_t budget = budget_for(c, trace);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", " << trace.op_count() << " ops, budget " << budget);
    for (const std::string_view name : planner_names()) {
      for (const DeviceMemory device : {DeviceMemory::kBudget, DeviceMemory::kUnlimited}) {
        check(std::string(name), trace, budget, device, exercised);
      }
    }
  }
  // Of 240 cases × 4 planners × 2 devices, 688 plan between the floor and the
  // peak; and on 154 the unlimited device's timed peak exceeds the budget,
  // which is what tells the two models apart.
  EXPECT_GE(exercised.planned_within_floor, 2 * kCases);
  EXPECT_GE(exercised.timed_over_on_unlimited, 50);
  ::testing::Test::RecordProperty("planned_within_floor", exercised.planned_within_floor);
  ::testing::Test::RecordProperty("timed_over_on_unlimited", exercised.timed_over_on_unlimited);
}

TEST(TimedPeakProperty, TheOptimalPlannerKeepsTheBudgetInTimeOnTheCappedDevice) {
  // Tiny traces: the MILP solves them in well under its time limit.
  Exercised exercised;
  constexpr int kCases = 12;
  for (std::uint64_t seed = 1000; seed < 1000 + kCases; ++seed) {
    const Case c = random_case(seed, 10);
    const Trace trace = generate_random_trace(c.trace);
    const std::int64_t budget = budget_for(c, trace);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", " << trace.op_count() << " ops, budget " << budget);
    check(std::string(kOptimalPlannerName), trace, budget, DeviceMemory::kBudget, exercised, /*time_limit_s=*/5.0);
  }
  EXPECT_GT(exercised.planned_within_floor, 0);
}

}  // namespace
}  // namespace hyperoffload
