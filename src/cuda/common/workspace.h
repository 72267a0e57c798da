// One workspace arena for every CUDA operator: a layout is written once, as a function that takes
// its pieces from an Arena in order, and run twice, first on a sizing arena (no memory: pieces are
// null, bytes() is the total) and then on the workspace itself. The size and the carving cannot
// drift apart because they are the same code. Pieces are 256-byte aligned (the workspace base
// must be, checked), so any element type and any vector load fits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "msa/plan.h"

namespace msa::cuda {

class Arena {
 public:
  static constexpr std::size_t kAlign = 256;

  // Sizing only: every piece is null.
  Arena() = default;
  // Carving `base` (kAlign-aligned).
  explicit Arena(void* base) : base_(static_cast<char*>(base)) {
    MSA_REQUIRE(reinterpret_cast<std::uintptr_t>(base) % kAlign == 0, "workspace.data",
                std::to_string(reinterpret_cast<std::uintptr_t>(base)), "must be 256-byte aligned");
  }

  // The next piece: `count` elements of T (at least one aligned unit, so an empty piece still
  // has an address of its own).
  template <class T>
  T* take(std::size_t count) {
    return static_cast<T*>(take_bytes(count * sizeof(T)));
  }
  void* take_bytes(std::size_t bytes) {
    char* at = base_ != nullptr ? base_ + used_ : nullptr;
    used_ += round_up(bytes);
    return at;
  }

  std::size_t bytes() const { return used_; }
  static std::size_t round_up(std::size_t bytes) { return (bytes == 0 ? 1 : (bytes + kAlign - 1) / kAlign) * kAlign; }

 private:
  char* base_ = nullptr;
  std::size_t used_ = 0;
};

// An operator's workspace memory: the caller's (borrow(), checked against each plan's need) or
// the operator's own, allocated by get() (called from plan() only: run() never allocates) at
// msa::grown_workspace_bytes() of the need, and again only when a plan needs more than it holds.
class DeviceScratch {
 public:
  DeviceScratch() = default;
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // Caller memory (256-byte aligned, on the current device); null returns to owned memory.
  void borrow(void* data, std::size_t bytes);
  // `bytes` of workspace: the borrowed memory (an msa::Error naming workspace.bytes when it is
  // too small) or the owned one, reallocated (to msa::grown_workspace_bytes(bytes)) when it is smaller.
  void* get(std::size_t bytes);

 private:
  void* borrowed_ = nullptr;
  std::size_t borrowed_bytes_ = 0;
  void* owned_ = nullptr;
  std::size_t owned_bytes_ = 0;
};

}  // namespace msa::cuda
