#include "bench/route_share.h"

#if MSA_WITH_CUDA
#include <algorithm>
#include <vector>

#include "cuda/api/prefill_route.h"

namespace msa::bench {

double union_tile_share(const Workload& w, std::int64_t max_k_len, PrefillPath path) {
  const AttentionShape& s = w.spec.shape;
  const auto batch = static_cast<std::int64_t>(w.spec.requests.size());
  if (w.total_q <= 0) return 0.0;
  const cuda::PrefillRouteChoice choice =
      cuda::choose_prefill_route(s, path, /*union_readable=*/true, nullptr, nullptr, batch, w.total_q, max_k_len);
  const std::vector<std::uint8_t> route =
      cuda::union_tile_flags(choice, s, w.topk.data<std::int32_t>(), w.cu_seqlens_q.data<std::int32_t>(),
                             w.k_len.data<std::int32_t>(), batch, w.total_q);
  if (route.empty()) return 0.0;
  return static_cast<double>(std::count(route.begin(), route.end(), 1)) / static_cast<double>(route.size());
}

}  // namespace msa::bench
#endif  // MSA_WITH_CUDA
