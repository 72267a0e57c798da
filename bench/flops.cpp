#include "bench/flops.h"

#include <algorithm>
#include <string>

namespace msa::bench {

namespace {

// The row's selection as a sorted set of in-range ids ([0, blocks)).
int selected_set(const std::int32_t* ids, int topk, std::int64_t blocks, std::int32_t* set) {
  int n = 0;
  for (int s = 0; s < topk; ++s)
    if (ids[s] >= 0 && ids[s] < blocks) set[n++] = ids[s];
  std::sort(set, set + n);
  return static_cast<int>(std::unique(set, set + n) - set);
}

std::int64_t block_visible_tokens(std::int64_t block, std::int64_t pos, std::int64_t k_len) {
  const std::int64_t end = std::min({(block + 1) * kBlockSize, k_len, pos + 1});
  return std::max<std::int64_t>(end - block * kBlockSize, 0);
}

}  // namespace

std::int64_t row_visible_tokens(const std::int32_t* ids, int topk, std::int64_t pos,
                                std::int64_t k_len) {
  std::vector<std::int32_t> set(static_cast<std::size_t>(std::max(topk, 0)));
  const int n = selected_set(ids, topk, (k_len + kBlockSize - 1) / kBlockSize, set.data());
  std::int64_t tokens = 0;
  for (int i = 0; i < n; ++i) tokens += block_visible_tokens(set[i], pos, k_len);
  return tokens;
}

SelectionStats count_selection(const TensorView& topk, const std::vector<Request>& requests,
                               bool query_major) {
  if (topk.dtype != DType::kInt32 || topk.rank != 3 || !topk.last_dim_contiguous() ||
      topk.device != Device::kCpu)
    throw Error("topk", topk.shape_string(),
                "count_selection needs a CPU int32 rank-3 tensor with a contiguous last dim");
  std::int64_t total_q = 0;
  for (const auto& r : requests) total_q += r.q_len;
  const int head_dim = query_major ? 1 : 0;
  const auto h_kv = topk.dim(head_dim);
  const auto width = static_cast<int>(topk.dim(2));
  if (topk.dim(1 - head_dim) != total_q)
    throw Error("topk.shape", topk.shape_string(),
                "query extent differs from the requests' total_q = " + std::to_string(total_q));

  SelectionStats stats;
  std::vector<std::int32_t> set(static_cast<std::size_t>(width));
  std::vector<char> used;  // blocks of one (request, kv head) selected by any query
  for (std::int64_t h = 0; h < h_kv; ++h) {
    std::int64_t row0 = 0;
    for (const auto& r : requests) {
      const std::int64_t blocks = (r.k_len + kBlockSize - 1) / kBlockSize;
      used.assign(static_cast<std::size_t>(blocks), 0);
      for (std::int64_t i = 0; i < r.q_len; ++i) {
        const std::int64_t q = row0 + i, pos = r.k_len - r.q_len + i;
        const auto* ids = topk.ptr<const std::int32_t>() +
                          (query_major ? topk.offset(q, h, 0) : topk.offset(h, q, 0));
        const int n = selected_set(ids, width, blocks, set.data());
        ++stats.rows;
        stats.edges += n;
        for (int s = 0; s < n; ++s) {
          stats.visible_tokens += block_visible_tokens(set[s], pos, r.k_len);
          used[static_cast<std::size_t>(set[s])] = 1;
        }
      }
      stats.kv_blocks += std::count(used.begin(), used.end(), 1);
      row0 += r.q_len;
    }
  }
  return stats;
}

double attention_flops(const AttentionShape& shape, const SelectionStats& selection) {
  return 4.0 * shape.d * shape.group() * static_cast<double>(selection.visible_tokens);
}

double indexer_flops(int h_i, int d, const std::vector<Request>& requests) {
  double keys = 0;  // sum over queries of pos + 1 = prefix + i + 1
  for (const auto& r : requests) {
    const double prefix = r.k_len - r.q_len;
    keys += r.q_len * prefix + 0.5 * r.q_len * (r.q_len + 1.0);
  }
  return 2.0 * d * h_i * keys;
}

PrefillBytes prefill_bytes(const AttentionShape& shape, const SelectionStats& selection,
                           std::int64_t total_q) {
  const double g = shape.group(), d = shape.d, edges = static_cast<double>(selection.edges);
  PrefillBytes b;
  b.q_gather = edges * g * d * 2;
  b.partial_write = edges * g * (d * 2 + 4);
  b.partial_read = b.partial_write;
  b.kv = static_cast<double>(selection.kv_blocks) * 2 * kBlockSize * d * 2;
  b.out = static_cast<double>(total_q) * shape.h_q * (d * 2 + 4);
  return b;
}

double floor_seconds(double flops, double bytes) {
  return std::max(flops / kH100FlopsPerSecond, bytes / kH100BytesPerSecond);
}

}  // namespace msa::bench
