// Definition of the indexer launcher (declared in launch.h); included only by its generated
// instance files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "core/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/per_device.h"
#include "cuda/indexer/kernel.cuh"
#include "cuda/indexer/launch.h"

namespace msa::cuda {

template <DType kDtype, int kList>
void launch_indexer(const IndexerParams& p, const IndexerTma& tma, int sm_count, cudaStream_t stream) {
  using T = indexer_sm90::Traits<kDtype>;
  using Storage = indexer_sm90::Storage<T>;
  constexpr auto* kernel = indexer_sm90::indexer_kernel<T, kList>;
  constexpr std::size_t smem = prefill_sm90::smem_bytes<Storage>();
  static_assert(smem <= 227 * 1024, "shared memory plan exceeds the sm_90 limit");
  MSA_ASSERT(p.batch >= 1 && p.h_i >= 1 && p.h_i <= T::kTileRows && p.queries_per_tile == T::kTileRows / p.h_i);
  MSA_ASSERT(p.cols >= 1 && p.chunk_cols >= 1 && p.chunks == (p.cols + p.chunk_cols - 1) / p.chunk_cols);
  MSA_ASSERT(kList == 0 ? p.scores != nullptr
                        : p.topk != nullptr && p.k >= 1 && p.k <= kList + 1 && (p.chunks == 1 || p.partial != nullptr));
  if (p.total_q <= 0) return;
  static PerDevice<bool> configured;  // the shared-memory attribute, once per device
  configured.get([] {
    MSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  });
  // Units: at most chunks * (ceil(total_q / queries_per_tile) + B) (each request adds at most
  // one partial tile).
  const std::int64_t tiles = (p.total_q + p.queries_per_tile - 1) / p.queries_per_tile + p.batch;
  const auto grid = static_cast<unsigned>(std::min<std::int64_t>(tiles * p.chunks, sm_count));
  launch_pdl(kernel, LaunchShape{dim3(grid), dim3(indexer_sm90::kThreads), smem}, stream, /*programmatic=*/true, p,
             tma);
}

}  // namespace msa::cuda
