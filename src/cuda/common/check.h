// CUDA error checks that surface as msa::Error.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "msa/error.h"

#define MSA_CUDA_CHECK(expr)                                                                                          \
  do {                                                                                                                \
    const cudaError_t msa_err_ = (expr);                                                                              \
    if (msa_err_ != cudaSuccess) throw ::msa::Error(#expr, cudaGetErrorName(msa_err_), cudaGetErrorString(msa_err_)); \
  } while (0)
