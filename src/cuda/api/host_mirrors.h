// Host-side helpers of the CUDA operator layer: host copies of device tensors for the checks
// that read values (strict mode), and staging copies of host tensors to the device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "msa/tensor.h"

namespace msa::cuda {

// Host copies of device tensors: each mirror is the addressed span of a validated view
// (strides >= 0), seen with the same strides. wait() makes them readable.
class HostMirrors {
 public:
  TensorView mirror(const TensorView& t, cudaStream_t stream);
  void wait(cudaStream_t stream);

 private:
  std::vector<std::vector<std::uint32_t>> buffers_;
};

// The same view, labelled as host memory: for checks that read only its metadata.
TensorView as_host(TensorView t);

// A rank-1 view whose elements are adjacent (the kernels read batch vectors that way).
bool contiguous_vector(const TensorView& t);

// Host -> device on `stream` from pageable memory: returns once the source is staged, so it may
// be freed right after.
void copy_to_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

// A host int32 [h, q, s] tensor to `dst` on the device, contiguous (packed first when strided).
void stage_int32_3d(const TensorView& t, std::int32_t* dst, cudaStream_t stream);

}  // namespace msa::cuda
