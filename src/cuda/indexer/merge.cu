// The fused indexer + top-k's merge (launch.h): when a row's columns are split over several
// units (p.chunks > 1, the decode form and other batches of few query tiles), each unit left the
// row's best kList candidates of its columns as TopK keys in p.partial. One warp per (head,
// query) row reads the lists of the units that hold a candidate of the row, takes their best
// k - 1 keys (topk_select::warp_best, as the top-k kernel does on scores) and writes the row's
// ids: the same selection TopK makes from the whole row's scores, since every key in the row's
// top k - 1 is in its unit's top kList.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "core/topk_key.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/indexer/launch.h"
#include "cuda/plan/tile_keys.cuh"
#include "cuda/topk/warp_select.cuh"

namespace msa::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

template <int kList>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) merge_kernel(const IndexerParams p) {
  wait_for_previous_grid();  // the indexer kernel's lists
  const int lane = static_cast<int>(threadIdx.x % 32);
  const std::int64_t rows = std::int64_t{p.h_i} * p.total_q;
  const std::int64_t warps = std::int64_t{gridDim.x} * kWarpsPerBlock;
  for (std::int64_t row = std::int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32; row < rows; row += warps) {
    const std::int64_t head = row / p.total_q;
    const std::int64_t q = row - head * p.total_q;
    const int local = topk_select::local_block(
        topk_select::row_position(p.cu_seqlens_q, p.stride_cu_seqlens_q, p.k_len, p.stride_k_len, p.batch, q));
    std::int32_t* out = p.topk + head * p.stride_topk_head + q * p.stride_topk_token;
    if (topk_select::write_short_row(out, p.stride_topk_slot, p.k, local, lane)) continue;
    const int want = p.k - 1;
    // The units holding a candidate of the row (blocks [0, min(local, cols))): the first `lists`.
    const int ranked = min(local, p.cols);
    const int n = (ranked + p.chunk_cols - 1) / p.chunk_cols * kList;
    const std::uint64_t* keys = p.partial + row * p.chunks * kList;
    const auto keys_of = [&](int c0, std::uint64_t(&key)[4]) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = c0 + 4 * lane + e;
        key[e] = c < n ? keys[c] : 0;
      }
    };
    const std::uint64_t mine = topk_select::warp_best(n, want, lane, keys_of);
    if (lane < want) out[lane * p.stride_topk_slot] = topk_key::id_of(mine);
    if (lane == 0) out[want * p.stride_topk_slot] = local;
  }
}

}  // namespace

void launch_indexer_merge(const IndexerParams& p, int list, cudaStream_t stream) {
  MSA_ASSERT(p.chunks > 1 && p.partial != nullptr && p.topk != nullptr && p.k >= 1 && p.k <= list + 1);
  const std::int64_t rows = std::int64_t{p.h_i} * p.total_q;
  if (rows == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 1 << 20));
  const LaunchShape shape{dim3(blocks), dim3(kWarpsPerBlock * 32), 0};
  if (list == 15)
    launch_pdl(merge_kernel<15>, shape, stream, /*programmatic=*/true, p);
  else
    launch_pdl(merge_kernel<31>, shape, stream, /*programmatic=*/true, p);
}

}  // namespace msa::cuda
