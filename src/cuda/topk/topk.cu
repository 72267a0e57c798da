// The top-k kernel: one (head, query) row per warp, or, for launches of many rows, per half warp
// where the row's list of k - 1 keys fits 16 lanes (k <= 17: two rows side by side in one warp's
// instructions, which halves the per-row cost of the lane maxima's sort and of the row's setup;
// kHalfWarpRows), in both rankings (msa::TopkRanking; the keys are core/topk_key.h's, shared
// with the CPU twin). Lane l of a row's W lanes reads columns 4 W j + 4 l .. + 3 (16-byte loads
// where the row allows them) and the lanes keep the row's best k - 1 keys as warp_select.cuh's
// warp_best_ranks describes (pass 1 on 32-bit (rank, column) pairs, the sorted lane maxima, then
// the few keys above the bar inserted; a row's first kCachedRanks ranks kept in registers
// between the two passes). Before both, the quantised ranking takes the row's finite minimum and
// maximum (pass 0).
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
// Two rows per warp from this many rows up. The row's setup and sort are shared by two rows: on
// the H100 (docs/performance.md, step 34) 0.131 -> 0.116 ms at 131k rows (S = 32k, h 4) and 63
// -> 47 us at 65k, while launches of a few thousand rows, whose warps do not fill the GPU, were
// slower (1024 rows of 780 candidates: 13 -> 20 us): their time is one row's latency, which a
// half warp doubles. 16 lane maxima left a lower bar than 32 (about 9 insertions per row of
// random scores instead of 3, by a simulation); seeding the list with each lane's best two keys
// (warp_select.cuh) brings that to about 1.5: 0.116 -> 0.101 ms at S = 32k (step 37).
constexpr std::int64_t kHalfWarpRows = 32768;
using topk_select::kAll;

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

// The ranking of one row: the rank of a score (core/topk_key.h; the key is with_id(rank, column)).
template <bool kQuantised>
struct Ranker {
  topk_key::Quantiser z;
  __device__ __forceinline__ std::uint32_t rank(float v) const {
    return kQuantised ? topk_key::quantised_rank(v, z) : topk_key::exact_rank(v);
  }
};

// Ranks a row keeps in registers between its two passes (topk_select::warp_best_ranks), and
// blocks per SM. The exact ranking keeps 256 (a whole row at S = 32k); the quantised ranking,
// whose quantiser also needs registers, keeps 128. 16-lane rows run at 5 blocks per SM (48
// registers; 40 warps hide more of a row's setup latency than 32): on the H100 exact S = 128k
// 0.638 -> 0.605 ms, S = 32k 0.073 -> 0.072, quantised 7% faster than at 4 (docs/performance.md
// step 38). The exact instance with scalar loads would spill there and keeps 4 (64 registers;
// without a bound the 16-lane instance took 112).
template <bool kQuantised>
inline constexpr int kCachedRanks = kQuantised ? 128 : 256;
template <bool kQuantised, bool kVector, int kWidth>
inline constexpr int kBlocksPerSm = (kWidth == 16 && (kQuantised || kVector)) ? 5 : 4;

// kWidth lanes per row (topk_select::row_lanes): with 16, a warp ranks two rows side by side.
template <bool kQuantised, bool kVector, int kWidth>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, kBlocksPerSm<kQuantised, kVector, kWidth>)
    topk_kernel(const TopkParams p) {
  constexpr int kRowsPerWarp = 32 / kWidth;
  constexpr int kStep = topk_select::kGroupOf<kWidth>;
  const int lane = static_cast<int>(threadIdx.x % kWidth);  // within the row's lanes
  const int sub = static_cast<int>(threadIdx.x % 32) / kWidth;
  // The grid: x over groups of kQueries queries (total_q < 2^31: at most 2^27 blocks), y and z
  // over heads (y < 65536), so a warp's rows share their head and no row index is divided.
  constexpr int kQueries = kWarpsPerBlock * kRowsPerWarp;
  const std::int64_t q = std::int64_t{blockIdx.x} * kQueries + threadIdx.x / 32 * kRowsPerWarp + sub;
  const std::int64_t head = std::int64_t{blockIdx.z} * gridDim.y + blockIdx.y;
  if (head >= p.h) return;
  // This lane's row: ranked, or not (past the last row, or written by the n <= K shortcut),
  // when it passes n = 0 to the warp's selection.
  bool ranked = false;
  int local = 0, n = 0;
  std::int32_t* out = nullptr;
  const float* sc = p.scores;
  if (q < p.total_q) {
    local = topk_select::local_block(
        topk_select::row_position(p.cu_seqlens_q, p.cu_seqlens_q_stride, p.k_len, p.k_len_stride, p.batch, q));
    out = p.topk + head * p.topk_stride_h + q * p.topk_stride_q;
    ranked = !topk_select::write_short_row(out, p.topk_stride_slot, p.k, local, lane, kWidth);
    sc += head * p.scores_stride_h + q * p.scores_stride_q;
    n = ranked ? min(local, p.cols) : 0;  // ranked candidates: columns [0, n)
  }
  if (kWidth == 32 ? !ranked : !__any_sync(kAll, ranked)) return;  // warp-uniform
  const int want = p.k - 1;
  const std::int64_t stride = p.scores_stride_col;

  Ranker<kQuantised> rank;
  if constexpr (kQuantised) {  // pass 0: the finite range of the row
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int c0 = 0; c0 < n; c0 += kStep) {
      float v[4];
      load4<kVector>(sc, stride, c0 + 4 * lane, n, v);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (topk_key::finite(v[e])) lo = fminf(lo, v[e]), hi = fmaxf(hi, v[e]);
    }
#pragma unroll
    for (int m = kWidth / 2; m > 0; m >>= 1) {
      lo = fminf(lo, __shfl_xor_sync(kAll, lo, m, kWidth));
      hi = fmaxf(hi, __shfl_xor_sync(kAll, hi, m, kWidth));
    }
    rank.z = topk_key::quantiser(lo, hi);
  }
  // This lane's scores of the group at c0 (columns c0 + 4 lane .. + 3; NaN past n).
  const auto load = [&](int c0, float(&v)[4]) { load4<kVector>(sc, stride, c0 + 4 * lane, n, v); };
  const auto rank_of = [&](float v) { return rank.rank(v); };
  const std::uint64_t mine =
      topk_select::warp_best_ranks<kWidth, kCachedRanks<kQuantised>>(n, want, lane, load, rank_of);
  if (!ranked) return;
  // Fewer than `want` candidates (a batch inconsistent with `cols`) leave empty keys: id -1.
  if (lane < want) out[lane * p.topk_stride_slot] = topk_key::id_of(mine);
  if (lane == 0) out[want * p.topk_stride_slot] = local;
}

template <bool kQuantised, bool kVector>
void launch_width(const TopkParams& p, std::int64_t rows, cudaStream_t stream) {
  const auto go = [&](auto kernel, int queries_per_block) {
    const std::int64_t x = (p.total_q + queries_per_block - 1) / queries_per_block;
    const int y = std::min(p.h, 65535);
    const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>(y), static_cast<unsigned>((p.h + y - 1) / y));
    kernel<<<grid, kWarpsPerBlock * 32, 0, stream>>>(p);
  };
  if (rows >= kHalfWarpRows && topk_select::row_lanes(p.k - 1) == 16)
    go(topk_kernel<kQuantised, kVector, 16>, kWarpsPerBlock * 2);
  else
    go(topk_kernel<kQuantised, kVector, 32>, kWarpsPerBlock);
}

}  // namespace

void launch_topk(const TopkParams& p, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t{p.h} * p.total_q;
  if (rows == 0) return;
  // 16-byte loads need contiguous columns and every row start 16-byte aligned.
  const bool vector = p.scores_stride_col == 1 && p.scores_stride_q % 4 == 0 && p.scores_stride_h % 4 == 0 &&
                      reinterpret_cast<std::uintptr_t>(p.scores) % 16 == 0;
  if (p.quantised)
    vector ? launch_width<true, true>(p, rows, stream) : launch_width<true, false>(p, rows, stream);
  else
    vector ? launch_width<false, true>(p, rows, stream) : launch_width<false, false>(p, rows, stream);
  MSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace msa::cuda
