// The persistent schedules of the CUDA kernels. A persistent grid has fewer CTAs than work
// units; CTA c runs positions c, c + gridDim.x, ... (or a snake over them) below the
// schedule's count, and every warp role of the CTA walks the same positions:
//
//   for (const int pos : schedule.mine()) { ... schedule.item(pos) / schedule.tile(pos) ... }
//
// Counts live in device memory (written by the planner), so the host never reads them.
#pragma once

#include <cstdint>

#include "core/plan_encoding.h"
#include "core/tile_route.h"

namespace msa::cuda {

// Positions blockIdx.x, blockIdx.x + gridDim.x, ... below `end`.
struct PersistentRange {
  int first;
  int stop;
  struct Iterator {
    int pos;
    __device__ int operator*() const { return pos; }
    __device__ Iterator& operator++() {
      pos += static_cast<int>(gridDim.x);
      return *this;
    }
    __device__ bool operator!=(const Iterator& end) const { return pos < end.pos; }
  };
  __device__ Iterator begin() const { return Iterator{first}; }
  __device__ Iterator end() const { return Iterator{stop}; }
};

__device__ __forceinline__ PersistentRange persistent_range(int count) {
  return PersistentRange{static_cast<int>(blockIdx.x), count};
}
// This CTA's position after `pos` (may be past the end).
__device__ __forceinline__ int next_position(int pos) { return pos + static_cast<int>(gridDim.x); }

// Positions of a snake over rounds of gridDim.x positions, below `stop`: on even rounds CTA c
// takes position round * gridDim.x + c, on odd ones round * gridDim.x + gridDim.x - 1 - c.
// Over units ordered heaviest first, the CTA that takes a round's heaviest unit takes the next
// round's lightest. A position at or past `stop` ends the range (every later one is larger).
struct SnakeRange {
  int stop;
  struct Iterator {
    int round;
    int pos;
    __device__ int operator*() const { return pos; }
    __device__ Iterator& operator++() {
      const int g = static_cast<int>(gridDim.x);
      const int c = static_cast<int>(blockIdx.x);
      ++round;
      pos = round * g + ((round & 1) != 0 ? g - 1 - c : c);
      return *this;
    }
    __device__ bool operator!=(const Iterator& end) const { return pos < end.pos; }
  };
  __device__ Iterator begin() const { return Iterator{0, static_cast<int>(blockIdx.x)}; }
  __device__ Iterator end() const { return Iterator{0, stop}; }
};

// The KV-block-major work list (the k2q plan's items), *count of them.
struct WorkListSchedule {
  const WorkItem* items;      // [work_capacity]
  const std::int32_t* count;  // [1] work_count, <= work_capacity
  __device__ int size() const { return *count; }
  __device__ PersistentRange mine() const { return persistent_range(size()); }
  __device__ const WorkItem& item(int pos) const { return items[pos]; }
};

// The tile-union kernel's tiles: all `tiles` of them in rank order (tile_of_rank, heaviest
// first), or the first *count of `list` (the routing lists its tiles in the same order), on a
// snake over the CTAs.
struct TileListSchedule {
  std::int64_t tiles;         // h_kv * tiles per head
  int h_kv;                   // KV heads (tile_of_rank)
  const std::int32_t* list;   // [tiles] or null: every tile
  const std::int32_t* count;  // [1] when list is set
  __device__ int size() const {
    return list != nullptr ? min(max(*count, 0), static_cast<int>(tiles)) : static_cast<int>(tiles);
  }
  __device__ SnakeRange mine() const { return SnakeRange{size()}; }
  __device__ int tile(int pos) const {
    return list != nullptr ? list[pos] : tile_of_rank(pos, static_cast<int>(tiles) / h_kv, h_kv);
  }
};

// Every tile of the tile-union kernel over groups of group_heads KV heads, each group's tiles in
// rank order (tile_of_rank_grouped), on a snake over the CTAs.
struct GroupedTileSchedule {
  std::int64_t tiles;  // h_kv * tiles per head
  int h_kv;            // KV heads
  int group_heads;     // 1..h_kv (h_kv: tile_of_rank's order)
  __device__ int size() const { return static_cast<int>(tiles); }
  __device__ SnakeRange mine() const { return SnakeRange{size()}; }
  __device__ int tile(int pos) const {
    return tile_of_rank_grouped(pos, static_cast<int>(tiles) / h_kv, h_kv, group_heads);
  }
};

}  // namespace msa::cuda
