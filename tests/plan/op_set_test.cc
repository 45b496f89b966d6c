// OpSet (plan/common/op_set.h) against std::set, and hand-made cases across
// its word and level boundaries.
#include "hyperoffload/plan/common/op_set.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace hyperoffload::internal {
namespace {

TEST(OpSet, FindsTheLargestAtOrBeforeAcrossWordsAndLevels) {
  // 5,000 positions: three levels (79 words, then 2, then 1).
  OpSet set(5000);
  EXPECT_EQ(set.at_or_before(4999), OpSet::kNone);
  set.insert(0);
  set.insert(63);
  set.insert(64);
  set.insert(4095);  // the last position under the first word of the level above the words
  set.insert(4999);
  EXPECT_EQ(set.at_or_before(0), 0);
  EXPECT_EQ(set.at_or_before(62), 0);
  EXPECT_EQ(set.at_or_before(63), 63);
  EXPECT_EQ(set.at_or_before(64), 64);
  EXPECT_EQ(set.at_or_before(4094), 64);   // back through 62 empty words
  EXPECT_EQ(set.at_or_before(4096), 4095);  // into the previous upper word
  EXPECT_EQ(set.at_or_before(4998), 4095);
  EXPECT_EQ(set.at_or_before(4999), 4999);
  OpSet one(1);
  EXPECT_EQ(one.at_or_before(0), OpSet::kNone);
  one.insert(0);
  EXPECT_EQ(one.at_or_before(0), 0);
}

TEST(OpSet, MatchesAStdSetUnderRandomInserts) {
  std::mt19937_64 rng(31);
  for (int round = 0; round < 30; ++round) {
    const std::size_t size = 1 + rng() % (round % 2 == 0 ? 300 : 300'000);
    OpSet set(size);
    std::set<std::size_t> reference;
    for (int step = 0; step < 2000; ++step) {
      if (rng() % 3 == 0) {
        const std::size_t position = rng() % size;
        set.insert(position);
        reference.insert(position);
      }
      const std::size_t at = rng() % size;
      const auto after = reference.upper_bound(at);
      const std::int64_t want = after == reference.begin() ? OpSet::kNone : static_cast<std::int64_t>(*std::prev(after));
      ASSERT_EQ(set.at_or_before(at), want) << "round " << round << " step " << step << " at " << at;
    }
  }
}

}  // namespace
}  // namespace hyperoffload::internal
