// Non-owning tensor views: pointer, dtype, shape and strides (in elements), and device.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace msa {

// kFP8E4M3: the OCP / NVIDIA E4M3 ("e4m3fn": no infinities, max 448), for K/V caches only.
enum class DType : std::uint8_t { kBF16, kFP16, kFP32, kInt32, kFP8E4M3 };
enum class Device : std::uint8_t { kCpu, kCuda };

constexpr std::size_t dtype_size(DType t) {
  return t == DType::kFP32 || t == DType::kInt32 ? 4 : t == DType::kFP8E4M3 ? 1 : 2;
}
const char* dtype_name(DType t);
const char* device_name(Device d);

inline constexpr int kMaxRank = 4;

// A view of someone else's memory. A view with rank 0 is "absent" (used for optional
// arguments such as lse or sinks); a present view may have zero elements (total_q = 0), in
// which case data may be null.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFP32;
  Device device = Device::kCpu;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};   // extents
  std::array<std::int64_t, kMaxRank> stride{};  // in elements, not bytes

  bool present() const { return rank > 0; }
  // rank in 0..kMaxRank; a view with any other rank is rejected by every operator.
  bool valid_rank() const { return rank >= 0 && rank <= kMaxRank; }
  std::int64_t dim(int i) const { return shape[static_cast<std::size_t>(i)]; }
  // Product of the extents; 0 for an absent view or an invalid rank, and INT64_MAX when the
  // product does not fit in int64 (never undefined behaviour, whatever the extents).
  std::int64_t numel() const;
  bool last_dim_contiguous() const { return rank <= 0 || rank > kMaxRank || stride[rank - 1] == 1; }
  bool is_contiguous() const;
  // "[4, 1024, 16]"; at most kMaxRank extents, "[rank 1000]" for an invalid rank.
  std::string shape_string() const;

  // Row-major contiguous view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                               Device device = Device::kCpu);
  // Arbitrary strides (elements), e.g. a [pages, page_size, h_kv, d] buffer viewed as
  // [pages, h_kv, page_size, d].
  static TensorView strided(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                            std::initializer_list<std::int64_t> stride,
                            Device device = Device::kCpu);

  template <class T>
  T* ptr() const { return static_cast<T*>(data); }
  // Element offset of an index tuple (no bounds check; callers validate first).
  template <class... I>
  std::int64_t offset(I... idx) const {
    const std::int64_t v[] = {static_cast<std::int64_t>(idx)...};
    std::int64_t o = 0;
    for (std::size_t i = 0; i < sizeof...(I); ++i) o += v[i] * stride[i];
    return o;
  }
};

}  // namespace msa
