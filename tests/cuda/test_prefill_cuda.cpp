// The whole CUDA sparse prefill through the public API (device planner -> sm_90a kernel ->
// combine) against the FP64 gather reference on the spec §8 cases: three-part check on out,
// |err| <= 1e-3 and identical -inf positions on lse, bitwise-identical reruns, and plan() +
// run() captured in a CUDA graph giving the same bytes. Paged cases hold NaN in every cache
// slot past a request's k_len (its last page's tail), which no result may depend on. Every case
// runs block-major and tile-union; some also on PrefillPath::kAuto, one of them (_mixed) with
// tiles routed to both kernels in one call. Every case runs in each dtype of the build.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <ostream>
#include <string>
#include <vector>

#include "bench/compare.h"
#include "bench/workload.h"
#include "core/tile_route.h"
#include "cpu/reference.h"
#include "cuda/api/decode_params.h"
#include "cuda/api/prefill_route.h"
#include "cuda/instances.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"
#include "msa/msa.h"
#include "tests/support/cuda_cases.h"
#include "tests/support/cuda_check.h"
#include "tests/support/cuda_graph.h"
#include "tests/support/device_tensor.h"

namespace {

using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Selection;
using msa::bench::Workload;
using msa::bench::WorkloadSpec;

using msa::test::DeviceTensor;

struct Case {
  std::string name;
  WorkloadSpec spec;
  int q_per_item = 64;
  bool adversarial = false;  // sprinkle -1, duplicates and out-of-range ids into the rows
  bool future_ids = false;   // and ids of blocks below k_len that the query cannot see (causal)
  msa::PrefillPath path = msa::PrefillPath::kBlockMajor;
  bool mixed_route = false;  // PrefillPath::kAuto must route tiles both ways (checked)
  bool union_only = false;   // kAuto must take the plan-free path (plan_free_queries_per_tile, checked)
  int free_queries = 0;      // > 0: ... with tiles of this many queries (checked)
  bool host_batch = false;   // plan() from the CPU batch tensors (else device ones + a bound)
  bool no_lse = false;       // run() without the optional lse
  bool decode_route = false;  // kAuto must run it as a decode step (prefill_as_decode, checked)
  bool split_union = false;   // kAuto must split the union tiles (prefill_split_union, checked)
};
// Test names in CTest and gtest output: the case name, not the struct bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

WorkloadSpec spec_of(int h_q, int h_kv, int topk, int page, std::vector<Request> requests,
                     Selection sel, std::uint64_t seed) {
  WorkloadSpec s;
  s.shape = {.h_q = h_q, .h_kv = h_kv, .d = 128, .topk = topk};
  s.page_size = page;
  s.requests = std::move(requests);
  s.selection = sel;
  s.seed = seed;
  return s;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  const std::vector<Request> chunked = {{700, 2000}, {1, 1500}, {0, 300}, {384, 384}, {129, 1300}};
  c.push_back({"page128_g16_random", spec_of(64, 4, 16, 128, chunked, Selection::kRandom, 1)});
  c.push_back({"page64_g8_tileshared", spec_of(16, 2, 8, 64, chunked, Selection::kTileShared, 2)});
  c.push_back({"page32_g4_clustered", spec_of(8, 2, 16, 32, chunked, Selection::kClustered, 3)});
  c.push_back({"page16_g1_topk1", spec_of(4, 4, 1, 16, {{300, 900}, {5, 5}}, Selection::kRandom, 4)});
  c.push_back({"flat_g16_topk32", spec_of(16, 1, 32, 0, {{1000, 5000}, {77, 77}}, Selection::kRandom, 5)});
  c.push_back({"dense_identity_all", spec_of(16, 2, 16, 128, {{1500, 2000}, {1, 2048}}, Selection::kAll, 6)});
  Case tok{"token_major_sinks", spec_of(32, 4, 8, 64, chunked, Selection::kRandom, 7)};
  tok.spec.token_major_pages = true;
  tok.spec.sinks = true;
  c.push_back(tok);
  Case hot{"hot_rows_qpi8", spec_of(16, 1, 4, 128, {{600, 700}}, Selection::kTileShared, 8), 8};
  c.push_back(hot);
  // Items of 10 queries at G = 16 (160 rows): every item's second step leaves the second
  // consumer warpgroup's rows all padding, over a thousand times in one call, so that a release
  // of the Q buffer out of turn by the idle warpgroup (docs/performance.md step 73) shows as a
  // rerun that differs.
  c.push_back({"items_of_ten_g16", spec_of(16, 1, 16, 128, {{1000, 2048}}, Selection::kTileShared, 25), 10});
  c.push_back({"adversarial_rows", spec_of(16, 2, 8, 128, chunked, Selection::kRandom, 9), 64, true});
  std::vector<Request> many;
  for (int i = 0; i < 300; ++i) many.push_back({1 + (i * 7) % 13, 1 + (i * 7) % 13 + (i * 37) % 500});
  c.push_back({"batch300", spec_of(16, 2, 8, 32, many, Selection::kRandom, 10)});
  c.push_back({"page128_g3_random", spec_of(12, 4, 16, 128, chunked, Selection::kRandom, 12)});
  // G = 4, K = 16: tiles of 32 queries, here up to 32 requests each (every membership bit on
  // the tile-union path).
  std::vector<Request> tiny;
  for (int i = 0; i < 40; ++i) tiny.push_back({1 + i % 3, 1 + i % 3 + (i * 37) % 700});
  c.push_back({"page64_g4_random_tiny_requests", spec_of(16, 4, 16, 64, tiny, Selection::kRandom, 18)});
  // G <= 3 with no device plan: tiles of more queries than routed ones (tile_union_free_queries).
  // G = 1: tiles of 128 queries over up to 64 requests (segments) each, rows with ids no query
  // of a tile can see (its union is bounded by the blocks its queries see). G = 2: 64-query
  // tiles with hostile rows and unseen ids.
  std::vector<Request> tiny1;
  for (int i = 0; i < 90; ++i) tiny1.push_back({1 + i % 3, 1 + i % 3 + (i * 53) % 600});
  Case tiny_g1{"page32_g1_random_tiny_requests", spec_of(4, 4, 16, 32, tiny1, Selection::kRandom, 19)};
  tiny_g1.future_ids = true;
  c.push_back(tiny_g1);
  Case adv_g2{"page64_g2_random_adversarial", spec_of(8, 4, 16, 64, chunked, Selection::kRandom, 20), 64, true};
  adv_g2.future_ids = true;
  c.push_back(adv_g2);
  // G = 4, top-31 (a random-shape sweep's case): the plan-free tiles are the routed 16-query ones,
  // whose 496 top-k entries fit the narrow list (32-query tiles of 992 did not).
  c.push_back({"page16_g4_topk31_random", spec_of(16, 4, 31, 16, {{3, 13}, {548, 762}}, Selection::kRandom, 23)});
  // Scores spread wide (q and k of deviation 3: scores of deviation about 13 in log2 units),
  // so that a row's maximum rises by more than the lazy rescale's lag (kMaxLag = 8) on later
  // blocks, and P reaches up to 2^8 between moves. (Random picks; not named so: at K = 16 every
  // query of these requests picks nearly all it sees, so PrefillPath::kAuto would go plan-free,
  // the _union case's kernel.)
  Case wide{"page64_g8_wide_scores", spec_of(16, 2, 16, 64, chunked, Selection::kRandom, 24)};
  wide.spec.qk_sd = 3.f;
  c.push_back(wide);
  // Scores spread wider still (q and k of deviation 10: scores of deviation about 145 in log2
  // units), so that on the tile-union path (the _union cases) a settled row's later block
  // overflows P against the row's reference, whose S softmax_settle then recomputes from K in
  // global memory (paged and flat here), besides the many blocks it rescales without that.
  Case huge{"page64_g8_huge_scores", spec_of(16, 2, 16, 64, chunked, Selection::kRandom, 26)};
  huge.spec.qk_sd = 10.f;
  c.push_back(huge);
  Case huge_flat{"flat_g4_huge_scores", spec_of(8, 2, 16, 0, {{1000, 2500}, {300, 700}}, Selection::kRandom, 27)};
  huge_flat.spec.qk_sd = 10.f;
  c.push_back(huge_flat);
  c.push_back({"total_q_zero", spec_of(16, 2, 8, 128, {{0, 500}, {0, 10}}, Selection::kRandom, 11)});
  // Random picks among 123..128 visible blocks (request 0) route to the block-major kernel,
  // among 8..16 (request 1: every visible block) to the tile-union kernel: PrefillPath::kAuto
  // runs both in one call (and plans: request 0's tiles cost the union kernel more than the
  // routed call's fixed cost). Request 1's 132 tiles make one round of the union kernel's CTAs,
  // whose makespan their block-major work exceeds (route_call_pays).
  Case mixed{"page128_g16_random_mixed", spec_of(16, 1, 16, 128, {{768, 16384}, {1056, 2048}}, Selection::kRandom, 13)};
  mixed.mixed_route = true;
  c.push_back(mixed);
  // Every case again on the tile-union path (tiles that span requests: chunked, batch300), and
  // some on the automatic choice (tile-shared picks the union path, random block-major).
  const std::size_t block_major = c.size();
  for (std::size_t i = 0; i < block_major; ++i) {
    Case u = c[i];
    u.name += "_union";
    u.path = msa::PrefillPath::kTileUnion;
    c.push_back(u);
    if (u.name.find("tileshared") != std::string::npos || u.name.find("random") != std::string::npos ||
        u.name.find("batch300") != std::string::npos || u.name.find("hot_rows") != std::string::npos) {
      Case a = c[i];
      a.name += "_auto";
      a.path = msa::PrefillPath::kAuto;
      // One request on 700 tokens, the chunked batch at G = 3 in 42-query tiles, and G = 4 at
      // top-31 in the routed 16-query tiles. The 40 requests on at most 702 tokens (G = 4) and
      // the 90 at G = 1, from device tensors, run split without a plan (prefill_split_wide:
      // their plan-free tiles' bound, 32 requests of 6 blocks in a tile, is too long for one
      // CTA, and a split costs less than the plan).
      a.union_only = a.name.find("hot_rows") != std::string::npos || a.name.find("g3_random") != std::string::npos ||
                     a.name.find("g4_topk31") != std::string::npos;
      a.split_union = a.name.find("tiny_requests") != std::string::npos;
      if (a.name.find("g3_random") != std::string::npos) a.free_queries = 42;
      if (a.name.find("g4_topk31") != std::string::npos) a.free_queries = 16;
      c.push_back(a);
    }
  }
  // PrefillPath::kAuto where the batch alone sends every tile to the tile-union kernel
  // (plan() builds nothing; the kernel writes out / lse itself): a host batch whose tiles span
  // requests, one and two requests planned from device tensors, and no lse.
  Case only{"short_chunks_union_only", spec_of(64, 4, 16, 128, {{700, 2000}, {300, 300}, {129, 1300}},
                                                Selection::kRandom, 14)};
  only.path = msa::PrefillPath::kAuto;
  only.spec.sinks = true;
  only.union_only = true;
  only.host_batch = true;
  c.push_back(only);
  Case one{"single_4096_union_only", spec_of(32, 2, 16, 64, {{1500, 4096}}, Selection::kRandom, 15)};
  one.path = msa::PrefillPath::kAuto;
  one.spec.sinks = true;
  one.union_only = true;
  c.push_back(one);
  // Two requests from device tensors: each of the (at most two) a tile holds sees <= 16 blocks.
  Case two{"two_requests_device_union_only", spec_of(64, 4, 16, 128, {{300, 2048}, {77, 1500}}, Selection::kRandom, 17)};
  two.path = msa::PrefillPath::kAuto;
  two.spec.sinks = true;
  two.union_only = true;
  c.push_back(two);
  // One request at G = 1 (128-query tiles) and G = 2 (64), planned from host and device
  // tensors, with unseen ids.
  Case g1{"single_g1_union_only_128", spec_of(8, 8, 16, 128, {{2500, 3000}}, Selection::kRandom, 21)};
  g1.path = msa::PrefillPath::kAuto;
  g1.union_only = true;
  g1.free_queries = 128;
  g1.host_batch = true;
  g1.future_ids = true;
  c.push_back(g1);
  Case g2{"single_g2_device_union_only_64", spec_of(16, 8, 16, 64, {{3000, 3000}}, Selection::kRandom, 22)};
  g2.path = msa::PrefillPath::kAuto;
  g2.spec.sinks = true;
  g2.union_only = true;
  g2.free_queries = 64;
  c.push_back(g2);
  // The same wide scores in the wide instance (G = 1, 128-query tiles, pages of 32, sinks).
  Case huge_g1{"single_g1_union_only_huge_scores", spec_of(8, 8, 16, 32, {{2500, 3000}}, Selection::kRandom, 28)};
  huge_g1.path = msa::PrefillPath::kAuto;
  huge_g1.spec.sinks = true;
  huge_g1.spec.qk_sd = 10.f;
  huge_g1.union_only = true;
  huge_g1.free_queries = 128;
  c.push_back(huge_g1);
  Case nolse{"single_union_only_no_lse", spec_of(16, 1, 16, 0, {{900, 3000}}, Selection::kRandom, 16)};
  nolse.path = msa::PrefillPath::kAuto;
  nolse.union_only = true;
  nolse.host_batch = true;
  nolse.no_lse = true;
  c.push_back(nolse);
  // Small calls on kAuto that plan nothing. One request of 1..16 queries: a decode step (Q =
  // total_q, head-major top-k), on long and short (5 blocks, no multiple of 128) lengths, page
  // sizes 16-128 and flat, G = 1..16, top-k 7..32, host and device batches, sinks, hostile and
  // unseen ids. Several requests of 1..16 queries in all: the union kernel's tiles split over
  // their unions, then the combine (tiles spanning requests, q_len 0, top-k 3..32).
  enum class Small { kDecode, kSplit };
  const auto small = [&](const std::string& name, Small kind, WorkloadSpec spec, bool sinks, bool host, bool hostile) {
    Case r{name, std::move(spec)};
    r.path = msa::PrefillPath::kAuto;
    r.decode_route = kind == Small::kDecode;
    r.split_union = kind == Small::kSplit;
    r.spec.sinks = sinks;
    r.host_batch = host;
    r.adversarial = hostile;
    r.future_ids = hostile;
    c.push_back(r);
  };
  const Small dec = Small::kDecode, split = Small::kSplit;
  small("decode_route_q1_sinks", dec, spec_of(64, 4, 16, 128, {{1, 20000}}, Selection::kRandom, 30), true, false, false);
  small("decode_route_q16_host_page16", dec, spec_of(16, 2, 7, 16, {{16, 3000}}, Selection::kRandom, 31), false, true,
        false);
  small("decode_route_q5_g1_flat_hostile", dec, spec_of(4, 4, 32, 0, {{5, 1000}}, Selection::kRandom, 32), false,
        false, true);
  small("decode_route_q9_short", dec, spec_of(32, 2, 16, 64, {{9, 517}}, Selection::kRandom, 33), true, false, false);
  small("decode_route_q3_page32", dec, spec_of(16, 1, 16, 32, {{3, 700}}, Selection::kClustered, 34), false, true,
        false);
  small("split_union_4x1_sinks", split,
        spec_of(64, 4, 16, 128, {{1, 20000}, {1, 9000}, {1, 700}, {1, 30000}}, Selection::kRandom, 40), true, false,
        false);
  small("split_union_mixed_host_page16", split,
        spec_of(16, 2, 7, 16, {{5, 3000}, {0, 800}, {11, 1000}}, Selection::kRandom, 41), false, true, false);
  small("split_union_g1_flat_hostile", split,
        spec_of(4, 4, 32, 0, {{3, 1000}, {2, 600}, {9, 4000}}, Selection::kRandom, 42), false, false, true);
  small("split_union_topk3_page64", split, spec_of(32, 2, 3, 64, {{8, 700}, {8, 5000}}, Selection::kClustered, 43),
        true, true, false);
  // Calls of 17..1024 queries that the cost model sends to the split tiles
  // (prefill_split_wide): four requests of 16 with sinks on pages of 64 (host batch); one of 24
  // queries (device batch, taken as one request at the bound); G = 8 at top-32, 20 queries in
  // each of three requests on pages of 32 with hostile rows and unseen ids; G = 1 (tiles of 32
  // queries spanning requests), flat K/V; and a plan-free call whose routed tiles are fewer than
  // a wave (32 queries on 1024 tokens), split rather than run one CTA a tile.
  small("split_wide_4x16_sinks_host", split,
        spec_of(64, 4, 16, 64, {{16, 5000}, {16, 9000}, {16, 20000}, {16, 3000}}, Selection::kRandom, 44), true, true,
        false);
  small("split_wide_q24_device", split, spec_of(64, 4, 16, 128, {{24, 9000}}, Selection::kRandom, 45), false, false,
        false);
  small("split_wide_g8_topk32_hostile", split,
        spec_of(32, 4, 32, 32, {{20, 12000}, {20, 7000}, {20, 15000}}, Selection::kRandom, 46), false, true, true);
  small("split_wide_g1_flat", split, spec_of(8, 8, 16, 0, {{20, 6000}, {15, 4000}, {25, 8000}}, Selection::kRandom, 47),
        true, true, false);
  small("split_wide_plan_free_q32", split, spec_of(64, 4, 16, 128, {{32, 1024}}, Selection::kRandom, 48), false, false,
        false);
  // Routed both ways with sinks: the union kernel's rows final, the combine's the others.
  Case mixed_sinks = mixed;
  mixed_sinks.name = "page128_g16_random_mixed_sinks_auto";
  mixed_sinks.path = msa::PrefillPath::kAuto;
  mixed_sinks.spec.sinks = true;
  c.push_back(mixed_sinks);
  // Every case again in fp16 when this build holds the fp16 instances (MSA_CUDA_DTYPES).
  const bool fp16_built = msa::test::fp16_instances_built();
  const std::size_t bf16_cases = c.size();
  for (std::size_t i = 0; fp16_built && i < bf16_cases; ++i) {
    Case h = c[i];
    h.name += "_fp16";
    h.spec.dtype = msa::DType::kFP16;
    c.push_back(h);
  }
  return c;
}

// One slot in about half the rows names a block the query cannot see (after its position,
// below its request's k_len): it must change nothing.
void add_future_ids(Workload& w, std::uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + 1);
  const auto& shape = w.spec.shape;
  auto* ids = w.topk.data<std::int32_t>();
  const auto* cu = w.cu_seqlens_q.data<std::int32_t>();
  const auto* kl = w.k_len.data<std::int32_t>();
  int b = 0;
  for (std::int64_t q = 0; q < w.total_q; ++q) {
    while (cu[b + 1] <= q) ++b;
    const std::int64_t pos = kl[b] - (cu[b + 1] - cu[b]) + (q - cu[b]);
    const std::int64_t visible = pos / 128 + 1, blocks = (kl[b] + 127) / 128;
    if (pos < 0 || blocks <= visible) continue;
    for (int h = 0; h < shape.h_kv; ++h) {
      if (rng() % 2 != 0) continue;
      std::int32_t* row = ids + (std::int64_t(h) * w.total_q + q) * shape.topk;
      row[rng() % shape.topk] =
          static_cast<std::int32_t>(visible + static_cast<std::int64_t>(rng() % (blocks - visible)));
    }
  }
}

class PrefillCuda : public ::testing::TestWithParam<Case> {};

TEST_P(PrefillCuda, MatchesReferenceAndIsReproducible) {
  MSA_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  Workload w = msa::bench::make_workload(c.spec);
  if (c.adversarial) msa::test::make_adversarial(w.topk, c.spec.seed, 50);
  if (c.future_ids) add_future_ids(w, c.spec.seed);
  if (c.spec.page_size > 0) msa::bench::poison_cache_tails(w);
  const auto& s = c.spec.shape;
  std::int64_t max_k_len = 0;
  for (const Request& r : c.spec.requests) max_k_len = std::max<std::int64_t>(max_k_len, r.k_len);
  const int q_per_tile = msa::cuda::tile_union_queries_per_tile(s.group(), s.topk);
  const auto b_count = static_cast<std::int64_t>(c.spec.requests.size());
  if (c.path == msa::PrefillPath::kAuto) {  // the route plan() takes is the one the case is for
    const msa::cuda::PrefillRouteChoice route = msa::cuda::choose_prefill_route(
        s, c.path, /*union_readable=*/true, c.host_batch ? w.cu_seqlens_q.data<std::int32_t>() : nullptr,
        c.host_batch ? w.k_len.data<std::int32_t>() : nullptr, b_count, w.total_q, max_k_len);
    EXPECT_EQ(route.route == msa::cuda::PrefillRoute::kDecode, c.decode_route) << c.name;
    EXPECT_EQ(route.route == msa::cuda::PrefillRoute::kSplit, c.split_union) << c.name;
    if (!c.decode_route && !c.split_union) {
      EXPECT_EQ(route.route == msa::cuda::PrefillRoute::kPlanFree, c.union_only) << c.name;
    }
    if (c.free_queries > 0) {
      EXPECT_EQ(route.route, msa::cuda::PrefillRoute::kPlanFree) << c.name;
      EXPECT_EQ(route.q_per_tile, c.free_queries) << c.name;
    }
  }
  if (c.mixed_route) {
    const std::vector<std::uint8_t> route = msa::route_call_host(
        w.topk.data<std::int32_t>(), w.cu_seqlens_q.data<std::int32_t>(), w.k_len.data<std::int32_t>(),
        static_cast<int>(b_count), s.h_kv, s.group(), w.total_q, s.topk, q_per_tile);
    const auto union_tiles = std::count(route.begin(), route.end(), 1);
    EXPECT_GT(union_tiles, 0) << c.name;
    EXPECT_LT(union_tiles, static_cast<std::ptrdiff_t>(route.size())) << c.name;
  }

  // FP64 oracle on the CPU.
  const msa::DType dtype = c.spec.dtype;
  HostTensor ref_out(dtype, {w.total_q, s.h_q, s.d}), ref_lse(msa::DType::kFP32, {w.total_q, s.h_q});
  msa::cpu::sparse_prefill_gather(s, w.prefill_args(ref_out, ref_lse));

  // The same inputs on the device (strides kept, e.g. token-major pages).
  const msa::KvCache kv = w.kv();
  DeviceTensor q(w.q), k(w.k, kv.k), v(w.v, kv.v), cu(w.cu_seqlens_q), kl(w.k_len), topk(w.topk);
  DeviceTensor pt = c.spec.page_size > 0 ? DeviceTensor(w.page_table) : DeviceTensor();
  DeviceTensor cuk = c.spec.page_size > 0 ? DeviceTensor() : DeviceTensor(w.cu_seqlens_k);
  DeviceTensor sinks = c.spec.sinks ? DeviceTensor(w.sinks) : DeviceTensor();
  HostTensor out(dtype, {w.total_q, s.h_q, s.d}), lse(msa::DType::kFP32, {w.total_q, s.h_q});
  out.fill(std::nanf(""));  // poison: every element must be written
  lse.fill(std::nanf(""));
  DeviceTensor d_out(out), d_lse(lse);

  msa::PrefillArgs a;
  a.q = q.view;
  a.kv.k = k.view;
  a.kv.v = v.view;
  a.kv.page_table = pt.view;
  a.kv.cu_seqlens_k = cuk.view;
  a.batch = {cu.view, kl.view};
  a.topk = topk.view;
  a.sinks = sinks.view;
  a.out = d_out.view;
  a.lse = c.no_lse ? msa::TensorView{} : d_lse.view;
  // A host batch: plan() reads and stages it, run() is given the same host tensors.
  if (c.host_batch) a.batch = {w.cu_seqlens_q.view(), w.k_len.view()};

  msa::Options o;
  o.backend = msa::Backend::kCuda;
  o.q_per_item = c.q_per_item;
  o.prefill_path = c.path;
  msa::SparsePrefill op(s, o);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  op.plan(a.batch, a.topk, max_k_len, stream);
  op.run(a, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaGetLastError());
  d_out.download(out);
  d_lse.download(lse);

  const auto r_out = msa::bench::compare(out, ref_out, {});
  EXPECT_TRUE(r_out.ok) << c.name << " out: " << r_out.summary();
  if (c.no_lse) {
    // Not asked for: left as it was (NaN poison), not written.
    const float* l = lse.data<float>();
    EXPECT_TRUE(std::all_of(l, l + lse.numel(), [](float x) { return std::isnan(x); })) << c.name << ": lse written";
  } else {
    const auto r_lse = msa::bench::compare(lse, ref_lse, {.atol = 1e-3, .rtol = 0.0, .min_cosine = 0.0});
    EXPECT_TRUE(r_lse.ok) << c.name << " lse: " << r_lse.summary();
  }

  // Bitwise reproducibility: plan + run again, captured in a CUDA graph this time.
  HostTensor out2(dtype, {w.total_q, s.h_q, s.d}), lse2(msa::DType::kFP32, {w.total_q, s.h_q});
  CUDA_OK(cudaMemset(d_out.ptr, 0xff, out.bytes()));
  CUDA_OK(cudaMemset(d_lse.ptr, 0xff, lse.bytes()));
  // (A host batch is staged from pageable memory: planned before the capture.)
  if (c.host_batch) op.plan(a.batch, a.topk, max_k_len, stream);
  const msa::test::CapturedGraph graph(stream, [&](cudaStream_t captured) {
    if (!c.host_batch) op.plan(a.batch, a.topk, max_k_len, captured);  // same sizes: no allocation inside capture
    op.run(a, captured);
  });
  ASSERT_TRUE(graph.ok());
  CUDA_OK(graph.launch(stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  d_out.download(out2);
  d_lse.download(lse2);
  EXPECT_EQ(std::memcmp(out.raw(), out2.raw(), out.bytes()), 0) << c.name << ": graph rerun differs";
  if (c.no_lse) {
    const float* l = lse2.data<float>();
    EXPECT_TRUE(std::all_of(l, l + lse2.numel(), [](float x) { return std::isnan(x); })) << c.name << ": lse written";
  } else {
    EXPECT_EQ(std::memcmp(lse.raw(), lse2.raw(), lse.bytes()), 0) << c.name << ": graph rerun lse differs";
  }
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Cases, PrefillCuda, ::testing::ValuesIn(cases()),
                         [](const auto& p) { return p.param.name; });

}  // namespace
