// msa::lengths_from_offsets on the device: lengths[b] = offsets[b + 1] - offsets[b] (the CPU
// twin is msa::cpu::lengths_from_offsets; core/dispatch.cpp validates and picks).
#include <cstdint>

#include "core/check.h"
#include "core/impl.h"
#include "cuda/common/check.h"

namespace msa::cuda {

namespace {

__global__ void lengths_kernel(const std::int32_t* offsets, std::int64_t in_step, std::int32_t* lengths,
                               std::int64_t out_step, std::int64_t batch) {
  const std::int64_t b = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b < batch)
    lengths[b * out_step] = static_cast<std::int32_t>(std::int64_t{offsets[(b + 1) * in_step]} - offsets[b * in_step]);
}

}  // namespace

void lengths_from_offsets(const std::int32_t* offsets, std::int64_t in_step, std::int32_t* lengths,
                          std::int64_t out_step, std::int64_t batch, cudaStream_t stream) {
  MSA_ASSERT(offsets != nullptr && lengths != nullptr && batch >= 1 && batch <= INT32_MAX && in_step >= 1 &&
             out_step >= 1);
  constexpr int kThreads = 256;
  lengths_kernel<<<static_cast<unsigned>((batch + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      offsets, in_step, lengths, out_step, batch);
  MSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace msa::cuda
