// End-to-end: `hyperoffload simulate`, its JSON and timeline outputs, and every
// bad-input error (exit 2, a message naming the problem, no partial output).
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/cli_runner.h"

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using testing::run_cli;
using testing::ScratchDir;

// Copies run at 1000 MiB/s (0.9765625 GiB/s): N MiB take exactly N ms.
// storage 1: 2 MiB, written by a, offloaded after it, prefetched before c.
// storage 2: 8 MiB, written by b and offloaded after it.
// On the unlimited device (--memory-cap unlimited; the tests below that say
// so), two engines (tests/sim/simulator_test.cc, CopyEngineOrdering):
//   c: [a 0-1][b 1-2]...[c 5-6]        stall 3, compute 3
//   d:        [D2H s1 1-3][D2H s2 3-11]  makespan 11
//   h:                    [H2D s1 3-5]
// One engine: the H2D queues behind both D2Hs (11-13): stall 11, makespan 14.
// Op-granular peak: 8 MiB at op b. Timed: 2 + 8 = 10 MiB from 1 ms (storage 1's
// release waits for its D2H until 3 ms).
constexpr const char* kTrace = R"({"format": "hyperoffload.trace", "version": 1,
 "d2h_bandwidth_gbps": 0.9765625, "h2d_bandwidth_gbps": 0.9765625, "memory_limit_bytes": 9437184,
 "storages": [{"id": 1, "size_bytes": 2097152}, {"id": 2, "size_bytes": 8388608}],
 "ops": [{"name": "a", "duration_ms": 1, "accesses": [{"storage": 1, "kind": "write"}]},
         {"name": "b", "duration_ms": 1, "accesses": [{"storage": 2, "kind": "write"}]},
         {"name": "c", "duration_ms": 1, "accesses": [{"storage": 1, "kind": "read"}]}]})";

constexpr const char* kSchedule = R"({"format": "hyperoffload.schedule", "version": 1, "planner": "test",
 "actions": [{"op": 0, "phase": "post", "kind": "copy_d2h", "storage": 1},
             {"op": 0, "phase": "post", "kind": "release_device", "storage": 1},
             {"op": 1, "phase": "post", "kind": "copy_d2h", "storage": 2},
             {"op": 1, "phase": "post", "kind": "release_device", "storage": 2},
             {"op": 2, "phase": "pre", "kind": "copy_h2d", "storage": 1}]})";

// Storage 1 released without a host copy: data lost when c reads it.
constexpr const char* kLossySchedule = R"({"format": "hyperoffload.schedule", "version": 1,
 "actions": [{"op": 0, "phase": "post", "kind": "release_device", "storage": 1}]})";

struct Files {
  ScratchDir dir;
  std::string trace = dir.write("trace.json", kTrace);
  std::string schedule = dir.write("schedule.json", kSchedule);
};

bool only_files(const std::filesystem::path& dir, std::size_t count) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++n;
  return n == count;
}

TEST(SimulateCli, CapsMemoryAtTheBudgetByDefault) {
  // Budget 9 MiB (the trace's limit), memory capped:
  //   c: [a 0-1][wait 1-3][b 3-4][wait ........... 4-14][c 14-15]
  //   d:        [D2H s1 1-3][D2H s2 4-12]
  //   h:                                  [H2D s1 12-14]
  // b's 8 MiB need s1's 2 MiB freed (3 ms). The prefetch of s1, issued at 4 ms,
  // must reserve 2 MiB while s2's 8 MiB are held until its D2H ends (12 ms): the
  // host waits for memory 2 + 8 = 10 ms, then c for the copy 2 ms more.
  // Stall 12; peak 8 MiB.
  Files files;
  const testing::CliRun run =
      run_cli({"simulate", files.trace, files.schedule, "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json out = json::parse(run.out);
  EXPECT_EQ(out["memory_cap"], "budget");
  EXPECT_EQ(out["memory_stall_ms"], 10.0);
  EXPECT_EQ(out["stall_ms"], 12.0);
  EXPECT_EQ(out["makespan_ms"], 15.0);
  EXPECT_EQ(out["peak_bytes_timed"], 8388608);
  const testing::CliRun spelled = run_cli({"simulate", files.trace, files.schedule, "--memory-cap", "budget", "--json"});
  ASSERT_EQ(spelled.exit_code, 0) << spelled.err;
  EXPECT_EQ(json::parse(spelled.out), out);
  const testing::CliRun bad = run_cli({"simulate", files.trace, files.schedule, "--memory-cap", "tight"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--memory-cap tight: expected unlimited or budget"));
}

TEST(SimulateCli, PrintsASummary) {
  Files files;
  const testing::CliRun run = run_cli({"simulate", files.trace, files.schedule, "--memory-cap", "unlimited"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("valid: " + files.schedule));
  EXPECT_THAT(run.out, HasSubstr("3 ops, 2 storages; 2 copy engines"));
  EXPECT_THAT(run.out, HasSubstr("compute   3.000 ms"));
  EXPECT_THAT(run.out, HasSubstr("makespan  11.000 ms"));
  EXPECT_THAT(run.out, HasSubstr("stall     3.000 ms (100.00% of compute), of which faults 0.000 ms"));
  EXPECT_THAT(run.out, HasSubstr("peak      8.00 MiB op-granular at op 1 (b); 10.00 MiB timed at 1.000 ms"));
  EXPECT_THAT(run.out, HasSubstr("budget    9.00 MiB: timed peak exceeds it by 1.00 MiB"));
  EXPECT_THAT(run.out, HasSubstr("faults    0"));
  EXPECT_THAT(run.out, HasSubstr("moved     d2h 10.00 MiB in 2 copies, h2d 2.00 MiB in 1 copies"));
}

TEST(SimulateCli, PrintsOneJsonObject) {
  Files files;
  const testing::CliRun run = run_cli({"simulate", files.trace, files.schedule, "--json", "--memory-cap", "unlimited"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json out = json::parse(run.out);
  EXPECT_EQ(out.at("valid"), true);
  EXPECT_EQ(out.at("faults"), 0);
  EXPECT_EQ(out.at("peak_bytes"), 8 << 20);
  EXPECT_EQ(out.at("peak_op"), 1);
  EXPECT_EQ(out.at("peak_bytes_timed"), 10 << 20);
  EXPECT_EQ(out.at("peak_time_ms"), 1.0);
  EXPECT_EQ(out.at("compute_ms"), 3.0);
  EXPECT_EQ(out.at("makespan_ms"), 11.0);
  EXPECT_EQ(out.at("stall_ms"), 3.0);
  EXPECT_EQ(out.at("overhead_percent"), 100.0);
  EXPECT_EQ(out.at("d2h_bytes"), 10 << 20);
  EXPECT_EQ(out.at("h2d_bytes"), 2 << 20);
  EXPECT_EQ(out.at("copy_engines"), 2);
  EXPECT_EQ(out.at("memory_cap"), "unlimited");
  EXPECT_EQ(out.at("budget_bytes"), 9 << 20);
  EXPECT_EQ(out.at("problem_count"), 0);
  EXPECT_EQ(out.at("problems"), json::array());
}

TEST(SimulateCli, QueuesBothDirectionsOnOneCopyEngine) {
  Files files;
  const testing::CliRun run = run_cli(
      {"simulate", files.trace, files.schedule, "--json", "--copy-engines", "1", "--memory-cap", "unlimited"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json out = json::parse(run.out);
  EXPECT_EQ(out.at("copy_engines"), 1);
  EXPECT_EQ(out.at("stall_ms"), 11.0);
  EXPECT_EQ(out.at("makespan_ms"), 14.0);
}

TEST(SimulateCli, ReportsTheBudgetItIsGiven) {
  Files files;
  const testing::CliRun run = run_cli({"simulate", files.trace, files.schedule, "--budget", "16MiB"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("budget    16.00 MiB: timed peak within"));
}

TEST(SimulateCli, ExitsOneForAnInvalidSchedule) {
  Files files;
  const std::string lossy = files.dir.write("lossy.json", kLossySchedule);
  const testing::CliRun run = run_cli({"simulate", files.trace, lossy});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.out, HasSubstr("INVALID: " + lossy));
  EXPECT_THAT(run.out, HasSubstr("problems  1"));
  EXPECT_THAT(run.out, HasSubstr("op 2 read of storage 1: data lost"));
  const testing::CliRun as_json = run_cli({"simulate", files.trace, lossy, "--json"});
  EXPECT_EQ(as_json.exit_code, 1);
  const json out = json::parse(as_json.out);
  EXPECT_EQ(out.at("valid"), false);
  EXPECT_EQ(out.at("problem_count"), 1);
}

TEST(SimulateCli, WritesATimelineThatPerfettoCanOpen) {
  Files files;
  const std::string timeline = (files.dir / "step.trace.json").string();
  const testing::CliRun run =
      run_cli({"simulate", files.trace, files.schedule, "--timeline", timeline, "--memory-cap", "unlimited"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("timeline  written to " + timeline));
  const json doc = json::parse(testing::read_text(timeline));
  int ops = 0, copies = 0, stalls = 0, counters = 0;
  for (const json& event : doc.at("traceEvents")) {
    if (event.at("ph") == "C") ++counters;
    if (event.at("ph") != "X") continue;
    ops += event.at("cat") == "op" ? 1 : 0;
    copies += event.at("cat") == "copy" ? 1 : 0;
    stalls += event.at("cat") == "stall" ? 1 : 0;
    if (event.at("name") == "c") {
      EXPECT_EQ(event.at("ts"), 5000.0);  // c starts at 5 ms
    }
  }
  EXPECT_EQ(ops, 3);
  EXPECT_EQ(copies, 3);
  EXPECT_EQ(stalls, 1);
  // +2 at 0, +8 at 1, -2 and +2 at 3, -8 at 11.
  EXPECT_EQ(counters, 5);
  EXPECT_TRUE(only_files(files.dir.path(), 3));  // no temporary left behind
}

TEST(SimulateCli, WritesTheTimelineToStandardOutputAndTheSummaryToStandardError) {
  Files files;
  const testing::CliRun run =
      run_cli({"simulate", files.trace, files.schedule, "--timeline", "-", "--memory-cap", "unlimited"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(json::accept(run.out));
  EXPECT_THAT(run.err, HasSubstr("makespan  11.000 ms"));
}

TEST(SimulateCli, RejectsACopyEngineCountOtherThanOneOrTwo) {
  Files files;
  const std::string timeline = (files.dir / "t.trace.json").string();
  for (const char* engines : {"3", "0", "-1"}) {
    const testing::CliRun run =
        run_cli({"simulate", files.trace, files.schedule, "--copy-engines", engines, "--timeline", timeline});
    EXPECT_EQ(run.exit_code, 2) << engines;
    EXPECT_THAT(run.err, HasSubstr(std::string("--copy-engines ") + engines + ": expected 1")) << engines;
    EXPECT_TRUE(run.out.empty()) << engines;
  }
  const testing::CliRun words = run_cli({"simulate", files.trace, files.schedule, "--copy-engines", "two"});
  EXPECT_EQ(words.exit_code, 2);
  EXPECT_THAT(words.err, HasSubstr("--copy-engines"));
  EXPECT_FALSE(std::filesystem::exists(timeline));
}

struct BadInput {
  const char* name;
  const char* trace;
  const char* schedule;
  const char* message;
};

class SimulateCliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(SimulateCliBadInput, ExitsTwoWithAMessageAndWritesNoTimeline) {
  ScratchDir dir;
  const BadInput& bad = GetParam();
  const std::string trace = dir.write("trace.json", bad.trace);
  const std::string schedule = dir.write("schedule.json", bad.schedule);
  const std::string timeline = (dir / "out.trace.json").string();
  const testing::CliRun run = run_cli({"simulate", trace, schedule, "--timeline", timeline});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr(bad.message));
  EXPECT_FALSE(std::filesystem::exists(timeline));
  EXPECT_TRUE(only_files(dir.path(), 2));
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, SimulateCliBadInput,
    ::testing::Values(BadInput{"MalformedTrace", "{\"format\": ", kSchedule, "trace.json:1:12: malformed JSON"},
                      BadInput{"WrongTraceFormat", R"({"format": "other", "version": 1, "ops": []})", kSchedule,
                               "format"},
                      BadInput{"MalformedSchedule", kTrace, "[1, 2", "schedule.json:1:6: malformed JSON"},
                      BadInput{"UnknownActionKind", kTrace,
                               R"({"format": "hyperoffload.schedule", "version": 1,
                                   "actions": [{"op": 0, "phase": "post", "kind": "teleport", "storage": 1}]})",
                               "teleport"},
                      // Each duration is finite, their sum is not: once accepted, the
                      // JSON summary held null and the timeline inf (issue 12).
                      BadInput{"DurationsWhoseTotalOverflows",
                               R"({"format": "hyperoffload.trace", "version": 1, "storages": [],
                                   "ops": [{"duration_ms": 1e308}, {"duration_ms": 1e308}]})",
                               R"({"format": "hyperoffload.schedule", "version": 1, "actions": []})",
                               "ops[0].duration_ms: 1e+308 ms brings the ops' total duration above 1e15 ms"},
                      BadInput{"BandwidthTooSlowForItsStorages",
                               R"({"format": "hyperoffload.trace", "version": 1, "h2d_bandwidth_gbps": 1e-300,
                                   "storages": [{"id": 1, "size_bytes": 8}], "ops": []})",
                               R"({"format": "hyperoffload.schedule", "version": 1, "actions": []})",
                               "h2d_bandwidth_gbps: 1e-300 GiB/s is too slow for this trace"}),
    [](const ::testing::TestParamInfo<BadInput>& param_info) { return std::string(param_info.param.name); });

TEST(SimulateCli, ExitsTwoForAMissingFile) {
  ScratchDir dir;
  const testing::CliRun run = run_cli({"simulate", (dir / "nope.json").string(), (dir / "nope2.json").string()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("nope.json"));
}

TEST(SimulateCli, ExitsTwoWhenTheTimelineCannotBeWritten) {
  Files files;
  const std::string timeline = (files.dir / "missing-dir" / "t.json").string();
  const testing::CliRun run = run_cli({"simulate", files.trace, files.schedule, "--timeline", timeline});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("cannot write " + timeline));
  EXPECT_TRUE(run.out.empty());
}

TEST(SimulateCli, ExplainsItselfInHelp) {
  const testing::CliRun run = run_cli({"simulate", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("--copy-engines"));
  EXPECT_THAT(run.out, HasSubstr("--timeline"));
  EXPECT_THAT(run.out, HasSubstr("--json"));
}

}  // namespace
}  // namespace hyperoffload
