// Property test of the host budget over random traces with recomputable ops,
// random device budgets at or above the floor and host budgets from none to
// the host the unconstrained plan needs: every planner's schedule is valid and
// keeps the host budget; and the budget policy keeps both budgets whenever the
// host budget is at or above its host floor, and otherwise says
// kBelowHostFloor with a plan that keeps the host budget (or kBelowFloor,
// for a planner whose own floor is above the budget: recompute-only).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/plan/budget_policy.h"
#include "random_plan_case.h"

namespace hyperoffload {
namespace {

TEST(HostBudgetProperty, EveryPlannerKeepsBothBudgetsAboveBothFloors) {
  constexpr std::uint64_t kSeeds = 60;
  constexpr double kHostShares[] = {0.0, 0.1, 0.5, 1.0};
  int below_host_floor = 0, within = 0;
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    testing::Case c = testing::random_case(seed);
    c.range = testing::BudgetRange::kFloorToPeak;
    c.trace.recomputable_fraction = 0.5;
    c.trace.op_count = std::min(c.trace.op_count, 60);
    c.trace.storage_count = std::min(c.trace.storage_count, 40);
    const Trace generated = generate_random_trace(c.trace);
    const Trace* trace = &generated;
    const std::int64_t budget = testing::budget_for(c, *trace);
    // The host the peak planner's plan holds without a host budget.
    Result<BudgetedPlan> free_host = plan_within_budget(*trace, budget, "peak", {});
    ASSERT_TRUE(free_host) << free_host.error().message;
    for (const double share : kHostShares) {
      PlannerOptions options;
      options.host_budget_bytes =
          static_cast<std::int64_t>(share * static_cast<double>(free_host->validation.peak_host_bytes));
      const std::int64_t host = *options.host_budget_bytes;
      for (const std::string_view name : planner_names()) {
        SCOPED_TRACE(::testing::Message() << "seed " << seed << ", " << name << ", budget " << budget << ", host "
                                          << host);
        Result<std::unique_ptr<Planner>> planner = make_planner(name, options);
        ASSERT_TRUE(planner);
        Result<PlanResult> plan = (*planner)->plan(*trace, budget);
        ASSERT_TRUE(plan) << plan.error().message;
        const ValidationReport report = validate_schedule(*trace, plan->schedule);
        ASSERT_TRUE(report.valid()) << report.problems.front();
        EXPECT_EQ(report.faults.size(), 0u);
        EXPECT_LE(report.peak_host_bytes, host);

        Result<BudgetedPlan> planned = plan_within_budget(*trace, budget, name, options);
        ASSERT_TRUE(planned) << planned.error().message;
        EXPECT_LE(planned->validation.peak_host_bytes, host);
        if (planned->outcome == BudgetOutcome::kWithinBudget) {
          EXPECT_LE(planned->validation.peak_bytes, budget);
          ++within;
        } else if (planned->outcome == BudgetOutcome::kBelowFloor) {
          // The planner's own floor (recompute-only's is above the offload floor).
          ASSERT_TRUE(planned->floor);
          EXPECT_GT(planned->floor->bytes, budget);
        } else {
          ASSERT_EQ(planned->outcome, BudgetOutcome::kBelowHostFloor) << to_string(planned->outcome);
          ASSERT_TRUE(planned->host_floor_bytes);
          EXPECT_LT(host, *planned->host_floor_bytes);
          ++below_host_floor;
        }
      }
    }
  }
  // Both kinds of case occur.
  EXPECT_GT(within, 0);
  EXPECT_GT(below_host_floor, 0);
}

}  // namespace
}  // namespace hyperoffload
