// The CUDA sparse decode through the public API (plan -> tile-union kernel, split over unions
// when the batch is small -> combine) against the FP64 gather reference (a decode is the prefill
// of B requests of Q queries, seq_len keys each): three-part check on out, |err| <= 1e-3 and
// identical -inf positions on lse, bitwise-identical reruns, and one captured run() replayed with
// new seq_len, top-k and Q in the same buffers. Q = 1..16, G = 1..16, K 1..32, lengths below 128
// and not multiples of it, page sizes 16..128 and flat K/V, token-major pages, both top-k
// layouts, sinks, adversarial ids; every case in each dtype of the build. FP8 E4M3 K/V cases
// (descales per tensor and per KV head, NaN codes in the stale tails) compare with the same
// reference on the dequantised values.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "bench/compare.h"
#include "bench/workload.h"
#include "cpu/reference.h"
#include "cuda/api/decode_params.h"
#include "cuda/combine/launch.h"
#include "cuda/instances.h"
#include "msa/msa.h"
#include "tests/support/cuda_cases.h"
#include "tests/support/cuda_check.h"
#include "tests/support/cuda_graph.h"
#include "tests/support/device_tensor.h"

namespace {

using msa::bench::Fp8Kv;
using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Selection;
using msa::bench::Workload;
using msa::bench::WorkloadSpec;
using msa::test::DeviceTensor;

struct Case {
  std::string name;
  WorkloadSpec spec;  // requests = {Q, seq_len}
  int q = 1;
  bool head_major = false;   // top-k [h_kv, B * Q, K] (else the MSA decode layout [B * Q, h_kv, K])
  bool adversarial = false;  // -1, duplicates and out-of-range ids in the rows
  // q rows (query, head) scaled by factors from 2^-60 to 2^6: rows of near-uniform and of
  // near one-hot softmax side by side in a tile, and one head of every query all zeros.
  bool spread_q = false;
  // Head 3 of every query holds 2^17 at dimension 0, where every K element is 0: its scores stay
  // moderate, but its tile's largest |q| is past fp16's range (the FP8 path scales Q down).
  bool huge_q = false;
  // FP8 E4M3 K/V with bf16 q when not empty: the descale factors, [1] or [h_kv] each.
  std::vector<float> k_descale, v_descale;
  bool fp8() const { return !k_descale.empty(); }
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Case make_case(std::string name, int h_q, int h_kv, int topk, int page, int q, std::vector<int> seq_lens,
               Selection sel, std::uint64_t seed) {
  Case c;
  c.name = std::move(name);
  c.q = q;
  c.spec.shape = {.h_q = h_q, .h_kv = h_kv, .d = 128, .topk = topk};
  c.spec.page_size = page;
  for (const int s : seq_lens) c.spec.requests.push_back({q, s});
  c.spec.selection = sel;
  c.spec.seed = seed;
  return c;
}

std::vector<int> lengths(int n, int lo, int hi, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(lo + static_cast<int>(rng() % static_cast<std::uint64_t>(hi - lo + 1)));
  return v;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  // The production geometry: Hq 64, Hkv 4, top-16, page 128, Q 8; lengths below 128, equal to Q,
  // at and around block edges.
  c.push_back(make_case("q8_g16_page128_random", 64, 4, 16, 128, 8, {5000, 130, 8, 129, 2047, 700, 127, 128},
                        Selection::kRandom, 1));
  c.push_back(make_case("q1_g16_page64", 64, 4, 16, 64, 1, lengths(37, 1, 9000, 2), Selection::kRandom, 2));
  Case hm = make_case("q16_g16_page16_head_major", 32, 2, 16, 16, 16, {3000, 16, 1000}, Selection::kClustered, 3);
  hm.head_major = true;
  c.push_back(hm);
  c.push_back(make_case("q4_g1_flat_topk32", 4, 4, 32, 0, 4, {6000, 50, 4100}, Selection::kRandom, 4));
  Case tok = make_case("q2_g8_page32_token_major_sinks", 16, 2, 8, 32, 2, lengths(9, 2, 3000, 5),
                       Selection::kRandom, 5);
  tok.spec.token_major_pages = true;
  tok.spec.sinks = true;
  c.push_back(tok);
  c.push_back(make_case("q8_g4_page64_all_blocks", 16, 4, 16, 64, 8, {1900, 300, 9}, Selection::kAll, 6));
  c.push_back(make_case("q3_g5_topk1", 10, 2, 1, 128, 3, {700, 3, 129}, Selection::kRandom, 7));
  Case adv = make_case("q8_g16_adversarial", 64, 4, 16, 128, 8, lengths(5, 8, 6000, 8), Selection::kRandom, 8);
  adv.adversarial = true;
  c.push_back(adv);
  // Small batches with long requests: the work is split over each union (split-KV).
  c.push_back(make_case("b1_q8_split", 64, 4, 16, 128, 8, {60000}, Selection::kRandom, 9));
  c.push_back(make_case("b2_q16_g2_split", 8, 4, 16, 64, 16, {20000, 777}, Selection::kRandom, 10));
  c.push_back(make_case("b4_q1_split_sinks", 64, 4, 16, 128, 1, {100000, 5, 4096, 30000}, Selection::kRandom, 11));
  c.back().spec.sinks = true;
  c.push_back(make_case("b96_q8_g16", 64, 4, 16, 128, 8, lengths(96, 8, 4000, 12), Selection::kClustered, 12));
  // 160 requests of one query fill 80 (KV head, query tile) pairs with no split: the kernel
  // writes out and lse itself, sinks applied.
  c.push_back(make_case("b160_q1_unsplit_sinks", 64, 4, 16, 64, 1, lengths(160, 1, 2500, 14), Selection::kRandom, 14));
  c.back().spec.sinks = true;
  // Q above a tile's queries at G = 16: a request's tiles (siblings, sorting their unions by
  // block) hold 8 and 4 of its 12 queries, or a tile holds the ends of two requests; split.
  c.push_back(make_case("b3_q12_g16_siblings_split", 64, 4, 16, 128, 12, {30000, 12, 4000}, Selection::kRandom, 15));
  Case adv16 = make_case("q16_g16_adversarial", 64, 4, 16, 64, 16, lengths(6, 16, 5000, 16), Selection::kRandom, 16);
  adv16.adversarial = true;
  c.push_back(adv16);
  // Tensor-parallel shapes (h_kv 1 and 2): one pair split 32 ways (the combine's most slots), and
  // eight one-query requests in tiles of two (four pairs of 16 splits; DecodeGeometry.
  // FewPairsTakeMoreSplitsAndCtas), sinks. (Appended after the cases the FP8 ones take by index.)
  Case tp32 = make_case("tp_h1_b1_q8_32_splits", 16, 1, 16, 128, 8, {70000}, Selection::kRandom, 42);
  Case tp2 = make_case("tp_h1_b8_q1_tiles_of_two_sinks", 16, 1, 16, 64, 1, lengths(8, 3000, 90000, 43),
                       Selection::kRandom, 43);
  tp2.spec.sinks = true;
  // Two pairs (h_kv 2) of two queries: 32 splits of one entry each (step 71).
  Case tp2q = make_case("tp_h2_b1_q2_one_entry_splits", 32, 2, 16, 128, 2, {50000}, Selection::kRandom, 44);
  // Scores spread wide (test_prefill_cuda's _wide_scores): the lazy rescale's moves and lags.
  // (After the cases the FP8 ones below take by index.)
  c.push_back(make_case("q8_g16_wide_scores", 64, 4, 16, 64, 8, {9000, 300, 2500}, Selection::kRandom, 41));
  c.back().spec.qk_sd = 3.f;
  c.push_back(tp32);
  c.push_back(tp2);
  c.push_back(tp2q);
  const bool fp16_built = msa::test::fp16_instances_built();
  const std::size_t bf16_cases = c.size();
  for (std::size_t i = 0; fp16_built && i < bf16_cases; ++i) {
    Case h = c[i];
    h.name += "_fp16";
    h.spec.dtype = msa::DType::kFP16;
    c.push_back(h);
  }
  // FP8 E4M3 K/V: factors that are not powers of two, per tensor and per KV head, and small
  // enough factors that codes span subnormals to the format's maximum.
  if (msa::test::fp8_decode_built()) {
    const auto fp8 = [&](Case x, std::vector<float> kf, std::vector<float> vf) {
      x.name = "fp8_" + x.name;
      x.k_descale = std::move(kf);
      x.v_descale = std::move(vf);
      c.push_back(std::move(x));
    };
    fp8(c[0], {0.02f, 0.5f, 0.0039f, 0.11f}, {0.3f, 0.007f, 1.f, 0.05f});  // per KV head
    fp8(c[1], {0.013f}, {0.021f});                                           // per tensor
    fp8(c[2], {0.01f}, {0.6f, 0.004f});                                      // head-major, page 16
    fp8(c[3], {0.0625f}, {0.004f});                                          // flat, topk 32
    fp8(c[4], {0.009f, 0.3f}, {0.02f});                                      // token-major pages, sinks
    fp8(c[7], {0.05f}, {0.05f});                                             // adversarial ids
    fp8(c[8], {0.003f}, {0.2f});                                             // B = 1: split
    fp8(c[10], {0.01f, 0.02f, 0.03f, 0.04f}, {0.015f});                      // split, sinks
    fp8(c[11], {0.011f}, {0.013f});  // 96 requests: several tiles per CTA
    fp8(c[12], {0.02f, 0.007f, 0.3f, 0.05f}, {0.04f});  // unsplit, sinks
    fp8(c[13], {0.01f}, {0.02f});                       // sibling tiles, split
    // The FP8 consumers are warps of 16 tile rows: G = 4 (four queries a warp), G = 5 (a query's
    // rows in two warps, boxes of one row), G = 2 split, Q = 16 at G = 16 (two tiles a request).
    fp8(c[5], {0.02f}, {0.03f});
    fp8(c[6], {0.04f, 0.01f}, {0.02f});
    fp8(c[9], {0.01f}, {0.05f});
    fp8(c[14], {0.03f}, {0.02f});
    // Wide scores (K codes up to the format's maximum, satfinite): powers of two, as for spread_q
    // below, so that the reference's BF16 copy of the dequantised K is exact.
    fp8(c[15], {0.03125f}, {0.015625f});
    fp8(c[16], {0.02f}, {0.03f});  // one pair, 32 splits
    fp8(c[17], {0.01f}, {0.04f});  // tiles of two requests, sinks
    fp8(c[18], {0.02f, 0.05f}, {0.01f});  // two pairs, 32 splits of one entry
    Case g12 = make_case("fp8_q5_g12_page32", 48, 4, 16, 32, 5, lengths(7, 5, 7000, 18), Selection::kRandom, 18);
    g12.k_descale = {0.02f};
    g12.v_descale = {0.03f};
    c.push_back(g12);
    // Tiles of fewer than eight row groups share each group's blocks among the spare warps (ways):
    // Q = 3 (three groups a request: two ways, two idle warps; split, sinks), Q = 6 (two
    // requests' rows or one's: six groups, one way, or three), Q = 1 at G = 8 (eight ways on
    // half a group), all with NaN codes in the tails.
    Case w3 = make_case("fp8_q3_g16_ways_sinks", 64, 4, 16, 128, 3, lengths(5, 3, 40000, 19), Selection::kRandom, 19);
    w3.spec.sinks = true;
    w3.k_descale = {0.02f, 0.01f, 0.03f, 0.04f};
    w3.v_descale = {0.03f};
    c.push_back(w3);
    Case w6 = make_case("fp8_q6_g16_ways", 64, 4, 16, 64, 6, lengths(11, 6, 9000, 20), Selection::kClustered, 20);
    w6.k_descale = {0.015f};
    w6.v_descale = {0.02f, 0.05f, 0.01f, 0.03f};
    c.push_back(w6);
    Case w1 = make_case("fp8_b3_q1_g8_ways_split", 32, 4, 16, 128, 1, {70000, 1, 129}, Selection::kRandom, 21);
    w1.k_descale = {0.02f};
    w1.v_descale = {0.03f};
    c.push_back(w1);
    Case spread = make_case("fp8_q8_g16_spread_q", 64, 4, 16, 128, 8, {3000, 300, 9000}, Selection::kRandom, 13);
    spread.spread_q = true;
    spread.k_descale = {0.015625f};  // powers of two: the reference's dequantised K is exact, so
    spread.v_descale = {0.03125f};   // the large rows' scores stay within the LSE tolerance
    c.push_back(spread);
    Case huge = make_case("fp8_q8_g16_huge_q", 64, 4, 16, 128, 8, {2000, 700}, Selection::kRandom, 17);
    huge.huge_q = true;
    huge.k_descale = {0.02f};
    huge.v_descale = {0.03f};
    c.push_back(huge);
    // Most cases above run the kernel with Q in the ring (short requests: their choices repeat
    // blocks); long requests keep the plain kernel (DecodeGeometry.QInRingWhereUnionsRepeatBlocks):
    // here one request of 30000 tokens bounds seq_len, and 140 unsplit tiles make some CTAs run two.
    std::vector<int> plain_lengths = lengths(69, 4, 7000, 22);
    plain_lengths.push_back(30000);
    Case plain = make_case("fp8_b70_q4_g16_plain", 64, 4, 16, 128, 4, plain_lengths, Selection::kRandom, 22);
    plain.k_descale = {0.02f, 0.01f, 0.03f, 0.04f};
    plain.v_descale = {0.03f};
    c.push_back(plain);
    // The Q-in-ring kernel where Q boxes are one row (G = 12 does not divide 64) and where a tile
    // holds several requests (G = 4, tiles of 16 queries: two requests).
    Case ring12 = make_case("fp8_q5_g12_ring", 48, 4, 16, 32, 5, lengths(9, 5, 1900, 23), Selection::kRandom, 23);
    ring12.k_descale = {0.02f, 0.04f, 0.01f, 0.03f};
    ring12.v_descale = {0.025f};
    c.push_back(ring12);
    Case ring4 = make_case("fp8_b40_q8_g4_ring", 16, 4, 16, 64, 8, lengths(40, 8, 1500, 24), Selection::kRandom, 24);
    ring4.spec.sinks = true;
    ring4.k_descale = {0.03f};
    ring4.v_descale = {0.02f, 0.01f, 0.05f, 0.04f};
    c.push_back(ring4);
  }
  return c;
}

// Every K element at dimension 0 (the last, contiguous dim), the poisoned tails' too, set to 0.
void zero_k_dim0(Workload& w) {
  const std::int64_t d = w.k.shape().back();
  for (std::int64_t i = 0; i < w.k.numel(); i += d) w.k.set(i, 0.f);
}

std::int64_t max_len(const Case& c) {
  std::int64_t m = 0;
  for (const Request& r : c.spec.requests) m = std::max<std::int64_t>(m, r.k_len);
  return m;
}

struct Reference {
  HostTensor out, lse;
};

Reference reference(const Workload& w) {
  const auto& s = w.spec.shape;
  Reference r{HostTensor(w.spec.dtype, {w.total_q, s.h_q, s.d}), HostTensor(msa::DType::kFP32, {w.total_q, s.h_q})};
  msa::cpu::sparse_prefill_gather(s, w.prefill_args(r.out, r.lse));
  return r;
}

void expect_matches(const HostTensor& out, const HostTensor& lse, const Reference& ref, const std::string& what) {
  const auto r_out = msa::bench::compare(out, ref.out, {});
  EXPECT_TRUE(r_out.ok) << what << " out: " << r_out.summary();
  const auto r_lse = msa::bench::compare(lse, ref.lse, {.atol = 1e-3, .rtol = 0.0, .min_cosine = 0.0});
  EXPECT_TRUE(r_lse.ok) << what << " lse: " << r_lse.summary();
}

// The device copies of a decode's inputs and outputs (K/V from `fp8` when not null).
struct DeviceDecode {
  DeviceTensor q, k, v, seq_len, topk, pt, cuk, sinks, out, lse, k_descale, v_descale;
  msa::DecodeArgs args;

  DeviceDecode(const Case& c, const Workload& w, const HostTensor& topk_host, const HostTensor& out_h,
               const HostTensor& lse_h, const Fp8Kv* fp8 = nullptr)
      : q(w.q), k(fp8 ? fp8->k : w.k, fp8 ? msa::bench::retyped(w.kv().k, fp8->k) : w.kv().k),
        v(fp8 ? fp8->v : w.v, fp8 ? msa::bench::retyped(w.kv().v, fp8->v) : w.kv().v), seq_len(w.k_len),
        topk(topk_host), pt(c.spec.page_size > 0, w.page_table, w.page_table.view()),
        cuk(c.spec.page_size == 0, w.cu_seqlens_k, w.cu_seqlens_k.view()),
        sinks(c.spec.sinks, w.sinks, w.sinks.view()), out(out_h), lse(lse_h),
        k_descale(fp8 != nullptr, fp8 ? fp8->k_descale : w.k_len, fp8 ? fp8->k_descale.view() : msa::TensorView{}),
        v_descale(fp8 != nullptr, fp8 ? fp8->v_descale : w.k_len, fp8 ? fp8->v_descale.view() : msa::TensorView{}) {
    args.q = q.view;
    args.kv.k = k.view;
    args.kv.v = v.view;
    args.k_descale = k_descale.view;
    args.v_descale = v_descale.view;
    args.kv.page_table = pt.view;
    args.kv.cu_seqlens_k = cuk.view;
    args.seq_len = seq_len.view;
    args.topk = topk.view;
    args.topk_head_major = c.head_major;
    args.q_per_request = c.q;
    args.sinks = sinks.view;
    args.out = out.view;
    args.lse = lse.view;
  }
};

class DecodeCuda : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeCuda, MatchesReferenceReproduciblyAndInGraphs) {
  MSA_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const auto& s = c.spec.shape;
  Workload w = msa::bench::make_workload(c.spec);
  if (c.adversarial) msa::test::make_adversarial(w.topk, c.spec.seed, 20);
  if (c.spec.page_size > 0) msa::bench::poison_cache_tails(w);
  if (c.spread_q) {
    const std::int64_t rows = w.total_q * s.h_q;
    for (std::int64_t r = 0; r < rows; ++r) {
      // Powers of two and not: 2^-60 .. 2^6 over the rows, times 1 or 1.37; head 5 of every
      // query all zeros.
      const float f = r % s.h_q == 5 ? 0.f : std::ldexp(r % 2 ? 1.37f : 1.f, static_cast<int>(r * 7 % 67) - 60);
      for (int d = 0; d < s.d; ++d) w.q.set(r * s.d + d, w.q.get(r * s.d + d) * f);
    }
  }
  if (c.huge_q) {
    zero_k_dim0(w);
    for (std::int64_t r = 3; r < w.total_q * s.h_q; r += s.h_q) w.q.set(r * s.d, 131072.f);  // 2^17
  }
  // FP8: the caches hold the codes (NaN codes in the tails); the reference reads w's K/V, now
  // the dequantised values.
  const Fp8Kv fp8 = c.fp8() ? msa::bench::quantise_kv_fp8(w, c.k_descale, c.v_descale) : Fp8Kv{};
  const Reference ref = reference(w);

  HostTensor out(c.spec.dtype, {w.total_q, s.h_q, s.d}), lse(msa::DType::kFP32, {w.total_q, s.h_q});
  out.fill(std::nanf(""));  // poison: every element must be written
  lse.fill(std::nanf(""));
  const HostTensor topk_host = msa::bench::query_major_topk(w.topk);
  DeviceDecode d(c, w, c.head_major ? w.topk : topk_host, out, lse, c.fp8() ? &fp8 : nullptr);

  msa::Options o;
  o.backend = msa::Backend::kCuda;
  msa::SparseDecode op(s, o);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  const auto batch = static_cast<std::int64_t>(c.spec.requests.size());
  op.plan(batch, c.q, max_len(c), stream);
  op.run(d.args, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaGetLastError());
  d.out.download(out);
  d.lse.download(lse);
  expect_matches(out, lse, ref, c.name);

  // Bitwise reproducibility: run again, captured in a CUDA graph, into poisoned outputs.
  HostTensor out2(c.spec.dtype, {w.total_q, s.h_q, s.d}), lse2(msa::DType::kFP32, {w.total_q, s.h_q});
  CUDA_OK(cudaMemset(d.out.ptr, 0xff, out.bytes()));
  CUDA_OK(cudaMemset(d.lse.ptr, 0xff, lse.bytes()));
  CUDA_OK(cudaDeviceSynchronize());
  const msa::test::CapturedGraph graph(stream, [&](cudaStream_t st) { op.run(d.args, st); });
  ASSERT_TRUE(graph.ok());
  CUDA_OK(graph.launch(stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  d.out.download(out2);
  d.lse.download(lse2);
  EXPECT_EQ(std::memcmp(out.raw(), out2.raw(), out.bytes()), 0) << c.name << ": graph rerun differs";
  EXPECT_EQ(std::memcmp(lse.raw(), lse2.raw(), lse.bytes()), 0) << c.name << ": graph rerun lse differs";

  // The next step: shorter requests (the same pages), a new selection and new queries written
  // into the same buffers; the replay must match the reference of the new contents.
  if (c.spec.page_size > 0 && !c.adversarial) {
    Workload w2 = msa::bench::make_workload(c.spec);  // the same caches and page table
    msa::bench::poison_cache_tails(w2);
    if (c.huge_q) zero_k_dim0(w2);
    if (c.fp8()) msa::bench::quantise_kv_fp8(w2, c.k_descale, c.v_descale);  // the same codes
    std::mt19937_64 rng(c.spec.seed + 99);
    std::vector<Request> shorter = c.spec.requests;
    auto* k_len = w2.k_len.data<std::int32_t>();
    for (std::size_t b = 0; b < shorter.size(); ++b) {
      shorter[b].k_len = std::max(c.q, shorter[b].k_len - static_cast<int>(rng() % 300));
      k_len[b] = shorter[b].k_len;
    }
    msa::bench::fill_topk(w2.topk, shorter, s.h_kv, s.topk, c.spec.selection, c.spec.clustered_p, c.spec.seed + 7);
    std::normal_distribution<float> normal(0.f, 0.25f);
    for (std::int64_t i = 0; i < w2.q.numel(); ++i) w2.q.set(i, normal(rng));
    w2.spec.requests = shorter;
    const Reference ref2 = reference(w2);
    d.q.upload(w2.q);
    d.seq_len.upload(w2.k_len);
    if (c.head_major) d.topk.upload(w2.topk);
    else d.topk.upload(msa::bench::query_major_topk(w2.topk));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(graph.launch(stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    d.out.download(out2);
    d.lse.download(lse2);
    expect_matches(out2, lse2, ref2, c.name + " replay with new seq_len, top-k and q");
  }
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Cases, DecodeCuda, ::testing::ValuesIn(cases()), [](const auto& p) { return p.param.name; });

// The CUDA decode and the CPU twin give the same answer through the same public API, and a
// workspace the caller owns works like the object's own.
TEST(DecodeCudaApi, CallerWorkspaceAndCpuTwinAgree) {
  MSA_SKIP_WITHOUT_GPU();
  Case c = make_case("api", 64, 4, 16, 128, 8, {3000, 9, 1200}, Selection::kRandom, 21);
  const auto& s = c.spec.shape;
  Workload w = msa::bench::make_workload(c.spec);
  const HostTensor topk_q = msa::bench::query_major_topk(w.topk);
  HostTensor cpu_out(c.spec.dtype, {w.total_q, s.h_q, s.d}), cpu_lse(msa::DType::kFP32, {w.total_q, s.h_q});
  msa::DecodeArgs ha;
  ha.q = w.q.view();
  ha.kv = w.kv();
  ha.seq_len = w.k_len.view();
  ha.topk = topk_q.view();
  ha.q_per_request = c.q;
  ha.out = cpu_out.view();
  ha.lse = cpu_lse.view();
  msa::sparse_decode(s, ha);  // the CPU twin

  HostTensor out(c.spec.dtype, {w.total_q, s.h_q, s.d}), lse(msa::DType::kFP32, {w.total_q, s.h_q});
  DeviceDecode d(c, w, topk_q, out, lse);
  msa::Options o;
  o.backend = msa::Backend::kCuda;
  const std::size_t bytes = msa::SparseDecode::workspace_bytes(
      s, {.batch = 3, .total_q = w.total_q, .max_k_len = max_len(c)}, o);
  ASSERT_GT(bytes, 0u);
  msa::test::DeviceBuffer ws(bytes);
  msa::SparseDecode op(s, o);
  op.set_workspace(ws.get(), bytes);
  op.plan(3, c.q, max_len(c));
  op.run(d.args);
  CUDA_OK(cudaDeviceSynchronize());
  d.out.download(out);
  d.lse.download(lse);
  const auto r = msa::bench::compare(out, cpu_out, {});
  EXPECT_TRUE(r.ok) << r.summary();
  const auto rl = msa::bench::compare(lse, cpu_lse, {.atol = 1e-3, .rtol = 0.0, .min_cosine = 0.0});
  EXPECT_TRUE(rl.ok) << rl.summary();
  // Too small a workspace is named; a run with another batch size than planned too.
  msa::SparseDecode small(s, o);
  small.set_workspace(ws.get(), 256);
  try {
    small.plan(3, c.q, max_len(c));
    ADD_FAILURE() << "a 256-byte workspace was accepted";
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), "workspace.bytes");
  }
  try {
    op.plan(2, c.q, max_len(c));
    op.run(d.args);
    ADD_FAILURE() << "a run with B = 3 after plan(B = 2) was accepted";
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), "seq_len.shape[0]");
  }
}

// The combine of a split step takes any valid out: a dimension of one index may have any stride
// (check_layout), here B * Q = 1 with a token stride of 4 elements, which the combine's launch
// once refused as an internal error after the decode kernel had run (no GPU needed: its
// parameters only).
TEST(DecodeCudaApi, SplitStepCombineTakesOneRowOutWithAnyStride) {
  const msa::AttentionShape s{.h_q = 8, .h_kv = 1, .d = 128, .topk = 16};
  const msa::cuda::DecodeGeometry g = msa::cuda::decode_geometry(s, 1, 1, 131072);
  ASSERT_GT(g.splits, 1);  // the combine runs
  alignas(256) static unsigned char memory[1 << 12];
  const msa::cuda::DecodeWorkspace w = msa::cuda::decode_workspace(s, g, memory);
  msa::DecodeArgs a;
  a.out = msa::TensorView::strided(memory, msa::DType::kBF16, {1, 8, 128}, {4, 128, 1}, msa::Device::kCuda);
  EXPECT_TRUE(msa::cuda::combine_params_ok(msa::cuda::decode_combine_params(s, a, g, w)));
  a.out = msa::TensorView::strided(memory, msa::DType::kBF16, {2, 8, 128}, {4, 128, 1}, msa::Device::kCuda);
  EXPECT_FALSE(msa::cuda::combine_params_ok(msa::cuda::decode_combine_params(s, a, g, w)));  // two rows 8 bytes apart
}

// Sizes only (no GPU needed): a step with enough (KV head, query tile) pairs to fill the GPU is
// not split, so the kernel writes out and lse itself and needs no workspace; a split step's
// holds the partials (splits x rows x (d 16-bit values + one fp32 LSE)). workspace_bytes() is
// the most any step no larger needs, so a workspace sized for the largest batch holds them all.
TEST(DecodeCudaApi, WorkspaceHoldsPartialsOnlyWhenSplit) {
  const msa::AttentionShape s{.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
  msa::Options o;
  o.backend = msa::Backend::kCuda;
  const auto need = [&](std::int64_t b, int q) {
    return msa::cuda::decode_workspace(s, msa::cuda::decode_geometry(s, b, q, 100000), nullptr).bytes;
  };
  EXPECT_EQ(need(128, 8), std::size_t{0});
  EXPECT_GE(need(1, 8), std::size_t{2} * 8 * 64 * (128 * 2 + 4));
  // Q = 1: tiles of 8 requests would make 16 pairs of 8 splits at B = 32; a tile per request
  // makes 128 pairs, unsplit. At B = 4, 16 pairs of 8 splits instead of 4 of 16.
  EXPECT_EQ(need(32, 1), std::size_t{0});
  EXPECT_GE(need(4, 1), std::size_t{8} * 4 * 64 * (128 * 2 + 4));
  EXPECT_LT(need(4, 1), std::size_t{16} * 4 * 64 * (128 * 2 + 4));
  const std::size_t most =
      msa::SparseDecode::workspace_bytes(s, {.batch = 128, .total_q = 1024, .max_k_len = 100000}, o);
  for (const std::int64_t b : {1, 2, 4, 8, 32, 128})
    for (const int q : {1, 2, 8}) EXPECT_GE(most, need(b, q)) << b << " x " << q;
  std::size_t one_request = 0;  // B = 1 of 1..8 queries: the problems no larger than B = 1, Q = 8
  for (int q = 1; q <= 8; ++q) one_request = std::max(one_request, need(1, q));
  EXPECT_EQ(msa::SparseDecode::workspace_bytes(s, {.batch = 1, .total_q = 8, .max_k_len = 100000}, o), one_request);
}

}  // namespace
