// TopK's ranking keys (spec §5, msa::TopkRanking), shared by the CPU twin (cpu/topk.cpp) and the
// CUDA kernel (cuda/topk/topk.cu) so that both rank by the same bits. A key is a 64-bit
// unsigned: the rank of the score above, the inverted block id below, so that one unsigned
// comparison ranks by score and breaks ties to the smaller id. Every candidate's rank is >= 1,
// so its key is above 0, the key of an empty slot (rank 0, id -1).
#pragma once

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

#if !defined(__CUDACC__)
#include <cmath>
#endif

namespace msa::topk_key {

MSA_HOST_DEVICE std::uint64_t with_id(std::uint32_t rank, std::int32_t id) {
  return (std::uint64_t{rank} << 32) | static_cast<std::uint32_t>(~static_cast<std::uint32_t>(id));
}
MSA_HOST_DEVICE std::int32_t id_of(std::uint64_t key) {
  return static_cast<std::int32_t>(~static_cast<std::uint32_t>(key));  // the empty key 0 gives -1
}

// TopkRanking::kExact: the rank of a score is the float's order-preserving bits, -0 = +0, and
// NaN 1: below -inf (0x007fffff), above the empty slot's 0. -0 becomes +0 first: on the device
// by adding +0 (one FADD, which leaves every other value as it is), on the host by a comparison;
// both give the same bits.
MSA_HOST_DEVICE std::uint32_t exact_rank(float v) {
#if defined(__CUDA_ARCH__)
  const float w = __fadd_rn(v, 0.f);
#else
  const float w = v == 0.f ? 0.f : v;
#endif
  std::uint32_t u;
  std::memcpy(&u, &w, sizeof u);
  u ^= static_cast<std::uint32_t>(static_cast<std::int32_t>(u) >> 31) | 0x80000000u;  // negative: ~u
  return v != v ? 1u : u;
}
MSA_HOST_DEVICE std::uint64_t exact(float v, std::int32_t id) { return with_id(exact_rank(v), id); }

MSA_HOST_DEVICE bool finite(float v) { return v >= -FLT_MAX && v <= FLT_MAX; }  // false for NaN

// TopkRanking::kQuantised16: the row's quantisation, from the min and max of its finite ranked
// scores (lo > hi: none is finite).
struct Quantiser {
  float scale = 0.f;
  float bias = 1.5f;
};

MSA_HOST_DEVICE float fused_multiply_add(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

MSA_HOST_DEVICE Quantiser quantiser(float lo, float hi) {
  Quantiser z;
  if (!(hi >= lo)) return z;  // no finite score
  z.scale = hi > lo ? 65534.f / (hi - lo) : 0.f;
  z.bias = fused_multiply_add(-lo, z.scale, 1.5f);
  return z;
}

// The rank of a score in TopkRanking::kQuantised16: its level + 1 (1..65536, 0 being the empty
// slot's).
MSA_HOST_DEVICE std::uint32_t quantised_rank(float v, Quantiser z) {
  std::uint32_t level;
  if (v != v || v < -FLT_MAX) {  // NaN, -inf
    level = 0u;
  } else if (v > FLT_MAX) {  // +inf
    level = 65535u;
  } else {
    const float x = fused_multiply_add(v, z.scale, z.bias);
    level = x >= 65535.f ? 65535u : x > 0.f ? static_cast<std::uint32_t>(x) : 0u;
  }
  return level + 1u;
}
MSA_HOST_DEVICE std::uint64_t quantised(float v, std::int32_t id, Quantiser z) {
  return with_id(quantised_rank(v, z), id);
}

}  // namespace msa::topk_key
