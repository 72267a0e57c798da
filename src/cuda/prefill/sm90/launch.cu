// Host side of the sm_90a sparse prefill: validation, the TMA descriptors, the shared-memory
// attribute, the persistent grid and the PDL launch attribute. The one (BF16, D = 128) instance lives here.
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
  // TMA coordinates are signed 32-bit: the rows of o_partial must fit.
  if (p.total_q < 1 || std::int64_t(p.topk) * p.total_q > std::int64_t(INT32_MAX))
    throw Error("total_q", std::to_string(p.total_q), "the sm90 prefill kernel takes 1 <= topk * total_q < 2^31");
}

// TMA descriptors of q and o_partial as (d, head, row), box (64, box_rows, 1): one box holds
// box_rows heads of one query, which is box_rows consecutive rows of the packed M tile.
PrefillTma make_tma(const PrefillParams& p) {
  constexpr std::uint64_t kElem = 2;  // bf16
  PrefillTma t{};
  t.box_rows = Traits::kTileM % p.group == 0 ? p.group : 1;
  const auto box_rows = static_cast<std::uint32_t>(t.box_rows);
  const auto d = static_cast<std::uint64_t>(Traits::kHeadDim);
  const auto h_q = static_cast<std::uint64_t>(p.h_q);
  const auto total_q = static_cast<std::uint64_t>(p.total_q);
  // A dimension of size 1 may carry any stride; give TMA a legal one.
  const std::uint64_t q_head = p.h_q == 1 ? d * kElem : static_cast<std::uint64_t>(p.stride_q_head) * kElem;
  const std::uint64_t q_token = p.total_q == 1 ? h_q * q_head : static_cast<std::uint64_t>(p.stride_q_token) * kElem;
  const TensorMapDim q_dims[3] = {{d, kElem, Traits::kBoxCols}, {h_q, q_head, box_rows}, {total_q, q_token, 1}};
  t.q = make_tensor_map_bf16(p.q, q_dims, 3, "q.stride");
  const std::uint64_t o_rows = static_cast<std::uint64_t>(p.topk) * total_q;
  const TensorMapDim o_dims[3] = {{d, kElem, Traits::kBoxCols}, {h_q, d * kElem, box_rows}, {o_rows, h_q * d * kElem, 1}};
  t.o_partial = make_tensor_map_bf16(p.o_partial, o_dims, 3, "o_partial");
  return t;
}

}  // namespace

void launch_prefill_sm90(const PrefillParams& p, int grid_ctas, cudaStream_t stream) {
  check_params(p);
  if (grid_ctas <= 0) return;
  setup();
  const PrefillTma tma = make_tma(p);

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
  MSA_CUDA_CHECK(cudaLaunchKernelEx(&config, prefill_sm90::prefill_sm90_kernel<Traits>, p, tma));
}

int prefill_sm90_ctas_per_sm() { return setup(); }

}  // namespace msa::cuda
