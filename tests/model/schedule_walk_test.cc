// The one schedule walk: which hooks it calls, in which order, with which
// outcomes, and its op-granular memory model. An observer that logs every
// hook as a line makes the order visible.
#include "hyperoffload/model/schedule_walk.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAre;
using testing::actions;
using testing::TraceDsl;

const char* name(AccessOutcome outcome) {
  switch (outcome) {
    case AccessOutcome::kFirstAccess: return "first";
    case AccessOutcome::kResident: return "resident";
    case AccessOutcome::kFault: return "fault";
    case AccessOutcome::kDataLoss: return "lost";
  }
  return "?";
}
const char* name(CopyOutcome outcome) {
  switch (outcome) {
    case CopyOutcome::kNoOp: return "no-op";
    case CopyOutcome::kCopies: return "copies";
    case CopyOutcome::kError: return "error";
  }
  return "?";
}

// Logs each hook with the walk's memory after it (device/host bytes), and
// keeps a count per storage in its own data to show the data is per storage.
struct Log : WalkObserver<Log, int> {
  std::vector<std::string> lines;
  const WalkMemory* memory = nullptr;

  std::string bytes() const { return fmt::format("[{}/{}]", memory->device_bytes, memory->host_bytes); }
  void begin_op(OpIndex op) { lines.push_back(fmt::format("begin {}", op)); }
  void access(OpIndex op, const Access&, StorageIndex s, Storage state, AccessOutcome outcome) {
    ++state.data;
    lines.push_back(fmt::format("op {} s{} {} (seen {}x)", op, s, name(outcome), state.data));
  }
  void run_op(OpIndex op) { lines.push_back(fmt::format("run {} {}", op, bytes())); }
  void copy_to_host(const ResolvedAction& a, Storage, CopyOutcome outcome) {
    lines.push_back(fmt::format("d2h s{} {} {}", a.storage, name(outcome), bytes()));
  }
  void copy_to_device(const ResolvedAction& a, Storage, CopyOutcome outcome) {
    lines.push_back(fmt::format("h2d s{} {} {}", a.storage, name(outcome), bytes()));
  }
  void release_device(const ResolvedAction& a, Storage, bool released) {
    lines.push_back(fmt::format("release s{} {} {}", a.storage, released, bytes()));
  }
  void release_host(const ResolvedAction& a, Storage, bool released) {
    lines.push_back(fmt::format("release_host s{} {} {}", a.storage, released, bytes()));
  }
  void recompute_input(const ResolvedAction&, const RecomputeAccess& input, Storage, RecomputeInput outcome) {
    lines.push_back(fmt::format("input s{} {}", input.storage, outcome == RecomputeInput::kReady ? "ready" : "bad"));
  }
  void recompute_output(const ResolvedAction&, const RecomputeAccess& output, Storage, RecomputeOutput outcome) {
    lines.push_back(
        fmt::format("output s{} {}", output.storage, outcome == RecomputeOutput::kRegenerates ? "regenerates" : "not"));
  }
  void recompute(const ResolvedAction& a, const RecomputeAccesses&, std::int64_t regenerated_bytes) {
    lines.push_back(fmt::format("recompute op {} {}B {}", a.action().source_op, regenerated_bytes, bytes()));
  }
};

std::vector<std::string> walk(const Trace& trace, const char* schedule) {
  const Schedule parsed{"", actions(schedule)};  // the resolved actions point into it
  const std::vector<ResolvedAction> resolved = resolve_actions(trace, parsed, {});
  ScheduleWalk<Log> walk(trace, resolved);
  Log log;
  log.memory = &walk.memory();
  walk.run(log);
  return log.lines;
}

TEST(ScheduleWalk, CallsTheHooksInProgramOrderWithTheRulesOutcomesAndTheMemoryModel) {
  // s1 (100 B) written by a, offloaded after a, read by c; s2 (10 B) written
  // by b. Bytes as [device/host]: a takes s1 (100), its copy holds 100 on the
  // host, the release frees the device (0); b takes s2 (10); c's pre copy
  // back takes s1 again (110) and c finds it resident; the second copy to host
  // is a no-op (the host already holds s1's version 1) and releasing the host
  // copy frees it.
  const Trace trace = TraceDsl().storage(1, 100).storage(2, 10).op("a", "W1").op("b", "W2").op("c", "R1").build();
  EXPECT_THAT(walk(trace, "post 0 copy_d2h 1; post 0 release_device 1; pre 2 copy_h2d 1; post 2 copy_d2h 1;"
                          "post 2 release_host 1"),
              ElementsAre("begin 0", "op 0 s0 first (seen 1x)", "run 0 [100/0]", "d2h s0 copies [100/100]",
                          "release s0 true [0/100]", "begin 1", "op 1 s1 first (seen 1x)", "run 1 [10/100]",
                          "begin 2", "h2d s0 copies [110/100]", "op 2 s0 resident (seen 2x)", "run 2 [110/100]",
                          "d2h s0 no-op [110/100]", "release_host s0 true [110/0]"));
}

TEST(ScheduleWalk, ClassifiesFaultsDataLossAndFailedCopies) {
  // s1 is released after a with a host copy (b faults it in) and again
  // without one after b (c loses it; the walk counts its memory as taken, as
  // a first access would). The copy back of a resident storage is a no-op;
  // a copy to host of a released one is an error; so is releasing twice a
  // no-op.
  const Trace trace = TraceDsl().storage(1, 100).op("a", "W1").op("b", "R1").op("c", "R1").build();
  EXPECT_THAT(walk(trace, "post 0 copy_d2h 1; post 0 release_device 1; pre 1 release_device 1;"
                          "post 1 copy_h2d 1; post 1 release_host 1; post 1 release_device 1; post 1 copy_d2h 1"),
              ElementsAre("begin 0", "op 0 s0 first (seen 1x)", "run 0 [100/0]", "d2h s0 copies [100/100]",
                          "release s0 true [0/100]", "begin 1", "release s0 false [0/100]",
                          "op 1 s0 fault (seen 2x)", "run 1 [100/100]", "h2d s0 no-op [100/100]",
                          "release_host s0 true [100/0]", "release s0 true [0/0]", "d2h s0 error [0/0]", "begin 2",
                          "op 2 s0 lost (seen 3x)", "run 2 [100/0]"));
}

TEST(ScheduleWalk, RegeneratesARecomputesReleasedOutputsAndChecksItsInputs) {
  // f (recomputable) reads s1 and writes s2 (50 B); s2 is released after f
  // and recomputed before its reader: input s1 ready, output s2 regenerated
  // (50 B back on the device).
  const Trace trace = TraceDsl()
                          .storage(1, 10, Retention::kRetained)
                          .storage(2, 50)
                          .op("load", "W1")
                          .op("f", "R1 W2", 1.0, Recomputable::kYes)
                          .op("g", "")
                          .op("use", "R2")
                          .build();
  EXPECT_THAT(walk(trace, "post 1 release_device 2; pre 3 recompute 1"),
              ElementsAre("begin 0", "op 0 s0 first (seen 1x)", "run 0 [10/0]", "begin 1", "op 1 s0 resident (seen 2x)",
                          "op 1 s1 first (seen 1x)", "run 1 [60/0]", "release s1 true [10/0]", "begin 2",
                          "run 2 [10/0]", "begin 3", "input s0 ready", "output s1 regenerates",
                          "recompute op 1 50B [60/0]", "op 3 s1 resident (seen 2x)", "run 3 [60/0]"));
}

}  // namespace
}  // namespace hyperoffload
