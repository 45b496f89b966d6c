// The CUDA backend: device memory from the stream-ordered allocator
// (cudaMallocAsync/cudaFreeAsync on the compute stream, or cudaMalloc/cudaFree
// where memory pools are unsupported), page-locked host memory from
// cudaHostAlloc, copies with cudaMemcpyAsync on dedicated non-blocking D2H and
// H2D streams, cudaEvent* for events (timing enabled) and cudaStreamWaitEvent
// for cross-stream ordering. Every CUDA call is checked; a failure becomes an
// Error naming the call, CUDA's error string and the source location.
//
// It is compiled when CMake finds the CUDA toolkit (the library then defines
// HYPEROFFLOAD_HAVE_CUDA=1); otherwise make_cuda_backend() reports that.
//
//   Result<std::unique_ptr<Backend>> backend = make_cuda_backend({.device = 0});
//   if (!backend) ... // "no CUDA device" on a machine without one
//
// The compute stream is the caller's: by default the legacy default stream;
// a framework passes its current stream (PyTorch:
// torch.cuda.current_stream().cuda_stream) so prefetches are ordered with its
// kernels.
//
// Thread-safety: every method is thread-safe (the CUDA runtime is).
#pragma once

#include <cstdint>
#include <memory>

#include "hyperoffload/runtime/backend.h"

namespace hyperoffload {

enum class DeviceAllocator : std::uint8_t {
  kStreamOrdered,  // cudaMallocAsync/cudaFreeAsync when the device supports memory pools
  kSynchronous,    // cudaMalloc/cudaFree
};

struct CudaBackendOptions {
  int device = 0;  // CUDA device ordinal
  CopyEngines copy_engines = kDefaultCopyEngines;
  std::uintptr_t compute_stream = 0;  // a cudaStream_t; 0 = the legacy default stream
  DeviceAllocator allocator = DeviceAllocator::kStreamOrdered;
};

// Number of CUDA devices visible; 0 without a driver or device, or when built
// without the CUDA toolkit.
int cuda_device_count();

// Fails with kNotFound ("no CUDA device") when cudaGetDeviceCount fails or
// finds none, or when hyperoffload was built without the CUDA toolkit.
Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options = {});

}  // namespace hyperoffload
