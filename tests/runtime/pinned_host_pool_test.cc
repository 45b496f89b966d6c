#include "hyperoffload/runtime/pinned_host_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "hyperoffload/runtime/host_backend.h"
#include "runtime/gate.h"

namespace hyperoffload {
namespace {

using testing::Gate;
using ::testing::HasSubstr;

class PinnedHostPoolTest : public ::testing::Test {
 protected:
  PinnedHostPoolTest() : backend_(std::move(*HostBackend::create({}))), events_(*backend_) {}

  // A fence that passes only once `gate` opens (the stream is blocked on it).
  Fence gated_fence(Gate& gate) {
    const Stream stream = backend_->stream(StreamRole::kDeviceToHost);
    EXPECT_TRUE(backend_->launch_host_function(stream, gate.blocker()));
    return *events_.record(stream);
  }

  std::unique_ptr<HostBackend> backend_;
  EventPool events_;
};

TEST(PinnedHostPoolSizeClasses, WasteAtMostAQuarterOfTheRequest) {
  for (std::int64_t size = 1; size <= 200000; ++size) {
    const PinnedHostPool::SizeClass cls = PinnedHostPool::size_class_of(size);
    ASSERT_GE(cls.size_bytes, size);
    ASSERT_LE(4 * cls.size_bytes, 5 * size) << size;  // size_bytes <= 1.25 * size
    ASSERT_EQ(PinnedHostPool::size_class_of_index(cls.index), cls.size_bytes);
    // The class is the smallest: the previous class is too small.
    if (cls.index > 0) {
      ASSERT_LT(PinnedHostPool::size_class_of_index(cls.index - 1), size);
    }
  }
  for (std::int64_t size : {std::int64_t{1} << 30, (std::int64_t{3} << 33) + 1, std::int64_t{1} << 50}) {
    const PinnedHostPool::SizeClass cls = PinnedHostPool::size_class_of(size);
    EXPECT_GE(cls.size_bytes, size);
    EXPECT_LE(4 * (cls.size_bytes / 4), 5 * (size / 4));
    EXPECT_EQ(PinnedHostPool::size_class_of_index(cls.index), cls.size_bytes);
  }
}

TEST(PinnedHostPoolSizeClasses, FourClassesPerPowerOfTwoAboveSixtyFour) {
  // 64 is exact; (64,128] has 80, 96, 112, 128; (128,256] has 160, 192, 224, 256.
  EXPECT_EQ(PinnedHostPool::size_class_of(64).size_bytes, 64);
  EXPECT_EQ(PinnedHostPool::size_class_of(65).size_bytes, 80);
  EXPECT_EQ(PinnedHostPool::size_class_of(81).size_bytes, 96);
  EXPECT_EQ(PinnedHostPool::size_class_of(128).size_bytes, 128);
  EXPECT_EQ(PinnedHostPool::size_class_of(129).size_bytes, 160);
  EXPECT_EQ(PinnedHostPool::size_class_of(1000).size_bytes, 1024);
  EXPECT_EQ(PinnedHostPool::size_class_of(1025).size_bytes, 1280);
  EXPECT_EQ(PinnedHostPool::size_class_of((1 << 20) + 1).size_bytes, (1 << 20) + (1 << 18));
}

TEST_F(PinnedHostPoolTest, ReusesAReleasedBlockOfTheSameClass) {
  PinnedHostPool pool(*backend_);
  PinnedBlock a = *pool.acquire(1000);
  EXPECT_EQ(a.size_bytes, 1024);
  pool.release(a);
  PinnedBlock b = *pool.acquire(990);  // same class (1024)
  EXPECT_EQ(b.ptr, a.ptr);
  PinnedBlock c = *pool.acquire(1100);  // class 1280: a new block
  EXPECT_NE(c.ptr, a.ptr);
  PinnedPoolStats stats = pool.stats();
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.current_bytes, 1024 + 1280);
  EXPECT_EQ(stats.peak_bytes, 1024 + 1280);
  EXPECT_EQ(stats.allocated_bytes, 1024 + 1024 + 1280);
  EXPECT_EQ(stats.freed_bytes, 1024);
  EXPECT_EQ(stats.reserved_bytes, 1024 + 1280);
  pool.release(b);
  pool.release(c);
  stats = pool.stats();
  EXPECT_EQ(stats.current_bytes, 0);
  EXPECT_EQ(stats.cached_bytes, 1024 + 1280);
  ASSERT_TRUE(pool.trim());
  EXPECT_EQ(pool.stats().reserved_bytes, 0);
  EXPECT_EQ(backend_->host_bytes_in_use(), 0);
}

TEST_F(PinnedHostPoolTest, TrimToFreesTheLargestCachedBlocksFirstAndKeepsHeldOnes) {
  // Classes 1024, 2048 and 4096 cached, a 512 block held: reserved 7680.
  // trim_to(4000) frees the 4096 block (largest first): 3584 <= 4000, so the
  // 2048 and 1024 blocks stay. trim_to(0) frees the rest of the cache; the
  // held block stays reserved.
  PinnedHostPool pool(*backend_);
  PinnedBlock held = *pool.acquire(512);
  PinnedBlock a = *pool.acquire(1024);
  PinnedBlock b = *pool.acquire(2048);
  PinnedBlock c = *pool.acquire(4096);
  pool.release(a);
  pool.release(b);
  pool.release(c);
  EXPECT_EQ(pool.stats().reserved_bytes, 7680);
  ASSERT_TRUE(pool.trim_to(4000));
  EXPECT_EQ(pool.stats().reserved_bytes, 512 + 1024 + 2048);
  EXPECT_EQ(pool.stats().cached_bytes, 1024 + 2048);
  EXPECT_EQ(pool.acquire(2048)->ptr, b.ptr);  // the 2048 block is still cached
  EXPECT_EQ(backend_->host_bytes_in_use(), 512 + 1024 + 2048);
  pool.release(b);
  ASSERT_TRUE(pool.trim_to(0));
  EXPECT_EQ(pool.stats().reserved_bytes, 512);
  EXPECT_EQ(pool.stats().cached_bytes, 0);
  EXPECT_EQ(backend_->host_bytes_in_use(), 512);
  pool.release(held);
}

TEST_F(PinnedHostPoolTest, ResetPeakStartsANewPeakAtTheBytesHeldNow) {
  PinnedHostPool pool(*backend_);
  PinnedBlock a = *pool.acquire(1024);
  PinnedBlock b = *pool.acquire(2048);
  pool.release(b);
  EXPECT_EQ(pool.stats().peak_bytes, 3072);
  pool.reset_peak();
  EXPECT_EQ(pool.stats().peak_bytes, 1024);  // a is still held
  PinnedBlock c = *pool.acquire(1024);
  EXPECT_EQ(pool.stats().peak_bytes, 2048);
  pool.release(a);
  pool.release(c);
}

TEST_F(PinnedHostPoolTest, ABlockReleasedDuringACopyIsReusedOnlyAfterTheCopy) {
  PinnedHostPool pool(*backend_);
  Gate gate;
  PinnedBlock a = *pool.acquire(4096);
  const Fence copying = gated_fence(gate);
  pool.release(a, {&copying, 1});
  EXPECT_EQ(pool.stats().pending_bytes, 4096);
  PinnedBlock b = *pool.acquire(4096);  // a is still in flight: a new block
  EXPECT_NE(b.ptr, a.ptr);
  gate.open();
  ASSERT_TRUE(copying.wait());
  PinnedBlock c = *pool.acquire(4096);  // polled at acquire: a is recycled
  EXPECT_EQ(c.ptr, a.ptr);
  EXPECT_EQ(pool.stats().pending_bytes, 0);
  pool.release(b);
  pool.release(c);
}

TEST_F(PinnedHostPoolTest, AtCapacityFreesCachedBlocksOfOtherClasses) {
  // Capacity 4096: a cached 2048 block and a held 2048 block fill it. A 4096
  // request frees the cached one, which is not enough, so it fails; once the
  // held block is released too, freeing both cached blocks makes room.
  PinnedHostPool pool(*backend_, {.capacity_bytes = 4096});
  PinnedBlock a = *pool.acquire(2048);
  PinnedBlock b = *pool.acquire(2048);
  pool.release(a);
  Result<PinnedBlock> big = pool.acquire(4096);
  ASSERT_FALSE(big.has_value());
  EXPECT_EQ(big.error().code, ErrorCode::kOutOfMemory);
  pool.release(b);
  big = pool.acquire(4096);
  ASSERT_TRUE(big.has_value()) << big.error().message;
  EXPECT_EQ(pool.stats().reserved_bytes, 4096);
  EXPECT_EQ(pool.stats().cached_bytes, 0);
  pool.release(*big);
}

TEST_F(PinnedHostPoolTest, AtCapacityWaitsForTheOldestInFlightBlockThatFits) {
  // Capacity 4096, one 4096 block in flight behind a gate: a second acquire
  // must wait for that copy (another thread opens the gate) and then reuses it.
  PinnedHostPool pool(*backend_, {.capacity_bytes = 4096});
  Gate gate;
  PinnedBlock a = *pool.acquire(4096);
  const Fence copying = gated_fence(gate);
  pool.release(a, {&copying, 1});
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    gate.open();
  });
  Result<PinnedBlock> b = pool.acquire(4000);  // same class
  opener.join();
  ASSERT_TRUE(b.has_value()) << b.error().message;
  EXPECT_EQ(b->ptr, a.ptr);
  EXPECT_EQ(pool.stats().waits, 1);
  pool.release(*b);
}

TEST_F(PinnedHostPoolTest, AtCapacityAnInFlightBlockOfAnotherClassIsFreedToMakeRoom) {
  PinnedHostPool pool(*backend_, {.capacity_bytes = 4096});
  Gate gate;
  PinnedBlock a = *pool.acquire(2048);
  PinnedBlock held = *pool.acquire(2048);
  const Fence copying = gated_fence(gate);
  pool.release(a, {&copying, 1});
  gate.open();                                 // `a` is recycled at the next poll or waited for: either way it is freed
  Result<PinnedBlock> b = pool.acquire(1500);  // class 1536: fits once `a` is freed
  ASSERT_TRUE(b.has_value()) << b.error().message;
  EXPECT_EQ(b->size_bytes, 1536);
  EXPECT_EQ(pool.stats().reserved_bytes, 2048 + 1536);
  pool.release(*b);
  pool.release(held);
}

TEST_F(PinnedHostPoolTest, ExhaustionIsAClearErrorNamingRequestInUseAndCapacity) {
  PinnedHostPool pool(*backend_, {.capacity_bytes = 10000});
  PinnedBlock a = *pool.acquire(8000);  // class 8192
  Result<PinnedBlock> b = pool.acquire(3000);
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().code, ErrorCode::kOutOfMemory);
  EXPECT_THAT(b.error().message, HasSubstr("pinned host pool exhausted"));
  EXPECT_THAT(b.error().message, HasSubstr("requested 3000 bytes (size class 3072 bytes)"));
  EXPECT_THAT(b.error().message, HasSubstr("in use 8192 bytes"));
  EXPECT_THAT(b.error().message, HasSubstr("capacity 10000 bytes"));
  EXPECT_EQ(pool.acquire(0).error().code, ErrorCode::kInvalidArgument);
  pool.release(a);
  EXPECT_EQ(pool.stats().current_bytes, 0);
}

TEST_F(PinnedHostPoolTest, DrainWaitsForEveryPendingBlock) {
  PinnedHostPool pool(*backend_);
  Gate gate;
  PinnedBlock a = *pool.acquire(100);
  const Fence copying = gated_fence(gate);
  pool.release(a, {&copying, 1});
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    gate.open();
  });
  ASSERT_TRUE(pool.drain());
  opener.join();
  EXPECT_EQ(pool.stats().pending_bytes, 0);
  EXPECT_EQ(pool.stats().cached_bytes, 112);
}

TEST_F(PinnedHostPoolTest, ConcurrentAcquireAndReleaseKeepStatsExact) {
  PinnedHostPool pool(*backend_, {.capacity_bytes = std::int64_t{64} << 20});
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<PinnedBlock> held;
      for (int i = 0; i < 2000; ++i) {
        if (held.size() < 8 && rng() % 2 == 0) {
          Result<PinnedBlock> block = pool.acquire(1 + static_cast<std::int64_t>(rng() % 50000));
          if (!block) {
            ++failures;
            continue;
          }
          std::memset(block->ptr, t, static_cast<std::size_t>(block->size_bytes));
          held.push_back(*block);
        } else if (!held.empty()) {
          const PinnedBlock block = held.back();
          held.pop_back();
          const auto* bytes = static_cast<const unsigned char*>(block.ptr);
          for (std::int64_t b = 0; b < block.size_bytes; b += 997) {
            if (bytes[b] != t) ++failures;  // another thread got the same block
          }
          pool.release(block);
        }
      }
      for (const PinnedBlock& block : held) pool.release(block);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  const PinnedPoolStats stats = pool.stats();
  EXPECT_EQ(stats.current_bytes, 0);
  EXPECT_EQ(stats.allocated_bytes, stats.freed_bytes);
  EXPECT_EQ(stats.reserved_bytes, stats.cached_bytes);
  ASSERT_TRUE(pool.trim());
  EXPECT_EQ(backend_->host_bytes_in_use(), 0);
}

}  // namespace
}  // namespace hyperoffload
