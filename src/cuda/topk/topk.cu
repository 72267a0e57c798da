// The top-k kernel: one warp per (head, query) row, in both rankings (msa::TopkRanking; the keys
// are core/topk_key.h's, shared with the CPU twin). Lane l reads columns 128 j + 4 l .. + 3
// (16-byte loads where the row allows them) and the warp keeps the row's best k - 1 keys as
// warp_select.cuh describes (sorted lane maxima, then the few keys above the bar inserted; the
// first 256 columns' keys kept in registers between the two passes). Before both, the quantised
// ranking takes the row's finite minimum and maximum (pass 0).
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "core/topk_key.h"
#include "cuda/common/check.h"
#include "cuda/plan/tile_keys.cuh"
#include "cuda/topk/launch.h"
#include "cuda/topk/warp_select.cuh"

namespace msa::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;
using topk_select::kAll;
using topk_select::kGroup;

// Columns c .. c + 3 of the row (c = chunk start + 4 lane); those at or past n read as NaN
// and are masked by the caller.
template <bool kVector>
__device__ __forceinline__ void load4(const float* row, std::int64_t stride, int c, int n, float (&v)[4]) {
  if (kVector && c + 3 < n) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(row + c));
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = c + e < n ? __ldg(row + std::int64_t{c + e} * stride) : __int_as_float(0x7fffffff);
}

// The ranking of one row: the key of column c's score v.
template <bool kQuantised>
struct Ranker {
  topk_key::Quantiser z;
  __device__ __forceinline__ std::uint64_t key(float v, int c) const {
    return kQuantised ? topk_key::quantised(v, c, z) : topk_key::exact(v, c);
  }
};

template <bool kQuantised, bool kVector>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) topk_kernel(const TopkParams p) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t rows = std::int64_t{p.h} * p.total_q;
  const bool rows32 = rows <= INT32_MAX;  // 32-bit division below
  const std::int64_t warps = std::int64_t{gridDim.x} * kWarpsPerBlock;
  for (std::int64_t row = std::int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32; row < rows; row += warps) {
    const std::int64_t head = rows32 ? static_cast<std::uint32_t>(row) / static_cast<std::uint32_t>(p.total_q)
                                     : row / p.total_q;
    const std::int64_t q = row - head * p.total_q;
    const int local = topk_select::local_block(
        topk_select::row_position(p.cu_seqlens_q, p.cu_seqlens_q_stride, p.k_len, p.k_len_stride, p.batch, q));
    std::int32_t* out = p.topk + head * p.topk_stride_h + q * p.topk_stride_q;
    if (topk_select::write_short_row(out, p.topk_stride_slot, p.k, local, lane)) continue;
    const int want = p.k - 1;
    const float* sc = p.scores + head * p.scores_stride_h + q * p.scores_stride_q;
    const std::int64_t stride = p.scores_stride_col;
    const int n = min(local, p.cols);  // ranked candidates: columns [0, n)

    Ranker<kQuantised> rank;
    if constexpr (kQuantised) {  // pass 0: the finite range of the row
      float lo = FLT_MAX, hi = -FLT_MAX;
      for (int c0 = 0; c0 < n; c0 += kGroup) {
        float v[4];
        load4<kVector>(sc, stride, c0 + 4 * lane, n, v);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (topk_key::finite(v[e])) lo = fminf(lo, v[e]), hi = fmaxf(hi, v[e]);
      }
#pragma unroll
      for (int m = 16; m > 0; m >>= 1) {
        lo = fminf(lo, __shfl_xor_sync(kAll, lo, m));
        hi = fmaxf(hi, __shfl_xor_sync(kAll, hi, m));
      }
      rank.z = topk_key::quantiser(lo, hi);
    }
    // This lane's keys of the group at c0 (columns c0 + 4 lane .. + 3); 0 past n.
    const auto keys_of = [&](int c0, std::uint64_t(&key)[4]) {
      const int c = c0 + 4 * lane;
      float v[4];
      load4<kVector>(sc, stride, c, n, v);
#pragma unroll
      for (int e = 0; e < 4; ++e) key[e] = c + e < n ? rank.key(v[e], c + e) : 0;
    };
    const std::uint64_t mine = topk_select::warp_best(n, want, lane, keys_of);
    // Fewer than `want` candidates (a batch inconsistent with `cols`) leave empty keys: id -1.
    if (lane < want) out[lane * p.topk_stride_slot] = topk_key::id_of(mine);
    if (lane == 0) out[want * p.topk_stride_slot] = local;
  }
}

}  // namespace

void launch_topk(const TopkParams& p, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t{p.h} * p.total_q;
  if (rows == 0) return;
  const std::int64_t blocks = std::min<std::int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 1 << 20);
  // 16-byte loads need contiguous columns and every row start 16-byte aligned.
  const bool vector = p.scores_stride_col == 1 && p.scores_stride_q % 4 == 0 && p.scores_stride_h % 4 == 0 &&
                      reinterpret_cast<std::uintptr_t>(p.scores) % 16 == 0;
  const auto kernel = p.quantised ? (vector ? topk_kernel<true, true> : topk_kernel<true, false>)
                                  : (vector ? topk_kernel<false, true> : topk_kernel<false, false>);
  kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(p);
  MSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace msa::cuda
