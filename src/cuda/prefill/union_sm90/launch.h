// Host entry of the sm_90a query-major tile-union sparse prefill kernel (BF16, D = 128).
#pragma once

#include "cuda/prefill/union_sm90/params.h"

typedef struct CUstream_st* cudaStream_t;

namespace msa::cuda {

// Queries per tile for a GQA group: the tile's rows (queries x group) fill the 128-row M tile,
// at most 16 queries (the union list's bound); core/tile_route.h's union_queries_per_tile.
int union_sm90_queries_per_tile(int group);

// Launches the persistent kernel over p.tiles (KV head, query tile) pairs, or those on
// p.tile_list: writes slot 0 of o_partial / lse_partial for every (query, head) row of the
// tiles it runs; the combine (split count 1 there) then produces out and lse. Launched with
// programmatic dependent launch allowed. Throws msa::Error for parameters the kernel does not
// support, before launching.
void launch_union_sm90(const UnionParams& p, int sm_count, cudaStream_t stream);

}  // namespace msa::cuda
