// Host entries of the two sm_90a sparse prefill kernels, one instance per (dtype, head dim) of
// the instantiation list (cmake/cuda_instances.cmake). Definitions: block_major/launch.cuh and
// tile_union/launch.cuh, included only by the generated instance files. `tma` is
// make_prefill_tma(p.attn, kDtype, kHeadDim) (common/tma.h): the two kernels share it. Both
// launch with programmatic dependent launch allowed: they wait for the previous kernel's writes
// before reading anything, and let the next kernel start early. The operator layer
// (src/cuda/api/prefill.cpp) has validated p; launchers only assert.
#pragma once

#include "cuda/prefill/sm90/block_major/params.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"
#include "cuda/prefill/sm90/tile_union/params.h"
#include "msa/tensor.h"

typedef struct CUstream_st* cudaStream_t;

namespace msa::cuda {

// KV-block-major: sm_count * block_major_ctas_per_sm() persistent CTAs loop over the work items
// up to *p.work_count (read on the device: the host never synchronises) and write o_partial /
// lse_partial for every (query, head) row of every item; other entries are left untouched.
template <DType kDtype, int kHeadDim>
void launch_block_major(const prefill_sm90::BlockMajorParams& p, const prefill_sm90::PrefillTma& tma, int sm_count,
                        cudaStream_t stream);

// Resident block-major CTAs per SM, from the occupancy calculator (1 by design).
template <DType kDtype, int kHeadDim>
int block_major_ctas_per_sm();

// The tile-union kernel's instances per (dtype, head dim): the prefill's narrow one (tiles of up
// to 32 queries, every tile or a routed list), its wide one (up to 128 queries, every tile:
// the plan-free calls at G <= 3; common/traits.h, WideTiles) and the decode's (narrow; its
// consumers skip blocks none of their rows chose; FP8 K/V only there).
enum class TileUnionUse { kPrefill, kWidePrefill, kDecode };

// Tile-union: min(p.tiles, sm_count) persistent CTAs over the (KV head, query tile) pairs, all
// or those on p.tile_list; writes slot 0 of o_partial / lse_partial for every (query, head) row
// of the tiles it runs (the combine, split count 1 there, produces out and lse).
template <DType kDtype, int kHeadDim, TileUnionUse kUse>
void launch_tile_union(const prefill_sm90::TileUnionParams& p, const prefill_sm90::PrefillTma& tma, int sm_count,
                       cudaStream_t stream);

}  // namespace msa::cuda
