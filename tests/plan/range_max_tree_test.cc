#include "hyperoffload/plan/common/range_max_tree.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace hyperoffload::internal {
namespace {

// Five positions: 3 1 4 1 5.
TEST(RangeMaxTree, AddsToARangeAndAnswersMaximaOverRanges) {
  const std::vector<std::int64_t> values{3, 1, 4, 1, 5};
  RangeMaxTree tree(values);
  EXPECT_EQ(tree.size(), 5u);
  EXPECT_EQ(tree.max(), 5);
  EXPECT_EQ(tree.argmax(), 4u);
  EXPECT_EQ(tree.max(0, 3), 4);
  // +10 on positions 1..3: 3 11 14 11 5.
  tree.add(1, 3, 10);
  EXPECT_EQ(tree.max(), 14);
  EXPECT_EQ(tree.argmax(), 2u);
  EXPECT_EQ(tree.max(0, 1), 11);
  EXPECT_EQ(tree.max(3, 4), 11);
  EXPECT_EQ(tree.at(0), 3);
  EXPECT_EQ(tree.at(4), 5);
  // -3 on position 2 alone: 3 11 11 11 5; the leftmost of the three ties.
  tree.add(2, 2, -3);
  EXPECT_EQ(tree.max(), 11);
  EXPECT_EQ(tree.argmax(), 1u);
  // -20 everywhere: -17 -9 -9 -9 -15.
  tree.add(0, 4, -20);
  EXPECT_EQ(tree.max(), -9);
  EXPECT_EQ(tree.argmax(), 1u);
  EXPECT_EQ(tree.max(4, 4), -15);
}

// Six positions: 2 7 1 8 2 8. "Above" is strict: a value equal to the
// threshold does not count.
TEST(RangeMaxTree, FindsTheFirstAndLastPositionAboveAThreshold) {
  RangeMaxTree tree(std::vector<std::int64_t>{2, 7, 1, 8, 2, 8});
  EXPECT_EQ(tree.find_first_above(0, 5, 6), 1u);   // 7 at 1
  EXPECT_EQ(tree.find_last_above(0, 5, 6), 5u);    // 8 at 5
  EXPECT_EQ(tree.find_first_above(2, 4, 7), 3u);   // 8 at 3; 7 is not above 7
  EXPECT_EQ(tree.find_last_above(0, 2, 7), RangeMaxTree::kNotFound);
  EXPECT_EQ(tree.find_first_above(4, 4, 1), 4u);
  // +5 on positions 0..2: 7 12 6 8 2 8; the search sees the pending add.
  tree.add(0, 2, 5);
  EXPECT_EQ(tree.find_first_above(0, 5, 7), 1u);
  EXPECT_EQ(tree.find_last_above(0, 2, 6), 1u);
  EXPECT_EQ(tree.find_last_above(2, 5, 8), RangeMaxTree::kNotFound);
}

TEST(RangeMaxTree, OnePositionAndNone) {
  RangeMaxTree one(std::vector<std::int64_t>{7});
  one.add(0, 0, -2);
  EXPECT_EQ(one.max(), 5);
  EXPECT_EQ(one.argmax(), 0u);
  const RangeMaxTree none(std::vector<std::int64_t>{});
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(none.max(), RangeMaxTree::kNone);
}

// Against a plain vector: random sizes (powers of two and not), random range
// adds, and after each a random range maximum, the overall maximum, its
// leftmost position, one value and the threshold searches.
TEST(RangeMaxTreeProperty, AgreesWithAPlainVector) {
  std::mt19937_64 rng(20261207);
  int ties = 0;
  for (int round = 0; round < 300; ++round) {
    // Every tenth round a longer profile: a deeper tree.
    const std::size_t n = 1 + rng() % (round % 10 == 0 ? 3000 : 70);
    std::vector<std::int64_t> values(n);
    for (std::int64_t& v : values) v = static_cast<std::int64_t>(rng() % 21) - 10;
    RangeMaxTree tree(values);
    for (int step = 0; step < 60; ++step) {
      std::size_t first = rng() % n, last = rng() % n;
      if (first > last) std::swap(first, last);
      const auto delta = static_cast<std::int64_t>(rng() % 11) - 5;
      tree.add(first, last, delta);
      for (std::size_t i = first; i <= last; ++i) values[i] += delta;
      std::size_t qa = rng() % n, qb = rng() % n;
      if (qa > qb) std::swap(qa, qb);
      ASSERT_EQ(tree.max(qa, qb), *std::max_element(values.begin() + qa, values.begin() + qb + 1))
          << "round " << round << ", step " << step;
      const auto top = std::max_element(values.begin(), values.end());  // the first of equals
      ASSERT_EQ(tree.max(), *top);
      ASSERT_EQ(tree.argmax(), static_cast<std::size_t>(top - values.begin()));
      ties += std::count(values.begin(), values.end(), *top) > 1 ? 1 : 0;
      const std::size_t at = rng() % n;
      ASSERT_EQ(tree.at(at), values[at]);
      // The threshold searches over [qa, qb], against a scan.
      const auto threshold = static_cast<std::int64_t>(rng() % 31) - 15;
      std::size_t first_above = RangeMaxTree::kNotFound, last_above = RangeMaxTree::kNotFound;
      for (std::size_t i = qa; i <= qb; ++i) {
        if (values[i] > threshold) {
          if (first_above == RangeMaxTree::kNotFound) first_above = i;
          last_above = i;
        }
      }
      ASSERT_EQ(tree.find_first_above(qa, qb, threshold), first_above);
      ASSERT_EQ(tree.find_last_above(qa, qb, threshold), last_above);
    }
  }
  // Small values: the maximum is shared at 3,691 of the 18,000 steps, so the
  // leftmost rule is exercised.
  EXPECT_GE(ties, 2000);
  ::testing::Test::RecordProperty("ties", ties);
}

}  // namespace
}  // namespace hyperoffload::internal
