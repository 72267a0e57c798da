// MSA_HOST_DEVICE: a small inline function that host code and CUDA device code both compile,
// so that a CPU twin and its kernel share the exact arithmetic.
#pragma once

#if defined(__CUDACC__)
#define MSA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MSA_HOST_DEVICE inline
#endif
