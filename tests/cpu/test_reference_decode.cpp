// Sparse decode (online softmax, FP32) against the FP64 prefill gather on the equivalent
// varlen batch: rows b * Q + t with q_len = Q and k_len = seq_len.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "cpu/reference.h"
#include "msa/msa.h"
#include "tests/support/compare.h"

namespace {

using msa::DType;
using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Selection;
using msa::bench::Workload;
using msa::bench::WorkloadSpec;

struct DecodeCase {
  int q_per_request;
  int h_q, h_kv, page_size;
  bool token_major, head_major, sinks;
  DType dtype;
  float scale;  // 0: 1/sqrt(d); large values make the running max jump past the lazy threshold
};

// [h_kv, rows, K] -> [rows, h_kv, K]
HostTensor to_query_major(const HostTensor& head_major) {
  const auto& s = head_major.shape();
  HostTensor t(DType::kInt32, {s[1], s[0], s[2]});
  for (std::int64_t g = 0; g < s[0]; ++g)
    for (std::int64_t r = 0; r < s[1]; ++r)
      std::memcpy(t.data<std::int32_t>() + (r * s[0] + g) * s[2],
                  head_major.data<std::int32_t>() + (g * s[1] + r) * s[2], s[2] * sizeof(std::int32_t));
  return t;
}

void check_decode(const DecodeCase& c, std::uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "Q " << c.q_per_request << " G " << c.h_q / c.h_kv << " page " << c.page_size
                                  << " head_major " << c.head_major << " sinks " << c.sinks << " scale " << c.scale);
  const int qn = c.q_per_request;
  WorkloadSpec spec;
  spec.shape.h_q = c.h_q;
  spec.shape.h_kv = c.h_kv;
  spec.shape.d = 128;
  spec.shape.topk = 16;
  spec.shape.scale = c.scale;
  // seq_len = Q (one short block), k_len not multiples of 128, and more blocks than K.
  spec.requests = {{qn, qn}, {qn, 3000}, {qn, 129 + qn}, {qn, 700}, {qn, 2048}};
  spec.page_size = c.page_size;
  spec.token_major_pages = c.token_major;
  spec.dtype = c.dtype;
  spec.selection = Selection::kRandom;
  spec.sinks = c.sinks;
  spec.seed = seed;
  Workload w = msa::bench::make_workload(spec);
  // Adversarial rows: all -1, a duplicate, an out-of-range id.
  auto* ids = w.topk.data<std::int32_t>();
  std::fill(ids, ids + 16, -1);
  ids[(w.total_q - 1) * 16 + 1] = ids[(w.total_q - 1) * 16];
  ids[(w.total_q - 2) * 16] = 1000;

  HostTensor ref_out(c.dtype, {w.total_q, c.h_q, 128}), ref_lse(DType::kFP32, {w.total_q, c.h_q});
  msa::cpu::sparse_prefill_gather(spec.shape, w.prefill_args(ref_out, ref_lse));

  const HostTensor query_major = to_query_major(w.topk);
  HostTensor out(c.dtype, {w.total_q, c.h_q, 128}), lse(DType::kFP32, {w.total_q, c.h_q});
  out.fill(3.f);
  msa::DecodeArgs a;
  a.q = w.q.view();
  a.kv = w.kv();
  a.seq_len = w.k_len.view();
  a.topk = c.head_major ? w.topk.view() : query_major.view();
  a.topk_head_major = c.head_major;
  a.q_per_request = qn;
  a.sinks = w.sinks.view();
  a.out = out.view();
  a.lse = lse.view();
  msa::sparse_decode(spec.shape, a, msa::Options{});

  EXPECT_TRUE(msa::test::close(out, ref_out, msa::test::kOutTolerance)) << "out";
  EXPECT_TRUE(msa::test::close(lse, ref_lse, msa::test::kLseTolerance)) << "lse";
}

TEST(ReferenceDecode, MatchesPrefillGather) {
  const std::vector<DecodeCase> cases = {
      {1, 16, 1, 64, false, false, false, DType::kBF16, 0.f},
      {1, 8, 2, 0, false, true, true, DType::kFP16, 0.f},
      {8, 16, 1, 16, true, false, true, DType::kBF16, 0.f},
      {8, 8, 8, 128, false, true, false, DType::kBF16, 0.f},
      {16, 8, 2, 32, false, false, true, DType::kBF16, 0.f},
      {16, 16, 4, 0, false, true, false, DType::kFP16, 0.f},
  };
  std::uint64_t seed = 101;
  for (const auto& c : cases) check_decode(c, seed++);
}

// Score spreads of tens of log2 units: the lazy rescale both skips and fires.
TEST(ReferenceDecode, LargeScoresExerciseTheRescale) {
  check_decode({8, 8, 2, 64, false, false, true, DType::kBF16, 6.f}, 111);
  check_decode({1, 16, 1, 0, false, true, false, DType::kBF16, 10.f}, 112);
}

}  // namespace
