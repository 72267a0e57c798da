// Host side of the sm_90a tile-union sparse prefill: validation, the shared-memory attribute,
// the persistent grid and the PDL launch attribute.
#include "cuda/prefill/union_sm90/launch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/common/check.h"
#include "cuda/prefill/union_sm90/kernel.cuh"
#include "msa/error.h"

namespace msa::cuda {

int union_sm90_queries_per_tile(int group) {
  return std::clamp(union_sm90::Traits::kTileM / std::max(group, 1), 1, union_sm90::kMaxQueries);
}

void launch_union_sm90(const UnionParams& p, int sm_count, cudaStream_t stream) {
  if (p.attn.group < 1 || p.attn.group > 16 || p.attn.h_q != p.attn.group * p.attn.h_kv)
    throw Error("group", std::to_string(p.attn.group), "expected h_q / h_kv in 1..16");
  if (p.attn.topk < 1 || p.attn.topk > union_sm90::kMaxTopk)
    throw Error("topk", std::to_string(p.attn.topk), "the tile-union prefill takes topk in 1..32");
  if (p.q_per_tile != union_sm90_queries_per_tile(p.attn.group))
    throw Error("q_per_tile", std::to_string(p.q_per_tile), "must be union_sm90_queries_per_tile(group)");
  if (p.tiles <= 0) return;
  static const bool configured = [] {
    MSA_CUDA_CHECK(cudaFuncSetAttribute(union_sm90::union_sm90_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(union_sm90::kSmemBytes)));
    return true;
  }();
  (void)configured;

  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(std::min<std::int64_t>(p.tiles, sm_count)));
  config.blockDim = dim3(union_sm90::Traits::kThreads);
  config.dynamicSmemBytes = union_sm90::kSmemBytes;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  MSA_CUDA_CHECK(cudaLaunchKernelEx(&config, union_sm90::union_sm90_kernel, p));
}

}  // namespace msa::cuda
