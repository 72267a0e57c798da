// The routing decided for a whole call, modelled on the host (docs/performance.md step 74):
// for msa bench's workloads of out/s228.sh (the same generator and seed), the tiles the per-tile
// rule (union_path_wins) would route, and the call-level model's expectation of what routing
// them costs against running them block-major:
//   rounds = ceil(n / kUnionSms)                 CTAs of the union kernel, one tile each at a time
//   makespan = rounds * (mean union * t_block + t_tile)
//   saved = sum over the n tiles of block_major_path_cost, in time
//   routed - block-major = makespan - saved + t_call
// with t_block = 14.5 ns * 132 (a union block on one SM), t_tile = 5 us (a tile's list, Q and
// stores) and t_call = 9 us (the routing in the plan and the union kernel's launch), fitted on
// that run. Prints a markdown row per call. Build after a build/dev build, from the repository
// root, with
//   g++ -std=c++20 -O2 -fopenmp -Isrc -Iinclude -I. scripts/route_call_model.cpp
//       build/dev/libmsa_bench.a build/dev/libmsa.a -L/usr/local/cuda/lib64 -lcudart
// (one command line).
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "bench/workload.h"
#include "core/tile_route.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"

namespace {

using namespace msa;

// The per-tile rule's flagged tiles of a workload and their sums (route_tiles_host_counts).
TileRouteCounts candidates(const bench::Workload& w) {
  const AttentionShape& s = w.spec.shape;
  return route_tiles_host_counts(w.topk.data<std::int32_t>(), w.cu_seqlens_q.data<std::int32_t>(),
                                 w.k_len.data<std::int32_t>(), static_cast<int>(w.spec.requests.size()), s.h_kv,
                                 s.group(), w.total_q, s.topk, cuda::tile_union_queries_per_tile(s.group(), s.topk));
}

}  // namespace

int main() {
  constexpr double kUnitUs = 14.5e-3 / (kUnionBlockCost * 128);  // a cost unit, GPU-wide
  constexpr double kBlockUs = 14.5e-3 * kUnionSms, kTileUs = 5.0, kCallUs = 9.0;
  struct Call {
    const char* name;
    int h_q, h_kv;
    std::vector<bench::Request> requests;
  };
  const std::vector<Call> calls = {
      {"171 on 16k", 64, 4, {{171, 16555}}},
      {"512 on 16k", 64, 4, {{512, 16896}}},
      {"512 on 128k", 64, 4, {{512, 131584}}},
      {"2048 on 16k", 64, 4, {{2048, 18432}}},
      {"2048 on 128k", 64, 4, {{2048, 133120}}},
      {"4 x 2048 on 64k", 64, 4, {{2048, 65600}, {2048, 65600}, {2048, 65600}, {2048, 65600}}},
      {"S = 8k", 64, 4, {{8192, 8192}}},
      {"S = 16k", 64, 4, {{16384, 16384}}},
      {"S = 32k", 64, 4, {{32768, 32768}}},
      {"S = 16k, G = 4", 16, 4, {{16384, 16384}}},
      {"S = 16k, G = 2", 32, 16, {{16384, 16384}}},
  };
  std::printf("| selection | call | tiles | routed by the per-tile rule | rounds | makespan us | saved us | routed - block-major, us |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const auto& [sel, selection] : std::vector<std::pair<const char*, bench::Selection>>{
           {"random", bench::Selection::kRandom},
           {"clustered", bench::Selection::kClustered},
           {"tile-shared", bench::Selection::kTileShared}}) {
    for (const Call& call : calls) {
      bench::WorkloadSpec spec;
      spec.shape = {.h_q = call.h_q, .h_kv = call.h_kv, .d = 128, .topk = 16};
      spec.requests = call.requests;
      spec.page_size = 128;
      spec.selection = selection;
      spec.seed = 1;  // msa bench prefill's default
      spec.host_values = false;
      const TileRouteCounts c = candidates(bench::make_workload(spec));
      const int group = call.h_q / call.h_kv;
      const std::uint64_t n = c.tiles;  // the per-tile rule's
      const std::uint64_t rounds = (n + kUnionSms - 1) / kUnionSms;
      const double mean = n > 0 ? static_cast<double>(c.unions) / static_cast<double>(n) : 0.0;
      const double makespan = static_cast<double>(rounds) * (mean * kBlockUs + kTileUs);
      const double saved = static_cast<double>(block_major_path_cost(c.edges, group)) * kUnitUs;
      std::printf("| %s | %s | %lld | %lld | %lld | %.0f | %.0f | %+.0f |\n", sel, call.name,
                  static_cast<long long>(c.flags.size()), static_cast<long long>(n), static_cast<long long>(rounds),
                  makespan, saved, n > 0 ? makespan - saved + kCallUs : 0.0);
    }
  }
}
