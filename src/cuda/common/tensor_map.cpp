#include "cuda/common/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "core/check.h"
#include "cuda/common/check.h"
#include "msa/error.h"

namespace msa::cuda {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    MSA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || ptr == nullptr)
      throw Error("cuTensorMapEncodeTiled", "not found", "the CUDA driver does not provide TMA descriptors");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

}  // namespace

CUtensorMap make_tensor_map(const void* base, DType dtype, const TensorMapDim* dims, int rank,
                            const std::string& what) {
  if (dtype != DType::kBF16 && dtype != DType::kFP16 && dtype != DType::kFP8E4M3)
    throw Error(what + ".dtype", to_string(dtype), "internal: TMA descriptors here are for bf16, fp16 or fp8_e4m3");
  cuuint64_t size[5];
  cuuint64_t strides[4];
  cuuint32_t box[5];
  cuuint32_t element_strides[5];
  for (int i = 0; i < rank; ++i) {
    size[i] = dims[i].size;
    box[i] = dims[i].box;
    element_strides[i] = 1;
    if (i > 0) strides[i - 1] = dims[i].stride_bytes;
  }
  CUtensorMap map{};
  const CUtensorMapDataType type = dtype == DType::kBF16   ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : dtype == DType::kFP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                           : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  const CUresult r = encoder()(&map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), size, strides, box,
                               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::string shape;
    for (int i = 0; i < rank; ++i) {
      if (i > 0) shape.append(", ");
      shape.append(std::to_string(dims[i].size));
      if (i > 0) shape.append("@").append(std::to_string(dims[i].stride_bytes)).append("B");
    }
    throw Error(what, shape,
                "cannot be described by a TMA descriptor (error " + std::to_string(r) +
                    "): base and strides must be 16-byte aligned");
  }
  return map;
}

}  // namespace msa::cuda
