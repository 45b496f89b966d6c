// Without the CUDA toolkit the factory explains why there is no CUDA backend;
// with it, the implementation lives in cuda_backend_cuda.cc.
#include "hyperoffload/runtime/cuda_backend.h"

#ifndef HYPEROFFLOAD_HAVE_CUDA

namespace hyperoffload {

int cuda_device_count() { return 0; }

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions&) {
  return make_error(ErrorCode::kNotFound,
                    "no CUDA device: hyperoffload was built without the CUDA toolkit (it is found at "
                    "/usr/local/cuda or through CUDAToolkit_ROOT at configure time)");
}

}  // namespace hyperoffload

#endif  // HYPEROFFLOAD_HAVE_CUDA
