// The peak planner's data structures against brute force on random operation
// sequences: ProfileTree (range add, argmax, the last position above a
// threshold, above-limit counts), CoveringIndex (best active interval containing an op, per group),
// TransferLoad (copy time spread over compute) and the stall estimate.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "hyperoffload/plan/common/covering_index.h"
#include "hyperoffload/plan/common/profile_tree.h"
#include "hyperoffload/plan/common/stall_estimate.h"
#include "hyperoffload/plan/peak/transfer_load.h"
#include "testing/trace_dsl.h"

namespace hyperoffload::internal {
namespace {

// An interval between two positions drawn from [0, ops), in either order.
OpInterval random_interval(std::mt19937_64& rng, OpIndex ops) {
  const auto a = static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(ops));
  const auto b = static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(ops));
  return {std::min(a, b), std::max(a, b)};
}

// Fills `intervals` and `keys` (of one size) entry by entry: an interval
// from random_interval, then a key among 0 .. key_values - 1 (few values:
// ties are common).
void draw_entries(std::mt19937_64& rng, OpIndex ops, std::uint64_t key_values, std::vector<OpInterval>& intervals,
                  std::vector<double>& keys) {
  for (std::size_t e = 0; e < intervals.size(); ++e) {
    intervals[e] = random_interval(rng, ops);
    keys[e] = static_cast<double>(rng() % key_values);
  }
}

TEST(ProfileTree, MatchesBruteForceUnderRandomAdds) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 90; ++round) {
    // A third of the rounds on larger profiles (deeper trees).
    const std::size_t n = 1 + rng() % (round % 3 == 0 ? 700 : 70);
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
      ASSERT_EQ(tree.count_over(), static_cast<std::size_t>(std::count_if(values.begin(), values.end(),
                                                                          [&](std::int64_t v) { return v > limit; })));
      const std::int64_t threshold = static_cast<std::int64_t>(rng() % 240) - 20;
      std::size_t last = ProfileTree::kNotFound;
      for (std::size_t i = c; i <= d; ++i) {
        if (values[i] > threshold) last = i;
      }
      ASSERT_EQ(tree.find_last_above(c, d, threshold), last);
      ASSERT_EQ(tree.values(), values);
    }
  }
}

TEST(CoveringIndex, ReturnsTheBestActiveIntervalContainingEachOp) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 40; ++round) {
    const auto ops = static_cast<OpIndex>(1 + rng() % 90);
    const std::size_t count = rng() % 60;
    std::vector<OpInterval> intervals(count);
    for (OpInterval& interval : intervals) interval = random_interval(rng, ops);
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

TEST(CoveringIndex, CachedQueriesMatchFreshOnesAfterEveryChange) {
  // The planner asks at the same op over and over while re-evaluating one
  // entry at a time; now and then the op moves or everything is re-activated.
  std::mt19937_64 rng(23);
  for (int round = 0; round < 40; ++round) {
    const auto ops = static_cast<OpIndex>(1 + rng() % 120);
    std::vector<OpInterval> intervals(rng() % 150);
    std::vector<double> keys(intervals.size());
    draw_entries(rng, ops, 10, intervals, keys);
    CoveringIndex index(ops, intervals);
    index.activate_all(IndexGroup::kSmall, keys);
    auto op = static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(ops));
    for (int step = 0; step < 400; ++step) {
      const std::uint64_t what = rng() % 10;
      if (what == 0) {
        op = static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(ops));
      } else if (what == 1 && step % 97 == 0) {
        for (double& key : keys) key = static_cast<double>(rng() % 10);
        CoveringIndex fresh(ops, intervals);
        fresh.activate_all(IndexGroup::kLarge, keys);
        index = std::move(fresh);
      } else if (!intervals.empty()) {
        const auto e = static_cast<std::int32_t>(rng() % intervals.size());
        index.set(e, static_cast<IndexGroup>(rng() % 3), static_cast<double>(rng() % 10));
      }
      const CoveringIndex::Best cached = index.query_cached(op);
      const CoveringIndex::Best fresh = index.query(op);
      ASSERT_EQ(cached.small, fresh.small) << "round " << round << " step " << step;
      ASSERT_EQ(cached.large, fresh.large) << "round " << round << " step " << step;
    }
  }
}

TEST(CoveringIndex, APinnedOpAnswersAsTheTreesAfterEveryChange) {
  // As the planner drives it: long runs of queries at one op (each run pins
  // the op once it has been asked (entries containing it) / 64 times), each
  // followed by a change to that op's leader of either group (re-keyed lower or
  // higher, moved to the other group, or deactivated) or to a random entry;
  // now and then the op moves, which applies the deferred updates to the
  // trees. Every answer is checked against brute force over the entries; few
  // distinct keys make ties common (the lower entry wins).
  std::mt19937_64 rng(29);
  for (int round = 0; round < 40; ++round) {
    const auto ops = static_cast<OpIndex>(1 + rng() % 120);
    std::vector<OpInterval> intervals(rng() % 200);
    std::vector<double> keys(intervals.size());
    std::vector<IndexGroup> groups(intervals.size(), IndexGroup::kSmall);
    draw_entries(rng, ops, 12, intervals, keys);
    CoveringIndex index(ops, intervals);
    index.activate_all(IndexGroup::kSmall, keys);
    auto brute = [&](OpIndex op) {
      CoveringIndex::Best best;
      for (std::size_t e = 0; e < intervals.size(); ++e) {
        if (groups[e] == IndexGroup::kNone || intervals[e].first > op || intervals[e].last < op) continue;
        std::int32_t& b = groups[e] == IndexGroup::kSmall ? best.small : best.large;
        if (b == CoveringIndex::kNoEntry || keys[e] > keys[static_cast<std::size_t>(b)]) {
          b = static_cast<std::int32_t>(e);
        }
      }
      return best;
    };
    auto change = [&](std::int32_t e, IndexGroup group, double key) {
      index.set(e, group, key);
      groups[static_cast<std::size_t>(e)] = group;
      keys[static_cast<std::size_t>(e)] = key;
    };
    auto op = static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(ops));
    for (int step = 0; step < 1500; ++step) {
      const CoveringIndex::Best got = index.query_cached(op);
      const CoveringIndex::Best want = brute(op);
      ASSERT_EQ(got.small, want.small) << "round " << round << " step " << step;
      ASSERT_EQ(got.large, want.large) << "round " << round << " step " << step;
      if (intervals.empty()) break;
      const std::uint64_t what = rng() % 100;
      const std::int32_t leader = rng() % 2 == 0 ? got.small : got.large;
      if (what < 3) {
        op = static_cast<OpIndex>(rng() % static_cast<std::uint64_t>(ops));
        if (what == 0) {  // a full query applies the deferred updates too
          const CoveringIndex::Best full = index.query(op);
          ASSERT_EQ(full.small, brute(op).small) << "round " << round << " step " << step;
          ASSERT_EQ(full.large, brute(op).large) << "round " << round << " step " << step;
        }
      } else if (what < 80 && leader != CoveringIndex::kNoEntry) {
        const double old_key = keys[static_cast<std::size_t>(leader)];
        switch (rng() % 6) {
          case 0:
          case 1:
          case 2:
            change(leader, groups[static_cast<std::size_t>(leader)], old_key - static_cast<double>(rng() % 4));
            break;
          case 3:
            change(leader, groups[static_cast<std::size_t>(leader)], old_key + 1.0);
            break;
          case 4:
            change(leader,
                   groups[static_cast<std::size_t>(leader)] == IndexGroup::kSmall ? IndexGroup::kLarge
                                                                                  : IndexGroup::kSmall,
                   old_key);
            break;
          default:
            change(leader, IndexGroup::kNone, 0.0);
        }
      } else {
        change(static_cast<std::int32_t>(rng() % intervals.size()), static_cast<IndexGroup>(rng() % 3),
               static_cast<double>(rng() % 12));
      }
    }
    // After the last change, every op as brute force says.
    for (OpIndex at = 0; at < ops; ++at) {
      ASSERT_EQ(index.query(at).small, brute(at).small) << "round " << round << " op " << at;
      ASSERT_EQ(index.query(at).large, brute(at).large) << "round " << round << " op " << at;
    }
  }
}

// Five intervals all containing op 2 of 5, keyed 5, 4, 3, 2, 1 in the small
// group. The first query at op 2 fills the path; the second pins it (asked
// once again, 1 * 64 >= 5 entries), putting the five in one heap: entry 0 on
// top and, in the lowest bucket below it, entry 1 alone (the buckets of
// KeyHeap.RunnersUpAreTheNextBucketsItems in key_heap_test.cc). Before that no
// op is pinned: no runners-up.
TEST(CoveringIndex, RunnersUpAtAPinnedOpAreTheHeapsNext) {
  const std::vector<OpInterval> intervals{{0, 4}, {1, 3}, {2, 2}, {0, 2}, {2, 4}};
  CoveringIndex index(5, intervals);
  index.activate_all(IndexGroup::kSmall, std::vector<double>{5, 4, 3, 2, 1});
  EXPECT_TRUE(index.runners_up(IndexGroup::kSmall).empty());
  EXPECT_EQ(index.query_cached(2).small, 0);
  EXPECT_TRUE(index.runners_up(IndexGroup::kSmall).empty());
  EXPECT_EQ(index.query_cached(2).small, 0);
  const std::span<const std::int32_t> next = index.runners_up(IndexGroup::kSmall);
  EXPECT_EQ(std::vector<std::int32_t>(next.begin(), next.end()), (std::vector<std::int32_t>{1}));
  EXPECT_TRUE(index.runners_up(IndexGroup::kLarge).empty());
  // The leader's key falls below entry 1's: entry 1 leads, and the old
  // leader (3.5) shares the next bucket with 3 and 2 (entries 2 and 3).
  index.set(0, IndexGroup::kSmall, 3.5);
  EXPECT_EQ(index.query_cached(2).small, 1);
  const std::span<const std::int32_t> after = index.runners_up(IndexGroup::kSmall);
  std::vector<std::int32_t> sorted(after.begin(), after.end());
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::int32_t>{0, 2, 3}));
}

TEST(CoveringIndex, BulkActivationMatchesOneByOne) {
  std::mt19937_64 rng(17);
  for (int round = 0; round < 20; ++round) {
    const auto ops = static_cast<OpIndex>(1 + rng() % 200);
    std::vector<OpInterval> intervals(rng() % 300);
    std::vector<double> keys(intervals.size());
    draw_entries(rng, ops, 20, intervals, keys);
    CoveringIndex bulk(ops, intervals), single(ops, intervals);
    bulk.activate_all(IndexGroup::kLarge, keys);
    for (std::size_t e = 0; e < intervals.size(); ++e) {
      single.set(static_cast<std::int32_t>(e), IndexGroup::kLarge, keys[e]);
    }
    for (OpIndex op = 0; op < ops; ++op) {
      ASSERT_EQ(bulk.query(op).large, single.query(op).large);
      ASSERT_EQ(bulk.query(op).small, CoveringIndex::kNoEntry);
    }
    // Some entries only (about two in three), as the recompute selection
    // activates those within its cost limit; then the same changes to both.
    std::vector<std::uint8_t> active(intervals.size());
    for (std::uint8_t& a : active) a = rng() % 3 != 0 ? 1 : 0;
    CoveringIndex some(ops, intervals), one_by_one(ops, intervals);
    some.activate_all(IndexGroup::kSmall, keys, active);
    for (std::size_t e = 0; e < intervals.size(); ++e) {
      if (active[e] != 0) one_by_one.set(static_cast<std::int32_t>(e), IndexGroup::kSmall, keys[e]);
    }
    for (int step = 0; step <= 50; ++step) {
      for (OpIndex op = 0; op < ops; ++op) {
        ASSERT_EQ(some.query(op).small, one_by_one.query(op).small) << "round " << round << " step " << step;
        ASSERT_EQ(some.query(op).large, one_by_one.query(op).large) << "round " << round << " step " << step;
      }
      if (intervals.empty()) break;
      const auto e = static_cast<std::int32_t>(rng() % intervals.size());
      ASSERT_EQ(some.group(e), one_by_one.group(e));
      ASSERT_EQ(some.key(e), one_by_one.key(e));
      const auto group = static_cast<IndexGroup>(rng() % 3);
      const double key = static_cast<double>(rng() % 20);
      some.set(e, group, key);
      one_by_one.set(e, group, key);
    }
  }
}

TEST(TransferLoad, SpreadsTransferTimeOverComputeLikeBruteForce) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 30; ++round) {
    const std::size_t n = 1 + rng() % 40;
    std::vector<double> duration(n);
    for (double& d : duration) d = static_cast<double>(rng() % 4);  // zeros included
    std::vector<double> before(n + 1, 0.0);
    for (std::size_t i = 0; i < n; ++i) before[i + 1] = before[i] + duration[i];
    TransferLoad load(before);
    std::vector<double> per_op(n, 0.0);  // brute force: load on each op
    for (int step = 0; step < 60; ++step) {
      std::size_t a = rng() % n, b = rng() % n;
      if (a > b) std::swap(a, b);
      if (rng() % 2 == 0) {
        const double transfer = static_cast<double>(1 + rng() % 9);
        load.add(a, b, transfer);
        const double compute = before[b + 1] - before[a];
        if (compute > 0) {
          for (std::size_t i = a; i <= b; ++i) per_op[i] += transfer * duration[i] / compute;
        }
      } else {
        double expected = 0.0;
        for (std::size_t i = a; i <= b; ++i) expected += per_op[i];
        ASSERT_NEAR(load.load(a, b), expected, 1e-9);
      }
    }
  }
}

TEST(StallEstimate, FollowsTheSimulatorsTimingRules) {
  // 100 bytes per ms; ops 1 ms each. s1 (200 B = 2 ms per copy) is written by
  // op 0, copied after it (1..3 ms), released, and prefetched before op 2,
  // which starts at 2 ms but the copy back can only start at 3 ms (after the
  // copy to host): it ends at 5 ms, so op 3 (reading s1) waits from 3 to 5 ms.
  //   compute:  [op0 0-1][op1 1-2][op2 2-3]......[op3 5-6]
  //   D2H:              [s1 1-3]
  //   H2D:                       [s1 3-5]
  const Trace trace = ::hyperoffload::testing::TraceDsl()
                          .storage(1, 200)
                          .bandwidth(100.0 * 1000.0 / static_cast<double>(kBytesPerGiB))
                          .op("a", "W1", 1)
                          .op("b", "", 1)
                          .op("c", "", 1)
                          .op("d", "R1", 1)
                          .build();
  const std::vector<Action> actions =
      ::hyperoffload::testing::actions("post 0 copy_d2h 1; post 0 release_device 1; pre 2 copy_h2d 1");
  EXPECT_NEAR(estimate_stall_ms(trace, actions), 2.0, 1e-9);
  EXPECT_NEAR(estimate_stall_ms(trace, {}), 0.0, 1e-12);
}

}  // namespace
}  // namespace hyperoffload::internal
