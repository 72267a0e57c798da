// The one epilogue of both sm_90a prefill kernels: O normalised by the row sum (and a sink, for
// final rows), staged through the tile's consumed Q buffer and stored with TMA (one box per
// query's heads and column half, issued by the thread owning the box's first row) or, in the
// instance for small boxes (Traits::kRowCopies), with 16-byte thread stores, and the
// natural-log LSE of every row. The kernels differ only in where a tile row goes, which they say
// with a RowTarget functor:
//   target(r) -> RowDest {valid, h, o_row, lse_index} for tile row r.
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cute/arch/copy_sm90.hpp>
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
  int o_row;               // row of the output map: o_partial seen as [slots * total_q] (slot *
                           // total_q + query), or out's query
  std::int64_t lse_index;  // element of lse_partial (or of lse: query * h_q + h)
};

// Normalises this thread's O accumulator rows by `inv` (per row half) and writes them as
// 16-bit values into the swizzled [kTileM, d] tile `so`, eight columns by eight rows at a time
// with stmatrix: one STSM.x4 per two 8-column chunks, where element-by-element stores took one
// STS and its own swizzled address each (docs/performance.md, step 29).
//
// The accumulator (WGMMA's C layout, per warpgroup of 64 rows): thread t's value i sits at row
// 16 * warp + (t % 32) / 4 + 8 * ((i / 2) % 2), column 8 * (i / 4) + 2 * (t % 4) + i % 2. The
// 8 x 8 matrix of rows 16 * warp + 8 * h .. + 7 and column chunk j is then spread exactly as
// stmatrix reads a fragment (lane l: row l / 4, columns 2 * (l % 4) and + 1), in the register
// packing values 4 j + 2 h and 4 j + 2 h + 1. One STSM.x4 stores chunks j, j + 1 at both row
// halves; lane l names the row of its matrix l / 8: rows 8 * ((l / 8) % 2) + l % 8 of chunk
// j + l / 16. In the 128-byte swizzle (1024-byte aligned tile, 64 columns per half) the 16-byte
// chunk c of row r sits at half * kTileM * 128 + r * 128 + ((c % 8) ^ (r % 8)) * 16; with j even,
// ((j % 8) + l / 16) ^ (l % 8) = (j % 8) ^ (l / 16 ^ l % 8), so a lane's address for every j is
// one base XOR (j % 8) * 16, plus the half's offset.
template <class Traits, class AccO>
__device__ __forceinline__ void stage_normalised_o(const AccO& acc_o, const float (&inv)[2],
                                                   typename Traits::Element* so, int ct) {
  using Element = typename Traits::Element;
  constexpr int kChunks = Traits::kHeadDim / 8;  // 8-column chunks of a row
  static_assert(decltype(cute::size(acc_o))::value == 4 * kChunks, "64 x d accumulator: 4 values per chunk and thread");
  static_assert(Traits::kBoxCols == 64, "16-bit rows of 64 columns per 128-byte swizzle row");
  // The formula above, checked against the tile's own layout at row 9, column 16 (chunk 2):
  // 9 * 128 + ((2 ^ 1) << 4).
  static_assert(typename Traits::SmemLayoutQ{}.layout_a()(2 * typename Traits::SmemLayoutQ{}.layout_b()(9, 16)) ==
                    9 * 128 + ((2 ^ 1) << 4),
                "the Q tile is not the 128-byte swizzle stmatrix addresses assume");
  const int lane = ct % 32;
  const int row = (ct / 32) * 16 + 8 * ((lane >> 3) & 1) + (lane & 7);  // ct / 32: warpgroup * 4 + warp
  const int base = row * 128 + (((lane >> 4) ^ (lane & 7)) << 4);       // bits 4-6: the lane's chunk term
  auto* so_bytes = reinterpret_cast<std::uint8_t*>(so);
  const auto pack = [&](int i, int h) {
    const Element lo = static_cast<Element>(acc_o(i) * inv[h]);
    const Element hi = static_cast<Element>(acc_o(i + 1) * inv[h]);
    return std::uint32_t(lo.raw()) | (std::uint32_t(hi.raw()) << 16);
  };
#pragma unroll
  for (int j = 0; j < kChunks; j += 2) {
    const int byte = (j / 8) * Traits::kTileM * 128 + (base ^ ((j % 8) << 4));
    cute::SM90_U32x4_STSM_N::copy(pack(4 * j, 0), pack(4 * j + 2, 1), pack(4 * j + 4, 0), pack(4 * j + 6, 1),
                                  *reinterpret_cast<cute::uint128_t*>(so_bytes + byte));
  }
}

// Where a tile's O rows go: TMA boxes through `map` (one per query's heads and column half), or
// (Traits::kRowCopies) 16-byte stores by the warpgroup's threads into the same tensor seen as
// element (o_row, h, column) at base + o_row * stride_row + h * stride_head + column.
struct OutRows {
  const CUtensorMap* map;
  void* base;  // thread stores only
  std::int64_t stride_row;
  std::int64_t stride_head;
};

// The staged rows r0 .. r0 + 63 of `so` to `to` by the warpgroup's 128 threads: kChunks lanes a
// row (16 bytes each: coalesced 256-byte rows at d = 128), 128 / kChunks rows at a time, the
// shared loads of a thread all issued before its stores. Rows target() calls invalid are skipped.
template <class Traits, class RowTarget>
__device__ __forceinline__ void copy_staged_rows(const OutRows& to, const typename Traits::Element* so, int r0, int wt,
                                                 const RowTarget& target) {
  using Element = typename Traits::Element;
  constexpr int kChunkElements = 16 / static_cast<int>(sizeof(Element));
  constexpr int kChunks = Traits::kHeadDim / kChunkElements;
  static_assert(128 % kChunks == 0 && 64 % (128 / kChunks) == 0, "whole rows per pass");
  constexpr int kRowsPerPass = 128 / kChunks;
  constexpr int kPasses = 64 / kRowsPerPass;
  const int j = wt % kChunks;
  const auto* so_bytes = reinterpret_cast<const std::uint8_t*>(so);
  cute::uint128_t v[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int r = r0 + i * kRowsPerPass + wt / kChunks;
    v[i] = *reinterpret_cast<const cute::uint128_t*>(so_bytes + q_chunk_byte<Traits>(r, j));
  }
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int r = r0 + i * kRowsPerPass + wt / kChunks;
    const RowDest dest = target(r);
    if (!dest.valid) continue;
    auto* dst = static_cast<Element*>(to.base) + std::int64_t{dest.o_row} * to.stride_row +
                std::int64_t{dest.h} * to.stride_head + j * kChunkElements;
    *reinterpret_cast<cute::uint128_t*>(dst) = v[i];
  }
}

// One row half's normaliser and natural-log LSE from its max m (log2 units, -inf: no visible
// key) and quad-summed l. With kSinks a sink of log2-domain logit `sink` (-inf: none) joins the
// sum at the common maximum (spec §6: a key of value zero); without one the result is the
// plain form's, bit for bit.
struct RowNorm {
  float inv;  // factor on O
  float lse;  // natural log
};
template <bool kSinks>
__device__ __forceinline__ RowNorm row_norm(float m, float l, float sink, float o_scale) {
  if (kSinks && sink != -INFINITY) {
    const float top = fmaxf(m, sink);
    const float wm = fast_exp2(m - top);  // 0 for m = -inf
    const float lt = l * wm + fast_exp2(sink - top);
    return {o_scale * wm / lt, (top + __log2f(lt)) * kLn2};  // lt >= 1: the larger term is 1
  }
  return {l > 0.f ? o_scale / l : 0.f, l > 0.f ? (m + __log2f(l)) * kLn2 : -INFINITY};
}

// Stores the staged box of tile row r (its query's q_box_rows heads from r on, both column
// halves of `so`) to `dest` with TMA; with kWaitRead it waits until the store has read `so`.
template <class Traits, bool kWaitRead>
__device__ __forceinline__ void store_staged_box(const CUtensorMap& o_map, typename Traits::Element* so, int r,
                                                 const RowDest& dest) {
#pragma unroll
  for (int c = 0; c < Traits::kColHalves; ++c)
    cute::SM90_TMA_STORE_3D::copy(&o_map, so + Traits::q_box_offset(r, c), c * Traits::kBoxCols, dest.h, dest.o_row);
  cute::tma_store_arrive();
  if constexpr (kWaitRead) cute::tma_store_wait<0>();  // shared memory read: the buffer may be refilled
}

// The epilogue of one tile for this consumer warpgroup's 64 rows, into `to` (o_partial, or
// out for final rows) and `lse` (lse_partial, or the caller's lse: may then be null).
// m_scaled: the row halves' max * scale_log2; row_sum: this thread's part of their sums (the
// quad adds them); sink: the row halves' sink logits * log2(e), -inf for none (kSinks only);
// o_scale: a factor on O (FP8 V's descale, else 1) that the LSE does not see. With kWaitRead the
// thread issuing a box waits for the store to have read shared memory, so the warpgroup may
// release `so` to the next Q gather right after; without it the caller calls stores_read()
// before it releases `so`, and works meanwhile. Thread stores have read `so` when they return.
template <class Traits, bool kWaitRead = true, bool kSinks = false, class AccO, class RowTarget>
__device__ __forceinline__ void store_tile(const PrefillTma& tma, const OutRows& to, const AccO& acc_o,
                                           const float (&m_scaled)[2], const float (&row_sum)[2],
                                           const float (&sink)[2], typename Traits::Element* so, float* lse, int ct,
                                           const RowTarget& target, float o_scale = 1.f) {
  using namespace cute;
  typename Traits::MmaPV mma;
  auto thr = mma.get_slice(ct);
  Tensor tOcO = thr.partition_C(make_identity_tensor(Shape<Int<Traits::kTileM>, Int<Traits::kHeadDim>>{}));

  RowNorm norm[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) norm[half] = row_norm<kSinks>(m_scaled[half], quad_sum(row_sum[half]), sink[half], o_scale);
  const float inv[2] = {norm[0].inv, norm[1].inv};
  stage_normalised_o<Traits>(acc_o, inv, so, ct);
  // LSE: the quad's first lane owns its two rows; ln(sum 2^(s*scale_log2 - m)) = (m + log2 l) ln 2.
  if (lse != nullptr && ct % 4 == 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const RowDest dest = target(get<0>(tOcO(2 * half)));
      if (dest.valid) lse[dest.lse_index] = norm[half].lse;
    }
  }
  // The warpgroup's staged rows are complete once its 128 threads pass the named barrier.
  const int wg = ct / 128;
  if constexpr (Traits::kRowCopies) {
    named_barrier_sync(kEpilogue0 + wg, 128);
    copy_staged_rows<Traits>(to, so, wg * 64, ct % 128, target);
    return;
  }
  // For TMA stores the proxy fence first makes the rows' st.shared visible to the TMA unit.
  cutlass::arch::fence_view_async_shared();
  named_barrier_sync(kEpilogue0 + wg, 128);
  const int r = wg * 64 + ct % 128;
  if (ct % 128 < 64 && r % tma.q_box_rows == 0) {
    const RowDest dest = target(r);
    if (dest.valid) store_staged_box<Traits, kWaitRead>(*to.map, so, r, dest);
  }
}

// Every TMA store this thread issued has read its shared memory (a no-op for a thread that
// issued none): after store_tile<Traits, false>, before its buffer is released.
__device__ __forceinline__ void stores_read() { cute::tma_store_wait<0>(); }

// Every TMA store this thread issued is complete (its writes done): the end of a consumer role.
__device__ __forceinline__ void stores_complete() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

}  // namespace msa::cuda::prefill_sm90
