// The tile-union kernel's own pieces: a tile's coordinates, its union list (built by the three
// builder warps from the entry keys of cuda/plan/tile_keys.cuh) and its Q gather.
//
// A tile is q_per_tile consecutive queries of one KV head, their G heads packed into the
// 128-row M tile (row r = query r / G, head r % G). Its union is the set of (request, block)
// keys its queries selected (the wide instance: and can see), in a deterministic order: the
// narrow builders' first-seen order (query-major, slot order; slot-major in the decode's FP8
// instance, builder.cuh build_narrow_list), sorted by key where a decode
// request spans several tiles; the wide builders' (request, block) order. Every union block's
// K/V is loaded once for all 128 rows, and a row sees a block's keys only
// if its query selected it (a membership bit per query) and the causal / k_len limit allows.
#pragma once

#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>

#include "core/plan_encoding.h"
#include "cuda/common/ptx.cuh"
#include "cuda/plan/tile_keys.cuh"
#include "cuda/prefill/sm90/common/epilogue.cuh"
#include "cuda/prefill/sm90/common/kv_ring.cuh"
#include "cuda/prefill/sm90/tile_union/config.h"
#include "cuda/prefill/sm90/tile_union/params.h"
#include "cuda/prefill/sm90/tile_union/stamps.cuh"

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

// Where tile row r (tile query r / G, head r % G of the tile's KV head) is stored: the row of
// slot t.split (0 without splits) in o_partial / lse_partial; direct, in out and lse, whose
// (query, head) indices are slot 0's. Rows past the tile's queries are padding, not stored.
struct TileRowDest {
  int rows;               // t.nq * G: the tile's real rows
  int group;              // G
  int kv_head;            // t.kv_head
  int h_q;                // p.attn.h_q
  std::int64_t slot_row;  // the slot's row of tile query 0: t.split * total_q + t.q0

  __device__ __forceinline__ RowDest operator()(int r) const {
    const int qi = r / group;
    const int h = kv_head * group + (r - qi * group);
    return RowDest{r < rows, h, static_cast<int>(slot_row + qi), (slot_row + qi) * h_q + h};
  }
};

__device__ __forceinline__ TileRowDest tile_row_dest(const TileUnionParams& p, const Tile& t) {
  return TileRowDest{t.nq * p.attn.group, p.attn.group, t.kv_head, p.attn.h_q,
                     std::int64_t(t.split) * p.attn.total_q + t.q0};
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

// The loader's box coordinates a chunk of entries at a time (a page-table read a lane): lane
// `lane`'s is box lane % boxes of entry u0 + lane / boxes (boxes = kBlockN / kv_box_rows), 0
// from `end` (the list's end) on. The wide builders write the first chunk's (build_wide_list,
// step 8).
template <class List>
__device__ __forceinline__ int chunk_box_coord(const AttentionParams& a, const List& list, int end, int u0, int lane,
                                               int kv_box_rows, int boxes) {
  const int u = u0 + lane / boxes;
  if (u >= end) return 0;
  const UnionEntry e = union_entry(list, u);
  return box_coord(a, kv_box_rows, e.b, e.block_start, e.k_len, lane % boxes);
}

// Whether no other tile reads union entry u's block (the narrow lists' once_segments; KvL2Hint).
template <class List>
__device__ __forceinline__ bool read_once(const List& list, int u) {
  return ((list.once_segments >> union_key::segment(list.block[u])) & 1u) != 0u;
}

// Whether the narrow builders sort each tile's union by key (step 4b of build_narrow_list): a
// decode request spread over several tiles (Q > q_per_tile: G > 8 and Q > 128 / G).
__device__ __forceinline__ bool union_in_key_order(const TileUnionParams& p) { return p.q_per_request > p.q_per_tile; }

// The narrow instances' build_list (tiles of at most 32 queries and kMaxEntries entries): each
// entry's key, first entry and rank in scratch.
template <class Traits>
__device__ __forceinline__ void build_narrow_list(const TileUnionParams& p, const Tile& t,
                                                  TileUnionStorage<Traits>& smem,
                                                  typename TileUnionStorage<Traits>::List& list, int bt) {
  const int topk = p.attn.topk;
  const int n = t.nq * topk;
  // Entry e's query and slot: query-major (e = i topk + slot), or with Traits::kWarpMma
  // slot-major (e = slot nq + i), so that the first-seen order takes each query's first choice,
  // then each one's second, and so on: consecutive union blocks then belong to different
  // queries, which the warp consumers (one query's rows each) compute side by side, where
  // query-major runs left each query's blocks to one warp at a time.
  const auto query_of = [&](int e) { return Traits::kWarpMma ? e % t.nq : e / topk; };
  const auto slot_of = [&](int e) { return Traits::kWarpMma ? e / t.nq : e % topk; };
  // 1. Each query's request, segment and position (one warp: nq <= 32); the first query of each
  // segment writes the segment's (request, k_len), so every segment a key names is written once;
  // and the segments whose blocks are this tile's alone (the decode's requests wholly in the
  // tile; other splits of the pair read other entries).
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
    const std::int64_t first = std::int64_t(tq.b) * p.q_per_request;
    const bool once =
        Traits::kSkipBlocks && active && p.q_per_request > 0 && first >= t.q0 && first + p.q_per_request <= t.q0 + t.nq;
    const std::uint32_t once_segments = __reduce_or_sync(0xffffffffu, once ? 1u << tq.segment : 0u);
    if (bt == 0) list.once_segments = once_segments;
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // 2. Entry keys.
  const std::int32_t* ids = p.topk + std::int64_t(t.kv_head) * p.stride_topk_head;
  for (int e = bt; e < n; e += kBuilderThreads) {
    const int i = query_of(e);
    const int seg = smem.scratch.q_seg[i];
    const int blocks = (list.seg_klen[seg] + kBlockSize - 1) / kBlockSize;
    smem.scratch.key[e] = union_key::of_id(seg, ids[std::int64_t(t.q0 + i) * p.stride_topk_token + slot_of(e)], blocks);
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
  if (union_in_key_order(p)) {
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
    if (f >= 0) atomicOr(&list.members[smem.scratch.rank[f]][0], 1u << query_of(e));
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

// One warp's exclusive prefix sums of 32 N values, N consecutive ones a lane (lane `lane`
// holds in[N lane .. N lane + N - 1]), written to out (which may be in); returns their total.
template <int N>
__device__ __forceinline__ int warp_exclusive_sums(const std::int32_t* in, std::int32_t* out, int lane) {
  int v[N], sum = 0;
#pragma unroll
  for (int k = 0; k < N; ++k) sum += v[k] = in[N * lane + k];
  int incl = sum;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += up;
  }
  int base = incl - sum;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    out[N * lane + k] = base;
    base += v[k];
  }
  return __shfl_sync(0xffffffffu, incl, 31);
}

// The wide instance's build_list (tiles of up to 128 queries and kTileUnionMaxTileEntries top-k
// entries; a plan-free prefill at G <= 3). A bit per block the tile's queries can see (segment
// s's blocks [0, seg_vis[s]) from bit seg_off[s] on): each top-k entry sets its block's bit if
// its query sees the block (causal, below k_len; blocks no query of the tile sees would leave
// every row's state as it was); the union is the set bits in order (segment, then block: the
// result is deterministic), a set bit's rank the set bits before it. Every pass is
// fire-and-forget shared-memory ORs (the bitmap's a word at a time, the membership's one per
// entry, or for a union of at most 64 entries warp ballots), with no probing and no per-entry
// scratch. The host
// bounds a tile's visible blocks by kTileUnionMaxVisibleBlocks and its union by kMaxEntries
// (wide_tiles_fit, tile_unions_fit): bits and ranks past them, which only a batch changed on
// the device since plan() can bring, are dropped (unspecified results, no write out of bounds).
// Last, the loader's first chunk of box coordinates (first_coords: its page-table reads, which
// otherwise lie between the published list and the tile's first K load).
template <class Traits>
__device__ __forceinline__ void build_wide_list(const TileUnionParams& p, const Tile& t, TileUnionStorage<Traits>& smem,
                                                typename TileUnionStorage<Traits>::List& list, int bt,
                                                int kv_box_rows) {
  constexpr int kWords = TileUnionStorage<Traits>::List::kQueries / 32;
  constexpr int kBitmapWords = WideScratch::kBitmapWords;
  constexpr int kMaxBits = kTileUnionMaxVisibleBlocks;
  WideScratch& s = smem.scratch;
  const int topk = p.attn.topk;
  const std::int32_t* ids = p.topk + std::int64_t(t.kv_head) * p.stride_topk_head;
  // 0. The tile's top-k rows asked of L1 (their first and last ids' lines: a row of up to 32
  // ids spans one or two), so that the two passes over them below, a load round trip an
  // iteration each, find them there.
  for (int i = bt; i < t.nq; i += kBuilderThreads) {
    const std::int32_t* row = ids + std::int64_t(t.q0 + i) * p.stride_topk_token;
    prefetch_l1(row);
    prefetch_l1(row + topk - 1);
  }
  // 1. A clear bitmap, no segment yet, no partial query.
  for (int w = bt; w < kBitmapWords; w += kBuilderThreads) s.bitmap[w] = 0u;
  for (int i = bt; i < kTileUnionMaxQueries; i += kBuilderThreads) s.seg_vis[i] = 0;
  if (bt == 0) s.partial = 0;
  named_barrier_sync(kBuilders, kBuilderThreads);
  MSA_BUILD_STEP(kCleared);
  // 2. Each query's request, segment and position; every query of a segment writes the
  // segment's (request, k_len), the same values; the segment sees what its last query sees.
  for (int i = bt; i < t.nq; i += kBuilderThreads) {
    const TileQuery tq =
        locate_tile_query(p.attn.cu_seqlens_q, p.attn.k_len, p.batch, t.q0, t.q0 + i, 0, kTileUnionMaxQueries);
    s.q_seg[i] = static_cast<std::uint8_t>(tq.segment);
    list.q_pos[i] = tq.pos;
    list.seg_b[tq.segment] = tq.b;
    list.seg_klen[tq.segment] = tq.k_len;
    atomicMax(&s.seg_vis[tq.segment], tq.pos >= 0 ? min(tq.pos / kBlockSize + 1, min(tq.blocks, kMaxBits)) : 0);
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  MSA_BUILD_STEP(kLocated);
  // 3. The segments' first bits (one warp, four segments a lane; each at most kMaxBits).
  static_assert(kTileUnionMaxQueries == 4 * 32);
  // And whether the tile may be full (3b): no segment sees more than topk blocks, and all of
  // them make at most 64 entries (the ballots of the direct membership).
  if (bt < 32) {
    const int total = warp_exclusive_sums<4>(s.seg_vis, s.seg_off, bt);
    bool over = false;
#pragma unroll
    for (int k = 0; k < 4; ++k) over |= s.seg_vis[4 * bt + k] > min(topk, 32);
    over = __any_sync(0xffffffffu, over);
    if (bt == 31) {
      s.bits = min(total, kMaxBits);
      s.maybe_full = !over && total <= 64 ? 1 : 0;
    }
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  MSA_BUILD_STEP(kScanned);
  // Query i's chosen blocks' bits, kBatch slots at a time: visit(bit, off) with bit[k] the bit of
  // slot j0 + k, or -1 for a block the query does not see (or a slot past topk). A thread a
  // query: the query's segment is read once, and a batch's loads are issued together (each
  // dependent round trip to memory costs the builders most while the consumers run, step 88).
  constexpr int kBatch = 8;
  // The blocks query i sees: within the segment's bits (with a valid batch the segment's last
  // query sees the most, so this is the query's own limit; a batch changed on the device since
  // plan() can put two requests (two k_len) in one segment, and a bit past seg_vis would then
  // name a segment no query of the tile wrote: its request and k_len stale, reads out of bounds).
  const auto sees_of = [&](int i) {
    const int seg = s.q_seg[i];
    const int pos = list.q_pos[i];
    const int blocks = (list.seg_klen[seg] + kBlockSize - 1) / kBlockSize;
    return pos >= 0 ? min(min(pos / kBlockSize + 1, blocks), s.seg_vis[seg]) : 0;
  };
  const auto for_each_batch = [&](int i, auto&& visit) {
    const std::int32_t* row = ids + std::int64_t(t.q0 + i) * p.stride_topk_token;
    const int sees = sees_of(i);
    const int off = s.seg_off[s.q_seg[i]];
    for (int j0 = 0; j0 < topk; j0 += kBatch) {
      int bit[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) bit[k] = j0 + k < topk ? row[j0 + k] : -1;
#pragma unroll
      for (int k = 0; k < kBatch; ++k)
        bit[k] = bit[k] >= 0 && bit[k] < sees && off + bit[k] < kMaxBits ? off + bit[k] : -1;
      visit(bit, off);
    }
  };
  // 3b. Full tiles. Under the MSA rule a query that sees at most topk blocks chooses all of them
  // (a full query): every query of a context up to topk blocks long, so the lightest tiles of
  // every causal prefill. Where the tile may be full (step 3), each query's chosen blocks, as
  // bits from its segment's first, are compared with the first `sees`; if every query is full,
  // entry r of the union is bit r, and the bitmap, its ranks and the second pass over the ids
  // are not needed (direct, below). A duplicate or unseen id leaves its query partial.
  const bool maybe_full = s.maybe_full != 0;
  if (maybe_full) {
    for (int i = bt; i < t.nq; i += kBuilderThreads) {
      std::uint32_t chosen = 0u;  // bit b: block b of the segment (b < sees <= topk <= 32)
      for_each_batch(i, [&](const auto& bit, int off) {
#pragma unroll
        for (int k = 0; k < kBatch; ++k)
          if (bit[k] >= 0) chosen |= 1u << (bit[k] - off);
      });
      const int sees = sees_of(i);
      if (chosen != (sees == 32 ? ~0u : (1u << sees) - 1u)) s.partial = 1;
    }
    named_barrier_sync(kBuilders, kBuilderThreads);
    MSA_BUILD_STEP(kChosen);
  }
  if (maybe_full && s.partial == 0) {
    // Every bit below s.bits (at most 64) is a chosen block: entry r is bit r; query i chose the
    // `sees` entries from its segment's first bit.
    const int size = s.bits;
    if (bt == 0) {
      list.size = size;
      list.begin = static_cast<int>(std::int64_t(size) * t.split / p.splits);
      list.end = static_cast<int>(std::int64_t(size) * (t.split + 1) / p.splits);
    }
    for (int r = bt; r < size; r += kBuilderThreads) {
      const int seg = last_at_most(s.seg_off, kTileUnionMaxQueries, r);
      list.block[r] = union_key::encode(seg, r - s.seg_off[seg]);
#pragma unroll
      for (int k = 0; k < kWords; ++k) list.members[r][k] = 0u;
    }
    named_barrier_sync(kBuilders, kBuilderThreads);
    const int warp = bt / 32, lane = bt % 32;
    const int groups = (t.nq + 31) / 32;
    for (int g = warp; g < groups; g += kBuilderThreads / 32) {
      const int i = g * 32 + lane;
      std::uint64_t chosen = 0u;
      if (i < t.nq) {
        const int sees = sees_of(i);
        if (sees > 0) chosen = ((std::uint64_t{1} << sees) - 1u) << s.seg_off[s.q_seg[i]];
      }
      for (int r = 0; r < size; ++r) {
        const std::uint32_t word = __ballot_sync(0xffffffffu, ((chosen >> r) & 1u) != 0u);
        if (lane == 0) list.members[r][g] = word;
      }
    }
  } else {
    // 4. The chosen blocks' bits, gathered per thread while they fall in one word (a few words
    // hold every bit of a short context's tile: one atomic a word change, not one a bit).
    {
      int word = -1;
      std::uint32_t bits = 0u;
      for (int i = bt; i < t.nq; i += kBuilderThreads)
        for_each_batch(i, [&](const auto& bit, int) {
#pragma unroll
          for (int k = 0; k < kBatch; ++k) {
            if (bit[k] < 0) continue;
            if (bit[k] >> 5 != word) {
              if (bits != 0u) atomicOr(&s.bitmap[word], bits);
              word = bit[k] >> 5;
              bits = 0u;
            }
            bits |= 1u << (bit[k] & 31);
          }
        });
      if (bits != 0u) atomicOr(&s.bitmap[word], bits);
    }
    named_barrier_sync(kBuilders, kBuilderThreads);
    MSA_BUILD_STEP(kChosen);
    // 5. Ranks: each builder counts its share of the words, one warp scans the counts, and each
    // builder writes its words' first ranks; then the warps write the union entries (at most
    // kMaxEntries), a lane per bit of each non-empty word (a short context's bits all lie in a
    // word or two: one thread walking them was a chain of n binary searches, step 87).
    const int words = (s.bits + 31) / 32;
    const int per = (words + kBuilderThreads - 1) / kBuilderThreads;
    const int w_begin = min(bt * per, words), w_end = min(w_begin + per, words);
    int count = 0;
    for (int w = w_begin; w < w_end; ++w) count += __popc(s.bitmap[w]);
    s.builder_base[bt] = count;
    named_barrier_sync(kBuilders, kBuilderThreads);
    static_assert(kBuilderThreads == 3 * 32);
    if (bt < 32) {
      const int total = warp_exclusive_sums<3>(s.builder_base, s.builder_base, bt);
      if (bt == 31) {
        const int size = min(total, kMaxEntries);
        list.size = size;
        list.begin = static_cast<int>(std::int64_t(size) * t.split / p.splits);
        list.end = static_cast<int>(std::int64_t(size) * (t.split + 1) / p.splits);
      }
    }
    named_barrier_sync(kBuilders, kBuilderThreads);
    {
      int rank = s.builder_base[bt];
      for (int w = w_begin; w < w_end; ++w) {
        s.word_base[w] = static_cast<std::uint16_t>(rank);
        rank += __popc(s.bitmap[w]);
      }
    }
    named_barrier_sync(kBuilders, kBuilderThreads);
    const int warp = bt / 32, lane = bt % 32;
    for (int c = warp * 32; c < words; c += kBuilderThreads) {  // 32 words a warp at a time
      const std::uint32_t mine = c + lane < words ? s.bitmap[c + lane] : 0u;
      for (std::uint32_t busy = __ballot_sync(0xffffffffu, mine != 0u); busy != 0u; busy &= busy - 1u) {
        const int src = __ffs(static_cast<int>(busy)) - 1;
        const std::uint32_t m = __shfl_sync(0xffffffffu, mine, src);
        const int w = c + src;
        if (((m >> lane) & 1u) == 0u) continue;
        const int rank = s.word_base[w] + __popc(m & ((1u << lane) - 1u));
        if (rank >= kMaxEntries) continue;
        const int bit = w * 32 + lane;
        const int seg =
            last_at_most(s.seg_off, kTileUnionMaxQueries, bit);  // the last segment starting at or before it
        list.block[rank] = union_key::encode(seg, bit - s.seg_off[seg]);
#pragma unroll
        for (int k = 0; k < kWords; ++k) list.members[rank][k] = 0u;
      }
    }
    named_barrier_sync(kBuilders, kBuilderThreads);
    // 6. Membership: query i selected the union entry of its block's bit. A union of at most 64
    // entries: a warp per 32 tile queries, a lane per query, each lane's chosen ranks in a 64-bit
    // mask, then a ballot per entry writes the group's word (no shared atomics: the per-entry ORs
    // of 128 queries held the builders longest, step 87). Larger unions: an OR per entry.
    const auto rank_of = [&](int bit) {
      const int w = bit >> 5;
      return s.word_base[w] + __popc(s.bitmap[w] & ((1u << (bit & 31)) - 1u));
    };
    if (list.size <= 64) {
      const int groups = (t.nq + 31) / 32;
      for (int g = warp; g < groups; g += kBuilderThreads / 32) {
        const int i = g * 32 + lane;
        std::uint64_t chosen = 0u;
        if (i < t.nq)
          for_each_batch(i, [&](const auto& bit, int) {
#pragma unroll
            for (int k = 0; k < kBatch; ++k)
              if (bit[k] >= 0) chosen |= std::uint64_t{1} << rank_of(bit[k]);  // rank < size <= 64
          });
        for (int r = 0; r < list.size; ++r) {
          const std::uint32_t word = __ballot_sync(0xffffffffu, ((chosen >> r) & 1u) != 0u);
          if (lane == 0) list.members[r][g] = word;
        }
      }
    } else {
      for (int i = bt; i < t.nq; i += kBuilderThreads)
        for_each_batch(i, [&](const auto& bit, int) {
#pragma unroll
          for (int k = 0; k < kBatch; ++k) {
            if (bit[k] < 0) continue;
            const int r = rank_of(bit[k]);
            if (r < kMaxEntries) atomicOr(&list.members[r][i >> 5], 1u << (i & 31));
          }
        });
    }
  }
  MSA_BUILD_STEP(kListed);
  // 7. Each entry's 16-token chunks on valid pages.
  for (int u = list.begin + bt; u < list.end; u += kBuilderThreads) {
    const std::int32_t key = list.block[u];
    const int seg = union_key::segment(key);
    list.chunks[u] = static_cast<std::uint8_t>(
        block_chunks(p.attn, list.seg_b[seg], union_key::block(key) * kBlockSize, list.seg_klen[seg]));
  }
  MSA_BUILD_STEP(kChunked);
  // 8. The loader's first chunk of box coordinates (its page-table reads, off its path to the
  // first K load), a lane of the last builder warp each.
  if (bt >= kBuilderThreads - 32) {
    const int l = bt - (kBuilderThreads - 32);
    list.first_coords[l] =
        chunk_box_coord(p.attn, list, list.end, list.begin, l, kv_box_rows, Traits::kBlockN / kv_box_rows);
  }
  // The scratch is free for the next tile once every builder is done reading it.
  named_barrier_sync(kBuilders, kBuilderThreads);
}

// Builds tile t's union into `list` (96 builder threads, bt = 0..95); each builder's mbarrier
// arrival afterwards publishes its writes to the loader and the consumers.
template <class Traits>
__device__ __forceinline__ void build_list(const TileUnionParams& p, const Tile& t, TileUnionStorage<Traits>& smem,
                                           typename TileUnionStorage<Traits>::List& list, int bt, int kv_box_rows) {
  if constexpr (Traits::kWideTiles)
    build_wide_list(p, t, smem, list, bt, kv_box_rows);
  else
    build_narrow_list(p, t, smem, list, bt);
}

// Where a Q box lands and the barrier its bytes complete on.
template <class Element>
struct QBoxDst {
  Element* to;
  std::uint64_t* bar;
};

// Issues tile t's Q boxes with TMA (one per query's heads and column half) from thread
// `thread` of `threads`: box (tile row r, column half c) to dst(r, c), a QBoxDst; padding rows
// get no data (their results are never stored). The caller arms the barriers.
template <class Traits, class Dst>
__device__ __forceinline__ void issue_q_boxes(const TileUnionParams& p, const PrefillTma& tma, const Tile& t,
                                              const Dst& dst, int thread, int threads) {
  const int group = p.attn.group;
  const int rows = t.nq * group;
  for (int r = thread; r < rows; r += threads) {
    if (r % tma.q_box_rows != 0) continue;
    const int qi = r / group;
    const int h = t.kv_head * group + (r - qi * group);
#pragma unroll
    for (int c = 0; c < Traits::kColHalves; ++c) {
      const auto d = dst(r, c);
      cute::SM90_TMA_LOAD_3D::copy(&tma.q, d.bar, static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST),
                                   d.to, c * Traits::kBoxCols, h, t.q0 + qi);
    }
  }
}

// Gathers tile t's Q rows into the Q buffer `sq`. Builder 0 arms `bar`. The wide instance's
// (at G > 1; at G = 1 its consumers gather Q): a box a column half (tma.q_wide; rows past the
// tile's are padding, loaded and never stored, and past total_q zeros), not a box a query
// (docs/performance.md steps 89 and 90).
template <class Traits>
__device__ __forceinline__ void load_q(const TileUnionParams& p, const PrefillTma& tma, const Tile& t,
                                       typename Traits::Element* sq, std::uint64_t* bar, int bt) {
  if constexpr (Traits::kWideTiles) {
    constexpr int kRowBytes = Traits::kBoxCols * static_cast<int>(sizeof(typename Traits::Element));
    if (bt == 0)
      Barrier64::arrive_and_expect_tx(
          bar, static_cast<std::uint32_t>(Traits::kColHalves * p.q_per_tile * p.attn.group * kRowBytes));
    if (bt < Traits::kColHalves)
      cute::SM90_TMA_LOAD_3D::copy(&tma.q_wide, bar, static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST),
                                   sq + Traits::q_box_offset(0, bt), bt * Traits::kBoxCols, t.kv_head * p.attn.group,
                                   t.q0);
    return;
  }
  if (bt == 0)
    Barrier64::arrive_and_expect_tx(
        bar, static_cast<std::uint32_t>(t.nq * p.attn.group * Traits::kHeadDim * sizeof(typename Traits::Element)));
  issue_q_boxes<Traits>(
      p, tma, t,
      [&](int r, int c) {
        return QBoxDst<typename Traits::Element>{sq + Traits::q_box_offset(r, c), bar};
      },
      bt, kBuilderThreads);
}

}  // namespace msa::cuda::prefill_sm90
