// Definition of the tile-union launcher (declared in ../launch.h); included only by its
// generated instance files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "core/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/per_device.h"
#include "cuda/prefill/sm90/common/checks.h"
#include "cuda/prefill/sm90/common/kernel.cuh"
#include "cuda/prefill/sm90/common/tma.h"
#include "cuda/prefill/sm90/launch.h"
#include "cuda/prefill/sm90/tile_union/kernel.cuh"

namespace msa::cuda {

namespace tile_union_detail {

// One kernel of an instance: its checks, its shared-memory attribute (once per device) and launch.
template <class Traits>
void launch_kernel(const prefill_sm90::TileUnionParams& p, const prefill_sm90::PrefillTma& tma, int sm_count,
                   cudaStream_t stream) {
  constexpr bool kWide = Traits::kWideTiles;
  using Storage = prefill_sm90::TileUnionStorage<Traits>;
  constexpr auto* kernel = prefill_sm90::prefill_kernel<Traits, prefill_sm90::TileUnionParams, Storage>;
  constexpr std::size_t smem = prefill_sm90::smem_bytes<Storage>();
  static_assert(Traits::kTileM == kTileUnionRows, "geometry.h describes this kernel's tile");
  static_assert(smem <= 227 * 1024, "shared memory plan exceeds the sm_90 limit");
  prefill_sm90::assert_supported(p.attn);
  // The tile's limits (geometry.h); the prefill and the decode choose their own q_per_tile within
  // them. A wide tile's union (up to kTileUnionMaxTileEntries top-k entries) is the caller's to
  // bound (tile_union_free_queries, wide_tiles_fit): its builders drop what would not fit. The wide instance runs
  // every tile of a prefill, unsplit.
  MSA_ASSERT(kWide == (p.q_per_tile > kTileUnionNarrowQueries) &&
             tile_union_tile_fits(p.q_per_tile, p.attn.group, p.attn.topk) && p.batch >= 1 &&
             p.tiles <= INT32_MAX / 2 && p.q_per_request >= 0 &&
             (p.q_per_request == 0 || p.attn.total_q == std::int64_t(p.batch) * p.q_per_request));
  MSA_ASSERT(!kWide || (p.tile_list == nullptr && p.splits == 1 && p.q_per_request == 0 && p.group_heads >= 1 &&
                        p.group_heads <= p.attn.h_kv));
  MSA_ASSERT(p.topk != nullptr && (p.tile_list == nullptr) == (p.tile_count == nullptr));
  MSA_ASSERT(p.splits >= 1 && p.splits <= p.attn.slots && (p.splits == 1 || p.tile_list == nullptr));
  MSA_ASSERT(p.direct ? (p.splits == 1 && p.attn.out != nullptr) : p.attn.o_partial != nullptr);  // final rows or slots
  if (p.tiles <= 0) return;
  // The shared-memory attribute, once per device.
  static PerDevice<bool> configured;
  configured.get([] {
    MSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  });
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(p.tiles, sm_count));
  launch_pdl(kernel, LaunchShape{dim3(grid), dim3(prefill_sm90::kThreads), smem}, stream, /*programmatic=*/true, p,
             tma);
}

}  // namespace tile_union_detail

template <DType kDtype, int kHeadDim, TileUnionUse kUse>
void launch_tile_union(const prefill_sm90::TileUnionParams& p, const prefill_sm90::PrefillTma& tma, int sm_count,
                       cudaStream_t stream) {
  using Base = prefill_sm90::Traits<kDtype, kHeadDim>;
  // The decode's instances skip blocks; its FP8 one (FP8 K/V are the decode's only) runs warp
  // consumers on mma.sync, as three kernels: the one with ways (warp_mma.cuh) where the plan
  // says a tile can take them (p.ways: at most kDecodeWayRows rows, splits that can hold two
  // ways' entries), the one that brings Q through the ring where the plan expects unions that
  // repeat blocks (p.q_in_ring), the plain one elsewhere.
  static_assert(!Base::kFp8Kv || kUse == TileUnionUse::kDecode);
  // (The geometry does not know the cache's dtype: the 16-bit instances ignore p.ways and
  // p.q_in_ring.)
  MSA_ASSERT(!Base::kFp8Kv || !p.ways || std::int64_t(p.q_per_tile) * p.attn.group <= kDecodeWayRows);
  MSA_ASSERT(!p.ways || !p.q_in_ring);
  if constexpr (Base::kFp8Kv) {
    using Fp8 = prefill_sm90::SkipBlocks<Base>;
    if (p.ways)
      tile_union_detail::launch_kernel<prefill_sm90::WarpMma<Fp8, true>>(p, tma, sm_count, stream);
    else if (p.q_in_ring)
      tile_union_detail::launch_kernel<prefill_sm90::WarpMma<Fp8, false, true>>(p, tma, sm_count, stream);
    else
      tile_union_detail::launch_kernel<prefill_sm90::WarpMma<Fp8, false>>(p, tma, sm_count, stream);
  } else {
    using Traits = std::conditional_t<kUse == TileUnionUse::kDecode, prefill_sm90::SkipBlocks<Base>,
                                      std::conditional_t<kUse == TileUnionUse::kWidePrefill,
                                                         prefill_sm90::RowCopies<prefill_sm90::WideTiles<Base>>, Base>>;
    if constexpr (kUse == TileUnionUse::kWidePrefill) {
      prefill_sm90::PrefillTma wide = tma;  // with the wide instance's Q boxes
      prefill_sm90::add_wide_q_boxes(wide, p.attn, kDtype, kHeadDim, p.q_per_tile);
      tile_union_detail::launch_kernel<Traits>(p, wide, sm_count, stream);
    } else {
      tile_union_detail::launch_kernel<Traits>(p, tma, sm_count, stream);
    }
  }
}

}  // namespace msa::cuda
