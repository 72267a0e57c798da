// Host conversions between float and the 16-bit and 8-bit storage types (round to nearest even;
// FP8 E4M3 saturates to +-448, as the GPU's satfinite conversion does).
#pragma once

#include <cstdint>
#include <cstring>

#include "msa/tensor.h"

namespace msa {

inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round half to even
  return static_cast<std::uint16_t>(u >> 16);
}

float fp16_to_float(std::uint16_t h);
std::uint16_t float_to_fp16(float f);
float fp8_e4m3_to_float(std::uint8_t x);     // 0x7f / 0xff: NaN
std::uint8_t float_to_fp8_e4m3(float f);     // NaN: 0x7f; beyond +-448 (and +-inf): +-448

// Reads element i of a 16-bit or fp32 buffer as float.
inline float load_as_float(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::kBF16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kFP16: return fp16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kFP32: return static_cast<const float*>(base)[i];
    case DType::kInt32: return static_cast<float>(static_cast<const std::int32_t*>(base)[i]);
    case DType::kFP8E4M3: return fp8_e4m3_to_float(static_cast<const std::uint8_t*>(base)[i]);
  }
  return 0.f;
}

// Writes element i of a 16-bit or fp32 buffer from float (rounded to nearest even).
inline void store_from_float(void* base, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::kBF16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16(v); break;
    case DType::kFP16: static_cast<std::uint16_t*>(base)[i] = float_to_fp16(v); break;
    case DType::kFP32: static_cast<float*>(base)[i] = v; break;
    case DType::kInt32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v); break;
    case DType::kFP8E4M3: static_cast<std::uint8_t*>(base)[i] = float_to_fp8_e4m3(v); break;
  }
}

}  // namespace msa
