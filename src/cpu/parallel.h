// No exception may leave an OpenMP region (the runtime would terminate the process). Work
// inside a region runs through ParallelErrors::run, which keeps the first exception and makes
// every later call a no-op; rethrow() after the region hands it to the caller.
#pragma once

#include <atomic>
#include <exception>
#include <mutex>

namespace msa::cpu {

class ParallelErrors {
 public:
  template <class F>
  void run(F&& f) noexcept {
    if (failed_.load(std::memory_order_relaxed)) return;
    try {
      f();
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) first_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::exception_ptr first_;
};

}  // namespace msa::cpu
