// Definition of the combine launcher; included only by its instance files.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "core/check.h"
#include "cuda/combine/kernel.cuh"
#include "cuda/combine/launch.h"
#include "cuda/common/launch.h"
#include "cuda/common/per_device.h"

namespace msa::cuda {

template <DType kDtype, int kHeadDim>
void launch_combine(const CombineParams& p, cudaStream_t stream, bool programmatic) {
  if (p.total_q == 0) return;  // nothing to merge (an empty out need not be aligned: check_layout)
  MSA_ASSERT(combine_params_ok(p));
  // The prefill and decode kernels before it run with the largest shared-memory carve-out; the
  // same preference here spares the SMs a reconfiguration between the two grids (once per
  // instance and device).
  static PerDevice<bool> configured;
  configured.get([] {
    MSA_CUDA_CHECK(cudaFuncSetAttribute(combine::combine_kernel<kDtype, kHeadDim>,
                                        cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
    return true;
  });
  constexpr int kRowsPerCta = combine::Lanes<kHeadDim>::kRowsPerCta;
  // Every row: a CTA per kRowsPerCta rows. Listed pairs: a CTA per pair that could be listed;
  // those past the count leave at once (a persistent grid balanced the rows' unequal slot
  // counts worse: docs/performance.md, step 45).
  const std::int64_t ctas = p.tile_list != nullptr ? std::int64_t(p.h_q / p.group) * p.tiles_per_head
                                                   : (p.total_q * p.h_q + kRowsPerCta - 1) / kRowsPerCta;
  const LaunchShape shape{dim3(static_cast<unsigned>(ctas)), dim3(combine::kThreads), 0};
  launch_pdl(combine::combine_kernel<kDtype, kHeadDim>, shape, stream, programmatic, p);
}

}  // namespace msa::cuda
