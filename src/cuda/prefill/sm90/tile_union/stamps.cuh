// A probe, compiled only with -DMSA_CTA_STAMPS (never in a release build): each CTA of the
// tile-union kernel writes %globaltimer stamps of its tiles into TileUnionParams::stamps, and the
// launcher writes the last launch's stamps to $MSA_CTA_STAMPS_FILE.<instance> at exit (read by
// scripts/cta_stamps.py). What it answers: where a CTA's time goes at its start and end (the first
// tile's build, the light tiles' list waits; docs/performance.md step 94).
#pragma once

#ifdef MSA_CTA_STAMPS
#include <cstdint>

namespace msa::cuda::prefill_sm90::stamps {

constexpr int kHeader = 10;    // per CTA: start, end, SM id, tiles run, the first build's steps
constexpr int kPerTile = 8;    // per tile: the fields below
constexpr int kMaxTiles = 64;  // tiles past this many a CTA are not stamped
constexpr int kPerCta = kHeader + kPerTile * kMaxTiles;
enum Header : int {
  kStart = 0,
  kEnd = 1,
  kSmid = 2,
  kTiles = 3,
  // The wide builders' first build (build_wide_list), builder 0 after each step's barrier:
  kCleared = 4,  // step 1, the bitmap and segments cleared
  kLocated = 5,  // step 2, each query's request, segment and position
  kScanned = 6,  // step 3, the segments' first bits
  kChosen = 7,   // step 3b or 4, the full check or the chosen blocks' bits
  kListed = 8,   // steps 5-6 (or the direct list), the entries and membership
  kChunked = 9,  // step 7, the entries' chunks (then step 8, the first coordinates)
};
enum Field : int {
  kListWait = 0,    // consumer 0 starts waiting for the tile's list
  kListIn = 1,      //   has it
  kQIn = 2,         //   has the tile's Q
  kTileEnd = 3,     //   has stored the tile's O
  kBuildBegin = 4,  // builder 0 starts the build (list buffer free)
  kBuildEnd = 5,    //   has published the list
  kLoaderList = 6,  // the loader has the list
  kEntries = 7,     // the list's entries (the tile's union blocks)
};

__device__ __forceinline__ std::uint64_t now() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void header(std::uint64_t* buf, Header h, std::uint64_t v) {
  if (buf != nullptr) buf[std::int64_t(blockIdx.x) * kPerCta + h] = v;
}
__device__ __forceinline__ void tile(std::uint64_t* buf, std::uint32_t iter, Field f, std::uint64_t v) {
  if (buf != nullptr && iter < kMaxTiles) buf[std::int64_t(blockIdx.x) * kPerCta + kHeader + iter * kPerTile + f] = v;
}
__device__ __forceinline__ std::uint32_t smid() {
  std::uint32_t s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

}  // namespace msa::cuda::prefill_sm90::stamps
// One step of the wide builders' first build (build_wide_list, builder 0).
#define MSA_BUILD_STEP(field) \
  if (bt == 0 && s.stamp_steps != 0) ::msa::cuda::prefill_sm90::stamps::header(p.stamps, stamps::field, stamps::now())
#else
#define MSA_BUILD_STEP(field)
#endif
