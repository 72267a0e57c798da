// Runtime parameters of the query-major tile-union sparse prefill kernel (sm_90a).
// Shapes in brackets; strides in elements.
#pragma once

#include <cstdint>

#include "cuda/prefill/sm90/common/params.h"

namespace msa::cuda::prefill_sm90 {

struct TileUnionParams {
  // Every (query, head) row of a tile it runs gets its normalised result over the tile's union
  // (or over split s of it) in slot s of o_partial / lse_partial; the combine (split count 1 for
  // those rows, or `splits` for all rows with null split_counts) applies sinks and writes out /
  // lse. With `direct` the rows are final instead: out and lse directly, sink applied.
  AttentionParams attn;
  bool direct;  // splits == 1 only: write attn's out (PrefillTma::out) / lse with attn.sinks
  const std::int32_t* topk;  // [h_kv, total_q, topk], last dim contiguous
  std::int64_t stride_topk_head;
  std::int64_t stride_topk_token;
  int batch;                       // B >= 1: cu_seqlens_q has B + 1 entries
  int q_per_request;               // > 0: a uniform batch (the decode's), request b holding
                                   // queries [b q_per_request, (b + 1) q_per_request); the
                                   // kernel then reads no cu_seqlens_q. 0: varlen
  int q_per_tile;                  // tile_union_queries_per_tile(group, topk); the decode's:
                                   // tile_union_decode_queries(group), or m x Q (decode_geometry)
  bool ways;                       // the decode's FP8 instance: its kernel with ways (warp_mma.cuh;
                                   // DecodeGeometry::ways); the other instances ignore it
  bool q_in_ring;                  // the decode's FP8 instance, without ways: its kernel that
                                   // brings Q through the ring (DecodeGeometry::q_in_ring)
  int splits;                      // 1..attn.slots: each (KV head, query tile) pair runs as this
                                   // many tiles, split s taking union entries [n s / splits,
                                   // n (s + 1) / splits) and writing slot s (split-KV decode);
                                   // 1 for the prefill
  std::int64_t tiles;              // h_kv * ceil(total_q / q_per_tile) * splits: tile = pair *
                                   // splits + s, pairs numbered head-major
  const std::int32_t* tile_list;   // PrefillPath::kAuto: the tiles to run in rank order
  const std::int32_t* tile_count;  //   (tile_of_rank), the first *tile_count of [tiles]; null:
                                   //   every tile
  int group_heads;                 // without a list: tiles in the order of tile_of_rank_grouped
                                   // over groups of this many KV heads (1..h_kv; h_kv: tile_of_rank)
  int prefetch_blocks;             // a CTA's first tile: how many of the blocks its split likely
                                   // starts with are asked of L2 while the list is built (0: none;
                                   // kTileUnionPrefetchBlocks for the decode and split calls)
#ifdef MSA_CTA_STAMPS
  std::uint64_t* stamps;  // the probe's (stamps.cuh): [grid][stamps::kPerCta], or null
#endif
};

}  // namespace msa::cuda::prefill_sm90
