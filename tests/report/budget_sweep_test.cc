// The budget sweep: its ladder, the violations it flags (on hand-made curves),
// a sweep of a hand-built trace whose results are derived below, and its
// table, JSON and plot.
#include "hyperoffload/report/budget_sweep.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "hyperoffload/plan/budget.h"
#include "hyperoffload/report/sweep_plot.h"
#include "hyperoffload/report/sweep_table.h"
#include "report/retained_trace.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::hyperoffload::testing::TraceDsl;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BudgetLadder, StartsAtTheFloorAndStepsThroughMultiplesOfTheStepAboveIt) {
  // Peak 1000, floor 233: 5% steps are 50 bytes; 250 is the first above 233.
  EXPECT_THAT(budget_ladder(233, 1000, 5.0),
              ElementsAre(233, 250, 300, 350, 400, 450, 500, 550, 600, 650, 700, 750, 800, 850, 900, 950, 1000));
  // A floor on a multiple is not repeated; a step that does not divide 100
  // ends at the peak itself (30, 60, 90, then 100).
  EXPECT_THAT(budget_ladder(300, 1000, 30.0), ElementsAre(300, 600, 900, 1000));
  // Percentages round down to bytes: 5% of 30 is 1.5 -> 1; 10% is 3.
  EXPECT_THAT(budget_ladder(2, 30, 5.0).front(), 2);
  EXPECT_THAT(budget_ladder(2, 30, 5.0)[1], 3);
}

TEST(BudgetLadder, IsThePeakAloneWhenTheFloorIsAtOrAboveIt) {
  EXPECT_THAT(budget_ladder(1000, 1000, 5.0), ElementsAre(1000));
  EXPECT_THAT(budget_ladder(1200, 1000, 5.0), ElementsAre(1000));
  EXPECT_THAT(budget_ladder(0, 0, 5.0), ElementsAre(0));
}

// A hand-made sweep: four budgets (100, 200, 300, 400 bytes) and one planner
// whose rows are given; compute 100 ms so that overhead % = stall ms.
Comparison curve(std::vector<ComparisonRow> rows) {
  Comparison comparison;
  comparison.compute_ms = 100.0;
  comparison.unplanned_peak_bytes = 400;
  comparison.planner_count = 1;
  for (std::size_t b = 0; b < rows.size(); ++b) {
    comparison.budgets_bytes.push_back(static_cast<std::int64_t>(100 * (b + 1)));
    rows[b].planner.assign(1, 'p');  // not = "p": GCC 12 warns falsely (-Wrestrict, bug 105651)
    rows[b].budget_bytes = comparison.budgets_bytes.back();
  }
  comparison.rows = std::move(rows);
  return comparison;
}

ComparisonRow feasible(std::int64_t timed_peak_bytes, double overhead_percent) {
  ComparisonRow row;
  row.valid = true;
  row.op_peak_bytes = timed_peak_bytes;
  row.timed_peak_bytes = timed_peak_bytes;
  row.overhead_percent = overhead_percent;
  return row;
}

ComparisonRow infeasible() {
  ComparisonRow row;
  row.valid = true;
  row.op_peak_bytes = 1000;  // above every budget
  row.timed_peak_bytes = 1000;
  return row;
}

TEST(FindSweepViolations, FindsNoneOnAMonotoneCurveOrBelowAFloor) {
  // Infeasible at 100 (below its floor), then peaks 150, 150, 390 and
  // overheads 9, 9, 0: nothing breaks.
  const Comparison c = curve({infeasible(), feasible(150, 9.0), feasible(150, 9.0), feasible(390, 0.0)});
  EXPECT_TRUE(find_sweep_violations(c, 1e-9).empty());
}

TEST(FindSweepViolations, ComparesEachPointWithTheExtremeOverEverySmallerBudget) {
  // Overheads 5, 9, 7, 6: 9 and 7 and 6 are all above the 5 at budget 100
  // (index 0), though 7 and 6 are below their neighbours. Timed peaks 100,
  // 190, 150, 400: 150 is below the 190 at index 1.
  const Comparison c =
      curve({feasible(100, 5.0), feasible(190, 9.0), feasible(150, 7.0), feasible(400, 6.0)});
  const std::vector<SweepViolation> v = find_sweep_violations(c, 1e-9);
  ASSERT_EQ(v.size(), 4U);
  EXPECT_EQ(v[0].property, SweepProperty::kOverheadIncreases);
  EXPECT_EQ(v[0].budget, 1U);
  EXPECT_EQ(v[0].reference_budget, 0U);
  EXPECT_DOUBLE_EQ(v[0].value, 9.0);
  EXPECT_DOUBLE_EQ(v[0].reference_value, 5.0);
  EXPECT_EQ(v[1].property, SweepProperty::kTimedPeakDecreases);
  EXPECT_EQ(v[1].budget, 2U);
  EXPECT_EQ(v[1].reference_budget, 1U);
  EXPECT_DOUBLE_EQ(v[1].value, 150.0);
  EXPECT_DOUBLE_EQ(v[1].reference_value, 190.0);
  EXPECT_EQ(v[2].property, SweepProperty::kOverheadIncreases);
  EXPECT_EQ(v[2].budget, 2U);
  EXPECT_EQ(v[2].reference_budget, 0U);
  EXPECT_EQ(v[3].property, SweepProperty::kOverheadIncreases);
  EXPECT_EQ(v[3].budget, 3U);
  EXPECT_EQ(v[3].reference_budget, 0U);
  EXPECT_EQ(v[3].planner_name, "p");
}

TEST(FindSweepViolations, FlagsATimedPeakAboveTheBudgetAndLostFeasibility) {
  // Budget 200 with a timed peak of 201 (op-granular 200: feasible); then
  // infeasible at 300 after being feasible at 100.
  ComparisonRow over = feasible(201, 0.0);
  over.op_peak_bytes = 200;
  const Comparison c = curve({feasible(100, 0.0), over, infeasible(), feasible(400, 0.0)});
  const std::vector<SweepViolation> v = find_sweep_violations(c, 1e-9);
  ASSERT_EQ(v.size(), 2U);
  EXPECT_EQ(v[0].property, SweepProperty::kTimedPeakAboveBudget);
  EXPECT_EQ(v[0].budget, 1U);
  EXPECT_EQ(v[0].reference_budget, 1U);
  EXPECT_DOUBLE_EQ(v[0].value, 201.0);
  EXPECT_DOUBLE_EQ(v[0].reference_value, 200.0);
  EXPECT_EQ(v[1].property, SweepProperty::kFeasibilityLost);
  EXPECT_EQ(v[1].budget, 2U);
  EXPECT_EQ(v[1].reference_budget, 0U);
}

TEST(FindSweepViolations, ToleratesARelativeDifferenceOfTheStepUpToTheTolerance) {
  // Reference overhead 10%: the step is 110% of compute, so with a tolerance
  // of 1e-9 an overhead up to 10 + 1.1e-7 passes and 10 + 1.2e-7 does not.
  EXPECT_TRUE(find_sweep_violations(curve({feasible(100, 10.0), feasible(200, 10.0 + 1.0e-7)}), 1e-9).empty());
  EXPECT_EQ(find_sweep_violations(curve({feasible(100, 10.0), feasible(200, 10.0 + 1.2e-7)}), 1e-9).size(), 1U);
  EXPECT_EQ(find_sweep_violations(curve({feasible(100, 10.0), feasible(200, 10.0 + 1.0e-7)}), 0.0).size(), 1U);
}

// 100 bytes per ms each way; every op runs 1 ms. s1 (100, retained) W@0 R@1;
// s2 100 W@2 R@4; s3 100 W@3.
//   op:        0    1    2    3    4
//   resident: 100  100  200  300  200    unplanned peak 300 at op 3
// The floor is 200 (only s2 can leave, over op 3), so the ladder is 200, then
// 5% steps of 15 bytes above it: 210, 225, ..., 285, 300.
// Below 300 the peak and hybrid planners (nothing is recomputable) evict s2
// over op 3. On a device that holds only the budget (any budget in [200, 300)):
//   s2's copy to host runs 3-4 ms after c; d allocates s3 (100 + 100 + 100 >
//   budget) only once s2's release has completed, at 4 ms: d runs 4-5. The
//   prefetch of s2 before e needs 100 more with s1 and s3 resident: it waits
//   for s3's release after d (5 ms), copies 5-6, e runs 6-7. Stall 2 ms (1 ms
//   of it waiting for memory) on 5 ms of compute: 40%; timed peak 200.
// At 300 nothing moves: 0%, timed peak 300. Greedy counts s1 only to op 1,
// plans nothing and peaks at 300: infeasible below 300, so nothing breaks.
// The recompute planner has nothing to recompute: its floor is 300.
using testing::retained_trace;

TEST(BudgetSweep, SweepsFromTheFloorToThePeakOnTheCappedDevice) {
  const Result<BudgetSweep> sweep = run_budget_sweep(retained_trace(), BudgetSweepOptions{});
  ASSERT_TRUE(sweep.has_value()) << sweep.error().message;
  EXPECT_EQ(sweep->floor_bytes, 200);
  EXPECT_EQ(sweep->comparison.device_memory, DeviceMemory::kBudget);
  EXPECT_THAT(sweep->comparison.budgets_bytes, ElementsAre(200, 210, 225, 240, 255, 270, 285, 300));
  ASSERT_EQ(sweep->comparison.planner_count, 4U);
  for (std::size_t b = 0; b + 1 < sweep->comparison.budgets_bytes.size(); ++b) {
    for (const std::size_t p : {1U, 2U}) {  // peak, hybrid
      const ComparisonRow& row = sweep->row(b, p);
      EXPECT_TRUE(row.feasible()) << row.planner << " at " << row.budget_bytes;
      EXPECT_NEAR(row.overhead_percent, 40.0, 1e-9) << row.planner << " at " << row.budget_bytes;
      EXPECT_NEAR(row.memory_stall_ms, 1.0, 1e-9) << row.planner << " at " << row.budget_bytes;
      EXPECT_EQ(row.timed_peak_bytes, 200) << row.planner << " at " << row.budget_bytes;
    }
    EXPECT_FALSE(sweep->row(b, 0).feasible());  // greedy
    EXPECT_FALSE(sweep->row(b, 3).feasible());  // recompute
  }
  for (std::size_t p = 0; p < 4; ++p) {
    EXPECT_TRUE(sweep->row(7, p).feasible());
    EXPECT_EQ(sweep->row(7, p).timed_peak_bytes, 300);
    EXPECT_DOUBLE_EQ(sweep->row(7, p).overhead_percent, 0.0);
  }
  EXPECT_TRUE(sweep->violations.empty());
}

TEST(BudgetSweep, RejectsAStepOutsideItsRangeAndANegativeTolerance) {
  BudgetSweepOptions options;
  options.step_percent = 0.0;
  EXPECT_FALSE(run_budget_sweep(retained_trace(), options).has_value());
  options.step_percent = 100.5;
  EXPECT_FALSE(run_budget_sweep(retained_trace(), options).has_value());
  options.step_percent = 5.0;
  options.overhead_relative_tolerance = -1.0;
  const Result<BudgetSweep> sweep = run_budget_sweep(retained_trace(), options);
  ASSERT_FALSE(sweep.has_value());
  EXPECT_EQ(sweep.error().code, ErrorCode::kInvalidArgument);
}

TEST(SweepTable, ShowsEachPlannersCurveAndSaysWhenNothingBreaks) {
  BudgetSweepOptions options;
  options.planners = {"peak"};
  options.step_percent = 50.0;  // ladder 200, 300
  const Result<BudgetSweep> sweep = run_budget_sweep(retained_trace(), options);
  ASSERT_TRUE(sweep.has_value()) << sweep.error().message;
  const std::string table = format_sweep_table(*sweep, "t.json");
  EXPECT_THAT(table, HasSubstr("sweep      on a device that holds only the budget, 2 copy engines: from the floor, "
                               "200 B (66.7%), to the unplanned peak in steps of 50%\n"));
  EXPECT_THAT(table, HasSubstr("budget  % peak  bound  peak overhead  peak timed peak\n"
                               "200 B    66.7%  0.00%         40.00%            200 B\n"
                               "300 B   100.0%  0.00%          0.00%            300 B\n"));
  EXPECT_THAT(table, HasSubstr("\nmonotone: "));

  const nlohmann::json json = nlohmann::json::parse(sweep_to_json(*sweep, "t.json"));
  EXPECT_EQ(json["memory_cap"], "budget");
  EXPECT_EQ(json["floor_bytes"], 200);
  ASSERT_EQ(json["budgets"].size(), 2U);
  EXPECT_EQ(json["budgets"][0]["budget_bytes"], 200);
  EXPECT_DOUBLE_EQ(json["budgets"][0]["results"][0]["overhead_percent"].get<double>(), 40.0);
  EXPECT_TRUE(json["violations"].empty());
}

TEST(SweepTable, MarksAndExplainsEachViolation) {
  BudgetSweep sweep;
  sweep.comparison = curve({feasible(100, 5.0), feasible(190, 9.0)});
  sweep.floor_bytes = 100;
  sweep.violations = find_sweep_violations(sweep.comparison, 1e-9);
  const std::string table = format_sweep_table(sweep, "t.json");
  EXPECT_THAT(table, HasSubstr("200 B    50.0%      -      *9.00%         190 B\n"));
  EXPECT_THAT(table, HasSubstr("* p at 200 B (50.0%): overhead higher than at a smaller budget: 9.0000% against "
                               "5.0000% at 100 B (25.0%)\n"));
  const nlohmann::json json = nlohmann::json::parse(sweep_to_json(sweep, "t.json"));
  ASSERT_EQ(json["violations"].size(), 1U);
  EXPECT_EQ(json["violations"][0]["property"], "overhead higher than at a smaller budget");
  EXPECT_EQ(json["violations"][0]["reference_budget_bytes"], 100);
  EXPECT_EQ(json["budgets"][1]["results"][0]["violations"][0], "overhead higher than at a smaller budget");

  const std::string svg = sweep_plot_svg(sweep, "dir/t.json");
  EXPECT_THAT(svg, HasSubstr("t.json: overhead against budget"));
  EXPECT_THAT(svg, HasSubstr("not monotone (1)"));
  EXPECT_THAT(svg, HasSubstr("<polyline"));
}

}  // namespace
}  // namespace hyperoffload
