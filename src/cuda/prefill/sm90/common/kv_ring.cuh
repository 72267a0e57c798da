// The K/V ring of both sm_90a prefill kernels: one 128-token block of one KV head loaded with
// TMA into a ring of Traits::kRingStages stages (one box per page and column half; 2 stages of
// 16-bit K/V, 5 or 6 of FP8 codes), the V rows past k_len zeroed, and
// the valid-page mask of a block. The loader warp of each kernel calls KvLoader::load once per
// block it streams (the tile-union prefill's: load_at, its page-table entries read a chunk of
// blocks ahead); the consumers release a stage through k_empty / v_empty.
//
// FP8 E4M3 K/V (Traits::kWarpMma, the decode's FP8 instance): the stages hold the codes as
// stored (16 KB a block, so Traits::kRingStages of them), published on k_full / v_full as they
// land; the consumer warps widen them in registers (tile_union/warp_mma.cuh) and read V rows
// past k_len as zeros themselves, and each of the eight releases a stage once. One of its
// kernels (Traits::kQInRing, where the plan routes it) also brings each tile's Q through the
// ring, as a stage of its own before the tile's blocks (tile_union/kernel.cuh's loader).
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

// Stage and parity of the use-th fill of a ring of `stages`.
__device__ __forceinline__ int stage_of(std::uint32_t use, int stages) { return static_cast<int>(use % stages); }
__device__ __forceinline__ std::uint32_t parity_of(std::uint32_t use, int stages) { return (use / stages) & 1u; }

// The ring's shared memory and barriers; each kernel's SharedStorage holds one.
//   k_full[s], v_full[s]: TMA bytes landed
//   k_empty[s], v_empty[s]: 256 consumer arrivals (kWarpMma: 8, one per consumer warp)
//   v_tail: the loader's own barrier for a V block it must zero-fill past k_len
template <class Traits>
struct KvRing {
  using Element = typename Traits::Element;
  static constexpr int kRing = Traits::kRingStages;
  alignas(1024) Element k[kRing][Traits::kStageElements];  // [token, d] swizzled (kWarpMma: FP8 codes)
  alignas(1024) Element v[kRing][Traits::kStageElements];  // [token, d] swizzled (kWarpMma: FP8 codes)
  alignas(8) std::uint64_t k_full[kRing], k_empty[kRing];
  std::uint64_t v_full[kRing], v_empty[kRing];
  std::uint64_t v_tail;

  // One thread, before the CTA barrier.
  __device__ void init() {
    constexpr int kReleases = Traits::kWarpMma ? kConsumerThreads / 32 : kConsumerThreads;
    for (int i = 0; i < kRing; ++i) {
      Barrier64::init(&k_full[i], 1);
      Barrier64::init(&v_full[i], 1);
      Barrier64::init(&k_empty[i], kReleases);
      Barrier64::init(&v_empty[i], kReleases);
    }
    Barrier64::init(&v_tail, 1);
  }
};

// Tokens of a block are visible only on valid pages (docs/numerics.md): bit c of the result
// says that tokens [16c, 16c + 16) lie on a page-table entry inside the table and in
// [0, num_pages). Tokens past k_len count as valid (the key limits hide them). Flat K/V: all.
constexpr std::uint32_t kAllChunks = (1u << (kBlockSize / 16)) - 1u;

// The page of a paged K/V box (logical token `logical` of request b, at a page start) and
// whether its tokens are valid: before k_len, the page-table entry, valid when inside the table
// and in [0, num_pages); past k_len (valid: the key limits hide them) or past the table
// (invalid), num_pages, which TMA addresses out of bounds and fills with zeros.
struct BoxPage {
  int page;
  bool valid;
};
__device__ __forceinline__ BoxPage box_page(const AttentionParams& p, int b, int logical, int k_len) {
  const int oob = static_cast<int>(min(p.num_pages, std::int64_t(INT32_MAX)));
  if (logical >= k_len) return {oob, true};
  const int col = logical / p.page_size;  // 32-bit: logical < k_len
  if (col >= p.page_table_cols) return {oob, false};
  const int page = p.page_table[std::int64_t(b) * p.stride_page_table + col];
  return {page, page >= 0 && page < p.num_pages};
}

__device__ __forceinline__ std::uint32_t block_chunks(const AttentionParams& p, int b, int block_start, int k_len) {
  if (p.page_table == nullptr) return kAllChunks;
  std::uint32_t mask = 0;
  const int per_page = p.page_size / 16;
  for (int t0 = 0; t0 < kBlockSize; t0 += p.page_size)
    if (box_page(p, b, block_start + t0, k_len).valid) mask |= ((1u << per_page) - 1u) << (t0 / 16);
  return mask;
}

// The L2 eviction priority of a block's K / V boxes. A block that another CTA may read again
// in the same call (the prefill's blocks, seen by every later query tile; a decode block of a
// request whose queries span two tiles) stays with EVICT_LAST, but for the block-major calls
// whose K/V and partials each fit the L2 (block_major_kv_once: EVICT_FIRST keeps the partials
// there for the combine, docs/performance.md step 78). A decode block that only its
// tile reads goes with EVICT_FIRST: nothing reads it again in the call, and EVICT_LAST there
// made the steps of 8 requests 4-8% slower and smaller ones up to 4% (docs/performance.md
// step 56; on steps whose tiles share a request's blocks, EVICT_FIRST cost up to 10%).
struct KvL2Hint {
  static constexpr auto kShared = static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_LAST);
  static constexpr auto kOnce = static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST);
};

// Where box `box` of a block lies in its tensor map (tokens [block_start, block_start + 128) of
// request b; box j covers tokens [j box_rows, (j + 1) box_rows) of it): paged, the page
// (box_page's, so num_pages past k_len or the table); flat, the block's first row. A global
// read.
__device__ __forceinline__ int box_coord(const AttentionParams& p, int box_rows, int b, int block_start, int k_len,
                                         int box) {
  if (p.page_table != nullptr) return box_page(p, b, block_start + box * box_rows, k_len).page;
  return p.cu_seqlens_k[b] + block_start;
}

// Issues the TMA boxes of one K or V block into the block at `dst` (at
// Traits::kv_load_offset), completing on `bar`: lane j issues box j (paged: page j of the
// block; flat: lane 0 the whole block) at coord_of(j), its box_coord. Pages wholly past k_len,
// and ids outside [0, num_pages), are addressed out of bounds, which TMA fills with zeros
// without reading. The caller armed `bar` with kBlockBytes. `once`: no other tile reads the
// block (KvL2Hint).
template <class Traits, class CoordOf>
__device__ __forceinline__ void load_block(const AttentionParams& p, const CUtensorMap* map, int box_rows, int kv_head,
                                           const CoordOf& coord_of, void* dst, std::uint64_t* bar, int lane,
                                           bool once) {
  const int boxes = Traits::kBlockN / box_rows;
  if (lane >= boxes) return;
  const int t0 = lane * box_rows;
  const int coord = coord_of(lane);
  const bool paged = p.page_table != nullptr;
  const int token = paged ? 0 : coord;
  const int page = paged ? coord : 0;
  auto* bytes = reinterpret_cast<std::uint8_t*>(dst);
#pragma unroll
  for (int c = 0; c < Traits::kKvLoadBoxes; ++c)
    cute::SM90_TMA_LOAD_4D::copy(map, bar, once ? KvL2Hint::kOnce : KvL2Hint::kShared,
                                 bytes + Traits::kv_load_offset(t0, c), c * Traits::kKvLoadCols, token, kv_head, page);
}

// Asks L2 for the boxes load_block issues for one lane of a K or V block (its box_coord
// `coord`), as TMA prefetches: nothing lands in shared memory and nothing completes on a barrier.
template <class Traits>
__device__ __forceinline__ void prefetch_box(const AttentionParams& p, const CUtensorMap* map, int kv_head, int coord) {
  const bool paged = p.page_table != nullptr;
#pragma unroll
  for (int c = 0; c < Traits::kKvLoadBoxes; ++c)
    cute::SM90_TMA_LOAD_4D::PREFETCH::copy(map, c * Traits::kKvLoadCols, paged ? 0 : coord, kv_head, paged ? coord : 0);
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
  // kv_head; `once`: no other tile reads it, KvL2Hint) into stage use % kRingStages, after
  // waiting for the stage to be free, each of K and V reading its boxes' page-table entries
  // as it issues them (load_at: the coordinates given).
  __device__ __forceinline__ void load(int kv_head, int b, int block_start, int k_len, bool once = false) {
    load_with(kv_head, block_start, k_len, once,
              [&](int box) { return box_coord(p, tma.kv_box_rows, b, block_start, k_len, box); });
  }

  // As load, lane j holding box j's box_coord in `coord` (j < the block's boxes).
  __device__ __forceinline__ void load_at(int kv_head, int coord, int block_start, int k_len, bool once = false) {
    load_with(kv_head, block_start, k_len, once, [coord](int) { return coord; });
  }

  // Block `use`'s K alone, lane j holding box j's box_coord in `coord`; use then advances (its
  // V follows with load_v_at(use - 1, ...) or later). With load_v_at, the tile-union loader puts
  // block u's K ahead of block u - 1's V: K's stage frees when S completes, V's only once P V has.
  __device__ __forceinline__ void load_k_at(int kv_head, int coord, bool once = false) {
    const int lane = opaque_tid();
    issue_k(use, kv_head, once, lane, [coord](int) { return coord; });
    ++use;
  }
  // The V of the block at use u (< use, each block's once, in order), as load_at's.
  __device__ __forceinline__ void load_v_at(std::uint32_t u, int kv_head, int coord, int block_start, int k_len,
                                            bool once = false) {
    const int lane = opaque_tid();
    issue_v(u, kv_head, block_start, k_len, once, lane, [coord](int) { return coord; });
  }

  // A block that ends past k_len has its V rows there zeroed before v_full completes (stale
  // cache memory may hold NaN, and P = 0 times NaN is NaN): its V goes through the loader's
  // v_tail barrier first (kWarpMma: its consumers read rows past k_len as zeros instead). One
  // warp; coord_of(j): box j's box_coord.
  template <class CoordOf>
  __device__ __forceinline__ void load_with(int kv_head, int block_start, int k_len, bool once,
                                            const CoordOf& coord_of) {
    const int lane = opaque_tid();
    issue_k(use, kv_head, once, lane, coord_of);
    issue_v(use, kv_head, block_start, k_len, once, lane, coord_of);
    ++use;
  }

  // One block's K or V boxes into `dst`, completing on `bar` (armed with its bytes first).
  template <class CoordOf>
  __device__ __forceinline__ void issue(const CUtensorMap* map, void* dst, std::uint64_t* bar, int kv_head, bool once,
                                        int lane, const CoordOf& coord_of) {
    if (lane == 0) Barrier64::arrive_and_expect_tx(bar, Traits::kBlockBytes);
    __syncwarp();
    load_block<Traits>(p, map, tma.kv_box_rows, kv_head, coord_of, dst, bar, lane, once);
  }
  // The K of the block at use u into its stage, once that stage's K is free.
  template <class CoordOf>
  __device__ __forceinline__ void issue_k(std::uint32_t u, int kv_head, bool once, int lane, const CoordOf& coord_of) {
    constexpr int kRing = Traits::kRingStages;
    const int s = stage_of(u, kRing);
    Barrier64::wait(&ring.k_empty[s], parity_of(u, kRing) ^ 1u);
    issue(&tma.k, ring.k[s], &ring.k_full[s], kv_head, once, lane, coord_of);
  }
  // Its V, once that stage's V is free.
  template <class CoordOf>
  __device__ __forceinline__ void issue_v(std::uint32_t u, int kv_head, int block_start, int k_len, bool once, int lane,
                                          const CoordOf& coord_of) {
    constexpr int kRing = Traits::kRingStages;
    const int s = stage_of(u, kRing);
    Barrier64::wait(&ring.v_empty[s], parity_of(u, kRing) ^ 1u);
    // Tested on the unclamped distance: a whole block below k_len.
    if (Traits::kWarpMma || k_len - block_start >= Traits::kBlockN) {  // kWarpMma: codes, published as they land
      issue(&tma.v, ring.v[s], &ring.v_full[s], kv_head, once, lane, coord_of);
    } else {
      issue(&tma.v, ring.v[s], &ring.v_tail, kv_head, once, lane, coord_of);
      Barrier64::wait(&ring.v_tail, tail_phase);
      tail_phase ^= 1u;
      zero_tail<Traits>(ring.v[s], max(0, k_len - block_start), lane);
      __syncwarp();
      if (lane == 0) Barrier64::arrive(&ring.v_full[s]);
    }
  }
};

}  // namespace msa::cuda::prefill_sm90
