// The lower bound on stall (plan/common/stall_bound.h): exact values on a hand-built
// trace where the bound is reached, and, over random traces, never above the
// stall of a feasible plan from either planner under any simulator setting.
#include "hyperoffload/plan/common/stall_bound.h"

#include <gtest/gtest.h>

#include <array>
#include <random>

#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/plan/peak_planner.h"
#include "testing/feasible_simulation.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::hyperoffload::testing::simulate_if_feasible;
using ::hyperoffload::testing::TraceDsl;

constexpr std::int64_t kMiB = 1 << 20;

// Copies at 1000 MiB/s, so N MiB take N ms; every op runs 1 ms. s1 and s2 are
// 4 MiB: s1 W@0 R@3, s2 W@1 R@2.
//   op:        a(0)  b(1)  c(2)  d(3)
//   resident:   4     8     8     4  MiB       budget 4 MiB: E = 4 at ops 1, 2
// s1's gap (0, 3) is the only one covering ops 1 and 2, so s1 is off there.
Trace two_storages() {
  return TraceDsl()
      .storage(1, 4 * kMiB)
      .storage(2, 4 * kMiB)
      .bandwidth(1000.0 / 1024.0)
      .op("a", "W1", 1)
      .op("b", "W2", 1)
      .op("c", "R2", 1)
      .op("d", "R1", 1)
      .build();
}

// The simulated stall of the peak planner's plan, tuned for `cap`.
double peak_stall_ms(const Trace& trace, std::int64_t budget, DeviceMemory cap) {
  PeakPlannerOptions options;
  options.device_memory = cap == DeviceMemory::kBudget ? DeviceMemory::kBudget : DeviceMemory::kUnlimited;
  const Result<PlanResult> plan = PeakPlanner(options).plan(trace, budget);
  EXPECT_TRUE(plan.has_value());
  if (!plan) return -1.0;
  SimulatorOptions sim_options;
  sim_options.device_memory = cap;
  sim_options.budget_bytes = budget;
  return simulate(trace, plan->schedule, sim_options).stall_ms;
}

TEST(StallBound, IsTheStallOfTheBestPlanWhenCopiesCannotHide) {
  // Unlimited memory: s1 can be copied to host from 1 ms (a ends) and is done
  // at 5; it may only come back once op c has ended (3 ms, it is off during
  // c), and after its copy to host: 5-9 ms, so d starts at 9 instead of 3.
  //   compute  [a][b][c]......[d]           stall 6 ms
  //   D2H         [ s1  ]
  //   H2D               [ s1  ]
  const Trace trace = two_storages();
  StallBoundOptions unlimited;
  unlimited.device_memory = DeviceMemory::kUnlimited;
  EXPECT_DOUBLE_EQ(*stall_lower_bound_ms(trace, 4 * kMiB, unlimited), 6.0);
  EXPECT_DOUBLE_EQ(peak_stall_ms(trace, 4 * kMiB, DeviceMemory::kUnlimited), 6.0);  // the peak planner reaches it
  // With one shared engine the copy back queues behind the copy to host, which
  // it waits for anyway.
  StallBoundOptions one_engine = unlimited;
  one_engine.copy_engines = CopyEngines::kOne;
  EXPECT_DOUBLE_EQ(*stall_lower_bound_ms(trace, 4 * kMiB, one_engine), 6.0);
}

TEST(StallBound, CountsTheWaitForReleasesOnADeviceThatHoldsOnlyTheBudget) {
  // Capped: b allocates s2 and must wait until s1's release completes with its
  // copy to host at 5 ms (4 ms of stall); b 5-6, c 6-7; s1 comes back after c,
  // 7-11, and d starts at 11: 8 ms in all.
  //   compute  [a]....[b][c]....[d]
  //   D2H         [ s1  ]
  //   H2D                   [ s1  ]
  StallBoundOptions capped;
  capped.device_memory = DeviceMemory::kBudget;
  EXPECT_DOUBLE_EQ(*stall_lower_bound_ms(two_storages(), 4 * kMiB, capped), 8.0);
  EXPECT_DOUBLE_EQ(peak_stall_ms(two_storages(), 4 * kMiB, DeviceMemory::kBudget), 8.0);
}

TEST(StallBound, IsZeroWithinThePeakAndAbsentBelowWhatFits) {
  const Trace trace = two_storages();
  EXPECT_DOUBLE_EQ(*stall_lower_bound_ms(trace, 8 * kMiB), 0.0);
  // At 3 MiB op 1 would need 5 MiB off the device, and only s1 (4 MiB) can be.
  EXPECT_FALSE(stall_lower_bound_ms(trace, 3 * kMiB).has_value());
}

TEST(StallBound, IsNeverAboveTheStallOfAFeasiblePlan) {
  std::mt19937_64 rng(5);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  int feasible = 0, positive = 0;
  for (std::uint64_t seed = 1; seed <= 700; ++seed) {
    RandomTraceOptions options;
    options.seed = seed;
    options.op_count = static_cast<std::int32_t>(uniform(2, 120));
    options.storage_count = static_cast<std::int32_t>(uniform(1, 80));
    options.min_size_bytes = 1;
    options.max_size_bytes = static_cast<std::int64_t>(uniform(1, 1 << 22));
    options.retained_fraction = uniform(0.0, 0.1);
    options.write_fraction = uniform(0.0, 0.5);
    options.in_place_fraction = uniform(0.0, 0.3);
    options.max_duration_ms = uniform(0.0, 2.0);
    options.bandwidth_gib_per_s = uniform(0.01, 16.0);
    options.limit_fraction = std::nullopt;
    const Trace trace = generate_random_trace(options);
    const auto budget =
        static_cast<std::int64_t>(uniform(0.45, 1.0) * static_cast<double>(unplanned_peak(trace).bytes));
    for (const CopyEngines engines : {CopyEngines::kTwo, CopyEngines::kOne}) {
      for (const DeviceMemory cap : {DeviceMemory::kUnlimited, DeviceMemory::kBudget}) {
        const std::optional<double> bound = stall_lower_bound_ms(trace, budget, {engines, cap});
        PeakPlannerOptions peak_options;
        peak_options.device_memory = cap == DeviceMemory::kBudget ? DeviceMemory::kBudget : DeviceMemory::kUnlimited;
        const PeakPlanner peak(peak_options);
        const std::unique_ptr<Planner> greedy = value_or_throw(make_planner("greedy"));
        const std::array<const Planner*, 2> planners = {&peak, greedy.get()};
        for (const Planner* planner : planners) {
          const Result<PlanResult> plan = planner->plan(trace, budget);
          ASSERT_TRUE(plan.has_value());
          const std::optional<SimulationResult> sim = simulate_if_feasible(trace, plan->schedule, budget, engines, cap);
          if (!sim) continue;
          ++feasible;
          ASSERT_TRUE(bound.has_value()) << "seed " << seed << ": a feasible plan exists";
          positive += *bound > 0.0 ? 1 : 0;
          ASSERT_LE(*bound, sim->stall_ms + 1e-9 * std::max(1.0, sim->stall_ms))
              << "seed " << seed << ", " << planner->name() << ", " << static_cast<int>(engines) << " engine(s), "
              << (cap == DeviceMemory::kBudget ? "capped" : "unlimited");
        }
      }
    }
  }
  EXPECT_GT(feasible, 1000);
  EXPECT_GT(positive, 400);  // the bound is not trivially 0
}

}  // namespace
}  // namespace hyperoffload
