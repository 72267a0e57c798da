// Epilogue of the sm_90a sparse prefill: normalise O by the row sum, write BF16 partials and
// natural-log LSE for every real (query, head) row of the M tile.
//
// O goes through shared memory: each warpgroup overwrites its own 64 rows of the M tile's Q
// buffer (its S WGMMA has completed, and the other warpgroup reads only its own rows), then
// stores whole 256-byte rows with 16-byte coalesced writes instead of the accumulator's
// scattered 4-byte pairs.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

#include "cuda/prefill/sm90/config.h"
#include "cuda/prefill/sm90/mainloop.cuh"
#include "cuda/prefill/sm90/params.h"

namespace msa::cuda::prefill_sm90 {

template <class Traits>
struct Epilogue {
  using Element = typename Traits::Element;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kTileM = Traits::kTileM;
  static constexpr int kChunkElems = Traits::kChunkElems;
  static constexpr int kChunksPerRow = Traits::kChunksPerRow;
  static constexpr int kWgRowsPerPass = 128 / kChunksPerRow;  // rows one warpgroup pass covers

  template <class AccO>
  static __device__ __forceinline__ void store(const PrefillParams& p, AccO& acc_o,
                                               const float (&m_scaled)[2],
                                               const float (&row_sum)[2], Element* so,
                                               const RowInfo* rows, int tid) {
    using namespace cute;
    typename Traits::MmaPV mma;
    auto thr = mma.get_slice(tid);
    Tensor sO = make_tensor(make_smem_ptr(so), typename Traits::SmemLayoutQ{});
    Tensor tOcO = thr.partition_C(make_identity_tensor(Shape<Int<kTileM>, Int<kHeadDim>>{}));
    const std::int64_t plane = p.total_q * p.h_q;  // rows of one slot of o/lse_partial

    // Normalise and stage: values i, i + 1 are adjacent columns of one row (C layout).
    float inv[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) inv[half] = row_sum[half] > 0.f ? 1.f / row_sum[half] : 0.f;
#pragma unroll
    for (int i = 0; i < size(acc_o); i += 2) {
      const int half = (i >> 1) & 1;
      const Element lo = static_cast<Element>(acc_o(i) * inv[half]);
      const Element hi = static_cast<Element>(acc_o(i + 1) * inv[half]);
      const std::uint32_t packed = std::uint32_t(lo.raw()) | (std::uint32_t(hi.raw()) << 16);
      *reinterpret_cast<std::uint32_t*>(&sO(get<0>(tOcO(i)), get<1>(tOcO(i)))) = packed;
    }

    // LSE: the quad's first lane owns its two rows; ln(sum 2^(s*scale_log2 - m)) + m*ln2.
    if (tid % 4 == 0) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const RowInfo info = rows[get<0>(tOcO(2 * half))];
        if (info.qh < 0) continue;
        const float lse = row_sum[half] > 0.f
                              ? (m_scaled[half] + __log2f(row_sum[half])) * 0.69314718055994531f
                              : -INFINITY;
        p.lse_partial[info.slot * plane + info.qh] = lse;
      }
    }

    // The warpgroup's staged rows are complete once all 128 of its threads pass here.
    const int wg = tid / 128;
    named_barrier_sync(static_cast<int>(NamedBarrier::kEpilogueWg0) + wg, 128);
    Element* gout = static_cast<Element*>(p.o_partial);
    const int chunk = tid % kChunksPerRow;
#pragma unroll
    for (int i = 0; i < 64 / kWgRowsPerPass; ++i) {
      const int r = wg * 64 + i * kWgRowsPerPass + (tid % 128) / kChunksPerRow;
      const RowInfo info = rows[r];
      if (info.qh < 0) continue;
      const uint4 val = *reinterpret_cast<const uint4*>(&sO(r, chunk * kChunkElems));
      *reinterpret_cast<uint4*>(gout + (info.slot * plane + info.qh) * kHeadDim +
                                chunk * kChunkElems) = val;
    }
  }
};

}  // namespace msa::cuda::prefill_sm90
