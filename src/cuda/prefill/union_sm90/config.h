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

// The KV-block-major kernel's MMA atoms and Q/K layouts at two warpgroups. V differs: TMA
// writes V as [token, d] 128-byte-swizzled rows exactly like K (column halves of 128 rows),
// and P V reads those bytes through a transposed (d, token) view, MN-major for WGMMA.
struct Traits : prefill_sm90::Traits<cute::bfloat16_t, 128, 2> {
  using Base = prefill_sm90::Traits<cute::bfloat16_t, 128, 2>;
  using SmemLayoutV = decltype(cute::composition(
      Base::SmemLayoutK{},
      cute::Layout<cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>>, cute::Stride<cute::Int<kBlockN>, cute::_1>>{}));
  // Element offset of token row t of column half c in a K or V buffer (where a TMA box of
  // rows starting at t lands; t a multiple of 8 keeps the swizzle phase).
  static __host__ __device__ constexpr int kv_box_offset(int t, int c) { return c * kBlockN * kBoxCols + t * kBoxCols; }
};
static_assert(Traits::SmemLayoutK{}.layout_b()(8, 0) == Traits::kv_box_offset(8, 0) &&
                  Traits::SmemLayoutK{}.layout_b()(0, Traits::kBoxCols) == Traits::kv_box_offset(0, 1),
              "the K tile is not laid out as column halves of 128 swizzled 128-byte rows");

// Threads: warpgroup 0 is the producer (warp 0 loads K/V, warps 1-3 build unions and gather Q),
// warpgroups 1 and 2 are the consumers.
constexpr int kThreads = 3 * 128;
constexpr int kConsumerThreads = 2 * 128;
constexpr int kBuilderThreads = 96;
// Registers after setmaxnreg: 2 x 128 x 232 + 128 x 40 = 64,512 of the SM's 65,536.
constexpr int kConsumerRegs = 232;
constexpr int kProducerRegs = 40;

// A tile holds at most this many queries (the membership masks are 32-bit; 16 keeps the
// entry list of one tile at 512).
constexpr int kMaxQueries = 16;
constexpr int kMaxTopk = 32;
constexpr int kMaxEntries = kMaxQueries * kMaxTopk;
constexpr int kStages = 2;  // K and V ring depth

// Named barriers (0 is __syncthreads, unused after the prologue).
enum Barrier : int {
  kBuilders = 1,     // the 96 builder threads
  kTurn0 = 2,        // + consumer warpgroup: its turn to issue WGMMAs (256 threads)
  kEpilogue0 = 4,    // + consumer warpgroup: its staged O rows are complete (128 threads)
};

// One tile's union, written by the builders and read by the loader and the consumers.
struct UnionList {
  std::int32_t block[kMaxEntries];     // union entry u: segment << 24 | request-local block id
  std::uint32_t members[kMaxEntries];  // bit i: tile query i selected entry u's block
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
