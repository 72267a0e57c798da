// Shared pieces of the CUDA operator tests' case tables: whether this build holds the fp16
// kernel instances (MSA_CUDA_DTYPES) and the FP8 decode instance, and adversarial top-k rows (-1, duplicates, negative and
// out-of-range ids, some rows empty) that no result may depend on beyond the spec's set rule.
#pragma once

#include <cstdint>
#include <random>

#include "bench/workload.h"
#include "cuda/instances.h"

namespace msa::test {

inline bool fp16_instances_built() {
  bool built = false;
#define MSA_BUILT(DT, D) built = built || msa::DType::DT == msa::DType::kFP16;
  MSA_PREFILL_INSTANCES(MSA_BUILT)
#undef MSA_BUILT
  return built;
}

// Whether this build holds the decode's FP8 E4M3 K/V instance (with bf16 in MSA_CUDA_DTYPES).
inline bool fp8_decode_built() {
  bool built = false;
#define MSA_BUILT(DT, D) built = true;
  MSA_DECODE_FP8_INSTANCES(MSA_BUILT)
#undef MSA_BUILT
  return built;
}

// Rewrites rows of topk [.., .., width] in place from `seed`; about one row in `empty_one_in`
// becomes all -1.
inline void make_adversarial(msa::bench::HostTensor& topk, std::uint64_t seed, int empty_one_in) {
  std::mt19937_64 rng(seed);
  auto* ids = topk.data<std::int32_t>();
  const std::int64_t width = topk.shape()[2];
  for (std::int64_t r = 0; r < topk.numel() / width; ++r) {
    std::int32_t* row = ids + r * width;
    switch (rng() % 5) {
      case 0: row[rng() % width] = -1; break;
      case 1: row[rng() % width] = row[0]; break;                                  // duplicate
      case 2: row[rng() % width] = 1000000 + static_cast<int>(rng() % 7); break;  // out of range
      case 3: row[rng() % width] = -7; break;
      default: break;
    }
    if (rng() % static_cast<std::uint64_t>(empty_one_in) == 0)
      for (std::int64_t s = 0; s < width; ++s) row[s] = -1;
  }
}

}  // namespace msa::test
