// CUDA backend implementation, compiled only with the CUDA toolkit. Plain C++
// against the CUDA runtime API (no kernels, so no nvcc).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hyperoffload/runtime/cuda_backend.h"

namespace hyperoffload {
namespace {

ErrorCode code_of(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return ErrorCode::kOutOfMemory;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return ErrorCode::kNotFound;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDevicePointer:
      return ErrorCode::kInvalidArgument;
    default:
      return ErrorCode::kInternal;
  }
}

std::unexpected<Error> cuda_failure(cudaError_t error, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  return std::unexpected(
      Error{code_of(error), fmt::format("CUDA call {} failed: {} ({}) at {}:{}", call, cudaGetErrorString(error),
                                        cudaGetErrorName(error), file, line)});
}

}  // namespace
}  // namespace hyperoffload

// The one checking macro: every CUDA call goes through it. Usable in any
// function returning Status or Result<T>.
#define HO_CUDA_CHECK(call)                                                           \
  do {                                                                                \
    if (const cudaError_t ho_cuda_error_ = (call); ho_cuda_error_ != cudaSuccess) {   \
      return ::hyperoffload::cuda_failure(ho_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                                 \
  } while (false)

namespace hyperoffload {
namespace {

cudaStream_t native(Stream stream) { return reinterpret_cast<cudaStream_t>(stream.handle); }
cudaEvent_t native(Event event) { return reinterpret_cast<cudaEvent_t>(event.handle); }

cudaMemcpyKind native(CopyKind kind) {
  switch (kind) {
    case CopyKind::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CopyKind::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToDevice:
      return cudaMemcpyDeviceToDevice;
    case CopyKind::kHostToHost:
      return cudaMemcpyHostToHost;
  }
  return cudaMemcpyDefault;
}

void CUDART_CB run_host_function(void* data) {
  auto* fn = static_cast<std::function<void()>*>(data);
  (*fn)();
  delete fn;
}

class CudaBackend final : public Backend {
 public:
  static Result<std::unique_ptr<Backend>> create(const CudaBackendOptions& options) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      (void)cudaGetLastError();
      return make_error(ErrorCode::kNotFound, "no CUDA device: cudaGetDeviceCount found none");
    }
    if (options.device < 0 || options.device >= count) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("CUDA device {} does not exist ({} visible)", options.device, count));
    }
    auto backend = std::unique_ptr<CudaBackend>(new CudaBackend(options));
    HO_RETURN_IF_ERROR(backend->init());
    return std::unique_ptr<Backend>(std::move(backend));
  }

  ~CudaBackend() override {
    // Teardown has no caller to report to; errors here only leak handles.
    (void)cudaSetDevice(options_.device);
    (void)cudaDeviceSynchronize();
    for (cudaStream_t stream : owned_streams_) (void)cudaStreamDestroy(stream);
  }

  std::string_view name() const override { return "cuda"; }
  CopyEngines copy_engines() const override { return options_.copy_engines; }

  Result<void*> allocate_device(std::int64_t size_bytes) override {
    if (size_bytes <= 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("device allocation of {} bytes: size must be positive", size_bytes));
    }
    HO_RETURN_IF_ERROR(select_device());
    void* ptr = nullptr;
    const cudaError_t error = stream_ordered_ ? cudaMallocAsync(&ptr, static_cast<std::size_t>(size_bytes), compute_)
                                              : cudaMalloc(&ptr, static_cast<std::size_t>(size_bytes));
    if (error == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      std::size_t free_bytes = 0, total_bytes = 0;
      (void)cudaMemGetInfo(&free_bytes, &total_bytes);
      const DeviceMemoryStats stats = device_memory_stats();
      return make_error(ErrorCode::kOutOfMemory,
                        fmt::format("device out of memory: requested {} bytes, in use {} bytes (by hyperoffload), "
                                    "capacity {} bytes ({} free on device {})",
                                    size_bytes, stats.in_use_bytes, total_bytes, free_bytes, options_.device));
    }
    HO_CUDA_CHECK(error);
    std::lock_guard lock(mu_);
    device_sizes_.emplace(ptr, size_bytes);
    in_use_ += size_bytes;
    peak_ = std::max(peak_, in_use_);
    return ptr;
  }

  Status free_device(void* ptr) override {
    std::int64_t size = 0;
    {
      std::lock_guard lock(mu_);
      auto it = device_sizes_.find(ptr);
      if (it == device_sizes_.end()) {
        return make_error(ErrorCode::kInvalidArgument,
                          fmt::format("device free of {}: not a live allocation of this backend", ptr));
      }
      size = it->second;
      device_sizes_.erase(it);
      in_use_ -= size;
    }
    HO_RETURN_IF_ERROR(select_device());
    if (stream_ordered_) {
      HO_CUDA_CHECK(cudaFreeAsync(ptr, compute_));
    } else {
      HO_CUDA_CHECK(cudaFree(ptr));
    }
    return ok_status();
  }

  DeviceMemoryStats device_memory_stats() const override {
    std::lock_guard lock(mu_);
    return DeviceMemoryStats{in_use_, peak_, -1, static_cast<std::int64_t>(device_sizes_.size())};
  }

  Result<void*> allocate_host(std::int64_t size_bytes) override {
    if (size_bytes <= 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("host allocation of {} bytes: size must be positive", size_bytes));
    }
    HO_RETURN_IF_ERROR(select_device());
    void* ptr = nullptr;
    HO_CUDA_CHECK(cudaHostAlloc(&ptr, static_cast<std::size_t>(size_bytes), cudaHostAllocDefault));
    return ptr;
  }

  Status free_host(void* ptr) override {
    HO_CUDA_CHECK(cudaFreeHost(ptr));
    return ok_status();
  }

  Stream stream(StreamRole role) const override {
    switch (role) {
      case StreamRole::kCompute:
        return handle(compute_);
      case StreamRole::kDeviceToHost:
        return handle(d2h_);
      case StreamRole::kHostToDevice:
        return handle(h2d_);
    }
    return handle(compute_);
  }

  Result<Stream> create_stream() override {
    HO_RETURN_IF_ERROR(select_device());
    cudaStream_t stream = nullptr;
    HO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::lock_guard lock(mu_);
    owned_streams_.push_back(stream);
    return handle(stream);
  }

  Status copy_async(Stream stream, void* dst, const void* src, std::int64_t bytes, CopyKind kind) override {
    if (bytes < 0) {
      return make_error(ErrorCode::kInvalidArgument, fmt::format("copy of {} bytes: size must be >= 0", bytes));
    }
    if (bytes == 0) return ok_status();
    HO_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), native(kind), native(stream)));
    return ok_status();
  }

  Status launch_host_function(Stream stream, std::function<void()> fn) override {
    auto* heap = new std::function<void()>(std::move(fn));
    if (const cudaError_t error = cudaLaunchHostFunc(native(stream), run_host_function, heap); error != cudaSuccess) {
      delete heap;
      return cuda_failure(error, "cudaLaunchHostFunc(stream, run_host_function, heap)", __FILE__, __LINE__);
    }
    return ok_status();
  }

  Status synchronize_stream(Stream stream) override {
    HO_CUDA_CHECK(cudaStreamSynchronize(native(stream)));
    return ok_status();
  }

  Status stream_wait_stream(Stream waiter, Stream waited) override {
    if (waiter == waited) return ok_status();
    cudaEvent_t event = nullptr;
    HO_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    Status status = [&]() -> Status {
      HO_CUDA_CHECK(cudaEventRecord(event, native(waited)));
      HO_CUDA_CHECK(cudaStreamWaitEvent(native(waiter), event, 0));
      return ok_status();
    }();
    // Destroying a pending event is allowed: CUDA releases it once it completes.
    HO_CUDA_CHECK(cudaEventDestroy(event));
    return status;
  }

  Status synchronize() override {
    HO_RETURN_IF_ERROR(select_device());
    HO_CUDA_CHECK(cudaDeviceSynchronize());
    return ok_status();
  }

  Result<Event> create_event() override {
    HO_RETURN_IF_ERROR(select_device());
    cudaEvent_t event = nullptr;
    HO_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDefault));
    return Event{reinterpret_cast<std::uintptr_t>(event)};
  }

  Status destroy_event(Event event) override {
    HO_CUDA_CHECK(cudaEventDestroy(native(event)));
    return ok_status();
  }

  Status record_event(Event event, Stream stream) override {
    HO_CUDA_CHECK(cudaEventRecord(native(event), native(stream)));
    return ok_status();
  }

  Result<bool> event_completed(Event event) override {
    const cudaError_t error = cudaEventQuery(native(event));
    if (error == cudaSuccess) return true;
    if (error == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    return cuda_failure(error, "cudaEventQuery(event)", __FILE__, __LINE__);
  }

  Status synchronize_event(Event event) override {
    HO_CUDA_CHECK(cudaEventSynchronize(native(event)));
    return ok_status();
  }

  Status stream_wait_event(Stream stream, Event event) override {
    HO_CUDA_CHECK(cudaStreamWaitEvent(native(stream), native(event), 0));
    return ok_status();
  }

  Result<double> elapsed_ms(Event start, Event end) override {
    float ms = 0.0f;
    HO_CUDA_CHECK(cudaEventElapsedTime(&ms, native(start), native(end)));
    return static_cast<double>(ms);
  }

 private:
  explicit CudaBackend(const CudaBackendOptions& options)
      : options_(options), compute_(reinterpret_cast<cudaStream_t>(options.compute_stream)) {}

  static Stream handle(cudaStream_t stream) { return Stream{reinterpret_cast<std::uintptr_t>(stream)}; }

  Status init() {
    HO_CUDA_CHECK(cudaSetDevice(options_.device));
    if (options_.allocator == DeviceAllocator::kStreamOrdered) {
      int pools = 0;
      HO_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, options_.device));
      stream_ordered_ = pools != 0;
    }
    HO_CUDA_CHECK(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking));
    owned_streams_.push_back(d2h_);
    if (options_.copy_engines == CopyEngines::kTwo) {
      HO_CUDA_CHECK(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking));
      owned_streams_.push_back(h2d_);
    } else {
      h2d_ = d2h_;
    }
    return ok_status();
  }

  // Allocation and creation calls act on the calling thread's current device.
  Status select_device() {
    int current = -1;
    HO_CUDA_CHECK(cudaGetDevice(&current));
    if (current != options_.device) HO_CUDA_CHECK(cudaSetDevice(options_.device));
    return ok_status();
  }

  const CudaBackendOptions options_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t d2h_ = nullptr;
  cudaStream_t h2d_ = nullptr;
  bool stream_ordered_ = false;

  mutable std::mutex mu_;
  std::vector<cudaStream_t> owned_streams_;  // guarded by mu_ after init
  std::unordered_map<void*, std::int64_t> device_sizes_;
  std::int64_t in_use_ = 0;
  std::int64_t peak_ = 0;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options) {
  return CudaBackend::create(options);
}

}  // namespace hyperoffload
