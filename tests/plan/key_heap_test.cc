// KeyHeap and EightAryHeap (plan/common/key_heap.h) against a brute-force
// queue on random operation sequences, and hand-made cases for the order
// (keys, then the lower entry; -0.0 as 0.0) and the buckets' runners-up.
#include "hyperoffload/plan/common/key_heap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

namespace hyperoffload::internal {
namespace {

// The items in pop order.
std::vector<std::int32_t> drain(KeyHeap& heap) {
  std::vector<std::int32_t> out;
  while (heap.size() > 0) {
    out.push_back(heap.top().entry);
    heap.pop();
  }
  return out;
}

TEST(KeyHeap, RanksByKeyThenByTheLowerEntry) {
  // Keys 2, 5, 5, -1, 0.0, -0.0, -inf, +inf on entries 0..7. Higher keys
  // first: +inf (7), then the two 5s by entry (1, 2), 2 (0), the equal zeros
  // by entry (4, 5), -1 (3), -inf (6).
  KeyHeap heap;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> keys{2.0, 5.0, 5.0, -1.0, 0.0, -0.0, -inf, inf};
  for (std::size_t e = 0; e < keys.size(); ++e) heap.push({keys[e], static_cast<std::int32_t>(e)});
  EXPECT_EQ(heap.size(), 8U);
  EXPECT_EQ(drain(heap), (std::vector<std::int32_t>{7, 1, 2, 0, 4, 5, 3, 6}));
  // The same built at once, with -0.0 on the lower entry this time.
  for (std::size_t e = 0; e < keys.size(); ++e) {
    heap.append({e == 4 ? -0.0 : e == 5 ? 0.0 : keys[e], static_cast<std::int32_t>(e)});
  }
  heap.build();
  EXPECT_EQ(drain(heap), (std::vector<std::int32_t>{7, 1, 2, 0, 4, 5, 3, 6}));
}

TEST(KeyHeap, AReplacedLeaderThatStillLeadsStaysOnTop) {
  // 10 (entry 0) over 4 (entry 1): re-keyed to 9 it still leads, to 3 it
  // falls below entry 1; a key raised above every other (8 -> 20 on entry 2,
  // not the top) is pushed as a new item and leads at once.
  KeyHeap heap;
  heap.push({10.0, 0});
  heap.push({4.0, 1});
  heap.replace_top({9.0, 0});
  EXPECT_EQ(heap.top().entry, 0);
  EXPECT_EQ(heap.top().key, 9.0);
  heap.replace_top({3.0, 0});
  EXPECT_EQ(heap.top().entry, 1);
  heap.push({20.0, 2});
  EXPECT_EQ(heap.top().entry, 2);
  EXPECT_EQ(heap.size(), 3U);
  EXPECT_EQ(drain(heap), (std::vector<std::int32_t>{2, 1, 0}));
}

// Keys 5, 4, 3, 2, 1 on entries 0..4. Against the top's rank (the bits of 5.0,
// 0x4014000000000000), 4.0 (0x4010...) first differs at bit 50 of the key,
// so in bucket 32 + 51 = 83; 3.0 (0x4008...) and 2.0 (0x4000...) at bit 52,
// bucket 85; 1.0 (0x3FF0...) at bit 62, bucket 95. The runners-up are the
// lowest bucket's above the top's: entry 1.
TEST(KeyHeap, RunnersUpAreTheNextBucketsItems) {
  KeyHeap heap;
  EXPECT_TRUE(heap.runners_up().empty());
  for (std::int32_t e = 0; e < 5; ++e) heap.append({5.0 - e, e});
  heap.build();
  EXPECT_EQ(std::vector<std::int32_t>(heap.runners_up().begin(), heap.runners_up().end()),
            (std::vector<std::int32_t>{1}));
  // The leader re-keyed to 3.5 (0x400C..., bit 52 against 5.0: bucket 85):
  // entry 1 leads and is alone in bucket 0; bucket 85 holds 3.0, 2.0 and 3.5.
  heap.replace_top({3.5, 0});
  EXPECT_EQ(heap.top().entry, 1);
  EXPECT_EQ(std::vector<std::int32_t>(heap.runners_up().begin(), heap.runners_up().end()),
            (std::vector<std::int32_t>{2, 3, 0}));
  heap.clear();
  EXPECT_EQ(heap.size(), 0U);
  EXPECT_TRUE(heap.runners_up().empty());
}

// A brute-force queue: the items in a vector, the best found by a scan.
struct BruteQueue {
  std::vector<KeyItem> items;
  std::size_t best() const {
    std::size_t at = 0;
    for (std::size_t i = 1; i < items.size(); ++i) {
      if (ranks_above(items[i], items[at])) at = i;
    }
    return at;
  }
  void pop() { items.erase(items.begin() + static_cast<std::ptrdiff_t>(best())); }
};

TEST(KeyHeap, MatchesBruteForceUnderRandomOperations) {
  // As the covering index drives it — mostly the leader re-keyed lower — and
  // every other change too: pushes above the top (a key re-evaluated up, an
  // entry from the other group), pops, bulk builds after clear(), duplicate
  // items, few distinct keys (ties by entry are common) and signed zeros.
  std::mt19937_64 rng(41);
  for (int round = 0; round < 200; ++round) {
    KeyHeap heap;
    EightAryHeap eight;
    BruteQueue brute;
    const std::uint64_t key_values = 1 + rng() % 40;
    auto draw = [&] {
      const double key = static_cast<double>(rng() % key_values) - static_cast<double>(key_values / 4);
      return KeyItem{key == 0.0 && rng() % 2 == 0 ? -0.0 : key, static_cast<std::int32_t>(rng() % 300)};
    };
    for (int step = 0; step < 2000; ++step) {
      const std::uint64_t what = rng() % 100;
      if (what < 1) {
        heap.clear();
        eight.clear();
        brute.items.clear();
        for (std::uint64_t n = rng() % 200; n > 0; --n) {
          const KeyItem item = draw();
          heap.append(item);
          eight.push(item);
          brute.items.push_back(item);
        }
        heap.build();
      } else if (what < 35 || brute.items.empty()) {
        const KeyItem item = draw();
        heap.push(item);
        eight.push(item);
        brute.items.push_back(item);
      } else if (what < 50) {
        heap.pop();
        eight.pop();
        brute.pop();
      } else {
        // The leader re-keyed: mostly lower, sometimes equal or higher.
        KeyItem item = brute.items[brute.best()];
        const std::uint64_t how = rng() % 10;
        item.key = how < 7 ? item.key - static_cast<double>(1 + rng() % 5) : how < 9 ? item.key : item.key + 1.0;
        heap.replace_top(item);
        eight.pop();
        eight.push(item);
        brute.pop();
        brute.items.push_back(item);
      }
      ASSERT_EQ(heap.size(), brute.items.size()) << "round " << round << " step " << step;
      ASSERT_EQ(eight.size(), brute.items.size()) << "round " << round << " step " << step;
      if (brute.items.empty()) continue;
      const KeyItem want = brute.items[brute.best()];
      // Equal ranks are the same item up to the zero's sign.
      ASSERT_EQ(heap.top().entry, want.entry) << "round " << round << " step " << step;
      ASSERT_EQ(heap.top().key, want.key) << "round " << round << " step " << step;
      ASSERT_EQ(eight.top().entry, want.entry) << "round " << round << " step " << step;
      ASSERT_EQ(eight.top().key, want.key) << "round " << round << " step " << step;
    }
  }
}

}  // namespace
}  // namespace hyperoffload::internal
