#include "cuda/api/device.h"

#include <cuda_runtime.h>

#include "core/impl.h"
#include "cuda/common/check.h"

namespace msa::cuda {

bool device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
}

int current_sm_count() {
  int device = 0, sms = 0;
  MSA_CUDA_CHECK(cudaGetDevice(&device));
  MSA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

long long current_l2_bytes() {
  int device = 0, bytes = 0;
  MSA_CUDA_CHECK(cudaGetDevice(&device));
  MSA_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device));
  return bytes;
}

}  // namespace msa::cuda
