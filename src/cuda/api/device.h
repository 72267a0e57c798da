// The current CUDA device, as the operator layer needs it.
#pragma once

namespace msa::cuda {

// Streaming multiprocessors of the current device (the persistent kernels' grid).
int current_sm_count();

}  // namespace msa::cuda
