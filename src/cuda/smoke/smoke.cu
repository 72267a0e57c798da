#include "cuda/smoke/smoke.h"

#include <cute/tensor.hpp>

#include "cuda/common/check.h"

namespace msa::cuda {

namespace {

__global__ void axpy_kernel(float a, const float* x, float* y, std::int64_t n, int* arch, int* feature) {
  using namespace cute;
  Tensor gx = make_tensor(make_gmem_ptr(x), make_layout(n));
  Tensor gy = make_tensor(make_gmem_ptr(y), make_layout(n));
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    gy(i) = a * gx(i) + gy(i);
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

}  // namespace

void smoke_axpy(float a, const float* x, float* y, std::int64_t n, int* arch, int* feature,
                cudaStream_t stream) {
  const int blocks = static_cast<int>(std::min<std::int64_t>((n + 255) / 256 + 1, 1024));
  axpy_kernel<<<blocks, 256, 0, stream>>>(a, x, y, n, arch, feature);
  MSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace msa::cuda
