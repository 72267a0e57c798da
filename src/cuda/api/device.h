// The current CUDA device, as the operator layer needs it.
#pragma once

namespace msa::cuda {

// Streaming multiprocessors of the current device (the persistent kernels' grid).
int current_sm_count();

// Bytes of L2 cache of the current device.
long long current_l2_bytes();

}  // namespace msa::cuda
