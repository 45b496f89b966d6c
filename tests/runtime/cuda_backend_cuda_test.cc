// CUDA backend tests (label gpu): built with the CUDA toolkit, skipped when no
// device is present. They run the same contracts as the HostBackend tests on
// a real device: copies, events and stream ordering, the residency manager's
// offload/prefetch/fault paths and a session replaying a plan.
#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "hyperoffload/exec/session.h"
#include "hyperoffload/runtime/cuda_backend.h"
#include "hyperoffload/runtime/residency_manager.h"

namespace hyperoffload {
namespace {

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    Result<std::unique_ptr<Backend>> backend = make_cuda_backend();
    ASSERT_TRUE(backend.has_value()) << backend.error().message;
    backend_ = std::move(*backend);
  }

  // Writes `value` bytes into device memory through the compute stream.
  void device_fill(void* device, std::int64_t bytes, unsigned char value) {
    std::vector<unsigned char> host(static_cast<std::size_t>(bytes), value);
    ASSERT_TRUE(backend_->copy_async(backend_->stream(StreamRole::kCompute), device, host.data(), bytes,
                                     CopyKind::kHostToDevice));
    ASSERT_TRUE(backend_->synchronize_stream(backend_->stream(StreamRole::kCompute)));
  }
  std::vector<unsigned char> device_read(const void* device, std::int64_t bytes) {
    std::vector<unsigned char> host(static_cast<std::size_t>(bytes));
    EXPECT_TRUE(backend_->copy_async(backend_->stream(StreamRole::kCompute), host.data(), device, bytes,
                                     CopyKind::kDeviceToHost));
    EXPECT_TRUE(backend_->synchronize_stream(backend_->stream(StreamRole::kCompute)));
    return host;
  }

  std::unique_ptr<Backend> backend_;
};

TEST_F(CudaBackendTest, CopiesBetweenDeviceAndPinnedHostMemory) {
  constexpr std::int64_t kBytes = 1 << 20;
  void* device = *backend_->allocate_device(kBytes);
  void* host = *backend_->allocate_host(kBytes);
  device_fill(device, kBytes, 0x5a);
  // The D2H stream must wait for the compute stream that wrote the data.
  ASSERT_TRUE(backend_->stream_wait_stream(backend_->stream(StreamRole::kDeviceToHost),
                                           backend_->stream(StreamRole::kCompute)));
  ASSERT_TRUE(
      backend_->copy_async(backend_->stream(StreamRole::kDeviceToHost), host, device, kBytes, CopyKind::kDeviceToHost));
  ASSERT_TRUE(backend_->synchronize_stream(backend_->stream(StreamRole::kDeviceToHost)));
  EXPECT_EQ(static_cast<unsigned char*>(host)[kBytes - 1], 0x5a);
  EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, kBytes);
  ASSERT_TRUE(backend_->free_host(host));
  ASSERT_TRUE(backend_->free_device(device));
  EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 0);
}

TEST_F(CudaBackendTest, EventsCompleteAndTimeACopy) {
  constexpr std::int64_t kBytes = 64 << 20;
  void* device = *backend_->allocate_device(kBytes);
  void* host = *backend_->allocate_host(kBytes);
  const Stream d2h = backend_->stream(StreamRole::kDeviceToHost);
  const Event start = *backend_->create_event();
  const Event end = *backend_->create_event();
  ASSERT_TRUE(backend_->record_event(start, d2h));
  ASSERT_TRUE(backend_->copy_async(d2h, host, device, kBytes, CopyKind::kDeviceToHost));
  ASSERT_TRUE(backend_->record_event(end, d2h));
  ASSERT_TRUE(backend_->synchronize_event(end));
  EXPECT_TRUE(*backend_->event_completed(end));
  Result<double> ms = backend_->elapsed_ms(start, end);
  ASSERT_TRUE(ms.has_value()) << ms.error().message;
  EXPECT_GT(*ms, 0.0);
  ASSERT_TRUE(backend_->destroy_event(start));
  ASSERT_TRUE(backend_->destroy_event(end));
  ASSERT_TRUE(backend_->free_host(host));
  ASSERT_TRUE(backend_->free_device(device));
}

TEST_F(CudaBackendTest, CudaErrorsNameTheCallTheErrorAndTheLocation) {
  const Status bad = backend_->copy_async(backend_->stream(StreamRole::kCompute), nullptr, reinterpret_cast<void*>(0x1),
                                          64, CopyKind::kDeviceToDevice);
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, ::testing::HasSubstr("CUDA call cudaMemcpyAsync"));
  EXPECT_THAT(bad.error().message, ::testing::HasSubstr("cuda_backend_cuda.cc:"));
}

TEST_F(CudaBackendTest, ResidencyManagerOffloadsPrefetchesAndFaultsOnTheDevice) {
  EventPool events(*backend_);
  PinnedHostPool pool(*backend_);
  {
    ResidencyManager residency(*backend_, pool, events);
    constexpr std::int64_t kBytes = 4 << 20;
    void* a = *residency.bind(1, kBytes);
    void* b = *residency.bind(2, kBytes);
    device_fill(a, kBytes, 1);
    device_fill(b, kBytes, 2);
    for (StorageId id : {1, 2}) {
      ASSERT_TRUE(residency.copy_d2h(id));
      ASSERT_TRUE(residency.release_device(id));
    }
    ASSERT_TRUE(residency.copy_h2d(1));
    void* a2 = *residency.device_ptr(1);  // waits for the prefetch
    void* b2 = *residency.device_ptr(2);  // a fault
    EXPECT_EQ(device_read(a2, kBytes)[kBytes / 2], 1);
    EXPECT_EQ(device_read(b2, kBytes)[kBytes - 1], 2);
    EXPECT_EQ(residency.stats().faults, 1);
    ASSERT_TRUE(residency.reset());
  }
  ASSERT_TRUE(pool.drain());
  ASSERT_TRUE(pool.trim());
  EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 0);
}

TEST_F(CudaBackendTest, UnderAHeldBudgetABindWaitsForTheD2HOfAReleasedBuffer) {
  // Note [Held bytes]: budget two 64 MiB buffers. 1 is offloaded and released
  // while its D2H runs (its buffer is held); binding 3 waits on the copy's
  // event, frees 1's buffer, then allocates: the device never holds three.
  EventPool events(*backend_);
  PinnedHostPool pool(*backend_);
  {
    constexpr std::int64_t kBytes = 64 << 20;
    ResidencyManager residency(*backend_, pool, events, ResidencyOptions{.rematerialize = {}, .record_copies = RecordCopies::kNo, .held_budget_bytes = 2 * kBytes});
    ASSERT_TRUE(residency.bind(1, kBytes));
    ASSERT_TRUE(residency.bind(2, kBytes));
    ASSERT_TRUE(residency.copy_d2h(1));
    ASSERT_TRUE(residency.release_device(1));
    ASSERT_TRUE(residency.bind(3, kBytes));
    const ResidencyStats stats = residency.stats();
    EXPECT_EQ(stats.peak_held_bytes, 2 * kBytes);
    EXPECT_EQ(stats.over_budget_allocations, 0);
    EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 2 * kBytes);
    EXPECT_EQ(backend_->device_memory_stats().peak_bytes, 2 * kBytes);
    ASSERT_TRUE(residency.reset());
  }
  ASSERT_TRUE(pool.drain());
  ASSERT_TRUE(pool.trim());
  EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 0);
}

TEST_F(CudaBackendTest, ASessionReplaysAPlanOnTheDevice) {
  // Ops are copies on the compute stream: op k copies activation k-1 into a
  // new activation k; activations 0 and 1 are read again by a last op, so they
  // are offloaded in between (the budget holds four of the eight).
  constexpr std::int64_t kBytes = 8 << 20;
  constexpr int kOps = 8;
  SessionOptions options;
  options.budget_bytes = 4 * kBytes;
  auto session = std::move(*Session::create(*backend_, options));
  std::vector<unsigned char> seed(static_cast<std::size_t>(kBytes), 0x42);
  const Stream compute = backend_->stream(StreamRole::kCompute);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(session->begin_step());
    const StorageId base = 100 * (step + 1);
    for (int k = 0; k < kOps; ++k) {
      std::vector<StorageId> inputs;
      if (k > 0) inputs.push_back(base + k - 1);
      ASSERT_TRUE(session->on_op_begin("copy", inputs, {}));
      void* out = *session->allocate_output(base + k, kBytes);
      if (k == 0) {
        ASSERT_TRUE(backend_->copy_async(compute, out, seed.data(), kBytes, CopyKind::kHostToDevice));
        ASSERT_TRUE(backend_->synchronize_stream(compute));
      } else {
        void* in = *session->device_ptr(base + k - 1, DeviceAccess::kRead);
        ASSERT_TRUE(backend_->copy_async(compute, out, in, kBytes, CopyKind::kDeviceToDevice));
      }
      const OpOutput outputs[] = {{base + k, kBytes, nullptr, {}}};
      ASSERT_TRUE(session->on_op_end(outputs, {}));
      if (k >= 3) {
        ASSERT_TRUE(session->on_storage_freed(base + k - 1));
      }
    }
    const std::vector<StorageId> checked = {base, base + 1, base + kOps - 1};
    ASSERT_TRUE(session->on_op_begin("check", checked, {}));
    for (StorageId id : checked) {
      EXPECT_EQ(device_read(*session->device_ptr(id, DeviceAccess::kRead), kBytes)[kBytes / 3], 0x42);
    }
    ASSERT_TRUE(session->on_op_end({}, {}));
    for (StorageId id : checked) ASSERT_TRUE(session->on_storage_freed(id));
    Status ended = session->end_step();
    ASSERT_TRUE(ended.has_value()) << ended.error().message;
  }
  EXPECT_GT(session->last_step_stats().d2h_bytes, 0);
  EXPECT_LE(session->last_step_stats().peak_held_bytes, 4 * kBytes);
  EXPECT_EQ(session->last_step_stats().over_budget_allocations, 0);
  ASSERT_TRUE(session->abort_step());
  EXPECT_EQ(backend_->device_memory_stats().in_use_bytes, 0);
}

}  // namespace
}  // namespace hyperoffload
