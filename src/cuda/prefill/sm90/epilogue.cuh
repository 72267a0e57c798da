// Epilogue of the sm_90a sparse prefill: normalise O by the row sum, write BF16 partials and
// natural-log LSE for every real (query, head) row of the M tile.
//
// O goes through shared memory: the warpgroup overwrites its (already consumed) Q buffer with
// the swizzled O tile, then the thread of each box's first row stores that box (box_rows heads
// of one query, both column halves) to the query's slot with TMA: a handful of bulk stores per
// tile instead of every thread computing addresses for 16-byte stores. The store reads shared
// memory asynchronously; the same thread waits for that read before its next TMA load into
// the buffer (Mainloop::load_q_tile).
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

template <class Traits>
struct Epilogue {
  using Element = typename Traits::Element;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kTileM = Traits::kTileM;
  static_assert(Traits::kWarpgroups == 1, "one warpgroup stages and stores the whole M tile");

  template <class AccO>
  static __device__ __forceinline__ void store(const PrefillParams& p, const PrefillTma& tma, AccO& acc_o,
                                               const float (&m_scaled)[2],
                                               const float (&row_sum)[2], Element* so,
                                               const RowInfo* rows, int tid) {
    using namespace cute;
    typename Traits::MmaPV mma;
    auto thr = mma.get_slice(tid);
    Tensor tOcO = thr.partition_C(make_identity_tensor(Shape<Int<kTileM>, Int<kHeadDim>>{}));
    const std::int64_t plane = p.total_q * p.h_q;  // rows of one slot of o/lse_partial

    float inv[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) inv[half] = row_sum[half] > 0.f ? 1.f / row_sum[half] : 0.f;
    stage_normalised_o<Traits>(acc_o, inv, so, tid);

    // LSE: the quad's first lane owns its two rows; ln(sum 2^(s*scale_log2 - m)) + m*ln2.
    if (tid % 4 == 0) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const RowInfo info = rows[get<0>(tOcO(2 * half))];
        if (info.qg < 0) continue;
        const float lse = row_sum[half] > 0.f
                              ? (m_scaled[half] + __log2f(row_sum[half])) * 0.69314718055994531f
                              : -INFINITY;
        p.lse_partial[info.slot * plane + std::int64_t(info.qg) * p.h_q + info.h] = lse;
      }
    }

    // The staged tile is complete once all 128 threads pass here; the proxy fence makes their
    // st.shared visible to the TMA unit's reads.
    cutlass::arch::fence_view_async_shared();
    named_barrier_sync(static_cast<int>(NamedBarrier::kEpilogueWg0), 128);
    if (tid < kTileM && tid % tma.box_rows == 0) {
      const RowInfo info = rows[tid];
      if (info.qg >= 0) {
        const int row = static_cast<int>(info.slot * p.total_q + info.qg);
#pragma unroll
        for (int c = 0; c < Traits::kColHalves; ++c)
          cute::SM90_TMA_STORE_3D::copy(&tma.o_partial, so + Traits::q_box_offset(tid, c),
                                        c * Traits::kBoxCols, info.h, row);
        cute::tma_store_arrive();
      }
    }
  }
};

}  // namespace msa::cuda::prefill_sm90
