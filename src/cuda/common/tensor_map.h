// Host-side TMA descriptors (CUtensorMap) for 16-bit and FP8 tensors with a 128-byte swizzle.
//
// The encoder is the driver's cuTensorMapEncodeTiled, fetched through the runtime's
// cudaGetDriverEntryPointByVersion so that nothing links libcuda directly: binaries still
// start on machines without a GPU driver (the CPU-only CI runs the same test binaries).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "msa/tensor.h"

namespace msa::cuda {

// One dimension of a tensor map, innermost first: `size` elements, `stride_bytes` between
// consecutive indices (ignored for dimension 0, which must be contiguous), `box` elements
// copied per TMA operation.
struct TensorMapDim {
  std::uint64_t size;
  std::uint64_t stride_bytes;
  std::uint32_t box;
};

// Encodes a tiled tensor map of `dtype` elements (bf16, fp16, or fp8_e4m3 copied as bytes; rank
// 1..5) at `base` with SWIZZLE_128B and zero fill out of bounds. `what` names the tensor in the
// msa::Error thrown when the driver rejects it (alignment, strides, box).
CUtensorMap make_tensor_map(const void* base, DType dtype, const TensorMapDim* dims, int rank,
                            const std::string& what);

}  // namespace msa::cuda
