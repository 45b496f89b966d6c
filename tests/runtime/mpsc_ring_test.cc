#include "hyperoffload/runtime/internal/mpsc_ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace hyperoffload::internal {
namespace {

TEST(MpscRing, HandsOutPositionsInPushOrderAndConsumesFifo) {
  MpscRing<int> ring(4);
  EXPECT_EQ(ring.capacity(), 4u);
  EXPECT_EQ(ring.front(), nullptr);  // empty
  for (int value : {10, 11, 12}) {
    int item = value;
    // Positions count pushes from 0: 10 -> 0, 11 -> 1, 12 -> 2.
    EXPECT_EQ(ring.try_push(item), static_cast<std::uint64_t>(value - 10));
  }
  EXPECT_EQ(ring.pushed(), 3u);
  for (int expected : {10, 11, 12}) {
    ASSERT_NE(ring.front(), nullptr);
    EXPECT_EQ(*ring.front(), expected);
    ring.pop();
  }
  EXPECT_EQ(ring.front(), nullptr);
}

TEST(MpscRing, AFullRingRefusesThePushAndKeepsTheItem) {
  MpscRing<std::shared_ptr<int>> ring(2);
  auto a = std::make_shared<int>(1);
  auto b = std::make_shared<int>(2);
  auto c = std::make_shared<int>(3);
  ASSERT_TRUE(ring.try_push(a).has_value());
  ASSERT_TRUE(ring.try_push(b).has_value());
  EXPECT_FALSE(ring.try_push(c).has_value());  // two slots, both in use
  ASSERT_NE(c, nullptr);                       // not moved from
  EXPECT_EQ(*c, 3);
  ring.pop();  // frees slot 0 for position 2
  EXPECT_EQ(ring.try_push(c), std::optional<std::uint64_t>(2));
  EXPECT_EQ(*(*ring.front()), 2);
}

TEST(MpscRing, PopReleasesTheItemsResourcesAtOnce) {
  MpscRing<std::shared_ptr<int>> ring(2);
  auto shared = std::make_shared<int>(7);
  std::shared_ptr<int> copy = shared;
  ASSERT_TRUE(ring.try_push(copy).has_value());
  EXPECT_EQ(shared.use_count(), 2);  // ours + the ring's
  ring.pop();
  EXPECT_EQ(shared.use_count(), 1);  // the slot was reset, not left holding it
}

TEST(MpscRing, ConsumedHoldsForPositionsAnyNumberOfLapsBehind) {
  MpscRing<int> ring(2);
  for (int i = 0; i < 5; ++i) {
    int item = i;
    ASSERT_EQ(ring.try_push(item), static_cast<std::uint64_t>(i));
    EXPECT_FALSE(ring.consumed(static_cast<std::uint64_t>(i)));
    ring.pop();
    EXPECT_TRUE(ring.consumed(static_cast<std::uint64_t>(i)));
  }
  // Position 0 lives in slot 0, which positions 2 and 4 reused since.
  EXPECT_TRUE(ring.consumed(0));
  EXPECT_FALSE(ring.consumed(5));  // not pushed yet
}

TEST(MpscRingStress, ConcurrentProducersKeepEachProducersOrderAndLoseNothing) {
  // Four producers push (producer, sequence) pairs through a small ring while
  // one consumer drains it. Every item must arrive exactly once, and each
  // producer's items in the order it pushed them. Under TSan this also checks
  // that publishing a slot orders the item's write before the consumer's read.
  constexpr int kProducers = 4;
  constexpr int kItemsEach = 20000;
  struct Item {
    int producer = -1;
    int sequence = -1;
  };
  MpscRing<Item> ring(8);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&ring, p] {
      for (int s = 0; s < kItemsEach; ++s) {
        Item item{p, s};
        while (!ring.try_push(item)) std::this_thread::yield();
      }
    });
  }
  std::vector<int> next(kProducers, 0);
  int received = 0;
  int out_of_order = 0;
  while (received < kProducers * kItemsEach) {
    Item* item = ring.front();
    if (item == nullptr) {
      std::this_thread::yield();
      continue;
    }
    if (item->sequence != next[static_cast<std::size_t>(item->producer)]) ++out_of_order;
    next[static_cast<std::size_t>(item->producer)] = item->sequence + 1;
    ring.pop();
    ++received;
  }
  for (std::thread& t : producers) t.join();
  EXPECT_EQ(out_of_order, 0);
  for (int p = 0; p < kProducers; ++p) EXPECT_EQ(next[static_cast<std::size_t>(p)], kItemsEach);
  EXPECT_EQ(ring.front(), nullptr);
  EXPECT_EQ(ring.pushed(), static_cast<std::uint64_t>(kProducers * kItemsEach));
}

}  // namespace
}  // namespace hyperoffload::internal
