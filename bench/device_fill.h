// Device-side input generation for benchmarks: large Q/K/V are filled on the GPU (a host
// normal generator would take longer than the benchmark itself at S = 128k).
#pragma once

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace msa::bench {

// n 16-bit values (bf16, or fp16 when fp16) ~ N(0, sd^2), from a counter-based hash of
// (seed, index): the same seed gives the same tensor on any GPU.
void device_fill_normal(void* dst, std::int64_t n, bool fp16, float sd, std::uint64_t seed,
                        cudaStream_t stream);
// The same as FP8 E4M3 codes (satfinite), one byte each.
void device_fill_normal_fp8(void* dst, std::int64_t n, float sd, std::uint64_t seed, cudaStream_t stream);

}  // namespace msa::bench
