// Compile-time traits of the sm_90a query-major tile-union sparse prefill kernel: three
// warpgroups, a producer (one loader warp issuing TMA for K/V, three builder warps computing
// each tile's union of blocks and gathering its Q with TMA) and two consumers (64 rows of the
// 128-row M tile each) that take turns on the tensor cores. K and V each have a 2-stage ring,
// Q and the union lists are double buffered across tiles.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cute/tensor.hpp>

#include "cuda/prefill/sm90/config.h"

namespace msa::cuda::union_sm90 {

// The block-major kernel's traits (two consumer warpgroups, K and V written by TMA) and its
// thread roles, register split and named-barrier ids (here the builders build union lists).
using Traits = prefill_sm90::TmaTraits;
using prefill_sm90::kBuilders;
using prefill_sm90::kBuilderThreads;
using prefill_sm90::kConsumerRegs;
using prefill_sm90::kConsumerThreads;
using prefill_sm90::kEpilogue0;
using prefill_sm90::kProducerRegs;
using prefill_sm90::kStages;
using prefill_sm90::kThreads;

// A tile holds at most this many queries (the membership masks are 32-bit; 16 keeps the
// entry list of one tile at 512).
constexpr int kMaxQueries = 16;
constexpr int kMaxTopk = 32;
constexpr int kMaxEntries = kMaxQueries * kMaxTopk;

// One tile's union, written by the builders and read by the loader and the consumers.
struct UnionList {
  std::int32_t block[kMaxEntries];     // union entry u: segment << 24 | request-local block id
  std::uint32_t members[kMaxEntries];  // bit i: tile query i selected entry u's block
  std::uint8_t chunks[kMaxEntries];    // its block's 16-token chunks on valid pages (block_chunks)
  std::int32_t q_pos[kMaxQueries];     // position of tile query i in its request
  std::int32_t seg_b[kMaxQueries];     // request of tile segment s
  std::int32_t seg_klen[kMaxQueries];  // its k_len
  std::int32_t size;                   // union entries
};

struct SharedStorage {
  using Element = Traits::Element;
  alignas(1024) Element k[kStages][cute::cosize_v<Traits::SmemLayoutK>];  // [token, d] swizzled
  alignas(1024) Element v[kStages][cute::cosize_v<Traits::SmemLayoutK>];  // [token, d] swizzled
  alignas(1024) Element q[2][cute::cosize_v<Traits::SmemLayoutQ>];        // [row, d], then O
  UnionList list[2];
  // Builder scratch for the tile being built.
  std::int32_t key[kMaxEntries];    // entry e = (query e / topk, slot): segment << 24 | id, -1 ignored
  std::int32_t first[kMaxEntries];  // first entry with the same key, -1 ignored
  std::int32_t rank[kMaxEntries];   // union index of a first entry
  std::int32_t q_seg[kMaxQueries];  // segment of tile query i
  alignas(8) std::uint64_t k_full[kStages], k_empty[kStages];
  std::uint64_t v_full[kStages], v_empty[kStages];
  std::uint64_t q_full[2], q_empty[2];
  std::uint64_t list_full[2], list_empty[2];
  std::uint64_t v_tail;  // the loader's own barrier for V blocks it must zero-fill past k_len
};

constexpr std::size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack
static_assert(kSmemBytes <= 227 * 1024, "shared memory plan exceeds the sm_90 limit");

}  // namespace msa::cuda::union_sm90
