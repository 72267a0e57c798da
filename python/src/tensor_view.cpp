#include "tensor_view.h"

#include <cstdint>

#include "msa/error.h"

namespace msa::python {

namespace nb = nanobind;

namespace {

DType dtype_of(const nb::dlpack::dtype& t, const std::string& name) {
  using Code = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    if (t.code == static_cast<std::uint8_t>(Code::Bfloat) && t.bits == 16) return DType::kBF16;
    if (t.code == static_cast<std::uint8_t>(Code::Float) && t.bits == 16) return DType::kFP16;
    if (t.code == static_cast<std::uint8_t>(Code::Float) && t.bits == 32) return DType::kFP32;
    if (t.code == static_cast<std::uint8_t>(Code::Int) && t.bits == 32) return DType::kInt32;
    if (t.code == static_cast<std::uint8_t>(Code::Float8_E4M3FN) && t.bits == 8) return DType::kFP8E4M3;
  }
  throw Error(name + ".dtype",
              "DLPack code " + std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits, " +
                  std::to_string(t.lanes) + " lanes",
              "msa takes bfloat16, float16, float32, int32 and float8_e4m3fn (K/V caches, index tensors) tensors");
}

Device device_of(int device_type, const std::string& name) {
  if (device_type == nb::device::cpu::value) return Device::kCpu;
  if (device_type == nb::device::cuda::value) return Device::kCuda;
  throw Error(name + ".device", "DLPack device type " + std::to_string(device_type),
              "msa takes CPU and CUDA tensors");
}

}  // namespace

TensorView to_view(const Array& a, const std::string& name) {
  const auto rank = static_cast<int>(a.ndim());
  if (rank < 1 || rank > kMaxRank)
    throw Error(name + ".ndim", std::to_string(rank), "msa takes tensors of 1 to " + std::to_string(kMaxRank) + " dims");
  TensorView v;
  v.data = static_cast<char*>(a.data_handle()) + a.byte_offset();
  v.dtype = dtype_of(a.dtype(), name);
  v.device = device_of(a.device_type(), name);
  v.rank = rank;
  for (int i = 0; i < rank; ++i) {
    v.shape[i] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(i)));
    v.stride[i] = a.stride(static_cast<std::size_t>(i));
  }
  return v;
}

TensorView to_view(const std::optional<Array>& a, const std::string& name) {
  return a.has_value() ? to_view(*a, name) : TensorView{};
}

}  // namespace msa::python
