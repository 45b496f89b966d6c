#include "hyperoffload/runtime/device_arena.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<DeviceArena> make_arena(std::int64_t capacity, std::int64_t alignment = 256) {
  Result<std::unique_ptr<DeviceArena>> arena = DeviceArena::create({capacity, alignment});
  EXPECT_TRUE(arena.has_value()) << arena.error().message;
  return std::move(*arena);
}

std::int64_t offset_of(const DeviceArena&, void* base, void* ptr) {
  return static_cast<std::byte*>(ptr) - static_cast<std::byte*>(base);
}

TEST(DeviceArena, RoundsSizesUpToTheAlignmentAndCountsThem) {
  auto arena = make_arena(4096);
  void* a = *arena->allocate(1);    // reserves 256
  void* b = *arena->allocate(300);  // reserves 512
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(offset_of(*arena, a, b), 256);
  DeviceMemoryStats stats = arena->stats();
  EXPECT_EQ(stats.in_use_bytes, 768);
  EXPECT_EQ(stats.peak_bytes, 768);
  EXPECT_EQ(stats.capacity_bytes, 4096);
  EXPECT_EQ(stats.allocation_count, 2);
  ASSERT_TRUE(arena->free(a));
  ASSERT_TRUE(arena->free(b));
  stats = arena->stats();
  EXPECT_EQ(stats.in_use_bytes, 0);
  EXPECT_EQ(stats.peak_bytes, 768);
  EXPECT_EQ(arena->largest_free_block_bytes(), 4096);
}

TEST(DeviceArena, BestFitTakesTheSmallestFreeBlockThatFits) {
  // Offsets (alignment 256):  A[0,512) B[512,768) C[768,1792) D[1792,2048) rest[2048,4096)
  // Freeing A and C leaves holes of 512 @0, 1024 @768 and 2048 @2048. A 400-byte
  // request (reserves 512) takes the 512 hole, not a larger one; a 600-byte
  // request (reserves 768) takes the 1024 hole, not the 2048 tail; a 2048-byte
  // request then only fits the tail.
  auto arena = make_arena(4096);
  void* a = *arena->allocate(512);
  void* b = *arena->allocate(256);
  void* c = *arena->allocate(1024);
  void* d = *arena->allocate(256);
  ASSERT_TRUE(arena->free(a));
  ASSERT_TRUE(arena->free(c));
  void* e = *arena->allocate(400);
  EXPECT_EQ(e, a);
  void* f = *arena->allocate(600);
  EXPECT_EQ(f, c);
  void* g = *arena->allocate(2048);  // only the tail fits
  EXPECT_EQ(offset_of(*arena, a, g), 2048);
  for (void* p : {b, d, e, f, g}) ASSERT_TRUE(arena->free(p));
  EXPECT_EQ(arena->largest_free_block_bytes(), 4096);
}

TEST(DeviceArena, FreeCoalescesWithBothNeighbours) {
  // A[0,1024) B[1024,2048) C[2048,3072) D[3072,4096): free A and C, then B —
  // one 3072-byte hole, so a 3072-byte request fits although no block that
  // large was ever freed.
  auto arena = make_arena(4096);
  void* a = *arena->allocate(1024);
  void* b = *arena->allocate(1024);
  void* c = *arena->allocate(1024);
  void* d = *arena->allocate(1024);
  ASSERT_TRUE(arena->free(a));
  ASSERT_TRUE(arena->free(c));
  EXPECT_EQ(arena->largest_free_block_bytes(), 1024);
  ASSERT_TRUE(arena->free(b));
  EXPECT_EQ(arena->largest_free_block_bytes(), 3072);
  void* big = *arena->allocate(3072);
  EXPECT_EQ(big, a);
  ASSERT_TRUE(arena->free(big));
  ASSERT_TRUE(arena->free(d));
}

TEST(DeviceArena, OutOfMemoryReportsRequestedInUseAndCapacity) {
  auto arena = make_arena(4096);
  void* a = *arena->allocate(3000);  // reserves 3072
  Result<void*> too_big = arena->allocate(2000);
  ASSERT_FALSE(too_big.has_value());
  EXPECT_EQ(too_big.error().code, ErrorCode::kOutOfMemory);
  EXPECT_THAT(too_big.error().message, HasSubstr("requested 2000 bytes"));
  EXPECT_THAT(too_big.error().message, HasSubstr("in use 3072 bytes"));
  EXPECT_THAT(too_big.error().message, HasSubstr("capacity 4096 bytes"));
  EXPECT_THAT(too_big.error().message, HasSubstr("largest free block 1024 bytes"));
  ASSERT_TRUE(arena->free(a));
}

TEST(DeviceArena, RequestsBeyondTheCapacityFailWithoutOverflow) {
  auto arena = make_arena(4096);
  Result<void*> huge = arena->allocate(std::numeric_limits<std::int64_t>::max());
  ASSERT_FALSE(huge.has_value());
  EXPECT_EQ(huge.error().code, ErrorCode::kOutOfMemory);
}

TEST(DeviceArena, RejectsZeroSizesDoubleFreesAndForeignPointers) {
  auto arena = make_arena(4096);
  EXPECT_EQ(arena->allocate(0).error().code, ErrorCode::kInvalidArgument);
  void* a = *arena->allocate(16);
  ASSERT_TRUE(arena->free(a));
  Status again = arena->free(a);
  ASSERT_FALSE(again.has_value());
  EXPECT_THAT(again.error().message, HasSubstr("not a live allocation"));
  int local = 0;
  EXPECT_FALSE(arena->free(&local).has_value());
  EXPECT_FALSE(arena->free(nullptr).has_value());
}

TEST(DeviceArena, RejectsBadOptions) {
  EXPECT_FALSE(DeviceArena::create({4096, 100}).has_value());  // not a power of two
  EXPECT_FALSE(DeviceArena::create({4096, 4}).has_value());    // below 8
  EXPECT_FALSE(DeviceArena::create({-1, 256}).has_value());
  auto empty = make_arena(0);
  EXPECT_EQ(empty->allocate(1).error().code, ErrorCode::kOutOfMemory);
}

#if defined(__SANITIZE_ADDRESS__)
TEST(DeviceArenaDeathTest, TouchingReleasedMemoryIsReportedUnderAddressSanitizer) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto arena = make_arena(4096);
  auto* ptr = static_cast<volatile unsigned char*>(*arena->allocate(64));
  ptr[0] = 1;
  ASSERT_TRUE(arena->free(const_cast<unsigned char*>(ptr)));
  EXPECT_DEATH(ptr[0] = 2, "use-after-poison");
}
#endif

TEST(DeviceArenaProperty, RandomAllocationsNeverOverlapAndAccountExactly) {
  // A model of live blocks checks that allocations are disjoint, inside the
  // arena, keep their bytes, and that in-use bytes match; after freeing all,
  // one block spans the whole capacity again.
  constexpr std::int64_t kCapacity = 1 << 20;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    auto arena = make_arena(kCapacity, 64);
    std::mt19937_64 rng(seed);
    std::map<std::uintptr_t, std::pair<std::int64_t, unsigned char>> live;  // address → (size, fill)
    std::int64_t in_use = 0;
    auto* base = static_cast<std::byte*>(*arena->allocate(64));
    ASSERT_TRUE(arena->free(base));
    for (int step = 0; step < 2000; ++step) {
      if (live.empty() || rng() % 3 != 0) {
        const std::int64_t size = 1 + static_cast<std::int64_t>(rng() % 20000);
        Result<void*> ptr = arena->allocate(size);
        if (!ptr) {
          ASSERT_EQ(ptr.error().code, ErrorCode::kOutOfMemory);
          continue;
        }
        const auto address = reinterpret_cast<std::uintptr_t>(*ptr);
        ASSERT_GE(static_cast<std::byte*>(*ptr), base);
        ASSERT_LE(static_cast<std::byte*>(*ptr) + size, base + kCapacity);
        auto next = live.lower_bound(address);
        if (next != live.end()) {
          ASSERT_LE(address + static_cast<std::uintptr_t>(size), next->first);
        }
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + static_cast<std::uintptr_t>(prev->second.first), address);
        }
        const auto fill = static_cast<unsigned char>(rng());
        std::memset(*ptr, fill, static_cast<std::size_t>(size));
        live.emplace(address, std::make_pair(size, fill));
        in_use += arena->reserved_size(size);
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        const auto* bytes = reinterpret_cast<const unsigned char*>(it->first);
        const auto [size, fill] = it->second;
        ASSERT_TRUE(std::all_of(bytes, bytes + size, [fill](unsigned char b) { return b == fill; }));
        ASSERT_TRUE(arena->free(reinterpret_cast<void*>(it->first)));
        in_use -= arena->reserved_size(size);
        live.erase(it);
      }
      ASSERT_EQ(arena->stats().in_use_bytes, in_use);
      ASSERT_EQ(arena->stats().allocation_count, static_cast<std::int64_t>(live.size()));
    }
    for (auto& [address, entry] : live) ASSERT_TRUE(arena->free(reinterpret_cast<void*>(address)));
    EXPECT_EQ(arena->largest_free_block_bytes(), kCapacity);
  }
}

}  // namespace
}  // namespace hyperoffload
