// The top-k kernel: one warp per (head, query) row, in both rankings (msa::TopkRanking; the keys
// are core/topk_key.h's, shared with the CPU twin). The warp keeps the row's best k - 1 keys so
// far as one sorted list across its lanes (lane s holds the s-th best). Lane l reads columns
// 128 j + 4 l .. + 3 (16-byte loads where the row allows them).
//
// Pass 1 takes each lane's largest key and sorts the 32 lane maxima across the warp (bitonic):
// the list starts as their best k - 1, so the bar a candidate must beat is already near its final
// value. Pass 2 takes the row's keys again (the first 256 columns' kept in registers, the rest
// re-read from L1/L2) and inserts only the keys above the bar that are not already listed (a lane's own maximum): a ballot finds them, each goes in with one ballot
// (its position) and one shuffle (the worse keys move down). Before both, the quantised ranking
// takes the row's finite minimum and maximum (pass 0).
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "core/topk_key.h"
#include "cuda/common/check.h"
#include "cuda/plan/tile_keys.cuh"
#include "cuda/topk/launch.h"

namespace msa::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr unsigned kAll = 0xffffffffu;
constexpr int kChunk = 128;  // columns per warp step: 4 per lane
constexpr int kCached = 2;   // chunks whose keys pass 1 keeps in registers for pass 2

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

// Sorts one key per lane across the warp, descending (lane 0 the largest).
__device__ __forceinline__ std::uint64_t warp_sort_descending(std::uint64_t x, int lane) {
#pragma unroll
  for (int k = 2; k <= 32; k <<= 1) {
#pragma unroll
    for (int j = k >> 1; j > 0; j >>= 1) {
      const std::uint64_t y = __shfl_xor_sync(kAll, x, j);
      // In a descending run (lane & k == 0) the lower lane of a pair keeps the larger key. Keys
      // are unique but for the empty 0, so one comparison says which of the two to keep.
      const bool keep_larger = ((lane & j) == 0) == ((lane & k) == 0);
      x = (y > x) == keep_larger ? y : x;
    }
  }
  return x;
}

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
    const int b = request_of_query(p.cu_seqlens_q, p.batch, q, 0, p.cu_seqlens_q_stride);
    const std::int64_t q0 = p.cu_seqlens_q[b * p.cu_seqlens_q_stride];
    const std::int64_t q_len = p.cu_seqlens_q[(b + 1) * p.cu_seqlens_q_stride] - q0;
    const std::int64_t pos = std::int64_t{p.k_len[b * p.k_len_stride]} - q_len + (q - q0);
    const int local = static_cast<int>(pos <= 0 ? 0 : std::min<std::int64_t>(pos / kBlockSize, INT32_MAX - 1));
    std::int32_t* out = p.topk + head * p.topk_stride_h + q * p.topk_stride_q;
    if (local < p.k) {  // n = local + 1 <= k
      for (int s = lane; s < p.k; s += 32) out[s * p.topk_stride_slot] = s <= local ? s : -1;
      continue;
    }
    const int want = p.k - 1;
    const float* sc = p.scores + head * p.scores_stride_h + q * p.scores_stride_q;
    const std::int64_t stride = p.scores_stride_col;
    const int n = min(local, p.cols);  // ranked candidates: columns [0, n)

    Ranker<kQuantised> rank;
    if constexpr (kQuantised) {  // pass 0: the finite range of the row
      float lo = FLT_MAX, hi = -FLT_MAX;
      for (int c0 = 0; c0 < n; c0 += kChunk) {
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
    // This lane's keys of the chunk at c0 (columns c0 + 4 lane .. + 3); 0 past n.
    const auto chunk_keys = [&](int c0, std::uint64_t(&key)[4]) {
      const int c = c0 + 4 * lane;
      float v[4];
      load4<kVector>(sc, stride, c, n, v);
#pragma unroll
      for (int e = 0; e < 4; ++e) key[e] = c + e < n ? rank.key(v[e], c + e) : 0;
    };

    // Pass 1: this lane's best key (0: no column), then the list = the best of the lane maxima.
    // The first kCached chunks' keys stay in registers for pass 2.
    std::uint64_t cached[kCached][4];
    std::uint64_t own = 0;
#pragma unroll
    for (int j = 0; j < kCached; ++j) {
      chunk_keys(j * kChunk, cached[j]);
#pragma unroll
      for (int e = 0; e < 4; ++e) own = max(own, cached[j][e]);
    }
    for (int c0 = kCached * kChunk; c0 < n; c0 += kChunk) {
      std::uint64_t key[4];
      chunk_keys(c0, key);
#pragma unroll
      for (int e = 0; e < 4; ++e) own = max(own, key[e]);
    }
    std::uint64_t mine = warp_sort_descending(own, lane);
    std::uint64_t bar = __shfl_sync(kAll, mine, want - 1);

    // Pass 2: the keys above the bar not yet listed, inserted one at a time.
    const auto insert = [&](std::uint64_t(&key)[4]) {
      bool any = false;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (key[e] == own) key[e] = 0;  // already in the list
        any |= key[e] > bar;
      }
      if (__ballot_sync(kAll, any) == 0u) return;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        for (unsigned pending = __ballot_sync(kAll, key[e] > bar); pending != 0u; pending &= pending - 1u) {
          const std::uint64_t y = __shfl_sync(kAll, key[e], __ffs(pending) - 1);
          if (y <= bar) continue;  // beaten by an earlier insertion (warp-uniform)
          // y goes to position `at` (the count of better listed keys); the worse ones move down.
          const int at = __popc(__ballot_sync(kAll, lane < want && mine > y));
          const std::uint64_t above = __shfl_up_sync(kAll, mine, 1);
          if (lane >= at) mine = lane == at ? y : above;
          bar = __shfl_sync(kAll, mine, want - 1);
        }
      }
    };
#pragma unroll
    for (int j = 0; j < kCached; ++j)
      if (j * kChunk < n) insert(cached[j]);
    for (int c0 = kCached * kChunk; c0 < n; c0 += kChunk) {
      std::uint64_t key[4];
      chunk_keys(c0, key);
      insert(key);
    }
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
