#include "core/check.h"

#include <utility>
#include <array>
#include <cstdint>
#include <limits>

namespace msa {

namespace {

std::string dim_name(const std::string& name, const char* field, int i) {
  std::string s = name;
  s += '.';
  s += field;
  s += '[';
  s += std::to_string(i);
  s += ']';
  return s;
}

// Largest element offset the view addresses (extents >= 0, strides >= 0 checked first);
// false when it does not fit in int64.
bool max_offset(const TensorView& t, std::int64_t& out) {
  std::int64_t off = 0;
  for (int i = 0; i < t.rank; ++i) {
    std::int64_t term = 0;
    if (t.dim(i) > 1 && (__builtin_mul_overflow(t.dim(i) - 1, t.stride[i], &term) ||
                         __builtin_add_overflow(off, term, &off)))
      return false;
  }
  out = off;
  return true;
}

}  // namespace

std::string to_string(DType t) {
  const std::string n = dtype_name(t);
  return n != "?" ? n : "dtype(" + std::to_string(static_cast<int>(t)) + ")";
}
std::string to_string(Device d) {
  const std::string n = device_name(d);
  return n != "unknown" ? n : "device(" + std::to_string(static_cast<int>(d)) + ")";
}

void check_present(const TensorView& t, const std::string& name) {
  MSA_REQUIRE(t.rank >= 0, name + ".rank", std::to_string(t.rank), "must be >= 0 (0 = absent)");
  MSA_REQUIRE(t.present(), name, "absent", "a tensor is required here");
}

void check_device(const TensorView& t, const std::string& name, Device device) {
  MSA_REQUIRE(t.device == device, name + ".device", to_string(t.device),
              "expected " + to_string(device));
}

void check_dtype(const TensorView& t, const std::string& name, DType dtype) {
  MSA_REQUIRE(t.dtype == dtype, name + ".dtype", to_string(t.dtype), "expected " + to_string(dtype));
}

void check_rank(const TensorView& t, const std::string& name, int rank) {
  MSA_REQUIRE(t.valid_rank(), name + ".rank", std::to_string(t.rank),
              "must be in 0.." + std::to_string(kMaxRank) + " (expected " + std::to_string(rank) + ")");
  MSA_REQUIRE(t.rank == rank, name + ".rank", std::to_string(t.rank) + " " + t.shape_string(),
              "expected rank " + std::to_string(rank));
}

void check_dim(const TensorView& t, const std::string& name, int i, std::int64_t extent) {
  MSA_REQUIRE(t.dim(i) == extent, dim_name(name, "shape", i), std::to_string(t.dim(i)),
              "expected " + std::to_string(extent) + " (shape " + t.shape_string() + ")");
}

void check_shape(const TensorView& t, const std::string& name,
                 std::initializer_list<std::int64_t> extents) {
  int i = 0;
  for (const std::int64_t e : extents) check_dim(t, name, i++, e);
}

void check_layout(const TensorView& t, const std::string& name) {
  MSA_REQUIRE(t.valid_rank(), name + ".rank", std::to_string(t.rank),
              "must be in 0.." + std::to_string(kMaxRank));
  for (int i = 0; i < t.rank; ++i) {
    MSA_REQUIRE(t.dim(i) >= 0, dim_name(name, "shape", i), std::to_string(t.dim(i)), "extents must be >= 0");
    MSA_REQUIRE(t.stride[i] >= 0, dim_name(name, "stride", i), std::to_string(t.stride[i]),
                "strides must be >= 0");
  }
  if (t.numel() == 0) return;
  std::int64_t last = 0, bytes = 0;
  MSA_REQUIRE(max_offset(t, last) &&
                  !__builtin_mul_overflow(last + 1, static_cast<std::int64_t>(dtype_size(t.dtype)), &bytes),
              name + ".shape", t.shape_string(), "the view spans more than 2^63 bytes");
  MSA_REQUIRE(t.data != nullptr, name + ".data", "null", "data pointer is null");
  MSA_REQUIRE(t.last_dim_contiguous(), dim_name(name, "stride", t.rank - 1),
              std::to_string(t.stride[t.rank - 1]), "the last dim must be contiguous (stride 1)");
  const std::size_t align = dtype_size(t.dtype) <= 2 ? 16 : dtype_size(t.dtype);
  const auto addr = reinterpret_cast<std::uintptr_t>(t.data);
  MSA_REQUIRE(addr % align == 0, name + ".data", std::to_string(addr),
              "must be aligned to " + std::to_string(align) + " bytes");
  if (dtype_size(t.dtype) <= 2) {
    const auto per_16_bytes = static_cast<std::int64_t>(16 / dtype_size(t.dtype));
    for (int i = 0; i + 1 < t.rank; ++i)
      MSA_REQUIRE(t.stride[i] % per_16_bytes == 0 || t.dim(i) == 1, dim_name(name, "stride", i),
                  std::to_string(t.stride[i]),
                  dtype_size(t.dtype) == 2
                      ? "rows of 16-bit tensors must start on 16-byte boundaries (stride % 8 == 0)"
                      : "rows of 8-bit tensors must start on 16-byte boundaries (stride % 16 == 0)");
  }
}

void check_output_layout(const TensorView& t, const std::string& name) {
  check_layout(t, name);
  if (t.numel() == 0) return;
  // Dims of extent > 1 by ascending stride: each stride must step past everything the smaller
  // ones address, or two indices would name one element.
  std::array<int, kMaxRank> order{};
  int n = 0;
  for (int i = 0; i < t.rank; ++i)
    if (t.dim(i) > 1) order[n++] = i;
  for (int j = 1; j < n; ++j)  // insertion sort of at most kMaxRank dims
    for (int k = j; k > 0 && t.stride[order[k]] < t.stride[order[k - 1]]; --k) std::swap(order[k], order[k - 1]);
  std::int64_t span = 1;  // elements addressed by the dims taken so far
  for (int j = 0; j < n; ++j) {
    const int i = order[j];
    MSA_REQUIRE(t.stride[i] >= span, dim_name(name, "stride", i), std::to_string(t.stride[i]),
                "outputs must not overlap: dim " + std::to_string(i) + " must step at least " +
                    std::to_string(span) + " elements (shape " + t.shape_string() + ")");
    span = t.stride[i] * (t.dim(i) - 1) + span;  // bounded by check_layout's span check
  }
}

void check_tensor(const TensorView& t, const std::string& name, Device device, DType dtype, int rank) {
  check_present(t, name);
  check_device(t, name, device);
  check_dtype(t, name, dtype);
  check_rank(t, name, rank);
  check_layout(t, name);
}

void check_tensor(const TensorView& t, const std::string& name, Device device, DType dtype,
                  std::initializer_list<std::int64_t> extents) {
  check_present(t, name);
  check_device(t, name, device);
  check_dtype(t, name, dtype);
  check_rank(t, name, static_cast<int>(extents.size()));
  check_shape(t, name, extents);
  check_layout(t, name);
}

void check_output(const TensorView& t, const std::string& name, Device device, DType dtype,
                  std::initializer_list<std::int64_t> extents) {
  check_tensor(t, name, device, dtype, extents);
  check_output_layout(t, name);
}

void check_int32_vector(const TensorView& t, const std::string& name, Device device, std::int64_t n) {
  check_tensor(t, name, device, DType::kInt32, 1);
  if (n >= 0) check_dim(t, name, 0, n);
  MSA_REQUIRE(t.dim(0) <= 1 || t.stride[0] >= 1, name + ".stride[0]", std::to_string(t.stride[0]),
              "must be >= 1 (a stride-0 view repeats one value for every request)");
}

}  // namespace msa
