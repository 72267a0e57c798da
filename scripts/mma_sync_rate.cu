// The cost of one 16-row attention step on mma.sync, the unit a decode consumer of one query's
// rows (G = 16 heads) would run per block it chose (docs/performance.md, step 51, next
// experiment 3): S = Q K^T (16 x 128 keys, d = 128), a row softmax (max, exp2, sum), and
// O += P V (16 x 128), bf16 operands, FP32 accumulation, K and V fragments by ldmatrix from
// shared memory (V transposed by ldmatrix.trans), laid out as the kernel's ring holds them: two
// column halves of 128-byte rows, each row's 16-byte chunks swizzled (chunk j at j ^ (row % 8)),
// so the addressing is the one such a consumer would use. Each CTA (one per SM) runs 1-8 such warps
// on one K / V tile pair, `iters` steps each. Printed per warp count: cycles per step of one
// warp (clock64, CTA 0, warp 0), steps per microsecond per SM, and TFLOP/s (CUDA events).
// First it checks one step's O against a host computation of the same softmax (base 2), so
// the fragment mappings are right. Not part of the build; on the GPU machine:
//   nvcc -std=c++17 -O3 -arch=sm_90a scripts/mma_sync_rate.cu -o mma_sync_rate && ./mma_sync_rate
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace {

constexpr int kKeys = 128, kDim = 128;
constexpr int kTileBytes = kKeys * kDim * 2;              // one K or V tile
constexpr int kSmemBytes = 2 * kTileBytes + 16 * kDim * 2;  // K, V and Q (16 rows)

// Element offset of (row r, column col) in a tile of `rows` rows: column half col / 64, then
// row r's 128 bytes, its 16-byte chunk (col % 64) / 8 at that XOR (r % 8).
__host__ __device__ inline int swizzled(int rows, int r, int col) {
  return (col / 64) * rows * 64 + r * 64 + ((((col % 64) / 8) ^ (r % 8)) * 8) + col % 8;
}

// The step's inputs (exactly representable in bf16; scores within a few units).
__host__ __device__ inline float q_at(int r, int c) { return 0.0625f * ((r * 7 + c * 3) % 11 - 5); }
__host__ __device__ inline float k_at(int key, int d) { return 0.0625f * ((key * 5 + d * 13) % 9 - 4); }
__host__ __device__ inline float v_at(int key, int d) { return 0.015625f * ((key * 3 + d) % 23 - 11); }

__device__ __forceinline__ void ldsm_x4(std::uint32_t addr, std::uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(std::uint32_t addr, std::uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  std::uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__global__ void __launch_bounds__(256, 1) bench(int iters, long long* cycles, float* sink, float* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // K [key, d], V [key, d] and Q [row, d], swizzled.
  auto* kv = reinterpret_cast<__nv_bfloat16*>(smem);
  for (int i = threadIdx.x; i < kKeys * kDim; i += blockDim.x) {
    const int key = i / kDim, d = i % kDim;
    kv[swizzled(kKeys, key, d)] = __float2bfloat16(k_at(key, d));
    kv[kKeys * kDim + swizzled(kKeys, key, d)] = __float2bfloat16(v_at(key, d));
    if (key < 16) kv[2 * kKeys * kDim + swizzled(16, key, d)] = __float2bfloat16(q_at(key, d));
  }
  __syncthreads();
  const auto base = static_cast<std::uint32_t>(__cvta_generic_to_shared(kv));
  const std::uint32_t k_base = base, v_base = base + kTileBytes, q_base = base + 2 * kTileBytes;
  // ldmatrix addresses: lane l supplies row (l % 8) of matrix l / 8.
  const int mat = lane / 8, r8 = lane % 8;
  // Q's A fragments (16 rows x 128 d), loaded once: matrices (rows 0-7, d lo), (rows 8-15, d lo),
  // (rows 0-7, d hi), (rows 8-15, d hi) of each 16-wide d step.
  std::uint32_t q[kDim / 16][4];
#pragma unroll
  for (int kd = 0; kd < kDim / 16; ++kd) ldsm_x4(q_base + swizzled(16, (mat % 2) * 8 + r8, kd * 16 + (mat / 2) * 8) * 2, q[kd]);
  float o[kDim / 8][4] = {};
  float row_max[2] = {-1e30f, -1e30f}, row_sum[2] = {0.f, 0.f};
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    float s[kKeys / 8][4] = {};
    // S = Q K^T: for each 16-wide d step, key tiles two at a time: matrices (keys n0..n0+7, d lo),
    // (same keys, d hi), (keys n0+8.., d lo), (.., d hi).
#pragma unroll
    for (int kd = 0; kd < kDim / 16; ++kd) {
#pragma unroll
      for (int n = 0; n < kKeys / 8; n += 2) {
        const int key = n * 8 + (mat / 2) * 8 + r8, col = kd * 16 + (mat % 2) * 8;
        std::uint32_t b[4];
        ldsm_x4(k_base + swizzled(kKeys, key, col) * 2, b);
        mma(s[n], q[kd], b[0], b[1]);
        mma(s[n + 1], q[kd], b[2], b[3]);
      }
    }
    // The row softmax of this step (rows lane / 4 and lane / 4 + 8), scale 1.
    float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float alpha = ex2(row_max[h] - mx[h]);
      row_sum[h] *= alpha;
#pragma unroll
      for (int n = 0; n < kDim / 8; ++n) {
        o[n][2 * h] *= alpha;
        o[n][2 * h + 1] *= alpha;
      }
      row_max[h] = mx[h];
    }
    std::uint32_t p[kKeys / 16][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      const float e0 = ex2(s[n][0] - mx[0]), e1 = ex2(s[n][1] - mx[0]);
      const float e2 = ex2(s[n][2] - mx[1]), e3 = ex2(s[n][3] - mx[1]);
      row_sum[0] += e0 + e1;
      row_sum[1] += e2 + e3;
      // Key tiles 2j and 2j + 1 of S are the A fragment of key step j.
      p[n / 2][(n % 2) * 2] = pack_bf16(e0, e1);
      p[n / 2][(n % 2) * 2 + 1] = pack_bf16(e2, e3);
    }
    // O += P V: for each 16-key step, d tiles two at a time by ldmatrix.trans: matrices (keys lo,
    // d n0..), (keys hi, d n0..), (keys lo, d n0+8..), (keys hi, d n0+8..).
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const std::uint32_t a[4] = {p[kk][0], p[kk][1], p[kk][2], p[kk][3]};
#pragma unroll
      for (int n = 0; n < kDim / 8; n += 2) {
        const int key = kk * 16 + (mat % 2) * 8 + r8, col = n * 8 + (mat / 2) * 8;
        std::uint32_t b[4];
        ldsm_x4_t(v_base + swizzled(kKeys, key, col) * 2, b);
        mma(o[n], a, b[0], b[1]);
        mma(o[n + 1], a, b[2], b[3]);
      }
    }
  }
  const long long t1 = clock64();
  if (out != nullptr && blockIdx.x == 0 && warp == 0) {  // O / l of rows lane / 4 and lane / 4 + 8
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int r = lane / 4 + 8 * h;
#pragma unroll
      for (int n = 0; n < kDim / 8; ++n) {
        out[r * kDim + n * 8 + (lane % 4) * 2] = o[n][2 * h] / l;
        out[r * kDim + n * 8 + (lane % 4) * 2 + 1] = o[n][2 * h + 1] / l;
      }
    }
  }
  float acc = row_sum[0] + row_sum[1];
#pragma unroll
  for (int n = 0; n < kDim / 8; ++n) acc += o[n][0] + o[n][1] + o[n][2] + o[n][3];
  if (acc == 1234.5f) sink[0] = acc;  // keeps the work live
  if (blockIdx.x == 0 && lane == 0 && warp == 0) *cycles = t1 - t0;
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  long long* d_cycles;
  float* d_sink;
  cudaMalloc(&d_cycles, sizeof(long long));
  cudaMalloc(&d_sink, sizeof(float));
  cudaFuncSetAttribute(bench, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  // One step of one warp against the host: S = Q K^T, P = 2^(S - max), O = P V / sum P.
  float* d_out;
  cudaMalloc(&d_out, 16 * kDim * sizeof(float));
  bench<<<1, 32, kSmemBytes>>>(1, d_cycles, d_sink, d_out);
  static float got[16 * kDim];
  cudaMemcpy(got, d_out, sizeof(got), cudaMemcpyDeviceToHost);
  double worst = 0.0, largest = 0.0;
  for (int r = 0; r < 16; ++r) {
    double sc[kKeys], mx = -1e300, l = 0.0;
    for (int key = 0; key < kKeys; ++key) {
      sc[key] = 0.0;
      for (int d = 0; d < kDim; ++d) sc[key] += double(q_at(r, d)) * k_at(key, d);
      mx = sc[key] > mx ? sc[key] : mx;
    }
    for (int key = 0; key < kKeys; ++key) l += sc[key] = std::exp2(sc[key] - mx);
    for (int d = 0; d < kDim; ++d) {
      double ref = 0.0;
      for (int key = 0; key < kKeys; ++key) ref += sc[key] * v_at(key, d);
      ref /= l;
      const double err = std::fabs(ref - got[r * kDim + d]);
      worst = err > worst ? err : worst;
      largest = std::fabs(ref) > largest ? std::fabs(ref) : largest;
    }
  }
  const bool ok = worst <= 1e-2 * largest + 1e-4;
  std::printf("check: max |O - host| %.3g of max |O| %.3g: %s\n", worst, largest, ok ? "ok" : "WRONG");
  const int iters = 2000;
  std::printf("warps/CTA  cycles/step (one warp)  steps/us/SM  TFLOP/s  (%d SMs, 16 x 128 x 128 QK + PV a step)\n", sms);
  for (const int warps : {1, 2, 4, 8}) {
    const int smem = kSmemBytes;
    bench<<<sms, warps * 32, smem>>>(10, d_cycles, d_sink, nullptr);  // warm-up
    cudaEventRecord(e0);
    bench<<<sms, warps * 32, smem>>>(iters, d_cycles, d_sink, nullptr);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, e0, e1);
    long long cycles = 0;
    cudaMemcpy(&cycles, d_cycles, sizeof(long long), cudaMemcpyDeviceToHost);
    const double steps = double(sms) * warps * iters;
    const double flop = steps * 2.0 * 2.0 * 16 * kKeys * kDim;
    std::printf("%9d  %22.0f  %11.2f  %7.1f\n", warps, double(cycles) / iters, steps / sms / (ms * 1e3),
                flop / (ms * 1e-3) / 1e12);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) std::printf("CUDA error: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess && ok ? 0 : 1;
}
