#include "bench/route_share.h"

#include <algorithm>
#include <vector>

#include "core/tile_route.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"

namespace msa::bench {

double union_tile_share(const Workload& w, std::int64_t max_k_len) {
  const AttentionShape& s = w.spec.shape;
  if (cuda::plan_free_queries_per_tile(nullptr, nullptr, static_cast<std::int64_t>(w.spec.requests.size()), w.total_q,
                                       max_k_len, s.h_kv, s.group(), s.topk) > 0)
    return 1.0;
  const int q_per_tile = cuda::tile_union_queries_per_tile(s.group(), s.topk);
  const std::vector<std::uint8_t> route =
      route_tiles_host(w.topk.data<std::int32_t>(), w.cu_seqlens_q.data<std::int32_t>(), w.k_len.data<std::int32_t>(),
                       static_cast<int>(w.spec.requests.size()), s.h_kv, s.group(), w.total_q, s.topk, q_per_tile);
  if (route.empty()) return 0.0;
  return static_cast<double>(std::count(route.begin(), route.end(), 1)) / static_cast<double>(route.size());
}

}  // namespace msa::bench
