// The K/V ring of both sm_90a prefill kernels: one 128-token block of one KV head loaded with
// TMA into a 2-stage ring (one box per page and column half), the V rows past k_len zeroed, and
// the valid-page mask of a block. The loader warp of each kernel calls KvLoader::load once per
// block it streams; the consumers release a stage through k_empty / v_empty.
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>

#include "cuda/common/ptx.cuh"
#include "cuda/prefill/sm90/common/params.h"
#include "cuda/prefill/sm90/common/traits.h"

namespace msa::cuda::prefill_sm90 {

using Barrier64 = cutlass::arch::ClusterTransactionBarrier;

// The ring's shared memory and barriers; each kernel's SharedStorage holds one.
//   k_full[s], v_full[s]: TMA bytes landed   k_empty[s], v_empty[s]: 256 consumer arrivals
//   v_tail: the loader's own barrier for a V block it must zero-fill past k_len
template <class Traits>
struct KvRing {
  using Element = typename Traits::Element;
  alignas(1024) Element k[kStages][Traits::kKvElements];  // [token, d] swizzled
  alignas(1024) Element v[kStages][Traits::kKvElements];  // [token, d] swizzled
  alignas(8) std::uint64_t k_full[kStages], k_empty[kStages];
  std::uint64_t v_full[kStages], v_empty[kStages];
  std::uint64_t v_tail;

  // One thread, before the CTA barrier.
  __device__ void init() {
    for (int i = 0; i < kStages; ++i) {
      Barrier64::init(&k_full[i], 1);
      Barrier64::init(&v_full[i], 1);
      Barrier64::init(&k_empty[i], kConsumerThreads);
      Barrier64::init(&v_empty[i], kConsumerThreads);
    }
    Barrier64::init(&v_tail, 1);
  }
};

// Tokens of a block are visible only on valid pages (docs/numerics.md): bit c of the result
// says that tokens [16c, 16c + 16) lie on a page-table entry inside the table and in
// [0, num_pages). Tokens past k_len count as valid (the key limits hide them). Flat K/V: all.
constexpr std::uint32_t kAllChunks = (1u << (kBlockSize / 16)) - 1u;

__device__ __forceinline__ std::uint32_t block_chunks(const AttentionParams& p, int b, int block_start, int k_len) {
  if (p.page_table == nullptr) return kAllChunks;
  std::uint32_t mask = 0;
  const int per_page = p.page_size / 16;
  for (int t0 = 0; t0 < kBlockSize; t0 += p.page_size) {
    const int logical = block_start + t0;
    const int col = logical / p.page_size;
    bool valid = logical >= k_len;
    if (!valid && col < p.page_table_cols) {
      const int page = p.page_table[std::int64_t(b) * p.stride_page_table + col];
      valid = page >= 0 && page < p.num_pages;
    }
    if (valid) mask |= ((1u << per_page) - 1u) << (t0 / 16);
  }
  return mask;
}

// Issues the TMA boxes of one K or V block (tokens [block_start, block_start + 128) of request
// b) into `dst`, completing on `bar`: lane j issues page j (paged) or lane 0 the whole block
// (flat). Pages wholly past k_len, and ids outside [0, num_pages), are addressed out of bounds,
// which TMA fills with zeros without reading. The caller armed `bar` with kBlockBytes.
template <class Traits>
__device__ __forceinline__ void load_block(const AttentionParams& p, const CUtensorMap* map, int box_rows, int kv_head,
                                           int b, int block_start, int k_len, typename Traits::Element* dst,
                                           std::uint64_t* bar, int lane) {
  const int pages = Traits::kBlockN / box_rows;
  if (lane >= pages) return;
  const int t0 = lane * box_rows;
  int token, page;
  if (p.page_table != nullptr) {
    const int logical = block_start + t0;
    const int col = logical / box_rows;
    token = 0;
    page = logical < k_len && col < p.page_table_cols ? p.page_table[std::int64_t(b) * p.stride_page_table + col]
                                                      : static_cast<int>(min(p.num_pages, std::int64_t(INT32_MAX)));
  } else {
    token = p.cu_seqlens_k[b] + block_start;
    page = 0;
  }
#pragma unroll
  for (int c = 0; c < Traits::kColHalves; ++c)
    cute::SM90_TMA_LOAD_4D::copy(map, bar, static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_LAST),
                                 dst + Traits::kv_box_offset(t0, c), c * Traits::kBoxCols, token, kv_head, page);
}

// Zeroes token rows [tokens, 128) of a K-layout block (whole 128-byte rows, so the swizzle
// does not matter) and makes the writes visible to the async proxy. One warp.
template <class Traits>
__device__ __forceinline__ void zero_tail(typename Traits::Element* dst, int tokens, int lane) {
  using Element = typename Traits::Element;
  constexpr int kChunks = 128 / 16;  // 16-byte chunks per 128-byte row
  const int count = (Traits::kBlockN - tokens) * Traits::kColHalves * kChunks;
  for (int i = lane; i < count; i += 32) {
    const int row = tokens + i / (Traits::kColHalves * kChunks);
    const int c = (i / kChunks) % Traits::kColHalves;
    const int chunk = i % kChunks;
    *reinterpret_cast<uint4*>(dst + Traits::kv_box_offset(row, c) + chunk * (16 / sizeof(Element))) =
        make_uint4(0u, 0u, 0u, 0u);
  }
  cutlass::arch::fence_view_async_shared();
}

// The loader warp's side of the ring: the blocks it streams, in order, each into the next stage.
template <class Traits>
struct KvLoader {
  const AttentionParams& p;
  const PrefillTma& tma;
  KvRing<Traits>& ring;
  std::uint32_t use = 0;         // blocks loaded so far
  std::uint32_t tail_phase = 0;  // v_tail's parity

  // Loads one block's K and V (tokens [block_start, block_start + 128) of request b, KV head
  // kv_head) into stage use & 1, after waiting for the stage to be free. A block that ends past
  // k_len has its V rows there zeroed before v_full completes (stale cache memory may hold NaN,
  // and P = 0 times NaN is NaN): its V goes through the loader's v_tail barrier first. One warp.
  __device__ __forceinline__ void load(int kv_head, int b, int block_start, int k_len) {
    constexpr std::uint32_t kBytes = Traits::kBlockBytes;
    const int lane = opaque_tid();
    const int s = static_cast<int>(use & 1u);
    Barrier64::wait(&ring.k_empty[s], phase_of(use) ^ 1u);
    if (lane == 0) Barrier64::arrive_and_expect_tx(&ring.k_full[s], kBytes);
    __syncwarp();
    load_block<Traits>(p, &tma.k, tma.kv_box_rows, kv_head, b, block_start, k_len, ring.k[s], &ring.k_full[s], lane);
    Barrier64::wait(&ring.v_empty[s], phase_of(use) ^ 1u);
    // Tested on the unclamped distance: a whole block below k_len.
    if (k_len - block_start >= Traits::kBlockN) {
      if (lane == 0) Barrier64::arrive_and_expect_tx(&ring.v_full[s], kBytes);
      __syncwarp();
      load_block<Traits>(p, &tma.v, tma.kv_box_rows, kv_head, b, block_start, k_len, ring.v[s], &ring.v_full[s], lane);
    } else {
      if (lane == 0) Barrier64::arrive_and_expect_tx(&ring.v_tail, kBytes);
      __syncwarp();
      load_block<Traits>(p, &tma.v, tma.kv_box_rows, kv_head, b, block_start, k_len, ring.v[s], &ring.v_tail, lane);
      Barrier64::wait(&ring.v_tail, tail_phase);
      tail_phase ^= 1u;
      zero_tail<Traits>(ring.v[s], max(0, k_len - block_start), lane);
      __syncwarp();
      if (lane == 0) Barrier64::arrive(&ring.v_full[s]);
    }
    ++use;
  }
};

}  // namespace msa::cuda::prefill_sm90
