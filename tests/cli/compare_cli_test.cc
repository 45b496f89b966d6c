// End-to-end: `hyperoffload compare` (table, budget sweeps, JSON, SVG plot, bad
// options), the peak planner's --score-weight errors and its floor report in
// `hyperoffload plan`.
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

// 100 bytes per ms each way (9.313225746154785e-05 GiB/s); every op runs 1 ms.
//   op:          0    1    2    3    4
//   storage 1:   W    R    .    .    .     100 B, retained (stays to the end)
//   storage 2:   .    .    W    .    R     100 B
//   storage 3:   .    .    .    W    .     100 B
//   resident:   100  100  200  300  200    unplanned peak 300 at op 3
// Floor 200 at op 2 ("c"): only storage 2 can leave, and only over op 3.
// At budget 200: greedy (which counts storage 1 only to op 1) plans nothing and
// peaks at 300; peak evicts storage 2 over op 3 with 1 ms of stall (see
// tests/report/comparison_test.cc for the timeline), which is the least any
// plan can do: the stall lower bound is 1 ms.
constexpr const char* kTrace = R"({"format": "hyperoffload.trace", "version": 1,
 "d2h_bandwidth_gbps": 9.313225746154785e-05, "h2d_bandwidth_gbps": 9.313225746154785e-05,
 "storages": [{"id": 1, "size_bytes": 100, "retained": true}, {"id": 2, "size_bytes": 100},
              {"id": 3, "size_bytes": 100}],
 "ops": [{"name": "a", "duration_ms": 1, "accesses": [{"storage": 1, "kind": "write"}]},
         {"name": "b", "duration_ms": 1, "accesses": [{"storage": 1, "kind": "read"}]},
         {"name": "c", "duration_ms": 1, "accesses": [{"storage": 2, "kind": "write"}]},
         {"name": "d", "duration_ms": 1, "accesses": [{"storage": 3, "kind": "write"}]},
         {"name": "e", "duration_ms": 1, "accesses": [{"storage": 2, "kind": "read"}]}]})";

TEST(CompareCli, PrintsOneTableRowPerPlannerOnTheUnlimitedDevice) {
  // The derivation above is for the reference system's unlimited device,
  // where the timed peak runs above the budget while storage 2 is copied out.
  ScratchDir dir;
  const testing::CliRun run =
      run_cli({"compare", dir.write("t.json", kTrace), "--budget", "200", "--memory-cap", "unlimited"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("ops, 3 storages, 5.000 ms of compute"));
  EXPECT_THAT(run.out, HasSubstr("unplanned  300 B op-granular peak (op 3)"));
  EXPECT_THAT(run.out, HasSubstr("memory     unlimited (--memory-cap unlimited)"));
  // Nothing is recomputable, so no recompute-only plan goes below the
  // unplanned peak: its floor and its limit are both 300 B at op 3.
  EXPECT_THAT(run.out, HasSubstr("budget 200 B (66.7% of the unplanned peak), floor 200 B at op 2; recompute-only "
                                 "floor 300 B at op 3 (limit 300 B at op 3); offload-only stall bound 1.000 ms\n"));
  // Storage 1 is retained and past its last access at op 3: a plan may copy it
  // to host after op 1 and release it, which costs nothing on this device, so
  // no bound holds for plans that may do that (ours keep it). Copying
  // nothing, nothing can leave the device: no recompute-only plan fits.
  EXPECT_THAT(run.out, HasSubstr("stall bound 1.000 ms\nany plan adds at least 0.000 ms of stall plus recompute "
                                 "(0.00% of compute); no recompute-only plan fits it\n"));
  EXPECT_THAT(run.out, HasSubstr("planner    feasible  op peak  timed peak  stall ms  recompute ms (n)  above bound  "
                                 "overhead %  bytes moved  planning ms"));
  EXPECT_THAT(run.out, HasSubstr("copies     2 engines, one per direction, D2H 9.313e-05 GiB/s, H2D 9.313e-05 GiB/s"));
  EXPECT_THAT(run.out, HasSubstr("greedy     no          300 B     300 B !     0.000                 -            -  "
                                 "     0.00%          0 B"));
  EXPECT_THAT(run.out, HasSubstr("peak       yes         200 B     300 B !     1.000                 -        0.000  "
                                 "    20.00%        200 B"));
  // Nothing is recomputable: hybrid is the peak plan, recompute-only cannot
  // lower the peak below 300 B.
  EXPECT_THAT(run.out, HasSubstr("hybrid     yes         200 B     300 B !     1.000                 -        0.000  "
                                 "    20.00%        200 B"));
  EXPECT_THAT(run.out, HasSubstr("recompute  no          300 B     300 B !     0.000                 -            -  "
                                 "     0.00%          0 B"));
}

TEST(CompareCli, PlansAndSimulatesForADeviceThatHoldsOnlyTheBudgetByDefault) {
  // Capped at 200 B, op d must wait for storage 2's release, which completes
  // with its copy to host at 4 ms (c ends at 3): d runs 4-5; storage 3 is freed
  // after d, so storage 2 comes back 5-6 and e starts at 6 instead of 4. The
  // bound is the same 2 ms, and the timed peak stays within the budget.
  ScratchDir dir;
  const testing::CliRun run = run_cli({"compare", dir.write("t.json", kTrace), "--budget", "200"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("memory     capped at the budget"));
  EXPECT_THAT(run.out, HasSubstr("floor 200 B at op 2; recompute-only floor 300 B at op 3 (limit 300 B at op 3); "
                                 "offload-only stall bound 2.000 ms\n"));
  EXPECT_THAT(run.out, HasSubstr("peak       yes         200 B     200 B       2.000                 -        0.000  "
                                 "    40.00%        200 B"));
  // The same with the flag spelled out.
  const testing::CliRun spelled =
      run_cli({"compare", dir.write("t.json", kTrace), "--budget", "200", "--memory-cap", "budget"});
  ASSERT_EQ(spelled.exit_code, 0) << spelled.err;
  EXPECT_THAT(spelled.out, HasSubstr("peak       yes         200 B     200 B       2.000"));
}

TEST(CompareCli, SweepsBudgetsGivenAsAList) {
  ScratchDir dir;
  const testing::CliRun run = run_cli({"compare", dir.write("t.json", kTrace), "--budgets", "250,50%"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("budget 250 B (83.3% of the unplanned peak)"));
  EXPECT_THAT(run.out,
              HasSubstr("budget 150 B (50.0% of the unplanned peak), floor 200 B at op 2; recompute-only floor "
                        "300 B at op 3 (limit 300 B at op 3); no offload-only plan fits it"));
  // Every op touches 100 B, within 150 B. Op 3 needs 150 B off: storage 1
  // (retained, past its last access: copied to host at any time on this
  // device) and 50 B more of storage 2, which the bound lets come back during
  // op 4 (it only counts copies back as done by the end of the last op): 0 ms.
  EXPECT_THAT(run.out, HasSubstr("no offload-only plan fits it\nany plan adds at least 0.000 ms"));
  EXPECT_THAT(run.out, HasSubstr("note (peak): budget 150 B (150 bytes) is below the unavoidable floor"));
  EXPECT_LT(run.out.find("budget 250 B"), run.out.find("budget 150 B"));
}

TEST(CompareCli, PrintsJsonWithOneResultPerPlannerAndBudget) {
  ScratchDir dir;
  const testing::CliRun run = run_cli({"compare", dir.write("t.json", kTrace), "--budgets", "200,250", "--planners",
                                       "peak", "--copy-engines", "1", "--memory-cap", "unlimited", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["copy_engines"], 1);
  EXPECT_EQ(json["memory_cap"], "unlimited");
  ASSERT_EQ(json["results"].size(), 2U);
  EXPECT_EQ(json["results"][0]["planner"], "peak");
  EXPECT_EQ(json["results"][0]["budget_bytes"], 200);
  EXPECT_EQ(json["results"][0]["feasible"], true);
  EXPECT_EQ(json["results"][1]["budget_bytes"], 250);
  // One shared engine: storage 2's copy back queues behind its copy to host,
  // which it waits for anyway; the bound is 1 ms at 200 B as with two.
  EXPECT_DOUBLE_EQ(json["results"][0]["stall_lower_bound_ms"].get<double>(), 1.0);
}

TEST(CompareCli, PassesScoreWeightsToThePeakPlanner) {
  ScratchDir dir;
  const testing::CliRun run = run_cli({"compare", dir.write("t.json", kTrace), "--budget", "200", "--score-weight",
                                       "hiding=0", "--score-weight", "coverage=2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("peak       yes"));
}

TEST(CompareCli, WritesAnSvgPlotWithAPanelPerBudget) {
  ScratchDir dir;
  const std::string plot = (dir / "memory.svg").string();
  // Unlimited, so that the legend shows the peak plan's timed peak above the budget.
  const testing::CliRun run = run_cli(
      {"compare", dir.write("t.json", kTrace), "--budgets", "200,250", "--plot", plot, "--memory-cap", "unlimited"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("plot written to " + plot));
  const std::string svg = testing::read_text(plot);
  EXPECT_EQ(svg.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0U);
  EXPECT_TRUE(svg.ends_with("</svg>\n"));
  std::size_t panels = 0;
  for (std::size_t at = svg.find("<g class=\"panel\">"); at != std::string::npos;
       at = svg.find("<g class=\"panel\">", at + 1)) {
    ++panels;
  }
  EXPECT_EQ(panels, 2U);
  EXPECT_THAT(svg, HasSubstr("t.json: budget 200 B (66.7% of the unplanned peak)"));
  EXPECT_THAT(svg, HasSubstr(">time (ms)</text>"));
  EXPECT_THAT(svg, HasSubstr(">device memory (B)</text>"));
  EXPECT_THAT(svg, HasSubstr(">greedy (timed peak 300 B)</text>"));
  EXPECT_THAT(svg, HasSubstr(">peak (timed peak 300 B)</text>"));
  EXPECT_THAT(svg, HasSubstr(">budget 200 B</text>"));
}

TEST(CompareCli, RejectsBadOptionsWithExitCode2AndWritesNoPlot) {
  ScratchDir dir;
  const std::string trace = dir.write("t.json", kTrace);
  const std::string plot = (dir / "memory.svg").string();
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const Case cases[] = {
      {{"--budget", "200", "--budgets", "250"}, "give either --budget or --budgets, not both"},
      {{"--budgets", "30%,,50%"}, "--budgets \"30%,,50%\": empty item"},
      {{"--budget", "lots"}, "invalid budget \"lots\""},
      {{"--budget", "200", "--planners", "greedy,best"}, "unknown planner \"best\" (available: greedy, peak, hybrid, recompute, optimal, dtr)"},
      {{"--budget", "200", "--copy-engines", "3"}, "--copy-engines"},
      {{}, "no budget to compare at"},
      {{"--budget", "200", "--planners", "greedy", "--score-weight", "hiding=2"},
       "score weights apply to the peak and hybrid planners"},
      {{"--budget", "200", "--score-weight", "hiding"}, "--score-weight hiding: expected NAME=VALUE"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"compare", trace, "--plot", plot};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const testing::CliRun run = run_cli(args);
    EXPECT_EQ(run.exit_code, 2) << c.message << "\n" << run.out;
    EXPECT_THAT(run.err, HasSubstr(c.message));
    EXPECT_FALSE(std::filesystem::exists(plot)) << c.message;
  }
}

TEST(CompareCli, ExitsTwoWhenThePlotCannotBeWritten) {
  ScratchDir dir;
  const std::string plot = (dir / "missing" / "memory.svg").string();
  const testing::CliRun run = run_cli({"compare", dir.write("t.json", kTrace), "--budget", "200", "--plot", plot});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("missing"));
  EXPECT_FALSE(std::filesystem::exists(plot));
}

// --sweep on kTrace: floor 200 (only storage 2 can leave, over op 3), 50%
// steps of 300 above it: 200, 300. On the capped device (the sweep's default)
// the peak planner's plan at 200 stalls 2 ms of 5 (40%): storage 3 waits for
// storage 2's copy to host, then storage 2's copy back waits for storage 3's
// release (tests/report/budget_sweep_test.cc derives it); at 300 nothing moves.
TEST(CompareCli, SweepsFromTheFloorToThePeakOnTheCappedDevice) {
  ScratchDir dir;
  const std::string plot = (dir / "sweep.svg").string();
  const testing::CliRun run = run_cli({"compare", dir.write("t.json", kTrace), "--sweep", "--sweep-step", "50%",
                                       "--planners", "peak", "--plot", plot});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("sweep      on a device that holds only the budget, 2 copy engines: from the floor, "
                                 "200 B (66.7%), to the unplanned peak in steps of 50%\n"));
  EXPECT_THAT(run.out, HasSubstr("budget  % peak  bound  peak overhead  peak timed peak\n"
                                 "200 B    66.7%  0.00%         40.00%            200 B\n"
                                 "300 B   100.0%  0.00%          0.00%            300 B\n"));
  EXPECT_THAT(run.out, HasSubstr("\nmonotone: "));
  EXPECT_THAT(testing::read_text(plot), HasSubstr("t.json: overhead against budget, device holds only the budget"));

  const testing::CliRun json = run_cli({"compare", dir.write("t.json", kTrace), "--sweep", "--sweep-step", "50%",
                                        "--planners", "peak", "--memory-cap", "unlimited", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json parsed = nlohmann::json::parse(json.out);
  EXPECT_EQ(parsed["memory_cap"], "unlimited");  // given explicitly
  EXPECT_EQ(parsed["floor_bytes"], 200);
  EXPECT_EQ(parsed["budgets"].size(), 2U);
}

TEST(CompareCli, SweepRejectsBudgetsAndAStepThatIsNotAPercentage) {
  ScratchDir dir;
  const std::string trace = dir.write("t.json", kTrace);
  testing::CliRun run = run_cli({"compare", trace, "--sweep", "--budgets", "50%,70%"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--sweep chooses its own budgets"));
  run = run_cli({"compare", trace, "--sweep", "--sweep-step", "2GiB"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--sweep-step 2GiB: expected a percentage of the unplanned peak"));
  run = run_cli({"compare", trace, "--sweep", "--sweep-step", "0%"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("sweep step 0%: must be above 0%"));
  run = run_cli({"compare", trace, "--sweep-step", "5%"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--sweep-step needs --sweep"));
}

TEST(ScoreWeightCli, UnknownNamesListTheValidOnes) {
  ScratchDir dir;
  const std::string trace = dir.write("t.json", kTrace);
  for (const std::string command : {"plan", "compare"}) {
    std::vector<std::string> args = {command, trace, "--budget", "200", "--score-weight", "speed=1"};
    if (command == "plan") args.insert(args.end(), {"--planner", "peak"});
    const testing::CliRun run = run_cli(args);
    EXPECT_EQ(run.exit_code, 2) << command;
    EXPECT_THAT(run.err, HasSubstr("unknown score weight \"speed\" (valid: peak_reduction, hiding, coverage, "
                                   "neighbor_impact)"))
        << command;
  }
}

TEST(ScoreWeightCli, RejectsNegativeWeightsAndWeightsForGreedy) {
  ScratchDir dir;
  const std::string trace = dir.write("t.json", kTrace);
  testing::CliRun run = run_cli({"plan", trace, "--planner", "peak", "--score-weight", "hiding=-1"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("score weight hiding=-1: must be a finite number >= 0"));
  run = run_cli({"plan", trace, "--planner", "greedy", "--score-weight", "hiding=1"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--score-weight: score weights apply to the peak and hybrid planners, not to greedy"));
}

TEST(PlanCli, ANamedPlannerGivesItsOwnPlanOverTheBudgetAndFallbackPeakAppliesTheSessionsPolicy) {
  // At 200 B greedy plans nothing and peaks at 300 B, though the floor is 200
  // B. Named, greedy's own plan is written, 100 B over, with a note naming
  // the planner that fits; with --fallback peak (the session's policy, and
  // plan's default when no planner is named) the peak planner's plan replaces
  // it and says so; compare keeps greedy's own row (infeasible).
  ScratchDir dir;
  const std::string trace = dir.write("t.json", kTrace);
  const testing::CliRun own = run_cli({"plan", trace, "--planner", "greedy", "--budget", "200"});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_THAT(own.out, HasSubstr("planner   greedy in "));
  EXPECT_THAT(own.out, Not(HasSubstr("the plan is peak's")));
  EXPECT_THAT(own.out, HasSubstr("peak      300 B unplanned (op 3) -> 300 B planned"));
  EXPECT_THAT(own.out, HasSubstr("shortfall planned peak exceeds the budget by 100 B"));
  EXPECT_THAT(own.out, HasSubstr("note      planner \"greedy\" peaked at 300 B (300 bytes), over the budget of 200 B "
                                 "by 100 B; \"peak\" would fit: it keeps every budget at or above the floor (200 B)"));
  const testing::CliRun none = run_cli({"plan", trace, "--planner", "greedy", "--budget", "200", "--fallback", "none"});
  EXPECT_THAT(none.out, HasSubstr("-> 300 B planned"));
  EXPECT_THAT(none.out, HasSubstr("\"peak\" would fit"));

  const testing::CliRun run = run_cli({"plan", trace, "--planner", "greedy", "--budget", "200", "--fallback", "peak"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("(the plan is peak's: see the note)"));
  EXPECT_THAT(run.out, HasSubstr("peak      300 B unplanned (op 3) -> 200 B planned"));
  EXPECT_THAT(run.out, HasSubstr("note      planner \"greedy\" peaked at 300 B (300 bytes), above the budget of 200 B; "
                                 "the step was planned with \"peak\", which keeps to it"));
  const testing::CliRun compared = run_cli({"compare", trace, "--budget", "200", "--planners", "greedy"});
  EXPECT_THAT(compared.out, HasSubstr("greedy   no          300 B"));
  const testing::CliRun bad = run_cli({"plan", trace, "--fallback", "greedy"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--fallback"));
}

TEST(PeakPlanCli, ReportsTheFloorAndABudgetBelowItButStillPlans) {
  ScratchDir dir;
  const std::string schedule = (dir / "s.json").string();
  const testing::CliRun run =
      run_cli({"plan", dir.write("t.json", kTrace), "--planner", "peak", "--budget", "150", "-o", schedule});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("planner   peak in "));
  EXPECT_THAT(run.out, HasSubstr("peak      300 B unplanned (op 3) -> 200 B planned (op 2), op-granular"));
  EXPECT_THAT(run.out, HasSubstr("shortfall planned peak exceeds the budget by 50 B"));
  EXPECT_THAT(run.out, HasSubstr("floor     200 B at op 2 (c): the lowest peak this planner reaches"));
  EXPECT_THAT(run.out, HasSubstr("note      budget 150 B (150 bytes) is below the unavoidable floor of 200 B (200 "
                                 "bytes) at op 2 (c)"));
  EXPECT_THAT(run.out, HasSubstr("check     valid, 0 faults"));
  EXPECT_TRUE(std::filesystem::exists(schedule));
}

TEST(PeakPlanCli, ReportsTheFloorWithoutANoteWhenTheBudgetIsReachable) {
  ScratchDir dir;
  const testing::CliRun run = run_cli({"plan", dir.write("t.json", kTrace), "--planner", "peak", "--budget", "200"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("floor     200 B at op 2 (c)"));
  EXPECT_THAT(run.out, Not(HasSubstr("note ")));
  EXPECT_THAT(run.out, Not(HasSubstr("shortfall")));
}

}  // namespace
}  // namespace hyperoffload
