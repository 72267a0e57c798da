// The toolchain smoke test, kept out of the library: the test binary's own sm_90a kernel runs
// and computes the right thing (nvcc, the sm_90a feature set, a launch).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "msa/options.h"

namespace {

__global__ void axpy_kernel(float a, const float* x, float* y, std::int64_t n, int* arch, int* feature) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    y[i] = a * x[i] + y[i];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
#if defined(__CUDA_ARCH__)
    *arch = __CUDA_ARCH__;
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *feature = 1;
#else
    *feature = 0;
#endif
  }
}

TEST(CudaSmoke, AxpyRunsAsSm90a) {
  if (!msa::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::int64_t n = 100003;  // not a multiple of the block size
  std::vector<float> x(n), y(n);
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = 0.5f + static_cast<float>(i % 97);
    y[i] = -3.f + static_cast<float>(i % 13);
  }
  float *dx = nullptr, *dy = nullptr;
  int* dflags = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dflags, 2 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(dflags, 0xff, 2 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  axpy_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(2.f, dx, dy, n, dflags, dflags + 1);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(n);
  int flags[2];
  ASSERT_EQ(cudaMemcpy(got.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(flags, dflags, sizeof flags, cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 2.f * x[i] + y[i]) << "at " << i;
  EXPECT_EQ(flags[0], 900);
  EXPECT_EQ(flags[1], 1) << "kernel was not compiled with the sm_90a feature set";
  cudaFree(dx);
  cudaFree(dy);
  cudaFree(dflags);
}

}  // namespace
