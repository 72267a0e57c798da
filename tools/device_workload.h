// Device copies of a workload for the stages of `msa run` that run on the CUDA backend: every
// input the layer reads (batch, page table, Q/K/V, sinks, the index branch, the top-k rows) and
// the buffers the stages write (scores, out, lse). A stage on CUDA reads and writes these only;
// `msa run` then copies its result back to verify it on the host, and a stage on the CPU
// uploads its result for the next one (set_topk).
#pragma once

#include <memory>

#include "bench/workload.h"
#include "msa/msa.h"

namespace msa::tool {

class DeviceWorkload {
 public:
  // Uploads every present tensor of w (the top-k rows too); allocates scores [h_i, total_q, score_cols] (fp32, when
  // score_cols > 0) and out [total_q, h_q, d] / lse [total_q, h_q]. The top-k rows live in
  // memory as the MSA decode layout [total_q, h_kv, K] when query_major_topk.
  DeviceWorkload(const bench::Workload& w, std::int64_t score_cols, bool query_major_topk = false);
  ~DeviceWorkload();
  DeviceWorkload(const DeviceWorkload&) = delete;
  DeviceWorkload& operator=(const DeviceWorkload&) = delete;

  VarlenBatch batch() const;
  IndexerArgs indexer_args() const;      // index_q, index_k, batch -> scores
  TopkArgs topk_args() const;            // scores, batch -> the top-k rows [h_kv, total_q, K]
  // The top-k rows as [h_kv, total_q, K] (with query_major_topk: a transposed view).
  TensorView topk() const;
  PrefillArgs prefill_args() const;     // everything on the device
  DecodeArgs decode_args(int q_per_request) const;  // q, kv, seq_len = k_len, query-major top-k

  // Host <-> device copies of the intermediates (synchronous).
  void set_scores(const bench::HostTensor& scores);    // [h_i, total_q, score_cols]
  void set_topk(const bench::HostTensor& head_major);  // [h_kv, total_q, K]
  // FP8 E4M3 K/V for the decode (w's views retyped to f's codes, with f's descale factors):
  // decode_args() reads these from then on.
  void set_fp8_kv(const bench::Workload& w, const bench::Fp8Kv& f);
  void get_topk(bench::HostTensor& head_major) const;
  void get_scores(bench::HostTensor& scores) const;
  void get_outputs(bench::HostTensor& out, bench::HostTensor& lse) const;
  void synchronize() const;

  struct Buffers;

 private:
  std::unique_ptr<Buffers> b_;
};

}  // namespace msa::tool
