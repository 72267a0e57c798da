// The tile of the tile-union kernel, on the host and the device: a tile is up to
// kTileUnionMaxQueries consecutive packed queries of one KV head whose G heads fill the 128-row M
// tile. The planner's routing (cuda/plan/tile_route.h), the host twins (core/tile_route.h, which
// take q_per_tile as a parameter) and the tools use these numbers; no CUDA header is needed.
#pragma once

namespace msa::cuda {

inline constexpr int kTileUnionRows = 128;       // the kernel's M tile
inline constexpr int kTileUnionMaxQueries = 32;  // membership masks are 32-bit
inline constexpr int kTileUnionMaxEntries = 512;  // q_per_tile * topk: the union list and the builders' scratch
inline constexpr int kTileUnionMaxTopk = 32;

// Queries per prefill tile for a GQA group (1..16 heads) and top-k: as many as fill the M tile,
// within the membership masks and the list. The union kernel's step costs the same whatever
// share of the 128 rows a tile fills (docs/performance.md, step 31), so at G <= 4 a tile of 32
// queries halves the steps of one of 16 wherever the union is no larger.
constexpr int tile_union_queries_per_tile(int group, int topk) {
  const int fill = group <= 1 ? kTileUnionRows : kTileUnionRows / group;
  const int list = kTileUnionMaxEntries / (topk < 1 ? 1 : topk);
  const int q = fill < list ? fill : list;
  return q < kTileUnionMaxQueries ? q : kTileUnionMaxQueries;
}
static_assert(tile_union_queries_per_tile(16, 16) == 8 && tile_union_queries_per_tile(8, 32) == 16 &&
              tile_union_queries_per_tile(4, 16) == 32 && tile_union_queries_per_tile(4, 32) == 16 &&
              tile_union_queries_per_tile(1, 16) == 32 && tile_union_queries_per_tile(6, 16) == 21 &&
              tile_union_queries_per_tile(16, 32) == 8);

// Queries per decode tile: at most 16 whatever the top-k (a decode request brings 1-16 queries;
// the decode's tiles and splits were measured with these, docs/performance.md, step 14e).
constexpr int tile_union_decode_queries(int group) { return tile_union_queries_per_tile(group, kTileUnionMaxTopk); }
static_assert(tile_union_decode_queries(1) == 16 && tile_union_decode_queries(8) == 16 &&
              tile_union_decode_queries(16) == 8 && tile_union_decode_queries(6) == 16);

}  // namespace msa::cuda
