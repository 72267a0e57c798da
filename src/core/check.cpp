#include "core/check.h"

#include <cstdint>

namespace msa {

std::string to_string(DType t) { return dtype_name(t); }
std::string to_string(Device d) { return device_name(d); }

void check_present(const TensorView& t, const std::string& name) {
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
  MSA_REQUIRE(t.rank == rank, name + ".rank", std::to_string(t.rank) + " " + t.shape_string(),
              "expected rank " + std::to_string(rank));
}

void check_dim(const TensorView& t, const std::string& name, int i, std::int64_t extent) {
  MSA_REQUIRE(t.dim(i) == extent, name + ".shape[" + std::to_string(i) + "]",
              std::to_string(t.dim(i)), "expected " + std::to_string(extent) + " (shape " +
                                            t.shape_string() + ")");
}

void check_shape(const TensorView& t, const std::string& name,
                 std::initializer_list<std::int64_t> extents) {
  int i = 0;
  for (const std::int64_t e : extents) check_dim(t, name, i++, e);
}

void check_layout(const TensorView& t, const std::string& name) {
  for (int i = 0; i < t.rank; ++i) {
    MSA_REQUIRE(t.dim(i) >= 0, name + ".shape[" + std::to_string(i) + "]", std::to_string(t.dim(i)),
                "extents must be >= 0");
    MSA_REQUIRE(t.stride[i] >= 0, name + ".stride[" + std::to_string(i) + "]",
                std::to_string(t.stride[i]), "strides must be >= 0");
  }
  if (t.numel() == 0) return;
  MSA_REQUIRE(t.data != nullptr, name + ".data", "null", "data pointer is null");
  MSA_REQUIRE(t.last_dim_contiguous(), name + ".stride[" + std::to_string(t.rank - 1) + "]",
              std::to_string(t.stride[t.rank - 1]), "the last dim must be contiguous (stride 1)");
  const std::size_t align = dtype_size(t.dtype) == 2 ? 16 : dtype_size(t.dtype);
  const auto addr = reinterpret_cast<std::uintptr_t>(t.data);
  MSA_REQUIRE(addr % align == 0, name + ".data", std::to_string(addr),
              "must be aligned to " + std::to_string(align) + " bytes");
  if (dtype_size(t.dtype) == 2) {
    for (int i = 0; i + 1 < t.rank; ++i)
      MSA_REQUIRE(t.stride[i] % 8 == 0 || t.dim(i) == 1, name + ".stride[" + std::to_string(i) + "]",
                  std::to_string(t.stride[i]),
                  "rows of 16-bit tensors must start on 16-byte boundaries (stride % 8 == 0)");
  }
}

void check_tensor(const TensorView& t, const std::string& name, Device device, DType dtype, int rank) {
  check_present(t, name);
  check_device(t, name, device);
  check_dtype(t, name, dtype);
  check_rank(t, name, rank);
  check_layout(t, name);
}

}  // namespace msa
