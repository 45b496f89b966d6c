// Runs on every machine: the factory either makes a backend or says clearly
// why not. The device tests themselves are in cuda_backend_cuda_test.cc
// (label gpu).
#include "hyperoffload/runtime/cuda_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hyperoffload {
namespace {

using ::testing::HasSubstr;

TEST(CudaBackendFactory, ReportsNoCudaDeviceWhenThereIsNone) {
  Result<std::unique_ptr<Backend>> backend = make_cuda_backend();
  if (cuda_device_count() > 0) {
    ASSERT_TRUE(backend.has_value()) << backend.error().message;
    EXPECT_EQ((*backend)->name(), "cuda");
    return;
  }
  ASSERT_FALSE(backend.has_value());
  EXPECT_EQ(backend.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(backend.error().message, HasSubstr("no CUDA device"));
}

TEST(CudaBackendFactory, RejectsADeviceOrdinalThatDoesNotExist) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Result<std::unique_ptr<Backend>> backend = make_cuda_backend({.device = cuda_device_count()});
  ASSERT_FALSE(backend.has_value());
  EXPECT_THAT(backend.error().message, HasSubstr("does not exist"));
}

}  // namespace
}  // namespace hyperoffload
