// Host side of the sm_90a KV-block-major sparse prefill: validation, the TMA descriptors
// (shared with the tile-union launch), the shared-memory attribute, the persistent grid and
// the PDL launch attribute. The one (BF16, D = 128) instance lives here.
#include "cuda/prefill/sm90/launch.h"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "cuda/common/check.h"
#include "cuda/common/tensor_map.h"
#include "cuda/prefill/sm90/kernel.cuh"
#include "msa/error.h"

namespace msa::cuda {

namespace {

using prefill_sm90::TmaTraits;

// Sets the kernel's shared-memory attribute once and returns the CTAs that the occupancy
// calculator lets share an SM (1 by design); thread-safe static initialisation.
int setup() {
  static const int ctas = [] {
    auto* kernel = prefill_sm90::prefill_sm90_kernel;
    const int smem = static_cast<int>(prefill_sm90::kSmemBytes);
    MSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int n = 0;
    MSA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, prefill_sm90::kThreads, smem));
    if (n < 1) throw Error("prefill_sm90", "occupancy 0", "the kernel does not fit on an SM");
    return n;
  }();
  return ctas;
}

void check_params(const PrefillParams& p) {
  const bool paged = p.page_table != nullptr;
  if (paged ? (p.page_size != 16 && p.page_size != 32 && p.page_size != 64 && p.page_size != 128)
            : (p.cu_seqlens_k == nullptr || p.kv_rows < 1))
    throw Error("page_size", std::to_string(p.page_size),
                "the sm90 prefill kernel takes pages of 16, 32, 64 or 128 tokens, or flat K/V "
                "with cu_seqlens_k");
  if (p.group < 1 || p.group > 16 || p.h_q != p.group * p.h_kv)
    throw Error("group", std::to_string(p.group), "expected h_q / h_kv in 1..16");
  // TMA coordinates are signed 32-bit: the rows of o_partial and of K/V must fit.
  if (p.total_q < 1 || std::int64_t(p.topk) * p.total_q > std::int64_t(INT32_MAX) ||
      (paged ? p.num_pages : p.kv_rows) > INT32_MAX)
    throw Error("total_q", std::to_string(p.total_q),
                "the sm90 prefill kernels take 1 <= topk * total_q < 2^31 and fewer than 2^31 K/V pages or rows");
}

// A dimension of size 1 may carry any stride; TMA wants a legal one (a multiple of 16 bytes).
std::uint64_t stride_bytes(std::int64_t elems, std::uint64_t size, std::uint64_t fallback) {
  return size == 1 ? fallback : static_cast<std::uint64_t>(elems) * 2;
}

}  // namespace

PrefillTma make_prefill_tma(const PrefillParams& a) {
  constexpr std::uint32_t kCols = TmaTraits::kBoxCols;
  const auto d = static_cast<std::uint64_t>(TmaTraits::kHeadDim);
  const auto h_q = static_cast<std::uint64_t>(a.h_q);
  const auto h_kv = static_cast<std::uint64_t>(a.h_kv);
  const auto total_q = static_cast<std::uint64_t>(a.total_q);
  PrefillTma t{};
  // A box holds one query's heads and must not straddle a consumer warpgroup's 64 rows.
  t.q_box_rows = 64 % a.group == 0 ? a.group : 1;
  const auto qb = static_cast<std::uint32_t>(t.q_box_rows);
  const std::uint64_t q_head = stride_bytes(a.stride_q_head, h_q, d * 2);
  const std::uint64_t q_token = stride_bytes(a.stride_q_token, total_q, h_q * q_head);
  const TensorMapDim q_dims[3] = {{d, 2, kCols}, {h_q, q_head, qb}, {total_q, q_token, 1}};
  t.q = make_tensor_map_bf16(a.q, q_dims, 3, "q.stride");
  const std::uint64_t o_rows = static_cast<std::uint64_t>(a.topk) * total_q;
  const TensorMapDim o_dims[3] = {{d, 2, kCols}, {h_q, d * 2, qb}, {o_rows, h_q * d * 2, 1}};
  t.o_partial = make_tensor_map_bf16(a.o_partial, o_dims, 3, "o_partial");

  const bool paged = a.page_table != nullptr;
  t.kv_box_rows = paged ? a.page_size : TmaTraits::kBlockN;
  const auto tokens = static_cast<std::uint64_t>(paged ? a.page_size : a.kv_rows);
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

void launch_prefill_sm90(const PrefillParams& p, int grid_ctas, cudaStream_t stream) {
  check_params(p);
  if (grid_ctas <= 0) return;
  setup();
  const PrefillTma tma = make_prefill_tma(p);

  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid_ctas));
  config.blockDim = dim3(prefill_sm90::kThreads);
  config.dynamicSmemBytes = prefill_sm90::kSmemBytes;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  MSA_CUDA_CHECK(cudaLaunchKernelEx(&config, prefill_sm90::prefill_sm90_kernel, p, tma));
}

int prefill_sm90_ctas_per_sm() { return setup(); }

}  // namespace msa::cuda
