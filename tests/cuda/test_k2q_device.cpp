// The device k2q planner against the host builder (the oracle): row_coords, row_ptr,
// q_indices, qsplit and split_counts byte-identical, work items equal as a set, on seeded
// workloads (random / tile-shared / clustered, adversarial rows, hot rows, G = 1 and 16,
// hundreds of requests, q_len = 0 requests, total_q = 0), through the direct entry points
// (also with an arbitrary tile routing), a CUDA graph replay and the SparsePrefill CUDA backend
// (whose default PrefillPath::kAuto routes tiles by the rule of core/tile_route.h); and the
// workspace layout, sized and carved by one function (no device needed).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/workload.h"
#include "core/k2q_host.h"
#include "core/tile_route.h"
#include "cuda/api/prefill_route.h"
#include "cuda/plan/k2q_device.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"
#include "msa/msa.h"
#include "tests/support/cuda_check.h"
#include "tests/support/cuda_graph.h"
#include "tests/support/device_tensor.h"

namespace {

using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Selection;
using msa::test::DeviceBuffer;

enum class Mutation { kNone, kAdversarial, kHot };

struct PlanCase {
  std::string name;
  int h_kv = 4;
  int topk = 16;
  int q_per_item = 64;
  std::vector<Request> requests;
  Selection selection = Selection::kRandom;
  Mutation mutation = Mutation::kNone;
  std::int64_t extra_k_len = 0;  // max_k_len bound = real max + this (a loose bound)
  std::uint64_t seed = 1;
  // The planner's path (K2qDeviceGeometry::path): general, small (k2q_small_kernels.cuh), grid
  // (k2q_grid_kernels.cuh) or fused (k2q_fused_kernels.cuh); cases_on() keeps the cases that
  // fit one.
  msa::cuda::K2qPath path = msa::cuda::K2qPath::kGeneral;
};
// Test names in CTest and gtest output: the case name, not the struct bytes.
void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.name; }

// The host inputs of one case.
struct PlanInputs {
  HostTensor cu_seqlens_q;  // [B + 1]
  HostTensor k_len;         // [B]
  HostTensor topk;          // [h_kv, total_q, topk]
  std::int64_t total_q = 0;
  std::int64_t max_k_len = 0;

  msa::VarlenBatch batch() const { return {cu_seqlens_q.view(), k_len.view()}; }
};

// Rows broken on purpose: -1 holes, other negatives, duplicates, ids at and past the
// request's block count, INT_MIN / INT_MAX, in-range ids beyond the local block, all -1 rows.
void make_adversarial(PlanInputs& in, const std::vector<Request>& requests, std::mt19937_64& rng) {
  const auto h_kv = in.topk.shape()[0];
  const auto k = in.topk.shape()[2];
  auto* ids = in.topk.data<std::int32_t>();
  std::vector<std::int32_t> blocks_of;  // per packed query
  for (const auto& r : requests)
    for (std::int32_t i = 0; i < r.q_len; ++i) blocks_of.push_back((r.k_len + msa::kBlockSize - 1) / msa::kBlockSize);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (std::int64_t h = 0; h < h_kv; ++h) {
    for (std::int64_t q = 0; q < in.total_q; ++q) {
      std::int32_t* row = ids + (h * in.total_q + q) * k;
      const std::int32_t blocks = blocks_of[static_cast<std::size_t>(q)];
      const double roll = unit(rng);
      if (roll < 0.08) {
        std::fill(row, row + k, -1);
        continue;
      }
      if (roll > 0.6) continue;
      for (std::int64_t s = 0; s < k; ++s) {
        if (unit(rng) > 0.35) continue;
        switch (std::uniform_int_distribution<int>(0, 8)(rng)) {
          case 0: row[s] = -1; break;
          case 1: row[s] = -5; break;
          case 2: row[s] = INT_MIN; break;
          case 3: row[s] = INT_MAX; break;
          case 4: row[s] = blocks; break;
          case 5: row[s] = blocks + std::uniform_int_distribution<std::int32_t>(1, 1000)(rng); break;
          case 6: row[s] = row[std::uniform_int_distribution<std::int64_t>(0, k - 1)(rng)]; break;
          default: row[s] = std::uniform_int_distribution<std::int32_t>(0, std::max(blocks - 1, 0))(rng); break;
        }
      }
    }
  }
}

PlanInputs make_inputs(const PlanCase& c) {
  PlanInputs in;
  const auto b_count = static_cast<std::int64_t>(c.requests.size());
  in.cu_seqlens_q = HostTensor(msa::DType::kInt32, {b_count + 1});
  in.k_len = HostTensor(msa::DType::kInt32, {b_count});
  for (std::int64_t b = 0; b < b_count; ++b) {
    in.cu_seqlens_q.data<std::int32_t>()[b + 1] = in.cu_seqlens_q.data<std::int32_t>()[b] + c.requests[b].q_len;
    in.k_len.data<std::int32_t>()[b] = c.requests[b].k_len;
    in.max_k_len = std::max<std::int64_t>(in.max_k_len, c.requests[b].k_len);
  }
  in.total_q = in.cu_seqlens_q.data<std::int32_t>()[b_count];
  msa::bench::fill_topk(in.topk, c.requests, c.h_kv, c.topk, c.selection, 0.25, c.seed);
  std::mt19937_64 rng(c.seed * 7919 + 3);
  if (c.mutation == Mutation::kAdversarial) make_adversarial(in, c.requests, rng);
  if (c.mutation == Mutation::kHot) {
    // Every query of every head also selects block 0 (a duplicate where it already did).
    auto* ids = in.topk.data<std::int32_t>();
    for (std::int64_t r = 0; r < c.h_kv * in.total_q; ++r) ids[r * c.topk + c.topk - 1] = 0;
  }
  return in;
}

msa::AttentionShape shape_of(const PlanCase& c) {
  msa::AttentionShape s;
  s.h_kv = c.h_kv;
  s.h_q = c.h_kv * 16 <= 64 ? c.h_kv * 16 : c.h_kv;  // G = 16 where it fits, else G = 1
  s.topk = c.topk;
  return s;
}

msa::K2qCsr host_plan(const PlanCase& c, const PlanInputs& in, const msa::TileRoute& route = {}) {
  msa::Options o;
  o.q_per_item = c.q_per_item;
  return msa::build_k2q_csr_routed(shape_of(c), in.batch(), in.topk.view(), o, route);
}

// An arbitrary routing (about half the tiles, seeded): what the planners do with any flags.
std::vector<std::uint8_t> random_route(const PlanCase& c, const PlanInputs& in, int q_per_tile) {
  std::vector<std::uint8_t> flags(static_cast<std::size_t>(msa::tiles_per_head(in.total_q, q_per_tile) * c.h_kv));
  std::mt19937_64 rng(c.seed * 131 + 5);
  for (auto& f : flags) f = static_cast<std::uint8_t>(rng() % 2);
  return flags;
}

// The routing SparsePrefill's plan() makes under PrefillPath::kAuto (the rule's CPU twin).
// The routing SparsePrefill's plan() takes (route_call_host: the per-tile rule, decided for the
// call where it has at most kRouteCallMaxTiles tiles).
std::vector<std::uint8_t> rule_route(const PlanCase& c, const PlanInputs& in) {
  return msa::route_call_host(in.topk.data<std::int32_t>(), in.cu_seqlens_q.data<std::int32_t>(),
                              in.k_len.data<std::int32_t>(), static_cast<int>(c.requests.size()), c.h_kv,
                              shape_of(c).group(), in.total_q, c.topk,
                              msa::cuda::tile_union_queries_per_tile(shape_of(c).group(), c.topk));
}

std::tuple<int, int, int, int, int, int> key(const msa::WorkItem& w) {
  return {w.kv_head, w.row, w.q_begin, w.q_count, w.b, w.block};
}

// First index where two int arrays differ, for a readable failure.
template <class T>
void expect_same(const std::vector<T>& host, const std::vector<T>& dev, const std::string& what) {
  ASSERT_EQ(host.size(), dev.size()) << what << ": sizes differ";
  const auto mis = std::mismatch(host.begin(), host.end(), dev.begin());
  if (mis.first != host.end())
    ADD_FAILURE() << what << "[" << (mis.first - host.begin()) << "]: host " << *mis.first
                  << ", device " << *mis.second;
}

void expect_same_plan(const msa::K2qCsr& host, const msa::K2qCsr& dev) {
  EXPECT_EQ(host.h_kv, dev.h_kv);
  EXPECT_EQ(host.topk, dev.topk);
  EXPECT_EQ(host.q_per_item, dev.q_per_item);
  EXPECT_EQ(host.batch, dev.batch);
  EXPECT_EQ(host.total_q, dev.total_q);
  ASSERT_EQ(host.total_rows, dev.total_rows);
  expect_same(host.row_coords, dev.row_coords, "row_coords");
  expect_same(host.row_ptr, dev.row_ptr, "row_ptr");
  expect_same(host.q_indices, dev.q_indices, "q_indices");
  expect_same(host.qsplit, dev.qsplit, "qsplit");
  expect_same(host.split_counts, dev.split_counts, "split_counts");
  ASSERT_EQ(host.work.size(), dev.work.size()) << "work_count";
  auto a = host.work, b = dev.work;
  const auto less = [](const msa::WorkItem& x, const msa::WorkItem& y) { return key(x) < key(y); };
  std::sort(a.begin(), a.end(), less);
  std::sort(b.begin(), b.end(), less);
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) {
      ADD_FAILURE() << "work item " << i << " (sorted) differs: host (" << a[i].kv_head << ", " << a[i].row
                    << ", " << a[i].q_begin << ", " << a[i].q_count << ", " << a[i].b << ", " << a[i].block
                    << "), device (" << b[i].kv_head << ", " << b[i].row << ", " << b[i].q_begin << ", "
                    << b[i].q_count << ", " << b[i].b << ", " << b[i].block << ")";
      break;
    }
  EXPECT_LE(static_cast<std::int64_t>(dev.work.size()), dev.work_capacity);
}

msa::ProblemSize problem_of(const PlanCase& c, const PlanInputs& in) {
  return {static_cast<std::int64_t>(c.requests.size()), in.total_q, in.max_k_len + c.extra_k_len};
}

// Device copies of one case's inputs plus a workspace for its plan, carved into buffers.
struct DevicePlan {
  msa::cuda::K2qDeviceSizes sizes;
  msa::test::DeviceTensor cu, k_len, topk;
  DeviceBuffer workspace;
  msa::cuda::K2qDeviceBuffers buffers{};
  msa::cuda::K2qDeviceInputs inputs{};

  DevicePlan(const PlanCase& c, const PlanInputs& in)
      : sizes(msa::cuda::k2q_device_sizes(c.h_kv, c.topk, c.q_per_item, problem_of(c, in))),
        cu(in.cu_seqlens_q),
        k_len(in.k_len),
        topk(in.topk),
        workspace(sizes.total) {
    sizes.geo.path = c.path;  // a small, grid or fused path case fits (cases_on() checks)
    msa::cuda::Arena arena(workspace.get());
    buffers = msa::cuda::k2q_device_layout(sizes.geo, arena);
    inputs.cu_seqlens_q = static_cast<const std::int32_t*>(cu.ptr);
    inputs.k_len = static_cast<const std::int32_t*>(k_len.ptr);
    inputs.topk = static_cast<const std::int32_t*>(topk.ptr);
    inputs.stride_topk_head = in.total_q * c.topk;
    inputs.stride_topk_token = c.topk;
  }
  // Garbage everywhere, so that anything the planner forgets to write shows.
  // (cudaMemset is asynchronous on the legacy stream: finish it before other streams run.)
  void poison() {
    CUDA_OK(cudaMemset(workspace.get(), 0xA5, sizes.total));
    CUDA_OK(cudaDeviceSynchronize());
  }
};

// Device outputs and scratch of the planner's own routing (K2qDeviceInputs::route), poisoned.
// call: the routing decided for the call (its slots and counters, poisoned too).
struct RouteBuffers {
  std::int64_t tiles;
  DeviceBuffer tile, list, count, rest, rest_count, slots, counters;
  msa::cuda::TileRouteParams params{};
  RouteBuffers(const PlanCase& c, const PlanInputs& in, const DevicePlan& dp, int q_per_tile, bool call = false)
      : tiles(msa::cuda::tile_route_tiles(c.h_kv, in.total_q, q_per_tile)),
        tile(static_cast<std::size_t>(tiles)),
        list(static_cast<std::size_t>(tiles) * 4),
        count(4),
        rest(static_cast<std::size_t>(tiles) * 4),
        rest_count(4),
        slots(sizeof(msa::cuda::RouteCallSlot) * msa::cuda::kRouteCallSlots),
        counters(sizeof(msa::cuda::RouteCallCounters)) {
    EXPECT_EQ(cudaMemset(slots.get(), 0xA5, sizeof(msa::cuda::RouteCallSlot) * msa::cuda::kRouteCallSlots),
              cudaSuccess);
    EXPECT_EQ(cudaMemset(counters.get(), 0xA5, sizeof(msa::cuda::RouteCallCounters)), cudaSuccess);
    if (call) {
      params.call_slots = static_cast<msa::cuda::RouteCallSlot*>(slots.get());
      params.call_counters = static_cast<msa::cuda::RouteCallCounters*>(counters.get());
    }
    // Poisoned, so that an output the planner forgets shows.
    EXPECT_EQ(cudaMemset(count.get(), 0xA5, 4), cudaSuccess);
    EXPECT_EQ(cudaMemset(rest_count.get(), 0xA5, 4), cudaSuccess);
    EXPECT_EQ(cudaMemset(tile.get(), 0xA5, static_cast<std::size_t>(std::max<std::int64_t>(tiles, 1))), cudaSuccess);
    EXPECT_EQ(cudaMemset(list.get(), 0xA5, static_cast<std::size_t>(std::max<std::int64_t>(tiles, 1)) * 4),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    params.ids = dp.inputs.topk;
    params.stride_topk_head = dp.inputs.stride_topk_head;
    params.stride_topk_token = dp.inputs.stride_topk_token;
    params.cu_seqlens_q = dp.inputs.cu_seqlens_q;
    params.k_len = dp.inputs.k_len;
    params.batch = static_cast<int>(c.requests.size());
    params.h_kv = c.h_kv;
    params.total_q = in.total_q;
    params.topk = c.topk;
    params.q_per_tile = q_per_tile;
    params.group = shape_of(c).group();
    params.union_tile = static_cast<std::uint8_t*>(tile.get());
    params.union_list = static_cast<std::int32_t*>(list.get());
    params.union_count = static_cast<std::int32_t*>(count.get());
    params.combine_list = static_cast<std::int32_t*>(rest.get());
    params.combine_count = static_cast<std::int32_t*>(rest_count.get());
  }
};

// Past the meaningful part, every head's row_ptr holds its edge total (documented layout).
void expect_row_ptr_padding(const DevicePlan& dp, const msa::K2qCsr& plan) {
  const auto& g = dp.sizes.geo;
  std::vector<std::int32_t> full(static_cast<std::size_t>(g.h_kv * (g.max_rows + 1)));
  CUDA_OK(cudaMemcpy(full.data(), dp.buffers.row_ptr, full.size() * 4, cudaMemcpyDeviceToHost));
  for (int h = 0; h < g.h_kv; ++h) {
    const std::int32_t total = plan.row_ptr[static_cast<std::size_t>(h * (plan.total_rows + 1) + plan.total_rows)];
    for (std::int64_t r = plan.total_rows; r <= g.max_rows; ++r)
      ASSERT_EQ(full[static_cast<std::size_t>(h * (g.max_rows + 1) + r)], total) << "head " << h << " row " << r;
  }
}

std::vector<Request> many_requests(int count, std::uint64_t seed, int max_q, int max_prefix) {
  std::mt19937_64 rng(seed);
  std::vector<Request> out;
  for (int i = 0; i < count; ++i) {
    Request r;
    r.q_len = std::uniform_int_distribution<int>(0, 4)(rng) == 0 ? 0 : std::uniform_int_distribution<int>(1, max_q)(rng);
    r.k_len = r.q_len + std::uniform_int_distribution<int>(0, max_prefix)(rng);
    out.push_back(r);
  }
  return out;
}

std::vector<PlanCase> cases() {
  std::vector<PlanCase> v;
  auto add = [&v](PlanCase c) { v.push_back(std::move(c)); };
  add({"single_random", 4, 16, 64, {{4096, 4096}}, Selection::kRandom, Mutation::kNone, 0, 1});
  add({"chunked_tile_shared", 4, 16, 64, {{1000, 4000}}, Selection::kTileShared, Mutation::kNone, 0, 2});
  add({"clustered_mixed", 4, 16, 32, {{700, 900}, {1, 5000}, {300, 300}, {129, 20000}},
       Selection::kClustered, Mutation::kNone, 0, 3});
  add({"group1_k8", 8, 8, 64, {{513, 2000}, {64, 64}}, Selection::kRandom, Mutation::kNone, 0, 4});
  add({"k1", 2, 1, 16, {{300, 1000}, {77, 77}}, Selection::kRandom, Mutation::kNone, 0, 5});
  add({"k5_nonpow2", 3, 5, 7, {{400, 3333}}, Selection::kRandom, Mutation::kAdversarial, 0, 6});
  add({"k32", 4, 32, 64, {{2000, 9000}, {1, 1}}, Selection::kRandom, Mutation::kNone, 0, 7});
  add({"adversarial", 4, 16, 16, {{1500, 2600}, {0, 500}, {200, 200}}, Selection::kRandom,
       Mutation::kAdversarial, 0, 8});
  add({"hot_rows", 4, 16, 8, {{3000, 3000}, {500, 1300}}, Selection::kRandom, Mutation::kHot, 0, 9});
  add({"hundreds_of_requests", 2, 16, 64, many_requests(300, 10, 40, 3000), Selection::kRandom,
       Mutation::kNone, 0, 10});
  add({"hundreds_adversarial", 4, 16, 24, many_requests(257, 11, 30, 6000), Selection::kClustered,
       Mutation::kAdversarial, 0, 11});
  add({"total_q_zero", 4, 16, 64, {{0, 0}, {0, 700}, {0, 128}}, Selection::kRandom, Mutation::kNone, 0, 12});
  add({"all_k_len_zero", 4, 16, 64, {{0, 0}, {0, 0}}, Selection::kRandom, Mutation::kNone, 0, 13});
  add({"loose_bound", 4, 16, 64, {{600, 1000}, {20, 150}}, Selection::kRandom, Mutation::kAdversarial,
       5000, 14});
  add({"long_context", 4, 16, 64, {{2048, 200000}}, Selection::kRandom, Mutation::kNone, 0, 15});
  // max_blocks * 4 bytes > kK2qUnitSmemDefault: one warp per CTA and the opt-in shared-memory attribute.
  add({"huge_bound", 2, 16, 64, {{300, 1000}, {50, 130000}}, Selection::kRandom, Mutation::kAdversarial,
       1900000, 16});
  // Sized for the small path (cases_on()), run on both: small chunks on long prefixes, the
  // limits (1024 queries, 16384 slots, 6144 rows, 64 requests), routing material.
  add({"chunk171_on_55k", 4, 16, 64, {{171, 55000}}, Selection::kRandom, Mutation::kNone, 0, 17});
  add({"chunks4_mixed", 4, 16, 32, {{171, 16000}, {1, 16000}, {64, 9000}, {200, 16000}}, Selection::kClustered,
       Mutation::kNone, 0, 18});
  add({"small_adversarial", 4, 16, 16, {{300, 2600}, {0, 500}, {200, 200}}, Selection::kRandom,
       Mutation::kAdversarial, 0, 19});
  add({"small_hot", 4, 16, 8, {{400, 3000}, {100, 1300}}, Selection::kRandom, Mutation::kHot, 0, 20});
  add({"small_k32", 4, 32, 64, {{500, 9000}, {12, 12}}, Selection::kRandom, Mutation::kNone, 0, 21});
  add({"small_tile_shared", 4, 16, 64, {{512, 4000}, {300, 3000}}, Selection::kTileShared, Mutation::kNone, 0, 22});
  add({"small_1024_queries_4096_rows", 4, 16, 64, {{256, 131072}, {256, 131072}, {256, 131072}, {256, 131072}},
       Selection::kRandom, Mutation::kNone, 0, 23});
  add({"small_k3_512k", 2, 3, 5, {{1000, 520000}}, Selection::kClustered, Mutation::kAdversarial, 0, 24});
  add({"small_64_requests", 2, 16, 64, many_requests(64, 25, 12, 5000), Selection::kClustered,
       Mutation::kAdversarial, 0, 25});
  add({"small_loose_bound", 8, 8, 64, {{300, 1000}, {20, 150}}, Selection::kRandom, Mutation::kNone, 9000, 26});
  add({"small_6144_rows", 4, 16, 64, std::vector<Request>(6, Request{40, 131072}), Selection::kRandom,
       Mutation::kAdversarial, 0, 27});
  // Sized for the grid path (cases_on()): one task per head (96 heads), tasks past the last
  // level, the query limit, a one-block request.
  add({"grid_96_heads", 96, 16, 8, {{300, 2000}, {50, 900}}, Selection::kRandom, Mutation::kAdversarial, 0, 28});
  add({"grid_one_block", 4, 16, 8, {{40, 40}}, Selection::kRandom, Mutation::kNone, 0, 29});
  add({"grid_4096_queries", 4, 16, 8, {{4096, 70000}}, Selection::kClustered, Mutation::kHot, 0, 30});
  add({"grid_chunks_tile_shared",
       4,
       16,
       8,
       {{171, 66000}, {512, 20000}, {64, 129000}},
       Selection::kTileShared,
       Mutation::kNone,
       0,
       31});
  // Routing whose tiles' blocks outgrow the warp's bitmap (topk 2: tables of 32-128 ints), so
  // the routing counts the union in its key table, alone and beside bitmap tiles.
  add({"k2_long_prefixes", 2, 2, 16, {{200, 300000}, {30, 250000}}, Selection::kRandom, Mutation::kNone, 0, 32});
  // The bitmap path at its limit (2048 blocks: a bits CTA's 32 KB of words), hostile ids at and
  // past the last block, requests that start inside a unit window and share bits CTAs.
  add({"bitmap_2048_blocks",
       3,
       16,
       16,
       {{1500, 262144}, {70, 200001}, {33, 262144}},
       Selection::kRandom,
       Mutation::kAdversarial,
       0,
       33});
  // Items of hundreds of queries (q_per_item 512 and 1024; G = 1 at h_kv 8): items that span
  // whole rows and several units, the sizes an item of about 1024 rows takes at G = 1 and 2.
  add({"g1_items_of_1024", 8, 16, 1024, {{3000, 9000}, {500, 20000}}, Selection::kRandom, Mutation::kNone, 0, 34});
  add({"items_of_512", 4, 16, 512, {{2500, 6000}, {40, 700}}, Selection::kClustered, Mutation::kAdversarial, 0, 35});
  return v;
}

// Whether `path` can plan a problem of this geometry (the general path plans any).
bool path_fits(const msa::cuda::K2qDeviceGeometry& geo, msa::cuda::K2qPath path) {
  using msa::cuda::K2qPath;
  switch (path) {
    case K2qPath::kSmall:
      return msa::cuda::k2q_small_fits(geo);
    case K2qPath::kGrid:
      return geo.grid_tasks_per_head > 0;
    case K2qPath::kFused:
      return geo.fused_tasks_per_head > 0;
    case K2qPath::kBitmap:
      return geo.bitmap_units > 0;
    default:
      return true;
  }
}

// The cases `path` can plan, named *_<suffix>, planned by it.
std::vector<PlanCase> cases_on(msa::cuda::K2qPath path, const char* suffix) {
  std::vector<PlanCase> v;
  for (PlanCase c : cases()) {
    const PlanInputs in = make_inputs(c);
    if (!path_fits(msa::cuda::k2q_device_sizes(c.h_kv, c.topk, c.q_per_item, problem_of(c, in)).geo, path)) continue;
    c.name += std::string("_") + suffix;
    c.path = path;
    v.push_back(std::move(c));
  }
  return v;
}

// Sizing needs no device (this test runs without one), and carving spans exactly the sized bytes.
TEST(K2qDeviceLayout, SizingMatchesCarving) {
  for (const PlanCase& c : cases()) {
    const auto sizes = msa::cuda::k2q_device_sizes(c.h_kv, c.topk, c.q_per_item, problem_of(c, make_inputs(c)));
    void* base = reinterpret_cast<void*>(std::uintptr_t{1} << 20);  // never dereferenced
    msa::cuda::Arena arena(base);
    EXPECT_EQ(msa::cuda::k2q_device_layout(sizes.geo, arena).row_coords, base) << c.name;
    EXPECT_EQ(arena.bytes(), sizes.total) << c.name;
  }
}

// The histogram units (sizing only, no GPU): small batches get smaller units, so that the count
// and scatter kernels have many warps, down to 8 queries (or one warp pass of 32 / K' queries)
// and within the histograms' 16 MB budget; batches with enough warps keep the large units.
TEST(K2qDeviceLayout, UnitsShrinkForSmallBatchesWithinTheBudget) {
  using msa::ProblemSize;
  const auto geo = [](int h_kv, int topk, ProblemSize p) { return msa::cuda::k2q_device_sizes(h_kv, topk, 64, p).geo; };
  // 171 new tokens on a 64k prefix: 64-query units gave 4 warps per head; 8-query units 23.
  auto g = geo(4, 16, {1, 171, 65707});
  EXPECT_EQ(g.q_per_unit, 8);
  EXPECT_EQ(g.max_units, 23);
  // K = 1: a warp pass is 32 queries, the smallest unit.
  EXPECT_EQ(geo(4, 1, {1, 171, 65707}).q_per_unit, 32);
  // S = 32k: 513 units x 4 heads are enough warps; the unit stays at 64 queries.
  g = geo(4, 16, {1, 32768, 32768});
  EXPECT_EQ(g.q_per_unit, 64);
  EXPECT_EQ(g.max_units, 513);
  // A 1M-token prefix with 64 KV heads: halving stops where the histograms would pass 16 MB
  // (128 queries: 6 units x 7813 blocks x 64 heads x 4 B = 12 MB; 64 would take 22 MB).
  g = geo(64, 16, {1, 600, 1000000});
  EXPECT_EQ(g.q_per_unit, 128);
  EXPECT_LE(static_cast<double>(g.h_kv) * g.max_units * g.max_blocks * 4, 16.0 * (1 << 20));
  // Every case: units never below 8 queries, never above the large-unit size
  // max(64, pow2(ceil(blocks / K))).
  for (const PlanCase& c : cases()) {
    const auto cg = msa::cuda::k2q_device_sizes(c.h_kv, c.topk, c.q_per_item, problem_of(c, make_inputs(c))).geo;
    std::int64_t large = 1;
    while (large < (cg.max_blocks + c.topk - 1) / c.topk) large *= 2;
    EXPECT_GE(cg.q_per_unit, 8) << c.name;
    EXPECT_LE(cg.q_per_unit, std::max<std::int64_t>(64, large)) << c.name;
  }
}

// The path choice (sizing only, no GPU): the small path where it fits and was measured faster
// (at most 4096 top-k slots per head and 4200 (head, row) pairs), the general path otherwise.
// The automatic work-item size switches from 8 to 64 queries at 2^22 (query, head, slot) rows
// (G = 16: 4096 queries at K = 16); the workspace must still grow with the problem, so that
// one sized for the largest problem fits every smaller plan.
TEST(K2qDeviceLayout, WorkspaceGrowsAcrossTheItemSizeSwitch) {
  const msa::AttentionShape s{.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
  msa::Options o;
  o.backend = msa::Backend::kCuda;
  std::size_t previous = 0;
  for (const std::int64_t total_q : {4000, 4095, 4096, 4097, 8192}) {
    const std::size_t bytes = msa::SparsePrefill::workspace_bytes(s, {1, total_q, 65536}, o);
    EXPECT_GE(bytes, previous) << "total_q " << total_q;
    previous = bytes;
  }
  // An explicit size is kept: 64-query items need a shorter work list than the automatic 8.
  msa::Options fixed = o;
  fixed.q_per_item = 64;
  EXPECT_LT(msa::SparsePrefill::workspace_bytes(s, {1, 4095, 65536}, fixed),
            msa::SparsePrefill::workspace_bytes(s, {1, 4095, 65536}, o));
}

// The path choice (sizing only, no GPU), as measured on the H100 (docs/performance.md, steps 41
// and 42): the grid path where it fits (at most 64 requests, 4096 queries, 128 KV heads, 256 rows
// per task) for up to 256 queries, unless the small path is chosen and light (at most 1024 top-k
// slots and 12288 (head, row) pairs); then the fused path where it fits (at most 64 requests, 128
// KV heads, 4096 blocks a request) for problems that are not light, up to 8192 queries; the
// small path where it fits and was measured faster than the general one (at most 3072 slots and
// 4 x 6144 pairs); the bitmap path where it fits (requests of at most 2048 blocks), which also
// takes the fused path's problems of more than 4096 queries with at least 32 queries a block of
// the longest request; the general path otherwise.
TEST(K2qDeviceLayout, PathForTheProblem) {
  using msa::ProblemSize;
  using msa::cuda::K2qPath;
  const auto geo = [](int h_kv, int topk, ProblemSize p) { return msa::cuda::k2q_device_sizes(h_kv, topk, 64, p).geo; };
  const auto path = [&](int h_kv, int topk, ProblemSize p) { return geo(h_kv, topk, p).path; };
  EXPECT_EQ(path(4, 16, {1, 1, 16385}), K2qPath::kSmall);   // light: the small path
  EXPECT_EQ(path(4, 16, {1, 64, 65600}), K2qPath::kSmall);  // 1024 slots
  EXPECT_EQ(path(4, 16, {1, 65, 65601}), K2qPath::kGrid);   // 1040 slots
  EXPECT_EQ(path(4, 16, {1, 171, 65707}), K2qPath::kGrid);  // the small path's, not light
  EXPECT_EQ(path(4, 16, {1, 256, 65792}), K2qPath::kGrid);
  EXPECT_EQ(path(4, 16, {1, 257, 65793}), K2qPath::kFused);
  EXPECT_EQ(path(4, 16, {1, 512, 131584}), K2qPath::kFused);
  EXPECT_EQ(path(4, 16, {1, 513, 131585}), K2qPath::kFused);
  EXPECT_EQ(path(4, 16, {4, 64, 65600}), K2qPath::kSmall);  // 4 x 2052 (head, row) pairs
  EXPECT_EQ(path(4, 16, {4, 64, 131088}), K2qPath::kGrid);  // 4 x 4100 pairs; 33 levels x 4 requests per task
  EXPECT_EQ(path(4, 16, {4, 256, 65792}), K2qPath::kGrid);  // 4096 slots
  EXPECT_EQ(path(4, 16, {4, 684, 131243}), K2qPath::kFused);
  EXPECT_EQ(path(4, 16, {1, 2048, 133120}), K2qPath::kFused);
  EXPECT_EQ(path(4, 16, {1, 4096, 135168}), K2qPath::kFused);
  EXPECT_EQ(path(4, 16, {4, 8192, 67584}), K2qPath::kFused);
  EXPECT_EQ(path(4, 16, {4, 8193, 67584}), K2qPath::kBitmap);    // 528 blocks
  EXPECT_EQ(path(4, 16, {4, 8193, 131072}), K2qPath::kBitmap);   // 1024 blocks
  EXPECT_EQ(path(4, 16, {4, 8193, 131073}), K2qPath::kBitmap);   // 1025 blocks
  EXPECT_EQ(path(4, 16, {4, 8193, 262144}), K2qPath::kBitmap);   // 2048 blocks
  EXPECT_EQ(path(4, 16, {4, 8193, 262145}), K2qPath::kGeneral);  // 2049: the bitmap path does not fit
  EXPECT_EQ(path(4, 16, {1, 8192, 8192}), K2qPath::kBitmap);    // 128 queries a block
  EXPECT_EQ(path(4, 16, {1, 4096, 4096}), K2qPath::kFused);     // 4096 queries
  EXPECT_EQ(path(4, 16, {1, 4097, 4097}), K2qPath::kBitmap);
  EXPECT_EQ(path(4, 16, {1, 6144, 12288}), K2qPath::kBitmap);    // 64 queries a block
  EXPECT_EQ(path(4, 16, {1, 6144, 32768}), K2qPath::kFused);     // 24 queries a block
  EXPECT_EQ(path(4, 16, {1, 8192, 32768}), K2qPath::kBitmap);    // 32 queries a block
  EXPECT_EQ(path(4, 16, {1, 2048, 524288}), K2qPath::kFused);    // 4096 blocks
  EXPECT_EQ(path(4, 16, {1, 2048, 524289}), K2qPath::kGeneral);  // 4097 blocks
  EXPECT_EQ(path(4, 16, {16, 16, 16400}), K2qPath::kSmall);
  EXPECT_EQ(path(4, 16, {64, 256, 4000}), K2qPath::kGrid);    // 64 requests, one level per task
  EXPECT_EQ(path(4, 16, {64, 256, 40000}), K2qPath::kFused);  // 10 levels x 64 requests per task
  EXPECT_EQ(path(4, 16, {64, 320, 4000}), K2qPath::kFused);
  EXPECT_EQ(path(4, 16, {65, 650, 1000}), K2qPath::kBitmap);    // 65 requests
  EXPECT_EQ(path(4, 16, {65, 650, 131073}), K2qPath::kBitmap);  // 1025 blocks
  EXPECT_EQ(path(4, 16, {65, 650, 262145}), K2qPath::kGeneral);  // 2049 blocks
  EXPECT_EQ(path(4, 16, {64, 650, 1000}), K2qPath::kFused);
  EXPECT_EQ(path(4, 16, {16, 512, 131072}), K2qPath::kFused);
  EXPECT_EQ(path(128, 16, {1, 100, 4000}), K2qPath::kGrid);      // one task per head, 1600 slots
  EXPECT_EQ(path(129, 16, {1, 100, 4000}), K2qPath::kSmall);     // the grid path does not fit
  EXPECT_EQ(path(129, 16, {1, 193, 4000}), K2qPath::kBitmap);
  EXPECT_EQ(path(129, 16, {1, 2048, 4000}), K2qPath::kBitmap);  // the fused path does not fit
  EXPECT_EQ(path(128, 16, {1, 2048, 4000}), K2qPath::kFused);
  EXPECT_EQ(path(4, 16, {1, 32768, 32768}), K2qPath::kBitmap);
  EXPECT_EQ(path(32, 16, {1, 16384, 16384}), K2qPath::kBitmap);
  EXPECT_EQ(path(4, 16, {1, 131072, 131072}), K2qPath::kBitmap);
  EXPECT_EQ(path(4, 16, {1, 200000, 200000}), K2qPath::kBitmap);   // 1563 blocks
  EXPECT_EQ(path(4, 16, {1, 262145, 262145}), K2qPath::kGeneral);  // 2049 blocks
  EXPECT_EQ(geo(4, 16, {3, 1000, 4000}).bitmap_units, 32 + 3);  // ceil(1000 / 32) + batch
  EXPECT_EQ(geo(4, 16, {1, 2048, 133120}).fused_tasks_per_head, 32);
  EXPECT_EQ(geo(4, 16, {1, 2048, 133120}).fused_q_per_unit, 64);
  EXPECT_EQ(geo(128, 16, {1, 2048, 4000}).fused_tasks_per_head, 1);
  EXPECT_EQ(geo(4, 16, {1, 171, 65707}).grid_tasks_per_head, 32);
  EXPECT_EQ(geo(4, 16, {1, 40, 40}).grid_tasks_per_head, 1);  // one level: one task per head
  EXPECT_EQ(geo(64, 16, {1, 171, 32000}).grid_tasks_per_head, 2);
  EXPECT_EQ(geo(64, 16, {1, 171, 65707}).grid_tasks_per_head, 0);  // 257 levels per task
  EXPECT_GT(geo(4, 5, {1, 4096, 135168}).grid_tasks_per_head, 0);  // fits (tests may choose it)
  EXPECT_EQ(geo(4, 5, {1, 4097, 135168}).grid_tasks_per_head, 0);
  EXPECT_TRUE(msa::cuda::k2q_small_fits(geo(4, 16, {1, 512, 131584})));
  EXPECT_GT(geo(4, 16, {1, 171, 65707}).small_smem_bytes, 0u);  // tests may choose it
}

// Builds dp's plan on a stream of its own and compares it with the host's, byte for byte.
void expect_device_plan(const msa::K2qCsr& host, const DevicePlan& dp) {
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  msa::cuda::build_k2q_device(dp.sizes.geo, dp.inputs, dp.buffers, stream);
  expect_same_plan(host, msa::cuda::k2q_device_snapshot(dp.sizes.geo, dp.buffers, stream));
  CUDA_OK(cudaStreamDestroy(stream));
}

class K2qDevice : public ::testing::TestWithParam<PlanCase> {};

TEST_P(K2qDevice, MatchesHostBuilder) {
  MSA_SKIP_WITHOUT_GPU();
  const PlanCase& c = GetParam();
  const PlanInputs in = make_inputs(c);
  const msa::K2qCsr host = host_plan(c, in);
  DevicePlan dp(c, in);
  ASSERT_NE(dp.workspace.get(), nullptr);
  dp.poison();
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  msa::cuda::build_k2q_device(dp.sizes.geo, dp.inputs, dp.buffers, stream);
  const msa::K2qCsr dev = msa::cuda::k2q_device_snapshot(dp.sizes.geo, dp.buffers, stream);
  expect_same_plan(host, dev);
  expect_row_ptr_padding(dp, host);

  // Planning again over the previous plan's leftovers gives the same bytes.
  msa::cuda::build_k2q_device(dp.sizes.geo, dp.inputs, dp.buffers, stream);
  expect_same_plan(host, msa::cuda::k2q_device_snapshot(dp.sizes.geo, dp.buffers, stream));
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST_P(K2qDevice, GraphReplayMatchesHostBuilder) {
  MSA_SKIP_WITHOUT_GPU();
  const PlanCase& c = GetParam();
  const PlanInputs in = make_inputs(c);
  const msa::K2qCsr host = host_plan(c, in);
  DevicePlan dp(c, in);
  ASSERT_NE(dp.workspace.get(), nullptr);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (dp.sizes.geo.unit_smem_bytes > msa::cuda::kK2qUnitSmemDefault)  // sets the kernel attribute outside capture
    msa::cuda::build_k2q_device(dp.sizes.geo, dp.inputs, dp.buffers, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  {
    const msa::test::CapturedGraph graph(
        stream, [&](cudaStream_t s) { msa::cuda::build_k2q_device(dp.sizes.geo, dp.inputs, dp.buffers, s); });
    ASSERT_TRUE(graph.ok());
    for (int replay = 0; replay < 2; ++replay) {
      dp.poison();
      CUDA_OK(graph.launch(stream));
      expect_same_plan(host, msa::cuda::k2q_device_snapshot(dp.sizes.geo, dp.buffers, stream));
    }
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

// Routed rows (flags of an arbitrary routing, tiles of 1, 5 and 16 queries, spanning requests):
// no edge and split count 1 in both builders, byte for byte.
TEST_P(K2qDevice, RoutedMatchesHostBuilder) {
  MSA_SKIP_WITHOUT_GPU();
  const PlanCase& c = GetParam();
  const PlanInputs in = make_inputs(c);
  for (const int q_per_tile : {1, 5, 16}) {
    SCOPED_TRACE("q_per_tile " + std::to_string(q_per_tile));
    const std::vector<std::uint8_t> flags = random_route(c, in, q_per_tile);
    const msa::K2qCsr host = host_plan(c, in, msa::TileRoute{q_per_tile, flags.data()});
    if (in.total_q > 0) {  // the routing must matter
      EXPECT_LT(host.row_ptr[static_cast<std::size_t>(host.total_rows)],
                host_plan(c, in).row_ptr[static_cast<std::size_t>(host.total_rows)]);
    }
    DevicePlan dp(c, in);
    ASSERT_NE(dp.workspace.get(), nullptr);
    dp.poison();
    DeviceBuffer d_flags(flags.size());
    if (!flags.empty()) {
      CUDA_OK(cudaMemcpy(d_flags.get(), flags.data(), flags.size(), cudaMemcpyHostToDevice));
    }
    dp.inputs.union_tile = static_cast<const std::uint8_t*>(d_flags.get());
    dp.inputs.route_q_per_tile = q_per_tile;
    expect_device_plan(host, dp);
  }
}

// The planner's own routing (K2qDeviceInputs::route, as SparsePrefill's plan() asks under
// PrefillPath::kAuto): flags equal to the rule's CPU twin, the flagged tiles listed in rank order
// (msa::tile_of_rank), and the plan equal to the host builder's under that routing, for tiles of
// 32 (where topk <= 16), 16 and 8 queries; by the per-tile rule alone, and decided for the call
// (its candidates all cleared where route_call_pays says no: in the grid and fused paths' own
// launch, on the others' in launch_route_call before them).
TEST_P(K2qDevice, RoutesByTheRule) {
  MSA_SKIP_WITHOUT_GPU();
  const PlanCase& c = GetParam();
  const PlanInputs in = make_inputs(c);
  for (const int q_per_tile : {32, 16, 8})
    for (const bool call : {false, true}) {
      if (q_per_tile * c.topk > msa::cuda::kTileUnionMaxEntries) continue;
      SCOPED_TRACE("q_per_tile " + std::to_string(q_per_tile) + (call ? ", decided for the call" : ""));
      msa::TileRouteCounts counts = msa::route_tiles_host_counts(
          in.topk.data<std::int32_t>(), in.cu_seqlens_q.data<std::int32_t>(), in.k_len.data<std::int32_t>(),
          static_cast<int>(c.requests.size()), c.h_kv, shape_of(c).group(), in.total_q, c.topk, q_per_tile);
      if (call && !msa::route_call_pays(counts.tiles, counts.unions, counts.edges, shape_of(c).group()))
        std::fill(counts.flags.begin(), counts.flags.end(), 0);
      const std::vector<std::uint8_t>& flags = counts.flags;
      if (call)
        std::printf("%s q_per_tile %d: %llu candidates of %zu tiles, the call routes %lld\n", c.name.c_str(),
                    q_per_tile, static_cast<unsigned long long>(counts.tiles), flags.size(),
                    static_cast<long long>(std::count(flags.begin(), flags.end(), 1)));
      const msa::K2qCsr host = host_plan(c, in, msa::TileRoute{q_per_tile, flags.data()});
      DevicePlan dp(c, in);
      ASSERT_NE(dp.workspace.get(), nullptr);
      dp.poison();
      const std::int64_t tiles = msa::cuda::tile_route_tiles(c.h_kv, in.total_q, q_per_tile);
      ASSERT_EQ(static_cast<std::int64_t>(flags.size()), tiles);
      RouteBuffers route(c, in, dp, q_per_tile, call);
      const msa::cuda::TileRouteParams& rp = route.params;
      const DeviceBuffer &d_tile = route.tile, &d_list = route.list, &d_count = route.count;
      dp.inputs.route = &rp;
      expect_device_plan(host, dp);

      std::vector<std::uint8_t> got(flags.size());
      std::int32_t count = -1;
      if (tiles > 0) {
        CUDA_OK(cudaMemcpy(got.data(), d_tile.get(), got.size(), cudaMemcpyDeviceToHost));
      }
      CUDA_OK(cudaMemcpy(&count, d_count.get(), 4, cudaMemcpyDeviceToHost));
      expect_same(flags, got, "union_tile");
      std::vector<std::int32_t> want_list, want_rest;  // in rank order: flagged, the others
      for (std::int64_t r = 0; r < tiles; ++r) {
        const std::int64_t t = msa::tile_of_rank(r, tiles / c.h_kv, c.h_kv);
        (flags[static_cast<std::size_t>(t)] != 0 ? want_list : want_rest).push_back(static_cast<std::int32_t>(t));
      }
      ASSERT_EQ(count, static_cast<std::int32_t>(want_list.size())) << "union_count";
      std::vector<std::int32_t> list(want_list.size());
      if (!list.empty()) {
        CUDA_OK(cudaMemcpy(list.data(), d_list.get(), list.size() * 4, cudaMemcpyDeviceToHost));
      }
      expect_same(want_list, list, "union_list");
      std::int32_t rest_count = -1;
      CUDA_OK(cudaMemcpy(&rest_count, route.rest_count.get(), 4, cudaMemcpyDeviceToHost));
      ASSERT_EQ(rest_count, static_cast<std::int32_t>(want_rest.size())) << "combine_count";
      std::vector<std::int32_t> rest(want_rest.size());
      if (!rest.empty()) {
        CUDA_OK(cudaMemcpy(rest.data(), route.rest.get(), rest.size() * 4, cudaMemcpyDeviceToHost));
      }
      expect_same(want_rest, rest, "combine_list");
    }
}

const auto case_name = [](const ::testing::TestParamInfo<PlanCase>& param_info) { return param_info.param.name; };
INSTANTIATE_TEST_SUITE_P(Cases, K2qDevice, ::testing::ValuesIn(cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Small, K2qDevice, ::testing::ValuesIn(cases_on(msa::cuda::K2qPath::kSmall, "small")),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Grid, K2qDevice, ::testing::ValuesIn(cases_on(msa::cuda::K2qPath::kGrid, "grid")), case_name);
INSTANTIATE_TEST_SUITE_P(Fused, K2qDevice, ::testing::ValuesIn(cases_on(msa::cuda::K2qPath::kFused, "fused")),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Bitmap, K2qDevice, ::testing::ValuesIn(cases_on(msa::cuda::K2qPath::kBitmap, "bitmap")),
                         case_name);

// The backend path: SparsePrefill on CUDA plans from CPU tensors (staged to the device) and
// from device tensors with a host bound, and plan_snapshot() equals the host builder given the
// rule's routing (PrefillPath::kAuto, the default), none (kBlockMajor), or every tile routed
// where the batch alone sends every tile to the tile-union kernel (union_only_batch: plan()
// builds nothing; kTileUnion always).
TEST(K2qDeviceBackend, SparsePrefillPlanSnapshot) {
  MSA_SKIP_WITHOUT_GPU();
  std::int64_t union_tiles = 0, block_major_tiles = 0;  // the rule must route both ways here
  int union_only_plans = 0;
  // (chunk171_on_55k and k5_nonpow2 take the small path, the others the path k2q_device_sizes picks.)
  for (const PlanCase& c : {cases()[2], cases()[7], cases()[9], cases()[11], cases()[16], cases()[5]}) {
    SCOPED_TRACE(c.name);
    const PlanInputs in = make_inputs(c);
    const auto b_count = static_cast<std::int64_t>(c.requests.size());
    const std::vector<std::uint8_t> flags = rule_route(c, in);
    const int q_per_tile = msa::cuda::tile_union_queries_per_tile(shape_of(c).group(), c.topk);
    const msa::K2qCsr routed = host_plan(c, in, msa::TileRoute{q_per_tile, flags.data()});
    const msa::K2qCsr block_major = host_plan(c, in);
    const std::vector<std::uint8_t> every(flags.size(), 1);
    const msa::K2qCsr all_union = host_plan(c, in, msa::TileRoute{q_per_tile, every.data()});
    // The plan of a call that builds one: the rule's union tiles left out where plan() routes
    // (choose_prefill_route: kRouted), every row where it does not (fewer tiles than routing may
    // pay for: routing_may_pay).
    const auto planned = [&](const std::int32_t* cu, const std::int32_t* kl, std::int64_t max_k) -> const msa::K2qCsr& {
      const msa::cuda::PrefillRoute r =
          msa::cuda::choose_prefill_route(shape_of(c), msa::PrefillPath::kAuto, /*union_readable=*/true, cu, kl,
                                          b_count, in.total_q, max_k)
              .route;
      return r == msa::cuda::PrefillRoute::kRouted ? routed : block_major;
    };
    const msa::K2qCsr& host_planned =
        planned(in.cu_seqlens_q.data<std::int32_t>(), in.k_len.data<std::int32_t>(), in.max_k_len);
    if (&host_planned == &routed) {
      union_tiles += std::count(flags.begin(), flags.end(), 1);
      block_major_tiles += std::count(flags.begin(), flags.end(), 0);
    }
    const int g = shape_of(c).group();
    const bool host_union_only =
        msa::union_only_batch(in.cu_seqlens_q.data<std::int32_t>(), in.k_len.data<std::int32_t>(), b_count, in.total_q,
                              in.max_k_len, c.h_kv, g, c.topk, q_per_tile);
    const bool device_union_only =
        msa::union_only_batch(nullptr, nullptr, b_count, in.total_q, in.max_k_len + 333, c.h_kv, g, c.topk, q_per_tile);
    union_only_plans += host_union_only + device_union_only;
    const msa::K2qCsr& host = host_union_only ? all_union : host_planned;
    // The fixed paths: every tile on the union kernel (plan() builds nothing), or none.
    for (const auto& [path, want] :
         {std::pair{msa::PrefillPath::kTileUnion, all_union}, std::pair{msa::PrefillPath::kBlockMajor, block_major}}) {
      msa::Options fixed;
      fixed.backend = msa::Backend::kCuda;
      fixed.q_per_item = c.q_per_item;
      fixed.prefill_path = path;
      msa::SparsePrefill op(shape_of(c), fixed);
      op.plan(in.batch(), in.topk.view());
      expect_same_plan(want, op.plan_snapshot());
    }
    msa::Options o;
    o.backend = msa::Backend::kCuda;
    o.q_per_item = c.q_per_item;
    msa::SparsePrefill op(shape_of(c), o);

    op.plan(in.batch(), in.topk.view());  // CPU tensors
    expect_same_plan(host, op.plan_snapshot());

    DevicePlan dp(c, in);
    const msa::VarlenBatch batch{dp.cu.view, dp.k_len.view};
    const msa::TensorView topk = dp.topk.view;
    EXPECT_THROW(op.plan(batch, topk), msa::Error);  // device batch needs a bound
    op.plan(batch, topk, in.max_k_len + 333, nullptr);
    expect_same_plan(device_union_only ? all_union : planned(nullptr, nullptr, in.max_k_len + 333), op.plan_snapshot());

    // Caller-owned workspace of exactly workspace_bytes().
    const std::size_t bytes = msa::SparsePrefill::workspace_bytes(
        shape_of(c), {static_cast<std::int64_t>(c.requests.size()), in.total_q, in.max_k_len}, o);
    DeviceBuffer ws(bytes);
    op.set_workspace(ws.get(), bytes);
    op.plan(batch, topk, in.max_k_len, nullptr);
    const bool bounded_union_only =
        msa::union_only_batch(nullptr, nullptr, b_count, in.total_q, in.max_k_len, c.h_kv, g, c.topk, q_per_tile);
    expect_same_plan(bounded_union_only ? all_union : planned(nullptr, nullptr, in.max_k_len), op.plan_snapshot());
    EXPECT_THROW(op.plan(batch, topk, in.max_k_len + 100000, nullptr), msa::Error);  // too small
  }
  EXPECT_GT(union_tiles, 0);
  EXPECT_GT(block_major_tiles, 0);
  std::printf("plans that built nothing (every tile on the union kernel): %d\n", union_only_plans);
}

// Planner time on target-sized problems (graph replays, CUDA events, median of 50), with the
// planner's own routing (q_per_tile 8, as SparsePrefill at G = 16), on the general path and, where
// it fits, the small one. Run with --gtest_also_run_disabled_tests --gtest_filter='*PlanTiming*'.
TEST(K2qDeviceTiming, DISABLED_PlanTiming) {
  MSA_SKIP_WITHOUT_GPU();
  const auto chunk = [](int q, int prefix, int count) { return std::vector<Request>(count, Request{q, q + prefix}); };
  // Random selections (tile-shared where named), h_kv 4, topk 16, q_per_item 64; seeds 21, 22,
  // ... in table order.
  std::vector<PlanCase> timed;
  const auto add = [&timed](const char* name, std::vector<Request> requests, Selection selection = Selection::kRandom) {
    timed.push_back({name, 4, 16, 64, std::move(requests), selection, Mutation::kNone, 0,
                     21 + static_cast<std::uint64_t>(timed.size())});
  };
  add("S32k_B1_random", std::vector<Request>{{32768, 32768}});
  add("S128k_B1_random", std::vector<Request>{{131072, 131072}});
  add("chunk8k_of_128k", std::vector<Request>{{8192, 131072}});
  add("B256_chunks", many_requests(256, 24, 256, 60000));
  add("1_on_16k", chunk(1, 16384, 1));
  add("171_on_64k", chunk(171, 65536, 1));
  add("512_on_128k", chunk(512, 131072, 1));
  add("171x4_on_128k", chunk(171, 131072, 4));
  add("1024_on_128k", chunk(1024, 131072, 1));
  add("2048_on_128k", chunk(2048, 131072, 1));
  add("256x4_on_128k", chunk(256, 131072, 4));
  add("64_on_64k", chunk(64, 65536, 1));
  add("1x4_on_64k", chunk(1, 65536, 4));
  add("16x4_on_64k", chunk(16, 65536, 4));
  add("64x4_on_64k", chunk(64, 65536, 4));
  add("16x4_on_128k", chunk(16, 131072, 4));
  add("1x16_on_16k", chunk(1, 16384, 16));
  add("2048_on_16k", chunk(2048, 16384, 1));
  add("2048_on_64k", chunk(2048, 65536, 1));
  add("2048x4_on_64k", chunk(2048, 65536, 4));
  add("512x4_on_64k", chunk(512, 65536, 4));
  add("4096_on_128k", chunk(4096, 131072, 1));
  add("S8k_B1_random", std::vector<Request>{{8192, 8192}});
  add("S16k_B1_random", std::vector<Request>{{16384, 16384}});
  // Tile-shared selections, whose run is short (the tile-union kernel): the plan's share is
  // largest there.
  add("S8k_B1_shared", std::vector<Request>{{8192, 8192}}, Selection::kTileShared);
  add("S12k_B1_shared", std::vector<Request>{{12288, 12288}}, Selection::kTileShared);
  add("4k_x2_shared", chunk(4096, 4096, 2), Selection::kTileShared);
  // Many KV heads (G = 4 and 2 at h_q 64): the planner's work grows with h_kv, the run's less.
  const auto add_heads = [&timed](const char* name, int h_kv, std::vector<Request> requests) {
    timed.push_back({name, h_kv, 16, 64, std::move(requests), Selection::kRandom, Mutation::kNone, 0,
                     21 + static_cast<std::uint64_t>(timed.size())});
  };
  add_heads("S16k_G4_random", 16, std::vector<Request>{{16384, 16384}});
  add_heads("S32k_G4_random", 16, std::vector<Request>{{32768, 32768}});
  add_heads("S16k_G2_random", 32, std::vector<Request>{{16384, 16384}});
  add_heads("S32k_G2_random", 32, std::vector<Request>{{32768, 32768}});
  // Where the fused and bitmap paths meet (h_kv 4).
  add("S4k_B1_random", std::vector<Request>{{4096, 4096}});
  add("S6k_B1_random", std::vector<Request>{{6144, 6144}});
  add("S6k_on_32k", chunk(6144, 26624, 1));
  add("S5k_B1_random", std::vector<Request>{{5120, 5120}});
  add("S6k_on_12k", chunk(6144, 6144, 1));
  add("S8k_on_16k", chunk(8192, 8192, 1));
  add("S8k_x2_on_16k", chunk(4096, 12288, 2));
  add_heads("S64k_G2_random", 32, std::vector<Request>{{65536, 65536}});
  add_heads("S128k_G2_random", 32, std::vector<Request>{{131072, 131072}});
  // G = 1 (h_kv 64), planned from S = 32k on (block-major rows).
  add_heads("S32k_G1_random", 64, std::vector<Request>{{32768, 32768}});
  add_heads("S64k_G1_random", 64, std::vector<Request>{{65536, 65536}});
  // Past 1024 blocks (the bitmap path up to 2048).
  add_heads("S256k_G2_random", 32, std::vector<Request>{{262144, 262144}});
  add("S256k_B1_random", std::vector<Request>{{262144, 262144}});
  // MSA_PLAN_TIMING_CASE=<name>: that case only (e.g. under a profiler); MSA_PLAN_TIMING_PATH=
  // general|small|grid|fused|bitmap: that path only.
  const char* only = std::getenv("MSA_PLAN_TIMING_CASE");
  const char* only_path = std::getenv("MSA_PLAN_TIMING_PATH");
  for (const PlanCase& c : timed) {
    if (only != nullptr && c.name != only) continue;
    const PlanInputs in = make_inputs(c);
    using msa::cuda::K2qPath;
    for (const K2qPath path : {K2qPath::kGeneral, K2qPath::kSmall, K2qPath::kGrid, K2qPath::kFused, K2qPath::kBitmap}) {
      DevicePlan dp(c, in);
      ASSERT_NE(dp.workspace.get(), nullptr);
      if (!path_fits(dp.sizes.geo, path)) continue;
      const char* path_name = path == K2qPath::kGrid     ? "grid"
                              : path == K2qPath::kSmall  ? "small"
                              : path == K2qPath::kFused  ? "fused"
                              : path == K2qPath::kBitmap ? "bitmap"
                                                         : "general";
      if (only_path != nullptr && std::string(only_path) != path_name) continue;
      dp.sizes.geo.path = path;
      // The routing's tiles at h_q 64 (8 queries at G = 16, as SparsePrefill routes them).
      RouteBuffers route(c, in, dp, msa::cuda::tile_union_queries_per_tile(std::max(1, 64 / c.h_kv), c.topk));
      dp.inputs.route = &route.params;
      cudaStream_t stream = nullptr;
      CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      msa::cuda::build_k2q_device(dp.sizes.geo, dp.inputs, dp.buffers, stream);  // kernel attributes
      CUDA_OK(cudaStreamSynchronize(stream));
      const msa::test::CapturedGraph graph(
          stream, [&](cudaStream_t s) { msa::cuda::build_k2q_device(dp.sizes.geo, dp.inputs, dp.buffers, s); });
      ASSERT_TRUE(graph.ok());
      cudaEvent_t start, stop;
      CUDA_OK(cudaEventCreate(&start));
      CUDA_OK(cudaEventCreate(&stop));
      for (int i = 0; i < 5; ++i) CUDA_OK(graph.launch(stream));
      std::vector<float> ms;
      for (int i = 0; i < 50; ++i) {
        CUDA_OK(cudaEventRecord(start, stream));
        CUDA_OK(graph.launch(stream));
        CUDA_OK(cudaEventRecord(stop, stream));
        CUDA_OK(cudaEventSynchronize(stop));
        float t = 0;
        CUDA_OK(cudaEventElapsedTime(&t, start, stop));
        ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      std::printf("%-18s %-7s total_q %7lld rows<=%7lld edges/head %9lld: median %.1f us (min %.1f)\n", c.name.c_str(),
                  path_name, static_cast<long long>(in.total_q), static_cast<long long>(dp.sizes.geo.max_rows),
                  static_cast<long long>(dp.sizes.geo.edges_per_head), ms[ms.size() / 2] * 1e3, ms[0] * 1e3);
      CUDA_OK(cudaEventDestroy(start));
      CUDA_OK(cudaEventDestroy(stop));
      CUDA_OK(cudaStreamDestroy(stream));
    }
  }
}


}  // namespace
