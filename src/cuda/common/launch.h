// The one kernel launch of the CUDA backend: cudaLaunchKernelEx with programmatic stream
// serialisation when asked (the kernel then calls wait_for_previous_grid() before reading what
// the previous kernel wrote), errors surfaced as msa::Error.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/common/check.h"

namespace msa::cuda {

struct LaunchShape {
  dim3 grid;
  dim3 block;
  std::size_t smem_bytes = 0;
};

template <class... KernelArgs, class... Args>
void launch_pdl(void (*kernel)(KernelArgs...), const LaunchShape& shape, cudaStream_t stream, bool programmatic,
                Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.smem_bytes;
  config.stream = stream;
  config.attrs = programmatic ? &attr : nullptr;
  config.numAttrs = programmatic ? 1 : 0;
  MSA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...));
}

}  // namespace msa::cuda
