// The decode's packed query rows: request b owns rows [b Q, (b + 1) Q), written once by plan()
// as cu_seqlens_q [B + 1] = 0, Q, 2Q, ..., B Q so that the query-tile kernels (which take a
// varlen batch) run the decode as a batch of B requests of Q queries each.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace msa::cuda {

// cu_seqlens_q[i] = i * q_per_request for i in [0, batch]; one kernel, capturable.
void launch_decode_rows(std::int32_t* cu_seqlens_q, std::int64_t batch, int q_per_request, cudaStream_t stream);

}  // namespace msa::cuda
