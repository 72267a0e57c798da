#include "cuda/decode/rows.h"

#include "core/check.h"
#include "cuda/common/check.h"

namespace msa::cuda {

namespace {

__global__ void decode_rows_kernel(std::int32_t* cu_seqlens_q, std::int64_t entries, int q_per_request) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < entries) cu_seqlens_q[i] = static_cast<std::int32_t>(i * q_per_request);
}

}  // namespace

void launch_decode_rows(std::int32_t* cu_seqlens_q, std::int64_t batch, int q_per_request, cudaStream_t stream) {
  MSA_ASSERT(cu_seqlens_q != nullptr && batch >= 0 && q_per_request >= 1 && batch * q_per_request <= INT32_MAX);
  constexpr int kThreads = 256;
  const std::int64_t entries = batch + 1;
  decode_rows_kernel<<<static_cast<unsigned>((entries + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      cu_seqlens_q, entries, q_per_request);
  MSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace msa::cuda
