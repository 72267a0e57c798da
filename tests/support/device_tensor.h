// A device copy of a host tensor for the CUDA tests: same shape and strides (the host view's),
// freed with the object. Header-only; include it from CUDA tests only.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "bench/workload.h"

namespace msa::test {

struct DeviceTensor {
  void* ptr = nullptr;
  msa::TensorView view;  // absent (rank 0) for an absent host view

  DeviceTensor() = default;
  DeviceTensor(const msa::bench::HostTensor& h, msa::TensorView host_view) {
    view = host_view;
    if (!view.present()) return;
    EXPECT_EQ(cudaMalloc(&ptr, std::max<std::size_t>(h.bytes(), 16)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, h.raw(), h.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    view.data = ptr;
    view.device = msa::Device::kCuda;
  }
  explicit DeviceTensor(const msa::bench::HostTensor& h) : DeviceTensor(h, h.view()) {}
  // Absent unless `present`.
  DeviceTensor(bool present, const msa::bench::HostTensor& h, msa::TensorView host_view)
      : DeviceTensor(h, present ? host_view : msa::TensorView{}) {}
  ~DeviceTensor() { cudaFree(ptr); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  void upload(const msa::bench::HostTensor& h) const {
    EXPECT_EQ(cudaMemcpy(ptr, h.raw(), h.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  void download(msa::bench::HostTensor& h) const {
    ASSERT_EQ(cudaMemcpy(h.raw(), ptr, h.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

}  // namespace msa::test
