// End-to-end: recompute actions (schedule format v2) through `validate` and
// `simulate`: exit 1 with the action named for each semantic error, exit 2
// with the JSON path for each structural one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/cli_runner.h"

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;
using testing::run_cli;
using testing::ScratchDir;

// op:          0    1 (recomputable)   2        3
// storage 1:   W    R                  [W]      R      (100 B)
// storage 2:   .    W                  R [W]    R      (50 B)
// Op 2 is "g" (reads storage 2) in the plain trace; the variants make it write
// storage 1 or 2 in place, which makes a later recompute of op 1 stale.
std::string trace_with_op2(const std::string& op2_accesses) {
  return R"({"format": "hyperoffload.trace", "version": 2,
 "storages": [{"id": 1, "size_bytes": 100}, {"id": 2, "size_bytes": 50}],
 "ops": [{"name": "a", "duration_ms": 1, "accesses": [{"storage": 1, "kind": "write"}]},
         {"name": "f", "duration_ms": 2, "recomputable": true,
          "accesses": [{"storage": 1, "kind": "read"}, {"storage": 2, "kind": "write"}]},
         {"name": "g", "duration_ms": 1, "accesses": [)" +
         op2_accesses + R"(]},
         {"name": "d", "duration_ms": 1, "accesses": [{"storage": 2, "kind": "read"}, {"storage": 1, "kind": "read"}]}]})";
}
const std::string kTrace = trace_with_op2(R"({"storage": 2, "kind": "read"})");

std::string schedule(int version, const std::string& actions) {
  return R"({"format": "hyperoffload.schedule", "version": )" + std::to_string(version) +
         R"(, "planner": "test", "actions": [)" + actions + "]}";
}
// Storage 2 dropped after op 2 without a host copy, regenerated before op 3.
const std::string kRegenerate = R"({"op": 2, "phase": "post", "kind": "release_device", "storage": 2},
    {"op": 3, "phase": "pre", "kind": "recompute", "source_op": 1})";

TEST(RecomputeCli, ValidatesARecomputeThatRegeneratesAReleasedStorage) {
  ScratchDir dir;
  const std::string trace = dir.write("t.json", kTrace);
  const std::string plan = dir.write("s.json", schedule(2, kRegenerate));
  const testing::CliRun run = run_cli({"validate", trace, plan});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("valid: "));
  EXPECT_THAT(run.out, HasSubstr("recompute 1 op re-run"));
  const testing::CliRun json = run_cli({"validate", trace, plan, "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json out = nlohmann::json::parse(json.out);
  EXPECT_EQ(out.at("recompute_count"), 1);
  EXPECT_EQ(out.at("peak_bytes"), 150);
}

TEST(RecomputeCli, SimulateReportsRecomputeTimeApartFromStall) {
  // Ops a 1 ms, f 2 ms, g 1 ms, d 1 ms; f re-runs before d, 2 ms more:
  // makespan 7 = compute 5 + stall 0 + recompute 2.
  ScratchDir dir;
  const std::string trace = dir.write("t.json", kTrace);
  const std::string plan = dir.write("s.json", schedule(2, kRegenerate));
  const std::string timeline = (dir / "timeline.json").string();
  const testing::CliRun run = run_cli({"simulate", trace, plan, "--json", "--timeline", timeline});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json out = nlohmann::json::parse(run.out);
  EXPECT_EQ(out.at("recompute_ms"), 2.0);
  EXPECT_EQ(out.at("recompute_count"), 1);
  EXPECT_EQ(out.at("stall_ms"), 0.0);
  EXPECT_EQ(out.at("compute_ms"), 5.0);
  EXPECT_EQ(out.at("makespan_ms"), 7.0);
  EXPECT_EQ(out.at("overhead_percent"), 40.0);
  EXPECT_THAT(testing::read_text(timeline), HasSubstr(R"("cat":"recompute","name":"recompute f")"));
  const testing::CliRun text = run_cli({"simulate", trace, plan});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("recompute 2.000 ms (40.00% of compute) in 1 re-run op; overhead 40.00% of compute"));
}

struct SemanticError {
  const char* name;
  std::string trace;
  std::string actions;
  const char* message;
};

class RecomputeSemanticErrorCli : public ::testing::TestWithParam<SemanticError> {};

TEST_P(RecomputeSemanticErrorCli, ExitsWith1NamingTheAction) {
  const SemanticError& param = GetParam();
  ScratchDir dir;
  const testing::CliRun run =
      run_cli({"validate", dir.write("t.json", param.trace), dir.write("s.json", schedule(2, param.actions))});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("INVALID"));
  EXPECT_THAT(run.out, HasSubstr(param.message));
  // simulate reports the same verdict and exits 1 too.
  const testing::CliRun sim =
      run_cli({"simulate", dir.write("t2.json", param.trace), dir.write("s2.json", schedule(2, param.actions))});
  EXPECT_EQ(sim.exit_code, 1) << sim.out << sim.err;
  EXPECT_THAT(sim.out, HasSubstr(param.message));
}

INSTANTIATE_TEST_SUITE_P(
    Rules, RecomputeSemanticErrorCli,
    ::testing::Values(
        SemanticError{"NotRecomputable", kTrace, R"({"op": 3, "phase": "pre", "kind": "recompute", "source_op": 0})",
                      "actions[0] (op 3 pre recompute op 0): op 0 (a) is not recomputable"},
        SemanticError{"MissingInput", kTrace,
                      R"({"op": 1, "phase": "post", "kind": "copy_d2h", "storage": 1},
                         {"op": 1, "phase": "post", "kind": "release_device", "storage": 1},
                         {"op": 3, "phase": "pre", "kind": "recompute", "source_op": 1})",
                      "actions[2] (op 3 pre recompute op 1): input storage 1 (ops[1].accesses[0]) is not resident"},
        SemanticError{"StaleInput", trace_with_op2(R"({"storage": 1, "kind": "read"}, {"storage": 1, "kind": "write"})"),
                      kRegenerate,
                      "actions[1] (op 3 pre recompute op 1): input storage 1 (ops[1].accesses[0]) is stale"},
        SemanticError{"StaleOutput", trace_with_op2(R"({"storage": 2, "kind": "read"}, {"storage": 2, "kind": "write"})"),
                      R"({"op": 3, "phase": "pre", "kind": "recompute", "source_op": 1})",
                      "actions[0] (op 3 pre recompute op 1): output storage 2 (ops[1].accesses[1]) is stale"},
        SemanticError{"AccessBeforeTheRecompute", kTrace,
                      R"({"op": 1, "phase": "post", "kind": "release_device", "storage": 2},
                         {"op": 3, "phase": "pre", "kind": "recompute", "source_op": 1})",
                      "op 2 read of storage 2: data lost"}),
    [](const ::testing::TestParamInfo<SemanticError>& param_info) { return std::string(param_info.param.name); });

struct StructuralError {
  const char* name;
  std::string schedule;
  const char* message;
};

class RecomputeStructuralErrorCli : public ::testing::TestWithParam<StructuralError> {};

TEST_P(RecomputeStructuralErrorCli, ExitsWith2NamingTheJsonPath) {
  const StructuralError& param = GetParam();
  ScratchDir dir;
  const std::string trace = dir.write("t.json", kTrace);
  const std::string plan = dir.write("s.json", param.schedule);
  for (const char* command : {"validate", "simulate"}) {
    const testing::CliRun run = run_cli({command, trace, plan});
    EXPECT_EQ(run.exit_code, 2) << command << ": " << run.out << run.err;
    EXPECT_THAT(run.err, HasSubstr(param.message)) << command;
    EXPECT_TRUE(run.out.empty()) << command << ": " << run.out;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rules, RecomputeStructuralErrorCli,
    ::testing::Values(
        StructuralError{"MissingSourceOp", schedule(2, R"({"op": 3, "phase": "pre", "kind": "recompute"})"),
                        "actions[0].source_op: missing"},
        StructuralError{"SourceOpNotBefore",
                        schedule(2, R"({"op": 3, "phase": "pre", "kind": "recompute", "source_op": 3})"),
                        "actions[0].source_op: 3 does not run before op 3 pre"},
        StructuralError{"SourceOpAfter",
                        schedule(2, R"({"op": 1, "phase": "post", "kind": "recompute", "source_op": 2})"),
                        "actions[0].source_op: 2 does not run before op 1 post"},
        StructuralError{"RecomputeInVersion1", schedule(1, kRegenerate),
                        "actions[1].kind: recompute needs schedule format version 2"},
        StructuralError{"StorageOnARecompute",
                        schedule(2, R"({"op": 3, "phase": "pre", "kind": "recompute", "source_op": 1, "storage": 2})"),
                        "actions[0].storage: a recompute has no storage"}),
    [](const ::testing::TestParamInfo<StructuralError>& param_info) { return std::string(param_info.param.name); });

TEST(RecomputeCli, RejectsRecomputableInAVersion1TraceWithExitCode2) {
  ScratchDir dir;
  std::string v1 = kTrace;
  v1.replace(v1.find("\"version\": 2"), 12, "\"version\": 1");
  const testing::CliRun run =
      run_cli({"validate", dir.write("t.json", v1), dir.write("s.json", schedule(2, kRegenerate))});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("ops[1].recomputable: needs trace format version 2 (this file says version 1)"));
}

}  // namespace
}  // namespace hyperoffload
