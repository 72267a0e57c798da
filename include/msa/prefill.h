// Sparse prefill: plan (k2q CSR) then run (KV-block-major attention + combine), spec §1-3.
#pragma once

#include <cstddef>
#include <cstdint>
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
  // that own their memory; with no set_workspace() the object allocates it in plan(), with
  // headroom (grown_workspace_bytes, msa/plan.h), and again only when a plan needs more. It also
  // holds every problem no larger in batch, total_q and max_k_len (the same shape and options):
  // a workspace sized once for the largest call serves them all.
  static std::size_t workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                     const Options& options = {});
  // Use caller memory (on the backend's device, 256-byte aligned) as the scratch.
  void set_workspace(void* data, std::size_t bytes);

  // Builds the reverse CSR and work list of this batch and selection. On the CUDA backend
  // with batch tensors in device memory use the overload below (k_len cannot be read without
  // a host synchronisation); CPU batch tensors work with both backends.
  void plan(const VarlenBatch& batch, const TensorView& topk, cudaStream_t stream = nullptr);
  // The same with a host-known bound max_k_len >= every k_len[b] (capacities are sized from
  // it). With device-resident cu_seqlens_q, k_len and topk the CUDA backend plans entirely on
  // the device: no host synchronisation, capturable in a CUDA graph once the workspace is big
  // enough (set_workspace(), or an earlier plan() of an equal or larger problem).
  void plan(const VarlenBatch& batch, const TensorView& topk, std::int64_t max_k_len,
            cudaStream_t stream);
  // Attention over the planned selection; args.batch and args.topk must be those planned.
  // Never allocates.
  void run(const PrefillArgs& args, cudaStream_t stream = nullptr);
  // A host copy of the current plan. On CUDA it synchronises with the plan's stream and copies
  // the device arrays back: a debugging and testing aid, not for hot paths.
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
