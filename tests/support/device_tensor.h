// Device memory for the CUDA tests, freed with the object (move-only):
//  - DeviceTensor: a device copy of a host tensor, same shape and strides (the host view's),
//    with upload / download and poison();
//  - DeviceBuffer: raw bytes (kernel-level tests, workspaces), with upload / download /
//    fill_bytes / poison().
// Header-only; compiles to nothing without the CUDA backend (MSA_WITH_CUDA).
#pragma once

#if MSA_WITH_CUDA
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "bench/workload.h"
#include "tests/support/cuda_check.h"
#include "tests/support/poison.h"

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
  DeviceTensor(DeviceTensor&& o) noexcept : ptr(std::exchange(o.ptr, nullptr)), view(std::exchange(o.view, {})) {}
  DeviceTensor& operator=(DeviceTensor&& o) noexcept {
    if (this != &o) {
      cudaFree(ptr);
      ptr = std::exchange(o.ptr, nullptr);
      view = std::exchange(o.view, {});
    }
    return *this;
  }

  void upload(const msa::bench::HostTensor& h) const {
    EXPECT_EQ(cudaMemcpy(ptr, h.raw(), h.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  void download(msa::bench::HostTensor& h) const {
    ASSERT_EQ(cudaMemcpy(h.raw(), ptr, h.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  // All-ones bytes over the host tensor's extent (NaN in every float dtype); synchronous.
  void poison(const msa::bench::HostTensor& h) const {
    EXPECT_EQ(cudaMemset(ptr, kPoisonByte, h.bytes()), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, std::max<std::size_t>(bytes, 256)) != cudaSuccess) ptr_ = nullptr;
  }
  // Allocated and filled with `bytes` bytes from host memory.
  DeviceBuffer(const void* host, std::size_t bytes) : DeviceBuffer(bytes) { upload(host, bytes); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      cudaFree(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  void* get() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != nullptr; }

  void upload(const void* host, std::size_t n) const {
    if (ptr_ && host && n) {
      EXPECT_EQ(cudaMemcpy(ptr_, host, n, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  void download(void* host, std::size_t n) const {
    if (ptr_ && host && n) {
      EXPECT_EQ(cudaMemcpy(host, ptr_, n, cudaMemcpyDeviceToHost), cudaSuccess);
    }
  }
  // The whole buffer as elements of T.
  template <class T>
  std::vector<T> download() const {
    std::vector<T> v(bytes_ / sizeof(T));
    download(v.data(), v.size() * sizeof(T));
    return v;
  }
  // memset of the whole buffer, finished before returning (cudaMemset runs on the legacy
  // stream; kernels on other streams must not overtake it).
  void fill_bytes(int value) const {
    if (!ptr_) return;
    EXPECT_EQ(cudaMemset(ptr_, value, bytes_), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  // All-ones bytes: NaN in every float dtype; is_poison_bits() tells what nothing wrote.
  void poison() const { fill_bytes(kPoisonByte); }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace msa::test

#endif  // MSA_WITH_CUDA
