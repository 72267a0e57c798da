// The exact top-k kernel: one warp per (head, query) row. The warp keeps the row's best k - 1
// keys so far as one sorted list across its lanes (lane s holds the s-th best) and reads the
// candidates 32 at a time: one comparison with the (k - 1)-th best filters each, and the few
// that pass are inserted one by one (a ballot counts the better keys, one shuffle moves the
// worse ones down). A key is the score's order-preserving bits above the inverted block id, so
// that one unsigned comparison ranks by score and breaks ties to the smaller id.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/plan/tile_keys.cuh"
#include "cuda/topk/launch.h"

namespace msa::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

// Order-preserving key: larger score first, NaN below every number (-inf included), -0 equal
// to +0, then the smaller block id first. Every candidate's key is > 0, the empty entry's.
__device__ __forceinline__ std::uint64_t key_of(float v, int col) {
  std::uint32_t u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  if (v == 0.f) u = 0x80000000u;
  if (v != v) u = 0u;
  return (std::uint64_t{u} << 32) | static_cast<std::uint32_t>(~col);
}
__device__ __forceinline__ int id_of(std::uint64_t key) { return static_cast<int>(~static_cast<std::uint32_t>(key)); }

__global__ void __launch_bounds__(kWarpsPerBlock * 32) topk_kernel(const TopkParams p) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t rows = std::int64_t{p.h} * p.total_q;
  const std::int64_t warps = std::int64_t{gridDim.x} * kWarpsPerBlock;
  for (std::int64_t row = std::int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32; row < rows; row += warps) {
    const std::int64_t head = row / p.total_q;
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
    // The row's best `want` keys so far, one per lane (lane s: the s-th best; 0 = empty), and
    // the want-th best, which a candidate must beat. Candidates come 32 at a time, one per lane.
    const int want = p.k - 1;
    const float* sc = p.scores + head * p.scores_stride_h + q * p.scores_stride_q;
    const int n = min(local, p.cols);
    std::uint64_t mine = 0, bar = 0;
    for (int c0 = 0; want > 0 && c0 < n; c0 += 32) {
      const int c = c0 + lane;
      const std::uint64_t key = c < n ? key_of(sc[std::int64_t{c} * p.scores_stride_col], c) : 0;
      for (unsigned pending = __ballot_sync(kAll, key > bar); pending != 0u; pending &= pending - 1u) {
        const std::uint64_t y = __shfl_sync(kAll, key, __ffs(pending) - 1);
        if (y <= bar) continue;  // beaten by an earlier insertion of this batch (warp-uniform)
        // y goes to position `at` (the count of better kept keys); the worse ones move down.
        const int at = __popc(__ballot_sync(kAll, lane < want && mine > y));
        const std::uint64_t above = __shfl_up_sync(kAll, mine, 1);
        if (lane >= at) mine = lane == at ? y : above;
        bar = __shfl_sync(kAll, mine, want - 1);
      }
    }
    // Fewer than `want` candidates (a batch inconsistent with `cols`) leave empty keys: id -1.
    if (lane < want) out[lane * p.topk_stride_slot] = id_of(mine);
    if (lane == 0) out[want * p.topk_stride_slot] = local;
  }
}

}  // namespace

void launch_topk(const TopkParams& p, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t{p.h} * p.total_q;
  if (rows == 0) return;
  const std::int64_t blocks = std::min<std::int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 1 << 20);
  topk_kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(p);
  MSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace msa::cuda
