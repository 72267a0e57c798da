// The indexer: per (index head, query, block) the best visible dot product, spec §5.
#pragma once

#include <memory>

#include "msa/options.h"
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

}  // namespace msa
