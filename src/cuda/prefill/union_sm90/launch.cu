// Host side of the sm_90a tile-union sparse prefill: validation, the TMA descriptors, the
// shared-memory attribute, the persistent grid and the PDL launch attribute.
#include "cuda/prefill/union_sm90/launch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "core/tile_route.h"
#include "cuda/common/check.h"
#include "cuda/common/tensor_map.h"
#include "cuda/prefill/union_sm90/kernel.cuh"
#include "msa/error.h"

namespace msa::cuda {

namespace {

using union_sm90::Traits;

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
            : (a.cu_seqlens_k == nullptr || p.kv_rows < 1))
    throw Error("page_size", std::to_string(a.page_size),
                "the tile-union prefill takes pages of 16, 32, 64 or 128 tokens, or flat K/V with cu_seqlens_k");
  if (a.total_q < 1 || a.total_q > INT32_MAX || (paged ? a.num_pages : p.kv_rows) > INT32_MAX)
    throw Error("total_q", std::to_string(a.total_q), "TMA coordinates are 32-bit: total_q and K/V rows must be < 2^31");
  if (p.tiles > INT32_MAX / 2)
    throw Error("tiles", std::to_string(p.tiles), "the tile-union prefill counts (KV head, query tile) pairs in 32 bits");
}

// A dimension of size 1 may carry any stride; TMA wants a legal one (a multiple of 16 bytes).
std::uint64_t stride_bytes(std::int64_t elems, std::uint64_t size, std::uint64_t fallback) {
  return size == 1 ? fallback : static_cast<std::uint64_t>(elems) * 2;
}

UnionTma make_tma(const UnionParams& p) {
  const PrefillParams& a = p.attn;
  constexpr std::uint32_t kCols = Traits::kBoxCols;
  const auto d = static_cast<std::uint64_t>(Traits::kHeadDim);
  const auto h_q = static_cast<std::uint64_t>(a.h_q);
  const auto h_kv = static_cast<std::uint64_t>(a.h_kv);
  const auto total_q = static_cast<std::uint64_t>(a.total_q);
  UnionTma t{};
  t.q_box_rows = 64 % a.group == 0 ? a.group : 1;
  const auto qb = static_cast<std::uint32_t>(t.q_box_rows);
  const std::uint64_t q_head = stride_bytes(a.stride_q_head, h_q, d * 2);
  const std::uint64_t q_token = stride_bytes(a.stride_q_token, total_q, h_q * q_head);
  const TensorMapDim q_dims[3] = {{d, 2, kCols}, {h_q, q_head, qb}, {total_q, q_token, 1}};
  t.q = make_tensor_map_bf16(a.q, q_dims, 3, "q.stride");
  const TensorMapDim o_dims[3] = {{d, 2, kCols}, {h_q, d * 2, qb}, {total_q, h_q * d * 2, 1}};
  t.o = make_tensor_map_bf16(a.o_partial, o_dims, 3, "o_partial");

  const bool paged = a.page_table != nullptr;
  t.kv_box_rows = paged ? a.page_size : Traits::kBlockN;
  const auto tokens = static_cast<std::uint64_t>(paged ? a.page_size : p.kv_rows);
  const auto pages = static_cast<std::uint64_t>(paged ? a.num_pages : 1);
  const std::uint64_t kv_token = stride_bytes(a.stride_kv_token, tokens, d * 2);
  const std::uint64_t kv_head = stride_bytes(a.stride_kv_head, h_kv, tokens * kv_token);
  const std::uint64_t kv_page = stride_bytes(paged ? a.stride_kv_page : 0, pages, h_kv * kv_head);
  const TensorMapDim kv_dims[4] = {{d, 2, kCols},
                                   {tokens, kv_token, static_cast<std::uint32_t>(t.kv_box_rows)},
                                   {h_kv, kv_head, 1},
                                   {pages, kv_page, 1}};
  t.k = make_tensor_map_bf16(a.k, kv_dims, 4, "k.stride");
  t.v = make_tensor_map_bf16(a.v, kv_dims, 4, "v.stride");
  return t;
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
  const UnionTma tma = make_tma(p);

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
