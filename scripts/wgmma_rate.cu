// The WGMMA rate of the tile-union kernel's shapes on an sm_90a GPU, alone (docs/performance.md,
// step 27). One CTA per SM runs 1-3 warpgroups; each issues batches of 8 k-steps (K = 128) of
// m64nNk16 bf16 (N = 128 or 256), SS (A and B from 128-byte swizzled shared memory) or RS (A
// from registers), and waits after each batch (or keeps two in flight). Printed: cycles per
// WGMMA per warpgroup (clock64, CTA 0) and the grid's TFLOP/s (CUDA events). Not part of the
// build; on the GPU machine, after a build of the library has fetched CUTLASS:
//   nvcc -std=c++17 -O3 -arch=sm_90a --expt-relaxed-constexpr \
//     -I build/gpu/_deps/cutlass-4.2.0.0/cutlass_library/source/include scripts/wgmma_rate.cu -o wgmma_rate
//   ./wgmma_rate
#include <cutlass/arch/barrier.h>
#include <cstdio>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>
using namespace cute;
using T = cute::bfloat16_t;

// `iters` batches of the 8 k-steps of A [64, 128] x B [N, 128]^T into acc, at most kBatch in
// flight; returns the sum of acc (kept live).
template <int kBatch, class Mma, class FragA, class FragB, class Acc>
__device__ float issue_batches(const Mma& tm, FragA& tA, FragB& tB, Acc& acc, int iters) {
  clear(acc);
  for (int it = 0; it < iters; ++it) {
    warpgroup_fence_operand(acc);
    warpgroup_arrive();
#pragma unroll
    for (int k = 0; k < 8; ++k) gemm(tm, tA(_, _, k), tB(_, _, k), acc);
    warpgroup_commit_batch();
    warpgroup_wait<kBatch - 1>();
    warpgroup_fence_operand(acc);
  }
  warpgroup_wait<0>();
  float sum = 0.f;
  for (int i = 0; i < size(acc); ++i) sum += acc(i);
  return sum;
}

template <int N, bool kRS, int kBatch>
__global__ void __launch_bounds__(384, 1) bench(int iters, long long* cycles, float* sink) {
  extern __shared__ __align__(1024) unsigned char smem[];
  using LayoutA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<_64, _128>{}));
  using LayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, Shape<Int<N>, _128>{}));
  T* a = reinterpret_cast<T*>(smem);
  T* b = reinterpret_cast<T*>(smem + 64 * 128 * 2 * 4);
  for (int i = threadIdx.x; i < 64 * 128 * 4; i += blockDim.x) a[i] = T(0.001f * (i % 7));
  for (int i = threadIdx.x; i < N * 128; i += blockDim.x) b[i] = T(0.001f * (i % 5));
  cutlass::arch::fence_view_async_shared();
  __syncthreads();
  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  Tensor sA = make_tensor(make_smem_ptr(a + wg * 64 * 128), LayoutA{});
  Tensor sB = make_tensor(make_smem_ptr(b), LayoutB{});
  using Op =
      std::conditional_t<kRS,
                         std::conditional_t<N == 128, SM90_64x128x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::K>,
                                            SM90_64x256x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::K>>,
                         std::conditional_t<N == 128, SM90_64x128x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>,
                                            SM90_64x256x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>>>;
  auto tm = make_tiled_mma(Op{});
  auto thr = tm.get_slice(t);
  Tensor tB = thr.partition_fragment_B(sB);
  auto acc = partition_fragment_C(tm, Shape<_64, Int<N>>{});
  float acc_sum;
  const long long t0 = clock64();
  if constexpr (kRS) {  // A from registers, in the layout of the kernels' P fragment
    Tensor tA = make_tensor<T>(Layout<Shape<Shape<_2, _2, _2>, _1, _8>>{});
    for (int i = 0; i < size(tA); ++i) tA(i) = T(0.001f * (i + t));
    acc_sum = issue_batches<kBatch>(tm, tA, tB, acc, iters);
  } else {
    Tensor tA = thr.partition_fragment_A(sA);
    acc_sum = issue_batches<kBatch>(tm, tA, tB, acc, iters);
  }
  const long long t1 = clock64();
  if (t == 0) cycles[blockIdx.x * 3 + wg] = t1 - t0;
  if (acc_sum == 12345.f) sink[threadIdx.x] = acc_sum;
}

template <int N, bool kRS, int kBatch = 1>
void run(const char* name, int warpgroups, int sms) {
  const int iters = 4000;
  long long* d_cycles;
  float* d_sink;
  cudaMalloc(&d_cycles, sizeof(long long) * sms * 3);
  cudaMalloc(&d_sink, 4 * 384);
  const int smem = 64 * 128 * 2 * 4 + N * 128 * 2;
  cudaFuncSetAttribute(bench<N, kRS, kBatch>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  bench<N, kRS, kBatch><<<sms, 128 * warpgroups, smem>>>(20, d_cycles, d_sink);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  bench<N, kRS, kBatch><<<sms, 128 * warpgroups, smem>>>(iters, d_cycles, d_sink);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms;
  cudaEventElapsedTime(&ms, e0, e1);
  long long h[3];
  cudaMemcpy(h, d_cycles, sizeof(h), cudaMemcpyDeviceToHost);
  const double instr = double(iters) * 8;
  const double flops = 2.0 * 64 * N * 16 * instr * warpgroups * sms;
  printf("%-34s WGs %d: %6.1f cycles per WGMMA per warpgroup (CTA 0), %6.1f TFLOP/s  %s\n", name, warpgroups,
         h[0] / instr, flops / (ms * 1e-3) / 1e12, cudaGetErrorString(cudaGetLastError()));
  cudaFree(d_cycles);
  cudaFree(d_sink);
}

int main() {
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (int w = 1; w <= 3; ++w) {
    run<128, false>("SS m64n128k16, wait each batch", w, sms);
    run<128, false, 2>("SS m64n128k16, 2 batches in flight", w, sms);
    run<256, false>("SS m64n256k16, wait each batch", w, sms);
    run<128, true>("RS m64n128k16, wait each batch", w, sms);
    run<256, true>("RS m64n256k16, wait each batch", w, sms);
  }
}
