// Definition of the block-major launcher (declared in ../launch.h); included only by its
// generated instance files.
#pragma once

#include <cuda_runtime.h>

#include "core/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/per_device.h"
#include "cuda/prefill/sm90/block_major/kernel.cuh"
#include "cuda/prefill/sm90/common/checks.h"
#include "cuda/prefill/sm90/common/kernel.cuh"
#include "cuda/prefill/sm90/launch.h"

namespace msa::cuda {

namespace block_major_instance {
template <DType kDtype, int kHeadDim>
using Traits = prefill_sm90::Traits<kDtype, kHeadDim>;
template <DType kDtype, int kHeadDim>
using Storage = prefill_sm90::BlockMajorStorage<Traits<kDtype, kHeadDim>>;
template <DType kDtype, int kHeadDim>
constexpr auto* kKernel =
    prefill_sm90::prefill_kernel<Traits<kDtype, kHeadDim>, prefill_sm90::BlockMajorParams, Storage<kDtype, kHeadDim>>;
}  // namespace block_major_instance

// Sets the shared-memory attribute once per device and asks the occupancy calculator how many
// CTAs share an SM there.
template <DType kDtype, int kHeadDim>
int block_major_ctas_per_sm() {
  using namespace block_major_instance;
  constexpr std::size_t kSmem = prefill_sm90::smem_bytes<Storage<kDtype, kHeadDim>>();
  static_assert(kSmem <= 227 * 1024, "shared memory plan exceeds the sm_90 limit");
  static PerDevice<int> ctas;
  return ctas.get([] {
    MSA_CUDA_CHECK(cudaFuncSetAttribute(kKernel<kDtype, kHeadDim>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kSmem)));
    int n = 0;
    MSA_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel<kDtype, kHeadDim>, prefill_sm90::kThreads, kSmem));
    MSA_ASSERT(n >= 1);
    return n;
  });
}

template <DType kDtype, int kHeadDim>
void launch_block_major(const prefill_sm90::BlockMajorParams& p, const prefill_sm90::PrefillTma& tma, int sm_count,
                        cudaStream_t stream) {
  using namespace block_major_instance;
  prefill_sm90::assert_supported(p.attn);
  MSA_ASSERT(p.work != nullptr && p.work_count != nullptr && p.qsplit != nullptr);
  const int grid = sm_count * block_major_ctas_per_sm<kDtype, kHeadDim>();
  if (grid <= 0) return;
  launch_pdl(kKernel<kDtype, kHeadDim>,
             LaunchShape{dim3(static_cast<unsigned>(grid)), dim3(prefill_sm90::kThreads),
                         prefill_sm90::smem_bytes<Storage<kDtype, kHeadDim>>()},
             stream, /*programmatic=*/true, p, tma);
}

}  // namespace msa::cuda
