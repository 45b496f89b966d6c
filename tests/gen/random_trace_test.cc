#include "hyperoffload/gen/random_trace.h"

#include <cmath>
#include <vector>

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

// Per op of `trace`: whether it may be marked as an in-place follower there
// (Note [In-place units] in ir/trace.h): it reads and writes one storage, all
// it writes, whose last writer before it is marked in `trace`.
std::vector<bool> follower_eligible(const Trace& trace) {
  std::vector<bool> out(static_cast<std::size_t>(trace.op_count()), false);
  std::vector<OpIndex> last_writer(static_cast<std::size_t>(trace.storage_count()), -1);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    StorageIndex written = -1;
    bool one = true, reads = false;
    for (const Access& access : trace.accesses(op)) {
      if (access.kind != AccessKind::kWrite) continue;
      if (written >= 0 && written != access.storage) one = false;
      written = access.storage;
    }
    for (const Access& access : trace.accesses(op)) {
      reads = reads || (access.kind == AccessKind::kRead && access.storage == written);
    }
    if (written >= 0 && one && reads) {
      const OpIndex previous = last_writer[static_cast<std::size_t>(written)];
      out[static_cast<std::size_t>(op)] = previous >= 0 && trace.op_recomputable(previous);
    }
    for (const Access& access : trace.accesses(op)) {
      if (access.kind == AccessKind::kWrite) last_writer[static_cast<std::size_t>(access.storage)] = op;
    }
  }
  return out;
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
      OpIndex& first = first_access[static_cast<std::size_t>(access.storage)];
      if (first < 0) first = op;
    }
  }
  const std::vector<bool> follows_all = follower_eligible(all);
  const std::vector<bool> follows_half = follower_eligible(half);
  int eligible_ops = 0, marked_half = 0, followers = 0;
  for (OpIndex op = 0; op < all.op_count(); ++op) {
    // The fraction only marks ops: the accesses and durations are the same.
    ASSERT_EQ(half.accesses(op).size(), none.accesses(op).size());
    EXPECT_EQ(half.op_duration_ms(op), none.op_duration_ms(op));
    const bool may = eligible(all, op, first_access);
    eligible_ops += may ? 1 : 0;
    followers += follows_all[static_cast<std::size_t>(op)] ? 1 : 0;
    // 1.0 marks exactly the eligible ops and followers; 0.5 a subset of them.
    EXPECT_EQ(all.op_recomputable(op), may || follows_all[static_cast<std::size_t>(op)]) << "op " << op;
    EXPECT_EQ(all.op_unit_previous(op) >= 0, follows_all[static_cast<std::size_t>(op)]) << "op " << op;
    if (half.op_recomputable(op)) {
      EXPECT_TRUE(may || follows_half[static_cast<std::size_t>(op)]) << "op " << op;
      marked_half += may ? 1 : 0;
    }
  }
  ASSERT_GT(eligible_ops, 50);
  EXPECT_GT(followers, 0);
  // A binomial draw around half of the eligible ops (within 5 standard deviations).
  EXPECT_NEAR(marked_half, eligible_ops / 2.0, 5 * std::sqrt(eligible_ops / 4.0));
}

}  // namespace
}  // namespace hyperoffload
