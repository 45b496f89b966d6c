// Trace, TraceBuilder, StorageAccesses and the unplanned memory profile.
#include "hyperoffload/ir/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAre;
using testing::TraceDsl;

// Op durations 1.5, 0, 2 ms: op 0 starts at 0, op 1 at 1.5, op 2 at 1.5 (op 1
// takes no time), and the step ends at 3.5; an empty trace starts and ends at 0.
TEST(OpStartMs, IsTheComputeOfTheOpsBefore) {
  const Trace trace = TraceDsl().op("a", "", 1.5).op("b", "", 0.0).op("c", "", 2.0).build();
  EXPECT_THAT(op_start_ms(trace), ElementsAre(0.0, 1.5, 1.5, 3.5));
  EXPECT_THAT(op_start_ms(TraceDsl().build()), ElementsAre(0.0));
}

TEST(TraceBuilder, InternsOpNames) {
  const Trace trace = TraceDsl().op("mm", "").op("add", "").op("mm", "").build();
  EXPECT_EQ(trace.op_names().size(), 2u);
  EXPECT_EQ(trace.op_name_index(0), trace.op_name_index(2));
  EXPECT_EQ(trace.op_name(2), "mm");
}

// Past the interning table's first growths (64 slots, at most half full):
// 3 rounds over 1000 names, each name interned once, in order of first use.
TEST(TraceBuilder, InternsManyNamesAcrossTableGrowth) {
  TraceBuilder builder;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(builder.add_op(fmt::format("layer{}.op", i)));
  }
  Result<Trace> trace = std::move(builder).build();
  ASSERT_TRUE(trace);
  ASSERT_EQ(trace->op_names().size(), 1000u);
  for (OpIndex op = 0; op < 3000; ++op) {
    ASSERT_EQ(trace->op_name_index(op), static_cast<std::uint32_t>(op % 1000));
    ASSERT_EQ(trace->op_name(op), fmt::format("layer{}.op", op % 1000));
  }
  // An empty name is a name like any other.
  TraceBuilder empty;
  ASSERT_TRUE(empty.add_op(""));
  ASSERT_TRUE(empty.add_op(""));
  Result<Trace> unnamed = std::move(empty).build();
  ASSERT_TRUE(unnamed);
  EXPECT_EQ(unnamed->op_names().size(), 1u);
}

// Note [Interning while it pays]: after the first 65,536 names the builder
// keeps interning only if at least 1 in 16 of them, 4,096, were found in the
// table. Two builders whose first 65,536 names differ in one repeat:
// 65,536 - h distinct names "n{i}" and then h repeats of "n0". With h = 4,096
// (4,096 x 16 = 65,536, not below it) interning goes on, so a later "n1"
// finds index 1 and the table keeps 61,440 names; with h = 4,095 it stops,
// so "n1" gets a new index, 61,441, the table's size before it.
TEST(TraceBuilder, StopsInterningWhereFewerThanOneNameInSixteenRepeats) {
  for (const std::size_t repeats : {std::size_t{4096}, std::size_t{4095}}) {
    SCOPED_TRACE(repeats);
    TraceBuilder builder;
    const std::size_t distinct = 65'536 - repeats;
    for (std::size_t i = 0; i < distinct; ++i) ASSERT_TRUE(builder.add_op(fmt::format("n{}", i)));
    for (std::size_t i = 0; i < repeats; ++i) ASSERT_TRUE(builder.add_op("n0"));
    ASSERT_TRUE(builder.add_op("n1"));
    const Trace trace = value_or_throw(std::move(builder).build());
    const bool interning = repeats == 4096;
    EXPECT_EQ(trace.op_name_index(65'536), interning ? 1u : static_cast<std::uint32_t>(distinct));
    EXPECT_EQ(trace.op_names().size(), interning ? distinct : distinct + 1);
    // Every op reads its own name either way.
    EXPECT_EQ(trace.op_name(65'536), "n1");
    EXPECT_EQ(trace.op_name(65'535), "n0");
    EXPECT_EQ(trace.op_name(static_cast<OpIndex>(distinct) - 1), fmt::format("n{}", distinct - 1));
  }
}

TEST(TraceBuilder, NamesOpsByTheIndexOfNamesItWasGiven) {
  const Trace source = TraceDsl().op("mm", "").op("add", "").build();
  TraceBuilder builder;
  builder.use_op_names(source.op_names_shared());
  ASSERT_TRUE(builder.add_named_op(source.op_name_index(1), 1.5).has_value());
  ASSERT_TRUE(builder.add_named_op(source.op_name_index(0)).has_value());
  // Names given this way are not interned: "mm" gets a second index, the
  // names list grows by one, and every op still reads its own name.
  ASSERT_TRUE(builder.add_op("mm").has_value());
  // The checks of add_op apply, naming the op's position.
  const Status bad = builder.add_named_op(0, -1.0);
  EXPECT_EQ(bad.error().message, "ops[3].duration_ms: must be a non-negative finite number, got -1");
  const Trace trace = value_or_throw(std::move(builder).build());
  ASSERT_EQ(trace.op_count(), 3);
  EXPECT_EQ(trace.op_name(0), "add");
  EXPECT_EQ(trace.op_name(1), "mm");
  EXPECT_EQ(trace.op_name(2), "mm");
  EXPECT_EQ(trace.op_names().size(), 3u);
  EXPECT_EQ(trace.op_duration_ms(0), 1.5);
}

// Ops added to a second builder and taken: the trace adding them to the
// first gives. The first builder holds "mm" (index 0); the second "add" then
// "mm" (its own indices 0, 1), which the first interns after its own: "add"
// gets index 1 and "mm" keeps 0, so the table is ["mm", "add"], as adding all
// three in order makes it. Durations 1, 0.5, 0.25 sum to 1.75 in order; the
// taken ops' accesses keep their storages and kinds (ids 7, 8 resolved in
// build()), and op 1's accesses start after op 0's one access.
TEST(TraceBuilder, TakesOpsAddedToAnotherAsIfAddedHere) {
  TraceBuilder builder;
  ASSERT_TRUE(builder.add_storage(7, 64));
  ASSERT_TRUE(builder.add_storage(8, 32));
  ASSERT_TRUE(builder.add_op("mm", 1.0));
  builder.add_access(7, AccessKind::kWrite);
  TraceBuilder tail;
  ASSERT_TRUE(tail.add_op("add", 0.5, Recomputable::kNo));
  tail.add_access(7, AccessKind::kRead);
  tail.add_access(8, AccessKind::kWrite);
  ASSERT_TRUE(tail.add_op("mm", 0.25));
  tail.add_access(8, AccessKind::kRead);
  ASSERT_TRUE(builder.take_ops(std::move(tail)));
  const Trace trace = value_or_throw(std::move(builder).build());
  ASSERT_EQ(trace.op_count(), 3);
  EXPECT_EQ(trace.op_names().size(), 2u);
  EXPECT_EQ(trace.op_name_index(1), 1u);
  EXPECT_EQ(trace.op_name_index(2), 0u);
  EXPECT_EQ(trace.op_name(1), "add");
  EXPECT_EQ(trace.total_compute_ms(), 1.75);
  EXPECT_EQ(trace.access_offset(1), 1u);
  ASSERT_EQ(trace.accesses(1).size(), 2u);
  EXPECT_EQ(trace.accesses(1)[0].storage, 0);
  EXPECT_EQ(trace.accesses(1)[1].storage, 1);
  EXPECT_EQ(trace.accesses(1)[1].kind, AccessKind::kWrite);
  ASSERT_EQ(trace.accesses(2).size(), 1u);
  EXPECT_EQ(trace.accesses(2)[0].storage, 1);

  // A taken op the first builder rejects is named by its place there: the
  // third op taken, after two added, is ops[4]. Its duration brings `second`
  // to 1 + 0.5e15 + (0.5e15 - 1) = 1e15 ms, the most a trace may hold, and
  // the first builder to 2 ms more.
  TraceBuilder first;
  ASSERT_TRUE(first.add_op("a", 1.0));
  ASSERT_TRUE(first.add_op("b", 1.0));
  TraceBuilder second;
  ASSERT_TRUE(second.add_op("c", 1.0));
  ASSERT_TRUE(second.add_op("d", 0.5e15));
  ASSERT_TRUE(second.add_op("e", 0.5e15 - 1.0));
  const Status taken = first.take_ops(std::move(second));
  ASSERT_FALSE(taken.has_value());
  EXPECT_THAT(taken.error().message, ::testing::StartsWith("ops[4].duration_ms: "));
}

TEST(TraceBuilder, ResolvesSparseAndDenseStorageIds) {
  // Sparse ids (far beyond 4x the count) use the hash map; both paths agree.
  const Trace sparse = TraceDsl().storage(1'000'000'000'000, 8).storage(5, 8).op("a", "W5 W1000000000000").build();
  EXPECT_EQ(sparse.find_storage(1'000'000'000'000), 0);
  EXPECT_EQ(sparse.find_storage(5), 1);
  EXPECT_EQ(sparse.accesses(0)[1].storage, 0);
  const Trace dense = TraceDsl().storage(1, 8).storage(0, 8).build();
  EXPECT_EQ(dense.find_storage(0), 1);
  EXPECT_EQ(dense.find_storage(2), std::nullopt);
  EXPECT_EQ(dense.find_storage(-3), std::nullopt);
}

TEST(TraceBuilder, ConvertsBandwidthToTransferTime) {
  // 1 GiB at 16 GiB/s = 62.5 ms; 256 MiB at 1 GiB/s = 250 ms.
  const Trace fast = TraceDsl().build();
  EXPECT_DOUBLE_EQ(fast.d2h_ms(kBytesPerGiB), 62.5);
  const Trace slow = TraceDsl().bandwidth(1.0).build();
  EXPECT_DOUBLE_EQ(slow.h2d_ms(256 << 20), 250.0);
}

TEST(TraceBuilder, RejectsInvalidLimitsAndBandwidths) {
  TraceBuilder negative_limit;
  negative_limit.set_memory_limit_bytes(-1);
  EXPECT_EQ(std::move(negative_limit).build().error().message,
            "memory_limit_bytes: must be non-negative or null, got -1");
  TraceBuilder nan_bandwidth;
  nan_bandwidth.set_d2h_bandwidth_gib_per_s(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(std::move(nan_bandwidth).build().error().message, "d2h_bandwidth_gbps: must be a positive number, got nan");
}

TEST(StorageAccesses, OrdersAccessesByOpAndListsFirstAppearance) {
  // op 0: W2 W1; op 1: R1 W1; op 2: R2.
  const Trace trace = TraceDsl().storage(1, 8).storage(2, 8).storage(3, 8).op("a", "W2 W1").op("b", "R1 W1").op("c", "R2").build();
  const StorageAccesses accesses(trace);
  ASSERT_EQ(accesses.of(0).size(), 3u);  // storage id 1
  EXPECT_EQ(accesses.of(0)[1].op, 1);
  EXPECT_EQ(accesses.of(0)[1].kind, AccessKind::kRead);
  EXPECT_EQ(accesses.of(0)[2].kind, AccessKind::kWrite);
  EXPECT_EQ(accesses.first_op(1), 0);
  EXPECT_EQ(accesses.last_op(1), 2);
  EXPECT_FALSE(accesses.accessed(2));  // storage id 3 is never used
  EXPECT_THAT(accesses.by_first_appearance(), ElementsAre(1, 0));
}

TEST(MemoryProfile, FreesNonRetainedStoragesAfterTheirLastAccess) {
  //   op:        0    1    2    3
  //   s1 (100):  W    R
  //   s2 (10):        W         (retained: stays to the end)
  //   s3 (1):              W    R
  //   bytes:    100  110   11   11
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 10, Retention::kRetained)
                          .storage(3, 1)
                          .op("a", "W1")
                          .op("b", "R1 W2")
                          .op("c", "W3")
                          .op("d", "R3")
                          .build();
  const StorageAccesses accesses(trace);
  EXPECT_THAT(unplanned_resident_bytes(trace, accesses), ElementsAre(100, 110, 11, 11));
  const PeakBytes peak = unplanned_peak(trace);
  EXPECT_EQ(peak.bytes, 110);
  EXPECT_EQ(peak.op, 1);
}

TEST(MemoryProfile, ReportsNoPeakOpForAnEmptyTrace) {
  EXPECT_EQ(unplanned_peak(Trace()).op, -1);
  EXPECT_EQ(unplanned_peak(Trace()).bytes, 0);
}

}  // namespace
}  // namespace hyperoffload
