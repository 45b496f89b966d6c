#include "hyperoffload/gen/random_trace.h"

#include <cmath>

#include <gtest/gtest.h>

namespace hyperoffload {
namespace {

RandomTraceOptions options_with(double recomputable_fraction) {
  RandomTraceOptions options;
  options.op_count = 400;
  options.storage_count = 200;
  options.seed = 7;
  options.recomputable_fraction = recomputable_fraction;
  return options;
}

// Whether an op may be marked: it writes, and every storage it writes is
// first accessed by that write, without the op also reading it.
bool eligible(const Trace& trace, OpIndex op, const std::vector<OpIndex>& first_access) {
  bool writes = false;
  for (const Access& access : trace.accesses(op)) {
    if (access.kind != AccessKind::kWrite) continue;
    writes = true;
    if (first_access[static_cast<std::size_t>(access.storage)] != op) return false;
    for (const Access& other : trace.accesses(op)) {
      if (other.storage == access.storage && other.kind == AccessKind::kRead) return false;
    }
  }
  return writes;
}

TEST(RandomTrace, MarksTheRequestedShareOfEligibleOpsRecomputableWithoutChangingTheAccesses) {
  const Trace none = generate_random_trace(options_with(0.0));
  const Trace half = generate_random_trace(options_with(0.5));
  const Trace all = generate_random_trace(options_with(1.0));
  EXPECT_FALSE(none.has_recomputable_ops());
  ASSERT_EQ(half.op_count(), none.op_count());
  std::vector<OpIndex> first_access(static_cast<std::size_t>(all.storage_count()), -1);
  for (OpIndex op = 0; op < all.op_count(); ++op) {
    for (const Access& access : all.accesses(op)) {
      if (first_access[static_cast<std::size_t>(access.storage)] < 0) first_access[static_cast<std::size_t>(access.storage)] = op;
    }
  }
  int eligible_ops = 0, marked_half = 0;
  for (OpIndex op = 0; op < all.op_count(); ++op) {
    // The fraction only marks ops: the accesses and durations are the same.
    ASSERT_EQ(half.accesses(op).size(), none.accesses(op).size());
    EXPECT_EQ(half.op_duration_ms(op), none.op_duration_ms(op));
    const bool may = eligible(all, op, first_access);
    eligible_ops += may ? 1 : 0;
    // 1.0 marks exactly the eligible ops; 0.5 a subset of them.
    EXPECT_EQ(all.op_recomputable(op), may) << "op " << op;
    if (half.op_recomputable(op)) {
      EXPECT_TRUE(may) << "op " << op;
      ++marked_half;
    }
  }
  ASSERT_GT(eligible_ops, 50);
  // A binomial draw around half of the eligible ops (within 5 standard deviations).
  EXPECT_NEAR(marked_half, eligible_ops / 2.0, 5 * std::sqrt(eligible_ops / 4.0));
}

}  // namespace
}  // namespace hyperoffload
