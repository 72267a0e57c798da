// Sparse decode (and multi-token prediction): Q = 1..16 queries per request, spec §4.
#pragma once

#include <cstddef>
#include <memory>

#include "msa/options.h"
#include "msa/plan.h"
#include "msa/shapes.h"

namespace msa {

struct DecodeArgs {
  TensorView q;          // [B * Q, h_q, d] bf16 | fp16; row b * Q + t is query t of request b
  KvCache kv;            // paged or flat, q's dtype; or FP8 E4M3 with bf16 q (k_descale, v_descale)
  TensorView seq_len;    // [B] int32 final lengths, >= Q; query t sits at seq_len[b] - Q + t
  TensorView topk;       // [B * Q, h_kv, topk] int32 (MSA decode layout), or
                         // [h_kv, B * Q, topk] when topk_head_major
  bool topk_head_major = false;
  int q_per_request = 1; // Q, 1..16
  TensorView sinks;      // [h_q] fp32; may be absent
  // FP8 E4M3 K/V (kv.k and kv.v in DType::kFP8E4M3, q in bf16) only: the factors that turn the
  // stored values into K and V (K = k_descale * stored), per tensor [1] or per KV head [h_kv],
  // fp32, finite and > 0. Absent for 16-bit K/V.
  TensorView k_descale;
  TensorView v_descale;
  TensorView out;        // [B * Q, h_q, d] q's dtype (written)
  TensorView lse;        // [B * Q, h_q] fp32; may be absent (written)
};

class SparseDecode {
 public:
  explicit SparseDecode(const AttentionShape& shape, const Options& options = {});
  ~SparseDecode();
  SparseDecode(SparseDecode&&) noexcept;
  SparseDecode& operator=(SparseDecode&&) noexcept;

  // Scratch bytes of a decode of problem.batch = B requests, problem.total_q = B * Q query rows
  // and seq_len up to problem.max_k_len (needs no GPU); with no set_workspace() the object
  // allocates it in plan() (grown_workspace_bytes of the need). It also holds every decode no
  // larger in batch, total_q and max_k_len (any Q; a max_k_len of 0, no bound, counts as larger
  // than any): a workspace sized once for the largest step serves every smaller one.
  static std::size_t workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                     const Options& options = {});
  // Use caller memory (on the backend's device, 256-byte aligned) as the scratch.
  void set_workspace(void* data, std::size_t bytes);

  // Fixes the batch geometry that run() will see from host-known sizes only: B, Q and an upper
  // bound of seq_len (0: none given; the CUDA backend then splits the work as for long
  // requests). On CUDA it launches nothing and reads nothing back (`stream` is unused there):
  // capturable once the workspace is big enough.
  void plan(std::int64_t batch, int q_per_request, std::int64_t max_seq_len,
            cudaStream_t stream = nullptr);
  // Reads seq_len, top-k, the page table and sinks on the device only (CUDA): one captured
  // run() replays step after step with new contents in the same buffers. Never allocates.
  void run(const DecodeArgs& args, cudaStream_t stream = nullptr);

  const AttentionShape& shape() const;
  const Options& options() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

void sparse_decode(const AttentionShape& shape, const DecodeArgs& args,
                   const Options& options = {}, cudaStream_t stream = nullptr);

}  // namespace msa
