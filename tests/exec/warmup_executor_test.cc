#include "hyperoffload/exec/warmup_executor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <chrono>
#include <thread>

#include "exec/exec_fixture.h"
#include "exec/step_driver.h"
#include "hyperoffload/exec/op_time_store.h"
#include "hyperoffload/io/file.h"
#include "testing/cli_runner.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::HostRuntime;
using testing::StepDriver;

std::vector<std::pair<StorageId, AccessKind>> accesses_of(const Trace& trace, OpIndex op) {
  std::vector<std::pair<StorageId, AccessKind>> result;
  for (const Access& a : trace.accesses(op)) result.emplace_back(trace.storage(a.storage).id, a.kind);
  return result;
}

std::unique_ptr<WarmupExecutor> start(HostRuntime& rt, std::optional<std::int64_t> budget,
                                      OpTimes op_times = OpTimes::kMeasured) {
  WarmupOptions options;
  options.budget_bytes = budget;
  options.op_times = op_times;
  Result<std::unique_ptr<WarmupExecutor>> warmup = WarmupExecutor::start(rt.residency, options);
  EXPECT_TRUE(warmup.has_value()) << warmup.error().message;
  return std::move(*warmup);
}

TEST(WarmupExecutor, RecordsAccessesSizesAndRetention) {
  HostRuntime rt;
  auto warmup = start(rt, std::nullopt);
  StepDriver step(*warmup);
  ASSERT_TRUE(step.op("embed", {}, {{1, 256}}));
  ASSERT_TRUE(step.op("relu_", {1}, {}, {1}));              // in place
  ASSERT_TRUE(step.op("mm", {1, 1}, {{2, 128}, {3, 64}}));  // the same input twice
  ASSERT_TRUE(step.free(1));
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  const Trace& trace = result->trace;
  ASSERT_EQ(trace.op_count(), 3);
  EXPECT_EQ(trace.op_name(0), "embed");
  EXPECT_EQ(trace.op_name(2), "mm");
  EXPECT_THAT(accesses_of(trace, 0), ElementsAre(std::pair{StorageId{1}, AccessKind::kWrite}));
  EXPECT_THAT(accesses_of(trace, 1),
              ElementsAre(std::pair{StorageId{1}, AccessKind::kRead}, std::pair{StorageId{1}, AccessKind::kWrite}));
  EXPECT_THAT(accesses_of(trace, 2),
              ElementsAre(std::pair{StorageId{1}, AccessKind::kRead}, std::pair{StorageId{1}, AccessKind::kRead},
                          std::pair{StorageId{2}, AccessKind::kWrite}, std::pair{StorageId{3}, AccessKind::kWrite}));
  ASSERT_EQ(trace.storage_count(), 3);
  EXPECT_EQ(trace.storage(0).id, 1);
  EXPECT_EQ(trace.storage(0).size_bytes, 256);
  EXPECT_FALSE(trace.storage(0).retained());  // freed during the step
  EXPECT_TRUE(trace.storage(1).retained());   // still held at the end
  EXPECT_TRUE(trace.storage(2).retained());
  EXPECT_EQ(trace.memory_limit_bytes(), std::nullopt);
  EXPECT_THAT(result->guide.outputs(2), ElementsAre(1, 2));
  EXPECT_THAT(result->guide.mutated(1), ElementsAre(0));
  EXPECT_EQ(result->stats.ops, 3);
  EXPECT_EQ(result->stats.evictions, 0);
  EXPECT_EQ(result->stats.peak_resident_bytes, 256 + 128 + 64);
  EXPECT_EQ(result->stats.resident_at_end_bytes, 128 + 64);
  warmup.reset();
  rt.expect_nothing_held();
}

// The framework marks ops deterministic; the trace keeps the mark only where
// the op produced a storage and wrote no input, or rewrote in place one input
// whose version a marked op made (an in-place follower: ir/trace.h,
// Recomputable and Note [In-place units]).
TEST(WarmupExecutor, RecordsAMarkedOpAsRecomputableWhenItProducedOrRewroteWhatAMarkedOpMade) {
  HostRuntime rt;
  auto warmup = start(rt, std::nullopt);
  auto marked_op = [&](const std::string& name, std::vector<StorageId> inputs, std::vector<OpOutput> outputs,
                       std::vector<StorageId> written) -> Status {
    HO_RETURN_IF_ERROR(warmup->on_op_begin(name, inputs, written));
    HO_RETURN_IF_ERROR(warmup->mark_recomputable());
    for (const OpOutput& out : outputs) HO_RETURN_IF_ERROR(warmup->allocate_output(out.id, out.size_bytes));
    return warmup->on_op_end(outputs, written);
  };
  ASSERT_TRUE(marked_op("embed", {}, {{1, 64}}, {}));      // 0: produces storage 1
  ASSERT_TRUE(marked_op("relu_", {1}, {}, {1}));           // 1: rewrites what op 0 made: a follower
  ASSERT_TRUE(marked_op("sum", {1}, {}, {}));              // 2: produces nothing
  ASSERT_TRUE(marked_op("mm", {1}, {{2, 32}, {3, 16}}, {}));  // 3: two new storages
  StepDriver step(*warmup);
  ASSERT_TRUE(step.op("dropout", {2}, {{4, 32}}));         // 4: not marked (seeded randomness)
  ASSERT_TRUE(marked_op("mul_", {4}, {}, {4}));            // 5: rewrites what unmarked op 4 made
  ASSERT_TRUE(marked_op("add_", {1, 3}, {}, {1, 3}));      // 6: rewrites two storages
  ASSERT_TRUE(marked_op("relu_", {1}, {}, {1}));           // 7: rewrites what unmarked op 6 made
  EXPECT_FALSE(warmup->mark_recomputable());               // outside an op
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  const Trace& trace = result->trace;
  ASSERT_EQ(trace.op_count(), 8);
  EXPECT_TRUE(trace.op_recomputable(0));
  EXPECT_TRUE(trace.op_recomputable(1));
  EXPECT_EQ(trace.op_unit_previous(1), 0);
  EXPECT_FALSE(trace.op_recomputable(2));
  EXPECT_TRUE(trace.op_recomputable(3));
  EXPECT_FALSE(trace.op_recomputable(4));
  EXPECT_FALSE(trace.op_recomputable(5));
  EXPECT_FALSE(trace.op_recomputable(6));
  EXPECT_FALSE(trace.op_recomputable(7));
  warmup.reset();
  rt.expect_nothing_held();
}

TEST(WarmupExecutor, EvictsTheOldestProducedStorageTheOpDoesNotUse) {
  // Budget 300. Every allocation and page-in first makes room for itself.
  //   op0 a: -> 1 (100)     100
  //   op1 b: 1 -> 2 (100)   200
  //   op2 c: -> 3 (150)     200 + 150 > 300: evict 1 (oldest, op0) → 100; +3 → 250
  //   op3 d: 3 -> 4 (50)    250 + 50 = 300: fits
  //   op4 e: 1, 4 -> ∅      paging 1 back needs 100 of room: evict 2 (oldest
  //                         left that e does not use) → 200; fault 1 → 300
  // Then 1, 3 and 4 are freed; 2 is still held at the end, so it is paged back
  // (100 resident). The peak is the budget.
  HostRuntime rt;
  auto warmup = start(rt, 300);
  StepDriver step(*warmup);
  ASSERT_TRUE(step.op("a", {}, {{1, 100}}));
  ASSERT_TRUE(step.op("b", {1}, {{2, 100}}));
  ASSERT_TRUE(step.op("c", {}, {{3, 150}}));
  ASSERT_TRUE(step.op("d", {3}, {{4, 50}}));
  EXPECT_FALSE(rt.residency.resident(1));
  EXPECT_TRUE(rt.residency.resident(2));
  ASSERT_TRUE(step.op("e", {1, 4}, {}));  // checks 1's bytes after the page-in
  EXPECT_TRUE(rt.residency.resident(1));
  EXPECT_FALSE(rt.residency.resident(2));
  for (StorageId id : {1, 3, 4}) ASSERT_TRUE(step.free(id));
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->stats.evictions, 2);
  EXPECT_EQ(result->stats.faults, 1);
  EXPECT_EQ(result->stats.fault_bytes, 100);
  EXPECT_EQ(result->stats.d2h_count, 2);
  EXPECT_EQ(result->stats.d2h_bytes, 200);
  EXPECT_EQ(result->stats.peak_resident_bytes, 300);
  EXPECT_EQ(result->stats.end_restores, 1);
  EXPECT_EQ(result->stats.resident_at_end_bytes, 100);
  EXPECT_EQ(result->trace.memory_limit_bytes(), 300);
  warmup.reset();
  rt.expect_nothing_held();
}

TEST(WarmupExecutor, AmongStoragesOfOneOpEvictsTheLargestFirst) {
  // Budget 400. op0 produces 5 (50), 6 (200), 7 (200): 450, nothing else to
  // evict. op1's output 8 (100) needs room: 550 > 400 → evict 6 (largest of
  // op0's; lowest id among equals) → 250; +8 → 350.
  HostRuntime rt;
  auto warmup = start(rt, 400);
  StepDriver step(*warmup);
  ASSERT_TRUE(step.op("a", {}, {{5, 50}, {6, 200}, {7, 200}}));
  ASSERT_TRUE(step.op("b", {}, {{8, 100}}));
  ASSERT_TRUE(step.op("c", {8}, {}));
  EXPECT_FALSE(rt.residency.resident(6));
  EXPECT_TRUE(rt.residency.resident(5));
  EXPECT_TRUE(rt.residency.resident(7));
  ASSERT_TRUE(warmup->finish());
  warmup.reset();
  rt.expect_nothing_held();
}

TEST(WarmupExecutor, WithTheDeviceCapacityAtTheBudgetAllocationsEvictToFit) {
  // The arena holds 256 bytes; each output is 128. An op producing two outputs
  // while two older storages are resident must evict both of them to allocate.
  HostRuntime rt(256);
  auto warmup = start(rt, 256);
  StepDriver step(*warmup);
  ASSERT_TRUE(step.op("a", {}, {{1, 128}, {2, 128}}));
  ASSERT_TRUE(step.op("b", {}, {{3, 128}, {4, 128}}));
  ASSERT_TRUE(step.op("c", {1, 2}, {}));
  for (StorageId id : {1, 2, 3, 4}) ASSERT_TRUE(step.free(id));
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_LE(result->stats.peak_held_bytes, 256);
  EXPECT_EQ(rt.backend->device_memory_stats().peak_bytes, 256);
  warmup.reset();
  rt.expect_nothing_held();
}

TEST(WarmupExecutor, MakesRoomForCallerBuffersBeforeAdoptingThem) {
  // Budget 300; the caller's buffers of 200 bytes each are adopted at on_op_end.
  //   op0 a: -> 1 (200)   room for 200: 0 + 200 <= 300; adopt → 200
  //   op1 b: -> 2 (200)   room for 200: 200 + 200 > 300 → evict 1 (its
  //                       release callback runs once the D2H read it) → 0;
  //                       adopt → 200
  // Adopting first would have peaked at 400.
  HostRuntime rt;
  auto warmup = start(rt, 300);
  std::vector<char> one(200, 1), two(200, 2);
  std::vector<void*> released;
  auto release = [&released](void* ptr) { released.push_back(ptr); };
  ASSERT_TRUE(warmup->on_op_begin("a", {}, {}));
  const OpOutput out1[] = {{1, 200, one.data(), release}};
  ASSERT_TRUE(warmup->on_op_end(out1, {}));
  ASSERT_TRUE(warmup->on_op_begin("b", {}, {}));
  const OpOutput out2[] = {{2, 200, two.data(), release}};
  ASSERT_TRUE(warmup->on_op_end(out2, {}));
  EXPECT_FALSE(rt.residency.resident(1));
  EXPECT_TRUE(rt.residency.resident(2));
  ASSERT_TRUE(warmup->on_storage_freed(1));
  ASSERT_TRUE(warmup->on_storage_freed(2));
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->stats.peak_resident_bytes, 200);
  EXPECT_EQ(result->stats.evictions, 1);
  EXPECT_EQ(result->stats.d2h_bytes, 200);
  warmup.reset();
  rt.expect_nothing_held();
  EXPECT_THAT(released, ElementsAre(static_cast<void*>(one.data())));
}

TEST(WarmupExecutor, NeverEvictsAStorageTheOpWritesWithoutReadingIt) {
  // Budget 300. op0 produces 1 (200, runtime memory); op1 writes 1 in place
  // without reading it (it reaches the runtime only through device_ptr) and
  // adopts a caller buffer of 100 at on_op_end:
  //   room for 100: 200 + 100 <= 300 → nothing to evict, 1 stays → 300.
  // With a 150-byte buffer the room needed (200 + 150 > 300) could only come
  // from evicting 1, which op1 is writing: it must stay, so the op overshoots
  // (350) rather than lose the write.
  HostRuntime rt;
  auto warmup = start(rt, 300);
  ASSERT_TRUE(warmup->on_op_begin("a", {}, {}));
  Result<void*> one = warmup->allocate_output(1, 200);
  ASSERT_TRUE(one.has_value());
  const OpOutput out1[] = {{1, 200, nullptr, {}}};
  ASSERT_TRUE(warmup->on_op_end(out1, {}));

  std::vector<char> two(150, 2);
  ASSERT_TRUE(warmup->on_op_begin("fill_", {}, {}));
  Result<void*> written = warmup->device_ptr(1, DeviceAccess::kReadWrite);
  ASSERT_TRUE(written.has_value()) << written.error().message;
  const OpOutput out2[] = {{2, 150, two.data(), {}}};
  const StorageId mutated[] = {1};
  Status ended = warmup->on_op_end(out2, mutated);
  ASSERT_TRUE(ended.has_value()) << ended.error().message;
  EXPECT_TRUE(rt.residency.resident(1));
  ASSERT_TRUE(warmup->on_storage_freed(1));
  ASSERT_TRUE(warmup->on_storage_freed(2));
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->stats.evictions, 0);
  EXPECT_EQ(result->stats.peak_resident_bytes, 350);
  warmup.reset();
  rt.expect_nothing_held();
}

TEST(WarmupExecutor, AStoragePagedInThroughDevicePtrCanBeEvictedAgain) {
  // Budget 100, storages of 60 bytes:
  //   op0 a:  -> 1                        60
  //   op1 b:  -> 2: room: 60 + 60 > 100 → evict 1 → 0; +2 → 60
  //   op2 c:  writes 1 without reading it (device_ptr pages it in): room:
  //           60 + 60 > 100 → evict 2 → 0; page in 1 → 60
  //   op3 d:  reads 2: room: evict 1 (op3 does not use it) → 0; page in 2 → 60
  // Three evictions, two faults, never above 60. (Storage 1, paged in through
  // device_ptr, once stayed out of the eviction order: op3 then found nothing
  // to evict and peaked at 120.)
  HostRuntime rt;
  auto warmup = start(rt, 100);
  ASSERT_TRUE(warmup->on_op_begin("a", {}, {}));
  ASSERT_TRUE(warmup->allocate_output(1, 60));
  const OpOutput out1[] = {{1, 60, nullptr, {}}};
  ASSERT_TRUE(warmup->on_op_end(out1, {}));
  ASSERT_TRUE(warmup->on_op_begin("b", {}, {}));
  ASSERT_TRUE(warmup->allocate_output(2, 60));
  const OpOutput out2[] = {{2, 60, nullptr, {}}};
  ASSERT_TRUE(warmup->on_op_end(out2, {}));
  ASSERT_TRUE(warmup->on_op_begin("c", {}, {}));
  ASSERT_TRUE(warmup->device_ptr(1, DeviceAccess::kReadWrite));
  const StorageId mutated[] = {1};
  ASSERT_TRUE(warmup->on_op_end({}, mutated));
  const StorageId inputs[] = {2};
  ASSERT_TRUE(warmup->on_op_begin("d", inputs, {}));
  ASSERT_TRUE(warmup->on_op_end({}, {}));
  EXPECT_FALSE(rt.residency.resident(1));
  EXPECT_TRUE(rt.residency.resident(2));
  ASSERT_TRUE(warmup->on_storage_freed(1));
  ASSERT_TRUE(warmup->on_storage_freed(2));
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->stats.evictions, 3);
  EXPECT_EQ(result->stats.faults, 2);
  EXPECT_EQ(result->stats.peak_resident_bytes, 60);
  warmup.reset();
  rt.expect_nothing_held();
}

TEST(WarmupExecutor, MeasuresOpDurationsWithEvents) {
  HostRuntime rt;
  auto warmup = start(rt, std::nullopt);
  ASSERT_TRUE(warmup->on_op_begin("sleep", {}, {}));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(warmup->on_op_end({}, {}));
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value());
  EXPECT_GE(result->trace.op_duration_ms(0), 9.5);
  EXPECT_LT(result->trace.op_duration_ms(0), 5000.0);
}

// Note [Op times without the room they wait for]. Budget 1 MiB on a link of
// 1/64 GiB/s (16 MiB/s: a 1 MiB copy takes 62.5 ms either way). Op b's output
// needs room: s1 is evicted and the allocation waits for its copy to host,
// 62.5 ms, inside b's span; then b works 10 ms. Op c reaches s1 through
// device_ptr: s2 is evicted and s1 paged back, each copy 62.5 ms, inside c's
// span; then c works 10 ms. Each records its 10 ms (at least 9.5, and well
// under the 72.5 ms or more that counting the room would give).
TEST(WarmupExecutor, OpTimesLeaveOutTheRoomMadeInsideTheOp) {
  constexpr std::int64_t kMiB = 1 << 20;
  HostRuntime rt(64 << 20, std::int64_t{1} << 40, CopyEngines::kTwo, 50, 1.0 / 64.0);
  auto warmup = start(rt, kMiB);
  StepDriver step(*warmup);
  ASSERT_TRUE(step.op("a", {}, {{1, kMiB}}));
  ASSERT_TRUE(warmup->on_op_begin("b", {}, {}));
  ASSERT_TRUE(warmup->allocate_output(2, kMiB).has_value());
  EXPECT_FALSE(rt.residency.resident(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(warmup->on_op_end({{OpOutput{2, kMiB, nullptr, {}}}}, {}));
  ASSERT_TRUE(warmup->on_op_begin("c", {}, {}));
  ASSERT_TRUE(warmup->device_ptr(1, DeviceAccess::kRead).has_value());
  EXPECT_FALSE(rt.residency.resident(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(warmup->on_op_end({}, {}));
  for (StorageId id : {1, 2}) ASSERT_TRUE(step.free(id));
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->stats.evictions, 2);
  for (OpIndex op : {1, 2}) {
    EXPECT_GE(result->trace.op_duration_ms(op), 9.5) << "op " << op;
    EXPECT_LT(result->trace.op_duration_ms(op), 40.0) << "op " << op;
  }
  warmup.reset();
  rt.expect_nothing_held();
}

// Note [Reproducible plans]: log2 then round to the nearest integer.
TEST(WarmupExecutor, QuantizedTimesAreRoundedToPowersOfTwo) {
  EXPECT_EQ(recorded_duration_ms(0.005, OpTimes::kQuantized), 0.0);   // below 10 us
  EXPECT_EQ(recorded_duration_ms(0.3, OpTimes::kQuantized), 0.25);    // log2 0.3 = -1.74 -> -2
  EXPECT_EQ(recorded_duration_ms(11.0, OpTimes::kQuantized), 8.0);    // 3.46 -> 3
  EXPECT_EQ(recorded_duration_ms(12.0, OpTimes::kQuantized), 16.0);   // 3.58 -> 4
  EXPECT_EQ(recorded_duration_ms(0.3, OpTimes::kMeasured), 0.3);
  EXPECT_EQ(recorded_bandwidth_gib_per_s(3.1, OpTimes::kQuantized), 4.0);  // 1.63 -> 2
  EXPECT_EQ(recorded_bandwidth_gib_per_s(5.0, OpTimes::kQuantized), 4.0);  // 2.32 -> 2
  EXPECT_EQ(recorded_bandwidth_gib_per_s(6.0, OpTimes::kQuantized), 8.0);  // 2.58 -> 3
  EXPECT_EQ(recorded_bandwidth_gib_per_s(6.0, OpTimes::kMeasured), 6.0);
}

TEST(WarmupExecutor, QuantizedTimesTakeTheMedianOfOpsAlike) {
  // Three "sleep" ops alike (same name, no accesses) of about 3, 13 and 40 ms:
  // each records their median, about 13 ms, rounded: 16 (between 11.3 and
  // 22.6 every power of two rounds to 16; a loaded machine only lengthens a
  // sleep, and the median stays below 22.6 unless it is slowed 1.7 times).
  // "other" is alone in its group: its own time, < 10 us on a quiet machine
  // (0); a preemption between its begin and end on a loaded one can record a
  // few tens of us (2^-6 ms was seen under a full parallel ctest), never the
  // sleeps' 16.
  HostRuntime rt;
  auto warmup = start(rt, std::nullopt, OpTimes::kQuantized);
  for (int ms : {3, 13, 40}) {
    ASSERT_TRUE(warmup->on_op_begin("sleep", {}, {}));
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    ASSERT_TRUE(warmup->on_op_end({}, {}));
  }
  ASSERT_TRUE(warmup->on_op_begin("other", {}, {}));
  ASSERT_TRUE(warmup->on_op_end({}, {}));
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value());
  for (OpIndex op = 0; op < 3; ++op) EXPECT_EQ(result->trace.op_duration_ms(op), 16.0) << op;
  EXPECT_LT(result->trace.op_duration_ms(3), 1.0);
}

TEST(WarmupExecutor, AReFedOpTakesItsMeasuredTwinsTime) {
  // The first "sleep" is re-fed (catching up: another executor ran it, about
  // 0 ms here); its twin sleeps 13 ms, which records 16 (as above). The re-fed
  // op takes 16 too. "lonely" is re-fed with no measured twin: 0.
  HostRuntime rt;
  auto warmup = start(rt, std::nullopt, OpTimes::kQuantized);
  warmup->begin_catch_up();
  for (const char* name : {"sleep", "lonely"}) {
    ASSERT_TRUE(warmup->on_op_begin(name, {}, {}));
    ASSERT_TRUE(warmup->on_op_end({}, {}));
  }
  warmup->end_catch_up();
  ASSERT_TRUE(warmup->on_op_begin("sleep", {}, {}));
  std::this_thread::sleep_for(std::chrono::milliseconds(13));
  ASSERT_TRUE(warmup->on_op_end({}, {}));
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result->trace.op_duration_ms(0), 16.0);
  EXPECT_EQ(result->trace.op_duration_ms(1), 0.0);
  EXPECT_EQ(result->trace.op_duration_ms(2), 16.0);
}

// A step program of two ops, the first sleeping `sleep_ms` (a 4 KiB output,
// storage `id`), under a warmup with the store; returns the result.
WarmupResult warm_up_with_store(const OpTimeStoreOptions& store, int sleep_ms, StorageId id = 1,
                                std::int64_t size_bytes = 4096, OpTimes op_times = OpTimes::kQuantized) {
  HostRuntime rt;
  WarmupOptions options;
  options.op_times = op_times;
  options.op_time_store = store;
  auto warmup = std::move(*WarmupExecutor::start(rt.residency, options));
  StepDriver step(*warmup);
  EXPECT_TRUE(warmup->on_op_begin("sleep", {}, {}));
  std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  EXPECT_TRUE(warmup->on_op_end({}, {}));
  EXPECT_TRUE(step.op("write", {}, {{id, size_bytes}}));
  Result<WarmupResult> result = warmup->finish();
  EXPECT_TRUE(result.has_value()) << result.error().message;
  return std::move(*result);
}

// Note [Reproducible plans]: the first warmup of a program writes its
// recorded times, later ones plan from them. A 13 ms sleep records 16 and a
// 40 ms one 32 (log2 40 = 5.32 -> 5; a loaded machine only lengthens a
// sleep, and 40 ms stays below 45.25, the midpoint to 64, unless slowed 1.13
// times: so the second warmup's own time differs from the first's).
TEST(WarmupExecutor, OpTimeStoreGivesLaterWarmupsOfAProgramTheFirstOnesTimes) {
  const testing::ScratchDir dir;
  const OpTimeStoreOptions store{dir / "op_times", "test machine"};
  const WarmupResult first = warm_up_with_store(store, 13);
  EXPECT_EQ(first.trace.op_duration_ms(0), 16.0);
  // The warmup keys the program by the machine and its backend (the host backend here).
  const std::filesystem::path file =
      op_times_path(store, step_program_key(first.trace, store.machine + "; host backend"));
  ASSERT_TRUE(std::filesystem::exists(file));
  EXPECT_THAT(first.notes, ElementsAre("op times: recorded for later warmups of this step program (" +
                                       file.string() + ")"));

  // The same program (its storage under another id): the first one's times.
  const WarmupResult second = warm_up_with_store(store, 40, /*id=*/7);
  EXPECT_EQ(second.trace.op_duration_ms(0), 16.0);
  EXPECT_EQ(second.trace.d2h_bandwidth_gib_per_s(), first.trace.d2h_bandwidth_gib_per_s());
  EXPECT_EQ(second.trace.h2d_bandwidth_gib_per_s(), first.trace.h2d_bandwidth_gib_per_s());
  EXPECT_THAT(second.notes, ElementsAre("op times: as an earlier warmup of this step program recorded them on "
                                        "this machine (" + file.string() + ")"));

  // Another machine, another program (a larger output) or measured times: their own.
  EXPECT_EQ(warm_up_with_store({store.directory, "other machine"}, 40).trace.op_duration_ms(0), 32.0);
  EXPECT_EQ(warm_up_with_store(store, 40, 1, 8192).trace.op_duration_ms(0), 32.0);
  const WarmupResult measured = warm_up_with_store(store, 40, 1, 4096, OpTimes::kMeasured);
  EXPECT_GE(measured.trace.op_duration_ms(0), 39.5);
  EXPECT_THAT(measured.notes, ElementsAre());  // no store with measured times
  // 3 files: the program on two machines, and the larger program.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(store.directory), {}), 3);
}

TEST(WarmupExecutor, AStoredRecordThatCannotBeUsedIsReplaced) {
  const testing::ScratchDir dir;
  const OpTimeStoreOptions store{dir.path(), "test machine"};
  const std::string machine = store.machine + "; host backend";  // as the warmup keys it
  const std::uint64_t key = step_program_key(warm_up_with_store({dir / "elsewhere", store.machine}, 0).trace, machine);
  const std::filesystem::path file = op_times_path(store, key);
  // Not JSON; another op count; and times a trace cannot hold (1e300 ms, beyond
  // TraceBuilder's kMaxTotalMs), which the parser alone does not refuse.
  for (const std::string& bad : {std::string("{not json"),
                                 op_times_to_json(OpTimesRecord{machine, key, {1.0}, 1.0, 1.0}),
                                 op_times_to_json(OpTimesRecord{machine, key, {1e300, 0.0}, 1.0, 1.0})}) {
    ASSERT_TRUE(write_file_atomically(file, bad));
    const WarmupResult result = warm_up_with_store(store, 40);
    EXPECT_EQ(result.trace.op_duration_ms(0), 32.0);  // its own
    ASSERT_EQ(result.notes.size(), 2U);
    EXPECT_THAT(result.notes[0], HasSubstr("op times: ignored a stored record that cannot be used (" + file.string()));
    EXPECT_THAT(result.notes[1], HasSubstr("op times: recorded for later warmups"));
    Result<std::optional<OpTimesRecord>> now = load_op_times({store.directory, machine}, key, 2);
    ASSERT_TRUE(now.has_value()) << now.error().message;
    ASSERT_TRUE(now->has_value());
    EXPECT_EQ((*now)->durations_ms[0], 32.0);
  }
}

TEST(WarmupExecutor, OpTimeStoreThatCannotBeWrittenIsANote) {
  const testing::ScratchDir dir;
  const std::string blocker = dir.write("file", "not a directory");
  const WarmupResult result = warm_up_with_store({std::filesystem::path(blocker) / "op_times", "m"}, 0);
  ASSERT_EQ(result.notes.size(), 1U);
  EXPECT_THAT(result.notes[0], HasSubstr("op times: not stored: "));
  EXPECT_THAT(result.notes[0], HasSubstr("cannot create the directory"));
}

TEST(WarmupExecutor, MeasuresCopyBandwidthFromTheStepOrACalibrationCopy) {
  {
    HostRuntime rt;
    auto warmup = start(rt, 1 << 20);  // exceeded below: real copies happen
    StepDriver step(*warmup);
    ASSERT_TRUE(step.op("a", {}, {{1, 1 << 20}}));
    ASSERT_TRUE(step.op("b", {}, {{2, 1 << 20}}));
    ASSERT_TRUE(step.free(2));  // else 1 and 2 end the step held: 2 MiB, above the budget (a note)
    ASSERT_TRUE(step.op("c", {1}, {}));
    Result<WarmupResult> result = warmup->finish();
    ASSERT_TRUE(result.has_value());
    EXPECT_GT(result->stats.d2h_bytes, 0);
    EXPECT_GT(result->trace.d2h_bandwidth_gib_per_s(), 0.0);
    EXPECT_NE(result->trace.d2h_bandwidth_gib_per_s(), kDefaultBandwidthGiBPerS);
    EXPECT_NE(result->trace.h2d_bandwidth_gib_per_s(), kDefaultBandwidthGiBPerS);
    EXPECT_THAT(result->notes, ElementsAre());
  }
  {
    HostRuntime rt;
    Result<std::unique_ptr<WarmupExecutor>> warmup = WarmupExecutor::start(rt.residency, {std::nullopt, 0, std::nullopt});
    StepDriver step(**warmup);
    ASSERT_TRUE(step.op("a", {}, {{1, 4096}}));
    Result<WarmupResult> result = (*warmup)->finish();
    ASSERT_TRUE(result.has_value());
    EXPECT_EQ(result->trace.d2h_bandwidth_gib_per_s(), kDefaultBandwidthGiBPerS);
    ASSERT_EQ(result->notes.size(), 2u);
    EXPECT_THAT(result->notes[0], HasSubstr("d2h bandwidth not measured"));
  }
}

TEST(WarmupExecutor, RecordsAGivenCopyBandwidthInsteadOfMeasuringOne) {
  HostRuntime rt;
  auto warmup = std::move(*WarmupExecutor::start(rt.residency, {1 << 20, 4096, 0.5}));
  StepDriver step(*warmup);
  ASSERT_TRUE(step.op("a", {}, {{1, 1 << 20}}));
  ASSERT_TRUE(step.op("b", {}, {{2, 1 << 20}}));  // copies happen, and are not what the trace records
  ASSERT_TRUE(step.free(2));                      // within the budget to the end (no note)
  ASSERT_TRUE(step.op("c", {1}, {}));
  Result<WarmupResult> result = warmup->finish();
  ASSERT_TRUE(result.has_value());
  EXPECT_GT(result->stats.d2h_bytes, 0);
  EXPECT_EQ(result->trace.d2h_bandwidth_gib_per_s(), 0.5);
  EXPECT_EQ(result->trace.h2d_bandwidth_gib_per_s(), 0.5);
  EXPECT_THAT(result->notes, ElementsAre());
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    HostRuntime other;
    Result<std::unique_ptr<WarmupExecutor>> refused = WarmupExecutor::start(other.residency, {std::nullopt, 0, bad});
    ASSERT_FALSE(refused.has_value());
    EXPECT_THAT(refused.error().message, HasSubstr("copy bandwidth must be a finite number of GiB/s > 0"));
  }
}

TEST(WarmupExecutor, RejectsUntrackedInputsReusedIdsAndUnreportedOutputs) {
  HostRuntime rt;
  auto warmup = start(rt, std::nullopt);
  Status untracked = warmup->on_op_begin("x", std::vector<StorageId>{42}, {});
  ASSERT_FALSE(untracked.has_value());
  EXPECT_THAT(untracked.error().message, HasSubstr("op 0 (x): input storage 42 is not tracked in this step"));
  warmup.reset();
  rt.expect_nothing_held();

  warmup = start(rt, std::nullopt);
  StepDriver step(*warmup);
  ASSERT_TRUE(step.op("a", {}, {{1, 8}}));
  Status reused = step.op("b", {}, {{1, 8}});
  ASSERT_FALSE(reused.has_value());
  EXPECT_THAT(reused.error().message, HasSubstr("op 1 (b): output storage id 1 was already used in this step"));
  warmup.reset();
  rt.expect_nothing_held();

  warmup = start(rt, std::nullopt);
  ASSERT_TRUE(warmup->on_op_begin("c", {}, {}));
  ASSERT_TRUE(warmup->allocate_output(5, 16));
  Status unreported = warmup->on_op_end({}, {});
  ASSERT_FALSE(unreported.has_value());
  EXPECT_THAT(unreported.error().message, HasSubstr("storage 5 was allocated with allocate_output"));
  warmup.reset();
  rt.expect_nothing_held();
}

}  // namespace
}  // namespace hyperoffload
