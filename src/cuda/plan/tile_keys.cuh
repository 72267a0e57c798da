// The keys of a query tile's top-k entries, shared by the planner's routing
// (cuda/plan/tile_route.cu, which counts them) and the tile-union kernel's builders
// (prefill/sm90/tile_union/builder.cuh, which build the union list from them), so that both
// see the same union.
//
// A tile is queries [q0, q0 + nq) of one KV head and may span requests. Each request of the
// tile is a segment numbered by its first query's offset in the tile (0 for the request
// holding q0), and an entry's key is union_key::of_id(segment, id, blocks of the request):
// keys of different requests never collide, ids outside [0, blocks) are kNone.
#pragma once

#include <cstdint>

#include "core/plan_encoding.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"

namespace msa::cuda {

struct TileQuery {
  int b;        // request
  int segment;  // its segment in the tile, 0..segments - 1 (the caller's table size)
  int k_len;    // max(k_len[b], 0)
  int blocks;   // ceil(k_len / 128)
  int pos;      // position of the query in its request (bottom-right causal)
};

// The last i in [first, n) with values[i * stride] <= x, for values ascending there and
// values[first] <= x (first when none is); a binary search.
__device__ __forceinline__ int last_at_most(const std::int32_t* values, int n, std::int64_t x, int first = 0,
                                            std::int64_t stride = 1) {
  int lo = first, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (values[mid * stride] <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The request holding packed query q: the last b in [b_first, batch) with cu_seqlens_q[b] <= q
// (b_first: any request at or before it, 0 when unknown; `stride`: of cu_seqlens_q, elements).
__device__ __forceinline__ int request_of_query(const std::int32_t* cu_seqlens_q, int batch, std::int64_t q,
                                                int b_first, std::int64_t stride = 1) {
  return last_at_most(cu_seqlens_q, batch, q, b_first, stride);
}

// Query q of request b, whose packed queries are [start, end), in a tile starting at query q0
// and holding at most `segments` queries.
__device__ __forceinline__ TileQuery tile_query(const std::int32_t* k_len, int b, std::int64_t start, std::int64_t end,
                                                std::int64_t q0, std::int64_t q, int segments) {
  TileQuery t;
  t.b = b;
  // Clamped for batches that break the contract (cu_seqlens_q changed on the device since plan()):
  // results are then unspecified, but every segment stays a valid index of a per-query table.
  t.segment = static_cast<int>(min(start > q0 ? start - q0 : std::int64_t(0), std::int64_t(segments - 1)));
  t.k_len = max(k_len[b], 0);
  t.blocks = (t.k_len + kBlockSize - 1) / kBlockSize;
  t.pos = static_cast<int>(t.k_len - (end - start) + (q - start));
  return t;
}

__device__ __forceinline__ TileQuery locate_tile_query(const std::int32_t* cu_seqlens_q, const std::int32_t* k_len,
                                                       int batch, std::int64_t q0, std::int64_t q, int b_first,
                                                       int segments) {
  const int b = request_of_query(cu_seqlens_q, batch, q, b_first);
  return tile_query(k_len, b, cu_seqlens_q[b], cu_seqlens_q[b + 1], q0, q, segments);
}

// The same for a uniform batch of q_per_request queries per request (the decode's: request b
// holds packed queries [b Q, (b + 1) Q)), which needs no cu_seqlens_q: only k_len is read.
__device__ __forceinline__ TileQuery locate_uniform_query(const std::int32_t* k_len, int q_per_request, std::int64_t q0,
                                                          std::int64_t q, int segments) {
  const int b = static_cast<int>(q / q_per_request);
  const std::int64_t start = std::int64_t(b) * q_per_request;
  return tile_query(k_len, b, start, start + q_per_request, q0, q, segments);
}

// An open-addressing table of 2^bits slots in shared memory, free slots holding
// union_key::kNone, with fewer keys than slots. Shared by the routing (which counts fresh keys)
// and the tile-union builders (which keep each key's first entry in its slot).
//
// The slot where `key`'s probe starts.
__device__ __forceinline__ unsigned union_key_home(std::int32_t key, int bits) {
  return (static_cast<std::uint32_t>(key) * 2654435761u) >> (32 - bits);
}

// Finishes an offer of `key` whose probe at `slot` found `held` (atomicCAS(&table[slot], kNone,
// key)'s result): the key's slot (the one it already held, or a free one it took), and `fresh`
// true for the one offer of a key that took it. Any number of threads may offer at once.
__device__ __forceinline__ unsigned finish_union_offer(std::int32_t* table, int bits, std::int32_t key, unsigned slot,
                                                       std::int32_t held, bool& fresh) {
  for (;;) {  // fewer keys than slots: a free slot or this key is always found
    fresh = held == union_key::kNone;
    if (fresh || held == key) return slot;
    slot = (slot + 1) & ((1u << bits) - 1u);
    held = atomicCAS(&table[slot], union_key::kNone, key);
  }
}

// Offers `key` (not union_key::kNone) to the table: finish_union_offer from its home slot.
__device__ __forceinline__ unsigned offer_union_key(std::int32_t* table, int bits, std::int32_t key, bool& fresh) {
  const unsigned slot = union_key_home(key, bits);
  return finish_union_offer(table, bits, key, slot, atomicCAS(&table[slot], union_key::kNone, key), fresh);
}

}  // namespace msa::cuda
