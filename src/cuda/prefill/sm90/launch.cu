// Host side of the sm_90a sparse prefill: validation, the shared-memory attribute, the
// persistent grid and the PDL launch attribute. The one (BF16, D = 128) instance lives here.
#include "cuda/prefill/sm90/launch.h"

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/check.h"
#include "cuda/prefill/sm90/kernel.cuh"
#include "msa/error.h"

namespace msa::cuda {

namespace {

using Traits = prefill_sm90::TraitsBf16D128;

// Sets the kernel's shared-memory attribute once and returns the CTAs that the occupancy
// calculator lets share an SM (registers and shared memory together); thread-safe static
// initialisation.
int setup() {
  static const int ctas = [] {
    auto* kernel = prefill_sm90::prefill_sm90_kernel<Traits>;
    const int smem = static_cast<int>(Traits::kSmemBytes);
    MSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int n = 0;
    MSA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, Traits::kThreads, smem));
    if (n < 1) throw Error("prefill_sm90", "occupancy 0", "the kernel does not fit on an SM");
    return n;
  }();
  return ctas;
}

void check_params(const PrefillParams& p) {
  const bool paged = p.page_table != nullptr;
  if (paged ? (p.page_size != 16 && p.page_size != 32 && p.page_size != 64 && p.page_size != 128)
            : p.cu_seqlens_k == nullptr)
    throw Error("page_size", std::to_string(p.page_size),
                "the sm90 prefill kernel takes pages of 16, 32, 64 or 128 tokens, or flat K/V "
                "with cu_seqlens_k");
  if (p.group < 1 || p.group > 16 || p.h_q != p.group * p.h_kv)
    throw Error("group", std::to_string(p.group), "expected h_q / h_kv in 1..16");
}

}  // namespace

void launch_prefill_sm90(const PrefillParams& p, int grid_ctas, cudaStream_t stream) {
  check_params(p);
  if (grid_ctas <= 0) return;
  setup();

  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid_ctas));
  config.blockDim = dim3(Traits::kThreads);
  config.dynamicSmemBytes = Traits::kSmemBytes;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  MSA_CUDA_CHECK(cudaLaunchKernelEx(&config, prefill_sm90::prefill_sm90_kernel<Traits>, p));
}

int prefill_sm90_ctas_per_sm() { return setup(); }

}  // namespace msa::cuda
