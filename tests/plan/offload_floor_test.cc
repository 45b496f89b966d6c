// offload_floor (plan/planner.h): the peak model's floor, computed in one pass
// over the ops without the model.
#include <gtest/gtest.h>

#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/gen/stress_trace.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/planner.h"
#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using testing::TraceDsl;

UnavoidableFloor model_floor(const Trace& trace) {
  const StorageAccesses accesses(trace);
  return internal::build_peak_model(trace, accesses).floor;
}

TEST(OffloadFloor, IsWhatTheOpsTouchPlusWhatNoGapCanFree) {
  // Storage 1 (100 B) is read at ops 0 and 3: its gap frees it at ops 1-2.
  // Storage 2 (50 B) is written at op 1 and read at op 2: no interior gap.
  // Storage 3 (30 B, retained) is written at op 0 and stays to the end.
  // Storage 4 (0 B) counts nowhere.
  //   op:        0    1    2    3
  //   resident:  130  180  180  130
  //   freeable:  0    100  100  0
  //   floor:     130  80   80   130  -> 130 at op 0 (the first of the ties)
  const Trace trace = TraceDsl()
                          .storage(1, 100)
                          .storage(2, 50)
                          .storage(3, 30, Retention::kRetained)
                          .storage(4, 0)
                          .op("a", "W1 W3 W4")
                          .op("b", "W2")
                          .op("c", "R2 R4")
                          .op("d", "R1")
                          .build();
  const UnavoidableFloor floor = offload_floor(trace);
  EXPECT_EQ(floor.op, 0);
  EXPECT_EQ(floor.bytes, 130);
  EXPECT_EQ(model_floor(trace).op, 0);
  EXPECT_EQ(model_floor(trace).bytes, 130);
}

TEST(OffloadFloor, IsMinusOneOnAnEmptyTrace) {
  const UnavoidableFloor floor = offload_floor(TraceDsl().storage(1, 8).build());
  EXPECT_EQ(floor.op, -1);
  EXPECT_EQ(floor.bytes, 0);
}

TEST(OffloadFloor, EqualsThePeakModelsFloorOnRandomAndStressTraces) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    RandomTraceOptions options;
    options.seed = seed;
    options.op_count = 50 + static_cast<int>(seed * 37 % 400);
    options.storage_count = options.op_count / 2 + 1;
    options.zero_size_fraction = 0.1;
    options.retained_fraction = 0.2;
    options.in_place_fraction = 0.2;
    const Trace random = generate_random_trace(options);
    EXPECT_EQ(offload_floor(random).op, model_floor(random).op) << seed;
    EXPECT_EQ(offload_floor(random).bytes, model_floor(random).bytes) << seed;

    StressTraceOptions stress;
    stress.seed = seed;
    stress.layers = 2 + static_cast<std::int32_t>(seed % 6);
    const Trace stressed = generate_stress_trace(stress);
    EXPECT_EQ(offload_floor(stressed).op, model_floor(stressed).op) << seed;
    EXPECT_EQ(offload_floor(stressed).bytes, model_floor(stressed).bytes) << seed;
  }
}

}  // namespace
}  // namespace hyperoffload
