// The indexer's work units, found on the device from the batch alone (no plan kernel, no
// workspace): every request's queries form ceil(q_len / queries_per_tile) tiles, and every tile
// `chunks` units of `chunk_cols` score columns. Units are numbered column-chunk first, and within
// a chunk from the last tile of the batch backwards (a request's last tiles see the most blocks,
// so the longest units come first); CTAs take them in a snake order (unit_of), which keeps the
// per-CTA sums even when consecutive units shrink steadily.
#pragma once

#include <cstdint>

#include "cuda/indexer/config.h"
#include "cuda/indexer/params.h"

namespace msa::cuda::indexer_sm90 {

// Request b's query rows [begin, end), clamped into [0, total_q) so that inconsistent device
// values never address a row outside the tensors.
struct QueryRange {
  int begin, end;
};
__device__ __forceinline__ QueryRange query_range(const IndexerParams& p, int b) {
  const std::int64_t lo = p.cu_seqlens_q[std::int64_t{b} * p.stride_cu_seqlens_q];
  const std::int64_t hi = p.cu_seqlens_q[std::int64_t{b + 1} * p.stride_cu_seqlens_q];
  const std::int64_t begin = lo < 0 ? 0 : (lo > p.total_q ? p.total_q : lo);
  const std::int64_t end = hi < begin ? begin : (hi > p.total_q ? p.total_q : hi);
  return {static_cast<int>(begin), static_cast<int>(end)};
}

__device__ __forceinline__ int tiles_of(const IndexerParams& p, int b) {
  const QueryRange r = query_range(p, b);
  return (r.end - r.begin + p.queries_per_tile - 1) / p.queries_per_tile;
}

// Tiles of the whole batch. One warp; every lane returns the sum.
__device__ __forceinline__ std::int64_t count_tiles(const IndexerParams& p, int lane) {
  std::int64_t sum = 0;
  for (int b0 = 0; b0 < p.batch; b0 += 32) sum += b0 + lane < p.batch ? tiles_of(p, b0 + lane) : 0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  return sum;
}

// The i-th unit this CTA runs: snake order over rounds of gridDim.x units.
__device__ __forceinline__ std::int64_t unit_of(std::int64_t i) {
  const std::int64_t grid = gridDim.x;
  const std::int64_t within = (i & 1) ? grid - 1 - blockIdx.x : blockIdx.x;
  return i * grid + within;
}

// Unit u (< chunks * total_tiles). One warp; every lane returns the same unit.
__device__ __forceinline__ Unit find_unit(const IndexerParams& p, std::int64_t u, std::int64_t total_tiles, int lane) {
  const int chunk = static_cast<int>(u / total_tiles);
  std::int64_t t = total_tiles - 1 - (u - std::int64_t{chunk} * total_tiles);  // tile index, request-major
  // The request holding tile t: a running sum over the requests, 32 at a time.
  int b = 0, tile_in_b = 0;
  for (int b0 = 0; b0 < p.batch; b0 += 32) {
    const int n = b0 + lane < p.batch ? tiles_of(p, b0 + lane) : 0;
    std::int64_t incl = n;  // inclusive prefix over the lanes
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const std::int64_t v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    const std::uint32_t past = __ballot_sync(0xffffffffu, incl > t);
    if (past != 0u) {
      const int hit = __ffs(past) - 1;
      const std::int64_t before = __shfl_sync(0xffffffffu, incl - n, hit);
      b = b0 + hit;
      tile_in_b = static_cast<int>(t - before);
      break;
    }
    t -= __shfl_sync(0xffffffffu, incl, 31);
  }
  const QueryRange r = query_range(p, b);
  const int k_len = p.k_len[std::int64_t{b} * p.stride_k_len];
  const int first = tile_in_b * p.queries_per_tile;  // request-local query
  const int nq = min(p.queries_per_tile, r.end - r.begin - first);
  Unit unit;
  unit.b = b;
  unit.q0 = r.begin + first;
  unit.rows = nq * p.h_i;
  // Position of query i: k_len - q_len + i, in 64 bits (hostile k_len and q_len may be far apart).
  const std::int64_t pos0 = std::int64_t{k_len} - (r.end - r.begin) + first;
  const std::int64_t pos_last = pos0 + nq - 1;
  unit.pos0 = static_cast<int>(pos0 < INT32_MIN ? INT32_MIN : pos0);
  unit.k_len = k_len;
  // Blocks up to the last query's local one hold a visible token (none when pos_last < 0).
  const std::int64_t blocks = pos_last < 0 ? 0 : pos_last / kBlockSize + 1;
  unit.col0 = chunk * p.chunk_cols;
  unit.col_end = min(p.cols, unit.col0 + p.chunk_cols);
  unit.compute_end = static_cast<int>(blocks < unit.col0 ? unit.col0 : (blocks > unit.col_end ? unit.col_end : blocks));
  return unit;
}

}  // namespace msa::cuda::indexer_sm90
