// The bitmap path's kernels (K2qPath::kBitmap; launched by build_k2q_device, k2q_device.cu, the
// one file that includes this). The general path's launch sequence with its two per-entry passes
// replaced by bit sets: a unit is a request's queries in one 32-aligned window of the packed
// queries (kBitmapQPerUnit), one bit each, so a unit's edges on one block are one 32-bit word,
// and both the counting and the placing work on words rather than on top-k entries.
//
//   1. row map     the general path's (k2q_kernels.cuh), with the aligned units (unit_aligned);
//                  under PrefillPath::kAuto, when the tile size divides 32, its routing CTAs
//                  route only the tiles that span requests (route_cta, spanning_only): every other
//                  tile lies inside one unit, whose bits kernel routes it.
//   2. bits        a CTA of kBitsWarps units, one warp per (unit, KV head): every top-k id of
//                  the unit's queries sets its query's bit in a shared-memory word per block
//                  (duplicates fall away; the queries of tiles routed in step 1 load nothing);
//                  then the unit routes its own tiles by the rule from the words (fold_tile_out:
//                  a tile's union is the blocks with a bit of its queries, its edges those bits)
//                  and clears the routed tiles' bits; the words go to unit_bits [h_kv, units,
//                  max_blocks] in one coalesced row, up to the last non-empty one (the unit's
//                  extent, to unit_extent). Then each segment of the CTA (its units of
//                  one request) sums its words' bits per block into unit_counts, at the row of
//                  the segment's first unit.
//   3. unit prefix the general path's over the segments' rows (k2q_unit_prefix_kernel<true>):
//                  each segment's row gets the segment's first place in each block's row, a
//                  kBitsWarps-th of the rows the prefix would read and write per unit.
//      flat scan, finalize: the general path's.
//   4. walk        CTAs of kBitmapWarps units (whole segments), one warp per (unit, KV head):
//                  the unit's blocks up to its extent in ascending order, 32 words a round, lane
//                  l holding block l0 + l's word. A unit's first place in a block's row is its
//                  segment's plus the bits of the segment's lower warps' words there (shared
//                  memory, a CTA barrier a round). A word's set bits go, ascending, to
//                  neighbouring places from there (so every row is q-ascending, as the host
//                  writes it); a bit's slot is its query's set bits at lower blocks (its kept ids
//                  below this one), which lane q counts: its final count is the query's split
//                  count. A round is placed a word a step (dense words) or a bit of every lane's
//                  word a step, the slots then read from the round's words transposed (sparse
//                  words). A CTA of its own lists the routed tiles beside the walk (their flags
//                  are all written by then).
//   5. finish      the general path's qsplit tail.
//
// Where it fits (k2q_bitmap_fits: requests of at most kBitmapMaxBlocks blocks) the words of a
// unit are at most four times its top-k entries at K = 16 (fewer up to its extent), and the
// general path's count and scatter, which analyse every entry twice (a warp match, segment
// shuffles, a scattered 4-byte store per entry), become a load and a shared-memory OR per entry
// and a store per (word, set bit) with the word's bits in neighbouring places.
#pragma once

#include <cstdint>

#include "core/plan_encoding.h"
#include "cuda/plan/k2q_kernels.cuh"
#include "cuda/plan/k2q_params.h"

namespace msa::cuda::k2q {

// Top-k passes loaded together in the bits kernel (a unit's K' passes, up to 32).
inline constexpr int kBitmapPassBatch = 8;
// The walk's CTAs per SM (its launch bound) and the ranks per thread and round of the list CTA
// it carries: the list's code had taken the walk to 80 registers, 3 CTAs an SM.
inline constexpr int kWalkCtasPerSm = 8;
inline constexpr int kWalkListItems = 8;
// The walk places a round's bits by lane where the fullest word's bits times this are at most
// the round's non-empty words (and the words hold few bits on average: lane_max_bits), by word
// otherwise (k2q_walk_kernel). lane_max_bits: any (a walk of one wave, bound by its steps) or
// two bits a non-empty word (a longer walk, bound by the instructions of all its warps, where
// by lane's extra ones cost; docs/performance.md steps 66, 67).
inline constexpr int kWalkLaneStepRatio = 4;
inline constexpr int kWalkLaneAnyBits = 32;
inline constexpr int kWalkLaneMaxBitsBeyondWave = 2;

// ---- stage 2: per-unit bit words ------------------------------------------------------------

// One warp's unit u: its words in s_bits (routed tiles' bits cleared) and, up to its last
// non-empty one, in unit_bits; that extent in unit_extent.
__device__ __forceinline__ void unit_words(const BuildParams& p, int h, int u, const Unit& unit, std::uint32_t* s_bits,
                                           int lane) {
  for (int l = lane; l < unit.blocks; l += 32) s_bits[l] = 0u;
  const int n_q = unit.q_end - unit.q_begin;  // 1..32
  // Tiles inside this unit, [t_first, t_end), when it routes them itself (fold_tile_out): the
  // ones that start at or after q_begin and end by q_end (the last tile ends at total_q).
  const bool fold = p.fold_tile_out != nullptr;  // kernel-uniform
  const int qpt = p.route_q_per_tile;
  const int t_first = fold ? (unit.q_begin + qpt - 1) / qpt : 0;
  const int t_end = !fold ? 0 : unit.q_end == p.total_q ? (unit.q_end + qpt - 1) / qpt : unit.q_end / qpt;
  // The other routed queries (their tiles go to the tile-union kernel) set no bit.
  const int q_lane = unit.q_begin + lane;
  const bool own_tile = q_lane / qpt >= t_first && q_lane / qpt < t_end;
  const unsigned routed = __ballot_sync(kFullMask, lane < n_q && !own_tile && routed_row(p, h, q_lane));
  __syncwarp();

  // Pass k holds queries k * (32 / K') .. of the unit, K' lanes each (lane s of a segment: slot s).
  const std::int32_t* g_topk_head = p.topk_ids + h * p.stride_topk_head;
  const int seg = lane >> p.log_topk_pow2;
  const int s = lane & (p.topk_pow2 - 1);
  const int q_per_pass = 32 >> p.log_topk_pow2;
  const int passes = (n_q + q_per_pass - 1) / q_per_pass;
  for (int k0 = 0; k0 < passes; k0 += kBitmapPassBatch) {
    int ids[kBitmapPassBatch];
#pragma unroll
    for (int k = 0; k < kBitmapPassBatch; ++k) {
      const int q_l = (k0 + k) * q_per_pass + seg;
      const bool load = q_l < n_q && s < p.topk && ((routed >> q_l) & 1u) == 0u;
      ids[k] = load ? __ldg(g_topk_head + static_cast<std::int64_t>(unit.q_begin + q_l) * p.stride_topk_token + s) : -1;
    }
#pragma unroll
    for (int k = 0; k < kBitmapPassBatch; ++k) {
      const int q_l = (k0 + k) * q_per_pass + seg;
      if (ids[k] >= 0 && ids[k] < unit.blocks) atomicOr(&s_bits[ids[k]], 1u << q_l);
    }
  }
  __syncwarp();  // shared-memory atomics visible to every lane

  // The unit's own tiles routed by the rule (route_tile's counts, from the words): the tile's
  // union is its blocks with a bit of the tile's queries, its edges those bits. A routed tile's
  // bits are cleared.
  std::uint32_t cleared = 0u;
  for (int t = t_first; t < t_end; ++t) {  // warp-uniform
    const int lo = t * qpt - unit.q_begin;
    const int hi = min(t * qpt + qpt, p.total_q) - unit.q_begin;  // <= n_q
    const std::uint32_t mask = (hi - lo == 32 ? kFullMask : ((1u << (hi - lo)) - 1u)) << lo;
    unsigned unions = 0, edges = 0;
    for (int l = lane; l < unit.blocks; l += 32) {
      const std::uint32_t w = s_bits[l] & mask;
      unions += w != 0u ? 1u : 0u;
      edges += __popc(w);
    }
    unions = __reduce_add_sync(kFullMask, unions);
    edges = __reduce_add_sync(kFullMask, edges);
    const bool wins = union_path_wins(unions, edges, p.route_group);
    if (lane == 0) p.fold_tile_out[static_cast<std::int64_t>(h) * p.route_per_head + t] = wins ? 1 : 0;
    if (wins) cleared |= mask;
  }

  int last = -1;  // the unit's last block with a bit
  for (int l = lane; l < unit.blocks; l += 32) {
    const std::uint32_t w = s_bits[l] & ~cleared;
    s_bits[l] = w;
    if (w != 0u) last = l;
  }
  const int extent = __reduce_max_sync(kFullMask, last) + 1;
  __syncwarp();
  std::uint32_t* g_bits = p.unit_bits + (static_cast<std::int64_t>(h) * p.max_units + u) * p.max_blocks;
  for (int l = lane; l < extent; l += 32) g_bits[l] = s_bits[l];
  if (lane == 0) p.unit_extent[static_cast<std::int64_t>(h) * p.max_units + u] = extent;
}

// A CTA's kBitsWarps units, a warp each; then each segment of them (the units of one request)
// sums its words' bits per block into unit_counts at its first unit's row, for the unit prefix.
__global__ void __launch_bounds__(kBitsWarps * 32) k2q_bits_kernel(const BuildParams p) {
  extern __shared__ std::uint32_t s_words[];  // [kBitsWarps, max_blocks]
  __shared__ int s_seg[kBitsWarps];           // the segment's row of each warp's unit (-1: none)
  __shared__ int s_blocks[kBitsWarps];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int h = blockIdx.y;
  const int cta_unit = static_cast<int>(blockIdx.x) * kBitsWarps;
  const int u = cta_unit + warp;
  int seg = -1, blocks = 0;
  if (u < p.unit_start[p.batch]) {        // warp-uniform
    const Unit unit = locate_unit(p, u);  // q_per_unit = 32: at most one bit per lane
    unit_words(p, h, u, unit, s_words + static_cast<std::int64_t>(warp) * p.max_blocks, lane);
    seg = max(cta_unit, p.unit_start[unit.b]);
    blocks = unit.blocks;
  }
  if (lane == 0) {
    s_seg[warp] = seg;
    s_blocks[warp] = blocks;
  }
  __syncthreads();
  for (int w0 = 0; w0 < kBitsWarps; ++w0) {  // CTA-uniform
    const int row = s_seg[w0];
    if (row < 0 || (w0 > 0 && s_seg[w0 - 1] == row)) continue;
    int w1 = w0 + 1;
    while (w1 < kBitsWarps && s_seg[w1] == row) ++w1;
    std::int32_t* g_sum = p.unit_counts + (static_cast<std::int64_t>(h) * p.max_units + row) * p.max_blocks;
    for (int l = static_cast<int>(threadIdx.x); l < s_blocks[w0]; l += kBitsWarps * 32) {
      int c = 0;
      for (int w = w0; w < w1; ++w) c += __popc(s_words[static_cast<std::int64_t>(w) * p.max_blocks + l]);
      g_sum[l] = c;
    }
  }
}

// The 32 x 32 bit matrix whose row l is lane l's word, transposed: lane q gets the word whose
// bit l is bit q of lane l's word. Five butterfly stages; stage j swaps the (row bit j, column
// bit j) halves between lanes l and l ^ j.
__device__ __forceinline__ std::uint32_t transpose_bits32(std::uint32_t x, int lane) {
  constexpr std::uint32_t kLow[5] = {0x0000ffffu, 0x00ff00ffu, 0x0f0f0f0fu, 0x33333333u, 0x55555555u};
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    const int j = 16 >> k;
    const std::uint32_t y = __shfl_xor_sync(kFullMask, x, j);
    x = (lane & j) == 0 ? (x & kLow[k]) | ((y & kLow[k]) << j) : (x & ~kLow[k]) | ((y & ~kLow[k]) >> j);
  }
  return x;
}

// ---- stage 4: the walk ----------------------------------------------------------------------

// list_ctas (0 or 1): a first column of CTAs, whose CTA (0, 0) lists the routed tiles
// (compact_route_list) beside the walk, and the others return. lane_max_bits: the most bits a
// non-empty word may hold on average in a round placed by lane.
__global__ void __launch_bounds__(kBitmapWarps * 32, kWalkCtasPerSm)
    k2q_walk_kernel(const BuildParams p, int list_ctas, int lane_max_bits) {
  __shared__ typename cub::BlockScan<int, kBitmapWarps * 32>::TempStorage list_scan;
  if (static_cast<int>(blockIdx.x) < list_ctas) {  // CTA-uniform
    if (blockIdx.y == 0)
      compact_route_list<kBitmapWarps * 32, kWalkListItems>(p.union_tile, p.route_per_head, p.h_kv, p.union_list,
                                                            p.union_count, p.combine_list, p.combine_count, list_scan);
    return;
  }
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int h = blockIdx.y;
  const int cta_unit = (static_cast<int>(blockIdx.x) - list_ctas) * kBitmapWarps;
  const int u = cta_unit + warp;
  // Every warp takes the CTA's rounds (a barrier each), a warp without a unit with no words.
  __shared__ int s_rounds[kBitmapWarps];
  __shared__ int s_pop[2][kBitmapWarps][32];                         // a round's words' bits per warp (double-buffered)
  const bool live = u < p.unit_start[p.batch];                       // warp-uniform
  const Unit unit = live ? locate_unit(p, u) : Unit{0, 0, 0, 0, 0};  // blocks 0: no word
  // The unit's segment (the CTA's units of its request): its row of unit_counts holds the
  // segment's first place in each block's row; the segment's lower warps' bits come before.
  const int seg_row = live ? max(u - u % kBitsWarps, p.unit_start[unit.b]) : u;
  const int seg_warp = seg_row - cta_unit;
  const std::int64_t unit_off = (static_cast<std::int64_t>(h) * p.max_units + u) * p.max_blocks;
  const std::uint32_t* g_bits = p.unit_bits + unit_off;
  const std::int32_t* g_first = p.unit_counts + (static_cast<std::int64_t>(h) * p.max_units + seg_row) * p.max_blocks;
  const std::int32_t* g_row_of = p.row_of + static_cast<std::int64_t>(unit.b) * p.max_blocks;
  const std::int32_t* g_row_ptr = p.row_ptr + static_cast<std::int64_t>(h) * (p.max_rows + 1);
  std::int32_t* g_qsplit = p.qsplit + static_cast<std::int64_t>(h) * p.edges_per_head;
  const unsigned lanes_below = (1u << lane) - 1u;
  int kept = 0;  // query lane's set bits so far: the slot of its next edge
  // Words past the unit's extent are not read (nor written): they are empty.
  const int extent = live ? p.unit_extent[static_cast<std::int64_t>(h) * p.max_units + u] : 0;
  if (lane == 0) s_rounds[warp] = (extent + 31) / 32;
  __syncthreads();
  int rounds = 0;
  for (int w = 0; w < kBitmapWarps; ++w) rounds = max(rounds, s_rounds[w]);

  // 32 blocks a round: lane l holds block l0 + l's word, row and the segment's first place in
  // the row (loaded a round ahead); only the row's start waits on them.
  std::uint32_t word = 0u;
  int row = 0, first = 0;
  if (lane < extent) {
    word = g_bits[lane];
    row = g_row_of[lane];
    first = g_first[lane];
  }
  const int q_local0 = unit.q_begin - unit.q_request;  // the unit's first query, request-local
  for (int r = 0; r < rounds; ++r) {
    const int level = r * 32 + lane;
    s_pop[r & 1][warp][lane] = __popc(word);
    __syncthreads();
    for (int w = seg_warp; w < warp; ++w) first += s_pop[r & 1][w][lane];
    const int place0 = word != 0u ? g_row_ptr[row] + first : 0;
    std::uint32_t next_word = 0u;
    int next_row = 0, next_first = 0;
    if (level + 32 < extent) {
      next_word = g_bits[level + 32];
      next_row = g_row_of[level + 32];
      next_first = g_first[level + 32];
    }
    // Two ways to place a round's bits, chosen per round (warp-uniform) by their step counts:
    // - by word: a step per non-empty word, whose set lanes (queries) write the word's bits at
    //   neighbouring places, each lane's slot its own kept count. One store a word: best where
    //   words hold many bits.
    // - by lane: lane l writes its own word's bits, one per step in ascending query order; query
    //   q's slot is its kept count plus its bits at lower blocks of this round, read from the
    //   round's words transposed (lane q: bit l = query q's bit of block l0 + l). As many steps
    //   as the fullest word has bits, a store per bit: best where a walk of one wave waits on
    //   its steps, and where most words hold one or two bits (long requests, chunks on long
    //   prefixes), whose step per word would store a bit or two.
    const unsigned nonempty = __ballot_sync(kFullMask, word != 0u);
    const int word_steps = __popc(nonempty);
    const int lane_steps = __reduce_max_sync(kFullMask, __popc(word));
    const int bits = __reduce_add_sync(kFullMask, __popc(word));
    if (lane_steps * kWalkLaneStepRatio > word_steps || bits > word_steps * lane_max_bits) {  // warp-uniform
      unsigned todo = nonempty;
      while (todo != 0u) {
        const int src = __ffs(todo) - 1;
        todo &= todo - 1u;
        const std::uint32_t w = __shfl_sync(kFullMask, word, src);
        const int place = __shfl_sync(kFullMask, place0, src) + __popc(w & lanes_below);
        if ((w >> lane) & 1u) {
          if (place >= 0 && place < p.edges_per_head) g_qsplit[place] = qsplit::encode(q_local0 + lane, kept);
          ++kept;
        }
      }
    } else if (lane_steps != 0) {
      const std::uint32_t col = transpose_bits32(word, lane);
      std::uint32_t rest = word;
      for (int i = 0; i < lane_steps; ++i) {
        const int q = rest != 0u ? __ffs(rest) - 1 : 0;
        const std::uint32_t q_col = __shfl_sync(kFullMask, col, q);
        const int q_kept = __shfl_sync(kFullMask, kept, q);
        if (rest != 0u) {
          const int place = place0 + i;
          const int slot = q_kept + __popc(q_col & lanes_below);
          if (place >= 0 && place < p.edges_per_head) g_qsplit[place] = qsplit::encode(q_local0 + q, slot);
        }
        rest &= rest - 1u;
      }
      kept += __popc(col);
    }
    word = next_word;
    row = next_row;
    first = next_first;
  }
  const int q = unit.q_begin + lane;
  if (live && q < unit.q_end)
    p.split_counts[static_cast<std::int64_t>(q) * p.h_kv + h] = routed_row(p, h, q) ? 1 : kept;
}

}  // namespace msa::cuda::k2q
