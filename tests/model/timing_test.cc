// The execution model's clocks: copy engines, the capped allocator, storage
// timing rules and StepClock, with exact hand-derived times.
#include <gtest/gtest.h>

#include "hyperoffload/model/capped_memory.h"
#include "hyperoffload/model/copy_engines.h"
#include "hyperoffload/model/step_clock.h"
#include "hyperoffload/model/storage_timing.h"

namespace hyperoffload {
namespace {

TEST(CopyEngineClock, RunsEachDirectionOnItsOwnFifoQueueWithTwoEngines) {
  // d: [1-5][5-7]      the second D2H, ready at 2, waits for the first
  // h:   [2-3]         the H2D does not wait for the D2Hs
  CopyEngineClock engines(CopyEngines::kTwo);
  const CopyWindow a = engines.run(CopyDirection::kToHost, 1.0, 4.0);
  const CopyWindow b = engines.run(CopyDirection::kToDevice, 2.0, 1.0);
  const CopyWindow c = engines.run(CopyDirection::kToHost, 2.0, 2.0);
  EXPECT_EQ(a.start_ms, 1.0);
  EXPECT_EQ(a.end_ms, 5.0);
  EXPECT_EQ(b.start_ms, 2.0);
  EXPECT_EQ(b.end_ms, 3.0);
  EXPECT_EQ(c.start_ms, 5.0);
  EXPECT_EQ(c.end_ms, 7.0);
  EXPECT_EQ(engines.last_end_ms(), 7.0);
  EXPECT_EQ(engines.free_ms(CopyDirection::kToDevice), 3.0);
  EXPECT_EQ(engines.lane(CopyDirection::kToHost), Lane::kCopy0);
  EXPECT_EQ(engines.lane(CopyDirection::kToDevice), Lane::kCopy1);
}

TEST(CopyEngineClock, SharesOneQueueInProgramOrderWithOneEngine) {
  // e: [1-5][5-6][6-8]
  CopyEngineClock engines(CopyEngines::kOne);
  EXPECT_EQ(engines.run(CopyDirection::kToHost, 1.0, 4.0).end_ms, 5.0);
  const CopyWindow h2d = engines.run(CopyDirection::kToDevice, 2.0, 1.0);
  EXPECT_EQ(h2d.start_ms, 5.0);
  EXPECT_EQ(h2d.end_ms, 6.0);
  EXPECT_EQ(engines.run(CopyDirection::kToHost, 0.0, 2.0).start_ms, 6.0);
  EXPECT_EQ(engines.lane(CopyDirection::kToDevice), Lane::kCopy0);
}

TEST(CappedMemory, WaitsForTheReleasesThatMakeRoom) {
  // cap 100: 80 at 0; release of those 80 completes at 5; 50 asked at 1 fits
  // only at 5; 30 more at 6 fits (50 + 30); 40 at 7 waits for the release at 9.
  CappedMemory memory(100);
  EXPECT_EQ(memory.allocate(0.0, 80), 0.0);
  memory.release(5.0, 80);
  EXPECT_EQ(memory.allocate(1.0, 50), 5.0);
  EXPECT_EQ(memory.allocate(6.0, 30), 6.0);
  memory.release(9.0, 50);
  EXPECT_EQ(memory.allocate(7.0, 40), 9.0);
}

TEST(CappedMemory, LetsAnAllocationOverTheCapGoAheadWhenNothingIsLeftToWaitFor) {
  // A plan below its floor: 150 never fits in 100, and waiting cannot help.
  CappedMemory memory(100);
  EXPECT_EQ(memory.allocate(2.0, 150), 2.0);
  memory.release(4.0, 150);
  EXPECT_EQ(memory.allocate(3.0, 100), 4.0);
  EXPECT_EQ(memory.allocate(3.5, 0), 3.5);  // nothing to allocate, nothing to wait for
}

TEST(StorageTiming, AppliesTheCopyRules) {
  StorageTiming timing{/*d2h_end_ms=*/5.0, /*h2d_end_ms=*/8.0};
  EXPECT_EQ(timing.to_device_start_ms(3.0), 5.0);  // after the copy to host
  EXPECT_EQ(timing.to_device_start_ms(6.0), 6.0);
  EXPECT_EQ(timing.ready_ms(), 8.0);
  EXPECT_EQ(timing.free_ms(2.0), 8.0);  // after both copies
  EXPECT_EQ(timing.free_ms(9.0), 9.0);
}

TEST(RecomputeHolds, DelayReleasesAndCopiesToHostOfWhatARecomputeUses) {
  RecomputeHolds holds;
  const StorageTiming idle;
  EXPECT_EQ(holds.free_ms(0, idle, 1.0), 1.0);  // no recompute yet
  holds.hold(0, 2, 7.0, /*written=*/false);     // an input of a recompute ending at 7
  holds.hold(1, 2, 7.0, /*written=*/true);      // its output
  EXPECT_EQ(holds.free_ms(0, idle, 5.0), 7.0);
  EXPECT_EQ(holds.free_ms(1, idle, 5.0), 7.0);
  EXPECT_EQ(holds.to_host_start_ms(0, 5.0), 5.0);  // an input's data is already there
  EXPECT_EQ(holds.to_host_start_ms(1, 5.0), 7.0);  // an output's exists at the end
}

TEST(StepClock, TimesCopiesReleasesAndRecomputesTogether) {
  // Two engines, device capped at 100 bytes, two storages.
  //   copy to host of s0 issued at 1, 4 ms: 1-5; release of s0 at 1 frees at 5.
  //   copy to device of s1 (60 B) issued at 2 with 80 B allocated: fits at 5
  //   (host waits), runs 5-8.
  //   recompute issued at 6 allocating 20 B (fits: 60 + 20), stream free at 6,
  //   input s1 ready at 8: runs 8-11 and holds s1 until 11.
  StepClock clock(CopyEngines::kTwo, 100, 2);
  std::vector<StorageTiming> timing(2);
  EXPECT_EQ(clock.allocate(0.0, 80), 0.0);
  const CopyWindow d2h = clock.copy_to_host(0, timing[0], 1.0, 4.0);
  EXPECT_EQ(d2h.start_ms, 1.0);
  EXPECT_EQ(d2h.end_ms, 5.0);
  EXPECT_EQ(clock.release(0, timing[0], 1.0, 80), 5.0);
  const StepClock::ToDevice h2d = clock.copy_to_device(timing[1], 2.0, 60, 3.0);
  EXPECT_EQ(h2d.host_ms, 5.0);
  EXPECT_EQ(h2d.copy.start_ms, 5.0);
  EXPECT_EQ(h2d.copy.end_ms, 8.0);
  clock.compute_ends(6.0);
  RecomputeAccesses accesses;
  accesses.inputs = {{1, 0, 0}};
  const StepClock::Recompute run = clock.recompute(accesses, 6.0, 20, timing[1].ready_ms(), 3.0);
  EXPECT_EQ(run.host_ms, 6.0);
  EXPECT_EQ(run.start_ms, 8.0);
  EXPECT_EQ(run.end_ms, 11.0);
  EXPECT_EQ(clock.stream_free_ms(), 11.0);
  EXPECT_EQ(clock.release(1, timing[1], 9.0, 60), 11.0);  // held by the recompute
  EXPECT_EQ(clock.copies_end_ms(), 8.0);
}

TEST(StepClock, NeverWaitsForMemoryWhenUnlimited) {
  StepClock clock(CopyEngines::kOne, std::nullopt, 1);
  EXPECT_FALSE(clock.capped());
  EXPECT_EQ(clock.allocate(3.0, std::int64_t{1} << 60), 3.0);
  StorageTiming timing;
  EXPECT_EQ(clock.copy_to_device(timing, 4.0, 10, 1.0).host_ms, 4.0);
}

}  // namespace
}  // namespace hyperoffload
