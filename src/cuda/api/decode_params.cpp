#include "cuda/api/decode_params.h"

#include <algorithm>
#include <climits>
#include <string>

#include "core/check.h"
#include "core/plan_encoding.h"
#include "cuda/api/prefill_params.h"
#include "cuda/combine/launch.h"
#include "cuda/common/workspace.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"

namespace msa::cuda {

// The split small calls' cost model counts their CTAs in the decode's waves.
static_assert(kSplitWaveCtas == kDecodeCtaTarget);

namespace {

// Whether so few pairs (one or two) that kDecodeMaxSplits splits each stay within kDecodeFewCtas CTAs.
bool few_pairs(std::int64_t pairs) { return pairs > 0 && pairs * kDecodeMaxSplits <= kDecodeFewCtas; }

// Whether one or two pairs of at most kDecodeMaxSplits entries may take a split per entry.
bool one_entry_splits(std::int64_t pairs, std::int64_t entries) {
  return few_pairs(pairs) && entries > 1 && entries <= kDecodeMaxSplits;
}

// Pairs and splits for tiles of q_per_tile queries (g.batch, g.q_per_request, g.total_q set).
// one_entry: a split per entry where the pairs are few and their union at most kDecodeMaxSplits
// entries (decode_geometry's last step), in place of decode_splits' count.
void tile_decode(DecodeGeometry& g, const AttentionShape& shape, int q_per_tile, std::int64_t max_seq_len,
                 bool one_entry = false) {
  g.q_per_tile = q_per_tile;
  g.pairs = std::int64_t(shape.h_kv) * ((g.total_q + q_per_tile - 1) / q_per_tile);
  // A pair's union holds at most (its queries) x min(topk, blocks of the longest request), and
  // at most (the requests its tile touches) x (their blocks); with no bound on seq_len (0:
  // sparse_decode()), assume requests of topk blocks or more.
  const std::int64_t blocks = max_seq_len > 0 ? (max_seq_len + kBlockSize - 1) / kBlockSize : shape.topk;
  int requests = 1;  // most requests a tile of q_per_tile rows meets (tiles and requests are aligned)
  for (int t = 0; t < g.q_per_request; ++t)
    requests =
        std::max(requests, (t * q_per_tile + q_per_tile - 1) / g.q_per_request - t * q_per_tile / g.q_per_request + 1);
  const std::int64_t choices =
      std::min<std::int64_t>(q_per_tile, g.total_q) * std::min<std::int64_t>(shape.topk, blocks);
  const std::int64_t entries = std::min(choices, std::int64_t(requests) * blocks);
  g.entries = entries;
  g.splits =
      one_entry && one_entry_splits(g.pairs, entries) ? static_cast<int>(entries) : decode_splits(g.pairs, entries);
  g.ways = tile_union_decode_ways(std::int64_t(q_per_tile) * shape.group(), entries, g.splits);
  // The repeats of a request's queries in a tile (without a bound on seq_len they are unknown:
  // the plain kernel).
  const int request_queries = std::min(g.q_per_request, q_per_tile);
  g.q_in_ring = !g.ways && max_seq_len > 0 &&
                tile_union_decode_q_in_ring(request_queries, std::min<std::int64_t>(shape.topk, blocks), blocks);
}

// Among tilings of equal splits, a CTA's work in entries: the entries of its share of the
// union, and 2 more where the CTAs pass half a wave (kDecodeFewCtas). Measured on tensor-parallel
// shapes (docs/performance.md step 70, B 1-16, L 100k): at equal splits 64 CTAs of 2 entries
// beat 128 of 1 by about 1 us, 128 CTAs of 4 beat 64 of 8 by about 2, and 64 of 2 beat 16 of 8
// by 9 (h_kv 1, B = 8, Q = 1: 26.9 -> 17.4 us), where the most queries per tile (main's tie
// break) had left a single pair's 16 splits of 8 entries.
std::int64_t split_cost(const DecodeGeometry& g) {
  const std::int64_t share = (g.entries + g.splits - 1) / g.splits;
  return share + (g.pairs * g.splits > kDecodeFewCtas ? 2 : 0);
}

}  // namespace

int decode_splits(std::int64_t pairs, std::int64_t entries) {
  const std::int64_t by_ctas = pairs > 0 ? kDecodeCtaTarget / pairs : 1;
  const std::int64_t most = few_pairs(pairs) && entries >= std::int64_t{kDecodeFewPairsMinEntries} * kDecodeMaxSplits
                                ? kDecodeMaxSplits
                                : kDecodePairSplits;
  return static_cast<int>(std::clamp<std::int64_t>(std::min(by_ctas, entries / kDecodeMinEntriesPerSplit), 1, most));
}

int prefill_union_splits(int h_kv, std::int64_t total_q, int q_per_tile, std::int64_t max_k_len, int topk) {
  const std::int64_t pairs = std::int64_t(h_kv) * tiles_per_head(total_q, q_per_tile);
  return std::min({decode_splits(pairs, (max_k_len + kBlockSize - 1) / kBlockSize), topk, kDecodePairSplits});
}

DecodeGeometry decode_geometry(const AttentionShape& shape, std::int64_t batch, int q_per_request,
                               std::int64_t max_seq_len) {
  DecodeGeometry g;
  g.batch = batch;
  g.q_per_request = q_per_request;
  g.total_q = batch * q_per_request;
  // Tiles as full as the M tile allows. Where that splits the pairs and a request has fewer
  // queries than a tile holds, tiles of fewer whole requests (m x Q queries) may split less:
  // requests share no block, so a tile of several only adds their unions up, and fewer splits
  // mean fewer partials and a lighter combine, or none (docs/performance.md, step 46). Such a
  // tiling is taken only within one wave of CTAs (pairs <= kDecodeCtaTarget: a CTA per tile):
  // the fewest splits; then the least work a CTA (split_cost); then the most queries per tile.
  const int full = tile_union_decode_queries(shape.group());
  tile_decode(g, shape, full, max_seq_len);
  for (int q = q_per_request; q_per_request > 0 && g.splits > 1 && q < full; q += q_per_request) {
    DecodeGeometry t = g;
    tile_decode(t, shape, q, max_seq_len);
    if (t.pairs > kDecodeCtaTarget) continue;
    const std::int64_t cost_t = split_cost(t), cost_g = split_cost(g);
    if (t.splits < g.splits || (t.splits == g.splits && (cost_t < cost_g || (cost_t == cost_g && q > g.q_per_tile))))
      g = t;
  }
  // Then one or two pairs of at most kDecodeMaxSplits entries take a split per entry: 2-12% faster
  // than 16 splits of up to two at Q = 2 and 3 on h_kv 1 and 2 (docs/performance.md, step 71;
  // h_kv 2 B = 1 L = 4000 in BF16 3-5% slower). Only after the tiling is chosen: as a tiling's own
  // count it made a fuller tile of fewer splits win the choice, 6-15% slower (two requests of
  // Q = 2 or 3 on 20-24 blocks at h_kv 1).
  if (one_entry_splits(g.pairs, g.entries) && g.splits < g.entries)
    tile_decode(g, shape, g.q_per_tile, max_seq_len, /*one_entry=*/true);
  MSA_REQUIRE(g.pairs * g.splits <= INT32_MAX / 2, "batch", std::to_string(batch),
              "the CUDA sparse decode numbers its tiles in 32 bits: h_kv * ceil(B * Q / " +
                  std::to_string(g.q_per_tile) + ") must be < 2^30");
  MSA_REQUIRE(std::int64_t(g.splits) * g.total_q <= INT32_MAX, "batch", std::to_string(batch),
              "the CUDA sparse decode needs splits * B * Q < 2^31 (32-bit TMA coordinates)");
  return g;
}

DecodeWorkspace decode_workspace(const AttentionShape& shape, const DecodeGeometry& g, void* base) {
  Arena arena = base != nullptr ? Arena(base) : Arena();
  DecodeWorkspace w;
  if (g.splits > 1) {  // one split: the kernel writes out and lse, no partials
    const auto rows =
        static_cast<std::size_t>(g.splits) * static_cast<std::size_t>(g.total_q) * static_cast<std::size_t>(shape.h_q);
    w.o_partial = arena.take_bytes(rows * static_cast<std::size_t>(shape.d) * 2);
    w.lse_partial = arena.take<float>(rows);
  }
  w.bytes = arena.bytes();
  return w;
}

void check_cuda_decode(const DecodeArgs& a) {
  const std::int64_t kv_extent = a.kv.k.dim(0);  // pages, or flat rows
  MSA_REQUIRE(kv_extent <= INT32_MAX, "k.shape[0]", std::to_string(kv_extent),
              "the CUDA sparse decode needs fewer than 2^31 K/V pages or rows (32-bit TMA coordinates)");
  MSA_REQUIRE(a.topk.stride[2] == 1, "topk.stride[2]", std::to_string(a.topk.stride[2]),
              "the CUDA sparse decode reads top-k rows with a contiguous last dim");
}

prefill_sm90::AttentionParams decode_attention_params(const AttentionShape& shape, const DecodeArgs& a,
                                                      const DecodeGeometry& g, const DecodeWorkspace& w) {
  prefill_sm90::AttentionParams p{};
  p.q = a.q.data;
  p.stride_q_token = a.q.stride[0];
  p.stride_q_head = a.q.stride[1];
  set_kv_params(p, a.kv);
  if (a.kv.k.dtype == DType::kFP8E4M3) {  // [1] or [h_kv] (validated)
    p.k_descale = a.k_descale.ptr<const float>();
    p.v_descale = a.v_descale.ptr<const float>();
    p.k_descale_stride = a.k_descale.dim(0) == 1 ? 0 : static_cast<int>(a.k_descale.stride[0]);
    p.v_descale_stride = a.v_descale.dim(0) == 1 ? 0 : static_cast<int>(a.v_descale.stride[0]);
  }
  p.cu_seqlens_q = nullptr;  // a uniform batch: the kernel finds request q / Q (TileUnionParams)
  p.k_len = a.seq_len.ptr<const std::int32_t>();
  p.o_partial = w.o_partial;
  p.lse_partial = w.lse_partial;
  p.slots = g.splits;
  if (g.splits == 1) {  // the rows are final: out and lse written by the kernel, sinks applied
    p.out = a.out.data;
    p.stride_out_token = a.out.stride[0];
    p.stride_out_head = a.out.stride[1];
    p.lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
    p.sinks = a.sinks.present() ? a.sinks.ptr<const float>() : nullptr;
  }
  p.total_q = g.total_q;
  p.h_q = shape.h_q;
  p.h_kv = shape.h_kv;
  p.group = shape.group();
  p.topk = shape.topk;
  p.scale_log2 = shape.softmax_scale() * kLog2e;
  return p;
}

prefill_sm90::TileUnionParams decode_tile_union_params(const prefill_sm90::AttentionParams& attn,
                                                       const DecodeArgs& a, const DecodeGeometry& g) {
  prefill_sm90::TileUnionParams u{};
  u.attn = attn;
  u.topk = a.topk.ptr<const std::int32_t>();
  // [B * Q, h_kv, topk] (the MSA decode layout) or [h_kv, B * Q, topk].
  u.stride_topk_head = a.topk_head_major ? a.topk.stride[0] : a.topk.stride[1];
  u.stride_topk_token = a.topk_head_major ? a.topk.stride[1] : a.topk.stride[0];
  u.batch = static_cast<int>(g.batch);
  u.q_per_request = g.q_per_request;
  u.q_per_tile = g.q_per_tile;
  u.splits = g.splits;
  u.ways = g.ways;
  u.q_in_ring = g.q_in_ring;
  u.direct = g.splits == 1;
  u.tiles = g.pairs * g.splits;
  u.group_heads = attn.h_kv;  // tile_of_rank's order (the decode's instances keep it anyway)
  u.prefetch_blocks = kTileUnionPrefetchBlocks;
  return u;
}

CombineParams decode_combine_params(const AttentionShape& shape, const DecodeArgs& a, const DecodeGeometry& g,
                                    const DecodeWorkspace& w) {
  CombineParams c{};
  c.o_partial = w.o_partial;
  c.lse_partial = w.lse_partial;
  c.split_counts = nullptr;
  c.sinks = a.sinks.present() ? a.sinks.ptr<const float>() : nullptr;
  c.out = a.out.data;
  c.stride_out_token = combine_out_stride(a.out, 0);
  c.stride_out_head = combine_out_stride(a.out, 1);
  c.lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
  c.total_q = g.total_q;
  c.h_q = shape.h_q;
  c.group = shape.group();
  c.topk = g.splits;
  c.uniform_count = g.splits;
  c.out_fp16 = a.out.dtype == DType::kFP16;
  return c;
}

}  // namespace msa::cuda
