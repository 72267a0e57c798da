// Problem builders shared by the operator harnesses: the batch arrays, paged or flat K/V, top-k
// rows of every selection mode, sinks, NaN planted where no request may look, the FP64
// attention oracle, and the header decoding every attention operator starts from.
#pragma once

#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_ctx.h"

namespace msa_fuzz {

// ---- problem builders ------------------------------------------------------------------

// An int32 tensor's values by row-major logical index (ifill: every element past them).
void set_ints(TSpec& s, std::vector<std::int32_t> vals, std::int32_t ifill);
// Exclusive prefix sum: cu_seqlens of per-request lengths.
std::vector<std::int32_t> prefix(const std::vector<std::int32_t>& len);
inline std::int64_t blocks_of(std::int64_t k_len) { return (k_len + msa::kBlockSize - 1) / msa::kBlockSize; }
// Work estimate: query rows x heads x visible keys (capped by topk blocks).
std::int64_t cost_of(const std::vector<std::int32_t>& q_len, const std::vector<std::int64_t>& k_len,
                     std::int64_t heads, std::int64_t topk);
// Halves the longest q_len until the cost fits kCostBudget.
void fit_budget(std::vector<std::int32_t>& q_len, const std::vector<std::int64_t>& k_len,
                std::int64_t heads, std::int64_t topk);
// Paged or flat storage for B requests of cap[b] tokens: k (and v unless tv == kNumT)
// [.., heads, .., d], with the page table or cu_seqlens_k.
void build_kv(Ctx& c, Tid tk, Tid tv, std::int64_t heads, std::int64_t d, DType dt,
              const std::vector<std::int64_t>& cap);
// topk [h_kv, rows, width] (head-major) or [rows, h_kv, width] in selection `mode` (% 6).
void build_topk(Ctx& c, Tid id, std::int64_t h_kv, std::int64_t width, const std::vector<std::int32_t>& q_len,
                const std::vector<std::int64_t>& k_len, bool head_major, int mode);
// sinks [h_q] per Header::sinks (none when 0); filled as int bits, see retype_float_bits.
void build_sinks(Ctx& c, std::int64_t h_q);
// The int fill writes int32 patterns; tensors that carry float bits are retyped afterwards.
void retype_float_bits(Ctx& c, Tid id);
// NaN in K/V (and q gaps) elements no request can see, when Header::plant asks.
void plant_unseen(Ctx& c, Tid tk, Tid tv, const std::vector<std::int64_t>& k_len, std::int64_t heads,
                  std::int64_t d, Tid tq);

// ---- oracles ---------------------------------------------------------------------------

// Sparse prefill against msa::cpu::sparse_prefill_gather on the same arguments (invariant d;
// only for ordinary inputs and injective outputs).
void prefill_oracle(Ctx& c, const msa::PrefillArgs& a, std::int64_t rows, const char* what);

// ---- per-operator set-up ---------------------------------------------------------------

struct Lens {
  std::vector<std::int32_t> q_len;
  std::vector<std::int64_t> k_len;
};

// dtype, page size, attention shape and strictness from the header.
void decode_common(Ctx& c);
// B requests: q_len <= max_q, k_len >= q_len, <= 700 (3 input bytes each).
Lens read_lens(Ctx& c, int B, int max_q);
// q, out, lse, sinks of an attention call with `rows` query rows.
void build_attention_io(Ctx& c, std::int64_t rows);
msa::VarlenBatch batch_of(Ctx& c, Tid cu, Tid kl);
msa::KvCache kv_of(Ctx& c, Tid k, Tid v);

}  // namespace msa_fuzz
