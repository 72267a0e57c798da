#include "bench/device_fill.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "msa/error.h"

namespace msa::bench {

namespace {

// splitmix64: a well-mixed 64-bit hash of the counter.
__device__ std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

enum class FillType { kBF16, kFP16, kFP8E4M3 };

__global__ void fill_normal_kernel(void* dst, std::int64_t n, FillType type, float sd, std::uint64_t seed) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t h = mix(seed ^ mix(static_cast<std::uint64_t>(i)));
    // Box-Muller on two 24-bit uniforms in (0, 1].
    const float u1 = (static_cast<float>(h & 0xffffff) + 1.f) * (1.f / 16777216.f);
    const float u2 = static_cast<float>((h >> 24) & 0xffffff) * (1.f / 16777216.f);
    const float z = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2) * sd;
    if (type == FillType::kFP16) static_cast<__half*>(dst)[i] = __float2half_rn(z);
    else if (type == FillType::kBF16) static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(z);
    else static_cast<__nv_fp8_storage_t*>(dst)[i] = __nv_cvt_float_to_fp8(z, __NV_SATFINITE, __NV_E4M3);
  }
}

void launch_fill(void* dst, std::int64_t n, FillType type, float sd, std::uint64_t seed, cudaStream_t stream,
                 const char* what) {
  if (n <= 0) return;
  const int blocks = static_cast<int>(std::min<std::int64_t>((n + 255) / 256, 132 * 16));
  fill_normal_kernel<<<blocks, 256, 0, stream>>>(dst, n, type, sd, seed);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw Error(what, cudaGetErrorName(e), cudaGetErrorString(e));
}

}  // namespace

void device_fill_normal(void* dst, std::int64_t n, bool fp16, float sd, std::uint64_t seed,
                        cudaStream_t stream) {
  launch_fill(dst, n, fp16 ? FillType::kFP16 : FillType::kBF16, sd, seed, stream, "device_fill_normal");
}

void device_fill_normal_fp8(void* dst, std::int64_t n, float sd, std::uint64_t seed, cudaStream_t stream) {
  launch_fill(dst, n, FillType::kFP8E4M3, sd, seed, stream, "device_fill_normal_fp8");
}

}  // namespace msa::bench
