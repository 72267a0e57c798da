// Per-row top-k rules shared by the host planner (k2q_host.cpp) and validation
// (validate.cpp), so that the selection semantics and the strict producer contract exist once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tile_route.h"
#include "msa/plan.h"

namespace msa {

// The selection of one top-k row (spec §1): its distinct ids in [0, n_blocks), ascending,
// written to sorted[0, count) (capacity topk); returns count. Slot s of a query is the rank
// of its block in this list. Ids are slot_stride elements apart so both layouts share it.
int row_selection(const std::int32_t* ids, std::int64_t slot_stride, int topk,
                  std::int64_t n_blocks, std::int32_t* sorted);

// The first breach of the producer contract in one row of a query whose local block is
// `local`: ids a -1-padded prefix, unique, in [0, local], the last valid id == local, and
// min(topk, local + 1) valid ids.
struct RowViolation {
  int slot;
  std::int32_t value;
  std::string rule;
};
std::optional<RowViolation> check_row_contract(const std::int32_t* ids, std::int64_t slot_stride,
                                               int topk, std::int64_t local);

// build_k2q_csr with the rows of the tiles `route` sends to the tile-union kernel left out
// (PrefillPath::kAuto): they get no edge and split count 1. route.union_tile, when not null,
// holds h_kv * tiles_per_head(total_q, route.q_per_tile) flags. The oracle of the device
// planner given the same routing.
K2qCsr build_k2q_csr_routed(const AttentionShape& shape, const VarlenBatch& batch, const TensorView& topk,
                            const Options& options, const TileRoute& route);

}  // namespace msa
