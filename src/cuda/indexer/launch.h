// Host entry of the sm_90a prefill indexer kernel, one instance per dtype of the instantiation
// list (cmake/cuda_instances.cmake); the definition (launch.cuh) is included only by the
// generated instance files. The operator layer (src/cuda/api/indexer.cpp) has validated p.
#pragma once

#include <cstddef>

#include "cuda/indexer/params.h"
#include "msa/plan.h"
#include "msa/tensor.h"

typedef struct CUstream_st* cudaStream_t;

namespace msa::cuda {

// Score columns per work unit for a call: enough units for every SM to take several, few enough
// that a unit's Q gather is small beside its K blocks. Results do not depend on it.
int indexer_chunk_cols(std::int64_t total_q, int queries_per_tile, int cols, int sm_count);

// Writes every element of p.scores: each (head, query, column) the scaled maximum over the
// block's tokens the query sees, or -inf when it sees none. Batch values are read on the
// device and clamped: inconsistent ones change which rows and columns are computed, never which
// memory is addressed. min(sm_count, units) persistent CTAs; programmatic dependent launch
// (waits for the previous kernel before reading anything). Graph-capturable, bitwise
// reproducible (every score is one warpgroup's WGMMA of one block).
//
// kList > 0 is the fused indexer + top-k (p.topk instead of p.scores; p.k <= kList + 1): rows
// whose units cover all their columns (p.chunks == 1) get their ids here, the others a partial
// list per unit in p.partial, which launch_indexer_merge then turns into ids.
template <DType kDtype, int kList>
void launch_indexer(const IndexerParams& p, const IndexerTma& tma, int sm_count, cudaStream_t stream);

// The fused top-k's merge (p.chunks > 1; merge.cu): per (head, query) row, the best k - 1 keys of
// its units' lists in p.partial, then the row's ids as TopK writes them (the local block last,
// n <= k rows as 0..n-1 then -1). Programmatic dependent launch after the indexer kernel.
void launch_indexer_merge(const IndexerParams& p, int list, cudaStream_t stream);

// The fused indexer + top-k's unit split, from host sizes only (no GPU needed, so that
// workspace_bytes is the same number everywhere). Batches of at least kIndexerTopkWholeRowTiles
// query tiles keep every row in one unit (ids written by the indexer kernel, no merge, no
// scratch); smaller ones (decode steps, short chunks) split their columns towards
// kIndexerTopkUnits units of at least 32 columns (16 for the fewest tiles), each leaving a list
// per row for the merge.
// Measured on the H100 (docs/performance.md step 19): splitting 128-256 tiles
// (S = 8k-16k, 128 decode requests) cost 1.2-2.2x over whole rows; 4 units per SM left the
// decode form 4-10% slower than the separate operators, 8 per SM 4-6% faster; units of 16
// columns made 16-32 tiles of 1k-token chunks on 64k-128k prefixes 15% slower than 32.
constexpr int kIndexerTopkWholeRowTiles = 99;   // three quarters of a 132-SM H100's SMs
constexpr int kIndexerTopkUnits = 1056;         // 8 units per SM
constexpr int kIndexerTopkFewUnits = 132;       // one unit per SM
struct IndexerTopkSplit {
  int cols = 1;                     // ranked columns: ceil(max_k_len / 128), at least 1
  int chunk_cols = 1;               // columns per unit
  int chunks = 1;                   // units per tile
  int list = 15;                    // the kernel instance's kList: 15 for topk <= 16, else 31
  std::size_t workspace_bytes = 0;  // the partial lists [h_i * total_q, chunks, list] (chunks > 1)
};
IndexerTopkSplit indexer_topk_split(int h_i, int topk, const ProblemSize& problem);

}  // namespace msa::cuda
