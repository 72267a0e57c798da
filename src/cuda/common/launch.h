// The kernel launches of the CUDA backend: cudaLaunchKernelEx with programmatic stream
// serialisation when asked (the kernel then calls wait_for_previous_grid() before reading what
// the previous kernel wrote), or as a cooperative grid (its CTAs resident together, so that it
// may sync grid-wide); errors surfaced as msa::Error.
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

// One launch with at most one attribute (attr null: none).
template <class... KernelArgs, class... Args>
void launch_with(void (*kernel)(KernelArgs...), const LaunchShape& shape, cudaStream_t stream,
                 cudaLaunchAttribute* attr, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.smem_bytes;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = attr != nullptr ? 1 : 0;
  MSA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...));
}

template <class... KernelArgs, class... Args>
void launch_pdl(void (*kernel)(KernelArgs...), const LaunchShape& shape, cudaStream_t stream, bool programmatic,
                Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  launch_with(kernel, shape, stream, programmatic ? &attr : nullptr, static_cast<Args&&>(args)...);
}

// The caller checks that the device holds every CTA of the grid at once.
template <class... KernelArgs, class... Args>
void launch_cooperative(void (*kernel)(KernelArgs...), const LaunchShape& shape, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  launch_with(kernel, shape, stream, &attr, static_cast<Args&&>(args)...);
}

}  // namespace msa::cuda
