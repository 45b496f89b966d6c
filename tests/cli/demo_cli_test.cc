// End-to-end: `hyperoffload demo`, the job `make run` runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hyperoffload/gen/transformer_trace.h"
#include "hyperoffload/io/trace_json.h"
#include "testing/cli_runner.h"

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;
using testing::run_cli;

TEST(DemoCli, ComparesEveryPlannerAtHalfThePeak) {
  const testing::CliRun run = run_cli({"demo"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("24 layers, hidden 2048, 16 heads"));
  EXPECT_THAT(run.out, HasSubstr("(50.0% of the unplanned peak)"));
  // The hybrid plan first, then the other planners.
  EXPECT_THAT(run.out, HasSubstr("planning ms\nhybrid     yes"));
  EXPECT_THAT(run.out, HasSubstr("\ngreedy     yes"));
  EXPECT_THAT(run.out, HasSubstr("\npeak       yes"));
  EXPECT_THAT(run.out, HasSubstr("\nrecompute  yes"));
  // The table and "Best:" are for the device that holds only the budget; the
  // unlimited device's numbers follow, marked where their timed peak is over.
  EXPECT_THAT(run.out, HasSubstr("memory     capped at the budget"));
  EXPECT_THAT(run.out, HasSubstr("Best: hybrid keeps the device within 28.45 GiB (timed peak"));
  EXPECT_THAT(run.out, HasSubstr("On a device with unlimited memory (--memory-cap unlimited, the reference system's "
                                 "model):\n  hybrid    overhead"));
  EXPECT_THAT(run.out, HasSubstr("(over the budget)"));
}

TEST(DemoCli, SavesTheTraceAndPlotWhenAsked) {
  testing::ScratchDir dir;
  const std::string trace = (dir / "demo.json").string();
  const std::string plot = (dir / "demo.svg").string();
  const testing::CliRun run = run_cli({"demo", "--budget", "70%", "--save-trace", trace, "--plot", plot});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Result<Trace> saved = read_trace_file(trace);
  ASSERT_TRUE(saved) << saved.error().message;
  EXPECT_EQ(trace_to_json(*saved), trace_to_json(generate_transformer_trace(demo_transformer_options()).value()));
  EXPECT_THAT(testing::read_text(plot), HasSubstr("<svg"));
}

TEST(DemoCli, RejectsABadBudget) {
  const testing::CliRun run = run_cli({"demo", "--budget", "half"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("invalid budget \"half\""));
}

}  // namespace
}  // namespace hyperoffload
