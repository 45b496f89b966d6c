// The stress-trace generator (gen/stress_trace.h): its shape on a step small
// enough to derive by hand, and determinism.
#include "hyperoffload/gen/stress_trace.h"

#include <gtest/gtest.h>

namespace hyperoffload {
namespace {

TEST(StressTrace, AStepWithoutLayersIsTheLoadTheEmbeddingAndTheBackwardsBuffers) {
  // No forward block, so nothing is saved for the backward:
  //   op0 load W0 (s0 the shared storage) | op1 aten::embedding R0 W1 (x) |
  //   op2, op3 aten::zeros W2, W3 (the two gradient buffers) |
  //   op4 aten::ones_like R1 W4 (the gradient) | op5, op6 optimizer R2, R3
  // 7 ops, 5 storages, 9 accesses; nothing recomputable.
  StressTraceOptions options;
  options.layers = 0;
  options.gradient_buffers = 2;
  const Trace trace = generate_stress_trace(options);
  ASSERT_EQ(trace.op_count(), 7);
  EXPECT_EQ(trace.storage_count(), 5);
  EXPECT_EQ(trace.access_count(), 9u);
  EXPECT_EQ(trace.op_name(1), "aten::embedding");
  EXPECT_EQ(trace.op_name(4), "aten::ones_like");
  EXPECT_FALSE(trace.has_recomputable_ops());
}

TEST(StressTrace, IsDeterministicForASeedAndDiffersAcrossSeeds) {
  StressTraceOptions options;
  options.layers = 6;
  options.seed = 7;
  const Trace a = generate_stress_trace(options);
  const Trace b = generate_stress_trace(options);
  options.seed = 8;
  const Trace c = generate_stress_trace(options);
  ASSERT_EQ(a.op_count(), b.op_count());
  ASSERT_EQ(a.access_count(), b.access_count());
  for (OpIndex op = 0; op < a.op_count(); ++op) {
    ASSERT_EQ(a.op_name(op), b.op_name(op));
    ASSERT_EQ(a.op_duration_ms(op), b.op_duration_ms(op));
    ASSERT_EQ(a.op_recomputable(op), b.op_recomputable(op));
  }
  EXPECT_TRUE(a.has_recomputable_ops());
  EXPECT_TRUE(a.op_count() != c.op_count() || a.access_count() != c.access_count() ||
              a.total_compute_ms() != c.total_compute_ms());
}

}  // namespace
}  // namespace hyperoffload
