// The peak planner's data structures against brute force on random operation
// sequences: ProfileTree (range add, argmax, threshold searches, above-limit
// counts), CoveringIndex (best active interval containing an op, per group) and
// SpanUnion (covered ops of a growing union of ranges).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "hyperoffload/plan/internal/covering_index.h"
#include "hyperoffload/plan/internal/profile_tree.h"
#include "hyperoffload/plan/internal/span_union.h"

namespace hyperoffload::internal {
namespace {

TEST(ProfileTree, MatchesBruteForceUnderRandomAdds) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 60; ++round) {
    const std::size_t n = 1 + rng() % 70;
    const std::int64_t limit = static_cast<std::int64_t>(rng() % 100);
    std::vector<std::int64_t> values(n);
    for (auto& v : values) v = static_cast<std::int64_t>(rng() % 200);
    ProfileTree tree(values, limit);
    for (int op = 0; op < 200; ++op) {
      std::size_t a = rng() % n, b = rng() % n;
      if (a > b) std::swap(a, b);
      const std::int64_t delta = static_cast<std::int64_t>(rng() % 81) - 40;
      tree.add(a, b, delta);
      for (std::size_t i = a; i <= b; ++i) values[i] += delta;

      const auto max_it = std::max_element(values.begin(), values.end());
      ASSERT_EQ(tree.max(), *max_it);
      ASSERT_EQ(tree.argmax(), static_cast<std::size_t>(max_it - values.begin()));
      std::size_t c = rng() % n, d = rng() % n;
      if (c > d) std::swap(c, d);
      ASSERT_EQ(tree.max(c, d), *std::max_element(values.begin() + c, values.begin() + d + 1));
      ASSERT_EQ(tree.count_over(c, d),
                static_cast<std::size_t>(std::count_if(values.begin() + c, values.begin() + d + 1,
                                                       [&](std::int64_t v) { return v > limit; })));
      ASSERT_EQ(tree.count_over(), static_cast<std::size_t>(std::count_if(
                                       values.begin(), values.end(), [&](std::int64_t v) { return v > limit; })));
      const std::int64_t threshold = static_cast<std::int64_t>(rng() % 240) - 20;
      std::size_t first = ProfileTree::kNotFound, last = ProfileTree::kNotFound;
      for (std::size_t i = c; i <= d; ++i) {
        if (values[i] > threshold) {
          if (first == ProfileTree::kNotFound) first = i;
          last = i;
        }
      }
      ASSERT_EQ(tree.find_first_above(c, d, threshold), first);
      ASSERT_EQ(tree.find_last_above(c, d, threshold), last);
    }
  }
}

TEST(CoveringIndex, ReturnsTheBestActiveIntervalContainingEachOp) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 40; ++round) {
    const auto ops = static_cast<OpIndex>(1 + rng() % 90);
    const std::size_t count = rng() % 60;
    std::vector<OpInterval> intervals(count);
    for (OpInterval& interval : intervals) {
      OpIndex a = static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(ops));
      OpIndex b = static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(ops));
      interval = {std::min(a, b), std::max(a, b)};
    }
    CoveringIndex index(ops, intervals);
    std::vector<IndexGroup> groups(count, IndexGroup::kNone);
    std::vector<double> keys(count, 0.0);
    for (int step = 0; step < 300; ++step) {
      if (count > 0) {
        const auto e = static_cast<std::int32_t>(rng() % count);
        const auto group = static_cast<IndexGroup>(rng() % 3);
        const double key = static_cast<double>(rng() % 8);  // small range: many ties
        index.set(e, group, key);
        groups[static_cast<std::size_t>(e)] = group;
        keys[static_cast<std::size_t>(e)] = key;
      }
      const auto op = static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(ops));
      std::int32_t small = CoveringIndex::kNoEntry, large = CoveringIndex::kNoEntry;
      for (std::size_t e = 0; e < count; ++e) {
        if (intervals[e].first > op || intervals[e].last < op) continue;
        std::int32_t& best = groups[e] == IndexGroup::kSmall ? small : large;
        if (groups[e] == IndexGroup::kNone) continue;
        if (best == CoveringIndex::kNoEntry || keys[e] > keys[static_cast<std::size_t>(best)]) {
          best = static_cast<std::int32_t>(e);
        }
      }
      const CoveringIndex::Best got = index.query(op);
      ASSERT_EQ(got.small, small) << "op " << op;
      ASSERT_EQ(got.large, large) << "op " << op;
    }
  }
}

TEST(SpanUnion, CountsCoveredOpsOfAGrowingUnion) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 30; ++round) {
    const std::size_t n = 1 + rng() % 100;
    SpanUnion spans(n);
    std::vector<bool> covered(n, false);
    for (int step = 0; step < 60; ++step) {
      std::size_t a = rng() % n, b = rng() % n;
      if (a > b) std::swap(a, b);
      if (rng() % 2 == 0) {
        spans.add(a, b);
        for (std::size_t i = a; i <= b; ++i) covered[i] = true;
      } else {
        ASSERT_EQ(spans.covered(a, b),
                  static_cast<std::size_t>(std::count(covered.begin() + a, covered.begin() + b + 1, true)));
      }
    }
  }
}

}  // namespace
}  // namespace hyperoffload::internal
