// CUDA checks for the tests: CUDA_OK(expr) asserts that a CUDA runtime call returned
// cudaSuccess (the same definition the tests/cuda files carry, so either may come first), and
// MSA_SKIP_WITHOUT_GPU() skips a test on a machine with no visible CUDA device (or a build
// without the CUDA backend). gpu_available() and the skip macro compile in CPU-only builds.
#pragma once

#include <gtest/gtest.h>

#include "msa/options.h"  // msa::cuda_available

#if MSA_WITH_CUDA
#include <cuda_runtime.h>

// A fatal assertion: use it in void functions (or check HasFatalFailure() after a helper).
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
// The non-fatal form, for destructors and non-void helpers.
#define CUDA_EXPECT_OK(expr) EXPECT_EQ((expr), cudaSuccess) << #expr
#endif

namespace msa::test {

// True when the CUDA backend is built and a device is visible (msa::cuda_available()).
inline bool gpu_available() { return msa::cuda_available(); }

}  // namespace msa::test

// First statement of a GPU test: skips (and returns) when there is no device.
#define MSA_SKIP_WITHOUT_GPU()                                      \
  do {                                                              \
    if (!::msa::test::gpu_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
