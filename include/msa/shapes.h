// The geometry of an attention call and of a packed (varlen) batch.
#pragma once

#include <cstdint>

#include "msa/options.h"
#include "msa/tensor.h"

namespace msa {

inline constexpr int kBlockSize = 128;  // KV tokens per top-k block (MSA geometry)

// The longest supported sequence (k_len, seq_len, a plan's max_k_len): 2^30 tokens. Longer
// ones are rejected by name; below it every token, block and page index fits in int32 with room
// to round up (k_len + 127 never overflows).
inline constexpr std::int64_t kMaxKvLen = std::int64_t{1} << 30;
// The most query or KV heads of an attention shape (and index heads of an indexer).
inline constexpr int kMaxHeads = 1024;

// Heads, head dim and selection width of one MSA layer.
struct AttentionShape {
  int h_q = 64;        // query heads
  int h_kv = 4;        // KV heads; q head h reads KV head h / group()
  int d = 128;         // head dim of Q, K, V (and of the index branch)
  int topk = 16;       // selected blocks per (query token, KV head), 1..32
  float scale = 0.f;   // softmax scale; 0 means 1 / sqrt(d)

  int group() const { return h_kv > 0 ? h_q / h_kv : 0; }
  float softmax_scale() const;
};

// A packed batch of requests. Request b owns query rows [cu_seqlens_q[b], cu_seqlens_q[b+1])
// and has final KV length k_len[b] >= q_len[b]; query i of b sits at position
// k_len[b] - q_len[b] + i and sees keys 0..position (bottom-right causal).
struct VarlenBatch {
  TensorView cu_seqlens_q;  // [B + 1] int32, non-decreasing, cu_seqlens_q[0] = 0
  TensorView k_len;         // [B] int32
};

// k_len from KV offsets (cu_seqlens_k [B + 1] int32, as engines and the MSA wrappers keep
// them): lengths[b] = offsets[b + 1] - offsets[b] for b < B, into lengths [B] int32. Both are
// rank-1 views of any stride >= 1 on one device and must not overlap. Host tensors are computed
// on the calling thread; CUDA tensors by one kernel on `stream` (no synchronisation, capturable
// in a graph). Values are not checked (a difference outside int32 wraps): the operators check
// the lengths they read.
void lengths_from_offsets(const TensorView& offsets, const TensorView& lengths, cudaStream_t stream = nullptr);

// KV storage. Paged: k, v are [num_pages, h_kv, page_size, d] (last dim contiguous, other
// strides free) and page_table [B, max_pages] int32 maps token t of request b to slot
// t % page_size of page page_table[b, t / page_size]. Flat: k, v are [total_k, h_kv, d] and
// request b's tokens are rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1.
// The indexer uses the same struct with one head (h_kv = 1) and v absent.
struct KvCache {
  TensorView k;
  TensorView v;
  TensorView page_table;    // paged only: [B, max_pages] int32
  TensorView cu_seqlens_k;  // flat only: [B + 1] int32

  bool paged() const { return page_table.present(); }
};

}  // namespace msa
