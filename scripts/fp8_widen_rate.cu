// The issue rate of the FP8 decode's widening (tile_union/warp_mma.cuh: cvt.rn.f16x2.e4m3x2, two
// per mma.sync m16n8k16 in its block step) beside the tensor core's, per SM: is the widening a
// pipe at its limit in the compute-bound FP8 steps (docs/performance.md, step 56)? One CTA per SM
// runs `warps` warps; each warp runs `iters` rounds of 8 independent chains of:
//   cvt   one cvt.rn.f16x2.e4m3x2 per chain (each result fed back into its chain's next input);
//   bits  the same widening by integer operations (byte permute, shift, mask: exact for every
//         code but NaN, which it makes finite, times 2^-8), for comparison;
//   mma   one mma.sync m16n8k16 (fp16 in, fp32 out) per chain, accumulating;
//   mix   per chain one mma.sync fed by two cvt of the round's codes, the block step's ratio.
// Printed per mode and warp count: instructions (cvt or mma) per clock per SM, from the SM's
// clock64 around the CTA's loop (CTA 0) and from CUDA events over all SMs. Not part of the
// build; on the GPU machine:
//   nvcc -std=c++17 -O3 -arch=sm_90a scripts/fp8_widen_rate.cu -o fp8_widen_rate && ./fp8_widen_rate
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

enum Mode { kCvt = 0, kBits = 1, kMma = 2, kMix = 3 };
constexpr int kChains = 8;

__device__ __forceinline__ std::uint32_t cvt_e4m3x2(std::uint32_t codes) {
  std::uint32_t out;
  asm volatile("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(out) : "r"(codes));
  return out;
}

// Codes c0 (byte 0), c1 (byte 1) -> fp16 pair of their values times 2^-8: sign to bit 15,
// exponent and mantissa (7 bits) to bits 13..7 of each half.
__device__ __forceinline__ std::uint32_t bits_e4m3x2(std::uint32_t codes) {
  const std::uint32_t x = __byte_perm(codes, 0u, 0x1404);  // c1 << 24 | c0 << 8
  return (x & 0x80008000u) | ((x >> 1) & 0x3f803f80u);
}

__device__ __forceinline__ void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int kMode>
__global__ void rate(int iters, std::uint32_t seed, float* sink, long long* cycles) {
  std::uint32_t v[kChains];
  for (int i = 0; i < kChains; ++i) v[i] = seed * (threadIdx.x + 1) + 0x01010101u * i;
  float acc[kChains][4] = {};
  const std::uint32_t a[4] = {0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < kChains; ++i) {
      if constexpr (kMode == kCvt) {
        v[i] = cvt_e4m3x2(v[i]) ^ 0x00010001u;
      } else if constexpr (kMode == kBits) {
        v[i] = bits_e4m3x2(v[i]) ^ 0x00010001u;
      } else if constexpr (kMode == kMma) {
        mma(acc[i], a, v[i], v[i] ^ 0x01000100u);
      } else {
        const std::uint32_t b0 = cvt_e4m3x2(v[i]), b1 = cvt_e4m3x2(v[i] >> 16);
        mma(acc[i], a, b0, b1);
        v[i] += 0x00010001u;
      }
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  float s = 0.f;
  for (int i = 0; i < kChains; ++i) s += acc[i][0] + acc[i][1] + acc[i][2] + acc[i][3] + static_cast<float>(v[i] & 1u);
  if (s == 1234.5f) sink[0] = s;  // keeps the loop
  if (blockIdx.x == 0 && threadIdx.x == 0) *cycles = t1 - t0;
}

template <int kMode>
void run(const char* name, int sms, float* sink, long long* cycles) {
  const int iters = 4096;
  for (int warps = 1; warps <= 16; warps *= 2) {
    rate<kMode><<<sms, 32 * warps>>>(iters, 12345u, sink, cycles);  // warm-up
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    rate<kMode><<<sms, 32 * warps>>>(iters, 777u, sink, cycles);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, e0, e1);
    long long cyc = 0;
    cudaMemcpy(&cyc, cycles, sizeof(cyc), cudaMemcpyDeviceToHost);
    const double per_sm = static_cast<double>(iters) * kChains * warps;  // warp instructions (cvt or mma)
    std::printf("%-5s warps %2d: %6.3f per clock per SM (clock64, CTA 0), %8.1f per us per SM (events)\n", name,
                warps, per_sm / static_cast<double>(cyc), per_sm / (ms * 1e3));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs; warp instructions per clock per SM (cvt / bits: one widening of two codes;"
              " mma / mix: one m16n8k16)\n",
              prop.name, prop.multiProcessorCount);
  float* sink = nullptr;
  long long* cycles = nullptr;
  cudaMalloc(&sink, sizeof(float));
  cudaMalloc(&cycles, sizeof(long long));
  run<kCvt>("cvt", prop.multiProcessorCount, sink, cycles);
  run<kBits>("bits", prop.multiProcessorCount, sink, cycles);
  run<kMma>("mma", prop.multiProcessorCount, sink, cycles);
  run<kMix>("mix", prop.multiProcessorCount, sink, cycles);
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
