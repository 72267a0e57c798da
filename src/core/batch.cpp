#include "core/batch.h"

#include <string>

#include "core/check.h"

namespace msa {

namespace {

void check_int32_vector(const TensorView& t, const char* name, std::int64_t n) {
  check_present(t, name);
  check_device(t, name, Device::kCpu);
  check_dtype(t, name, DType::kInt32);
  check_rank(t, name, 1);
  if (n >= 0) check_dim(t, name, 0, n);
  MSA_REQUIRE(t.dim(0) == 0 || t.data != nullptr, name, "null", "data pointer is null");
}

}  // namespace

BatchInfo read_batch(const VarlenBatch& batch) {
  check_int32_vector(batch.k_len, "k_len", -1);
  const std::int64_t b_count = batch.k_len.dim(0);
  check_int32_vector(batch.cu_seqlens_q, "cu_seqlens_q", b_count + 1);
  BatchInfo info;
  info.batch = b_count;
  info.cu_q.resize(static_cast<std::size_t>(b_count + 1));
  info.k_len.resize(static_cast<std::size_t>(b_count));
  const auto* cu = batch.cu_seqlens_q.ptr<const std::int32_t>();
  const auto* kl = batch.k_len.ptr<const std::int32_t>();
  for (std::int64_t b = 0; b <= b_count; ++b) info.cu_q[b] = cu[b * batch.cu_seqlens_q.stride[0]];
  for (std::int64_t b = 0; b < b_count; ++b) info.k_len[b] = kl[b * batch.k_len.stride[0]];
  MSA_REQUIRE(info.cu_q[0] == 0, "cu_seqlens_q[0]", std::to_string(info.cu_q[0]), "must be 0");
  for (std::int64_t b = 0; b < b_count; ++b) {
    const std::int32_t q_len = info.cu_q[b + 1] - info.cu_q[b];
    MSA_REQUIRE(info.cu_q[b + 1] >= info.cu_q[b], "cu_seqlens_q[" + std::to_string(b + 1) + "]",
                std::to_string(info.cu_q[b + 1]),
                "must be >= cu_seqlens_q[" + std::to_string(b) + "] = " + std::to_string(info.cu_q[b]));
    MSA_REQUIRE(q_len < (1 << 24), "q_len[" + std::to_string(b) + "]", std::to_string(q_len),
                "must be < 2^24 (qsplit packs q_local in 24 bits)");
    MSA_REQUIRE(info.k_len[b] >= q_len, "k_len[" + std::to_string(b) + "]",
                std::to_string(info.k_len[b]),
                "must be >= q_len = " + std::to_string(q_len) + " (k_len includes the new tokens)");
    if (info.k_len[b] > info.max_k_len) info.max_k_len = info.k_len[b];
  }
  info.total_q = info.cu_q[b_count];
  info.req_of.resize(static_cast<std::size_t>(info.total_q));
  for (std::int64_t b = 0; b < b_count; ++b)
    for (std::int32_t r = info.cu_q[b]; r < info.cu_q[b + 1]; ++r) info.req_of[r] = static_cast<std::int32_t>(b);
  return info;
}

BatchInfo read_decode_batch(const TensorView& seq_len, int q_per_request) {
  MSA_REQUIRE(q_per_request >= 1 && q_per_request <= 16, "q_per_request",
              std::to_string(q_per_request), "must be in 1..16");
  check_int32_vector(seq_len, "seq_len", -1);
  BatchInfo info;
  info.batch = seq_len.dim(0);
  info.cu_q.resize(static_cast<std::size_t>(info.batch + 1));
  info.k_len.resize(static_cast<std::size_t>(info.batch));
  const auto* sl = seq_len.ptr<const std::int32_t>();
  for (std::int64_t b = 0; b < info.batch; ++b) {
    const std::int32_t len = sl[b * seq_len.stride[0]];
    MSA_REQUIRE(len >= q_per_request, "seq_len[" + std::to_string(b) + "]", std::to_string(len),
                "must be >= q_per_request = " + std::to_string(q_per_request));
    info.k_len[b] = len;
    info.cu_q[b] = static_cast<std::int32_t>(b * q_per_request);
    if (len > info.max_k_len) info.max_k_len = len;
  }
  info.cu_q[info.batch] = static_cast<std::int32_t>(info.batch * q_per_request);
  info.total_q = info.cu_q[info.batch];
  info.req_of.resize(static_cast<std::size_t>(info.total_q));
  for (std::int64_t r = 0; r < info.total_q; ++r) info.req_of[r] = static_cast<std::int32_t>(r / q_per_request);
  return info;
}

}  // namespace msa
