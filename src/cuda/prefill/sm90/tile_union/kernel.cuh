// The sm_90a query-major tile-union sparse prefill kernel: a persistent loop over (KV head,
// query tile) pairs (TileListSchedule: all of them, or the list PrefillPath::kAuto routed
// here, heaviest first), each run whole or as `splits` tiles over parts of its union (the
// decode's split-KV), warp specialised.
//
// Producer warpgroup (40 registers):
//   - builders (warps 1-3) build each tile's union list and gather its Q with TMA into the
//     tile's list / Q buffer (double buffered: tile i + 1 is built while tile i computes);
//   - the loader (warp 0) streams every union block's K and V into the ring (kv_ring.cuh);
//     while the builders build its first tile's list it asks L2 for the block(s) that tile's
//     split likely starts with (p.prefetch_blocks: the decode and the split small calls).
// Consumer warpgroups 1 and 2 (232 registers), 64 rows each: per union block u they issue
// S(u) = Q K(u)^T, then O += P(u-1) V(u-1), and mask and fold S(u) into the online softmax
// while that P V still runs (the prefill's warps without the block's row maximum once their
// rows have references: softmax.cuh's settled warps); with Traits::kSkipBlocks (the decode) a
// warpgroup skips the blocks that no query of its rows chose. They issue their WGMMAs
// independently (taking turns was 2-3% slower at tile-shared S = 8k and 32k:
// docs/performance.md, steps 62 and 63). The decode's FP8 instance (Traits::kWarpMma) has eight
// consumer warps on mma.sync instead (warp_mma.cuh).
//
// Synchronisation (mbarriers, phase = use count / buffers & 1): the ring's (kv_ring.cuh), and
//   list_full[2] (96 builder arrivals)   list_empty[2] (256 consumer + 32 loader arrivals)
//   q_full[kQBuffers] (TMA bytes)        q_empty[kQBuffers] (256, after the O stores read it)
// (Traits::kQInRing: no Q buffer; each tile's Q is a ring stage the loader fills first.)
#pragma once

#include <cstdint>
#include <type_traits>

#include <cutlass/arch/barrier.h>
#include <cute/tensor.hpp>

#include "cuda/common/ptx.cuh"
#include "cuda/common/scheduler.cuh"
#include "cuda/prefill/sm90/common/epilogue.cuh"
#include "cuda/prefill/sm90/common/kernel.cuh"
#include "cuda/prefill/sm90/common/kv_ring.cuh"
#include "cuda/prefill/sm90/common/softmax.cuh"
#include "cuda/prefill/sm90/common/wgmma.cuh"
#include "cuda/prefill/sm90/tile_union/builder.cuh"
#include "cuda/prefill/sm90/tile_union/config.h"
#include "cuda/prefill/sm90/tile_union/params.h"
#include "cuda/prefill/sm90/tile_union/stamps.cuh"
#include "cuda/prefill/sm90/tile_union/warp_mma.cuh"

namespace msa::cuda::prefill_sm90 {

// The tiles a CTA runs: the narrow instances' every tile or the routed list, in tile_of_rank's
// order; the wide instance's (plan-free: every tile) over groups of KV heads (group_heads).
template <class Traits>
__device__ __forceinline__ auto tile_schedule(const TileUnionParams& p) {
  if constexpr (Traits::kWideTiles)
    return GroupedTileSchedule{p.tiles, p.attn.h_kv, p.group_heads};
  else
    return TileListSchedule{p.tiles, p.attn.h_kv, p.tile_list, p.tile_count};
}

// Whether the consumer warpgroups gather each tile's Q themselves (the wide instance at group 1:
// gather_q_rows); the builders gather it elsewhere (load_q).
template <class Traits>
__device__ __forceinline__ bool consumers_gather_q(const PrefillTma& tma) {
  if constexpr (Traits::kWideTiles && !Traits::kQInRing)
    return tma.q_wide_by_consumers != 0;
  else
    return false;
}

template <class Traits>
__device__ __forceinline__ void builders(const TileUnionParams& p, const PrefillTma& tma,
                                         TileUnionStorage<Traits>& smem) {
  const auto sched = tile_schedule<Traits>(p);
  std::uint32_t iter = 0;
  for (const int pos : sched.mine()) {
    const int buf = static_cast<int>(iter & 1u);
    const Tile t = make_tile(p, sched.tile(pos));
    const int bt = opaque_tid() - 32;
    // Q first (it needs no list: its latency hides behind the union build), once the tile
    // kQBuffers back has stored its O from the buffer (Traits::kQInRing: the loader brings Q).
    // The plain FP8 kernel (one Q buffer, no ways) builds a CTA's later tiles' lists first,
    // while the tile before still computes, so that the loader streams on across the tile
    // boundary; their Q waits for that tile's O stores.
    constexpr bool kListEarly = Traits::kWarpMma && !Traits::kWays && !Traits::kQInRing;
    const int qb = stage_of(iter, kQBuffers<Traits>);
    const auto q = [&] {
      if constexpr (!Traits::kQInRing) {
        Barrier64::wait(&smem.q_empty[qb], parity_of(iter, kQBuffers<Traits>) ^ 1u);
        load_q<Traits>(p, tma, t, smem.q[qb], &smem.q_full[qb], bt);
      }
    };
    const bool q_first = !kListEarly || iter == 0;
    if (q_first && !consumers_gather_q<Traits>(tma)) q();
    Barrier64::wait(&smem.list_empty[buf], phase_of(iter) ^ 1u);
#ifdef MSA_CTA_STAMPS
    if (bt == 0) stamps::tile(p.stamps, iter, stamps::kBuildBegin, stamps::now());
    if constexpr (Traits::kWideTiles)
      if (bt == 0) smem.scratch.stamp_steps = iter == 0 ? 1 : 0;
#endif
    build_list(p, t, smem, smem.list[buf], bt, tma.kv_box_rows);
    Barrier64::arrive(&smem.list_full[buf]);
#ifdef MSA_CTA_STAMPS
    if (bt == 0) stamps::tile(p.stamps, iter, stamps::kBuildEnd, stamps::now());
#endif
    if constexpr (kListEarly)
      if (!q_first) q();
    ++iter;
  }
}

// Asks L2 for the blocks the CTA's first tile likely starts with, before its list exists (the
// loader is idle while the builders build it, and so is DRAM): split s's first union entries
// are about the raw entries from n s / splits on in the builders' order (the first-seen order:
// the same blocks where the tile's queries repeat few of them; elsewhere still blocks of the
// union, which some split loads), up to p.prefetch_blocks of them, a lane per box. Not where
// the list is sorted by key (a decode request over several tiles) or built by the wide
// builders. One block measured 2-6% faster on 18 of 100 decode steps and none slower
// (docs/performance.md step 71).
template <class Traits>
__device__ __forceinline__ void prefetch_first_blocks(const TileUnionParams& p, const PrefillTma& tma, const Tile& t) {
  if constexpr (Traits::kWideTiles) return;
  if (union_in_key_order(p)) return;
  const int lane = opaque_tid();
  const int topk = p.attn.topk;
  const int n = t.nq * topk;
  const int boxes = Traits::kBlockN / tma.kv_box_rows;
  const int k = lane / boxes;
  const int e = static_cast<int>(std::int64_t(n) * t.split / p.splits) + k;
  if (k >= p.prefetch_blocks || e >= n) return;
  const int i = Traits::kWarpMma ? e % t.nq : e / topk;
  const int slot = Traits::kWarpMma ? e / t.nq : e % topk;
  const std::int64_t q = t.q0 + i;
  const TileQuery tq = p.q_per_request > 0
                           ? locate_uniform_query(p.attn.k_len, p.q_per_request, t.q0, q, 1)
                           : locate_tile_query(p.attn.cu_seqlens_q, p.attn.k_len, p.batch, t.q0, q, 0, 1);
  const int id = p.topk[std::int64_t(t.kv_head) * p.stride_topk_head + q * p.stride_topk_token + slot];
  if (id < 0 || id >= tq.blocks) return;
  const int coord = box_coord(p.attn, tma.kv_box_rows, tq.b, id * kBlockSize, tq.k_len, lane - k * boxes);
  prefetch_box<Traits>(p.attn, &tma.k, t.kv_head, coord);
  prefetch_box<Traits>(p.attn, &tma.v, t.kv_head, coord);
}

// Every union block of every tile, in list order, once the builders published the list. The
// loader releases a list too: without its arrival the builders could rewrite the buffer (two
// tiles on, after consumers that finished an empty union) before the loader has read it.
// Traits::kQInRing: each tile's Q first, as a stage of its own (it needs no list).
template <class Traits>
__device__ __forceinline__ void loader(const TileUnionParams& p, const PrefillTma& tma,
                                       TileUnionStorage<Traits>& smem) {
  KvLoader<Traits> kv{p.attn, tma, smem.kv};
  const auto sched = tile_schedule<Traits>(p);
  std::uint32_t iter = 0;
  for (const int pos : sched.mine()) {
    const int buf = static_cast<int>(iter & 1u);
    const Tile t = make_tile(p, sched.tile(pos));
    const int kv_head = t.kv_head;
    if constexpr (Traits::kQInRing) {
      constexpr int kRing = Traits::kRingStages;
      const int s = stage_of(kv.use, kRing);
      const std::uint32_t free_parity = parity_of(kv.use, kRing) ^ 1u;
      const int lane = opaque_tid();
      Barrier64::wait(&smem.kv.k_empty[s], free_parity);
      Barrier64::wait(&smem.kv.v_empty[s], free_parity);
      if (lane == 0) {
        const auto half =
            static_cast<std::uint32_t>(t.nq * p.attn.group * Traits::kBoxCols * sizeof(typename Traits::Element));
        Barrier64::arrive_and_expect_tx(&smem.kv.k_full[s], half);
        Barrier64::arrive_and_expect_tx(&smem.kv.v_full[s], half);
      }
      __syncwarp();
      // Column half 0 into the stage's K, half 1 into its V, rows of kBoxCols elements.
      issue_q_boxes<Traits>(
          p, tma, t,
          [&](int r, int c) {
            return QBoxDst<typename Traits::Element>{
                (c == 0 ? smem.kv.k[s] : smem.kv.v[s]) + Traits::q_box_offset(r, 0),
                c == 0 ? &smem.kv.k_full[s] : &smem.kv.v_full[s]};
          },
          lane, 32);
      ++kv.use;
    }
    if (iter == 0 && p.prefetch_blocks > 0) prefetch_first_blocks<Traits>(p, tma, t);
    Barrier64::wait(&smem.list_full[buf], phase_of(iter));
    const auto& list = smem.list[buf];
    const int end = list.end;
#ifdef MSA_CTA_STAMPS
    if (opaque_tid() == 0) {
      stamps::tile(p.stamps, iter, stamps::kLoaderList, stamps::now());
      stamps::tile(p.stamps, iter, stamps::kEntries, static_cast<std::uint64_t>(end - list.begin));
    }
#endif
    if constexpr (Traits::kSkipBlocks) {
      // The decode's: block by block, each of K and V reading its page-table entries as it
      // issues. Read a chunk ahead as below, the FP8 steps of Q = 16 ran 4-7% faster, but
      // those of 1-4 requests 2-6% slower, Q = 1 at B = 32 4-6% and BF16 Q = 8 3%
      // (docs/performance.md step 57).
      for (int u = list.begin; u < end; ++u) {
        const UnionEntry e = union_entry(list, u);
        kv.load(kv_head, e.b, e.block_start, e.k_len, read_once(list, u));
      }
    } else {
      // The prefill's long lists: the blocks' box coordinates (page-table entries) a chunk of
      // entries at a time, a read a lane, the next chunk's in flight while this one's loads
      // issue. Block by block, each load waits for two dependent global reads (traced in the
      // decode's FP8 kernel: a block about every 1.06 us, its ring not full; step 57); read so,
      // random S = 8k on this kernel runs 3% faster with pages of 128, 8% with pages of 16.
      const int lane = opaque_tid();
      const int boxes = Traits::kBlockN / tma.kv_box_rows;  // 1, 2, 4 or 8
      const int chunk = 32 / boxes;                         // entries a chunk
      const auto coords_of = [&](int u0) {
        return chunk_box_coord(p.attn, list, end, u0, lane, tma.kv_box_rows, boxes);
      };
      int coords;
      if constexpr (Traits::kWideTiles)
        coords = list.first_coords[lane];  // the builders read them (build_wide_list, step 8)
      else
        coords = coords_of(list.begin);
      // Block u's K goes ahead of block u - 1's V (KvLoader::load_k_at): tile-shared 8k ran 1%
      // faster, random 32k on this kernel 0.5% (docs/performance.md step 60). `pending`: the
      // entry whose V is next.
      int pending = -1, pending_coord = 0;
      for (int u0 = list.begin; u0 < end; u0 += chunk) {
        const int next = coords_of(u0 + chunk);
        const int n = min(chunk, end - u0);
        for (int j = 0; j < n; ++j) {
          const int coord = __shfl_sync(0xffffffffu, coords, j * boxes + lane % boxes);
          kv.load_k_at(kv_head, coord);
          if (pending >= 0) {
            const UnionEntry e = union_entry(list, pending);
            kv.load_v_at(kv.use - 2, kv_head, pending_coord, e.block_start, e.k_len);
          }
          pending = u0 + j;
          pending_coord = coord;
        }
        coords = next;
      }
      if (pending >= 0) {
        const UnionEntry e = union_entry(list, pending);
        kv.load_v_at(kv.use - 1, kv_head, pending_coord, e.block_start, e.k_len);
      }
    }
    Barrier64::arrive(&smem.list_empty[buf]);  // every lane read the list
    ++iter;
  }
}

// The wide instance's Q where consumers_gather_q: warpgroup wg's 64 rows of tile t, a box a
// column half (rows past the tile's are padding: loaded, never stored; past total_q, zeros),
// into Q buffer `sq`, completing on `bar`, which warpgroup 0 arms for the whole tile. Issued
// by the warpgroup itself once its rows of the buffer are free: from a builder, Q went one-row
// boxes at a time (G = 1: 256 a tile), which held the builders (docs/performance.md step 89).
template <class Traits>
__device__ __forceinline__ void gather_q_rows(const TileUnionParams& p, const PrefillTma& tma, const Tile& t,
                                              typename Traits::Element* sq, std::uint64_t* bar, int ct) {
  constexpr auto kRowsBytes = static_cast<std::uint32_t>(64 * Traits::kHeadDim * sizeof(typename Traits::Element));
  const int group = p.attn.group;
  const int wg = ct / 128, wt = ct % 128;
  const int rows = t.nq * group;  // 1..128
  if (wg == 0 && wt == 0) Barrier64::arrive_and_expect_tx(bar, rows > 64 ? 2 * kRowsBytes : kRowsBytes);
  if (wg * 64 < rows && wt < Traits::kColHalves)
    cute::SM90_TMA_LOAD_3D::copy(&tma.q_wide, bar, static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST),
                                 sq + Traits::q_box_offset(wg * 64, wt), wt * Traits::kBoxCols, t.kv_head * group,
                                 t.q0 + wg * 64 / group);
}

// S of this warp's 16 tile rows (row0 + 0..15) against union entry e, again, on mma.sync, into
// `s`: this thread's 64 values in the m64n128 accumulator's order (value 4 j + 2 h + c is row
// row0 + lane / 4 + 8 h, key 8 j + 2 (lane % 4) + c). Q from the tile's Q buffer (ldmatrix at
// q_chunk_byte), K from global memory: the block's ring stage was released before the softmax
// and may hold a later block. Keys past k_len and on invalid pages read as 0 (the caller masks
// them). Only for softmax_settle's overflowed P, which needs a score 128 above its
// row's reference; a function call here would make ptxas serialize the WGMMAs, so it is inline.
template <class Traits>
__device__ __forceinline__ void recompute_s_rows(const AttentionParams& p, const typename Traits::Element* sq, int row0,
                                                 int kv_head, const UnionEntry& e, int lane, float (&s)[64]) {
  using E = typename Traits::Element;
  static_assert(!Traits::kFp8Kv && Traits::kBlockN == 128 && Traits::kHeadDim % 16 == 0);
  static_assert(std::is_same_v<E, cute::bfloat16_t> || std::is_same_v<E, cute::half_t>);
  const auto q_base = static_cast<std::uint32_t>(__cvta_generic_to_shared(sq));
  const int a_row = row0 + (lane & 7) + 8 * ((lane >> 3) & 1);  // ldmatrix.x4: rows 0-7, 8-15, 0-7, 8-15
  const E* k = static_cast<const E*>(p.k);
#pragma unroll 1
  for (int j = 0; j < Traits::kBlockN / 8; ++j) {
    const int n = 8 * j + (lane >> 2);  // this lane's key of n-tile j
    const E* krow = nullptr;
    if (n < e.tokens) {
      const int logical = e.block_start + n;
      if (p.page_table != nullptr) {
        const BoxPage bp = box_page(p, e.b, logical, e.k_len);
        if (bp.valid)
          krow = k + std::int64_t(bp.page) * p.stride_kv_page + std::int64_t(kv_head) * p.stride_kv_head +
                 std::int64_t(logical % p.page_size) * p.stride_kv_token;
      } else {
        const std::int64_t r = std::int64_t(p.cu_seqlens_k[e.b]) + logical;
        if (r < p.kv_rows) krow = k + r * p.stride_kv_token + std::int64_t(kv_head) * p.stride_kv_head;
      }
    }
    float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
    for (int ks = 0; ks < Traits::kHeadDim / 16; ++ks) {
      std::uint32_t a[4];
      const std::uint32_t addr = q_base + q_chunk_byte<Traits>(a_row, 2 * ks + (lane >> 4));
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                   : "r"(addr));
      std::uint32_t b[2] = {0u, 0u};
      if (krow != nullptr) {
        const E* kd = krow + 16 * ks + 2 * (lane & 3);
        b[0] = *reinterpret_cast<const std::uint32_t*>(kd);
        b[1] = *reinterpret_cast<const std::uint32_t*>(kd + 8);
      }
      if constexpr (std::is_same_v<E, cute::bfloat16_t>)
        warp_mma::mma_bf16(c, a, b[0], b[1]);
      else
        warp_mma::mma_f16(c, a, b[0], b[1]);
    }
#pragma unroll
    for (int v = 0; v < 4; ++v) s[4 * j + v] = c[v];
  }
}

// The two consumer warpgroups on WGMMA (every instance but the decode's FP8 one).
template <class Traits>
__device__ __forceinline__ void wgmma_consumers(const TileUnionParams& p, const PrefillTma& tma,
                                                TileUnionStorage<Traits>& smem, int ct) {
  static_assert(!Traits::kFp8Kv, "FP8 K/V: warp_consumers");
  static_assert(Traits::kRingStages == kStages, "stages taken as use & 1");
  const int group = p.attn.group;
  const int wg = ct / 128;
  int row[2];
  accumulator_rows<Traits>(ct, row);

  const auto sched = tile_schedule<Traits>(p);
  std::uint32_t iter = 0;
  std::uint32_t use = 0;
  // consumers_gather_q: the first two tiles' Q now, tile i + 2's once tile i's O left the buffer.
  const bool gather_q = consumers_gather_q<Traits>(tma);
  auto ahead = sched.mine().begin();  // the tile two on
  if (gather_q)
    for (int k = 0; k < kQBuffers<Traits> && ahead != sched.mine().end(); ++k, ++ahead)
      gather_q_rows<Traits>(p, tma, make_tile(p, sched.tile(*ahead)), smem.q[k], &smem.q_full[k], ct);
#ifdef MSA_CTA_STAMPS
  if (ct == 0) {
    stamps::header(p.stamps, stamps::kStart, stamps::now());
    stamps::header(p.stamps, stamps::kSmid, stamps::smid());
  }
#endif
  for (const int pos : sched.mine()) {
    const int buf = static_cast<int>(iter & 1u);
    const Tile t = make_tile(p, sched.tile(pos));
#ifdef MSA_CTA_STAMPS
    if (ct == 0) stamps::tile(p.stamps, iter, stamps::kListWait, stamps::now());
#endif
    Barrier64::wait(&smem.list_full[buf], phase_of(iter));
#ifdef MSA_CTA_STAMPS
    if (ct == 0) stamps::tile(p.stamps, iter, stamps::kListIn, stamps::now());
#endif
    const auto& list = smem.list[buf];
    const int u0 = list.begin;  // the tile's split of the union: entries u0 + [0, n)
    const int n = list.end - u0;
    // This thread's rows: their tile query's membership word and bit (no bit for padding) and
    // position.
    constexpr int kWords = TileUnionStorage<Traits>::List::kQueries / 32;
    std::uint32_t row_bit[2];
    int row_word[2];
    int row_pos[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int qi = row[half] / group;  // < 128
      row_bit[half] = qi < t.nq ? 1u << (kWords == 1 ? qi : qi & 31) : 0u;
      row_word[half] = kWords == 1 ? 0 : qi >> 5;
      row_pos[half] = qi < t.nq ? list.q_pos[qi] : 0;
    }
    // The tile queries owning a row of this warpgroup's 64 (padding rows own none; the skipping
    // instances are the decode's, narrow: one membership word).
    static_assert(!Traits::kSkipBlocks || kWords == 1);
    std::uint32_t wg_queries = 0;
    if constexpr (Traits::kSkipBlocks) {
      const int first = wg * 64, last = min(wg * 64 + 63, t.nq * group - 1);
      for (int qi = first / group; first <= last && qi <= last / group; ++qi) wg_queries |= 1u << qi;
    }
    // Each row half's visible keys of union entry u (0 where its query did not choose the
    // block); returns whether the block lies wholly below k_len (mask_keys' block_whole).
    auto key_limits = [&](int u, int(&limit)[2]) {
      const UnionEntry e = union_entry(list, u0 + u);
      const std::uint32_t members = list.members[u0 + u][0];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const std::uint32_t word = kWords == 1 ? members : list.members[u0 + u][row_word[half]];
        limit[half] = (word & row_bit[half]) != 0u ? max(0, min(e.tokens, row_pos[half] - e.block_start + 1)) : 0;
      }
      return e.tokens == kBlockSize;
    };

    const int qb = warp_uniform(stage_of(iter, kQBuffers<Traits>));
    Barrier64::wait(&smem.q_full[qb], parity_of(iter, kQBuffers<Traits>));
    const typename Traits::Element* sq = smem.q[qb];
#ifdef MSA_CTA_STAMPS
    if (ct == 0) stamps::tile(p.stamps, iter, stamps::kQIn, stamps::now());
#endif

    auto acc_o = make_acc_o<Traits>();
    cute::clear(acc_o);
    SoftmaxState st;

    if (n > 0) {
      auto acc_s = make_acc_s<Traits>();
      auto frag_p = make_frag_p<Traits>();
      // Phase u: S(u) (u < n) and P(u-1) V(u-1) (u > 0) issued as two WGMMA batches, then the
      // softmax of S(u) as soon as its batch completes, while P V may still run; O's rescale
      // and the new P follow P V's completion. The three shapes are separate straight-line
      // code (no WGMMA under a branch).
      auto phase = [&](auto with_qk, auto with_pv, int u) {
        constexpr bool kQk = decltype(with_qk)::value;
        constexpr bool kPv = decltype(with_pv)::value;
        // Warp-uniform (ptx.cuh): the K and V descriptors are then built in uniform registers.
        const int s = warp_uniform(static_cast<int>((use + u) & 1u));
        const int sp = s ^ 1;  // stage of block u - 1
        if constexpr (kQk) Barrier64::wait(&smem.kv.k_full[s], phase_of(use + u));
        if constexpr (kPv) Barrier64::wait(&smem.kv.v_full[sp], phase_of(use + u - 1));
        cute::warpgroup_fence_operand(acc_s);
        cute::warpgroup_fence_operand(acc_o);
        cute::warpgroup_fence_operand(frag_p);
        cute::warpgroup_arrive();
        if constexpr (kQk) {
          issue_qk<Traits>(sq, smem.kv.k[s], ct, acc_s);
          cute::warpgroup_commit_batch();
        }
        if constexpr (kPv) {
          issue_pv<Traits, true>(frag_p, smem.kv.v[sp], ct, acc_o);
          cute::warpgroup_commit_batch();
        }
        float alpha[2];
        bool rescale = false;  // softmax_fold: whether O needs alpha
        FoldPending pend;
        int limit[2] = {0, 0};
        bool whole = false;
        if constexpr (kQk) {
          cute::warpgroup_wait<kPv ? 1 : 0>();  // S(u) complete; P V may still run
          cute::warpgroup_fence_operand(acc_s);
          Barrier64::arrive(&smem.kv.k_empty[s]);
          whole = key_limits(u, limit);
          rescale = softmax_fold<!Traits::kSkipBlocks>(acc_s, limit, list.chunks[u0 + u], whole, p.attn.scale_log2, st,
                                                       ct, alpha, pend);
        }
        if constexpr (kPv) {
          cute::warpgroup_wait<0>();
          cute::warpgroup_fence_operand(acc_o);
          cute::warpgroup_fence_operand(frag_p);
          Barrier64::arrive(&smem.kv.v_empty[sp]);
        }
        if constexpr (kQk) {
          const auto recompute_s = [&](auto& s_acc) {
            static_assert(decltype(cute::size(s_acc))::value == 64);
            float s_rows[64];
            const int lane = ct & 31;
            recompute_s_rows<Traits>(p.attn, sq, row[0] - (lane >> 2), t.kv_head, union_entry(list, u0 + u), lane,
                                     s_rows);
#pragma unroll
            for (int i = 0; i < 64; ++i) s_acc(i) = s_rows[i];
          };
          rescale = softmax_settle<!Traits::kSkipBlocks>(acc_s, limit, list.chunks[u0 + u], whole, p.attn.scale_log2,
                                                         st, ct, alpha, rescale, pend, recompute_s);
          softmax_apply(acc_s, frag_p, acc_o, alpha, rescale);
        }
      };
      // Phase u (u = 0..n) takes block u with the P V of block u - 1. Without kSkipBlocks, or
      // when every block has a query of this warpgroup's rows, that is the straight pipeline.
      bool every = true;
      if constexpr (Traits::kSkipBlocks)
        for (int u = 0; u < n && every; ++u) every = (list.members[u0 + u][0] & wg_queries) != 0u;
      if (!Traits::kSkipBlocks || every) {
        phase(cute::true_type{}, cute::false_type{}, 0);
        for (int u = 1; u < n; ++u) phase(cute::true_type{}, cute::true_type{}, u);
        phase(cute::false_type{}, cute::true_type{}, n);
      } else if constexpr (Traits::kSkipBlocks) {
        // Otherwise a block that none of its rows chose is skipped: its rows would all be
        // masked, which leaves the state bitwise as it was (alpha 1, P 0). A pending P V is
        // issued alone first, so that no V stage is held across a skipped block (the loader
        // streams in order). The skipped block's stages are released once landed: an early
        // arrival could complete the stage's previous use.
        bool pending = false;
        for (int u = 0; u <= n; ++u) {
          const bool take = u < n && (list.members[u0 + u][0] & wg_queries) != 0u;
          if (take) {
            if (pending)
              phase(cute::true_type{}, cute::true_type{}, u);
            else
              phase(cute::true_type{}, cute::false_type{}, u);
          } else {
            if (pending) phase(cute::false_type{}, cute::true_type{}, u);
            if (u < n) {
              const int s = static_cast<int>((use + u) & 1u);
              Barrier64::wait(&smem.kv.k_full[s], phase_of(use + u));
              Barrier64::arrive(&smem.kv.k_empty[s]);
              Barrier64::wait(&smem.kv.v_full[s], phase_of(use + u));
              Barrier64::arrive(&smem.kv.v_empty[s]);
            }
          }
          pending = take;
        }
      }
    }
    use += n;
    Barrier64::arrive(&smem.list_empty[buf]);
    // Every row's result over the split goes to slot t.split (0 without splits); direct: to out
    // and lse (tile_row_dest).
    const TileRowDest target = tile_row_dest(p, t);
    // Final rows (p.direct: the prefill's, and an unsplit decode's) get the sink here; a split's
    // slot gets it in the combine.
    const bool final_rows = p.direct;
    float sink[2] = {-INFINITY, -INFINITY};
    if (final_rows && p.attn.sinks != nullptr) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float s = p.attn.sinks[t.kv_head * group + row[half] % group];
        if (isfinite(s)) sink[half] = s * kLog2e;  // a non-finite sink is ignored
      }
    }
    // Thread stores (Traits::kRowCopies: the wide instance's O rows) see o_partial as
    // [slots * total_q, h_q, d].
    const OutRows to = final_rows ? OutRows{&tma.out, p.attn.out, p.attn.stride_out_token, p.attn.stride_out_head}
                                  : OutRows{&tma.o_partial, p.attn.o_partial,
                                            std::int64_t{p.attn.h_q} * Traits::kHeadDim, Traits::kHeadDim};
    store_tile<Traits, true, true>(tma, to, acc_o, st.m, st.l, sink, smem.q[qb],
                                   final_rows ? p.attn.lse : p.attn.lse_partial, opaque_tid() - 128, target);
    if (!gather_q) {
      Barrier64::arrive(&smem.q_empty[qb]);
    } else if (ahead != sched.mine().end()) {
      // The warpgroup's O rows are read (thread copies, kRowCopies) once all its threads pass
      // the barrier; the proxy fence orders those reads before the TMA's writes.
      static_assert(!Traits::kWideTiles || Traits::kRowCopies);
      named_barrier_sync(kEpilogue0 + wg, 128);
      cutlass::arch::fence_view_async_shared();
      gather_q_rows<Traits>(p, tma, make_tile(p, sched.tile(*ahead)), smem.q[qb], &smem.q_full[qb], ct);
      ++ahead;
    }
#ifdef MSA_CTA_STAMPS
    if (ct == 0) stamps::tile(p.stamps, iter, stamps::kTileEnd, stamps::now());
#endif
    ++iter;
  }
  stores_complete();
#ifdef MSA_CTA_STAMPS
  if (ct == 0) {
    stamps::header(p.stamps, stamps::kEnd, stamps::now());
    stamps::header(p.stamps, stamps::kTiles, iter);
  }
#endif
}

template <class Traits>
__device__ __forceinline__ void consumers(const TileUnionParams& p, const PrefillTma& tma,
                                          TileUnionStorage<Traits>& smem, int ct) {
  if constexpr (Traits::kWarpMma)
    warp_consumers<Traits>(p, tma, smem, ct, tile_schedule<Traits>(p));
  else
    wgmma_consumers<Traits>(p, tma, smem, ct);
}

}  // namespace msa::cuda::prefill_sm90
