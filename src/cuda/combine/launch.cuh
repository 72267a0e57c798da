// Definition of the combine launcher; included only by its instance files.
#pragma once

#include <cuda_runtime.h>

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
  constexpr int kLanes = kHeadDim / 8;
  const std::int64_t threads = p.total_q * p.h_q * kLanes;
  const std::int64_t ctas = (threads + combine::kThreads - 1) / combine::kThreads;
  const LaunchShape shape{dim3(static_cast<unsigned>(ctas)), dim3(combine::kThreads), 0};
  launch_pdl(combine::combine_kernel<kDtype, kHeadDim>, shape, stream, programmatic, p);
}

}  // namespace msa::cuda
