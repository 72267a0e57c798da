// Shared-memory plan of the tile-union kernel: the K/V ring (FP8 K/V land in it too), and
// per tile a Q buffer (later the staged O; double buffered but with FP8 K/V) and the tile's union
// list (double buffered); plus the builders' scratch.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/prefill/sm90/common/kv_ring.cuh"
#include "cuda/prefill/sm90/common/traits.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"

namespace msa::cuda::prefill_sm90 {

constexpr int kMaxEntries = kTileUnionMaxEntries;  // distinct entries of a tile's union
// The narrow builders' open-addressing table of entry keys: twice the entries, a power of two.
constexpr int kKeyTableSize = 2 * kMaxEntries;
static_assert((kKeyTableSize & (kKeyTableSize - 1)) == 0);

// One tile's union, written by the builders and read by the loader and the consumers; kWords
// membership words per entry (1: the narrow instances, kTileUnionMemberWords: the wide one).
template <int kWords>
struct UnionList {
  static constexpr int kQueries = 32 * kWords;  // a tile's queries at most
  alignas(16) std::int32_t block[kMaxEntries];  // union entry u: its union_key (16-byte aligned
                                                // for the sort's loads)
  std::uint32_t members[kMaxEntries][kWords];   // bit i % 32 of word i / 32: tile query i
                                                // selected entry u's block
  std::uint8_t chunks[kMaxEntries];             // its block's 16-token chunks on valid pages
  std::int32_t q_pos[kQueries];                 // position of tile query i in its request
  std::int32_t seg_b[kQueries];                 // request of tile segment s
  std::int32_t seg_klen[kQueries];              // its k_len
  std::uint32_t once_segments;                  // bit s: no other tile reads segment s's blocks
                                                // (a decode request wholly in the tile; KvL2Hint);
                                                // the narrow builders' (the wide ones': unset)
  std::int32_t size;                            // union entries
  std::int32_t begin, end;                      // the tile's split of them: entries [begin, end)
  std::int32_t first_coords[kWords > 1 ? 32 : 1];  // the wide builders': lane l's box_coord for the
                                                   // loader's first chunk (entry begin + l / boxes)
};

// The narrow builders' scratch for the tile being built: per top-k entry e = (query e / topk,
// slot), at most kMaxEntries of them.
struct NarrowScratch {
  std::int32_t key[kMaxEntries];                // entry e: union_key, kNone ignored
  std::int32_t first[kMaxEntries];              // first entry with the same key, -1 ignored
  std::int32_t rank[kMaxEntries];               // union index of a first entry (before: the entry's table slot)
  std::int32_t table_key[kKeyTableSize];        // key table: a key, or union_key::kNone for a free slot
  std::int32_t table_first[kKeyTableSize];      //   the smallest entry holding that key
  std::int32_t q_seg[kTileUnionNarrowQueries];  // segment of tile query i
};

// The wide builders' scratch: a bitmap over the blocks the tile's queries can see (segment s's
// visible blocks from bit seg_off[s] on, in segment order), none per top-k entry (up to
// kTileUnionMaxTileEntries of them, read from global memory in each pass that needs them).
struct WideScratch {
  static constexpr int kBitmapWords = kTileUnionMaxVisibleBlocks / 32;
  std::uint32_t bitmap[kBitmapWords];          // bit k: some query chose visible block k
  std::uint16_t word_base[kBitmapWords];       // union rank of word w's first bit: set bits before it
  std::int32_t seg_vis[kTileUnionMaxQueries];  // segment s: the blocks its last tile query sees (0: none)
  std::int32_t seg_off[kTileUnionMaxQueries];  //   its first bit
  std::int32_t builder_base[kBuilderThreads];  // set bits before builder bt's words
  std::uint8_t q_seg[kTileUnionMaxQueries];    // segment of tile query i
  std::int32_t bits;                           // bits in use: min(sum of seg_vis, kTileUnionMaxVisibleBlocks)
  std::int32_t maybe_full;                     // nonzero: no segment sees more than topk blocks, at most 64 in all
  std::int32_t partial;                        // nonzero: some tile query did not choose every block it sees
#ifdef MSA_CTA_STAMPS
  std::int32_t stamp_steps;  // the probe's: nonzero while the CTA's first list is built (stamps.cuh)
#endif
};
static_assert(kTileUnionMaxVisibleBlocks < 65536, "word_base holds ranks in 16 bits");

// Q buffers: two (the next tile's Q gathered while this one computes), one with FP8 K/V (the
// decode, about one tile per CTA: two measured no faster, docs/performance.md step 24), whose
// shared memory goes to the deeper ring instead.
// None where Q comes through the ring (Traits::kQInRing).
template <class Traits>
inline constexpr int kQBuffers = Traits::kQInRing ? 0 : (Traits::kFp8Kv ? 1 : 2);

// The Q buffers' array, or nothing.
struct NoQBuffers {};
template <class Traits>
using QBufferArray =
    std::conditional_t<(kQBuffers<Traits> > 0),
                       typename Traits::Element[kQBuffers<Traits> > 0 ? kQBuffers<Traits> : 1][Traits::kQElements],
                       NoQBuffers>;

template <class Traits>
struct TileUnionStorage {
  using Element = typename Traits::Element;
  using List = UnionList<Traits::kWideTiles ? kTileUnionMemberWords : 1>;
  using Scratch = std::conditional_t<Traits::kWideTiles, WideScratch, NarrowScratch>;
  KvRing<Traits> kv;
  alignas(1024) QBufferArray<Traits> q;  // [kQBuffers][row, d] swizzled, then O
  List list[2];
  Scratch scratch;                           // the builders', for the tile being built
  alignas(8) std::uint64_t q_full[2];        // TMA bytes
  std::uint64_t q_empty[2];                  // 256, after the O stores read it
  std::uint64_t list_full[2];                // 96 builder arrivals
  std::uint64_t list_empty[2];               // 256 consumer + 32 loader arrivals, each after its last read
  // kWays: (running max, sum) of the rows of the ways other than 0, per slot (warp_mma.cuh).
  float2 merge_ml[Traits::kWays ? 7 : 1][16];

  // One thread, before the CTA barrier.
  __device__ void init() {
    kv.init();
    for (int i = 0; i < 2; ++i) {
      Barrier64::init(&q_full[i], 1);
      Barrier64::init(&q_empty[i], kConsumerThreads);
      Barrier64::init(&list_full[i], kBuilderThreads);
      Barrier64::init(&list_empty[i], kConsumerThreads + 32);
    }
  }
};

}  // namespace msa::cuda::prefill_sm90
