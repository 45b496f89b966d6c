#include "hyperoffload/runtime/host_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/gate.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAre;
using testing::Gate;
using ::testing::HasSubstr;

std::unique_ptr<HostBackend> make_backend(HostBackendOptions options = {}) {
  Result<std::unique_ptr<HostBackend>> backend = HostBackend::create(options);
  EXPECT_TRUE(backend.has_value()) << backend.error().message;
  return std::move(*backend);
}

TEST(HostBackend, CopiesDeviceToHostAndBack) {
  auto backend = make_backend({.device_capacity_bytes = 1 << 20});
  std::vector<unsigned char> source(1000);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>(i * 7);
  void* device = *backend->allocate_device(1000);
  void* host = *backend->allocate_host(1000);
  const Stream compute = backend->stream(StreamRole::kCompute);
  ASSERT_TRUE(backend->copy_async(compute, device, source.data(), 1000, CopyKind::kHostToDevice));
  const Stream d2h = backend->stream(StreamRole::kDeviceToHost);
  ASSERT_TRUE(backend->copy_async(d2h, host, device, 1000, CopyKind::kDeviceToHost));
  ASSERT_TRUE(backend->synchronize_stream(d2h));
  EXPECT_EQ(std::memcmp(host, source.data(), 1000), 0);
  ASSERT_TRUE(backend->free_host(host));
  ASSERT_TRUE(backend->free_device(device));
  EXPECT_EQ(backend->host_bytes_in_use(), 0);
  EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
}

TEST(HostBackend, RunsAStreamsWorkInFifoOrder) {
  auto backend = make_backend();
  const Stream stream = *backend->create_stream();
  std::vector<int> order;  // touched only by the stream's thread until synchronize
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(backend->launch_host_function(stream, [&order, i] {
      if (i % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      order.push_back(i);
    }));
  }
  ASSERT_TRUE(backend->synchronize_stream(stream));
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST(HostBackend, EventCompletesWhenItsStreamReachesIt) {
  auto backend = make_backend();
  const Stream stream = *backend->create_stream();
  const Event event = *backend->create_event();
  EXPECT_TRUE(*backend->event_completed(event));  // never recorded
  Gate gate;
  ASSERT_TRUE(backend->launch_host_function(stream, gate.blocker()));
  ASSERT_TRUE(backend->record_event(event, stream));
  EXPECT_FALSE(*backend->event_completed(event));
  gate.open();
  ASSERT_TRUE(backend->synchronize_event(event));
  EXPECT_TRUE(*backend->event_completed(event));
  ASSERT_TRUE(backend->destroy_event(event));
}

TEST(HostBackend, ComputeStreamIsTheCallerSoItsEventsCompleteAtOnce) {
  auto backend = make_backend();
  const Stream compute = backend->stream(StreamRole::kCompute);
  const Event event = *backend->create_event();
  bool ran = false;
  ASSERT_TRUE(backend->launch_host_function(compute, [&] { ran = true; }));
  EXPECT_TRUE(ran);  // inline
  ASSERT_TRUE(backend->record_event(event, compute));
  EXPECT_TRUE(*backend->event_completed(event));
  ASSERT_TRUE(backend->destroy_event(event));
}

// Note [Small copies on an idle stream]: with inline_copy_max_bytes 1000, a
// copy of 1000 bytes on the idle D2H stream is done when copy_async returns,
// and an event recorded there is complete at once; while the stream has work
// pending (a function held by a gate), a small copy and a record wait their
// turn behind it; and a copy of 1001 bytes goes to the worker and is done in
// its order (when it runs is the worker's, so only the result is checked).
TEST(HostBackend, SmallCopiesOnAnIdleStreamRunAtOnceAndOthersInOrder) {
  auto backend = make_backend({.inline_copy_max_bytes = 1000});
  const Stream d2h = backend->stream(StreamRole::kDeviceToHost);
  const Event event = *backend->create_event();
  std::vector<unsigned char> source(1001, 5), target(1001, 0);
  ASSERT_TRUE(backend->copy_async(d2h, target.data(), source.data(), 1000, CopyKind::kDeviceToHost));
  EXPECT_EQ(target[0], 5);
  EXPECT_EQ(target[999], 5);
  EXPECT_EQ(target[1000], 0);
  ASSERT_TRUE(backend->record_event(event, d2h));
  EXPECT_TRUE(*backend->event_completed(event));

  // The same stream held: nothing runs at once any more.
  std::fill(target.begin(), target.end(), 0);
  Gate gate;
  ASSERT_TRUE(backend->launch_host_function(d2h, gate.blocker()));
  ASSERT_TRUE(backend->copy_async(d2h, target.data(), source.data(), 10, CopyKind::kDeviceToHost));
  EXPECT_EQ(target[9], 0);  // queued behind the gate (the worker is blocked: no race)
  ASSERT_TRUE(backend->record_event(event, d2h));
  EXPECT_FALSE(*backend->event_completed(event));
  gate.open();
  ASSERT_TRUE(backend->synchronize_event(event));
  EXPECT_EQ(target[9], 5);

  // Idle again, but 1001 bytes is above the limit: the worker runs it, and
  // the record after the held function behind it waits for that function.
  std::fill(target.begin(), target.end(), 0);
  Gate second;
  ASSERT_TRUE(backend->synchronize_stream(d2h));
  ASSERT_TRUE(backend->copy_async(d2h, target.data(), source.data(), 1001, CopyKind::kDeviceToHost));
  ASSERT_TRUE(backend->launch_host_function(d2h, second.blocker()));
  ASSERT_TRUE(backend->record_event(event, d2h));
  EXPECT_FALSE(*backend->event_completed(event));
  second.open();
  ASSERT_TRUE(backend->synchronize_event(event));
  EXPECT_EQ(target[1000], 5);
  ASSERT_TRUE(backend->destroy_event(event));
}

TEST(HostBackend, RejectsANegativeInlineCopyLimit) {
  Result<std::unique_ptr<HostBackend>> backend = HostBackend::create({.inline_copy_max_bytes = -1});
  ASSERT_FALSE(backend.has_value());
  EXPECT_THAT(backend.error().message, HasSubstr("inline_copy_max_bytes must be >= 0"));
}

TEST(HostBackend, StreamWaitEventOrdersWorkAcrossStreams) {
  // Stream A is held by a gate and then writes 1; stream B waits for A's event
  // and then reads. B must see the write even though it is enqueued first in
  // wall time and its own thread is free.
  auto backend = make_backend();
  const Stream a = *backend->create_stream();
  const Stream b = *backend->create_stream();
  const Event written = *backend->create_event();
  Gate gate;
  int value = 0;  // synchronised only through the event: TSan checks the ordering
  int seen = -1;
  ASSERT_TRUE(backend->launch_host_function(a, gate.blocker()));
  ASSERT_TRUE(backend->launch_host_function(a, [&] { value = 1; }));
  ASSERT_TRUE(backend->record_event(written, a));
  ASSERT_TRUE(backend->stream_wait_event(b, written));
  ASSERT_TRUE(backend->launch_host_function(b, [&] { seen = value; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  gate.open();
  ASSERT_TRUE(backend->synchronize_stream(b));
  EXPECT_EQ(seen, 1);
  ASSERT_TRUE(backend->destroy_event(written));
}

TEST(HostBackend, AWaitIsForTheRecordAtCallTimeNotALaterOne) {
  // B waits for A's record #1 (behind a gate). The event is then re-recorded on
  // C, which completes at once: as with cudaStreamWaitEvent, B still waits for
  // record #1.
  auto backend = make_backend();
  const Stream a = *backend->create_stream();
  const Stream b = *backend->create_stream();
  const Stream c = *backend->create_stream();
  const Event event = *backend->create_event();
  Gate gate;
  std::atomic<bool> a_done{false};
  std::atomic<bool> b_saw_a{false};
  ASSERT_TRUE(backend->launch_host_function(a, gate.blocker()));
  ASSERT_TRUE(backend->launch_host_function(a, [&] { a_done = true; }));
  ASSERT_TRUE(backend->record_event(event, a));
  ASSERT_TRUE(backend->stream_wait_event(b, event));
  ASSERT_TRUE(backend->launch_host_function(b, [&] { b_saw_a = a_done.load(); }));
  ASSERT_TRUE(backend->record_event(event, c));
  ASSERT_TRUE(backend->synchronize_stream(c));
  EXPECT_TRUE(*backend->event_completed(event));  // the latest record is done
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  gate.open();
  ASSERT_TRUE(backend->synchronize_stream(b));
  EXPECT_TRUE(b_saw_a.load());
  ASSERT_TRUE(backend->destroy_event(event));
}

TEST(HostBackend, StreamWaitStreamOrdersLaterWorkAfterEarlierWork) {
  auto backend = make_backend();
  const Stream a = *backend->create_stream();
  const Stream b = *backend->create_stream();
  Gate gate;
  std::vector<char> log;
  std::mutex mu;
  auto note = [&](char c) {
    std::lock_guard lock(mu);
    log.push_back(c);
  };
  ASSERT_TRUE(backend->launch_host_function(a, gate.blocker()));
  ASSERT_TRUE(backend->launch_host_function(a, [&] { note('a'); }));
  ASSERT_TRUE(backend->stream_wait_stream(b, a));
  ASSERT_TRUE(backend->launch_host_function(b, [&] { note('b'); }));
  gate.open();
  ASSERT_TRUE(backend->synchronize());
  EXPECT_THAT(log, ElementsAre('a', 'b'));
}

TEST(HostBackend, ElapsedTimeMeasuresTheWorkBetweenTwoEvents) {
  auto backend = make_backend();
  const Stream stream = *backend->create_stream();
  const Event start = *backend->create_event();
  const Event end = *backend->create_event();
  EXPECT_EQ(backend->elapsed_ms(start, end).error().code, ErrorCode::kFailedPrecondition);  // never recorded
  ASSERT_TRUE(backend->record_event(start, stream));
  ASSERT_TRUE(
      backend->launch_host_function(stream, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }));
  ASSERT_TRUE(backend->record_event(end, stream));
  ASSERT_TRUE(backend->synchronize_event(end));
  Result<double> ms = backend->elapsed_ms(start, end);
  ASSERT_TRUE(ms.has_value());
  EXPECT_GE(*ms, 19.0);
  EXPECT_LT(*ms, 2000.0);
  ASSERT_TRUE(backend->destroy_event(start));
  ASSERT_TRUE(backend->destroy_event(end));
}

TEST(HostBackend, OneCopyEngineSharesOneStreamForBothDirections) {
  auto one = make_backend({.copy_engines = CopyEngines::kOne});
  EXPECT_EQ(one->stream(StreamRole::kDeviceToHost), one->stream(StreamRole::kHostToDevice));
  EXPECT_EQ(one->copy_engines(), CopyEngines::kOne);
  auto two = make_backend();
  EXPECT_NE(two->stream(StreamRole::kDeviceToHost), two->stream(StreamRole::kHostToDevice));
  EXPECT_NE(two->stream(StreamRole::kCompute), two->stream(StreamRole::kDeviceToHost));
}

TEST(HostBackend, DeviceMemoryIsLimitedToTheCapacity) {
  auto backend = make_backend({.device_capacity_bytes = 4096});
  void* a = *backend->allocate_device(4000);
  Result<void*> b = backend->allocate_device(512);
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().code, ErrorCode::kOutOfMemory);
  EXPECT_THAT(b.error().message, HasSubstr("requested 512 bytes, in use 4096 bytes, capacity 4096 bytes"));
  ASSERT_TRUE(backend->free_device(a));
}

TEST(HostBackend, RejectsUnknownHandlesAndBadArguments) {
  auto backend = make_backend();
  const Stream bogus{0xdead0};
  int x = 0;
  EXPECT_EQ(backend->copy_async(bogus, &x, &x, 4, CopyKind::kHostToHost).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(backend->record_event(Event{0xbeef0}, backend->stream(StreamRole::kCompute)).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(backend->copy_async(backend->stream(StreamRole::kCompute), &x, &x, -1, CopyKind::kHostToHost).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_FALSE(backend->free_host(&x).has_value());
  EXPECT_FALSE(backend->allocate_host(0).has_value());
  const Event event = *backend->create_event();
  ASSERT_TRUE(backend->destroy_event(event));
  EXPECT_FALSE(backend->destroy_event(event).has_value());  // double destroy
}

TEST(HostBackend, RejectsAQueueCapacityThatIsNotAPowerOfTwo) {
  for (std::int64_t capacity : {0, 1, 3, 1000}) {
    Result<std::unique_ptr<HostBackend>> backend = HostBackend::create({.stream_queue_capacity = capacity});
    ASSERT_FALSE(backend.has_value()) << capacity;
    EXPECT_EQ(backend.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(backend.error().message, HasSubstr("must be a power of two in [2, 2^24]"));
  }
}

TEST(HostBackend, AnEmulatedLinkMakesEachCopyTakeBytesOverBandwidthOnItsStreamNotTheCaller) {
  // 1 MiB over a 0.05 GiB/s link: 2^20 / (0.05 * 2^30) s = 1/51.2 s = 19.53 ms
  // per copy. Two copies queued back to back on the D2H stream take twice that
  // (one link, FIFO); the caller only enqueues them.
  constexpr std::int64_t kBytes = 1 << 20;
  constexpr double kCopyMs = 1000.0 / 51.2;  // 19.53125
  auto ms_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  auto backend = make_backend({.device_capacity_bytes = 4 << 20, .emulated_copy_bandwidth_gib_per_s = 0.05});
  void* device = *backend->allocate_device(kBytes);
  void* host = *backend->allocate_host(kBytes);
  std::memset(device, 0x3c, kBytes);
  const Stream d2h = backend->stream(StreamRole::kDeviceToHost);
  const Event start = *backend->create_event();
  const Event end = *backend->create_event();
  const auto enqueue_start = std::chrono::steady_clock::now();
  ASSERT_TRUE(backend->record_event(start, d2h));
  ASSERT_TRUE(backend->copy_async(d2h, host, device, kBytes, CopyKind::kDeviceToHost));
  ASSERT_TRUE(backend->copy_async(d2h, host, device, kBytes, CopyKind::kDeviceToHost));
  ASSERT_TRUE(backend->record_event(end, d2h));
  EXPECT_LT(ms_since(enqueue_start), kCopyMs);  // the caller was not paced
  ASSERT_TRUE(backend->synchronize_event(end));
  Result<double> ms = backend->elapsed_ms(start, end);
  ASSERT_TRUE(ms.has_value());
  EXPECT_GE(*ms, 2 * kCopyMs);
  EXPECT_LT(*ms, 2 * kCopyMs + 1000.0);  // generous: a loaded machine
  EXPECT_EQ(static_cast<const unsigned char*>(host)[kBytes - 1], 0x3c);
  // A copy on the compute stream (a fault) is synchronous: it paces the caller.
  const auto fault_start = std::chrono::steady_clock::now();
  ASSERT_TRUE(backend->copy_async(backend->stream(StreamRole::kCompute), device, host, kBytes,
                                  CopyKind::kHostToDevice));
  EXPECT_GE(ms_since(fault_start), kCopyMs);
  // Device-to-device copies are not on the link.
  void* other = *backend->allocate_device(kBytes);
  const auto d2d_start = std::chrono::steady_clock::now();
  ASSERT_TRUE(backend->copy_async(backend->stream(StreamRole::kCompute), other, device, kBytes,
                                  CopyKind::kDeviceToDevice));
  EXPECT_LT(ms_since(d2d_start), kCopyMs);
  ASSERT_TRUE(backend->destroy_event(start));
  ASSERT_TRUE(backend->destroy_event(end));
  ASSERT_TRUE(backend->free_device(other));
  ASSERT_TRUE(backend->free_device(device));
  ASSERT_TRUE(backend->free_host(host));
}

TEST(HostBackend, RejectsAnEmulatedLinkThatIsNotAPositiveFiniteBandwidth) {
  for (double link : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    Result<std::unique_ptr<HostBackend>> backend = HostBackend::create({.emulated_copy_bandwidth_gib_per_s = link});
    ASSERT_FALSE(backend.has_value()) << link;
    EXPECT_EQ(backend.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(backend.error().message, HasSubstr("emulated_copy_bandwidth_gib_per_s must be a finite number > 0"));
  }
}

TEST(HostBackend, EnqueueingOntoAFullQueueBlocksUntilTheWorkerFreesASlot) {
  // Capacity 2: the blocker occupies one slot, the first function the other,
  // so a third enqueue cannot complete until the gate opens and the worker
  // frees the blocker's slot. Spin 0 makes the producer sleep at once, the
  // path a long-blocked producer takes.
  auto backend = make_backend({.spin_before_sleep_us = 0, .stream_queue_capacity = 2});
  const Stream stream = *backend->create_stream();
  Gate gate;
  std::vector<int> order;  // touched only by the stream's thread until synchronize
  ASSERT_TRUE(backend->launch_host_function(stream, gate.blocker()));
  ASSERT_TRUE(backend->launch_host_function(stream, [&order] { order.push_back(1); }));
  std::atomic<bool> third_enqueued{false};
  std::thread producer([&] {
    (void)backend->launch_host_function(stream, [&order] { order.push_back(2); });
    third_enqueued.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(third_enqueued.load());
  gate.open();
  producer.join();
  EXPECT_TRUE(third_enqueued.load());
  ASSERT_TRUE(backend->synchronize_stream(stream));
  EXPECT_THAT(order, ElementsAre(1, 2));
}

TEST(HostBackend, SleepingWaitersAreWokenWithoutSpinning) {
  // Spin 0: every idle worker and every waiting caller sleeps on its condition
  // variable, so each hand-off below goes through the sleep/wake handshake
  // (Note [Lock-free hand-off]); a lost wake-up would hang this test.
  auto backend = make_backend({.device_capacity_bytes = 1 << 20, .spin_before_sleep_us = 0});
  void* device = *backend->allocate_device(4096);
  void* host = *backend->allocate_host(4096);
  const Stream d2h = backend->stream(StreamRole::kDeviceToHost);
  const Stream h2d = backend->stream(StreamRole::kHostToDevice);
  const Event event = *backend->create_event();
  std::vector<unsigned char> pattern(4096);
  for (int round = 0; round < 300; ++round) {
    std::memset(pattern.data(), round & 0xff, pattern.size());
    std::memcpy(device, pattern.data(), pattern.size());
    ASSERT_TRUE(backend->copy_async(d2h, host, device, 4096, CopyKind::kDeviceToHost));
    ASSERT_TRUE(backend->record_event(event, d2h));
    // The H2D stream waits for the D2H's event, then copies back over device.
    ASSERT_TRUE(backend->stream_wait_event(h2d, event));
    ASSERT_TRUE(backend->copy_async(h2d, device, host, 4096, CopyKind::kHostToDevice));
    if (round % 2 == 0) {
      ASSERT_TRUE(backend->synchronize_stream(h2d));
    } else {
      ASSERT_TRUE(backend->stream_wait_stream(backend->stream(StreamRole::kCompute), h2d));
    }
    ASSERT_EQ(std::memcmp(device, pattern.data(), pattern.size()), 0) << "round " << round;
  }
  ASSERT_TRUE(backend->destroy_event(event));
  ASSERT_TRUE(backend->free_host(host));
  ASSERT_TRUE(backend->free_device(device));
}

// Four host threads each push copies through the two copy streams and wait
// on their own events; every byte must arrive. Run under TSan this checks the
// backend's internal synchronisation — with every copy on the workers, and
// with copies of up to 1 KiB (all of them here) run by their callers whenever
// the stream is idle, so that both paths interleave.
void copy_through_shared_streams(std::int64_t inline_copy_max_bytes) {
  auto backend = make_backend({.device_capacity_bytes = 1 << 22, .inline_copy_max_bytes = inline_copy_max_bytes});
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::int64_t size = 256 * (t + 1);
      void* device = *backend->allocate_device(size);
      void* host = *backend->allocate_host(size);
      std::vector<unsigned char> pattern(static_cast<std::size_t>(size));
      const Event event = *backend->create_event();
      for (int r = 0; r < kRounds; ++r) {
        std::memset(pattern.data(), (t * 31 + r) & 0xff, pattern.size());
        std::memcpy(device, pattern.data(), pattern.size());
        const Stream d2h = backend->stream(StreamRole::kDeviceToHost);
        if (!backend->copy_async(d2h, host, device, size, CopyKind::kDeviceToHost)) ++failures;
        if (!backend->record_event(event, d2h)) ++failures;
        if (!backend->synchronize_event(event)) ++failures;
        if (std::memcmp(host, pattern.data(), pattern.size()) != 0) ++failures;
      }
      (void)backend->destroy_event(event);
      (void)backend->free_host(host);
      (void)backend->free_device(device);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
  EXPECT_EQ(backend->host_bytes_in_use(), 0);
}

TEST(HostBackendStress, ManyThreadsCopyThroughSharedStreamsWithoutRaces) { copy_through_shared_streams(0); }

TEST(HostBackendStress, ManyThreadsCopyInlineOrThroughSharedStreamsWithoutRaces) {
  copy_through_shared_streams(1024);
}

}  // namespace
}  // namespace hyperoffload
