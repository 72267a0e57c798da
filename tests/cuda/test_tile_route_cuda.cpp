// The planner's PrefillPath::kAuto tile routing on the device against its CPU twin
// (core/tile_route): flags and the compacted list (in rank order) on random, tile-shared and
// clustered selections, chunked batches whose tiles span requests (and empty requests), 300
// small requests, rows with invalid and repeated ids, G = 1..16; run inside the k2q planner on
// both its paths, as plan() runs it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/workload.h"
#include "core/tile_route.h"
#include "cuda/common/workspace.h"
#include "cuda/plan/k2q_device.h"
#include "cuda/plan/tile_route.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"
#include "msa/msa.h"
#include "tests/support/cuda_check.h"
#include "tests/support/device_tensor.h"

namespace {

using msa::bench::Request;
using msa::bench::Selection;
using msa::test::DeviceBuffer;

enum class Expect { kAny, kAllUnion, kMixed };

struct RouteCase {
  std::string name;
  int h_q, h_kv, topk;
  std::vector<Request> requests;
  Selection selection;
  bool adversarial;
  Expect expect;
};
// Test names in CTest and gtest output: the case name, not the struct bytes.
void PrintTo(const RouteCase& c, std::ostream* os) { *os << c.name; }

std::vector<RouteCase> route_cases() {
  const std::vector<Request> chunked = {{700, 2000}, {1, 1500}, {0, 300}, {384, 384}, {129, 1300}};
  std::vector<Request> many;
  for (int i = 0; i < 300; ++i) many.push_back({1 + (i * 7) % 13, 1 + (i * 7) % 13 + (i * 37) % 500});
  return {
      // Random 32k: early tiles (few visible blocks) route to the union kernel, later ones not.
      {"g16_random", 64, 4, 16, {{32768, 32768}}, Selection::kRandom, false, Expect::kMixed},
      {"g16_tileshared", 64, 4, 16, {{4096, 4096}}, Selection::kTileShared, false, Expect::kAllUnion},
      {"g8_clustered_chunked", 16, 2, 16, chunked, Selection::kClustered, false, Expect::kAny},
      {"g1_topk32_chunked", 4, 4, 32, chunked, Selection::kRandom, true, Expect::kAny},
      {"g3_batch300", 12, 4, 8, many, Selection::kRandom, true, Expect::kAny},
  };
}

class TileRouteCuda : public ::testing::TestWithParam<RouteCase> {};

// The case's workload, its ids made adversarial where the case asks (-1, repeats, negative and
// out-of-range ids).
msa::bench::Workload route_workload(const RouteCase& c) {
  msa::bench::WorkloadSpec spec;
  spec.shape = {.h_q = c.h_q, .h_kv = c.h_kv, .d = 128, .topk = c.topk};
  spec.requests = c.requests;
  spec.selection = c.selection;
  spec.host_values = false;
  msa::bench::Workload w = msa::bench::make_workload(spec);
  auto* ids = w.topk.data<std::int32_t>();
  if (c.adversarial) {
    std::mt19937 rng(7);
    for (std::int64_t i = 0; i < w.topk.numel(); ++i) {
      const unsigned r = rng() % 8;
      if (r == 0) ids[i] = -1;
      else if (r == 1) ids[i] = -5;
      else if (r == 2) ids[i] = 1 << 20;
      else if (r == 3 && i % c.topk != 0) ids[i] = ids[i - 1];
    }
  }
  return w;
}

// The flagged tiles and the others, each in rank order (tile_of_rank).
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> rank_lists(const std::vector<std::uint8_t>& flags,
                                                                           int h_kv) {
  const auto tiles = static_cast<std::int64_t>(flags.size());
  std::vector<std::int32_t> listed, rest;
  for (std::int64_t r = 0; r < tiles; ++r) {
    const std::int64_t t = msa::tile_of_rank(r, tiles / h_kv, h_kv);
    (flags[static_cast<std::size_t>(t)] != 0 ? listed : rest).push_back(static_cast<std::int32_t>(t));
  }
  return {listed, rest};
}

// The CPU twin's flags for the case: the per-tile rule (route_tiles_host), or its candidates
// decided for the call (route_call_pays on their sums) whatever the call's size:
// launch_route_call decides wherever it is asked, and plan() asks it only within
// route_call_applies, which route_call_host applies too.
std::vector<std::uint8_t> host_flags(const RouteCase& c, const msa::bench::Workload& w, int q_per_tile, bool call) {
  msa::TileRouteCounts r = msa::route_tiles_host_counts(
      w.topk.data<std::int32_t>(), w.cu_seqlens_q.data<std::int32_t>(), w.k_len.data<std::int32_t>(),
      static_cast<int>(c.requests.size()), c.h_kv, c.h_q / c.h_kv, w.total_q, c.topk, q_per_tile);
  if (call && !msa::route_call_pays(r.tiles, r.unions, r.edges, c.h_q / c.h_kv))
    std::fill(r.flags.begin(), r.flags.end(), 0);
  return r.flags;
}

// The routing's parameters: the case's geometry on device copies of the workload's top-k, batch
// and lengths, and the outputs.
msa::cuda::TileRouteParams route_params(const RouteCase& c, const msa::bench::Workload& w, int q_per_tile,
                                        const DeviceBuffer& d_ids, const DeviceBuffer& d_cu, const DeviceBuffer& d_klen,
                                        const DeviceBuffer& d_flags, const DeviceBuffer& d_list,
                                        const DeviceBuffer& d_count, const DeviceBuffer& d_rest,
                                        const DeviceBuffer& d_rest_count) {
  msa::cuda::TileRouteParams p{};
  p.ids = d_ids.as<const std::int32_t>();
  p.stride_topk_head = w.total_q * c.topk;
  p.stride_topk_token = c.topk;
  p.cu_seqlens_q = d_cu.as<const std::int32_t>();
  p.k_len = d_klen.as<const std::int32_t>();
  p.batch = static_cast<int>(c.requests.size());
  p.h_kv = c.h_kv;
  p.total_q = w.total_q;
  p.topk = c.topk;
  p.q_per_tile = q_per_tile;
  p.group = c.h_q / c.h_kv;
  p.union_tile = d_flags.as<std::uint8_t>();
  p.union_list = d_list.as<std::int32_t>();
  p.union_count = d_count.as<std::int32_t>();
  p.combine_list = d_rest.as<std::int32_t>();
  p.combine_count = d_rest_count.as<std::int32_t>();
  return p;
}

TEST_P(TileRouteCuda, MatchesHostTwin) {
  MSA_SKIP_WITHOUT_GPU();
  const RouteCase& c = GetParam();
  msa::bench::Workload w = route_workload(c);
  const auto* ids = w.topk.data<std::int32_t>();
  const int q_per_tile = msa::cuda::tile_union_queries_per_tile(c.h_q / c.h_kv, c.topk);
  const std::vector<std::uint8_t> want = host_flags(c, w, q_per_tile, /*call=*/false);
  const std::int64_t tiles = msa::cuda::tile_route_tiles(c.h_kv, w.total_q, q_per_tile);
  ASSERT_EQ(static_cast<std::int64_t>(want.size()), tiles);
  const auto [want_list, want_rest] = rank_lists(want, c.h_kv);
  if (c.expect == Expect::kAllUnion) {
    EXPECT_EQ(want_list.size(), want.size()) << c.name;
  }
  if (c.expect == Expect::kMixed) {
    EXPECT_GT(want_list.size(), 0u) << c.name;
    EXPECT_LT(want_list.size(), want.size()) << c.name;
  }

  // The routing as plan() runs it: inside the k2q planner (K2qDeviceInputs::route), on the
  // general path and, where the problem fits them, on the small, grid and fused paths.
  const auto* k_len = w.k_len.data<std::int32_t>();
  const auto batch = static_cast<std::int64_t>(c.requests.size());
  const std::int64_t max_k_len = *std::max_element(k_len, k_len + batch);
  auto sizes = msa::cuda::k2q_device_sizes(c.h_kv, c.topk, 16, msa::ProblemSize{batch, w.total_q, max_k_len});
  const DeviceBuffer d_ids(ids, w.topk.bytes()), d_cu(w.cu_seqlens_q.raw(), w.cu_seqlens_q.bytes()),
      d_klen(w.k_len.raw(), w.k_len.bytes());
  using msa::cuda::K2qPath;
  const int grid_tasks = sizes.geo.grid_tasks_per_head;
  for (const K2qPath path : {K2qPath::kGeneral, K2qPath::kSmall, K2qPath::kGrid, K2qPath::kFused}) {
    if (path == K2qPath::kSmall && !msa::cuda::k2q_small_fits(sizes.geo)) continue;
    if (path == K2qPath::kGrid && grid_tasks == 0) continue;
    if (path == K2qPath::kFused && sizes.geo.fused_tasks_per_head == 0) continue;
    SCOPED_TRACE(path == K2qPath::kGrid    ? "grid path"
                 : path == K2qPath::kSmall ? "small path"
                 : path == K2qPath::kFused ? "fused path"
                                           : "general path");
    sizes.geo.path = path;
    const DeviceBuffer workspace(sizes.total), d_flags(static_cast<std::size_t>(tiles)),
        d_list(static_cast<std::size_t>(tiles) * 4), d_count(4), d_rest(static_cast<std::size_t>(tiles) * 4),
        d_rest_count(4);
    ASSERT_TRUE(workspace && d_flags && d_list && d_count && d_rest && d_rest_count);
    msa::cuda::Arena arena(workspace.get());
    const msa::cuda::K2qDeviceBuffers buffers = msa::cuda::k2q_device_layout(sizes.geo, arena);
    CUDA_OK(cudaMemset(d_flags.get(), 0x5a, static_cast<std::size_t>(tiles)));  // every flag must be written
    CUDA_OK(cudaMemset(d_count.get(), 0xff, 4));
    CUDA_OK(cudaMemset(d_rest_count.get(), 0xff, 4));
    CUDA_OK(cudaMemset(d_rest.get(), 0x5a, static_cast<std::size_t>(tiles) * 4));
    const msa::cuda::TileRouteParams p =
        route_params(c, w, q_per_tile, d_ids, d_cu, d_klen, d_flags, d_list, d_count, d_rest, d_rest_count);
    msa::cuda::K2qDeviceInputs in{};
    in.cu_seqlens_q = p.cu_seqlens_q;
    in.k_len = p.k_len;
    in.topk = p.ids;
    in.stride_topk_head = p.stride_topk_head;
    in.stride_topk_token = p.stride_topk_token;
    in.route = &p;
    msa::cuda::build_k2q_device(sizes.geo, in, buffers, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<std::uint8_t> got(static_cast<std::size_t>(tiles));
    std::int32_t count = -1;
    CUDA_OK(cudaMemcpy(got.data(), d_flags.get(), got.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&count, d_count.get(), 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, want) << c.name;
    ASSERT_EQ(count, static_cast<std::int32_t>(want_list.size())) << c.name;
    std::vector<std::int32_t> list(want_list.size());
    CUDA_OK(cudaMemcpy(list.data(), d_list.get(), list.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(list, want_list) << c.name;
    std::int32_t rest_count = -1;
    CUDA_OK(cudaMemcpy(&rest_count, d_rest_count.get(), 4, cudaMemcpyDeviceToHost));
    ASSERT_EQ(rest_count, static_cast<std::int32_t>(want_rest.size())) << c.name << " combine_count";
    std::vector<std::int32_t> rest(want_rest.size());
    CUDA_OK(cudaMemcpy(rest.data(), d_rest.get(), rest.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(rest, want_rest) << c.name << " combine_list";
  }
}

// The routing decided for the call as a launch of its own (launch_route_call, which the
// planner's small, general and bitmap paths run first) against the CPU twin: flags, both
// lists, and the counters' sums.
TEST_P(TileRouteCuda, CallMatchesHostTwin) {
  MSA_SKIP_WITHOUT_GPU();
  const RouteCase& c = GetParam();
  msa::bench::Workload w = route_workload(c);
  const auto* ids = w.topk.data<std::int32_t>();
  const int q_per_tile = msa::cuda::tile_union_queries_per_tile(c.h_q / c.h_kv, c.topk);
  const std::vector<std::uint8_t> want = host_flags(c, w, q_per_tile, /*call=*/true);
  const std::vector<std::uint8_t> candidates = host_flags(c, w, q_per_tile, /*call=*/false);
  const std::int64_t tiles = msa::cuda::tile_route_tiles(c.h_kv, w.total_q, q_per_tile);
  const auto [want_list, want_rest] = rank_lists(want, c.h_kv);
  const DeviceBuffer d_ids(ids, w.topk.bytes()), d_cu(w.cu_seqlens_q.raw(), w.cu_seqlens_q.bytes()),
      d_klen(w.k_len.raw(), w.k_len.bytes()), d_flags(static_cast<std::size_t>(tiles)),
      d_list(static_cast<std::size_t>(tiles) * 4), d_count(4), d_rest(static_cast<std::size_t>(tiles) * 4),
      d_rest_count(4), d_counters(sizeof(msa::cuda::RouteCallCounters));
  ASSERT_TRUE(d_flags && d_list && d_count && d_rest && d_rest_count && d_counters);
  CUDA_OK(cudaMemset(d_flags.get(), 0x5a, static_cast<std::size_t>(tiles)));  // every flag must be written
  CUDA_OK(cudaMemset(d_count.get(), 0xff, 4));
  CUDA_OK(cudaMemset(d_rest_count.get(), 0xff, 4));
  CUDA_OK(cudaMemset(d_counters.get(), 0, sizeof(msa::cuda::RouteCallCounters)));
  const msa::cuda::TileRouteParams p =
      route_params(c, w, q_per_tile, d_ids, d_cu, d_klen, d_flags, d_list, d_count, d_rest, d_rest_count);
  msa::cuda::launch_route_call(p, d_counters.as<msa::cuda::RouteCallCounters>(), nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<std::uint8_t> got(static_cast<std::size_t>(tiles));
  CUDA_OK(cudaMemcpy(got.data(), d_flags.get(), got.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, want) << c.name;
  msa::cuda::RouteCallCounters counters{};
  CUDA_OK(cudaMemcpy(&counters, d_counters.get(), sizeof(counters), cudaMemcpyDeviceToHost));
  EXPECT_EQ(counters.tiles, static_cast<unsigned long long>(std::count(candidates.begin(), candidates.end(), 1)));
  EXPECT_EQ(counters.done, static_cast<unsigned>(msa::cuda::tile_route_ctas(p)));
  std::int32_t count = -1, rest_count = -1;
  CUDA_OK(cudaMemcpy(&count, d_count.get(), 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&rest_count, d_rest_count.get(), 4, cudaMemcpyDeviceToHost));
  ASSERT_EQ(count, static_cast<std::int32_t>(want_list.size())) << c.name;
  ASSERT_EQ(rest_count, static_cast<std::int32_t>(want_rest.size())) << c.name;
  std::vector<std::int32_t> list(want_list.size()), rest(want_rest.size());
  CUDA_OK(cudaMemcpy(list.data(), d_list.get(), list.size() * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(rest.data(), d_rest.get(), rest.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(list, want_list) << c.name;
  EXPECT_EQ(rest, want_rest) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Cases, TileRouteCuda, ::testing::ValuesIn(route_cases()),
                         [](const auto& p) { return p.param.name; });

}  // namespace
