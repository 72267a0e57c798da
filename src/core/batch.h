// Host view of a packed varlen batch: the per-request numbers every operator derives.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "msa/shapes.h"

namespace msa {

struct BatchInfo {
  std::int64_t batch = 0;            // B
  std::int64_t total_q = 0;          // cu_q[B]
  std::int64_t max_k_len = 0;
  std::vector<std::int32_t> cu_q;    // [B + 1]
  std::vector<std::int32_t> k_len;   // [B]

  std::int32_t q_len(std::int64_t b) const { return cu_q[b + 1] - cu_q[b]; }
  // Bottom-right causal position of request-local query i of request b.
  std::int64_t pos(std::int64_t b, std::int64_t i) const { return k_len[b] - q_len(b) + i; }
  // Blocks of request b: ceil(k_len / 128).
  std::int64_t blocks(std::int64_t b) const { return (std::int64_t{k_len[b]} + kBlockSize - 1) / kBlockSize; }
  std::int64_t max_blocks() const { return (max_k_len + kBlockSize - 1) / kBlockSize; }
  // The request owning packed query row r (0 <= r < total_q): the last b with cu_q[b] <= r.
  // A search rather than a [total_q] table, so that reading a batch allocates O(B) only.
  std::int32_t request_of(std::int64_t r) const {
    const auto it = std::upper_bound(cu_q.begin(), cu_q.end(), r);
    return static_cast<std::int32_t>(it - cu_q.begin() - 1);
  }
};

// Reads and checks a CPU batch: int32 rank-1 tensors of B + 1 and B elements (stride >= 1,
// aligned), B < 2^31 - 1, cu_seqlens_q starting at 0 and non-decreasing, 0 <= q_len <= k_len,
// q_len < 2^24, k_len <= kMaxKvLen. Throws msa::Error naming the first offending argument and
// value.
BatchInfo read_batch(const VarlenBatch& batch);

// The same for decode: B requests of Q queries each, seq_len [B] in [Q, kMaxKvLen], and
// B * Q < 2^31.
BatchInfo read_decode_batch(const TensorView& seq_len, int q_per_request);

}  // namespace msa
