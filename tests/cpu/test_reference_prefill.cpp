// CPU reference prefill: the dense-equivalence identity, the two prefill formulations (FP64
// gather vs plan + partials + combine) against each other, adversarial top-k rows, and bitwise
// reproducibility.
#include <gtest/gtest.h>

#include <cmath>
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
using msa::bench::Tolerance;
using msa::bench::Workload;
using msa::bench::WorkloadSpec;

constexpr Tolerance kOutTol = msa::test::kOutTolerance;  // spec §7: 1e-2 + 1e-2 |ref|, cosine 0.9999
constexpr Tolerance kLseTol = msa::test::kLseTolerance;  // spec §7: |err| <= 1e-3, same -inf positions

struct Outputs {
  HostTensor out, lse;
};

Outputs make_outputs(const Workload& w) {
  const auto& s = w.spec.shape;
  Outputs o{HostTensor(w.spec.dtype, {w.total_q, s.h_q, s.d}), HostTensor(DType::kFP32, {w.total_q, s.h_q})};
  // Garbage that a missed write would leave behind.
  o.out.fill(7.f);
  o.lse.fill(7.f);
  return o;
}

Outputs run_gather(const Workload& w) {
  Outputs o = make_outputs(w);
  msa::cpu::sparse_prefill_gather(w.spec.shape, w.prefill_args(o.out, o.lse));
  return o;
}

Outputs run_public(const Workload& w, int q_per_item = 64) {
  Outputs o = make_outputs(w);
  msa::Options options;
  options.backend = msa::Backend::kCpu;
  options.q_per_item = q_per_item;
  msa::SparsePrefill op(w.spec.shape, options);
  op.plan(w.batch(), w.topk.view());
  op.run(w.prefill_args(o.out, o.lse));
  return o;
}

Outputs run_dense(const Workload& w) {
  Outputs o = make_outputs(w);
  msa::cpu::dense_causal(w.spec.shape, w.q.view(), w.kv(), w.batch(), w.sinks.view(), o.out.view(),
                         o.lse.view());
  return o;
}

void expect_match(const Outputs& got, const Outputs& ref, const Tolerance& out_tol,
                  const Tolerance& lse_tol) {
  EXPECT_TRUE(msa::test::close(got.out, ref.out, out_tol)) << "out";
  EXPECT_TRUE(msa::test::close(got.lse, ref.lse, lse_tol)) << "lse";
}

WorkloadSpec make_spec(int h_q, int h_kv, int topk, std::vector<Request> requests, int page_size,
                       Selection selection, bool sinks, DType dtype, std::uint64_t seed) {
  WorkloadSpec s;
  s.shape.h_q = h_q;
  s.shape.h_kv = h_kv;
  s.shape.d = 128;
  s.shape.topk = topk;
  s.requests = std::move(requests);
  s.page_size = page_size;
  s.selection = selection;
  s.sinks = sinks;
  s.dtype = dtype;
  s.seed = seed;
  return s;
}

// Dense equivalence (spec §1): every visible block selected, local + 1 <= K everywhere.
TEST(ReferencePrefill, DenseEquivalenceIdentity) {
  const std::vector<Request> requests = {{120, 700}, {1, 1}, {130, 130}, {0, 50}, {24, 2048}, {3, 131}};
  struct Case {
    int page_size;
    bool token_major, sinks;
    DType dtype;
  };
  for (const Case c : {Case{64, false, false, DType::kBF16}, Case{16, true, true, DType::kBF16},
                       Case{0, false, true, DType::kFP16}}) {
    SCOPED_TRACE("page_size " + std::to_string(c.page_size) + " sinks " + std::to_string(c.sinks));
    WorkloadSpec spec = make_spec(8, 2, 16, requests, c.page_size, Selection::kAll, c.sinks, c.dtype, 11);
    spec.token_major_pages = c.token_major;
    const Workload w = msa::bench::make_workload(spec);
    const Outputs dense = run_dense(w);
    // Both accumulate in FP64: only the final rounding to 16 bits (half an ulp) may differ.
    expect_match(run_gather(w), dense, Tolerance{1e-6, 1.0 / 256, 0.99999}, Tolerance{1e-5, 1e-6, -1.0});
    expect_match(run_public(w), dense, kOutTol, kLseTol);
  }
}

struct AgreeCase {
  const char* name;
  int h_q, h_kv, topk, page_size;
  bool token_major;
  Selection selection;
  bool sinks;
  DType dtype;
  std::vector<Request> requests;
};

void check_agree(const AgreeCase& c, std::uint64_t seed) {
  SCOPED_TRACE(c.name);
  WorkloadSpec spec = make_spec(c.h_q, c.h_kv, c.topk, c.requests, c.page_size, c.selection, c.sinks,
                                c.dtype, seed);
  spec.token_major_pages = c.token_major;
  const Workload w = msa::bench::make_workload(spec);
  // A small q_per_item splits hot rows across several work items.
  expect_match(run_public(w, 16), run_gather(w), kOutTol, kLseTol);
}

// Chunked prefill (prefixes not multiples of 128), q_len = 0 and k_len not a multiple of 128
// appear in every batch.
const std::vector<Request> kMixed = {{100, 2500}, {0, 500}, {1, 129}, {77, 77}, {50, 1000}};

TEST(ReferencePrefill, FormulationsAgreePagedLayouts) {
  const std::vector<AgreeCase> cases = {
      {"random p16 G1", 4, 4, 16, 16, false, Selection::kRandom, false, DType::kBF16, kMixed},
      {"tile-shared p32 G16 K32 sinks", 16, 1, 32, 32, false, Selection::kTileShared, true, DType::kBF16, kMixed},
      {"clustered p64 token-major fp16", 8, 2, 16, 64, true, Selection::kClustered, false, DType::kFP16, kMixed},
      {"random p128 K1", 8, 4, 1, 128, false, Selection::kRandom, true, DType::kBF16, kMixed},
  };
  std::uint64_t seed = 21;
  for (const auto& c : cases) check_agree(c, seed++);
}

TEST(ReferencePrefill, FormulationsAgreeFlatAndChunked) {
  const std::vector<AgreeCase> cases = {
      {"flat random G8 sinks fp16", 16, 2, 16, 0, false, Selection::kRandom, true, DType::kFP16, kMixed},
      {"flat clustered G16", 16, 1, 16, 0, false, Selection::kClustered, false, DType::kBF16,
       {{100, 1000}, {5, 261}, {0, 0}, {1, 1}}},
      {"token-major p16 tile-shared", 8, 2, 16, 16, true, Selection::kTileShared, true, DType::kBF16,
       {{300, 1700}, {2, 2}}},
  };
  std::uint64_t seed = 31;
  for (const auto& c : cases) check_agree(c, seed++);
}

// Rows outside the producer contract: the selection is the set of in-range ids.
TEST(ReferencePrefill, AdversarialRows) {
  for (const bool sinks : {false, true}) {
    SCOPED_TRACE(sinks ? "sinks" : "no sinks");
    WorkloadSpec spec = make_spec(8, 2, 8, {{90, 1100}, {40, 300}, {1, 1}}, 32, Selection::kRandom,
                                  sinks, DType::kBF16, 41);
    Workload w = msa::bench::make_workload(spec);
    auto* ids = w.topk.data<std::int32_t>();
    const std::int64_t topk = spec.shape.topk;
    auto row = [&](int g, std::int64_t r) { return ids + (g * w.total_q + r) * topk; };
    const std::vector<std::int64_t> all_minus_one = {0, 17, 95, 130};
    for (int g = 0; g < spec.shape.h_kv; ++g) {
      for (std::int64_t r = 1; r < 80; r += 3) {  // duplicates of the first id and of the local
        row(g, r)[1] = row(g, r)[0];
        row(g, r)[topk - 1] = row(g, r)[0];
        row(g, r)[2] = row(g, r)[0];
      }
      for (std::int64_t r = 2; r < w.total_q; r += 5) {  // out of range, negative, and future blocks
        row(g, r)[0] = 999;
        row(g, r)[3] = -7;
        row(g, r)[4] = r < 90 ? 8 : 2;  // block 8 of request 0 (9 blocks), past early queries
      }
      for (const std::int64_t r : all_minus_one) std::fill(row(g, r), row(g, r) + topk, -1);
    }
    const Outputs gather = run_gather(w);
    expect_match(run_public(w, 8), gather, kOutTol, kLseTol);
    // A row with an empty selection: out = 0 and lse = -inf, or lse = sink with a sink.
    const std::int64_t d = spec.shape.d;
    for (const std::int64_t r : all_minus_one) {
      for (int h = 0; h < spec.shape.h_q; ++h) {
        const float want = sinks ? w.sinks.get(h) : -INFINITY;
        EXPECT_EQ(gather.lse.get(r * spec.shape.h_q + h), want) << r << " " << h;
        for (std::int64_t j = 0; j < d; ++j) ASSERT_EQ(gather.out.get((r * spec.shape.h_q + h) * d + j), 0.f);
      }
    }
  }
}

TEST(ReferencePrefill, TotalQZero) {
  const WorkloadSpec spec = make_spec(8, 2, 16, {{0, 300}, {0, 5}}, 64, Selection::kRandom, true,
                                      DType::kBF16, 51);
  const Workload w = msa::bench::make_workload(spec);
  ASSERT_EQ(w.total_q, 0);
  EXPECT_EQ(run_gather(w).out.numel(), 0);
  EXPECT_EQ(run_public(w).out.numel(), 0);
  EXPECT_EQ(run_dense(w).out.numel(), 0);
}

// sparse_prefill_partials driven by a plan written out by hand, then combine: independent of
// the host planner. One request, q_len 3, k_len 300 (blocks 0..2, queries at 297..299, all
// local block 2), h_kv 1, G 2, K 2.
TEST(ReferencePrefill, PartialsFromHandBuiltPlan) {
  for (const bool sinks : {false, true}) {
    WorkloadSpec spec = make_spec(2, 1, 2, {{3, 300}}, 128, Selection::kRandom, sinks, DType::kBF16, 61);
    Workload w = msa::bench::make_workload(spec);
    const std::int32_t rows[3][2] = {{0, 2}, {2, -1}, {1, 2}};
    std::memcpy(w.topk.raw(), rows, sizeof rows);

    msa::K2qCsr plan;
    plan.h_kv = 1;
    plan.topk = 2;
    plan.q_per_item = 64;
    plan.batch = 1;
    plan.total_q = 3;
    plan.total_rows = 3;
    plan.row_coords = {0, 0, 0, 1, 0, 2};
    plan.row_ptr = {0, 1, 2, 5};
    plan.q_indices = {0, 2, 0, 1, 2, -1};
    plan.qsplit = {0 | 0 << 24, 2 | 0 << 24, 0 | 1 << 24, 1 | 0 << 24, 2 | 1 << 24, -1};
    plan.split_counts = {2, 1, 2};
    plan.work = {{0, 0, 0, 1, 0, 0}, {0, 1, 1, 1, 0, 1}, {0, 2, 2, 3, 0, 2}};
    plan.work_capacity = 3;

    const auto& s = spec.shape;
    HostTensor o_partial(DType::kFP32, {s.topk, w.total_q, s.h_q, s.d});
    HostTensor lse_partial(DType::kFP32, {s.topk, w.total_q, s.h_q});
    Outputs got = make_outputs(w);
    msa::cpu::sparse_prefill_partials(s, w.prefill_args(got.out, got.lse), plan,
                                      o_partial.data<float>(), lse_partial.data<float>());
    // Every written slot is a finite block attention (each block has keys visible to all three).
    for (std::int64_t q = 0; q < 3; ++q)
      for (std::int64_t slot = 0; slot < plan.split_counts[q]; ++slot)
        for (int h = 0; h < s.h_q; ++h) EXPECT_TRUE(std::isfinite(lse_partial.get((slot * 3 + q) * s.h_q + h)));
    msa::CombineArgs c;
    c.o_partial = o_partial.view();
    c.lse_partial = lse_partial.view();
    c.split_counts = msa::TensorView::contiguous(plan.split_counts.data(), DType::kInt32, {3, 1});
    c.out = got.out.view();
    c.lse = got.lse.view();
    c.sinks = w.sinks.view();
    msa::cpu::combine(s, c);
    expect_match(got, run_gather(w), kOutTol, kLseTol);
  }
}

TEST(ReferencePrefill, BitwiseReproducible) {
  const WorkloadSpec spec = make_spec(8, 2, 16, kMixed, 32, Selection::kClustered, true, DType::kBF16, 71);
  const Workload w = msa::bench::make_workload(spec);
  const Outputs a = run_public(w, 8), b = run_public(w, 8);
  EXPECT_EQ(std::memcmp(a.out.raw(), b.out.raw(), a.out.bytes()), 0);
  EXPECT_EQ(std::memcmp(a.lse.raw(), b.lse.raw(), a.lse.bytes()), 0);
  const Outputs c = run_gather(w), d = run_gather(w);
  EXPECT_EQ(std::memcmp(c.out.raw(), d.out.raw(), c.out.bytes()), 0);
  EXPECT_EQ(std::memcmp(c.lse.raw(), d.lse.raw(), c.lse.bytes()), 0);
}

}  // namespace
