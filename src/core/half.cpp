#include "core/half.h"

#include <cmath>
#include <limits>

namespace msa {

float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t man = h & 0x3ffu;
  std::uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf / NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal half: normalise
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint16_t float_to_fp16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00 : 0x7c00);
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // rounds past the largest half: inf
  if (abs < 0x38800000u) {                      // result is subnormal (or zero)
    if (abs < 0x33000000u) return sign;         // below half the smallest subnormal
    const std::uint32_t exp = abs >> 23;
    const std::uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exp;  // 14..24
    std::uint32_t half_man = man >> shift;
    const std::uint32_t rem = man & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half_man & 1u))) ++half_man;
    return sign | static_cast<std::uint16_t>(half_man);
  }
  std::uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);       // round half to even
  return sign | static_cast<std::uint16_t>(r >> 13);
}

float fp8_e4m3_to_float(std::uint8_t x) {
  const float sign = (x & 0x80u) != 0 ? -1.f : 1.f;
  const int exp = (x >> 3) & 0xf;
  const int man = x & 0x7;
  if (exp == 0xf && man == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), -9);  // subnormal: man / 8 * 2^-6
  return sign * std::ldexp(static_cast<float>(8 + man), exp - 10);     // (1 + man / 8) * 2^(exp - 7)
}

std::uint8_t float_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const std::uint8_t sign = std::signbit(f) ? 0x80u : 0x00u;
  const float a = std::fabs(f);
  if (a >= 448.f) return sign | 0x7eu;  // satfinite
  if (a < std::ldexp(1.f, -6)) {
    // Subnormal range: multiples of 2^-9, rounded half to even (8 = the smallest normal).
    const auto q = static_cast<int>(std::nearbyint(std::ldexp(a, 9)));
    return sign | static_cast<std::uint8_t>(q);  // q <= 8: 0x08 is exponent 1, mantissa 0
  }
  int e2 = 0;
  const float fr = std::frexp(a, &e2);  // a = fr * 2^e2, fr in [0.5, 1)
  int exp = e2 - 1 + 7;                 // biased exponent of 1.m * 2^(e2 - 1)
  auto man = static_cast<int>(std::nearbyint((2.f * fr - 1.f) * 8.f));
  if (man == 8) {
    man = 0;
    ++exp;
  }
  if (exp > 15 || (exp == 15 && man == 7)) return sign | 0x7eu;
  return sign | static_cast<std::uint8_t>((exp << 3) | man);
}

}  // namespace msa
