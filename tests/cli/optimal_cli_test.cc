// End-to-end: `plan --planner optimal` (the solver line, progress on stderr,
// --time-limit, a budget below the floor) and the optimal row of `compare`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "testing/cli_runner.h"

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_cli;
using testing::ScratchDir;

// The mixed case of tests/plan/optimal_planner_test.cc (derivation there):
// copies at 1000 MiB/s, so N MiB take N ms. At 5 MiB the optimum drops A
// (storage 2) and re-runs f before bwd_a, and sends X (storage 1) to host and
// back around big/use: 8.5 ms of compute + 0.5 of recompute, no stall.
constexpr const char* kTrace = R"({"format": "hyperoffload.trace", "version": 2,
 "d2h_bandwidth_gbps": 0.9765625, "h2d_bandwidth_gbps": 0.9765625,
 "storages": [{"id": 1, "size_bytes": 1048576}, {"id": 2, "size_bytes": 4194304},
              {"id": 3, "size_bytes": 1048576}, {"id": 4, "size_bytes": 4194304}],
 "ops": [{"name": "load", "duration_ms": 1, "accesses": [{"storage": 1, "kind": "write"}]},
         {"name": "f", "duration_ms": 0.5, "recomputable": true,
          "accesses": [{"storage": 1, "kind": "read"}, {"storage": 2, "kind": "write"}]},
         {"name": "drop", "duration_ms": 1, "accesses": [{"storage": 3, "kind": "write"}]},
         {"name": "big", "duration_ms": 2, "accesses": [{"storage": 4, "kind": "write"}]},
         {"name": "use", "duration_ms": 2, "accesses": [{"storage": 4, "kind": "read"}]},
         {"name": "bwd_b", "duration_ms": 1, "accesses": [{"storage": 3, "kind": "read"}]},
         {"name": "bwd_a", "duration_ms": 1,
          "accesses": [{"storage": 2, "kind": "read"}, {"storage": 1, "kind": "read"}]}]})";

TEST(OptimalCli, PlansReportsTheSolversVerdictAndSimulatesAsTheModelSays) {
  ScratchDir dir;
  const std::string trace = dir.write("t.json", kTrace);
  const std::string schedule = (dir / "s.json").string();
  const testing::CliRun plan =
      run_cli({"plan", trace, "--planner", "optimal", "--budget", "5MiB", "--time-limit", "30", "-o", schedule});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_THAT(plan.out, HasSubstr("planner   optimal in "));
  EXPECT_THAT(plan.out, HasSubstr("solver    CBC 2.10.8: optimal, model makespan 9 ms, lower bound 9 ms, gap 0.00%"));
  EXPECT_THAT(plan.out, HasSubstr("recompute 1 re-runs of earlier ops, 0.500 ms of compute"));
  EXPECT_THAT(plan.out, HasSubstr("check     valid, 0 faults"));
  EXPECT_THAT(plan.out, HasSubstr("note      proven optimal; model makespan 9 ms (compute 8.5 + recompute 0.5 in 1 + "
                                  "stall 0), lower bound 9 ms, gap 0.00%"));
  // Progress goes to stderr, so stdout stays the report.
  EXPECT_THAT(plan.err, HasSubstr("optimal "));
  EXPECT_THAT(plan.err, HasSubstr("incumbent 9 ms  bound 9 ms  gap 0.00%"));
  EXPECT_THAT(plan.out, Not(HasSubstr("incumbent")));

  const testing::CliRun sim = run_cli({"simulate", trace, schedule, "--json"});
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const nlohmann::json json = nlohmann::json::parse(sim.out);
  EXPECT_DOUBLE_EQ(json["makespan_ms"].get<double>(), 9.0);
  EXPECT_DOUBLE_EQ(json["recompute_ms"].get<double>(), 0.5);
  EXPECT_EQ(json["peak_bytes"], 5 * 1048576);
}

TEST(OptimalCli, BelowTheFloorPlansTheBestEffortLikeEveryPlannerWithANote) {
  // Every planner answers a budget below its floor alike: exit 0, the plan as
  // close to the budget as it gets, the shortfall and a note naming the op.
  ScratchDir dir;
  const std::string trace = dir.write("t.json", kTrace);
  for (const std::string planner : {"optimal", "greedy", "peak", "hybrid", "recompute"}) {
    const std::string schedule = (dir / (planner + ".json")).string();
    const testing::CliRun run = run_cli({"plan", trace, "--planner", planner, "--budget", "4MiB", "-o", schedule});
    EXPECT_EQ(run.exit_code, 0) << planner << ": " << run.err;
    EXPECT_THAT(run.out, HasSubstr("shortfall planned peak exceeds the budget by")) << planner;
    EXPECT_TRUE(std::filesystem::exists(schedule)) << planner;
  }
  const testing::CliRun run = run_cli({"plan", trace, "--planner", "optimal", "--budget", "4MiB"});
  EXPECT_THAT(run.out, HasSubstr("note      budget 4.00 MiB (4194304 bytes) is below the floor of 5.00 MiB (5242880 "
                                 "bytes) at op 1 (f)"));
}

TEST(OptimalCli, RejectsATimeLimitThatIsNotAPositiveNumber) {
  ScratchDir dir;
  const std::string trace = dir.write("t.json", kTrace);
  for (const std::string command : {"plan", "compare"}) {
    for (const std::string limit : {"0", "-1", "soon"}) {
      const testing::CliRun run = run_cli({command, trace, "--budget", "5MiB", "--time-limit", limit});
      EXPECT_EQ(run.exit_code, 2) << command << " " << limit;
      EXPECT_THAT(run.err, HasSubstr("--time-limit")) << command << " " << limit;
    }
  }
}

TEST(OptimalCli, CompareShowsTheOptimalRowWithItsGapOnSmallTraces) {
  ScratchDir dir;
  const testing::CliRun run = run_cli({"compare", dir.write("t.json", kTrace), "--budgets", "5MiB,4MiB"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\noptimal    yes"));
  EXPECT_THAT(run.out, HasSubstr("note (optimal): proven optimal; model makespan 9 ms"));
  // Below the floor it plans the best effort and says why, as the others do.
  EXPECT_THAT(run.out, HasSubstr("\noptimal    no"));
  EXPECT_THAT(run.out, HasSubstr("note (optimal): budget 4.00 MiB (4194304 bytes) is below the floor"));
}

TEST(OptimalCli, CompareJsonCarriesTheSolversObjectiveBoundAndGap) {
  ScratchDir dir;
  const testing::CliRun run = run_cli({"compare", dir.write("t.json", kTrace), "--budget", "5MiB", "--planners",
                                       "hybrid,optimal", "--memory-cap", "budget", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  ASSERT_EQ(json["results"].size(), 2U);
  const nlohmann::json& optimal = json["results"][1];
  EXPECT_EQ(optimal["planner"], "optimal");
  EXPECT_EQ(optimal["feasible"], true);
  EXPECT_DOUBLE_EQ(optimal["makespan_ms"].get<double>(), 9.0);
  EXPECT_EQ(optimal["solver"]["status"], "optimal");
  EXPECT_NEAR(optimal["solver"]["objective_ms"].get<double>(), 9.0, 1e-9);
  EXPECT_NEAR(optimal["solver"]["bound_ms"].get<double>(), 9.0, 1e-3);
  EXPECT_LT(optimal["solver"]["gap"].get<double>(), 1e-4);
  EXPECT_FALSE(json["results"][0].contains("solver"));
}

TEST(OptimalCli, CompareLeavesTheOptimalPlannerOutOnLargeTraces) {
  // 250 ops, above the 200 that compare includes it for by default.
  std::string ops;
  for (int i = 0; i < 250; ++i) {
    if (i > 0) ops += ",";
    ops += R"({"name": "op", "duration_ms": 1, "accesses": [{"storage": 1, "kind": "read"}]})";
  }
  const std::string trace = R"({"format": "hyperoffload.trace", "version": 2,
   "storages": [{"id": 1, "size_bytes": 100}], "ops": [)" + ops + "]}";
  ScratchDir dir;
  const testing::CliRun run = run_cli({"compare", dir.write("t.json", trace), "--budget", "100"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("\nhybrid "));
  EXPECT_THAT(run.out, Not(HasSubstr("optimal")));
}

}  // namespace
}  // namespace hyperoffload
