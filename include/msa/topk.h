// Exact top-k block selection from indexer scores, spec §5.
#pragma once

#include <memory>

#include "msa/options.h"
#include "msa/shapes.h"

namespace msa {

struct TopkArgs {
  TensorView scores;  // [h, total_q, cols] fp32, cols >= ceil(max k_len / 128)
  VarlenBatch batch;  // gives each row its local block
  TensorView topk;    // [h, total_q, topk] int32 (written): the prefill layout
};

class TopK {
 public:
  explicit TopK(int topk, const Options& options = {});
  ~TopK();
  TopK(TopK&&) noexcept;
  TopK& operator=(TopK&&) noexcept;

  void plan(const VarlenBatch& batch, cudaStream_t stream = nullptr);
  // Row with n = local + 1 candidate blocks: n <= topk gives 0..n-1 then -1; otherwise the
  // topk - 1 best of blocks [0, n - 1) by score descending (ties to the smaller id), then n - 1.
  void run(const TopkArgs& args, cudaStream_t stream = nullptr);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace msa
