// Runtime benchmarks: HostBackend copy throughput against plain memcpy of the
// same sizes, pinned-pool acquire+release latency for a reused size, device
// arena allocate+free.
//
//   build/bin/runtime_benchmark --benchmark_filter='Copy|Memcpy|Pool'
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "hyperoffload/runtime/event_pool.h"
#include "hyperoffload/runtime/host_backend.h"
#include "hyperoffload/runtime/pinned_host_pool.h"

namespace hyperoffload {
namespace {

std::unique_ptr<HostBackend> backend_for(std::int64_t bytes) {
  return std::move(*HostBackend::create({.device_capacity_bytes = 2 * bytes + (1 << 20)}));
}

// One D2H copy on the copy stream's worker thread, then wait for it: the
// latency a copy_d2h + fence wait sees.
void BM_HostBackendCopy(benchmark::State& state) {
  const std::int64_t bytes = state.range(0);
  auto backend = backend_for(bytes);
  void* device = *backend->allocate_device(bytes);
  void* host = *backend->allocate_host(bytes);
  std::memset(device, 1, static_cast<std::size_t>(bytes));
  std::memset(host, 2, static_cast<std::size_t>(bytes));
  const Stream d2h = backend->stream(StreamRole::kDeviceToHost);
  for (auto _ : state) {
    (void)backend->copy_async(d2h, host, device, bytes, CopyKind::kDeviceToHost);
    (void)backend->synchronize_stream(d2h);
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  (void)backend->free_host(host);
  (void)backend->free_device(device);
}
BENCHMARK(BM_HostBackendCopy)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20)->Arg(64 << 20)->UseRealTime();

// Eight copies queued back to back before one wait: throughput when the copy
// stream has work queued, as during a step with several offloads in flight.
void BM_HostBackendCopyQueued(benchmark::State& state) {
  const std::int64_t bytes = state.range(0);
  constexpr int kQueued = 8;
  auto backend = backend_for(bytes);
  void* device = *backend->allocate_device(bytes);
  void* host = *backend->allocate_host(bytes);
  std::memset(device, 1, static_cast<std::size_t>(bytes));
  std::memset(host, 2, static_cast<std::size_t>(bytes));
  const Stream d2h = backend->stream(StreamRole::kDeviceToHost);
  for (auto _ : state) {
    for (int i = 0; i < kQueued; ++i) (void)backend->copy_async(d2h, host, device, bytes, CopyKind::kDeviceToHost);
    (void)backend->synchronize_stream(d2h);
  }
  state.SetBytesProcessed(state.iterations() * kQueued * bytes);
  (void)backend->free_host(host);
  (void)backend->free_device(device);
}
BENCHMARK(BM_HostBackendCopyQueued)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20)->Arg(64 << 20)->UseRealTime();

// The fixed cost a copy pays for running on another thread: an empty host
// function handed to the copy stream's worker, then a wait for it.
void BM_HostBackendRoundTrip(benchmark::State& state) {
  auto backend = std::move(*HostBackend::create({}));
  const Stream d2h = backend->stream(StreamRole::kDeviceToHost);
  for (auto _ : state) {
    (void)backend->launch_host_function(d2h, [] {});
    (void)backend->synchronize_stream(d2h);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HostBackendRoundTrip)->UseRealTime();

// The baseline: memcpy of the same sizes on the calling thread.
void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::unique_ptr<char[]> src(new char[bytes]);
  std::unique_ptr<char[]> dst(new char[bytes]);
  std::memset(src.get(), 1, bytes);
  std::memset(dst.get(), 2, bytes);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Memcpy)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20)->Arg(64 << 20)->UseRealTime();

// acquire + release of one reused size: a free-list hit each time.
void BM_PinnedPoolAcquireRelease(benchmark::State& state) {
  auto backend = std::move(*HostBackend::create({}));
  PinnedHostPool pool(*backend);
  const std::int64_t bytes = state.range(0);
  pool.release(*pool.acquire(bytes));  // warm the free list
  for (auto _ : state) {
    Result<PinnedBlock> block = pool.acquire(bytes);
    benchmark::DoNotOptimize(block->ptr);
    pool.release(*block);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PinnedPoolAcquireRelease)->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20);

// The same with the release fenced by an already-passed copy (the common
// deferred-recycling case: the copy finished before the block is reused).
void BM_PinnedPoolAcquireReleaseFenced(benchmark::State& state) {
  auto backend = std::move(*HostBackend::create({}));
  EventPool events(*backend);
  PinnedHostPool pool(*backend);
  const std::int64_t bytes = state.range(0);
  const Fence fence = *events.record(backend->stream(StreamRole::kDeviceToHost));
  (void)fence.wait();
  pool.release(*pool.acquire(bytes));
  for (auto _ : state) {
    Result<PinnedBlock> block = pool.acquire(bytes);
    benchmark::DoNotOptimize(block->ptr);
    pool.release(*block, {&fence, 1});
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PinnedPoolAcquireReleaseFenced)->Arg(1 << 20);

void BM_DeviceArenaAllocateFree(benchmark::State& state) {
  auto arena = std::move(*DeviceArena::create({std::int64_t{1} << 30, 256}));
  // A fragmented arena: every other block of 1000 is live.
  std::vector<void*> live;
  for (int i = 0; i < 1000; ++i) live.push_back(*arena->allocate(4096 + 256 * (i % 7)));
  for (std::size_t i = 0; i < live.size(); i += 2) (void)arena->free(live[i]);
  for (auto _ : state) {
    void* ptr = *arena->allocate(state.range(0));
    benchmark::DoNotOptimize(ptr);
    (void)arena->free(ptr);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DeviceArenaAllocateFree)->Arg(4096)->Arg(1 << 20);

}  // namespace
}  // namespace hyperoffload

BENCHMARK_MAIN();
