// Sparse prefill: plan (k2q CSR) then run (KV-block-major attention + combine), spec §1-3.
#pragma once

#include <cstddef>
#include <memory>

#include "msa/options.h"
#include "msa/plan.h"
#include "msa/shapes.h"

namespace msa {

struct PrefillArgs {
  TensorView q;      // [total_q, h_q, d] bf16 | fp16
  KvCache kv;        // paged [num_pages, h_kv, page_size, d] or flat [total_k, h_kv, d], q's dtype
  VarlenBatch batch; // cu_seqlens_q [B + 1], k_len [B]
  TensorView topk;   // [h_kv, total_q, topk] int32, batch-local block ids, -1 = none
  TensorView sinks;  // [h_q] fp32 attention-sink logits; may be absent
  TensorView out;    // [total_q, h_q, d] q's dtype (written)
  TensorView lse;    // [total_q, h_q] fp32 natural-log LSE; may be absent (written)
};

class SparsePrefill {
 public:
  explicit SparsePrefill(const AttentionShape& shape, const Options& options = {});
  ~SparsePrefill();
  SparsePrefill(SparsePrefill&&) noexcept;
  SparsePrefill& operator=(SparsePrefill&&) noexcept;

  // Bytes of scratch (plan arrays and partials) a problem of this size needs, for callers
  // that own their memory; with no set_workspace() the object allocates it in plan().
  static std::size_t workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                     const Options& options = {});
  // Use caller memory (on the backend's device, 256-byte aligned) as the scratch.
  void set_workspace(void* data, std::size_t bytes);

  // Builds the reverse CSR and work list of this batch and selection.
  void plan(const VarlenBatch& batch, const TensorView& topk, cudaStream_t stream = nullptr);
  // Attention over the planned selection; args.batch and args.topk must be those planned.
  // Never allocates.
  void run(const PrefillArgs& args, cudaStream_t stream = nullptr);
  // A host copy of the current plan.
  K2qCsr plan_snapshot() const;

  const AttentionShape& shape() const;
  const Options& options() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// plan() + run() in one call.
void sparse_prefill(const AttentionShape& shape, const PrefillArgs& args,
                    const Options& options = {}, cudaStream_t stream = nullptr);

}  // namespace msa
