// The host-budget sweep (report/host_sweep.h) on a trace small enough to
// derive by hand.
#include <gtest/gtest.h>

#include "hyperoffload/report/host_sweep.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using testing::TraceDsl;

// op 0 W1 (100 B), op 1 W2 (50 B), op 2 W3 (10 B), op 3 R3, op 4 R2, op 5 R1;
// nothing recomputable. At a device budget of 100 B (the floor: ops 0 and 5
// touch 100 B) storage 1 must be on the host through ops 1-4 (100 + 50 > 100
// at op 1), and that is all the plan needs: 100 host bytes.
Trace three_activations() {
  return TraceDsl()
      .storage(1, 100)
      .storage(2, 50)
      .storage(3, 10)
      .op("a", "W1", 1.0)
      .op("b", "W2", 1.0)
      .op("c", "W3", 1.0)
      .op("c'", "R3", 1.0)
      .op("b'", "R2", 1.0)
      .op("a'", "R1", 1.0)
      .build();
}

TEST(HostSweep, PlansEveryTenthOfTheReferenceHostBytesAndUnlimited) {
  HostSweepOptions options;
  options.comparison.planners = {"peak", "hybrid"};
  Result<HostSweep> sweep = run_host_sweep(three_activations(), 100, options);
  ASSERT_TRUE(sweep) << sweep.error().message;
  EXPECT_EQ(sweep->reference_host_bytes, 100);
  // 0, 10, ..., 100 bytes, then unlimited.
  ASSERT_EQ(sweep->host_budgets_bytes.size(), 12u);
  EXPECT_EQ(sweep->host_budgets_bytes[3], 30);
  EXPECT_EQ(sweep->host_budgets_bytes[11], std::nullopt);
  for (std::size_t i = 0; i < sweep->comparisons.size(); ++i) {
    for (const ComparisonRow& row : sweep->comparisons[i].rows) {
      SCOPED_TRACE(::testing::Message() << "host budget " << i << ", " << row.planner);
      EXPECT_TRUE(row.valid);
      // Below 100 host bytes storage 1 stays on the device: 150 B at op 1.
      EXPECT_EQ(row.feasible(), i >= 10);
      if (sweep->host_budgets_bytes[i]) {
        EXPECT_LE(row.peak_host_bytes, *sweep->host_budgets_bytes[i]);
      }
    }
  }
  const std::string svg = host_sweep_plot_svg(*sweep, "three.json");
  EXPECT_NE(svg.find("three.json: overhead against host budget at a device budget of 100 B"), std::string::npos);
  EXPECT_NE(svg.find(">unlimited<"), std::string::npos);
}

}  // namespace
}  // namespace hyperoffload
