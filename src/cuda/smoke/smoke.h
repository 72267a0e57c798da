// A tiny kernel that proves the toolchain: nvcc, sm_90a code, CuTe headers, and a launch.
#pragma once

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace msa::cuda {

// y[i] = a * x[i] + y[i] for i < n (device pointers), through CuTe tensors; *arch receives the
// __CUDA_ARCH__ the kernel was compiled for and *feature 1 when the sm_90a feature set was on.
void smoke_axpy(float a, const float* x, float* y, std::int64_t n, int* arch, int* feature,
                cudaStream_t stream);

}  // namespace msa::cuda
