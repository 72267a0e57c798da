// Device memory for the `msa bench` commands (CUDA builds only): a cudaMalloc'd buffer freed on
// scope exit, uploads of host tensors, device views of host tensor metadata, CUDA errors as
// msa::Error.
#pragma once

#if MSA_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <utility>

#include "bench/workload.h"
#include "msa/msa.h"

namespace msa::tool {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(what, cudaGetErrorName(e), cudaGetErrorString(e));
}

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { check(cudaMalloc(&ptr, std::max<std::size_t>(bytes, 256)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(std::exchange(o.ptr, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
};

inline DeviceBuffer upload(const bench::HostTensor& t) {
  DeviceBuffer d(t.bytes());
  check(cudaMemcpy(d.ptr, t.raw(), t.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

// The host view's metadata on device memory `ptr`.
inline TensorView on_device(TensorView v, void* ptr) {
  v.data = ptr;
  v.device = Device::kCuda;
  return v;
}

}  // namespace msa::tool
#endif
