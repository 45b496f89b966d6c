// The planners' stall estimate: it plays schedules with the simulator's clocks
// and residency rules (model/), so on every valid fault-free schedule it must
// give the simulator's stall exactly, recomputes included.
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/plan/common/stall_estimate.h"
#include "hyperoffload/plan/greedy_planner.h"
#include "hyperoffload/sim/simulator.h"
#include "testing/recomputable.h"
#include "testing/trace_dsl.h"

namespace hyperoffload::internal {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr double kOneMiBPerMs = 1000.0 / 1024.0;  // GiB/s: N MiB copy in N ms

TEST(StallEstimate, TimesARecomputeOnTheComputeStreamAfterItsInputsPrefetch) {
  // The simulator's SimulatorRecompute.WaitsForAnInFlightCopyToDeviceOfAnInput:
  // storage 1 (4 MiB) offloaded after f (D2H 4-8) and prefetched before h (H2D
  // 8-12); the recompute of f, issued at 5, waits for it: stall 7 ms.
  //   c: [a 0-1][f 1-4][g 4-5][stall 5-12][recompute f 12-15][h 15-17]
  const Trace trace = ::hyperoffload::testing::TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 2 * kMiB)
                          .op("a", "W1", 1)
                          .op("f", "R1 W2", 3, Recomputable::kYes)
                          .op("g", "R2", 1)
                          .op("h", "R2 R1", 2)
                          .build();
  const std::vector<Action> actions = ::hyperoffload::testing::actions(
      "post 1 copy_d2h 1; post 1 release_device 1; post 2 release_device 2; pre 3 copy_h2d 1; pre 3 recompute 1");
  EXPECT_EQ(estimate_stall_ms(trace, actions), 7.0);
}

TEST(StallEstimate, WaitsForMemoryBeforeACappedRecompute) {
  // The simulator's SimulatorRecompute.AllocatesItsOutputsWhenIssuedAndWaitsForMemoryWhenCapped:
  // on a 6 MiB device the recompute's 2 MiB fit only when storage 3's release
  // completes after its D2H (7): stall 2 ms; unlimited, none.
  const Trace trace = ::hyperoffload::testing::TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 2 * kMiB)
                          .storage(3, 2 * kMiB)
                          .op("a", "W1", 1)
                          .op("f", "R1 W2", 3, Recomputable::kYes)
                          .op("g", "R1 W3", 1)
                          .op("h", "R2 R1", 2)
                          .build();
  const std::vector<Action> actions = ::hyperoffload::testing::actions(
      "post 1 release_device 2; post 2 copy_d2h 3; post 2 release_device 3; pre 3 recompute 1");
  EXPECT_EQ(estimate_stall_ms(trace, actions, 6 * kMiB), 2.0);
  EXPECT_EQ(estimate_stall_ms(trace, actions), 0.0);
}

TEST(StallEstimateProperty, MatchesTheSimulatorOnValidSchedulesWithRecomputes) {
  // Greedy plans of random v2 traces (whose no-op copies the estimate must
  // skip as the simulator does), with recomputes of random earlier
  // recomputable ops added one at a time and kept when the schedule stays
  // valid and fault-free (a recompute that regenerates what an end-of-life
  // release dropped, or re-runs an op whose outputs are still resident): the
  // estimate must give the simulator's stall on unlimited and capped devices.
  int compared = 0;
  int with_recompute = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    RandomTraceOptions options;
    options.seed = seed * 7717;
    options.op_count = 2 + static_cast<std::int32_t>(seed % 120);
    options.storage_count = 1 + static_cast<std::int32_t>((seed * 31) % 80);
    options.bandwidth_gib_per_s = seed % 2 == 0 ? 1.0 : 16.0;
    const Trace trace = ::hyperoffload::testing::with_recomputable_ops(generate_random_trace(options));
    std::vector<OpIndex> recomputable;
    for (OpIndex op = 0; op < trace.op_count(); ++op) {
      if (trace.op_recomputable(op)) recomputable.push_back(op);
    }
    if (recomputable.empty()) continue;
    Result<PlanResult> plan = GreedyPlanner().plan(trace, trace.memory_limit_bytes());
    ASSERT_TRUE(plan);
    Schedule schedule = plan->schedule;
    std::mt19937_64 rng(seed);
    for (OpIndex op = 0; op < trace.op_count(); ++op) {
      for (const Phase phase : {Phase::kPre, Phase::kPost}) {
        if (rng() % 3 != 0) continue;
        const OpIndex source = recomputable[rng() % recomputable.size()];
        if (!recompute_source_precedes(source, op, phase)) continue;
        // After the slot's planned actions.
        const Action recompute{op, phase, ActionKind::kRecompute, 0, source};
        const auto at = std::upper_bound(
            schedule.actions.begin(), schedule.actions.end(), recompute,
            [](const Action& a, const Action& b) { return execution_slot(a) < execution_slot(b); });
        const auto inserted = schedule.actions.insert(at, recompute);
        const ValidationReport report = validate_schedule(trace, schedule);
        if (!report.valid() || !report.faults.empty()) schedule.actions.erase(inserted);
      }
    }
    for (const DeviceMemory device : {DeviceMemory::kUnlimited, DeviceMemory::kBudget}) {
      SimulatorOptions sim_options;
      sim_options.device_memory = device;
      const SimulationResult sim = simulate(trace, schedule, sim_options);
      ASSERT_TRUE(sim.valid()) << "seed " << seed;
      const std::optional<std::int64_t> cap =
          device == DeviceMemory::kBudget ? trace.memory_limit_bytes() : std::nullopt;
      const double estimate = estimate_stall_ms(trace, schedule.actions, cap);
      ASSERT_NEAR(estimate, sim.stall_ms, 1e-9 * std::max(1.0, sim.stall_ms)) << "seed " << seed;
      ++compared;
      with_recompute += sim.recompute_count > 0 ? 1 : 0;
    }
  }
  EXPECT_GT(compared, 200);
  EXPECT_GT(with_recompute, 150);  // the recomputes really were timed
}

}  // namespace
}  // namespace hyperoffload::internal
