// The tile-union kernel's own pieces: a tile's coordinates, its union list (built by the three
// builder warps from the entry keys of cuda/plan/tile_keys.cuh) and its Q gather.
//
// A tile is q_per_tile consecutive queries of one KV head, their G heads packed into the
// 128-row M tile (row r = query r / G, head r % G). Its union is the set of (request, block)
// keys its queries selected and can see, deduplicated in first-seen order (query-major, slot
// order: the result is deterministic), then sorted by key where a decode request spans
// several tiles;
// every union block's K/V is loaded once for all 128 rows, and a row sees a block's keys only
// if its query selected it (a membership bit per query) and the causal / k_len limit allows.
#pragma once

#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>

#include "core/plan_encoding.h"
#include "cuda/common/ptx.cuh"
#include "cuda/plan/tile_keys.cuh"
#include "cuda/prefill/sm90/common/kv_ring.cuh"
#include "cuda/prefill/sm90/tile_union/config.h"
#include "cuda/prefill/sm90/tile_union/params.h"

namespace msa::cuda::prefill_sm90 {

// Queries [q0, q0 + nq) of one KV head, split `split` of their union: the tile-th tile.
struct Tile {
  int kv_head;
  int q0;
  int nq;
  int split;
};

__device__ __forceinline__ Tile make_tile(const TileUnionParams& p, int tile) {
  const int pair = tile / p.splits;
  const int per_head = static_cast<int>(p.tiles / p.splits / p.attn.h_kv);
  Tile t;
  t.split = tile - pair * p.splits;
  t.kv_head = pair / per_head;
  t.q0 = (pair - t.kv_head * per_head) * p.q_per_tile;
  t.nq = static_cast<int>(min(std::int64_t(p.q_per_tile), p.attn.total_q - t.q0));
  return t;
}

// Union entry u of a list, decoded.
struct UnionEntry {
  int b;            // request
  int k_len;        // its k_len
  int block_start;  // block id * 128
  int tokens;       // tokens of the block below k_len, 1..128
};

template <class List>
__device__ __forceinline__ UnionEntry union_entry(const List& list, int u) {
  const std::int32_t key = list.block[u];
  const int seg = union_key::segment(key);
  UnionEntry e;
  e.b = list.seg_b[seg];
  e.k_len = list.seg_klen[seg];
  e.block_start = union_key::block(key) * kBlockSize;
  e.tokens = min(kBlockSize, e.k_len - e.block_start);
  return e;
}

// The wide builders' entry e (query e / topk, slot e % topk) keys its block when the query can
// see it (causal, below k_len): blocks no query of the tile sees would leave every row's state
// as it was, so they are left out, and a tile's union stays within the bound the host sized
// its tiles by (tile_union_free_queries).
template <class Traits>
struct EntryKeys {
  const TileUnionParams& p;
  const Tile& t;
  const WideScratch& scratch;
  const typename TileUnionStorage<Traits>::List& list;
  int topk;
  // (The row's address from the parameters each time: fewer registers held across the passes.)
  __device__ __forceinline__ std::int32_t operator()(int e) const {
    const int i = e / topk;
    const int seg = scratch.q_seg[i];
    const int pos = list.q_pos[i];  // < k_len in a valid batch
    const int blocks = (list.seg_klen[seg] + kBlockSize - 1) / kBlockSize;
    const std::int32_t id = p.topk[std::int64_t(t.kv_head) * p.stride_topk_head +
                                   std::int64_t(t.q0 + i) * p.stride_topk_token + (e - i * topk)];
    return union_key::of_id(seg, id, pos >= 0 ? min(pos / kBlockSize + 1, blocks) : 0);
  }
};

// The narrow instances' build_list (tiles of at most 32 queries and kMaxEntries entries): each
// entry's key, first entry and rank in scratch.
template <class Traits>
__device__ __forceinline__ void build_narrow_list(const TileUnionParams& p, const Tile& t,
                                                  TileUnionStorage<Traits>& smem,
                                                  typename TileUnionStorage<Traits>::List& list, int bt) {
  const int topk = p.attn.topk;
  const int n = t.nq * topk;
  // 1. Each query's request, segment and position (one warp: nq <= 32); the first query of each
  // segment writes the segment's (request, k_len), so every segment a key names is written once.
  if (bt < 32) {
    const bool active = bt < t.nq;
    TileQuery tq{};
    if (active)
      tq = p.q_per_request > 0
               ? locate_uniform_query(p.attn.k_len, p.q_per_request, t.q0, t.q0 + bt, kTileUnionNarrowQueries)
               : locate_tile_query(p.attn.cu_seqlens_q, p.attn.k_len, p.batch, t.q0, t.q0 + bt, 0,
                                   kTileUnionNarrowQueries);
    const unsigned peers = __match_any_sync(0xffffffffu, active ? tq.segment : -1 - bt);
    if (active) {
      smem.scratch.q_seg[bt] = tq.segment;
      list.q_pos[bt] = tq.pos;
      if ((peers & ((1u << bt) - 1u)) == 0u) {
        list.seg_b[tq.segment] = tq.b;
        list.seg_klen[tq.segment] = tq.k_len;
      }
    }
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // 2. Entry keys.
  const std::int32_t* ids = p.topk + std::int64_t(t.kv_head) * p.stride_topk_head;
  for (int e = bt; e < n; e += kBuilderThreads) {
    const int i = e / topk;
    const int seg = smem.scratch.q_seg[i];
    const int blocks = (list.seg_klen[seg] + kBlockSize - 1) / kBlockSize;
    smem.scratch.key[e] =
        union_key::of_id(seg, ids[std::int64_t(t.q0 + i) * p.stride_topk_token + (e - i * topk)], blocks);
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // 3. Each entry's first occurrence: every key goes into an open-addressing table whose slot keeps
  // the smallest entry that holds it (atomicMin: the same answer in any order), so the union's
  // first-seen order is the same as a scan's, in O(1) per entry instead of O(entries).
  for (int i = bt; i < kKeyTableSize; i += kBuilderThreads) {
    smem.scratch.table_key[i] = union_key::kNone;
    smem.scratch.table_first[i] = kMaxEntries;
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  for (int e = bt; e < n; e += kBuilderThreads) {
    const std::int32_t key = smem.scratch.key[e];
    if (key == union_key::kNone) continue;
    static_assert(kKeyTableSize == 1 << 10);
    bool fresh;
    const unsigned slot = offer_union_key(smem.scratch.table_key, 10, key, fresh);  // at most n < kKeyTableSize keys
    atomicMin(&smem.scratch.table_first[slot], e);
    smem.scratch.rank[e] = static_cast<std::int32_t>(slot);
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  for (int e = bt; e < n; e += kBuilderThreads)
    smem.scratch.first[e] =
        smem.scratch.key[e] == union_key::kNone ? -1 : smem.scratch.table_first[smem.scratch.rank[e]];
  named_barrier_sync(kBuilders, kBuilderThreads);
  // 4. Ranks of the first occurrences, in entry order (one warp, 32 entries per ballot).
  if (bt < 32) {
    int base = 0;
    for (int c = 0; c < n; c += 32) {
      const int e = c + bt;
      const bool is_first = e < n && smem.scratch.first[e] == e;
      const unsigned ballot = __ballot_sync(0xffffffffu, is_first);
      if (is_first) {
        const int r = base + __popc(ballot & ((1u << bt) - 1u));
        smem.scratch.rank[e] = r;
        list.block[r] = smem.scratch.key[e];
        list.members[r][0] = 0u;
      }
      base += __popc(ballot);
    }
    if (bt == 0) {
      list.size = base;
      list.begin = static_cast<int>(std::int64_t(base) * t.split / p.splits);
      list.end = static_cast<int>(std::int64_t(base) * (t.split + 1) / p.splits);
    }
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // 4b. A decode request spread over several tiles (Q > q_per_tile: G > 8 and Q > 128 / G) has
  // its tiles walk their unions in key order, block ascending, so that a block two of them chose
  // is read by both at about the same time and the second read finds it in L2 (sibling tiles run
  // in the same round of the schedule; docs/performance.md, step 40). Each first-seen entry's
  // place is the count of smaller keys (the keys are distinct; at most 14 x 32 of them here).
  if (p.q_per_request > p.q_per_tile) {
    const int size = list.size;
    const auto* keys4 = reinterpret_cast<const int4*>(list.block);  // 4 keys at a time, then the rest
    for (int r = bt; r < size; r += kBuilderThreads) {
      const std::int32_t key = list.block[r];
      int place = 0;
      for (int j = 0; j < size / 4; ++j) {
        const int4 k = keys4[j];
        place += (k.x < key) + (k.y < key) + (k.z < key) + (k.w < key);
      }
      for (int j = size & ~3; j < size; ++j) place += list.block[j] < key;
      smem.scratch.table_key[place] = key;  // the table is free after step 3
      smem.scratch.table_first[r] = place;
    }
    named_barrier_sync(kBuilders, kBuilderThreads);
    for (int r = bt; r < size; r += kBuilderThreads) list.block[r] = smem.scratch.table_key[r];
    for (int e = bt; e < n; e += kBuilderThreads)
      if (smem.scratch.first[e] == e) smem.scratch.rank[e] = smem.scratch.table_first[smem.scratch.rank[e]];
    named_barrier_sync(kBuilders, kBuilderThreads);
  }
  // 5. Membership: query i selected union entry rank[first[e]]; and each entry's 16-token
  // chunks on valid pages.
  for (int e = bt; e < n; e += kBuilderThreads) {
    const int f = smem.scratch.first[e];
    if (f >= 0) atomicOr(&list.members[smem.scratch.rank[f]][0], 1u << (e / topk));
  }
  for (int u = list.begin + bt; u < list.end; u += kBuilderThreads) {
    const std::int32_t key = list.block[u];
    const int seg = union_key::segment(key);
    list.chunks[u] = static_cast<std::uint8_t>(
        block_chunks(p.attn, list.seg_b[seg], union_key::block(key) * kBlockSize, list.seg_klen[seg]));
  }
  // The scratch arrays are free for the next tile once every builder is done reading them.
  named_barrier_sync(kBuilders, kBuilderThreads);
}

// The wide instance's build_list (tiles of up to 128 queries and kTileUnionMaxTileEntries top-k
// entries; a plan-free prefill at G <= 3): no scratch per entry, whose keys are read again where
// a pass needs them. The builders stop taking keys at kMaxEntries, so a batch that breaks the
// host's bound (changed on the device since plan()) gets unspecified results, never an endless
// probe or a write past the list.
template <class Traits>
__device__ __forceinline__ void build_wide_list(const TileUnionParams& p, const Tile& t, TileUnionStorage<Traits>& smem,
                                                typename TileUnionStorage<Traits>::List& list, int bt) {
  static_assert(kKeyTableSize == 1 << 10);
  constexpr int kWords = TileUnionStorage<Traits>::List::kQueries / 32;
  constexpr int kEntryWords = WideScratch::kEntryWords;
  WideScratch& s = smem.scratch;
  const int topk = p.attn.topk;
  const int n = t.nq * topk;
  // Each query's request, segment and position. Every query of a segment writes the segment's
  // (request, k_len): the same values, so every segment a key names is written. The key table
  // and the first-entry bits are cleared meanwhile.
  for (int i = bt; i < t.nq; i += kBuilderThreads) {
    const TileQuery tq =
        locate_tile_query(p.attn.cu_seqlens_q, p.attn.k_len, p.batch, t.q0, t.q0 + i, 0, kTileUnionMaxQueries);
    s.q_seg[i] = static_cast<std::uint8_t>(tq.segment);
    list.q_pos[i] = tq.pos;
    list.seg_b[tq.segment] = tq.b;
    list.seg_klen[tq.segment] = tq.k_len;
  }
  for (int i = bt; i < kKeyTableSize; i += kBuilderThreads) {
    s.table_key[i] = union_key::kNone;
    s.table_first[i] = kTileUnionMaxTileEntries;
  }
  for (int w = bt; w < kEntryWords; w += kBuilderThreads) s.first_bits[w] = 0u;
  if (bt == 0) s.keys_taken = 0;
  named_barrier_sync(kBuilders, kBuilderThreads);

  const EntryKeys<Traits> entry_key{p, t, s, list, topk};
  // A builder's keys come kKeyBatch at a time: their top-k loads issued together.
  constexpr int kKeyBatch = 4;
  const auto key_batch = [&](int e0, std::int32_t(&keys)[kKeyBatch]) {
#pragma unroll
    for (int j = 0; j < kKeyBatch; ++j) {
      const int e = e0 + j * kBuilderThreads;
      keys[j] = e < n ? entry_key(e) : union_key::kNone;
    }
  };
  // Every key into the table, whose slot keeps the smallest entry that holds it (atomicMin: the
  // same answer in any order, so the union's first-seen order is a scan's).
  for (int e0 = bt; e0 < n; e0 += kKeyBatch * kBuilderThreads) {
    std::int32_t keys[kKeyBatch];
    key_batch(e0, keys);
#pragma unroll
    for (int j = 0; j < kKeyBatch; ++j) {
      if (keys[j] == union_key::kNone) continue;
      // At most kBuilderThreads offers pass this test at once: the table never holds more than
      // kMaxEntries + kBuilderThreads < kKeyTableSize keys, and every probe ends.
      if (*static_cast<volatile std::int32_t*>(&s.keys_taken) >= kMaxEntries) continue;
      bool fresh;
      const unsigned slot = offer_union_key(s.table_key, 10, keys[j], fresh);
      if (fresh) atomicAdd(&s.keys_taken, 1);
      atomicMin(&s.table_first[slot], e0 + j * kBuilderThreads);
    }
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // The first entries as bits, then (one warp) their counts below each word.
  for (int i = bt; i < kKeyTableSize; i += kBuilderThreads)
    if (s.table_key[i] != union_key::kNone) {
      const int f = s.table_first[i];
      atomicOr(&s.first_bits[f >> 5], 1u << (f & 31));
    }
  named_barrier_sync(kBuilders, kBuilderThreads);
  static_assert(kEntryWords == 64);
  if (bt < 32) {
    const int c0 = __popc(s.first_bits[bt]), c1 = __popc(s.first_bits[bt + 32]);
    int s0 = c0, s1 = c1;  // inclusive sums over the lanes
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int u0 = __shfl_up_sync(0xffffffffu, s0, d), u1 = __shfl_up_sync(0xffffffffu, s1, d);
      if (bt >= d) s0 += u0, s1 += u1;
    }
    const int total0 = __shfl_sync(0xffffffffu, s0, 31);
    s.first_base[bt] = s0 - c0;
    s.first_base[bt + 32] = total0 + s1 - c1;
    if (bt == 31) {
      const int size = min(total0 + s1, kMaxEntries);
      list.size = size;
      list.begin = static_cast<int>(std::int64_t(size) * t.split / p.splits);
      list.end = static_cast<int>(std::int64_t(size) * (t.split + 1) / p.splits);
    }
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // Each key's union rank: the first entries before its own.
  for (int i = bt; i < kKeyTableSize; i += kBuilderThreads) {
    const std::int32_t key = s.table_key[i];
    if (key == union_key::kNone) continue;
    const int f = s.table_first[i];
    const int r = s.first_base[f >> 5] + __popc(s.first_bits[f >> 5] & ((1u << (f & 31)) - 1u));
    s.table_first[i] = r;
    if (r < kMaxEntries) {
      list.block[r] = key;
#pragma unroll
      for (int w = 0; w < kWords; ++w) list.members[r][w] = 0u;
    }
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // Membership: query i selected the union entry of its key.
  for (int e0 = bt; e0 < n; e0 += kKeyBatch * kBuilderThreads) {
    std::int32_t keys[kKeyBatch];
    key_batch(e0, keys);
#pragma unroll
    for (int j = 0; j < kKeyBatch; ++j) {
      if (keys[j] == union_key::kNone) continue;
      const int slot = find_union_key(s.table_key, 10, keys[j]);
      if (slot < 0) continue;  // not taken (past kMaxEntries)
      const int r = s.table_first[slot];
      const int i = (e0 + j * kBuilderThreads) / topk;
      if (r < kMaxEntries) atomicOr(&list.members[r][i >> 5], 1u << (i & 31));
    }
  }
  // Each entry's 16-token chunks on valid pages.
  for (int u = list.begin + bt; u < list.end; u += kBuilderThreads) {
    const std::int32_t key = list.block[u];
    const int seg = union_key::segment(key);
    list.chunks[u] = static_cast<std::uint8_t>(
        block_chunks(p.attn, list.seg_b[seg], union_key::block(key) * kBlockSize, list.seg_klen[seg]));
  }
  // The scratch is free for the next tile once every builder is done reading it.
  named_barrier_sync(kBuilders, kBuilderThreads);
}

// Builds tile t's union into `list` (96 builder threads, bt = 0..95); each builder's mbarrier
// arrival afterwards publishes its writes to the loader and the consumers.
template <class Traits>
__device__ __forceinline__ void build_list(const TileUnionParams& p, const Tile& t, TileUnionStorage<Traits>& smem,
                                           typename TileUnionStorage<Traits>::List& list, int bt) {
  if constexpr (Traits::kWideTiles)
    build_wide_list(p, t, smem, list, bt);
  else
    build_narrow_list(p, t, smem, list, bt);
}

// Gathers tile t's Q rows into `sq` with TMA (one box per query's heads and column half);
// padding rows get no data (their results are never stored). Builder 0 arms `bar`.
template <class Traits>
__device__ __forceinline__ void load_q(const TileUnionParams& p, const PrefillTma& tma, const Tile& t,
                                       typename Traits::Element* sq, std::uint64_t* bar, int bt) {
  const int group = p.attn.group;
  const int rows = t.nq * group;
  if (bt == 0)
    Barrier64::arrive_and_expect_tx(
        bar, static_cast<std::uint32_t>(rows * Traits::kHeadDim * sizeof(typename Traits::Element)));
  for (int r = bt; r < rows; r += kBuilderThreads) {
    if (r % tma.q_box_rows != 0) continue;
    const int qi = r / group;
    const int h = t.kv_head * group + (r - qi * group);
#pragma unroll
    for (int c = 0; c < Traits::kColHalves; ++c)
      cute::SM90_TMA_LOAD_3D::copy(&tma.q, bar, static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST),
                                   sq + Traits::q_box_offset(r, c), c * Traits::kBoxCols, h, t.q0 + qi);
  }
}

}  // namespace msa::cuda::prefill_sm90
