// Host side of the sm_90a tile-union sparse prefill: validation, the TMA descriptors, the
// shared-memory attribute, the persistent grid and the PDL launch attribute.
#include "cuda/prefill/union_sm90/launch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "core/tile_route.h"
#include "cuda/common/check.h"
#include "cuda/prefill/sm90/launch.h"
#include "cuda/prefill/union_sm90/kernel.cuh"
#include "msa/error.h"

namespace msa::cuda {

namespace {

void check_params(const UnionParams& p) {
  const PrefillParams& a = p.attn;
  if (a.group < 1 || a.group > 16 || a.h_q != a.group * a.h_kv)
    throw Error("group", std::to_string(a.group), "expected h_q / h_kv in 1..16");
  if (a.topk < 1 || a.topk > union_sm90::kMaxTopk)
    throw Error("topk", std::to_string(a.topk), "the tile-union prefill takes topk in 1..32");
  if (p.q_per_tile != union_sm90_queries_per_tile(a.group))
    throw Error("q_per_tile", std::to_string(p.q_per_tile), "must be union_sm90_queries_per_tile(group)");
  const bool paged = a.page_table != nullptr;
  if (paged ? (a.page_size != 16 && a.page_size != 32 && a.page_size != 64 && a.page_size != 128)
            : (a.cu_seqlens_k == nullptr || a.kv_rows < 1))
    throw Error("page_size", std::to_string(a.page_size),
                "the tile-union prefill takes pages of 16, 32, 64 or 128 tokens, or flat K/V with cu_seqlens_k");
  if (a.total_q < 1 || std::int64_t(a.topk) * a.total_q > INT32_MAX || (paged ? a.num_pages : a.kv_rows) > INT32_MAX)
    throw Error("total_q", std::to_string(a.total_q),
                "TMA coordinates are 32-bit: topk * total_q and K/V pages or rows must be < 2^31");
  if (p.tiles > INT32_MAX / 2)
    throw Error("tiles", std::to_string(p.tiles), "the tile-union prefill counts (KV head, query tile) pairs in 32 bits");
}

}  // namespace

int union_sm90_queries_per_tile(int group) {
  static_assert(union_sm90::Traits::kTileM == 128 && union_sm90::kMaxQueries == 16,
                "core/tile_route.h's union_queries_per_tile describes this kernel's tile");
  return union_queries_per_tile(std::max(group, 1));
}

void launch_union_sm90(const UnionParams& p, int sm_count, cudaStream_t stream) {
  check_params(p);
  if (p.tiles <= 0) return;
  static const bool configured = [] {
    MSA_CUDA_CHECK(cudaFuncSetAttribute(union_sm90::union_sm90_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(union_sm90::kSmemBytes)));
    return true;
  }();
  (void)configured;
  const PrefillTma tma = make_prefill_tma(p.attn);

  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(std::min<std::int64_t>(p.tiles, sm_count)));
  config.blockDim = dim3(union_sm90::kThreads);
  config.dynamicSmemBytes = union_sm90::kSmemBytes;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  MSA_CUDA_CHECK(cudaLaunchKernelEx(&config, union_sm90::union_sm90_kernel, p, tma));
}

}  // namespace msa::cuda
