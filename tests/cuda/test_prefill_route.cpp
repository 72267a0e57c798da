// The CUDA prefill's route (cuda/api/prefill_route.h), host-side only (no GPU needed): the one
// answer plan() follows and `msa run` checks its plan against. `msa run` once mirrored the
// decision with its own copy of the rules, which missed prefill_split_wide's split count and
// plan-free answer and so checked split calls against a routed plan (a random-shape sweep on
// the H200, docs/performance.md step 74: 34 of 359 calls, every one's prefill correct).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "bench/route_share.h"
#include "bench/workload.h"
#include "core/tile_route.h"
#include "cuda/api/decode_params.h"
#include "cuda/api/prefill_route.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"
#include "msa/msa.h"

namespace {

using msa::PrefillPath;
using msa::cuda::choose_prefill_route;
using msa::cuda::PrefillRoute;

// A device batch (sizes only, taken at the bound).
msa::cuda::PrefillRouteChoice device_route(const msa::AttentionShape& s, PrefillPath path, std::int64_t batch,
                                           std::int64_t total_q, std::int64_t max_k_len, bool readable = true) {
  return choose_prefill_route(s, path, readable, nullptr, nullptr, batch, total_q, max_k_len);
}

TEST(PrefillRoute, EachPathAndEachCallShape) {
  const msa::AttentionShape s{.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
  const int routed_q = msa::cuda::tile_union_queries_per_tile(16, 16);
  // Fixed paths.
  for (const std::int64_t q : {0, 1, 16, 171, 2048}) {
    EXPECT_EQ(device_route(s, PrefillPath::kBlockMajor, 1, q, 131072).route, PrefillRoute::kBlockMajor) << q;
    const auto u = device_route(s, PrefillPath::kTileUnion, 1, q, 131072);
    EXPECT_EQ(u.route, PrefillRoute::kPlanFree) << q;
    EXPECT_GE(u.q_per_tile, routed_q) << q;
  }
  // kAuto: a decode step for one request of 1-16 queries on more than 4 blocks.
  EXPECT_EQ(device_route(s, PrefillPath::kAuto, 1, 16, 16384).route, PrefillRoute::kDecode);
  EXPECT_NE(device_route(s, PrefillPath::kAuto, 1, 17, 16384).route, PrefillRoute::kDecode);
  // Several requests of 16 queries in all: split, at the decode's split count.
  const auto split = device_route(s, PrefillPath::kAuto, 4, 16, 65536);
  EXPECT_EQ(split.route, PrefillRoute::kSplit);
  EXPECT_EQ(split.splits, msa::cuda::prefill_union_splits(4, 16, routed_q, 65536, 16));
  EXPECT_EQ(split.q_per_tile, routed_q);
  // A 2048-token chunk on a long prefix: the device plan, routed tile by tile.
  const auto chunk = device_route(s, PrefillPath::kAuto, 1, 2048, 133120);
  EXPECT_EQ(chunk.route, PrefillRoute::kRouted);
  EXPECT_EQ(chunk.q_per_tile, routed_q);
  EXPECT_EQ(chunk.splits, 1);
  // Fewer tiles than kUnionSms: not routed (171 new tokens: 22 tiles a KV head, 88 in all).
  EXPECT_EQ(device_route(s, PrefillPath::kAuto, 1, 171, 16555).route, PrefillRoute::kBlockMajor);
  EXPECT_EQ(device_route(s, PrefillPath::kAuto, 1, 256, 16640).route, PrefillRoute::kBlockMajor);  // 128 tiles
  EXPECT_EQ(device_route(s, PrefillPath::kAuto, 1, 257, 16641).route, PrefillRoute::kRouted);      // 132 tiles
  // No query, or top-k rows the union kernel cannot read: the block-major kernel alone.
  EXPECT_EQ(device_route(s, PrefillPath::kAuto, 2, 0, 4096).route, PrefillRoute::kBlockMajor);
  EXPECT_EQ(device_route(s, PrefillPath::kAuto, 1, 2048, 133120, /*readable=*/false).route, PrefillRoute::kBlockMajor);
  EXPECT_EQ(device_route(s, PrefillPath::kAuto, 1, 8, 16384, /*readable=*/false).route, PrefillRoute::kBlockMajor);
  EXPECT_TRUE(msa::cuda::every_tile_on_union(PrefillRoute::kSplit));
  EXPECT_FALSE(msa::cuda::every_tile_on_union(PrefillRoute::kRouted));
}

// The calls the sweep found checked against the wrong plan: from a device batch, plan() splits
// them (prefill_split_wide with the split count and the plan-free answer it is given), where
// asking prefill_split_wide without them (free_q = 0, splits = 0), as `msa run` did, says no.
TEST(PrefillRoute, SplitWideCallsOfTheSweepAreSplit) {
  struct Call {
    msa::AttentionShape s;
    std::int64_t batch, total_q, max_k_len;
  };
  const std::vector<Call> calls = {
      {{.h_q = 1, .h_kv = 1, .d = 128, .topk = 31}, 19, 97, 896},   // sweep seed 176, case 101
      {{.h_q = 14, .h_kv = 2, .d = 128, .topk = 15}, 11, 60, 896},  // case 132
  };
  for (const Call& c : calls) {
    const auto r = device_route(c.s, PrefillPath::kAuto, c.batch, c.total_q, c.max_k_len);
    EXPECT_EQ(r.route, PrefillRoute::kSplit) << c.total_q;
    EXPECT_GE(r.splits, 2) << c.total_q;
    EXPECT_FALSE(msa::cuda::prefill_split_wide(nullptr, nullptr, c.batch, c.total_q, c.max_k_len, c.s.h_kv, c.s.h_q,
                                               c.s.d, c.s.topk, 0, 0))
        << c.total_q;
  }
}

// msa bench's union column follows the route too: a decode step and the split calls run every
// tile on the union kernel (it printed 0% for them while it asked only the plan-free rule).
TEST(PrefillRoute, BenchUnionShareFollowsTheRoute) {
  const auto share = [](std::vector<msa::bench::Request> requests, PrefillPath path) {
    msa::bench::WorkloadSpec spec;
    spec.shape = {.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
    spec.requests = std::move(requests);
    spec.host_values = false;
    spec.seed = 7;
    const msa::bench::Workload w = msa::bench::make_workload(spec);
    std::int64_t max_k = 0;
    for (const auto& r : spec.requests) max_k = std::max<std::int64_t>(max_k, r.k_len);
    return msa::bench::union_tile_share(w, max_k, path);
  };
  EXPECT_EQ(share({{16, 16384}}, PrefillPath::kAuto), 1.0);                                         // a decode step
  EXPECT_EQ(share({{16, 65600}, {16, 65600}, {16, 65600}, {16, 65600}}, PrefillPath::kAuto), 1.0);  // split
  EXPECT_EQ(share({{2048, 133120}}, PrefillPath::kBlockMajor), 0.0);
  EXPECT_EQ(share({{2048, 133120}}, PrefillPath::kTileUnion), 1.0);
  const double routed = share({{2048, 133120}}, PrefillPath::kAuto);  // random: few tiles or none
  EXPECT_GE(routed, 0.0);
  EXPECT_LT(routed, 0.5);
  EXPECT_EQ(share({{0, 4096}}, PrefillPath::kAuto), 0.0);  // no query
}

// cuda::union_tile_flags, the oracles' view of a route: every planner tile where the union
// kernel takes the call, route_call_host's flags where the call is routed, none otherwise.
TEST(PrefillRoute, UnionTileFlagsFollowTheRoute) {
  using msa::bench::Selection;
  const msa::AttentionShape shape{.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
  const auto workload = [](const msa::AttentionShape& s, std::vector<msa::bench::Request> requests, Selection selection,
                           std::uint64_t seed) {
    msa::bench::WorkloadSpec spec;
    spec.shape = s;
    spec.requests = std::move(requests);
    spec.selection = selection;
    spec.host_values = false;
    spec.seed = seed;
    return msa::bench::make_workload(spec);
  };
  const auto batch = [](const msa::bench::Workload& w) { return static_cast<std::int64_t>(w.spec.requests.size()); };
  // The function under test, and the twin it must follow where the call is routed.
  const auto flags = [&](const msa::bench::Workload& w, const msa::cuda::PrefillRouteChoice& c) {
    return msa::cuda::union_tile_flags(c, w.spec.shape, w.topk.data<std::int32_t>(),
                                       w.cu_seqlens_q.data<std::int32_t>(), w.k_len.data<std::int32_t>(), batch(w),
                                       w.total_q);
  };
  const auto twin = [&](const msa::bench::Workload& w) {
    const msa::AttentionShape& s = w.spec.shape;
    return msa::route_call_host(w.topk.data<std::int32_t>(), w.cu_seqlens_q.data<std::int32_t>(),
                                w.k_len.data<std::int32_t>(), static_cast<int>(batch(w)), s.h_kv, s.group(), w.total_q,
                                s.topk, msa::cuda::tile_union_queries_per_tile(s.group(), s.topk));
  };
  const int q_per_tile = msa::cuda::tile_union_queries_per_tile(shape.group(), shape.topk);
  const std::size_t tiles_2048 = static_cast<std::size_t>(shape.h_kv * msa::tiles_per_head(2048, q_per_tile));

  // Tile-shared 2048 new tokens on 128k: routed, and the call rule keeps the per-tile rule's
  // candidates (docs/performance.md step 76: every tile on the union kernel).
  const msa::bench::Workload shared = workload(shape, {{2048, 133120}}, Selection::kTileShared, 11);
  const auto routed = device_route(shape, PrefillPath::kAuto, 1, 2048, 133120);
  ASSERT_EQ(routed.route, PrefillRoute::kRouted);
  const std::vector<std::uint8_t> f = flags(shared, routed);
  EXPECT_EQ(f, twin(shared));
  ASSERT_EQ(f.size(), tiles_2048);
  EXPECT_GT(std::count(f.begin(), f.end(), 1), 0);

  // A call whose tiles go both ways (PrefillCuda's page128_g16_random_mixed: 1056 queries on
  // 16 blocks beside 768 on 16k, at h_kv 1).
  const msa::AttentionShape one{.h_q = 16, .h_kv = 1, .d = 128, .topk = 16};
  const msa::bench::Workload mixed = workload(one, {{768, 16384}, {1056, 2048}}, Selection::kRandom, 13);
  const auto mixed_route = device_route(one, PrefillPath::kAuto, 2, 1824, 16384);
  ASSERT_EQ(mixed_route.route, PrefillRoute::kRouted);
  const std::vector<std::uint8_t> m = flags(mixed, mixed_route);
  EXPECT_EQ(m, twin(mixed));
  EXPECT_GT(std::count(m.begin(), m.end(), 1), 0);
  EXPECT_GT(std::count(m.begin(), m.end(), 0), 0);

  // The same call on each fixed path: every tile, or none.
  const auto all = flags(shared, device_route(shape, PrefillPath::kTileUnion, 1, 2048, 133120));
  EXPECT_EQ(all, std::vector<std::uint8_t>(tiles_2048, 1));
  EXPECT_TRUE(flags(shared, device_route(shape, PrefillPath::kBlockMajor, 1, 2048, 133120)).empty());

  // 16 new tokens on 16k run as a decode step: every planner tile of its 16 queries.
  const msa::bench::Workload step = workload(shape, {{16, 16384}}, Selection::kRandom, 11);
  const auto decode = device_route(shape, PrefillPath::kAuto, 1, 16, 16384);
  ASSERT_EQ(decode.route, PrefillRoute::kDecode);
  EXPECT_EQ(flags(step, decode),
            std::vector<std::uint8_t>(static_cast<std::size_t>(shape.h_kv * msa::tiles_per_head(16, q_per_tile)), 1));
}

}  // namespace
