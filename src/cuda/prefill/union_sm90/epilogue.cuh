// Epilogue of the sm_90a tile-union sparse prefill: every real (query, head) row of the tile
// gets its final normalised O (bf16) and natural-log LSE in slot 0 of o_partial / lse_partial;
// the combine (one slot per row) only applies sinks and the output dtype. O is staged through the (no longer needed) Q tile and stored as whole 256-byte rows.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

#include "cuda/prefill/sm90/epilogue.cuh"
#include "cuda/prefill/union_sm90/mainloop.cuh"

namespace msa::cuda::union_sm90 {

template <class AccO>
__device__ __forceinline__ void store_tile(const UnionParams& p, const Tile& t, AccO& acc_o,
                                           const SoftmaxState& st, Traits::Element* so, int tid) {
  using namespace cute;
  using Element = Traits::Element;
  constexpr int kD = Traits::kHeadDim;
  typename Traits::MmaPV mma;
  auto thr = mma.get_slice(tid);
  Tensor sO = make_tensor(make_smem_ptr(so), Traits::SmemLayoutQ{});
  Tensor tOcO = thr.partition_C(make_identity_tensor(Shape<Int<Traits::kTileM>, Int<kD>>{}));
  const int group = p.attn.group;
  const int rows = t.nq * group;

  float l[2], inv[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] = prefill_sm90::quad_sum(st.l[half]);
    inv[half] = l[half] > 0.f ? 1.f / l[half] : 0.f;
  }
  prefill_sm90::stage_normalised_o<Traits>(acc_o, inv, so, tid);
  if (tid % 4 == 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = get<0>(tOcO(2 * half));
      if (r >= rows) continue;
      const int qi = r / group;
      const std::int64_t qh = std::int64_t(t.q0 + qi) * p.attn.h_q + t.kv_head * group + (r - qi * group);
      p.attn.lse_partial[qh] = l[half] > 0.f ? (st.m[half] + __log2f(l[half])) * 0.69314718055994531f : -INFINITY;
    }
  }
  __syncthreads();

  auto* gout = static_cast<Element*>(p.attn.o_partial);
  const int chunk = tid % Traits::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < Traits::kTileM / Traits::kRowsPerPass; ++i) {
    const int r = i * Traits::kRowsPerPass + tid / Traits::kChunksPerRow;
    if (r >= rows) continue;
    const int qi = r / group;
    const std::int64_t qh = std::int64_t(t.q0 + qi) * p.attn.h_q + t.kv_head * group + (r - qi * group);
    *reinterpret_cast<uint4*>(gout + qh * kD + chunk * Traits::kChunkElems) =
        *reinterpret_cast<const uint4*>(&sO(r, chunk * Traits::kChunkElems));
  }
}

}  // namespace msa::cuda::union_sm90
