// The one epilogue of both sm_90a prefill kernels: O normalised by the row sum, staged through
// the tile's consumed Q buffer and stored with TMA (one box per query's heads and column half,
// issued by the thread owning the box's first row), and the natural-log LSE of every row. The
// kernels differ only in where a tile row goes, which they say with a RowTarget functor:
//   target(r) -> RowDest {valid, h, o_row, lse_index} for tile row r.
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>

#include "core/plan_encoding.h"
#include "cuda/common/ptx.cuh"
#include "cuda/prefill/sm90/common/params.h"
#include "cuda/prefill/sm90/common/traits.h"

namespace msa::cuda::prefill_sm90 {

struct RowDest {
  bool valid;              // a real (query, head) row that gets stored
  int h;                   // query head
  int o_row;               // row of o_partial seen as [slots * total_q] (slot * total_q + query)
  std::int64_t lse_index;  // element of lse_partial
};

// Normalises this thread's O accumulator rows by `inv` (per row half) and writes them as
// 16-bit pairs into the swizzled [kTileM, d] tile `so` (values i, i + 1 of the C layout are
// adjacent columns of one row).
template <class Traits, class AccO>
__device__ __forceinline__ void stage_normalised_o(const AccO& acc_o, const float (&inv)[2],
                                                   typename Traits::Element* so, int ct) {
  using namespace cute;
  using Element = typename Traits::Element;
  typename Traits::MmaPV mma;
  auto thr = mma.get_slice(ct);
  auto* so_bytes = reinterpret_cast<std::uint8_t*>(so);  // indexed by swizzled_byte: stores stay STS
  Tensor tOcO = thr.partition_C(make_identity_tensor(Shape<Int<Traits::kTileM>, Int<Traits::kHeadDim>>{}));
#pragma unroll
  for (int i = 0; i < size(acc_o); i += 2) {
    const int half = (i >> 1) & 1;
    const Element lo = static_cast<Element>(acc_o(i) * inv[half]);
    const Element hi = static_cast<Element>(acc_o(i + 1) * inv[half]);
    const std::uint32_t packed = std::uint32_t(lo.raw()) | (std::uint32_t(hi.raw()) << 16);
    const int byte = swizzled_byte<typename Traits::SmemLayoutQ, Element>(get<0>(tOcO(i)), get<1>(tOcO(i)));
    *reinterpret_cast<std::uint32_t*>(so_bytes + byte) = packed;
  }
}

// The epilogue of one tile for this consumer warpgroup's 64 rows. m_scaled: the row halves'
// max * scale_log2; row_sum: this thread's part of their sums (the quad adds them); o_scale:
// a factor on O (FP8 V's descale, else 1) that the LSE does not see. With kWaitRead the thread
// issuing a box waits for the store to have read shared memory, so the warpgroup may release
// `so` to the next Q gather right after; without it the caller calls stores_read() before it
// releases `so`, and works meanwhile.
template <class Traits, bool kWaitRead = true, class AccO, class RowTarget>
__device__ __forceinline__ void store_tile(const PrefillTma& tma, const AccO& acc_o, const float (&m_scaled)[2],
                                           const float (&row_sum)[2], typename Traits::Element* so, float* lse_partial,
                                           int ct, const RowTarget& target, float o_scale = 1.f) {
  using namespace cute;
  typename Traits::MmaPV mma;
  auto thr = mma.get_slice(ct);
  Tensor tOcO = thr.partition_C(make_identity_tensor(Shape<Int<Traits::kTileM>, Int<Traits::kHeadDim>>{}));

  float l[2], inv[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] = quad_sum(row_sum[half]);
    inv[half] = l[half] > 0.f ? o_scale / l[half] : 0.f;
  }
  stage_normalised_o<Traits>(acc_o, inv, so, ct);
  // LSE: the quad's first lane owns its two rows; ln(sum 2^(s*scale_log2 - m)) = (m + log2 l) ln 2.
  if (ct % 4 == 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const RowDest dest = target(get<0>(tOcO(2 * half)));
      if (!dest.valid) continue;
      lse_partial[dest.lse_index] = l[half] > 0.f ? (m_scaled[half] + __log2f(l[half])) * kLn2 : -INFINITY;
    }
  }
  // The warpgroup's staged rows are complete once its 128 threads pass here; the proxy fence
  // makes their st.shared visible to the TMA unit.
  cutlass::arch::fence_view_async_shared();
  const int wg = ct / 128;
  named_barrier_sync(kEpilogue0 + wg, 128);
  const int r = wg * 64 + ct % 128;
  if (ct % 128 < 64 && r % tma.q_box_rows == 0) {
    const RowDest dest = target(r);
    if (dest.valid) {
#pragma unroll
      for (int c = 0; c < Traits::kColHalves; ++c)
        cute::SM90_TMA_STORE_3D::copy(&tma.o_partial, so + Traits::q_box_offset(r, c), c * Traits::kBoxCols, dest.h,
                                      dest.o_row);
      cute::tma_store_arrive();
      if constexpr (kWaitRead) cute::tma_store_wait<0>();  // shared memory read: the buffer may be refilled
    }
  }
}

// Every TMA store this thread issued has read its shared memory (a no-op for a thread that
// issued none): after store_tile<Traits, false>, before its buffer is released.
__device__ __forceinline__ void stores_read() { cute::tma_store_wait<0>(); }

}  // namespace msa::cuda::prefill_sm90
