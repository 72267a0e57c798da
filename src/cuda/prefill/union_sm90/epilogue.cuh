// Epilogue of the sm_90a tile-union sparse prefill: every real (query, head) row of the tile
// gets its final normalised O (bf16) and natural-log LSE in slot 0 of o_partial / lse_partial;
// the combine (one slot per row) only applies sinks and the output dtype.
//
// Each consumer warpgroup stages its 64 O rows in its own half of the tile's (consumed) Q
// buffer and stores them with TMA, one box per query's heads and column half, issued by the
// thread owning the box's first row. That thread waits for the store to have read shared
// memory before the warpgroup releases the buffer to the next Q gather.
#pragma once

#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/prefill/sm90/epilogue.cuh"
#include "cuda/prefill/union_sm90/mainloop.cuh"

namespace msa::cuda::union_sm90 {

template <class AccO>
__device__ __forceinline__ void store_tile(const UnionParams& p, const PrefillTma& tma, const Tile& t, AccO& acc_o,
                                           const SoftmaxState& st, Element* so, int ct) {
  using namespace cute;
  typename Traits::MmaPV mma;
  auto thr = mma.get_slice(ct);
  Tensor tOcO = thr.partition_C(make_identity_tensor(Shape<Int<Traits::kTileM>, Int<Traits::kHeadDim>>{}));
  const int group = p.attn.group;
  const int rows = t.nq * group;

  float l[2], inv[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] = quad_sum(st.l[half]);
    inv[half] = l[half] > 0.f ? 1.f / l[half] : 0.f;
  }
  prefill_sm90::stage_normalised_o<Traits>(acc_o, inv, so, ct);
  if (ct % 4 == 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = get<0>(tOcO(2 * half));
      if (r >= rows) continue;
      const int qi = r / group;
      const std::int64_t qh = std::int64_t(t.q0 + qi) * p.attn.h_q + t.kv_head * group + (r - qi * group);
      p.attn.lse_partial[qh] = l[half] > 0.f ? (st.m[half] + __log2f(l[half])) * 0.69314718055994531f : -INFINITY;
    }
  }
  // The warpgroup's staged rows are complete once its 128 threads pass here; the proxy fence
  // makes their st.shared visible to the TMA unit.
  cutlass::arch::fence_view_async_shared();
  const int wg = ct / 128;
  named_barrier_sync(kEpilogue0 + wg, 128);
  const int r = wg * 64 + ct % 128;
  if (ct % 128 < 64 && r < rows && r % tma.q_box_rows == 0) {
    const int qi = r / group;
    const int h = t.kv_head * group + (r - qi * group);
#pragma unroll
    for (int c = 0; c < Traits::kColHalves; ++c)
      cute::SM90_TMA_STORE_3D::copy(&tma.o_partial, so + Traits::q_box_offset(r, c), c * Traits::kBoxCols, h, t.q0 + qi);
    cute::tma_store_arrive();
    cute::tma_store_wait<0>();  // shared memory read: the buffer may be refilled
  }
}

}  // namespace msa::cuda::union_sm90
