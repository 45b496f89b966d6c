#include "hyperoffload/runtime/residency_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "hyperoffload/runtime/host_backend.h"
#include "runtime/gate.h"
#include "testing/failing_backend.h"

namespace hyperoffload {
namespace {

using testing::BackendCall;
using testing::FailingBackend;
using testing::Gate;
using ::testing::HasSubstr;

class ResidencyManagerTest : public ::testing::Test {
 protected:
  explicit ResidencyManagerTest(std::int64_t device_capacity = 1 << 20, std::int64_t host_capacity = 1 << 20)
      : backend_(
            std::move(*HostBackend::create({.device_capacity_bytes = device_capacity, .device_alignment_bytes = 64}))),
        events_(*backend_),
        pool_(*backend_, {.capacity_bytes = host_capacity}),
        residency_(std::make_unique<ResidencyManager>(*backend_, pool_, events_)) {}

  void fill(StorageId id, unsigned char value) {
    void* ptr = *residency_->device_ptr(id);
    std::memset(ptr, value, static_cast<std::size_t>(*residency_->size_bytes(id)));
  }
  // All bytes of the storage as the compute stream sees them, or -1 when mixed.
  int value_of(StorageId id) {
    Result<void*> ptr = residency_->device_ptr(id, DeviceAccess::kRead);
    EXPECT_TRUE(ptr.has_value()) << ptr.error().message;
    const auto* bytes = static_cast<const unsigned char*>(*ptr);
    const std::int64_t size = *residency_->size_bytes(id);
    for (std::int64_t i = 1; i < size; ++i) {
      if (bytes[i] != bytes[0]) return -1;
    }
    return bytes[0];
  }
  // Blocks the D2H (or H2D) copy stream until the gate opens.
  void block(StreamRole role, Gate& gate) {
    ASSERT_TRUE(backend_->launch_host_function(backend_->stream(role), gate.blocker()));
  }
  void expect_nothing_held() {
    ASSERT_TRUE(residency_->reset());
    ASSERT_TRUE(pool_.drain());
    EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 0);
    EXPECT_EQ(pool_.stats().current_bytes, 0);
    EXPECT_EQ(pool_.stats().pending_bytes, 0);
    EXPECT_EQ(residency_->stats().storages, 0);
    EXPECT_EQ(residency_->resident_bytes(), 0);
  }

  std::unique_ptr<HostBackend> backend_;
  EventPool events_;
  PinnedHostPool pool_;
  std::unique_ptr<ResidencyManager> residency_;
};

TEST_F(ResidencyManagerTest, OffloadAndPrefetchPreserveTheBytes) {
  ASSERT_TRUE(residency_->bind(7, 4096));
  fill(7, 0x5a);
  ASSERT_TRUE(residency_->copy_d2h(7));
  ASSERT_TRUE(residency_->release_device(7));
  EXPECT_FALSE(residency_->resident(7));
  EXPECT_EQ(residency_->resident_bytes(), 0);
  ASSERT_TRUE(residency_->copy_h2d(7));
  EXPECT_EQ(value_of(7), 0x5a);
  const ResidencyStats stats = residency_->stats();
  EXPECT_EQ(stats.d2h_count, 1);
  EXPECT_EQ(stats.h2d_count, 1);
  EXPECT_EQ(stats.d2h_bytes, 4096);
  EXPECT_EQ(stats.faults, 0);
  EXPECT_EQ(stats.peak_resident_bytes, 4096);
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, CopyD2HIsANoOpWhileTheHostCopyIsCurrent) {
  ASSERT_TRUE(residency_->bind(1, 1000));
  ASSERT_TRUE(residency_->copy_d2h(1));
  ASSERT_TRUE(residency_->copy_d2h(1));
  ASSERT_TRUE(residency_->release_device(1));
  ASSERT_TRUE(residency_->copy_d2h(1));  // not resident, but the host copy is current
  EXPECT_EQ(residency_->stats().d2h_count, 1);
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, CopyD2HOfAStaleHostCopyCopiesAgain) {
  // The reference system skipped copy_d2h whenever a host copy existed, so the
  // write below was lost when the storage came back. Here the copy is redone.
  ASSERT_TRUE(residency_->bind(1, 1000));
  fill(1, 1);
  ASSERT_TRUE(residency_->copy_d2h(1));
  fill(1, 2);
  ASSERT_TRUE(residency_->mark_written(1));
  EXPECT_FALSE(residency_->has_current_host_copy(1));
  ASSERT_TRUE(residency_->copy_d2h(1));
  EXPECT_TRUE(residency_->has_current_host_copy(1));
  ASSERT_TRUE(residency_->release_device(1));
  ASSERT_TRUE(residency_->copy_h2d(1));
  EXPECT_EQ(value_of(1), 2);
  EXPECT_EQ(residency_->stats().d2h_count, 2);
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, CopyH2DNeedsACurrentHostCopy) {
  ASSERT_TRUE(residency_->bind(1, 1000));
  ASSERT_TRUE(residency_->release_device(1));
  Status missing = residency_->copy_h2d(1);
  ASSERT_FALSE(missing.has_value());
  EXPECT_THAT(missing.error().message, HasSubstr("copy_h2d of storage 1: no host copy"));

  ASSERT_TRUE(residency_->bind(2, 1000));
  ASSERT_TRUE(residency_->copy_d2h(2));
  ASSERT_TRUE(residency_->mark_written(2));
  ASSERT_TRUE(residency_->release_device(2));
  Status stale = residency_->copy_h2d(2);
  ASSERT_FALSE(stale.has_value());
  EXPECT_THAT(stale.error().message, HasSubstr("copy_h2d of storage 2: the host copy is stale"));
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, CopyD2HOfAReleasedStorageWithoutACurrentCopyFails) {
  ASSERT_TRUE(residency_->bind(3, 64));
  ASSERT_TRUE(residency_->release_device(3));
  Status copied = residency_->copy_d2h(3);
  ASSERT_FALSE(copied.has_value());
  EXPECT_EQ(copied.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_THAT(copied.error().message, HasSubstr("copy_d2h of storage 3: not resident and no host copy exists"));
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, UsingAReleasedStorageWithACurrentHostCopyIsACountedFault) {
  ASSERT_TRUE(residency_->bind(4, 2048));
  fill(4, 9);
  ASSERT_TRUE(residency_->copy_d2h(4));
  ASSERT_TRUE(residency_->release_device(4));
  EXPECT_EQ(value_of(4), 9);  // demand-paged
  const ResidencyStats stats = residency_->stats();
  EXPECT_EQ(stats.faults, 1);
  EXPECT_EQ(stats.fault_bytes, 2048);
  EXPECT_EQ(stats.h2d_count, 0);
  EXPECT_EQ(stats.h2d_bytes, 2048);  // like the validator: faults are H2D bytes
  EXPECT_TRUE(residency_->resident(4));
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, UsingAReleasedStorageWithoutACurrentHostCopyIsDataLossNamingIt) {
  ASSERT_TRUE(residency_->bind(5, 256));
  ASSERT_TRUE(residency_->release_device(5));
  Result<void*> lost = residency_->device_ptr(5);
  ASSERT_FALSE(lost.has_value());
  EXPECT_EQ(lost.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_THAT(lost.error().message, HasSubstr("storage 5: data lost"));
  EXPECT_THAT(lost.error().message, HasSubstr("no host copy exists"));

  ASSERT_TRUE(residency_->bind(6, 256));
  ASSERT_TRUE(residency_->copy_d2h(6));
  ASSERT_TRUE(residency_->mark_written(6));
  ASSERT_TRUE(residency_->release_device(6));
  lost = residency_->device_ptr(6);
  ASSERT_FALSE(lost.has_value());
  EXPECT_THAT(lost.error().message, HasSubstr("storage 6: data lost"));
  EXPECT_THAT(lost.error().message, HasSubstr("host copy is stale"));
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, UnknownStoragesAreErrorsNamingTheOperationAndId) {
  for (auto [name, status] :
       {std::pair{"copy_d2h", residency_->copy_d2h(77)}, std::pair{"copy_h2d", residency_->copy_h2d(77)},
        std::pair{"release_device", residency_->release_device(77)},
        std::pair{"release_host", residency_->release_host(77)}, std::pair{"forget", residency_->forget(77)}}) {
    ASSERT_FALSE(status.has_value()) << name;
    EXPECT_EQ(status.error().code, ErrorCode::kNotFound);
    EXPECT_THAT(status.error().message, HasSubstr(std::string(name) + " of storage 77: unknown storage"));
  }
  EXPECT_EQ(residency_->device_ptr(77).error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(residency_->bind(1, 8));
  EXPECT_EQ(residency_->bind(1, 8).error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(residency_->bind(2, -1).error().code, ErrorCode::kInvalidArgument);
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, ADeviceBufferReleasedDuringItsD2HIsFreedOnlyAfterTheCopy) {
  ASSERT_TRUE(residency_->bind(1, 4096));
  fill(1, 3);
  Gate gate;
  block(StreamRole::kDeviceToHost, gate);
  ASSERT_TRUE(residency_->copy_d2h(1));
  ASSERT_TRUE(residency_->release_device(1));
  EXPECT_EQ(residency_->resident_bytes(), 0);                     // released logically
  EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 4096);  // but not reused yet
  EXPECT_EQ(residency_->stats().pending_device_frees, 1);
  gate.open();
  ASSERT_TRUE(backend_->synchronize_stream(backend_->stream(StreamRole::kDeviceToHost)));
  ASSERT_TRUE(residency_->poll());
  EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 0);
  EXPECT_EQ(residency_->stats().deferred_frees, 1);
  EXPECT_EQ(value_of(1), 3);  // the host copy was complete
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, AHostBlockReleasedDuringItsH2DReturnsToThePoolAfterTheCopy) {
  ASSERT_TRUE(residency_->bind(1, 4096));
  fill(1, 4);
  ASSERT_TRUE(residency_->copy_d2h(1));
  ASSERT_TRUE(residency_->release_device(1));
  Gate gate;
  block(StreamRole::kHostToDevice, gate);
  ASSERT_TRUE(residency_->copy_h2d(1));
  ASSERT_TRUE(residency_->release_host(1));
  EXPECT_EQ(pool_.stats().pending_bytes, 4096);
  gate.open();
  EXPECT_EQ(value_of(1), 4);  // waits for the H2D
  ASSERT_TRUE(pool_.drain());
  EXPECT_EQ(pool_.stats().pending_bytes, 0);
  EXPECT_EQ(pool_.stats().cached_bytes, 4096);
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, AnAllocationThatDoesNotFitWaitsForDeferredFrees) {
  // Capacity 8192: storage 1 (8192 bytes) is offloaded and released while its
  // D2H is held back, so its memory is still taken when storage 2 asks for
  // 8192. The allocation waits for the D2H (another thread opens the gate),
  // frees the buffer and succeeds.
  auto backend = std::move(*HostBackend::create({.device_capacity_bytes = 8192, .device_alignment_bytes = 64}));
  EventPool events(*backend);
  PinnedHostPool pool(*backend);
  ResidencyManager residency(*backend, pool, events);
  ASSERT_TRUE(residency.bind(1, 8192));
  Gate gate;
  ASSERT_TRUE(backend->launch_host_function(backend->stream(StreamRole::kDeviceToHost), gate.blocker()));
  ASSERT_TRUE(residency.copy_d2h(1));
  ASSERT_TRUE(residency.release_device(1));
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    gate.open();
  });
  Result<void*> second = residency.bind(2, 8192);
  opener.join();
  ASSERT_TRUE(second.has_value()) << second.error().message;
  ASSERT_TRUE(residency.reset());
  EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
}

TEST_F(ResidencyManagerTest, HeldBytesCountABufferUntilItsD2HHasReadIt) {
  // Note [Held bytes]: released at once (resident 0), held until the copy ran.
  ASSERT_TRUE(residency_->bind(1, 4096));
  Gate gate;
  block(StreamRole::kDeviceToHost, gate);
  ASSERT_TRUE(residency_->copy_d2h(1));
  ASSERT_TRUE(residency_->release_device(1));
  EXPECT_EQ(residency_->resident_bytes(), 0);
  EXPECT_EQ(residency_->held_bytes(), 4096);
  gate.open();
  ASSERT_TRUE(backend_->synchronize_stream(backend_->stream(StreamRole::kDeviceToHost)));
  ASSERT_TRUE(residency_->poll());
  EXPECT_EQ(residency_->held_bytes(), 0);
  EXPECT_EQ(residency_->stats().peak_held_bytes, 4096);
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, UnderAHeldBudgetAnAllocationWaitsForTheOldestDeferredFreesItNeedsOnly) {
  // Budget 3072 = three 1024-byte storages. 1 and 2 are offloaded and
  // released while the D2H stream is held by gate A (before 1's copy) and
  // gate B (between 1's and 2's): held stays 3072 (1024 resident + 2048
  // deferred). Binding 4 needs 1024 more: it waits for the oldest deferred
  // free, 1's (a thread opens gate A), which is enough — held 2048 + 1024 =
  // 3072 — and does not wait for 2's, still behind gate B.
  residency_->set_held_budget(3072);
  for (StorageId id : {1, 2, 3}) ASSERT_TRUE(residency_->bind(id, 1024));
  Gate a, b;
  block(StreamRole::kDeviceToHost, a);
  ASSERT_TRUE(residency_->copy_d2h(1));
  block(StreamRole::kDeviceToHost, b);
  ASSERT_TRUE(residency_->copy_d2h(2));
  ASSERT_TRUE(residency_->release_device(1));
  ASSERT_TRUE(residency_->release_device(2));
  EXPECT_EQ(residency_->held_bytes(), 3072);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    a.open();
  });
  Result<void*> fourth = residency_->bind(4, 1024);
  opener.join();
  ASSERT_TRUE(fourth.has_value()) << fourth.error().message;
  const ResidencyStats stats = residency_->stats();
  EXPECT_EQ(stats.held_bytes, 3072);       // 3, 4 resident; 2 deferred
  EXPECT_EQ(stats.peak_held_bytes, 3072);  // never above the budget
  EXPECT_EQ(stats.pending_device_frees, 1);
  EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 3072);
  EXPECT_EQ(backend_->device_memory_stats().peak_bytes, 3072);
  EXPECT_GT(stats.memory_wait_ms, 0.0);
  EXPECT_EQ(stats.over_budget_allocations, 0);
  b.open();
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, WithNothingToWaitForAnAllocationGoesOverTheHeldBudgetAndIsCounted) {
  // Budget 1000 < one 1024-byte storage: nothing is pending, so it goes ahead
  // (never a deadlock) and is counted.
  residency_->set_held_budget(1000);
  ASSERT_TRUE(residency_->bind(1, 1024));
  EXPECT_EQ(residency_->stats().over_budget_allocations, 1);
  EXPECT_EQ(residency_->stats().peak_held_bytes, 1024);
  EXPECT_EQ(residency_->stats().memory_wait_ms, 0.0);
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, AReservationMakesRoomFirstAndTheNextAllocationsTakeFromIt) {
  // Budget 2048. Storage 1 (1024) is offloaded behind a gate and released:
  // held 1024 (deferred). reserve(2048) must wait for its D2H; then an
  // adopted 1024-byte output and a bound 1024-byte one take the reservation
  // (no wait, held stays 2048); a third allocation has no reservation left
  // and nothing to wait for: it goes over and is counted.
  residency_->set_held_budget(2048);
  ASSERT_TRUE(residency_->bind(1, 1024));
  Gate gate;
  block(StreamRole::kDeviceToHost, gate);
  ASSERT_TRUE(residency_->copy_d2h(1));
  ASSERT_TRUE(residency_->release_device(1));
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    gate.open();
  });
  Status reserved = residency_->reserve(2048);
  opener.join();
  ASSERT_TRUE(reserved.has_value()) << reserved.error().message;
  EXPECT_EQ(residency_->held_bytes(), 2048);
  EXPECT_EQ(residency_->stats().reserved_bytes, 2048);
  const double waited_ms = residency_->stats().memory_wait_ms;
  EXPECT_GT(waited_ms, 0.0);
  std::vector<unsigned char> caller_buffer(1024);
  ASSERT_TRUE(residency_->adopt(2, 1024, AdoptedBuffer{caller_buffer.data(), {}}));
  ASSERT_TRUE(residency_->bind(3, 1024));
  EXPECT_EQ(residency_->held_bytes(), 2048);
  EXPECT_EQ(residency_->stats().reserved_bytes, 0);
  EXPECT_EQ(residency_->stats().memory_wait_ms, waited_ms);
  EXPECT_EQ(residency_->stats().over_budget_allocations, 0);
  ASSERT_TRUE(residency_->bind(4, 1024));
  EXPECT_EQ(residency_->stats().over_budget_allocations, 1);
  EXPECT_EQ(residency_->stats().peak_held_bytes, 3072);
  ASSERT_TRUE(residency_->reserve(64));
  residency_->cancel_reservation();
  EXPECT_EQ(residency_->held_bytes(), 3072);
  EXPECT_EQ(residency_->reserve(-1).error().code, ErrorCode::kInvalidArgument);
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, OutOfMemoryAsksTheReclaimHookThenNamesTheStorage) {
  auto backend = std::move(*HostBackend::create({.device_capacity_bytes = 4096, .device_alignment_bytes = 64}));
  EventPool events(*backend);
  PinnedHostPool pool(*backend);
  ResidencyManager residency(*backend, pool, events);
  ASSERT_TRUE(residency.bind(1, 3000));
  // Storage 1 reserves 3008 bytes (64-byte alignment), leaving 1088 free.
  std::vector<std::int64_t> asked;
  residency.set_reclaimer([&](std::int64_t needed) -> Result<bool> {
    asked.push_back(needed);
    if (!residency.resident(1)) return false;
    HO_RETURN_IF_ERROR(residency.copy_d2h(1));
    HO_RETURN_IF_ERROR(residency.release_device(1));
    return true;
  });
  ASSERT_TRUE(residency.bind(2, 2000));  // storage 1 is evicted to make room
  EXPECT_THAT(asked, ::testing::ElementsAre(2000));
  Result<void*> third = residency.bind(3, 3000);  // 2048 free: the hook has nothing left
  EXPECT_THAT(asked, ::testing::ElementsAre(2000, 3000));
  ASSERT_FALSE(third.has_value());
  EXPECT_EQ(third.error().code, ErrorCode::kOutOfMemory);
  EXPECT_THAT(third.error().message, HasSubstr("storage 3"));
  EXPECT_THAT(third.error().message, HasSubstr("requested 3000 bytes"));
  EXPECT_THAT(third.error().message, HasSubstr("capacity 4096 bytes"));
  residency.set_reclaimer({});
  ASSERT_TRUE(residency.reset());
  EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
  EXPECT_EQ(pool.stats().current_bytes, 0);
}

TEST_F(ResidencyManagerTest, AdoptedBuffersGoBackThroughTheirReleaseCallback) {
  std::vector<unsigned char> caller_memory(512, 0x11);
  std::vector<void*> released;
  ASSERT_TRUE(residency_->adopt(9, 512, AdoptedBuffer{caller_memory.data(), [&](void* p) { released.push_back(p); }}));
  Gate gate;
  block(StreamRole::kDeviceToHost, gate);
  ASSERT_TRUE(residency_->copy_d2h(9));
  ASSERT_TRUE(residency_->release_device(9));
  EXPECT_TRUE(released.empty());  // the D2H still reads the caller's buffer
  gate.open();
  ASSERT_TRUE(backend_->synchronize_stream(backend_->stream(StreamRole::kDeviceToHost)));
  ASSERT_TRUE(residency_->poll());
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0], caller_memory.data());
  // Without a rematerialize hook the data comes back into runtime memory.
  EXPECT_EQ(value_of(9), 0x11);
  EXPECT_NE(*residency_->device_ptr(9), static_cast<void*>(caller_memory.data()));
  EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 512);
  expect_nothing_held();
  EXPECT_EQ(released.size(), 1u);  // forgetting never calls the callback
}

TEST_F(ResidencyManagerTest, TheRematerializeHookSuppliesMemoryForAdoptedStorages) {
  std::vector<unsigned char> first(256, 0x22);
  std::vector<unsigned char> second(256, 0);
  int released = 0;
  residency_->set_rematerializer([&](StorageId id, std::int64_t size) -> Result<AdoptedBuffer> {
    EXPECT_EQ(id, 4);
    EXPECT_EQ(size, 256);
    return AdoptedBuffer{second.data(), [&](void*) { ++released; }};
  });
  ASSERT_TRUE(residency_->adopt(4, 256, AdoptedBuffer{first.data(), [&](void*) { ++released; }}));
  ASSERT_TRUE(residency_->copy_d2h(4));
  ASSERT_TRUE(residency_->release_device(4));
  ASSERT_TRUE(residency_->copy_h2d(4));
  EXPECT_EQ(*residency_->device_ptr(4), static_cast<void*>(second.data()));
  EXPECT_EQ(second[100], 0x22);
  ASSERT_TRUE(residency_->poll());
  EXPECT_EQ(released, 1);
  EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 0);
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, ZeroByteStoragesMoveWithoutMemory) {
  ASSERT_TRUE(residency_->bind(1, 0));
  ASSERT_TRUE(residency_->copy_d2h(1));
  ASSERT_TRUE(residency_->release_device(1));
  ASSERT_TRUE(residency_->copy_h2d(1));
  EXPECT_TRUE(residency_->resident(1));
  ASSERT_TRUE(residency_->release_host(1));
  EXPECT_EQ(pool_.stats().allocated_bytes, 0);
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, TheCopyStreamWaitsForTheLastD2HBeforeAnH2DReadsTheBlock) {
  // With the D2H held back, an H2D of the same storage must not read the host
  // block before the D2H has written it (the H2D stream waits on its fence).
  ASSERT_TRUE(residency_->bind(1, 4096));
  fill(1, 0x77);
  Gate gate;
  block(StreamRole::kDeviceToHost, gate);
  ASSERT_TRUE(residency_->copy_d2h(1));
  ASSERT_TRUE(residency_->release_device(1));
  ASSERT_TRUE(residency_->copy_h2d(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  gate.open();
  EXPECT_EQ(value_of(1), 0x77);
  expect_nothing_held();
}

TEST_F(ResidencyManagerTest, ResetReturnsEverythingEvenWithCopiesInFlight) {
  Gate gate;
  for (StorageId id = 0; id < 8; ++id) {
    ASSERT_TRUE(residency_->bind(id, 1000 + id));
  }
  block(StreamRole::kDeviceToHost, gate);
  for (StorageId id = 0; id < 8; ++id) {
    ASSERT_TRUE(residency_->copy_d2h(id));
    if (id % 2 == 0) {
      ASSERT_TRUE(residency_->release_device(id));
    }
  }
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    gate.open();
  });
  ASSERT_TRUE(residency_->reset());
  opener.join();
  EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 0);
  EXPECT_EQ(pool_.stats().current_bytes, 0);
  EXPECT_EQ(residency_->stats().storages, 0);
  EXPECT_EQ(residency_->stats().host_bytes, 0);
}

// Note [Failed copies], found by fuzz/runtime_fuzzer.cc: a copy that fails to
// enqueue leaves its storage as it was and gives back the memory taken for it.
// Before, a D2H whose fence record failed kept its new pinned block with an
// entry that had no host copy, and no release or reset returned it; an H2D or
// fault that failed kept its new device buffer until the storage was forgotten.
class FailedCopyTest : public ::testing::Test {
 protected:
  FailedCopyTest()
      : host_(std::move(*HostBackend::create({.device_capacity_bytes = 1 << 20, .device_alignment_bytes = 64}))),
        backend_(*host_),
        events_(backend_),
        pool_(backend_),
        residency_(backend_, pool_, events_) {}

  std::int64_t device_in_use() const { return host_->device_memory_stats().in_use_bytes; }

  std::unique_ptr<HostBackend> host_;
  FailingBackend backend_;
  EventPool events_;
  PinnedHostPool pool_;
  ResidencyManager residency_;
};

TEST_F(FailedCopyTest, AD2HWhoseFenceCannotBeRecordedGivesItsPinnedBlockBack) {
  ASSERT_TRUE(residency_.bind(1, 4096));
  backend_.fail_call(BackendCall::kRecordEvent);
  const Status failed = residency_.copy_d2h(1);
  ASSERT_FALSE(failed);
  EXPECT_THAT(failed.error().message, HasSubstr("injected: event record"));
  EXPECT_FALSE(residency_.has_host_copy(1));
  EXPECT_EQ(pool_.stats().current_bytes, 0);  // was 4096, for good
  EXPECT_EQ(residency_.stats().d2h_count, 0);
  // The storage is as it was: the copy can be retried.
  ASSERT_TRUE(residency_.copy_d2h(1));
  EXPECT_TRUE(residency_.has_current_host_copy(1));
  EXPECT_EQ(pool_.stats().current_bytes, 4096);
  ASSERT_TRUE(residency_.reset());
  ASSERT_TRUE(pool_.drain());
  EXPECT_EQ(pool_.stats().current_bytes, 0);
}

TEST_F(FailedCopyTest, AnH2DThatCannotBeEnqueuedGivesItsDeviceBufferBack) {
  ASSERT_TRUE(residency_.bind(1, 4096));
  ASSERT_TRUE(residency_.copy_d2h(1));
  ASSERT_TRUE(residency_.release_device(1));
  ASSERT_TRUE(host_->synchronize());
  ASSERT_TRUE(residency_.poll());
  ASSERT_EQ(device_in_use(), 0);
  backend_.fail_call(BackendCall::kCopy);
  ASSERT_FALSE(residency_.copy_h2d(1));
  EXPECT_FALSE(residency_.resident(1));
  EXPECT_EQ(device_in_use(), 0);  // was 4096 until the storage was forgotten
  ASSERT_TRUE(residency_.copy_h2d(1));
  EXPECT_EQ(device_in_use(), 4096);  // one buffer, not two
  EXPECT_EQ(residency_.stats().h2d_count, 1);
}

TEST_F(FailedCopyTest, AFaultThatCannotBeEnqueuedGivesItsDeviceBufferBack) {
  ASSERT_TRUE(residency_.bind(1, 4096));
  ASSERT_TRUE(residency_.copy_d2h(1));
  ASSERT_TRUE(residency_.release_device(1));
  ASSERT_TRUE(host_->synchronize());
  ASSERT_TRUE(residency_.poll());
  backend_.fail_call(BackendCall::kCopy);
  ASSERT_FALSE(residency_.device_ptr(1));
  EXPECT_EQ(device_in_use(), 0);
  EXPECT_EQ(residency_.stats().faults, 0);
  ASSERT_TRUE(residency_.device_ptr(1));
  EXPECT_EQ(device_in_use(), 4096);
  EXPECT_EQ(residency_.stats().faults, 1);
}

}  // namespace
}  // namespace hyperoffload
