// Log-sum-exp merge of per-block partials, spec §3.
#pragma once

#include <memory>

#include "msa/options.h"
#include "msa/shapes.h"

namespace msa {

struct CombineArgs {
  TensorView o_partial;     // [topk, total_q, h_q, d] fp32 | bf16 | fp16 (CUDA: bf16 | fp16): partial of slot s
  TensorView lse_partial;   // [topk, total_q, h_q] fp32 natural log, -inf = no visible key
  TensorView split_counts;  // [total_q, h_kv] int32: slots 0..n-1 of the row are valid
  TensorView out;           // [total_q, h_q, d] bf16 | fp16 (written)
  TensorView lse;           // [total_q, h_q] fp32; may be absent (written)
  TensorView sinks;         // [h_q] fp32 attention-sink logits; may be absent. A sink joins the
                            // merge as one more term exp(sink) of value zero (spec §6)
};

class Combine {
 public:
  explicit Combine(const AttentionShape& shape, const Options& options = {});
  ~Combine();
  Combine(Combine&&) noexcept;
  Combine& operator=(Combine&&) noexcept;

  void plan(std::int64_t total_q, cudaStream_t stream = nullptr);
  // Merges in ascending slot order (bitwise reproducible). n = 0, Z = 0 or a non-finite merge
  // gives out = 0, lse = -inf; with a sink and no finite partial, out = 0 and lse = sink.
  void run(const CombineArgs& args, cudaStream_t stream = nullptr);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace msa
