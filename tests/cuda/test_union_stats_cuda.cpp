// The planner's PrefillPath::kAuto counts on the device against their CPU twin
// (core/union_stats): random, tile-shared and clustered selections, chunked batches whose
// tiles span requests, 300 small requests, rows with invalid and repeated ids, G = 1..16.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "core/union_stats.h"
#include "cuda/plan/union_stats.h"
#include "cuda/prefill/union_sm90/launch.h"
#include "msa/msa.h"

namespace {

using msa::bench::Request;
using msa::bench::Selection;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

struct StatsCase {
  std::string name;
  int h_q, h_kv, topk;
  std::vector<Request> requests;
  Selection selection;
  bool adversarial;
};

std::vector<StatsCase> stats_cases() {
  const std::vector<Request> chunked = {{700, 2000}, {1, 1500}, {0, 300}, {384, 384}, {129, 1300}};
  std::vector<Request> many;
  for (int i = 0; i < 300; ++i) many.push_back({1 + (i * 7) % 13, 1 + (i * 7) % 13 + (i * 37) % 500});
  return {
      {"g16_random", 64, 4, 16, {{32768, 32768}}, Selection::kRandom, false},  // sampled tiles
      {"g16_tileshared", 64, 4, 16, {{4096, 4096}}, Selection::kTileShared, false},
      {"g8_clustered_chunked", 16, 2, 16, chunked, Selection::kClustered, false},
      {"g1_topk32_chunked", 4, 4, 32, chunked, Selection::kRandom, true},
      {"g3_batch300", 12, 4, 8, many, Selection::kRandom, true},
  };
}

class UnionStatsCuda : public ::testing::TestWithParam<StatsCase> {};

TEST_P(UnionStatsCuda, MatchesHostTwin) {
  if (!msa::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const StatsCase& c = GetParam();
  msa::bench::WorkloadSpec spec;
  spec.shape = {.h_q = c.h_q, .h_kv = c.h_kv, .d = 128, .topk = c.topk};
  spec.requests = c.requests;
  spec.selection = c.selection;
  spec.host_values = false;
  msa::bench::Workload w = msa::bench::make_workload(spec);
  auto* ids = w.topk.data<std::int32_t>();
  if (c.adversarial) {  // -1, repeats, negative and out-of-range ids
    std::mt19937 rng(7);
    for (std::int64_t i = 0; i < w.topk.numel(); ++i) {
      const unsigned r = rng() % 8;
      if (r == 0) ids[i] = -1;
      else if (r == 1) ids[i] = -5;
      else if (r == 2) ids[i] = 1 << 20;
      else if (r == 3 && i % c.topk != 0) ids[i] = ids[i - 1];
    }
  }
  const int batch = static_cast<int>(c.requests.size());
  const int q_per_tile = msa::cuda::union_sm90_queries_per_tile(c.h_q / c.h_kv);
  const msa::UnionStats want =
      msa::union_stats_host(ids, w.cu_seqlens_q.data<std::int32_t>(), w.k_len.data<std::int32_t>(), batch, c.h_kv,
                            w.total_q, c.topk, q_per_tile);
  ASSERT_GT(want.edges, 0u);

  std::int32_t *d_ids = nullptr, *d_cu = nullptr, *d_klen = nullptr;
  std::uint64_t* d_out = nullptr;
  CUDA_OK(cudaMalloc(&d_ids, w.topk.bytes()));
  CUDA_OK(cudaMalloc(&d_cu, w.cu_seqlens_q.bytes()));
  CUDA_OK(cudaMalloc(&d_klen, w.k_len.bytes()));
  CUDA_OK(cudaMalloc(&d_out, 2 * sizeof(std::uint64_t)));
  CUDA_OK(cudaMemcpy(d_ids, ids, w.topk.bytes(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_cu, w.cu_seqlens_q.raw(), w.cu_seqlens_q.bytes(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_klen, w.k_len.raw(), w.k_len.bytes(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_out, 0xff, 2 * sizeof(std::uint64_t)));  // the launch must zero it
  msa::cuda::UnionStatsParams p{};
  p.ids = d_ids;
  p.stride_topk_head = w.total_q * c.topk;
  p.stride_topk_token = c.topk;
  p.cu_seqlens_q = d_cu;
  p.k_len = d_klen;
  p.batch = batch;
  p.h_kv = c.h_kv;
  p.total_q = w.total_q;
  p.topk = c.topk;
  p.q_per_tile = q_per_tile;
  p.out = d_out;
  msa::cuda::launch_union_stats(p, nullptr);
  std::uint64_t got[2] = {0, 0};
  CUDA_OK(cudaMemcpy(got, d_out, sizeof(got), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got[0], want.union_blocks) << c.name;
  EXPECT_EQ(got[1], want.edges) << c.name;
  if (c.selection == Selection::kTileShared) {
    EXPECT_TRUE(msa::union_path_wins(got[0], got[1])) << c.name;
  }
  if (c.name == "g16_random") {  // 128 x 16 random picks of 256 blocks: unions ~0.85 of the edges
    EXPECT_FALSE(msa::union_path_wins(got[0], got[1])) << c.name;
  }
  cudaFree(d_ids);
  cudaFree(d_cu);
  cudaFree(d_klen);
  cudaFree(d_out);
}

INSTANTIATE_TEST_SUITE_P(Cases, UnionStatsCuda, ::testing::ValuesIn(stats_cases()),
                         [](const auto& p) { return p.param.name; });

}  // namespace
