// The exact top-k kernel: one warp per (head, query) row. Each lane keeps the best kList keys
// of its strided share of the row's candidates in registers (a sorted list, inserted into only
// when a key beats its last entry), then k - 1 rounds of a warp maximum over the lists' heads
// pick the row's best in order. A key is the score's order-preserving bits above the inverted
// block id, so that one unsigned comparison ranks by score and breaks ties to the smaller id.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/topk/launch.h"

namespace msa::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kBlockTokens = 128;

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

template <int kList>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) topk_kernel(const TopkParams p) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t rows = std::int64_t{p.h} * p.total_q;
  const std::int64_t warps = std::int64_t{gridDim.x} * kWarpsPerBlock;
  for (std::int64_t row = std::int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32; row < rows; row += warps) {
    const std::int64_t head = row / p.total_q;
    const std::int64_t q = row - head * p.total_q;
    // The request: the last b in [0, B) with cu_seqlens_q[b] <= q.
    int lo = 0, hi = p.batch - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.cu_seqlens_q[mid * p.cu_seqlens_q_stride] <= q)
        lo = mid;
      else
        hi = mid - 1;
    }
    const std::int64_t q0 = p.cu_seqlens_q[lo * p.cu_seqlens_q_stride];
    const std::int64_t q_len = p.cu_seqlens_q[(lo + 1) * p.cu_seqlens_q_stride] - q0;
    const std::int64_t pos = std::int64_t{p.k_len[lo * p.k_len_stride]} - q_len + (q - q0);
    const int local = static_cast<int>(pos <= 0 ? 0 : std::min<std::int64_t>(pos / kBlockTokens, INT32_MAX - 1));
    std::int32_t* out = p.topk + head * p.topk_stride_h + q * p.topk_stride_q;
    if (local < p.k) {  // n = local + 1 <= k
      for (int s = lane; s < p.k; s += 32) out[s * p.topk_stride_slot] = s <= local ? s : -1;
      continue;
    }
    const float* sc = p.scores + head * p.scores_stride_h + q * p.scores_stride_q;
    const int n = min(local, p.cols);
    std::uint64_t list[kList];  // descending; 0 = empty
#pragma unroll
    for (int i = 0; i < kList; ++i) list[i] = 0;
    for (int c = lane; c < n; c += 32) {
      const std::uint64_t key = key_of(sc[c * p.scores_stride_col], c);
      if (key > list[kList - 1]) {
#pragma unroll
        for (int i = kList - 1; i > 0; --i) list[i] = key > list[i - 1] ? list[i - 1] : (key > list[i] ? key : list[i]);
        list[0] = key > list[0] ? key : list[0];
      }
    }
    // k - 1 rounds: the warp's best head leaves its lane's list (keys are distinct: one lane).
    for (int s = 0; s < p.k - 1; ++s) {
      std::uint64_t best = list[0];
#pragma unroll
      for (int d = 16; d > 0; d /= 2) best = max(best, __shfl_xor_sync(0xffffffffu, best, d));
      if (best == 0) {  // fewer than k - 1 candidates within `cols` (inconsistent batch data)
        if (lane == 0) out[s * p.topk_stride_slot] = -1;
        continue;
      }
      if (list[0] == best) {
#pragma unroll
        for (int i = 0; i < kList - 1; ++i) list[i] = list[i + 1];
        list[kList - 1] = 0;
      }
      if (lane == 0) out[s * p.topk_stride_slot] = id_of(best);
    }
    if (lane == 0) out[(p.k - 1) * p.topk_stride_slot] = local;
  }
}

template <int kList>
void launch(const TopkParams& p, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t{p.h} * p.total_q;
  const std::int64_t blocks = std::min<std::int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 1 << 20);
  topk_kernel<kList><<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(p);
  MSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_topk(const TopkParams& p, cudaStream_t stream) {
  if (std::int64_t{p.h} * p.total_q == 0) return;
  // A lane's list holds at least the k - 1 a row can need from it.
  if (p.k - 1 <= 4)
    launch<4>(p, stream);
  else if (p.k - 1 <= 8)
    launch<8>(p, stream);
  else if (p.k - 1 <= 16)
    launch<16>(p, stream);
  else
    launch<32>(p, stream);
}

}  // namespace msa::cuda
