// A value made once per device ordinal, for the current device: a kernel's function attributes
// (cudaFuncSetAttribute: its dynamic shared memory, carve-out) and what the occupancy
// calculator says under them hold for one device, so a process that runs on several GPUs must
// set them on each (a launch on a device where they were not set asks for more shared memory
// than the default and fails).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>

#include "cuda/common/check.h"

namespace msa::cuda {

template <class T>
class PerDevice {
 public:
  // The current device's value, made by make() on its first call there (thread-safe); ordinals
  // past kDevices are made on every call.
  template <class Make>
  T get(Make&& make) {
    int device = 0;
    MSA_CUDA_CHECK(cudaGetDevice(&device));
    if (device < 0 || device >= kDevices) return make();
    if (ready_[device].load(std::memory_order_acquire)) return value_[device];
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!ready_[device].load(std::memory_order_relaxed)) {
      value_[device] = make();
      ready_[device].store(true, std::memory_order_release);
    }
    return value_[device];
  }

 private:
  static constexpr int kDevices = 64;
  std::mutex mutex_;
  std::atomic<bool> ready_[kDevices] = {};
  T value_[kDevices] = {};
};

}  // namespace msa::cuda
