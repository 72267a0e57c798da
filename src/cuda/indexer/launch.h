// Host entry of the sm_90a prefill indexer kernel, one instance per dtype of the instantiation
// list (cmake/cuda_instances.cmake); the definition (launch.cuh) is included only by the
// generated instance files. The operator layer (src/cuda/api/indexer.cpp) has validated p.
#pragma once

#include "cuda/indexer/params.h"
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
template <DType kDtype>
void launch_indexer(const IndexerParams& p, const IndexerTma& tma, int sm_count, cudaStream_t stream);

}  // namespace msa::cuda
