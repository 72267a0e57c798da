// Epilogue of the sm_90a KV-block-major sparse prefill: normalise O by the row sum, write BF16
// partials and natural-log LSE for every real (query, head) row of the M tile.
//
// O goes through shared memory: each consumer warpgroup overwrites its half of the (already
// consumed) Q buffer with the swizzled O rows, then the thread of each box's first row stores
// that box (box_rows heads of one query, both column halves) to the query's slot with TMA: a
// handful of bulk stores per tile instead of every thread computing addresses for 16-byte
// stores.
#pragma once

#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/prefill/sm90/config.h"
#include "cuda/prefill/sm90/mainloop.cuh"
#include "cuda/prefill/sm90/params.h"

namespace msa::cuda::prefill_sm90 {

// Normalises this thread's O accumulator rows by `inv` (per row half) and writes them as
// 16-bit pairs into the swizzled [kTileM, d] tile `so` (values i, i + 1 of the C layout are
// adjacent columns of one row). Shared by the KV-block-major and tile-union epilogues.
template <class Traits, class AccO>
__device__ __forceinline__ void stage_normalised_o(const AccO& acc_o, const float (&inv)[2],
                                                   typename Traits::Element* so, int tid) {
  using namespace cute;
  using Element = typename Traits::Element;
  typename Traits::MmaPV mma;
  auto thr = mma.get_slice(tid);
  Tensor sO = make_tensor(make_smem_ptr(so), typename Traits::SmemLayoutQ{});
  Tensor tOcO = thr.partition_C(make_identity_tensor(Shape<Int<Traits::kTileM>, Int<Traits::kHeadDim>>{}));
#pragma unroll
  for (int i = 0; i < size(acc_o); i += 2) {
    const int half = (i >> 1) & 1;
    const Element lo = static_cast<Element>(acc_o(i) * inv[half]);
    const Element hi = static_cast<Element>(acc_o(i + 1) * inv[half]);
    const std::uint32_t packed = std::uint32_t(lo.raw()) | (std::uint32_t(hi.raw()) << 16);
    *reinterpret_cast<std::uint32_t*>(&sO(get<0>(tOcO(i)), get<1>(tOcO(i)))) = packed;
  }
}

// The KV-block-major step's epilogue for this consumer warpgroup's 64 rows: O normalised by
// the row sum (row_sum: this thread's part; the quad adds them), staged in the warpgroup's half
// of the step's consumed Q buffer `so` and stored with TMA, one box per query's heads and
// column half, into the row's slot; LSE (natural log) stored per row. The thread issuing a
// box waits for the store to have read shared memory, so the warpgroup may release the buffer
// to the next Q gather right after.
template <class AccO>
__device__ __forceinline__ void store_step(const PrefillParams& p, const PrefillTma& tma, AccO& acc_o,
                                           const float (&m_scaled)[2], const float (&row_sum)[2], Element* so,
                                           const RowInfo* rows, int ct) {
  using namespace cute;
  typename TmaTraits::MmaPV mma;
  auto thr = mma.get_slice(ct);
  Tensor tOcO = thr.partition_C(make_identity_tensor(Shape<Int<TmaTraits::kTileM>, Int<TmaTraits::kHeadDim>>{}));
  const std::int64_t plane = p.total_q * p.h_q;  // rows of one slot of o/lse_partial

  float l[2], inv[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] = quad_sum(row_sum[half]);
    inv[half] = l[half] > 0.f ? 1.f / l[half] : 0.f;
  }
  stage_normalised_o<TmaTraits>(acc_o, inv, so, ct);
  // LSE: the quad's first lane owns its two rows; ln(sum 2^(s*scale_log2 - m)) + m*ln2.
  if (ct % 4 == 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const RowInfo info = rows[get<0>(tOcO(2 * half))];
      if (info.qg < 0) continue;
      p.lse_partial[info.slot * plane + std::int64_t(info.qg) * p.h_q + info.h] =
          l[half] > 0.f ? (m_scaled[half] + __log2f(l[half])) * 0.69314718055994531f : -INFINITY;
    }
  }
  // The warpgroup's staged rows are complete once its 128 threads pass here; the proxy fence
  // makes their st.shared visible to the TMA unit.
  cutlass::arch::fence_view_async_shared();
  const int wg = ct / 128;
  named_barrier_sync(kEpilogue0 + wg, 128);
  const int r = wg * 64 + ct % 128;
  if (ct % 128 < 64 && r % tma.q_box_rows == 0) {
    const RowInfo info = rows[r];
    if (info.qg >= 0) {
      const int row = static_cast<int>(info.slot * p.total_q + info.qg);
#pragma unroll
      for (int c = 0; c < TmaTraits::kColHalves; ++c)
        cute::SM90_TMA_STORE_3D::copy(&tma.o_partial, so + TmaTraits::q_box_offset(r, c), c * TmaTraits::kBoxCols,
                                      info.h, row);
      cute::tma_store_arrive();
      cute::tma_store_wait<0>();  // shared memory read: the buffer may be refilled
    }
  }
}

}  // namespace msa::cuda::prefill_sm90
