// The skeleton both sm_90a prefill kernels share: the aligned shared-memory plan, barrier
// initialisation by one thread, the wait for the previous grid (programmatic dependent launch:
// the plan, top-k and batch may come from the kernel before), the register split and the warp
// roles, and the early start of the next grid (the combine, which still waits for this grid's
// writes).
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cute/arch/copy_sm90_desc.hpp>

#include "cuda/common/ptx.cuh"
#include "cuda/prefill/sm90/common/traits.h"

namespace msa::cuda::prefill_sm90 {

// The kernel of a variant: Params is its parameter struct (block_major/params.h,
// tile_union/params.h) and Storage its shared-memory plan (with an init() of its barriers); its
// kernel.cuh defines the roles as overloads on Params, found by argument-dependent lookup:
//   loader<Traits>(p, tma, smem)        warp 0
//   builders<Traits>(p, tma, smem)      warps 1-3
//   consumers<Traits>(p, tma, smem, ct) the two consumer warpgroups, ct = 0..255
template <class Traits, class Params, class Storage>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_kernel(const __grid_constant__ Params p, const __grid_constant__ PrefillTma tma) {
  extern __shared__ std::uint8_t smem_raw[];
  Storage& smem = aligned_smem<Storage>(smem_raw);
  const int tid = threadIdx.x;
  // The descriptors are kernel parameters, not the previous grid's output: fetching them now
  // takes a cold descriptor read off the first Q, K / V and O copies of a short grid.
  if (tid == 32) {
    cute::prefetch_tma_descriptor(&tma.q);
    cute::prefetch_tma_descriptor(&tma.k);
    cute::prefetch_tma_descriptor(&tma.v);
    cute::prefetch_tma_descriptor(&tma.o_partial);
    if constexpr (Traits::kWideTiles) cute::prefetch_tma_descriptor(&tma.q_wide);  // (set for it only)
  }
  if (tid == 0) {
    smem.init();
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  wait_for_previous_grid();
  if (tid < 128) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (tid < 32)
      loader<Traits>(p, tma, smem);
    else
      builders<Traits>(p, tma, smem);
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    consumers<Traits>(p, tma, smem, tid - 128);
  }
  allow_next_grid();
}

}  // namespace msa::cuda::prefill_sm90
