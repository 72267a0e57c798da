// From validated prefill arguments to the kernels' parameters (src/cuda/prefill/sm90/*/params.h),
// and the limits of the CUDA prefill that the shared validation (core/validate.h) does not know.
#pragma once

#include <cstdint>

#include "cuda/api/prefill_workspace.h"
#include "cuda/prefill/sm90/block_major/params.h"
#include "cuda/prefill/sm90/tile_union/params.h"
#include "msa/prefill.h"

namespace msa::cuda {

// The CUDA prefill's own limits, named by argument: the 32-bit TMA coordinates (topk * total_q
// rows of o_partial, K/V pages or rows). Call after validate_prefill.
void check_cuda_prefill(const AttentionShape& shape, const PrefillArgs& a, std::int64_t total_q);

// The K/V fields of AttentionParams (paged or flat), shared with the decode (decode_params.h).
void set_kv_params(prefill_sm90::AttentionParams& p, const KvCache& kv);

// The attention problem of one run(): a's tensors (device-resident batch) and w's partials.
prefill_sm90::AttentionParams attention_params(const AttentionShape& shape, const PrefillArgs& a, std::int64_t total_q,
                                               const PrefillWorkspace& w);

// The tile-union kernel over every tile (list null; in the order of tile_of_rank_grouped over
// groups of group_heads KV heads) or the routed tiles, q_per_tile queries a tile (the routed
// tiles': tile_union_queries_per_tile).
prefill_sm90::TileUnionParams tile_union_params(const prefill_sm90::AttentionParams& attn, const PrefillArgs& a,
                                                std::int64_t batch, int q_per_tile, int group_heads,
                                                const std::int32_t* tile_list, const std::int32_t* tile_count);

// The block-major kernel over the plan's work items.
prefill_sm90::BlockMajorParams block_major_params(const prefill_sm90::AttentionParams& attn, const PrefillWorkspace& w);

}  // namespace msa::cuda
