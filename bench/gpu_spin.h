// A lead of GPU work: one thread of one CTA spinning for `ns` nanoseconds on the stream, so that
// what the host enqueues behind it waits for the GPU, not the other way round
// (time_eager_calls_behind_work, bench/gpu_timer.h). CUDA builds only.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace msa::bench {

cudaError_t gpu_spin(std::int64_t ns, cudaStream_t stream);

}  // namespace msa::bench
