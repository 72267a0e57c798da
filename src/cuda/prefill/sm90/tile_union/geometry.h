// The tile of the tile-union prefill kernel, on the host and the device: a tile is up to
// kMaxQueries consecutive packed queries of one KV head whose G heads fill the 128-row M tile.
// The planner's routing (cuda/plan/tile_route.h), the host twins (core/tile_route.h, which take
// q_per_tile as a parameter) and the tools use these numbers; no CUDA header is needed.
#pragma once

namespace msa::cuda {

inline constexpr int kTileUnionRows = 128;       // the kernel's M tile
inline constexpr int kTileUnionMaxQueries = 16;  // membership masks are 32-bit; 16 keeps a list at 512
inline constexpr int kTileUnionMaxTopk = 32;

// Queries per tile for a GQA group (1..16 heads): as many as fill the M tile, at most 16.
constexpr int tile_union_queries_per_tile(int group) {
  return group <= 1 ? kTileUnionMaxQueries
                    : (kTileUnionRows / group < kTileUnionMaxQueries ? kTileUnionRows / group : kTileUnionMaxQueries);
}
static_assert(tile_union_queries_per_tile(1) == 16 && tile_union_queries_per_tile(8) == 16 &&
              tile_union_queries_per_tile(16) == 8 && tile_union_queries_per_tile(6) == 16);

}  // namespace msa::cuda
