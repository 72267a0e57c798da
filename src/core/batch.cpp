#include "core/batch.h"

#include <limits>
#include <string>

#include "core/check.h"

namespace msa {

namespace {

constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

std::string at(const char* name, std::int64_t i) { return std::string(name) + "[" + std::to_string(i) + "]"; }

// The element i of a checked int32 vector.
std::int32_t element(const TensorView& t, std::int64_t i) { return t.ptr<const std::int32_t>()[i * t.stride[0]]; }

void check_length(std::int64_t len, const char* name, std::int64_t b) {
  MSA_REQUIRE(len <= kMaxKvLen, at(name, b), std::to_string(len),
              "beyond the longest supported sequence, kMaxKvLen = " + std::to_string(kMaxKvLen) + " tokens");
}

}  // namespace

BatchInfo read_batch(const VarlenBatch& batch) {
  check_int32_vector(batch.k_len, "k_len", Device::kCpu);
  const std::int64_t b_count = batch.k_len.dim(0);
  MSA_REQUIRE(b_count < kInt32Max, "k_len.shape[0]", std::to_string(b_count), "the batch size must be < 2^31 - 1");
  check_int32_vector(batch.cu_seqlens_q, "cu_seqlens_q", Device::kCpu, b_count + 1);
  BatchInfo info;
  info.batch = b_count;
  info.cu_q.resize(static_cast<std::size_t>(b_count + 1));
  info.k_len.resize(static_cast<std::size_t>(b_count));
  for (std::int64_t b = 0; b <= b_count; ++b) info.cu_q[b] = element(batch.cu_seqlens_q, b);
  for (std::int64_t b = 0; b < b_count; ++b) info.k_len[b] = element(batch.k_len, b);
  MSA_REQUIRE(info.cu_q[0] == 0, "cu_seqlens_q[0]", std::to_string(info.cu_q[0]), "must be 0");
  for (std::int64_t b = 0; b < b_count; ++b) {
    // 64-bit differences: int32 offsets of any sign never overflow here.
    const std::int64_t q_len = std::int64_t{info.cu_q[b + 1]} - info.cu_q[b];
    MSA_REQUIRE(q_len >= 0, at("cu_seqlens_q", b + 1), std::to_string(info.cu_q[b + 1]),
                "must be >= cu_seqlens_q[" + std::to_string(b) + "] = " + std::to_string(info.cu_q[b]));
    MSA_REQUIRE(q_len < (1 << 24), at("q_len", b), std::to_string(q_len),
                "must be < 2^24 (qsplit packs q_local in 24 bits)");
    check_length(info.k_len[b], "k_len", b);
    MSA_REQUIRE(info.k_len[b] >= q_len, at("k_len", b), std::to_string(info.k_len[b]),
                "must be >= q_len = " + std::to_string(q_len) + " (k_len includes the new tokens)");
    if (info.k_len[b] > info.max_k_len) info.max_k_len = info.k_len[b];
  }
  info.total_q = info.cu_q[b_count];
  return info;
}

BatchInfo read_decode_batch(const TensorView& seq_len, int q_per_request) {
  MSA_REQUIRE(q_per_request >= 1 && q_per_request <= 16, "q_per_request",
              std::to_string(q_per_request), "must be in 1..16");
  check_int32_vector(seq_len, "seq_len", Device::kCpu);
  BatchInfo info;
  info.batch = seq_len.dim(0);
  MSA_REQUIRE(info.batch < kInt32Max, "seq_len.shape[0]", std::to_string(info.batch), "the batch size must be < 2^31 - 1");
  MSA_REQUIRE(info.batch * q_per_request <= kInt32Max, "seq_len.shape[0]", std::to_string(info.batch),
              "B * q_per_request = " + std::to_string(info.batch * q_per_request) + " query rows must fit in int32");
  info.cu_q.resize(static_cast<std::size_t>(info.batch + 1));
  info.k_len.resize(static_cast<std::size_t>(info.batch));
  for (std::int64_t b = 0; b < info.batch; ++b) {
    const std::int32_t len = element(seq_len, b);
    MSA_REQUIRE(len >= q_per_request, at("seq_len", b), std::to_string(len),
                "must be >= q_per_request = " + std::to_string(q_per_request));
    check_length(len, "seq_len", b);
    info.k_len[b] = len;
    info.cu_q[b] = static_cast<std::int32_t>(b * q_per_request);
    if (len > info.max_k_len) info.max_k_len = len;
  }
  info.cu_q[info.batch] = static_cast<std::int32_t>(info.batch * q_per_request);
  info.total_q = info.cu_q[info.batch];
  return info;
}

}  // namespace msa
