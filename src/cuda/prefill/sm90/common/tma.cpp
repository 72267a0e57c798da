#include "cuda/prefill/sm90/common/tma.h"

#include <cstdint>

#include "core/plan_encoding.h"
#include "cuda/common/tensor_map.h"

namespace msa::cuda::prefill_sm90 {

namespace {

constexpr std::uint64_t kElementBytes = 2;  // q and o_partial
constexpr std::uint32_t kBoxCols = 128 / kElementBytes;  // one 128-byte swizzle row

// A dimension of size 1 may carry any stride; TMA wants a legal one (a multiple of 16 bytes).
std::uint64_t stride_bytes(std::int64_t elems, std::uint64_t size, std::uint64_t fallback,
                           std::uint64_t element_bytes = kElementBytes) {
  return size == 1 ? fallback : static_cast<std::uint64_t>(elems) * element_bytes;
}

// q's (d, h_q, total_q) extents and byte strides; box (one 128-byte row, heads, tokens).
void q_dims(const AttentionParams& a, int head_dim, std::uint32_t heads, std::uint32_t tokens,
            TensorMapDim (&dims)[3]) {
  const auto d = static_cast<std::uint64_t>(head_dim);
  const auto h_q = static_cast<std::uint64_t>(a.h_q);
  const auto total_q = static_cast<std::uint64_t>(a.total_q);
  const std::uint64_t q_head = stride_bytes(a.stride_q_head, h_q, d * kElementBytes);
  const std::uint64_t q_token = stride_bytes(a.stride_q_token, total_q, h_q * q_head);
  dims[0] = {d, kElementBytes, kBoxCols};
  dims[1] = {h_q, q_head, heads};
  dims[2] = {total_q, q_token, tokens};
}

}  // namespace

int kv_box_rows(const AttentionParams& a) { return a.page_table != nullptr ? a.page_size : kBlockSize; }

CUtensorMap make_kv_tensor_map(const AttentionParams& a, const void* base, DType kv_dtype, int head_dim,
                               const std::string& what) {
  // 64 16-bit or 128 FP8 columns per box, one 128-byte swizzle row either way.
  const bool paged = a.page_table != nullptr;
  const auto d = static_cast<std::uint64_t>(head_dim);
  const std::uint64_t kv_bytes = kv_dtype == DType::kFP8E4M3 ? 1 : 2;
  const auto kv_box_cols = static_cast<std::uint32_t>(128 / kv_bytes);
  const auto tokens = static_cast<std::uint64_t>(paged ? a.page_size : a.kv_rows);
  const auto pages = static_cast<std::uint64_t>(paged ? a.num_pages : 1);
  const auto h_kv = static_cast<std::uint64_t>(a.h_kv);
  const std::uint64_t kv_token = stride_bytes(a.stride_kv_token, tokens, d * kv_bytes, kv_bytes);
  const std::uint64_t kv_head = stride_bytes(a.stride_kv_head, h_kv, tokens * kv_token, kv_bytes);
  const std::uint64_t kv_page = stride_bytes(paged ? a.stride_kv_page : 0, pages, h_kv * kv_head, kv_bytes);
  const TensorMapDim dims[4] = {{d, kv_bytes, kv_box_cols},
                                {tokens, kv_token, static_cast<std::uint32_t>(kv_box_rows(a))},
                                {h_kv, kv_head, 1},
                                {pages, kv_page, 1}};
  return make_tensor_map(base, kv_dtype, dims, 4, what);
}

void add_wide_q_boxes(PrefillTma& t, const AttentionParams& a, DType dtype, int head_dim, int q_per_tile) {
  // Measured (docs/performance.md step 90): at group 1 the builders are the wide kernel's
  // bottleneck and the consumers' 64-row boxes win (3% at 2k); at group 2 and 3 the builders
  // have time to spare and one whole-tile box from them beats the consumers' (up to 3%).
  t.q_wide_by_consumers = a.group == 1 ? 1 : 0;
  // A consumer warpgroup's box: its 64 rows, 64 / group queries' heads (gather_q_rows).
  const int tokens = t.q_wide_by_consumers != 0 ? 64 / a.group : q_per_tile;
  TensorMapDim dims[3];
  q_dims(a, head_dim, static_cast<std::uint32_t>(a.group), static_cast<std::uint32_t>(tokens), dims);
  t.q_wide = make_tensor_map(a.q, dtype, dims, 3, "q.stride");
}

PrefillTma make_prefill_tma(const AttentionParams& a, DType dtype, int head_dim) {
  return make_prefill_tma(a, dtype, dtype, head_dim);
}

PrefillTma make_prefill_tma(const AttentionParams& a, DType dtype, DType kv_dtype, int head_dim) {
  const auto d = static_cast<std::uint64_t>(head_dim);
  const auto h_q = static_cast<std::uint64_t>(a.h_q);
  const auto total_q = static_cast<std::uint64_t>(a.total_q);
  PrefillTma t{};
  // A box holds one query's heads and must not straddle a consumer warpgroup's 64 rows.
  t.q_box_rows = 64 % a.group == 0 ? a.group : 1;
  const auto qb = static_cast<std::uint32_t>(t.q_box_rows);
  TensorMapDim q_box_dims[3];
  q_dims(a, head_dim, qb, 1, q_box_dims);
  t.q = make_tensor_map(a.q, dtype, q_box_dims, 3, "q.stride");
  if (a.o_partial != nullptr) {  // null: every row is final (an unsplit decode)
    const std::uint64_t o_rows = static_cast<std::uint64_t>(a.slots) * total_q;
    const TensorMapDim o_dims[3] = {
        {d, kElementBytes, kBoxCols}, {h_q, d * kElementBytes, qb}, {o_rows, h_q * d * kElementBytes, 1}};
    t.o_partial = make_tensor_map(a.o_partial, dtype, o_dims, 3, "o_partial");
  }
  if (a.out != nullptr) {
    const std::uint64_t out_head = stride_bytes(a.stride_out_head, h_q, d * kElementBytes);
    const std::uint64_t out_token = stride_bytes(a.stride_out_token, total_q, h_q * out_head);
    const TensorMapDim out_dims[3] = {{d, kElementBytes, kBoxCols}, {h_q, out_head, qb}, {total_q, out_token, 1}};
    t.out = make_tensor_map(a.out, dtype, out_dims, 3, "out.stride");
  }

  t.kv_box_rows = kv_box_rows(a);
  t.k = make_kv_tensor_map(a, a.k, kv_dtype, head_dim, "k.stride");
  t.v = make_kv_tensor_map(a, a.v, kv_dtype, head_dim, "v.stride");
  return t;
}

}  // namespace msa::cuda::prefill_sm90
