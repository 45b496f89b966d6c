// Event simulator: exact times on hand-built traces.
//
// Every trace here copies at 1000 MiB/s (0.9765625 GiB/s), so a storage of N MiB
// takes exactly N ms to copy (N/1000 s, exact in binary for N <= 1000), and op
// durations are whole milliseconds: every expected time is an exact integer.
// In the ASCII timelines one column is 1 ms; "c" is the compute stream, "d" the
// D2H engine, "h" the H2D engine, "e" the single shared engine.
#include "hyperoffload/sim/simulator.h"

#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::actions;
using testing::TraceDsl;

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr double kOneMiBPerMs = 1000.0 / 1024.0;  // GiB/s

Schedule schedule_of(std::string_view text) { return Schedule{"test", actions(text)}; }

SimulationResult run(const Trace& trace, std::string_view schedule, CopyEngines engines = CopyEngines::kTwo) {
  SimulatorOptions options;
  options.copy_engines = engines;
  options.record_timeline = RecordTimeline::kYes;
  return simulate(trace, schedule_of(schedule), options);
}

// The spans of one lane as "kind op storage start end" strings, for readable
// failure messages.
std::vector<std::string> lane(const SimulationResult& result, Lane which) {
  static constexpr const char* kNames[] = {"op", "stall", "fault", "d2h", "h2d", "recompute"};
  std::vector<std::string> out;
  for (const TimelineSpan& span : result.timeline.spans) {
    if (span.lane != which) continue;
    std::string text = std::string(kNames[static_cast<int>(span.kind)]) + " " + std::to_string(span.op);
    if (span.storage >= 0) text += " s" + std::to_string(span.storage);
    out.push_back(text + " " + std::to_string(static_cast<int>(span.start_ms)) + "-" +
                  std::to_string(static_cast<int>(span.end_ms)));
    EXPECT_EQ(span.start_ms, static_cast<int>(span.start_ms)) << "non-integer time in " << text;
    EXPECT_EQ(span.end_ms, static_cast<int>(span.end_ms)) << "non-integer time in " << text;
  }
  return out;
}

// Memory samples as "time:MiB".
std::vector<std::string> memory(const SimulationResult& result) {
  std::vector<std::string> out;
  for (const MemorySample& sample : result.timeline.memory) {
    out.push_back(std::to_string(static_cast<int>(sample.time_ms)) + ":" + std::to_string(sample.device_bytes / kMiB));
  }
  return out;
}

TEST(Simulator, RunsOpsBackToBackWithoutASchedule) {
  // storage 1: 4 MiB, storage 2: 2 MiB.
  //   c: [a 0-3][b 3-5][c 5-6]
  //   memory: +4 at 0 (a starts), +2 at 3 (b starts) -> 6 MiB from 3 ms.
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 2 * kMiB)
                          .op("a", "W1", 3)
                          .op("b", "R1 W2", 2)
                          .op("c", "R2", 1)
                          .build();
  const SimulationResult result = run(trace, "");
  EXPECT_TRUE(result.valid());
  EXPECT_EQ(result.compute_ms, 6.0);
  EXPECT_EQ(result.makespan_ms, 6.0);
  EXPECT_EQ(result.stall_ms, 0.0);
  EXPECT_EQ(result.peak_bytes_timed, 6 * kMiB);
  EXPECT_EQ(result.peak_time_ms, 3.0);
  EXPECT_EQ(result.peak_bytes(), 6 * kMiB);
  EXPECT_EQ(result.d2h_bytes, 0);
  EXPECT_EQ(result.h2d_bytes, 0);
  EXPECT_THAT(lane(result, Lane::kCompute), ElementsAre("op 0 0-3", "op 1 3-5", "op 2 5-6"));
  EXPECT_THAT(memory(result), ElementsAre("0:4", "3:6"));
}

// storage 1: 4 MiB, written by op 0 and offloaded after it; storage 2: 1 MiB.
//   c: [a 0-1][b 1-11 ..........]
//   d:        [D2H s1 1-5]
// The release of storage 1 is issued at 1 ms but waits for its D2H (5 ms).
Trace offload_trace() {
  return TraceDsl()
      .bandwidth(kOneMiBPerMs)
      .storage(1, 4 * kMiB)
      .storage(2, 1 * kMiB)
      .op("a", "W1", 1)
      .op("b", "W2", 10)
      .build();
}

TEST(Simulator, OverlapsAnOffloadWithCompute) {
  const SimulationResult result = run(offload_trace(), "post 0 copy_d2h 1; post 0 release_device 1");
  EXPECT_THAT(lane(result, Lane::kCompute), ElementsAre("op 0 0-1", "op 1 1-11"));
  EXPECT_THAT(lane(result, Lane::kCopy0), ElementsAre("d2h 0 s1 1-5"));
  EXPECT_EQ(result.stall_ms, 0.0);
  EXPECT_EQ(result.makespan_ms, 11.0);
  EXPECT_EQ(result.d2h_bytes, 4 * kMiB);
  EXPECT_EQ(result.d2h_count, 1);
}

TEST(Simulator, DelaysAReleaseUntilItsD2HCompletesRaisingTheTimedPeak) {
  // memory: +4 at 0; +1 at 1 (b's first access) = 5; -4 at 5 (the delayed free).
  // The validator frees storage 1 right after op 0, so its op-granular peak is
  // 4 MiB (op 0) while 5 MiB are allocated from 1 ms to 5 ms.
  const SimulationResult result = run(offload_trace(), "post 0 copy_d2h 1; post 0 release_device 1");
  EXPECT_THAT(memory(result), ElementsAre("0:4", "1:5", "5:1"));
  EXPECT_EQ(result.peak_bytes(), 4 * kMiB);
  EXPECT_EQ(result.validation.peak_op, 0);
  EXPECT_EQ(result.peak_bytes_timed, 5 * kMiB);
  EXPECT_EQ(result.peak_time_ms, 1.0);
}

TEST(Simulator, WaitsForTheDelayedFreeWhenMemoryIsCappedAtTheBudget) {
  // The same plan on a device that holds only 4 MiB: b's 1 MiB cannot be taken
  // until storage 1's D2H ends and its release frees 4 MiB at 5 ms.
  //   c: [a 0-1][wait 1-5][b 5-15 ..........]
  //   d:        [D2H s1 1-5]
  //   memory: +4 at 0; -4 at 5; +1 at 5 -> never above 4 MiB.
  SimulatorOptions options;
  options.record_timeline = RecordTimeline::kYes;
  options.budget_bytes = 4 * kMiB;
  options.device_memory = DeviceMemory::kBudget;
  const SimulationResult result =
      simulate(offload_trace(), schedule_of("post 0 copy_d2h 1; post 0 release_device 1"), options);
  EXPECT_THAT(lane(result, Lane::kCompute), ElementsAre("op 0 0-1", "stall 1 1-5", "op 1 5-15"));
  EXPECT_THAT(memory(result), ElementsAre("0:4", "5:0", "5:1"));
  EXPECT_EQ(result.peak_bytes_timed, 4 * kMiB);
  EXPECT_EQ(result.memory_stall_ms, 4.0);
  EXPECT_EQ(result.stall_ms, 4.0);
  EXPECT_EQ(result.makespan_ms, 15.0);
  // A budget that holds both needs no waiting: the unlimited timeline.
  options.budget_bytes = 5 * kMiB;
  const SimulationResult roomy =
      simulate(offload_trace(), schedule_of("post 0 copy_d2h 1; post 0 release_device 1"), options);
  EXPECT_EQ(roomy.stall_ms, 0.0);
  EXPECT_EQ(roomy.peak_bytes_timed, 5 * kMiB);
}

TEST(Simulator, DelaysAPrefetchUntilItsMemoryIsFreedWhenCapped) {
  // storage 1 (4 MiB) offloaded after op 0 and prefetched before op 2; storage 2
  // (4 MiB) lives in op 1 only. Budget 4 MiB, two engines.
  //   c: [a 0-1][wait 1-5][b 5-7][wait 7-11][c 11-12]
  //   d:        [D2H s1 1-5]
  //   h:                        [H2D s1 7-11]
  // b's 4 MiB waits for s1's release (5 ms); the prefetch issued before c (at
  // b's end, 7 ms) reserves its 4 MiB at once: s2's release at 7 ms, earlier in
  // program order, has freed them.
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 4 * kMiB)
                          .op("a", "W1", 1)
                          .op("b", "W2", 2)
                          .op("c", "R1", 1)
                          .build();
  SimulatorOptions options;
  options.record_timeline = RecordTimeline::kYes;
  options.budget_bytes = 4 * kMiB;
  options.device_memory = DeviceMemory::kBudget;
  const SimulationResult result = simulate(
      trace, schedule_of("post 0 copy_d2h 1; post 0 release_device 1; post 1 release_device 2; pre 2 copy_h2d 1"),
      options);
  EXPECT_TRUE(result.valid());
  EXPECT_THAT(lane(result, Lane::kCompute),
              ElementsAre("op 0 0-1", "stall 1 1-5", "op 1 5-7", "stall 2 7-11", "op 2 11-12"));
  EXPECT_THAT(lane(result, Lane::kCopy1), ElementsAre("h2d 2 s1 7-11"));
  EXPECT_EQ(result.peak_bytes_timed, 4 * kMiB);
  EXPECT_THAT(memory(result), ElementsAre("0:4", "5:0", "5:4", "7:0", "7:4"));
  EXPECT_EQ(result.memory_stall_ms, 4.0);  // c's wait is for the copy, not for memory
  EXPECT_EQ(result.stall_ms, 8.0);
}

TEST(Simulator, ReleasesAtOnceWithoutACopyInFlight) {
  // Releasing without a D2H frees at issue time (1 ms), before b's allocation at
  // the same instant (program order): 4, then 0 and 1 at 1 ms; peak 4 at 0 ms.
  const SimulationResult result = run(offload_trace(), "post 0 release_device 1");
  EXPECT_THAT(memory(result), ElementsAre("0:4", "1:0", "1:1"));
  EXPECT_EQ(result.peak_bytes_timed, 4 * kMiB);
  EXPECT_EQ(result.peak_time_ms, 0.0);
}

TEST(Simulator, EndsTheMakespanWithATrailingCopy) {
  // Storage 1 is 16 MiB: its D2H (1-17) outlasts op b (1-11).
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 16 * kMiB)
                          .op("a", "W1", 1)
                          .op("b", "", 10)
                          .build();
  const SimulationResult result = run(trace, "post 0 copy_d2h 1");
  EXPECT_EQ(result.compute_ms, 11.0);
  EXPECT_EQ(result.stall_ms, 0.0);
  EXPECT_EQ(result.makespan_ms, 17.0);
}

// storage 1: 4 MiB offloaded after op a and read again by the last op;
// storage 2: 1 MiB.
constexpr const char* kOffloadAndPrefetch = "post 0 copy_d2h 1; post 0 release_device 1; pre 2 copy_h2d 1";

TEST(Simulator, HidesAPrefetchIssuedEarly) {
  // The prefetch is issued before op c (at 6 ms) and done at 10, before op d
  // needs storage 1 at 11:
  //   c: [a 0-1][b 1-6   ][c 6-11   ][d 11-12]
  //   d:        [D2H 1-5]
  //   h:                 [H2D 6-10]
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 1 * kMiB)
                          .op("a", "W1", 1)
                          .op("b", "W2", 5)
                          .op("c", "R2", 5)
                          .op("d", "R1", 1)
                          .build();
  const SimulationResult result = run(trace, kOffloadAndPrefetch);
  EXPECT_TRUE(result.valid());
  EXPECT_THAT(lane(result, Lane::kCompute), ElementsAre("op 0 0-1", "op 1 1-6", "op 2 6-11", "op 3 11-12"));
  EXPECT_THAT(lane(result, Lane::kCopy1), ElementsAre("h2d 2 s1 6-10"));
  EXPECT_EQ(result.stall_ms, 0.0);
  EXPECT_EQ(result.makespan_ms, 12.0);
  EXPECT_EQ(result.overhead_percent(), 0.0);
  // memory: +4 at 0, +1 at 1, -4 at 5 (free after the D2H), +4 at 6 (H2D start).
  EXPECT_THAT(memory(result), ElementsAre("0:4", "1:5", "5:1", "6:5"));
  EXPECT_EQ(result.peak_bytes_timed, 5 * kMiB);
  EXPECT_EQ(result.peak_time_ms, 1.0);
  EXPECT_EQ(result.h2d_bytes, 4 * kMiB);
  EXPECT_EQ(result.h2d_count, 1);
}

TEST(Simulator, StallsForTheWholeTransferOfALastMomentPrefetch) {
  // The prefetch is issued before the op that reads storage 1 (at 6 ms):
  //   c: [a 0-1][b 1-6   ]....[c 10-11]     stall 6-10 = the 4 ms transfer
  //   d:        [D2H 1-5]
  //   h:                 [H2D 6-10]
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 1 * kMiB)
                          .op("a", "W1", 1)
                          .op("b", "W2", 5)
                          .op("c", "R1", 1)
                          .build();
  const SimulationResult result = run(trace, kOffloadAndPrefetch);
  EXPECT_THAT(lane(result, Lane::kCompute), ElementsAre("op 0 0-1", "op 1 1-6", "stall 2 6-10", "op 2 10-11"));
  EXPECT_EQ(result.compute_ms, 7.0);
  EXPECT_EQ(result.stall_ms, 4.0);
  EXPECT_EQ(result.makespan_ms, 11.0);
  EXPECT_DOUBLE_EQ(result.overhead_percent(), 100.0 * 4.0 / 7.0);
}

TEST(Simulator, StartsAPrefetchOnlyAfterItsStoragesD2HCompletes) {
  // storage 1 is 8 MiB, so its D2H (1-9) is still running when the prefetch
  // is issued at 3 ms; the H2D waits for it:
  //   c: [a 0-1][b 1-3]..............[c 17-18]     stall 3-17
  //   d:        [D2H 1-9 ]
  //   h:                 [H2D 9-17 ]
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 8 * kMiB)
                          .storage(2, 1 * kMiB)
                          .op("a", "W1", 1)
                          .op("b", "W2", 2)
                          .op("c", "R1", 1)
                          .build();
  const SimulationResult result = run(trace, kOffloadAndPrefetch);
  EXPECT_THAT(lane(result, Lane::kCopy0), ElementsAre("d2h 0 s1 1-9"));
  EXPECT_THAT(lane(result, Lane::kCopy1), ElementsAre("h2d 2 s1 9-17"));
  EXPECT_EQ(result.stall_ms, 14.0);
  EXPECT_EQ(result.makespan_ms, 18.0);
}

TEST(Simulator, AppliesEventsAtOneInstantInProgramOrder) {
  // Same trace: at 9 ms the delayed free of storage 1 (issued after op 0) and
  // the prefetch's allocation (issued before op 2) coincide. Program order puts
  // the free first, so 8 MiB are never counted twice:
  //   0: +8 = 8;  1: +1 = 9;  9: -8 = 1, then +8 = 9.   Peak 9 MiB (not 17).
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 8 * kMiB)
                          .storage(2, 1 * kMiB)
                          .op("a", "W1", 1)
                          .op("b", "W2", 2)
                          .op("c", "R1", 1)
                          .build();
  const SimulationResult result = run(trace, kOffloadAndPrefetch);
  EXPECT_THAT(memory(result), ElementsAre("0:8", "1:9", "9:1", "9:9"));
  EXPECT_EQ(result.peak_bytes_timed, 9 * kMiB);
  EXPECT_EQ(result.peak_time_ms, 1.0);
}

TEST(Simulator, CountsAnAllocationFreedAtTheSameInstant) {
  // Op b takes no time: its storage 2 is allocated at 2 ms (b starts) and its
  // post release frees it at 2 ms (b ends). In program order the allocation
  // comes first, so 4 + 1 = 5 MiB are allocated for an instant.
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 1 * kMiB)
                          .op("a", "W1", 2)
                          .op("b", "W2", 0)
                          .op("c", "R1", 1)
                          .build();
  const SimulationResult result = run(trace, "post 1 release_device 2");
  EXPECT_THAT(memory(result), ElementsAre("0:4", "2:5", "2:4"));
  EXPECT_EQ(result.peak_bytes_timed, 5 * kMiB);
  EXPECT_EQ(result.peak_time_ms, 2.0);
  EXPECT_EQ(result.makespan_ms, 3.0);
}

// storage 1: 2 MiB, storage 2: 8 MiB. Storage 1 is offloaded after op a,
// storage 2 after op b, and storage 1 prefetched before op c reads it.
class CopyEngineOrdering : public ::testing::Test {
 protected:
  Trace trace_ = TraceDsl()
                     .bandwidth(kOneMiBPerMs)
                     .storage(1, 2 * kMiB)
                     .storage(2, 8 * kMiB)
                     .op("a", "W1", 1)
                     .op("b", "W2", 1)
                     .op("c", "R1", 1)
                     .build();
  std::string schedule_ =
      "post 0 copy_d2h 1; post 0 release_device 1; post 1 copy_d2h 2; post 1 release_device 2; pre 2 copy_h2d 1";
};

TEST_F(CopyEngineOrdering, TwoEnginesLetAPrefetchPassALongOffload) {
  //   c: [a 0-1][b 1-2]...[c 5-6]            stall 2-5
  //   d:        [D2H s1 1-3][D2H s2 3-11 ]
  //   h:                    [H2D s1 3-5]      after s1's D2H, not behind s2's
  const SimulationResult result = run(trace_, schedule_, CopyEngines::kTwo);
  EXPECT_THAT(lane(result, Lane::kCopy0), ElementsAre("d2h 0 s1 1-3", "d2h 1 s2 3-11"));
  EXPECT_THAT(lane(result, Lane::kCopy1), ElementsAre("h2d 2 s1 3-5"));
  EXPECT_THAT(lane(result, Lane::kCompute), ElementsAre("op 0 0-1", "op 1 1-2", "stall 2 2-5", "op 2 5-6"));
  EXPECT_EQ(result.stall_ms, 3.0);
  EXPECT_EQ(result.makespan_ms, 11.0);  // the D2H of storage 2
}

TEST_F(CopyEngineOrdering, OneEngineQueuesAPrefetchBehindEarlierOffloads) {
  //   c: [a 0-1][b 1-2]...........[c 13-14]   stall 2-13
  //   e:        [D2H s1 1-3][D2H s2 3-11 ][H2D s1 11-13]
  const SimulationResult result = run(trace_, schedule_, CopyEngines::kOne);
  EXPECT_THAT(lane(result, Lane::kCopy0), ElementsAre("d2h 0 s1 1-3", "d2h 1 s2 3-11", "h2d 2 s1 11-13"));
  EXPECT_THAT(lane(result, Lane::kCopy1), ElementsAre());
  EXPECT_EQ(result.stall_ms, 11.0);
  EXPECT_EQ(result.makespan_ms, 14.0);
  EXPECT_EQ(result.copy_engines, CopyEngines::kOne);
}

TEST(Simulator, ChargesAFaultAsASynchronousCopyAfterTheD2H) {
  // Storage 1 is offloaded after op a and never prefetched: op c faults. The
  // fault waits for the D2H (done at 5) and then copies 4 MiB on the compute
  // stream:
  //   c: [a 0-1][b 1-2]...[fault s1 5-9][c 9-10]    stall 2-5 + fault 5-9 = 7
  //   d:        [D2H s1 1-5]
  // memory: +4 at 0, +1 at 1, -4 at 5 (delayed free), +4 at 5 (fault).
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 1 * kMiB)
                          .op("a", "W1", 1)
                          .op("b", "W2", 1)
                          .op("c", "R1", 1)
                          .build();
  const SimulationResult result = run(trace, "post 0 copy_d2h 1; post 0 release_device 1");
  EXPECT_TRUE(result.valid());
  EXPECT_EQ(result.faults(), 1u);
  EXPECT_THAT(lane(result, Lane::kCompute),
              ElementsAre("op 0 0-1", "op 1 1-2", "stall 2 2-5", "fault 2 s1 5-9", "op 2 9-10"));
  EXPECT_EQ(result.stall_ms, 7.0);
  EXPECT_EQ(result.fault_ms, 4.0);
  EXPECT_EQ(result.makespan_ms, 10.0);
  EXPECT_EQ(result.h2d_bytes, 4 * kMiB);
  EXPECT_EQ(result.h2d_count, 0);
  EXPECT_THAT(memory(result), ElementsAre("0:4", "1:5", "5:1", "5:5"));
}

TEST(Simulator, RunsFaultsWhileAPrefetchIsStillCopying) {
  // Op c reads storage 3 (offloaded, never prefetched: a 1 MiB fault) and
  // storage 1 (4 MiB, prefetched). Both D2Hs are issued at 1 ms; storage 3's
  // queues behind storage 1's. The prefetch, issued at 3 ms, waits for storage
  // 1's D2H. The fault needs only storage 3's D2H, so it runs on the compute
  // stream while the prefetch is still on the H2D engine; then c waits for it:
  //   c: [a 0-1][b 1-3]......[fault s3 6-7]..[c 9-10]   stall 3-6, 7-9; fault 6-7
  //   d:        [D2H s1 1-5][D2H s3 5-6]
  //   h:                    [H2D s1 5-9   ]
  // (Waiting for the prefetch first would start c at 10, not 9.)
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(3, 1 * kMiB)
                          .op("a", "W1 W3", 1)
                          .op("b", "", 2)
                          .op("c", "R3 R1", 1)
                          .build();
  const SimulationResult result = run(trace,
                                      "post 0 copy_d2h 1; post 0 release_device 1; post 0 copy_d2h 3; "
                                      "post 0 release_device 3; pre 2 copy_h2d 1");
  EXPECT_THAT(lane(result, Lane::kCopy0), ElementsAre("d2h 0 s1 1-5", "d2h 0 s3 5-6"));
  EXPECT_THAT(lane(result, Lane::kCopy1), ElementsAre("h2d 2 s1 5-9"));
  EXPECT_THAT(lane(result, Lane::kCompute),
              ElementsAre("op 0 0-1", "op 1 1-3", "stall 2 3-6", "fault 2 s3 6-7", "stall 2 7-9", "op 2 9-10"));
  EXPECT_EQ(result.stall_ms, 6.0);
  EXPECT_EQ(result.fault_ms, 1.0);
  EXPECT_EQ(result.makespan_ms, 10.0);
}

TEST(Simulator, TakesNoTimeForNoOpCopies) {
  // The second D2H finds the host copy current and the H2D finds storage 1
  // resident: both are no-ops. Only one 4 MiB D2H runs (1-5).
  const Trace trace =
      TraceDsl().bandwidth(kOneMiBPerMs).storage(1, 4 * kMiB).op("a", "W1", 1).op("b", "R1", 1).build();
  const SimulationResult result = run(trace, "post 0 copy_d2h 1; post 0 copy_d2h 1; pre 1 copy_h2d 1");
  EXPECT_THAT(lane(result, Lane::kCopy0), ElementsAre("d2h 0 s1 1-5"));
  EXPECT_THAT(lane(result, Lane::kCopy1), ElementsAre());
  EXPECT_EQ(result.d2h_count, 1);
  EXPECT_EQ(result.h2d_count, 0);
  EXPECT_EQ(result.makespan_ms, 5.0);
  EXPECT_EQ(result.stall_ms, 0.0);
}

TEST(Simulator, ReportsAnInvalidScheduleAndKeepsSimulating) {
  // Storage 1 is released after op a without a host copy (data lost at op c),
  // and an action names an unknown storage. The simulation goes on as the
  // validator executes it: the release frees at 1 ms, before b's allocation;
  // the lost storage is taken again when c starts (2 ms), with no copy.
  //   memory: 0: +4 = 4;  1: -4 = 0, +1 = 1;  2: +4 = 5.
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 1 * kMiB)
                          .op("a", "W1", 1)
                          .op("b", "W2", 1)
                          .op("c", "R1", 1)
                          .build();
  const SimulationResult result = run(trace, "post 0 release_device 1; post 0 copy_h2d 99");
  EXPECT_FALSE(result.valid());
  EXPECT_EQ(result.validation.problem_count, 2u);
  EXPECT_THAT(result.validation.problems, ElementsAre(HasSubstr("unknown storage 99"), HasSubstr("data lost")));
  EXPECT_EQ(result.faults(), 0u);
  EXPECT_EQ(result.makespan_ms, 3.0);
  EXPECT_EQ(result.stall_ms, 0.0);
  EXPECT_EQ(result.h2d_bytes, 0);
  EXPECT_THAT(memory(result), ElementsAre("0:4", "1:0", "1:1", "2:5"));
  EXPECT_EQ(result.peak_bytes_timed, 5 * kMiB);
  EXPECT_EQ(result.peak_time_ms, 2.0);
}

TEST(Simulator, RunsActionsListedOutOfOrderInExecutionOrder) {
  // The last-moment prefetch schedule listed backwards: the validator reports
  // the order, and both run it in execution order (same times as above).
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 1 * kMiB)
                          .op("a", "W1", 1)
                          .op("b", "W2", 5)
                          .op("c", "R1", 1)
                          .build();
  const SimulationResult result = run(trace, "pre 2 copy_h2d 1; post 0 copy_d2h 1; post 0 release_device 1");
  EXPECT_FALSE(result.valid());
  EXPECT_THAT(result.validation.problems, ElementsAre(HasSubstr("out of execution order")));
  EXPECT_EQ(result.stall_ms, 4.0);
  EXPECT_EQ(result.makespan_ms, 11.0);
}

TEST(Simulator, DrawsTheTraceLimitOrTheGivenBudget) {
  const Trace trace = TraceDsl().storage(1, 100).op("a", "W1", 1).limit(150).build();
  SimulatorOptions options;
  options.record_timeline = RecordTimeline::kYes;
  EXPECT_EQ(simulate(trace, Schedule{}, options).timeline.budget_bytes, 150);
  EXPECT_EQ(simulate(trace, Schedule{}, options).budget_bytes, 150);
  options.budget_bytes = 120;
  EXPECT_EQ(simulate(trace, Schedule{}, options).timeline.budget_bytes, 120);
  const Trace unlimited = TraceDsl().storage(1, 100).op("a", "W1", 1).build();
  EXPECT_EQ(simulate(unlimited, Schedule{}).budget_bytes, -1);
}

TEST(Simulator, RecordsNoTimelineUnlessAsked) {
  const SimulationResult result = simulate(offload_trace(), schedule_of("post 0 copy_d2h 1"));
  EXPECT_TRUE(result.timeline.spans.empty());
  EXPECT_TRUE(result.timeline.memory.empty());
  EXPECT_EQ(result.makespan_ms, 11.0);
  EXPECT_EQ(result.peak_bytes_timed, 5 * kMiB);
}

TEST(Simulator, HandlesAnEmptyTrace) {
  const SimulationResult result = simulate(Trace{}, Schedule{});
  EXPECT_TRUE(result.valid());
  EXPECT_EQ(result.makespan_ms, 0.0);
  EXPECT_EQ(result.peak_bytes_timed, 0);
  EXPECT_EQ(result.overhead_percent(), 0.0);
}

// Found by fuzzing (fuzz/validate_simulate_fuzzer): 1e-323 ms of compute and a
// 2 ms stall made overhead_percent 2e325, an infinity, which --json printed as
// null. At 1 MiB/ms storage 1 (1 MiB) is copied out after op a in [0, 1] ms
// and faulted back before op b in [1, 2] ms: stall 2 ms, so the ratio saturates
// at the largest double.
TEST(Simulator, SaturatesTheOverheadOfASubnormalComputeTime) {
  const Trace trace = TraceDsl().bandwidth(kOneMiBPerMs).storage(1, kMiB).op("a", "W1", 1e-323).op("b", "R1").build();
  const SimulationResult result = run(trace, "post 0 copy_d2h 1; post 0 release_device 1");
  EXPECT_EQ(result.compute_ms, 1e-323);
  EXPECT_EQ(result.stall_ms, 2.0);
  EXPECT_EQ(result.overhead_percent(), std::numeric_limits<double>::max());
  EXPECT_THAT(simulation_to_json(result), HasSubstr("\"overhead_percent\": 1.7976931348623157e+308"));
}

TEST(Simulator, WritesTheJsonReport) {
  const SimulationResult result = run(offload_trace(), "post 0 copy_d2h 1; post 0 release_device 1");
  const std::string json = simulation_to_json(result);
  for (const char* key : {"\"valid\": true", "\"faults\": 0", "\"peak_bytes\": 4194304", "\"peak_bytes_timed\": 5242880",
                          "\"compute_ms\": 11.0", "\"makespan_ms\": 11.0", "\"stall_ms\": 0.0",
                          "\"d2h_bytes\": 4194304", "\"h2d_bytes\": 0", "\"peak_op\": 0", "\"peak_time_ms\": 1.0",
                          "\"overhead_percent\": 0.0", "\"copy_engines\": 2", "\"problem_count\": 0",
                          "\"problems\": []"}) {
    EXPECT_THAT(json, HasSubstr(key));
  }
}

// ---- Recompute (Note [Recompute timing] in simulator.cc) -------------------------

SimulationResult run_capped(const Trace& trace, std::string_view schedule, std::int64_t budget_bytes) {
  SimulatorOptions options;
  options.record_timeline = RecordTimeline::kYes;
  options.budget_bytes = budget_bytes;
  options.device_memory = DeviceMemory::kBudget;
  return simulate(trace, schedule_of(schedule), options);
}

// storage 1: 4 MiB (the input), storage 2: 2 MiB (op 1's output).
//   op 0 a W1 (1 ms); op 1 f R1 W2 (3 ms, recomputable); op 2 g R2 (1 ms);
//   op 3 h R2 R1 (2 ms).
Trace remat_trace() {
  return TraceDsl()
      .bandwidth(kOneMiBPerMs)
      .storage(1, 4 * kMiB)
      .storage(2, 2 * kMiB)
      .op("a", "W1", 1)
      .op("f", "R1 W2", 3, Recomputable::kYes)
      .op("g", "R2", 1)
      .op("h", "R2 R1", 2)
      .build();
}

TEST(SimulatorRecompute, RunsOnTheComputeStreamForTheSourceOpsDurationBeforeTheNextOp) {
  // Storage 2 is dropped after g and regenerated before h:
  //   c: [a 0-1][f 1-4 ][g 4-5][recompute f 5-8][h 8-10]
  // Its time is overhead, not stall: makespan 10 = compute 7 + stall 0 +
  // recompute 3. Memory: +4 at 0, +2 at 1; at 5 the release (-2) and then the
  // recompute's allocation, taken when it is issued (+2).
  const SimulationResult result = run(remat_trace(), "post 2 release_device 2; pre 3 recompute 1");
  EXPECT_TRUE(result.valid()) << result.validation.problems.front();
  EXPECT_THAT(lane(result, Lane::kCompute),
              ElementsAre("op 0 0-1", "op 1 1-4", "op 2 4-5", "recompute 1 5-8", "op 3 8-10"));
  EXPECT_THAT(memory(result), ElementsAre("0:4", "1:6", "5:4", "5:6"));
  EXPECT_EQ(result.compute_ms, 7.0);
  EXPECT_EQ(result.stall_ms, 0.0);
  EXPECT_EQ(result.recompute_ms, 3.0);
  EXPECT_EQ(result.recompute_count, 1);
  EXPECT_EQ(result.makespan_ms, 10.0);
  EXPECT_EQ(result.overhead_percent(), 100.0 * 3.0 / 7.0);
  EXPECT_EQ(result.stall_percent(), 0.0);
  EXPECT_EQ(result.peak_bytes_timed, 6 * kMiB);
  // The recompute span says what it re-ran and how much it regenerated.
  const TimelineSpan& span = result.timeline.spans[3];
  EXPECT_EQ(span.kind, SpanKind::kRecompute);
  EXPECT_EQ(span.op, 1);
  EXPECT_EQ(span.bytes, 2 * kMiB);
}

TEST(SimulatorRecompute, WaitsForAnInFlightCopyToDeviceOfAnInput) {
  // Storage 1 is offloaded after f and prefetched before h, where the recompute
  // needs it: the prefetch waits for the D2H (4-8) and runs 8-12; the recompute,
  // issued at 5, starts at 12. Its wait is stall:
  //   c: [a 0-1][f 1-4 ][g 4-5][stall 5-12      ][recompute f 12-15][h 15-17]
  //   d:              [D2H s1 4-8]
  //   h:                         [H2D s1 8-12]
  // makespan 17 = compute 7 + stall 7 + recompute 3.
  const SimulationResult result = run(remat_trace(),
                                      "post 1 copy_d2h 1; post 1 release_device 1; post 2 release_device 2; "
                                      "pre 3 copy_h2d 1; pre 3 recompute 1");
  EXPECT_TRUE(result.valid()) << result.validation.problems.front();
  EXPECT_THAT(lane(result, Lane::kCompute),
              ElementsAre("op 0 0-1", "op 1 1-4", "op 2 4-5", "stall 3 5-12", "recompute 1 12-15", "op 3 15-17"));
  EXPECT_THAT(lane(result, Lane::kCopy1), ElementsAre("h2d 3 s1 8-12"));
  EXPECT_EQ(result.stall_ms, 7.0);
  EXPECT_EQ(result.memory_stall_ms, 0.0);
  EXPECT_EQ(result.recompute_ms, 3.0);
  EXPECT_EQ(result.makespan_ms, 17.0);
}

TEST(SimulatorRecompute, AllocatesItsOutputsWhenIssuedAndWaitsForMemoryWhenCapped) {
  // storage 3 (2 MiB) is written by g and offloaded after it (D2H 5-7, so its
  // release frees memory at 7). The recompute of f, issued at 5, needs 2 MiB
  // for storage 2: on a 6 MiB device s1 (4) + s3 (2, not yet freed) leave no
  // room, so the host waits until 7:
  //   c: [a 0-1][f 1-4 ][g 4-5][wait 5-7][recompute f 7-10][h 10-12]
  //   d:                      [D2H s3 5-7]
  //   memory: 0:4, 1:6 (f), 4:4 (s2 released), 4:6 (g's s3), 7:4 (s3 freed),
  //   7:6 (the recompute's allocation) -- never above the budget.
  // Unlimited, the allocation is taken at issue (5), 8 MiB until 7.
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 2 * kMiB)
                          .storage(3, 2 * kMiB)
                          .op("a", "W1", 1)
                          .op("f", "R1 W2", 3, Recomputable::kYes)
                          .op("g", "R1 W3", 1)
                          .op("h", "R2 R1", 2)
                          .build();
  const std::string_view schedule =
      "post 1 release_device 2; post 2 copy_d2h 3; post 2 release_device 3; pre 3 recompute 1";
  const SimulationResult capped = run_capped(trace, schedule, 6 * kMiB);
  EXPECT_TRUE(capped.valid()) << capped.validation.problems.front();
  EXPECT_THAT(lane(capped, Lane::kCompute),
              ElementsAre("op 0 0-1", "op 1 1-4", "op 2 4-5", "stall 3 5-7", "recompute 1 7-10", "op 3 10-12"));
  EXPECT_THAT(memory(capped), ElementsAre("0:4", "1:6", "4:4", "4:6", "7:4", "7:6"));
  EXPECT_EQ(capped.memory_stall_ms, 2.0);
  EXPECT_EQ(capped.stall_ms, 2.0);
  EXPECT_EQ(capped.recompute_ms, 3.0);
  EXPECT_EQ(capped.makespan_ms, 12.0);  // compute 7 + stall 2 + recompute 3
  EXPECT_EQ(capped.peak_bytes_timed, 6 * kMiB);
  const SimulationResult unlimited = run(trace, std::string(schedule));
  EXPECT_THAT(memory(unlimited), ElementsAre("0:4", "1:6", "4:4", "4:6", "5:8", "7:6"));
  EXPECT_THAT(lane(unlimited, Lane::kCompute),
              ElementsAre("op 0 0-1", "op 1 1-4", "op 2 4-5", "recompute 1 5-8", "op 3 8-10"));
}

TEST(SimulatorRecompute, ReleasesItsInputsAndOutputsNoEarlierThanItsEnd) {
  // f also writes storage 3 (1 MiB), used by nobody: released after f, it is
  // regenerated by the recompute and dropped right after it, with storage 1
  // (the input, not needed by h). Both releases are issued at 5 and free their
  // memory at the recompute's end, 8:
  //   c: [a 0-1][f 1-4 ][g 4-5][recompute f 5-8][h 8-10]
  //   memory: 0:4, 1:7, 4:6 (s3), 5:4 (s2), 5:7 (recompute: s2 + s3), 8:3 (s1),
  //   8:2 (s3).
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 2 * kMiB)
                          .storage(3, 1 * kMiB)
                          .op("a", "W1", 1)
                          .op("f", "R1 W2 W3", 3, Recomputable::kYes)
                          .op("g", "R2", 1)
                          .op("h", "R2", 2)
                          .build();
  const SimulationResult result =
      run(trace,
          "post 1 release_device 3; post 2 release_device 2; pre 3 recompute 1; pre 3 release_device 1; "
          "pre 3 release_device 3");
  EXPECT_TRUE(result.valid()) << result.validation.problems.front();
  EXPECT_THAT(memory(result), ElementsAre("0:4", "1:7", "4:6", "5:4", "5:7", "8:3", "8:2"));
  EXPECT_EQ(result.peak_bytes_timed, 7 * kMiB);
  EXPECT_EQ(result.makespan_ms, 10.0);
}

TEST(SimulatorRecompute, StartsACopyToHostOfAnOutputNoEarlierThanItsEnd) {
  // A copy_d2h after the recompute: of its output storage 2 it waits for the
  // data (8), of its input storage 1 it starts at once (5).
  //   c: [a 0-1][f 1-4 ][g 4-5][recompute f 5-8][h 8-10]
  //   d:                                        [D2H s2 8-10]
  const SimulationResult output = run(remat_trace(), "post 2 release_device 2; pre 3 recompute 1; pre 3 copy_d2h 2");
  EXPECT_THAT(lane(output, Lane::kCopy0), ElementsAre("d2h 3 s2 8-10"));
  EXPECT_EQ(output.makespan_ms, 10.0);
  const SimulationResult input = run(remat_trace(), "post 2 release_device 2; pre 3 recompute 1; pre 3 copy_d2h 1");
  EXPECT_THAT(lane(input, Lane::kCopy0), ElementsAre("d2h 3 s1 5-9"));
}

TEST(SimulatorRecompute, IssuesThePhaseAfterItWithoutWaitingForIt) {
  // A recompute after g (post) runs 5-8; op h's pre actions are issued when g
  // ends (5), not when the recompute does, so the prefetch of storage 4 (1
  // MiB, offloaded after a) overlaps it:
  //   c: [a 0-1][f 1-4 ][g 4-5][recompute f 5-8][h 8-10]
  //   d:        [D2H s4 1-2]
  //   h:                      [H2D s4 5-6]
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 2 * kMiB)
                          .storage(4, 1 * kMiB)
                          .op("a", "W1 W4", 1)
                          .op("f", "R1 W2", 3, Recomputable::kYes)
                          .op("g", "R2", 1)
                          .op("h", "R2 R1 R4", 2)
                          .build();
  const SimulationResult result = run(trace,
                                      "post 0 copy_d2h 4; post 0 release_device 4; post 2 release_device 2; "
                                      "post 2 recompute 1; pre 3 copy_h2d 4");
  EXPECT_TRUE(result.valid()) << result.validation.problems.front();
  EXPECT_THAT(lane(result, Lane::kCompute),
              ElementsAre("op 0 0-1", "op 1 1-4", "op 2 4-5", "recompute 1 5-8", "op 3 8-10"));
  EXPECT_THAT(lane(result, Lane::kCopy1), ElementsAre("h2d 3 s4 5-6"));
  EXPECT_EQ(result.stall_ms, 0.0);
  EXPECT_EQ(result.makespan_ms, 10.0);
}

TEST(SimulatorRecompute, ChainsRecomputesBackToBack) {
  // Two levels: f makes 2 from 1, k makes 3 from 2; both dropped, both
  // recomputed before h, one after the other on the compute stream.
  //   c: [a 0-1][f 1-4 ][k 4-6][g 6-7][re f 7-10][re k 10-12][h 12-13]
  const Trace trace = TraceDsl()
                          .bandwidth(kOneMiBPerMs)
                          .storage(1, 4 * kMiB)
                          .storage(2, 2 * kMiB)
                          .storage(3, 1 * kMiB)
                          .op("a", "W1", 1)
                          .op("f", "R1 W2", 3, Recomputable::kYes)
                          .op("k", "R2 W3", 2, Recomputable::kYes)
                          .op("g", "", 1)
                          .op("h", "R3", 1)
                          .build();
  const SimulationResult result = run(trace,
                                      "post 2 release_device 2; post 2 release_device 3; pre 4 recompute 1; "
                                      "pre 4 recompute 2; pre 4 release_device 2");
  EXPECT_TRUE(result.valid()) << result.validation.problems.front();
  EXPECT_THAT(lane(result, Lane::kCompute), ElementsAre("op 0 0-1", "op 1 1-4", "op 2 4-6", "op 3 6-7",
                                                        "recompute 1 7-10", "recompute 2 10-12", "op 4 12-13"));
  EXPECT_EQ(result.recompute_ms, 5.0);
  EXPECT_EQ(result.recompute_count, 2);
  EXPECT_EQ(result.makespan_ms, 13.0);  // compute 8 + recompute 5
}

TEST(SimulatorRecompute, ReportsRecomputeInTheJson) {
  const SimulationResult result = run(remat_trace(), "post 2 release_device 2; pre 3 recompute 1");
  const std::string json = simulation_to_json(result);
  for (const char* key : {"\"recompute_ms\": 3.0", "\"recompute_count\": 1", "\"stall_ms\": 0.0",
                          "\"makespan_ms\": 10.0", "\"compute_ms\": 7.0"}) {
    EXPECT_THAT(json, HasSubstr(key));
  }
}

}  // namespace
}  // namespace hyperoffload
