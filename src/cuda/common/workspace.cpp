#include "cuda/common/workspace.h"

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/check.h"

namespace msa::cuda {

DeviceScratch::~DeviceScratch() {
  if (owned_ != nullptr) (void)cudaFree(owned_);
}

void DeviceScratch::borrow(void* data, std::size_t bytes) {
  MSA_REQUIRE(reinterpret_cast<std::uintptr_t>(data) % Arena::kAlign == 0, "workspace.data",
              std::to_string(reinterpret_cast<std::uintptr_t>(data)), "must be 256-byte aligned");
  borrowed_ = data;
  borrowed_bytes_ = data != nullptr ? bytes : 0;
}

void* DeviceScratch::get(std::size_t bytes) {
  if (borrowed_ != nullptr) {
    MSA_REQUIRE(bytes <= borrowed_bytes_, "workspace.bytes", std::to_string(borrowed_bytes_),
                "too small: this plan needs " + std::to_string(bytes) + " (the operator's workspace_bytes())");
    return borrowed_;
  }
  if (owned_bytes_ < bytes) {
    if (owned_ != nullptr) MSA_CUDA_CHECK(cudaFree(owned_));  // waits for work still using it
    owned_ = nullptr;
    owned_bytes_ = 0;
    std::size_t grown = grown_workspace_bytes(bytes);
    cudaError_t rc = cudaMalloc(&owned_, grown);
    if (rc == cudaErrorMemoryAllocation) {  // no room for the headroom: the need alone
      (void)cudaGetLastError();
      owned_ = nullptr;
      grown = bytes;
      rc = cudaMalloc(&owned_, grown);
    }
    if (rc != cudaSuccess) {
      owned_ = nullptr;
      throw Error("workspace.bytes", std::to_string(bytes),
                  std::string("cudaMalloc of the operator's workspace failed: ") + cudaGetErrorName(rc) + " (" +
                      cudaGetErrorString(rc) + "); set_workspace() takes caller memory");
    }
    owned_bytes_ = grown;
  }
  return owned_;
}

}  // namespace msa::cuda
