// The KV-block-major kernel's own mainloop pieces: reading a work item and preparing a step's
// Q tile (row facts from the plan's qsplit words; the rows by one TMA box per query, or by
// 16-byte thread copies where a box would be one row).
//
// A work item is one KV block of one KV head and up to q_per_item of the queries that chose
// it; its rows are the queries' G heads, packed query-major (row R = query R / G, head R % G)
// and cut into M tiles of 128 rows. A step is one M tile against the item's block.
#pragma once

#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>

#include "core/plan_encoding.h"
#include "cuda/prefill/sm90/block_major/config.h"
#include "cuda/prefill/sm90/block_major/params.h"
#include "cuda/prefill/sm90/common/traits.h"

namespace msa::cuda::prefill_sm90 {

// Everything about a work item that every role needs, read once from the plan.
struct ItemCoords {
  int kv_head;
  int b;               // request
  int block_start;     // block * 128: first token of the block
  int k_len;           // the request's k_len
  int tokens;          // tokens of the block below k_len, 0..128 (the rest is zero-filled)
  int rows;            // packed (query, head) rows = q_count * group
  int q_row0;          // cu_seqlens_q[b]: global row of request-local query 0
  int pos0;            // k_len - q_len: position of request-local query 0
  std::int64_t edge0;  // kv_head * edges_per_head + q_begin: first qsplit entry
};

__device__ __forceinline__ ItemCoords load_item(const BlockMajorParams& p, const WorkItem& w) {
  ItemCoords it;
  it.kv_head = w.kv_head;
  it.b = w.b;
  it.block_start = w.block * kBlockSize;
  it.k_len = p.attn.k_len[it.b];
  it.tokens = max(0, min(kBlockSize, it.k_len - it.block_start));
  it.rows = w.q_count * p.attn.group;
  it.q_row0 = p.attn.cu_seqlens_q[it.b];
  it.pos0 = it.k_len - (p.attn.cu_seqlens_q[it.b + 1] - it.q_row0);
  it.edge0 = std::int64_t(it.kv_head) * p.edges_per_head + w.q_begin;
  return it;
}

// M tiles (steps) of an item of `rows` packed rows.
template <class Traits>
__device__ __forceinline__ int item_steps(int rows) {
  return max(1, (rows + Traits::kTileM - 1) / Traits::kTileM);
}

// The qsplit word of packed row `packed` of the item (0 for a padding row): loaded a step
// ahead by the builders, so that its latency hides behind the wait for a free Q buffer.
__device__ __forceinline__ std::int32_t row_qsplit(const BlockMajorParams& p, const ItemCoords& it, int packed) {
  return packed < it.rows ? p.qsplit[it.edge0 + packed / p.attn.group] : 0;
}

// Writes the facts of packed row `packed` (tile row r) into `rows` and either, with thread
// copies (Traits::kRowCopies: gather_q_rows), the row's Q address into `src` (nullptr for
// no data), or, for the first row of a query's box, that box's TMA loads (both column halves)
// into `sq`, completing on `bar`. Padding rows get qg = -1 and no data (their results are never
// stored).
template <class Traits>
__device__ __forceinline__ void prepare_row(const AttentionParams& p, const PrefillTma& tma, const ItemCoords& it,
                                            int packed, int r, std::int32_t word, typename Traits::Element* sq,
                                            RowInfo* rows, const void** src, std::uint64_t* bar) {
  if (packed >= it.rows) {
    rows[r] = RowInfo{-1, 0, 0, 0};
    if constexpr (Traits::kRowCopies) src[r] = nullptr;
    return;
  }
  const int qi = packed / p.group;
  const int h = it.kv_head * p.group + (packed - qi * p.group);
  const int q_local = qsplit::query(word);
  const int qg = it.q_row0 + q_local;
  // Visible: t < tokens (below k_len) and block_start + t <= pos (causal).
  const int causal = it.pos0 + q_local - it.block_start + 1;
  // A row outside [0, total_q) (cu_seqlens_q changed on the device since plan()) is padding:
  // its box still loads (TMA zero-fills it, keeping the byte count) but nothing is stored.
  const bool in_range = qg >= 0 && qg < p.total_q;
  rows[r] = RowInfo{in_range ? qg : -1, h, qsplit::slot(word), max(0, min(it.tokens, causal))};
  if constexpr (Traits::kRowCopies) {
    src[r] = in_range ? static_cast<const typename Traits::Element*>(p.q) + std::int64_t{qg} * p.stride_q_token +
                            std::int64_t{h} * p.stride_q_head
                      : nullptr;
  } else if (r % tma.q_box_rows == 0) {
#pragma unroll
    for (int c = 0; c < Traits::kColHalves; ++c)
      cute::SM90_TMA_LOAD_3D::copy(&tma.q, bar, static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL),
                                   sq + Traits::q_box_offset(r, c), c * Traits::kBoxCols, h, qg);
  }
}

// The step's Q rows by thread copies (Traits::kRowCopies): 16-byte cp.async copies into `sq`,
// swizzled as TMA would write them, from the row addresses in `src` (all written: the caller
// syncs the builders first); a row without one (nullptr: padding, or a query outside
// [0, total_q)) gets zeros, as TMA's out-of-bounds fill would give it. kChunks lanes copy a
// row, the 96 builders 96 / kChunks rows a pass; the passes are unrolled and their addresses
// read kBatch passes ahead of the copies, so that the loop is a few integer operations a copy.
// The caller signals their completion on q_full; the consumers fence them to WGMMA's proxy.
template <class Traits>
__device__ __forceinline__ void gather_q_rows(const AttentionParams& p, const void* const* src,
                                              typename Traits::Element* sq, int bt) {
  using Element = typename Traits::Element;
  constexpr int kChunkElements = 16 / static_cast<int>(sizeof(Element));
  constexpr int kChunks = Traits::kHeadDim / kChunkElements;  // 16-byte chunks of a row
  static_assert(kBuilderThreads % kChunks == 0, "whole rows per builder pass");
  constexpr int kRowsPerPass = kBuilderThreads / kChunks;
  constexpr int kPasses = (Traits::kTileM + kRowsPerPass - 1) / kRowsPerPass;
  // Addresses read ahead of the copies: 2 passes (4 spills registers at d = 128).
  constexpr int kBatch = 2;
  const unsigned j = static_cast<unsigned>(bt % kChunks);
  const unsigned r0 = static_cast<unsigned>(bt / kChunks);
  // A row without data copies 0 bytes from a valid address (the tensor's first byte).
  const auto* fallback = static_cast<const std::uint8_t*>(p.q);
  const auto sq_base = static_cast<std::uint32_t>(__cvta_generic_to_shared(sq));
#pragma unroll
  for (int i0 = 0; i0 < kPasses; i0 += kBatch) {
    const std::uint8_t* from[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const unsigned r = r0 + unsigned(i0 + k) * kRowsPerPass;
      from[k] = i0 + k < kPasses && r < Traits::kTileM ? static_cast<const std::uint8_t*>(src[r]) : nullptr;
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const unsigned r = r0 + unsigned(i0 + k) * kRowsPerPass;
      if (i0 + k >= kPasses || r >= Traits::kTileM) continue;
      const bool real = from[k] != nullptr;
      const std::uint8_t* g = real ? from[k] + j * 16u : fallback;
      // The buffer is 1024-byte aligned: the swizzle is a function of the address.
      const std::uint32_t dst = sq_base + q_chunk_byte<Traits>(r, j);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(g), "r"(real ? 16 : 0) : "memory");
    }
  }
}

}  // namespace msa::cuda::prefill_sm90
