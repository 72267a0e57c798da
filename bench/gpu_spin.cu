// A lead of GPU work for bench/gpu_timer.cpp: one thread spinning on the global timer.
#include <cuda_runtime.h>

#include <cstdint>

#include "bench/gpu_spin.h"

namespace msa::bench {

namespace {
__global__ void spin_kernel(std::uint64_t ns) {
  std::uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}
}  // namespace

cudaError_t gpu_spin(std::int64_t ns, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<std::uint64_t>(ns > 0 ? ns : 0));
  return cudaGetLastError();
}

}  // namespace msa::bench
