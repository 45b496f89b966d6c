// Property tests of the hybrid and recompute-only planners over random v2
// traces with recomputable ops — random access patterns, and small GPT-style
// steps with random shapes and hardware — and random budgets, on both device
// models:
// every schedule is valid with zero faults, its op-granular peak (as the
// validator measures it, over ops and recomputes) matches the planner's own
// model and stays within the budget whenever the budget is at or above the
// planner's floor; the hybrid floor is never above the peak planner's; and the
// hybrid plan's simulated step is never longer than the offload-only or the
// recompute-only plan's when those fit the budget; and the quick floor below
// which the hybrid planner stops its offload-only plan bounds the peak plan's
// step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/gen/transformer_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/hybrid/offload_step_bound.h"
#include "hyperoffload/plan/hybrid_planner.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/sim/simulator.h"

namespace hyperoffload {
namespace {

struct Case {
  RandomTraceOptions trace;
  double budget_fraction;
  DeviceMemory device;
};

Case random_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed * 104729 + 3);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  Case c;
  c.trace.seed = seed;
  c.trace.op_count = static_cast<std::int32_t>(uniform(1, 120));
  c.trace.storage_count = static_cast<std::int32_t>(uniform(0, 90));
  c.trace.min_size_bytes = 1;
  c.trace.max_size_bytes = static_cast<std::int64_t>(uniform(1, 1 << 20));
  c.trace.zero_size_fraction = uniform(0.0, 0.2);
  c.trace.retained_fraction = uniform(0.0, 0.3);
  c.trace.max_extra_accesses = static_cast<std::int32_t>(uniform(0, 8));
  c.trace.write_fraction = uniform(0.0, 0.5);
  c.trace.in_place_fraction = uniform(0.0, 0.3);
  c.trace.max_duration_ms = seed % 5 == 0 ? 0.0 : uniform(0.0, 2.0);
  c.trace.bandwidth_gib_per_s = uniform(0.001, 32.0);
  c.trace.recomputable_fraction = uniform(0.2, 1.0);
  c.trace.limit_fraction = std::nullopt;
  c.budget_fraction = uniform(0.0, 1.1);
  c.device = seed % 2 == 0 ? DeviceMemory::kBudget : DeviceMemory::kUnlimited;
  return c;
}

struct Checked {
  PlanResult plan;
  SimulationResult simulation;
};

// Plans with `planner` and checks the guarantees every planner makes.
Checked plan_and_check(std::string_view planner, const Trace& trace, std::int64_t budget, DeviceMemory device) {
  SCOPED_TRACE(std::string(planner));
  PlannerOptions options;
  options.device_memory = device;
  const std::unique_ptr<Planner> made = std::move(make_planner(planner, options).value());
  Result<PlanResult> plan = made->plan(trace, budget);
  EXPECT_TRUE(plan.has_value()) << plan.error().message;
  if (!plan) return {};
  SimulatorOptions sim_options;
  sim_options.budget_bytes = budget;
  sim_options.device_memory = device;
  SimulationResult simulation = simulate(trace, plan->schedule, sim_options);
  const ValidationReport& report = simulation.validation;
  EXPECT_TRUE(report.valid()) << (report.problems.empty() ? "" : report.problems.front());
  EXPECT_TRUE(report.faults.empty());
  if (trace.op_count() > 0) {
    EXPECT_TRUE(plan->floor.has_value());
    EXPECT_EQ(report.peak_bytes, plan->planned_peak_bytes);
    if (plan->floor && budget >= plan->floor->bytes) {
      EXPECT_LE(report.peak_bytes, budget);
    }
  }
  return {std::move(*plan), std::move(simulation)};
}

// The compute stream's end: compute + stall + recompute (what the planners
// minimise; the makespan can also end on a trailing copy).
double step_ms(const SimulationResult& result) { return result.compute_ms + result.stall_ms + result.recompute_ms; }

// What the cases exercised, so that the test cannot pass vacuously.
struct Coverage {
  int hybrid_recomputes = 0;       // hybrid plans with at least one recompute
  int hybrid_recomputes_and_copies = 0;
  int recompute_only_fits = 0;     // recompute-only plans within the budget
  int hybrid_beats_both = 0;       // strictly quicker than offload-only and recompute-only where they fit
  int hybrid_fits_where_peak_does_not = 0;
  int offload_floor_above_compute = 0;  // the floor says more than "the compute"
};

// A small GPT-style step with random shapes, kernels, options and hardware:
// structured traces where most ops are recomputable and recompute competes
// with offloading in earnest.
Trace random_transformer(std::uint64_t seed) {
  std::mt19937_64 rng(seed * 7727 + 11);
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  TransformerOptions o;
  o.layers = static_cast<std::int32_t>(pick(1, 4));
  o.heads = pick(1, 4);
  o.hidden = o.heads * pick(2, 16);
  o.seq = pick(2, 64);
  o.batch = pick(1, 4);
  o.vocab = pick(8, 300);
  o.attention = pick(0, 1) == 0 ? AttentionKernel::kMaterialized : AttentionKernel::kFlash;
  o.dropout = pick(0, 3) == 0 ? Dropout::kOn : Dropout::kOff;
  o.recompute = pick(0, 5) == 0 ? Recompute::kFull : Recompute::kNone;
  o.optimizer = pick(0, 5) == 0 ? OptimizerStep::kAdamW : OptimizerStep::kNone;
  o.embeddings = pick(0, 3) == 0 ? EmbeddingTying::kUntied : EmbeddingTying::kTied;
  // Tiny models run in microseconds; slow links and slow compute keep copies
  // and recomputes in the same range.
  o.tflops = uniform(1e-6, 1e-3);
  o.memory_bandwidth_gb_per_s = uniform(0.01, 10.0);
  o.d2h_bandwidth_gib_per_s = uniform(1e-4, 1e-2);
  o.h2d_bandwidth_gib_per_s = o.d2h_bandwidth_gib_per_s * uniform(0.5, 2.0);
  return generate_transformer_trace(o).value();
}

void check_case(std::uint64_t seed, Coverage& coverage) {
  const Case c = random_case(seed);
  const Trace trace = seed % 3 == 0 ? random_transformer(seed) : generate_random_trace(c.trace);
  const PeakBytes unplanned = unplanned_peak(trace);
  const auto budget = static_cast<std::int64_t>(c.budget_fraction * static_cast<double>(unplanned.bytes));
  SCOPED_TRACE(::testing::Message() << "seed " << seed << (seed % 3 == 0 ? " (transformer)" : "") << ", "
                                    << trace.op_count() << " ops, " << trace.storage_count() << " storages, budget "
                                    << budget << " of " << unplanned.bytes
                                    << (c.device == DeviceMemory::kBudget ? ", capped" : ", unlimited"));
  const Checked peak = plan_and_check("peak", trace, budget, c.device);
  const Checked recompute = plan_and_check("recompute", trace, budget, c.device);
  const Checked hybrid = plan_and_check("hybrid", trace, budget, c.device);
  if (::testing::Test::HasFailure() || trace.op_count() == 0) return;
  EXPECT_LE(hybrid.plan.floor->bytes, peak.plan.floor->bytes);
  if (hybrid.simulation.recompute_count > 0) {
    ++coverage.hybrid_recomputes;
    if (hybrid.simulation.d2h_count > 0) ++coverage.hybrid_recomputes_and_copies;
  }
  if (recompute.plan.planned_peak_bytes <= budget) ++coverage.recompute_only_fits;
  {
    bool quicker = hybrid.plan.planned_peak_bytes <= budget;
    bool any_fits = false;
    for (const Checked* other : {&peak, &recompute}) {
      if (other->plan.planned_peak_bytes > budget) continue;
      any_fits = true;
      quicker = quicker && step_ms(hybrid.simulation) < step_ms(other->simulation) - 1e-6;
    }
    if (quicker && any_fits) ++coverage.hybrid_beats_both;
    if (hybrid.plan.planned_peak_bytes <= budget && peak.plan.planned_peak_bytes > budget) {
      ++coverage.hybrid_fits_where_peak_does_not;
    }
  }
  // Never worse than either lever alone, where that one fits the budget.
  constexpr double kTolerance = 1e-6;
  if (peak.plan.planned_peak_bytes <= budget) {
    const StorageAccesses accesses(trace);
    const double bound_ms = internal::offload_only_step_bound_ms(
        trace, accesses, internal::build_peak_model(trace, accesses).resident_bytes, budget, c.device);
    EXPECT_LE(bound_ms, step_ms(peak.simulation) * (1 + kTolerance) + kTolerance);
    if (bound_ms > trace.total_compute_ms() * (1 + kTolerance) + kTolerance) ++coverage.offload_floor_above_compute;
  }
  const bool hybrid_fits = hybrid.plan.planned_peak_bytes <= budget;
  for (const Checked* other : {&peak, &recompute}) {
    if (other->plan.planned_peak_bytes > budget) continue;
    EXPECT_TRUE(hybrid_fits);
    EXPECT_LE(step_ms(hybrid.simulation), step_ms(other->simulation) * (1 + kTolerance) + kTolerance)
        << other->plan.schedule.planner;
  }
}

TEST(HybridPlannerProperty, RandomTracesGiveValidSchedulesWithinBudgetDownToTheFloorAndNeverSlower) {
  Coverage coverage;
  for (std::uint64_t seed = 1; seed <= 2000; ++seed) {
    check_case(seed, coverage);
    if (::testing::Test::HasFailure()) return;
  }
  std::printf("hybrid plans with recomputes %d (with copies too %d), recompute-only within budget %d, "
              "hybrid quicker than both %d, hybrid fits where peak does not %d, offload-only floor above the "
              "compute %d\n",
              coverage.hybrid_recomputes, coverage.hybrid_recomputes_and_copies, coverage.recompute_only_fits,
              coverage.hybrid_beats_both, coverage.hybrid_fits_where_peak_does_not,
              coverage.offload_floor_above_compute);
  EXPECT_GT(coverage.hybrid_recomputes, 400);
  EXPECT_GT(coverage.hybrid_recomputes_and_copies, 300);
  EXPECT_GT(coverage.recompute_only_fits, 250);
  EXPECT_GT(coverage.hybrid_beats_both, 80);
  EXPECT_GT(coverage.hybrid_fits_where_peak_does_not, 0);
  EXPECT_GT(coverage.offload_floor_above_compute, 100);
}

// Note [Plans ruled out by their re-runs] (hybrid/decision_search.cc) and
// Note [The recompute-only plan after the decision sets] (hybrid_planner.cc):
// the plans the hybrid planner leaves unmade could not have been chosen, so
// it gives the same schedule, peak and floor as when it makes every plan.
TEST(HybridPlannerProperty, PlansRuledOutByTheirReRunsChangeNothing) {
  int ruled_out_cases = 0, recompute_only_ruled_out = 0;
  for (std::uint64_t seed = 1; seed <= 600; ++seed) {
    const Case c = random_case(seed);
    const Trace trace = seed % 2 == 0 ? random_transformer(seed) : generate_random_trace(c.trace);
    const auto budget =
        static_cast<std::int64_t>(c.budget_fraction * static_cast<double>(unplanned_peak(trace).bytes));
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", budget " << budget);
    HybridPlannerOptions options;
    options.peak.device_memory = c.device;
    const Result<PlanResult> skipping = HybridPlanner(options).plan(trace, budget);
    options.cannot_win = PlansThatCannotWin::kMakeAll;
    const Result<PlanResult> making_all = HybridPlanner(options).plan(trace, budget);
    ASSERT_TRUE(skipping.has_value() && making_all.has_value());
    EXPECT_EQ(skipping->schedule.actions, making_all->schedule.actions);
    EXPECT_EQ(skipping->planned_peak_bytes, making_all->planned_peak_bytes);
    ASSERT_EQ(skipping->floor.has_value(), making_all->floor.has_value());
    if (skipping->floor) {
      EXPECT_EQ(skipping->floor->bytes, making_all->floor->bytes);
      EXPECT_EQ(skipping->floor->op, making_all->floor->op);
    }
    if (::testing::Test::HasFailure()) return;
    const bool ruled_out = std::ranges::any_of(skipping->notes, [](const std::string& note) {
      return note.find("ruled out by their re-runs alone") != std::string::npos;
    });
    ruled_out_cases += ruled_out ? 1 : 0;
    recompute_only_ruled_out += std::ranges::any_of(skipping->notes, [](const std::string& note) {
      return note.find("recompute-only not made") != std::string::npos;
    });
  }
  std::printf("cases with plans ruled out by their re-runs: %d of 600, the recompute-only plan: %d\n",
              ruled_out_cases, recompute_only_ruled_out);
  EXPECT_GT(ruled_out_cases, 50);
  EXPECT_GT(recompute_only_ruled_out, 50);
}

TEST(HybridPlannerProperty, LargerTracesStayWithinBudget) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    RandomTraceOptions options;
    options.op_count = 3000;
    options.storage_count = 1500;
    options.seed = seed;
    options.recomputable_fraction = 0.7;
    options.limit_fraction = 0.15 + 0.2 * static_cast<double>(seed);
    const Trace trace = generate_random_trace(options);
    for (const DeviceMemory device : {DeviceMemory::kUnlimited, DeviceMemory::kBudget}) {
      plan_and_check("hybrid", trace, *trace.memory_limit_bytes(), device);
      plan_and_check("recompute", trace, *trace.memory_limit_bytes(), device);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace hyperoffload
