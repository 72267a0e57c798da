// The indexer: per (index head, query, block) the best visible dot product, spec §5.
#pragma once

#include <cstddef>
#include <memory>

#include "msa/options.h"
#include "msa/plan.h"
#include "msa/shapes.h"

namespace msa {

struct IndexerArgs {
  TensorView index_q;  // [total_q, h_i, d] bf16 | fp16 | fp8_e4m3 (decode: [B, Q, h_i, d] viewed
                       // as rows). FP8 E4M3 (MSA's q8kv8): the scores are the dot products of
                       // the E4M3 values as they are (no descale factors), times scale
  KvCache index_k;     // k only, index_q's dtype: paged [num_pages, 1, page_size, d] or flat
                       // [total_k, 1, d]; v absent
  VarlenBatch batch;
  TensorView scores;   // [h_i, total_q, max_cols] fp32, max_cols >= ceil(max k_len / 128)
                       // (written; blocks with no visible token hold -inf)
};

class Indexer {
 public:
  // h_i index heads of dim d; scale 0 means 1 / sqrt(d).
  Indexer(int h_i, int d, float scale = 0.f, const Options& options = {});
  ~Indexer();
  Indexer(Indexer&&) noexcept;
  Indexer& operator=(Indexer&&) noexcept;

  void plan(const VarlenBatch& batch, cudaStream_t stream = nullptr);
  void run(const IndexerArgs& args, cudaStream_t stream = nullptr);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The indexer and the exact top-k in one operator: each (index head, query) row's topk block ids
// exactly as TopK (TopkRanking::kExact) picks them from the scores Indexer writes with
// max_cols = ceil(max_k_len / 128), without the scores ever being written (2 GB at 128k tokens
// and h_i = 4). On CUDA every row's scores stay on chip while its top-k is selected.
struct IndexerTopkArgs {
  TensorView index_q;  // as IndexerArgs::index_q
  KvCache index_k;     // as IndexerArgs::index_k
  VarlenBatch batch;   // k_len <= the planned max_k_len (checked on the CPU and in strict mode;
                       // on CUDA otherwise blocks past ceil(max_k_len / 128) are not ranked)
  TensorView topk;     // [h_i, total_q, topk] int32 (written): the prefill layout; any
                       // non-overlapping strides (the MSA decode layout [B * Q, h_i, topk] is
                       // this tensor transposed)
};

class IndexerTopK {
 public:
  // h_i index heads of dim d, topk in 1..32; scale 0 means 1 / sqrt(d). options.topk_ranking
  // must be kExact (the quantised ranking needs each row's score range before any key, so it
  // takes Indexer and TopK).
  IndexerTopK(int h_i, int d, int topk, float scale = 0.f, const Options& options = {});
  ~IndexerTopK();
  IndexerTopK(IndexerTopK&&) noexcept;
  IndexerTopK& operator=(IndexerTopK&&) noexcept;

  // Scratch bytes for a problem (problem.batch, total_q and max_k_len; needs no GPU): on CUDA
  // the per-unit candidate lists of rows whose blocks are split over several work units (at most
  // h_i * total_q * 31 * 8 bytes per unit of a row, only for batches of few query tiles), 0 on
  // the CPU. With no set_workspace() the object allocates it in plan() (grown_workspace_bytes of
  // the need). It also holds every problem no larger in batch, total_q and max_k_len: a
  // workspace sized once for the largest call serves them all.
  static std::size_t workspace_bytes(int h_i, int topk, const ProblemSize& problem, const Options& options = {});
  // Use caller memory (on the backend's device, 256-byte aligned) as the scratch.
  void set_workspace(void* data, std::size_t bytes);

  // Fixes the geometry run() will see from host-known sizes only (B, total_q, a bound on k_len);
  // launches nothing and reads nothing from the device.
  void plan(const ProblemSize& problem, cudaStream_t stream = nullptr);
  // B and total_q as planned. Reads the batch, the page table and the index tensors on the device
  // only (CUDA): one or two launches, no allocation, no host synchronisation (unless
  // options.strict), so a captured graph replays it with new contents in the same buffers.
  void run(const IndexerTopkArgs& args, cudaStream_t stream = nullptr);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace msa
