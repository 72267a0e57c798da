// Definition of the combine launcher; included only by its instance files.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "core/check.h"
#include "cuda/combine/kernel.cuh"
#include "cuda/combine/launch.h"
#include "cuda/common/launch.h"

namespace msa::cuda {

template <DType kDtype, int kHeadDim>
void launch_combine(const CombineParams& p, cudaStream_t stream, bool programmatic) {
  const auto aligned16 = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  MSA_ASSERT(p.topk >= 1 && p.topk <= 32 && p.uniform_count >= 1 && p.uniform_count <= p.topk && p.group >= 1 &&
             p.h_q >= 1 && p.h_q % p.group == 0 && p.total_q >= 0);
  MSA_ASSERT(aligned16(p.o_partial) && aligned16(p.out) && p.stride_out_token % 8 == 0 && p.stride_out_head % 8 == 0);
  MSA_ASSERT(p.tile_list == nullptr || (p.tile_count != nullptr && p.q_per_tile >= 1 && p.q_per_tile <= 32 &&
                                        p.tiles_per_head == (p.total_q + p.q_per_tile - 1) / p.q_per_tile &&
                                        (p.h_q / p.group) * p.tiles_per_head <= INT32_MAX / 2));
  if (p.total_q == 0) return;
  // The prefill and decode kernels before it run with the largest shared-memory carve-out; the
  // same preference here spares the SMs a reconfiguration between the two grids (once per
  // instance, thread-safe static initialisation).
  static const bool configured = [] {
    MSA_CUDA_CHECK(cudaFuncSetAttribute(combine::combine_kernel<kDtype, kHeadDim>,
                                        cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)configured;
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
