// Definition of the tile-union launcher (declared in ../launch.h); included only by its
// generated instance files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <type_traits>
#ifdef MSA_CTA_STAMPS
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#endif

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

#ifdef MSA_CTA_STAMPS
// The probe's buffer for one instance, and its dump at exit: the last launch's stamps as text,
// a line a CTA (stamps.cuh's header, then each tile's fields).
template <class Traits>
struct StampProbe {
  static inline std::uint64_t* buffer = nullptr;
  static inline unsigned grid = 0;
  static void dump() {
    const char* base = std::getenv("MSA_CTA_STAMPS_FILE");
    if (base == nullptr || buffer == nullptr) return;
    const char* name = Traits::kWideTiles ? "wide" : (Traits::kSkipBlocks ? "decode" : "narrow");
    std::vector<std::uint64_t> h(std::size_t(grid) * prefill_sm90::stamps::kPerCta);
    if (cudaMemcpy(h.data(), buffer, h.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) return;
    FILE* f = std::fopen((std::string(base) + "." + name).c_str(), "w");
    if (f == nullptr) return;
    for (unsigned c = 0; c < grid; ++c) {
      for (int k = 0; k < prefill_sm90::stamps::kPerCta; ++k)
        std::fprintf(f, "%llu ",
                     static_cast<unsigned long long>(h[std::size_t(c) * prefill_sm90::stamps::kPerCta + k]));
      std::fprintf(f, "\n");
    }
    std::fclose(f);
  }
  static std::uint64_t* get(unsigned g, cudaStream_t stream) {
    if (std::getenv("MSA_CTA_STAMPS_FILE") == nullptr) return nullptr;
    if (buffer == nullptr) {
      // The first launch may be under graph capture (msa bench), where cudaMalloc is refused in
      // the default capture mode.
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      MSA_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
      MSA_CUDA_CHECK(cudaMalloc(&buffer, std::size_t(1024) * prefill_sm90::stamps::kPerCta * 8));
      MSA_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
      std::atexit(dump);
    }
    grid = g;
    MSA_CUDA_CHECK(cudaMemsetAsync(buffer, 0, std::size_t(g) * prefill_sm90::stamps::kPerCta * 8, stream));
    return buffer;
  }
};
#endif

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
#ifdef MSA_CTA_STAMPS
  MSA_ASSERT(grid <= 1024);
  prefill_sm90::TileUnionParams ps = p;
  ps.stamps = StampProbe<Traits>::get(grid, stream);
  launch_pdl(kernel, LaunchShape{dim3(grid), dim3(prefill_sm90::kThreads), smem}, stream, /*programmatic=*/true, ps,
             tma);
#else
  launch_pdl(kernel, LaunchShape{dim3(grid), dim3(prefill_sm90::kThreads), smem}, stream, /*programmatic=*/true, p,
             tma);
#endif
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
