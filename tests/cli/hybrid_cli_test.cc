// End-to-end: the hybrid and recompute-only planners from the command line —
// plan, validate and simulate a generated GPT-style step whose copy link is
// too slow to hide offloads, and random traces with recomputable ops.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/cli_runner.h"

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;
using testing::run_cli;
using testing::ScratchDir;

// A two-block model with a 10 MiB/s link: offloading anything costs far more
// than recomputing it.
std::string generate_step(ScratchDir& dir) {
  const std::string trace = (dir / "step.json").string();
  const testing::CliRun run =
      run_cli({"generate", "transformer", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "64",
               "--batch", "2", "--vocab", "512", "--d2h-bandwidth", "0.01", "--h2d-bandwidth", "0.01", "-o", trace});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  return trace;
}

TEST(HybridCli, PlansRecomputesThatValidateAndSimulate) {
  ScratchDir dir;
  const std::string trace = generate_step(dir);
  const std::string plan = (dir / "plan.json").string();
  const testing::CliRun planned =
      run_cli({"plan", trace, "--budget", "70%", "--planner", "hybrid", "--memory-cap", "budget", "-o", plan});
  ASSERT_EQ(planned.exit_code, 0) << planned.out << planned.err;
  EXPECT_THAT(planned.out, HasSubstr("planner   hybrid in "));
  EXPECT_THAT(planned.out, HasSubstr("re-runs of earlier ops"));
  EXPECT_THAT(planned.out, HasSubstr("check     valid, 0 faults"));
  EXPECT_THAT(planned.out, HasSubstr("note      hybrid: "));
  const nlohmann::json schedule = nlohmann::json::parse(testing::read_text(plan));
  EXPECT_EQ(schedule.at("version"), 2);
  EXPECT_EQ(schedule.at("planner"), "hybrid");
  int recomputes = 0;
  for (const nlohmann::json& action : schedule.at("actions")) recomputes += action.at("kind") == "recompute" ? 1 : 0;
  EXPECT_GT(recomputes, 0);

  EXPECT_EQ(run_cli({"validate", trace, plan, "--budget", "70%"}).exit_code, 0);
  const testing::CliRun simulated = run_cli({"simulate", trace, plan, "--memory-cap", "budget", "--json"});
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  const nlohmann::json result = nlohmann::json::parse(simulated.out);
  EXPECT_EQ(result.at("valid"), true);
  EXPECT_EQ(result.at("recompute_count"), recomputes);
  EXPECT_GT(result.at("recompute_ms").get<double>(), 0.0);
}

TEST(HybridCli, RecomputeOnlyNeverCopies) {
  ScratchDir dir;
  const std::string trace = generate_step(dir);
  const std::string plan = (dir / "plan.json").string();
  const testing::CliRun planned = run_cli({"plan", trace, "--budget", "60%", "--planner", "recompute", "-o", plan});
  ASSERT_EQ(planned.exit_code, 0) << planned.out << planned.err;
  EXPECT_THAT(planned.out, HasSubstr("moved     d2h 0 B in 0 copies, h2d 0 B in 0 copies"));
  EXPECT_THAT(planned.out, HasSubstr("re-runs of earlier ops"));
  // Score weights belong to the planners that offload.
  const testing::CliRun weighted =
      run_cli({"plan", trace, "--budget", "60%", "--planner", "recompute", "--score-weight", "hiding=2"});
  EXPECT_EQ(weighted.exit_code, 2);
  EXPECT_THAT(weighted.err, HasSubstr("--score-weight: score weights apply to the peak and hybrid planners, not to recompute"));
}

TEST(HybridCli, RandomTracesMarkTheRequestedShareRecomputable) {
  ScratchDir dir;
  const std::string trace = (dir / "r.json").string();
  ASSERT_EQ(run_cli({"generate", "random", "--ops", "200", "--storages", "100", "--seed", "5",
                     "--recomputable-fraction", "1", "-o", trace})
                .exit_code,
            0);
  const nlohmann::json json = nlohmann::json::parse(testing::read_text(trace));
  EXPECT_EQ(json.at("version"), 2);
  int marked = 0;
  for (const nlohmann::json& op : json.at("ops")) marked += op.value("recomputable", false) ? 1 : 0;
  EXPECT_GT(marked, 20);
  EXPECT_EQ(run_cli({"plan", trace, "--planner", "hybrid"}).exit_code, 0);
  const testing::CliRun bad = run_cli({"generate", "random", "--recomputable-fraction", "1.5"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--recomputable-fraction"));
}

}  // namespace
}  // namespace hyperoffload
