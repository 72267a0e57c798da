// Definition of the block-major launcher (declared in ../launch.h); included only by its
// generated instance files.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "core/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/per_device.h"
#include "cuda/prefill/sm90/block_major/kernel.cuh"
#include "cuda/prefill/sm90/common/checks.h"
#include "cuda/prefill/sm90/common/kernel.cuh"
#include "cuda/prefill/sm90/launch.h"

namespace msa::cuda {

namespace block_major_instance {
// TMA boxes, or thread copies of the Q and O rows (prefill_sm90::RowCopies).
template <DType kDtype, int kHeadDim, bool kRowCopies>
using Traits = std::conditional_t<kRowCopies, prefill_sm90::RowCopies<prefill_sm90::Traits<kDtype, kHeadDim>>,
                                  prefill_sm90::Traits<kDtype, kHeadDim>>;
template <DType kDtype, int kHeadDim, bool kRowCopies>
using Storage = prefill_sm90::BlockMajorStorage<Traits<kDtype, kHeadDim, kRowCopies>>;
template <DType kDtype, int kHeadDim, bool kRowCopies>
constexpr auto* kKernel =
    prefill_sm90::prefill_kernel<Traits<kDtype, kHeadDim, kRowCopies>, prefill_sm90::BlockMajorParams,
                                 Storage<kDtype, kHeadDim, kRowCopies>>;

// Sets the shared-memory attribute of one instance once per device and asks the occupancy
// calculator how many CTAs share an SM there.
template <DType kDtype, int kHeadDim, bool kRowCopies>
int ctas_per_sm() {
  constexpr std::size_t kSmem = prefill_sm90::smem_bytes<Storage<kDtype, kHeadDim, kRowCopies>>();
  static_assert(kSmem <= 227 * 1024, "shared memory plan exceeds the sm_90 limit");
  static PerDevice<int> ctas;
  return ctas.get([] {
    MSA_CUDA_CHECK(cudaFuncSetAttribute(kKernel<kDtype, kHeadDim, kRowCopies>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
    int n = 0;
    MSA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel<kDtype, kHeadDim, kRowCopies>,
                                                                 prefill_sm90::kThreads, kSmem));
    MSA_ASSERT(n >= 1);
    return n;
  });
}

template <DType kDtype, int kHeadDim, bool kRowCopies>
void launch(const prefill_sm90::BlockMajorParams& p, const prefill_sm90::PrefillTma& tma, int sm_count,
            cudaStream_t stream) {
  const int grid = sm_count * ctas_per_sm<kDtype, kHeadDim, kRowCopies>();
  if (grid <= 0) return;
  launch_pdl(kKernel<kDtype, kHeadDim, kRowCopies>,
             LaunchShape{dim3(static_cast<unsigned>(grid)), dim3(prefill_sm90::kThreads),
                         prefill_sm90::smem_bytes<Storage<kDtype, kHeadDim, kRowCopies>>()},
             stream, /*programmatic=*/true, p, tma);
}
}  // namespace block_major_instance

// Both instances have the same storage and thread count: one occupancy answers for both.
template <DType kDtype, int kHeadDim>
int block_major_ctas_per_sm() {
  return block_major_instance::ctas_per_sm<kDtype, kHeadDim, false>();
}

// Boxes of one and two rows (G = 1 and 2, and G not dividing 64) take the thread-copy
// instance; larger boxes TMA (docs/performance.md step 85).
template <DType kDtype, int kHeadDim>
void launch_block_major(const prefill_sm90::BlockMajorParams& p, const prefill_sm90::PrefillTma& tma, int sm_count,
                        cudaStream_t stream) {
  prefill_sm90::assert_supported(p.attn);
  MSA_ASSERT(p.work != nullptr && p.work_count != nullptr && p.qsplit != nullptr);
  if (tma.q_box_rows <= 2)
    block_major_instance::launch<kDtype, kHeadDim, true>(p, tma, sm_count, stream);
  else
    block_major_instance::launch<kDtype, kHeadDim, false>(p, tma, sm_count, stream);
}

}  // namespace msa::cuda
