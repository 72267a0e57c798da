// Compile-time traits of the sm_90a query-major tile-union sparse prefill kernel: two
// warpgroups (a 128-row M tile) share each K/V block load, K/V is double buffered, Q stays
// resident for the whole tile. The MMA atoms and swizzled layouts are the KV-block-major
// kernel's (prefill/sm90/config.h) at two warpgroups.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/prefill/sm90/config.h"

namespace msa::cuda::union_sm90 {

using Traits = prefill_sm90::Traits<cute::bfloat16_t, 128, 2>;

// A tile holds at most this many queries, so that its selections (kMaxQueries * 32 ids at
// most) fit one shared-memory list that the CTA deduplicates.
constexpr int kMaxQueries = 16;
constexpr int kMaxTopk = 32;
constexpr int kMaxEntries = kMaxQueries * kMaxTopk;

struct SharedStorage {
  using Element = Traits::Element;
  alignas(1024) Element k[2][cute::cosize_v<Traits::SmemLayoutK>];  // [token, d] swizzled
  alignas(1024) Element v[2][cute::cosize_v<Traits::SmemLayoutV>];  // [token, d] swizzled
  alignas(1024) Element q[cute::cosize_v<Traits::SmemLayoutQ>];     // [row, d], then O
  std::int32_t ids[kMaxEntries];       // segment's selections: entry e = (query e / topk, slot)
  std::int32_t first[kMaxEntries];     // entry index of the first entry with the same id; -1 invalid
  std::int32_t rank[kMaxEntries];      // union index of a first entry
  std::int32_t blocks[kMaxEntries];    // the union: request-local block ids, first-seen order
  std::uint32_t members[kMaxEntries];  // per union block: bit i = tile query i selected it
  std::int32_t row_query[Traits::kTileM];  // tile query of row r in this segment, -1 if none
  std::int32_t row_pos[Traits::kTileM];    // that query's position
  std::int32_t union_size;
};

constexpr std::size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack

}  // namespace msa::cuda::union_sm90
