// Definition of the combine launcher; included only by its instance files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/check.h"
#include "cuda/combine/kernel.cuh"
#include "cuda/combine/launch.h"
#include "cuda/common/launch.h"
#include "cuda/common/per_device.h"

namespace msa::cuda {

// The routed combine's grid: about this many CTAs per SM where the listed pairs are many (below).
inline constexpr std::int64_t kListedCtasPerSm = 32;

template <DType kDtype, int kHeadDim>
void launch_combine(const CombineParams& p, int sm_count, cudaStream_t stream, bool programmatic) {
  if (p.total_q == 0) return;  // nothing to merge (an empty out need not be aligned: check_layout)
  MSA_ASSERT(combine_params_ok(p));
  // The bulk kernel from kCombineBulkMinRows rows, where its spans in flight pay: 2-4 us longer
  // than the loads kernel at 300-512 queries (h_q 64), the same at 1024, 15-22 us shorter at
  // 2048, 25 us at S = 8k, 0.11 ms at 32k (docs/performance.md, step 80).
  const bool bulk = combine_bulk_applies(p, kHeadDim) &&
                    (p.kernel == CombineKernel::kBulk ||
                     (p.kernel == CombineKernel::kAuto && p.total_q * p.h_q >= kCombineBulkMinRows));
  // The prefill and decode kernels before it run with the largest shared-memory carve-out; the
  // same preference here spares the SMs a reconfiguration between the two grids (once per
  // instance and device). The bulk kernel's dynamic shared memory goes up to 32 slots' spans.
  static PerDevice<bool> configured;
  configured.get([] {
    MSA_CUDA_CHECK(cudaFuncSetAttribute(combine::combine_kernel<kDtype, kHeadDim>,
                                        cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
    MSA_CUDA_CHECK(cudaFuncSetAttribute(combine::combine_bulk_kernel<kDtype, kHeadDim>,
                                        cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
    MSA_CUDA_CHECK(cudaFuncSetAttribute(combine::combine_bulk_kernel<kDtype, kHeadDim>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(combine::bulk_smem_bytes(32, kHeadDim))));
    return true;
  });
  // Rows a CTA merges at a time (in turns, for a listed pair's CTA).
  const int unit_rows = bulk ? combine::BulkShape<kHeadDim>::kRows : combine::Lanes<kHeadDim>::kRowsPerCta;
  // Every row: a CTA per unit_rows rows. Listed pairs: pair_ctas CTAs per pair that could be
  // listed; those past the count leave at once (a persistent grid balanced the rows' unequal
  // slot counts worse: docs/performance.md, step 45). A pair's rounds of unit_rows rows are
  // serial in one CTA, so they are spread over up to one CTA per round until the grid has about
  // kListedCtasPerSm CTAs per SM: four were 2-4 us slower than sixteen at 171 new tokens (step
  // 62); 32 took 5-28 us off random and clustered S = 8k calls that route 64-97% of their tiles
  // against sixteen, and cost 6-7 us where every tile is routed and every CTA leaves at once
  // (tile-shared S = 8k; 64 cost 9-12 there: step 80).
  CombineParams q = p;
  std::int64_t ctas = (p.total_q * p.h_q + unit_rows - 1) / unit_rows;
  if (p.tile_list != nullptr) {
    const std::int64_t pairs = std::int64_t(p.h_q / p.group) * p.tiles_per_head;
    const std::int64_t rounds = (std::int64_t(p.q_per_tile) * p.group + unit_rows - 1) / unit_rows;
    if (q.pair_ctas == 0) {
      MSA_ASSERT(sm_count >= 1);
      q.pair_ctas = static_cast<int>(
          std::min(rounds, std::max<std::int64_t>(1, (kListedCtasPerSm * sm_count + pairs - 1) / pairs)));
    }
    q.pair_ctas = static_cast<int>(std::min<std::int64_t>(q.pair_ctas, std::max<std::int64_t>(1, INT_MAX / pairs)));
    ctas = pairs * q.pair_ctas;
  }
  if (bulk) {
    const LaunchShape shape{dim3(static_cast<unsigned>(ctas)), dim3(combine::kBulkThreads),
                            combine::bulk_smem_bytes(p.topk, kHeadDim)};
    launch_pdl(combine::combine_bulk_kernel<kDtype, kHeadDim>, shape, stream, programmatic, q);
    return;
  }
  const LaunchShape shape{dim3(static_cast<unsigned>(ctas)), dim3(combine::kThreads), 0};
  launch_pdl(combine::combine_kernel<kDtype, kHeadDim>, shape, stream, programmatic, q);
}

}  // namespace msa::cuda
