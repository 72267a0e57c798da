#include "tools/checks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "core/batch.h"
#include "core/validate.h"
#include "tools/table.h"

namespace msa::tool {

namespace {

// Request and position of every packed query row.
struct QueryPos {
  std::int64_t b = 0;    // request
  std::int64_t i = 0;    // request-local index
  std::int64_t pos = 0;  // bottom-right causal position
};

std::vector<QueryPos> query_positions(const std::vector<bench::Request>& requests) {
  std::vector<QueryPos> out;
  for (std::size_t b = 0; b < requests.size(); ++b)
    for (std::int64_t i = 0; i < requests[b].q_len; ++i)
      out.push_back({static_cast<std::int64_t>(b), i, requests[b].k_len - requests[b].q_len + i});
  return out;
}

std::int64_t blocks_of(std::int64_t k_len) { return (k_len + kBlockSize - 1) / kBlockSize; }

// A row's selection: its in-range ids, sorted, duplicates dropped (spec §1).
std::vector<std::int32_t> selected_set(const std::int32_t* ids, int width, std::int64_t blocks) {
  std::vector<std::int32_t> set;
  for (int s = 0; s < width; ++s)
    if (ids[s] >= 0 && ids[s] < blocks) set.push_back(ids[s]);
  std::sort(set.begin(), set.end());
  set.erase(std::unique(set.begin(), set.end()), set.end());
  return set;
}

std::string ids_string(const std::int32_t* ids, std::size_t n) {
  std::string s = "{";
  for (std::size_t i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += std::to_string(ids[i]);
  }
  return s + "}";
}

CheckResult failure(std::string detail) {
  CheckResult r;
  r.ok = false;
  r.detail = std::move(detail);
  return r;
}

}  // namespace

std::vector<std::int64_t> sample_rows(const std::vector<bench::Request>& requests, int per_request) {
  std::vector<std::int64_t> rows;
  std::int64_t row0 = 0;
  for (const auto& r : requests) {
    const std::int64_t n = std::min<std::int64_t>(per_request, r.q_len);
    for (std::int64_t s = 0; s < n; ++s)
      rows.push_back(row0 + (n == 1 ? r.q_len - 1 : s * (r.q_len - 1) / (n - 1)));
    row0 += r.q_len;
  }
  return rows;
}

CheckResult check_indexer(const bench::Workload& w, const bench::HostTensor& scores,
                          const std::vector<std::int64_t>& rows, double scale) {
  const auto& requests = w.spec.requests;
  const std::vector<QueryPos> where = query_positions(requests);
  const std::int64_t h_i = scores.shape()[0], total_q = scores.shape()[1], cols = scores.shape()[2];
  const std::int64_t d = w.index_q.shape()[2];
  const bool paged = w.spec.page_size > 0;
  const std::int64_t ps = w.spec.page_size;
  // Element offset of token t of request b in the index cache.
  const auto key_offset = [&](std::int64_t b, std::int64_t t) {
    if (!paged) return (w.cu_seqlens_k.data<std::int32_t>()[b] + t) * d;
    const std::int64_t max_pages = w.page_table.shape()[1];
    const std::int64_t page = w.page_table.data<std::int32_t>()[b * max_pages + t / ps];
    return (page * ps + t % ps) * d;
  };
  CheckResult result;
  std::vector<double> qv(static_cast<std::size_t>(d));
  for (std::int64_t q : rows) {
    const QueryPos& at = where[static_cast<std::size_t>(q)];
    const std::int64_t k_len = requests[static_cast<std::size_t>(at.b)].k_len;
    for (std::int64_t h = 0; h < h_i; ++h) {
      for (std::int64_t c = 0; c < d; ++c) qv[c] = w.index_q.get((q * h_i + h) * d + c);
      for (std::int64_t p = 0; p < cols; ++p) {
        double ref = -std::numeric_limits<double>::infinity();
        const std::int64_t end = std::min({(p + 1) * kBlockSize, k_len, at.pos + 1});
        for (std::int64_t t = p * kBlockSize; t < end; ++t) {
          const std::int64_t base = key_offset(at.b, t);
          double dot = 0;
          for (std::int64_t c = 0; c < d; ++c) dot += qv[c] * w.index_k.get(base + c);
          ref = std::max(ref, dot * scale);
        }
        const double got = scores.get((h * total_q + q) * cols + p);
        bool good = got == ref;  // a block with no visible key: -inf on both sides
        if (std::isfinite(ref) && std::isfinite(got)) {
          const double err = std::fabs(got - ref);
          result.max_err = std::max(result.max_err, err);
          good = err <= 2e-4 * std::max(1.0, std::fabs(ref));
        }
        if (!good && result.ok) {
          result.ok = false;
          result.detail = format("scores[%lld, %lld, %lld] = %.9g, brute force %.9g",
                                 static_cast<long long>(h), static_cast<long long>(q),
                                 static_cast<long long>(p), got, ref);
        }
      }
    }
  }
  return result;
}

CheckResult check_topk_rows(const bench::HostTensor& topk, const bench::HostTensor& scores,
                            const std::vector<bench::Request>& requests,
                            const std::vector<std::int64_t>& rows) {
  const std::vector<QueryPos> where = query_positions(requests);
  const std::int64_t heads = topk.shape()[0], total_q = topk.shape()[1];
  const int width = static_cast<int>(topk.shape()[2]);
  const std::int64_t cols = scores.shape()[2];
  std::vector<std::int32_t> expect(static_cast<std::size_t>(width));
  for (std::int64_t q : rows) {
    const std::int32_t n = static_cast<std::int32_t>(where[static_cast<std::size_t>(q)].pos / kBlockSize) + 1;
    for (std::int64_t h = 0; h < heads; ++h) {
      std::fill(expect.begin(), expect.end(), -1);
      if (n <= width) {
        for (std::int32_t p = 0; p < n; ++p) expect[p] = p;
      } else {
        // Every earlier block ranked by score descending, ties to the smaller id.
        const float* row_scores = scores.data<float>() + (h * total_q + q) * cols;
        std::vector<std::int32_t> order(static_cast<std::size_t>(n - 1));
        for (std::int32_t p = 0; p < n - 1; ++p) order[p] = p;
        std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
          return row_scores[a] != row_scores[b] ? row_scores[a] > row_scores[b] : a < b;
        });
        std::copy(order.begin(), order.begin() + (width - 1), expect.begin());
        expect[width - 1] = n - 1;
      }
      const std::int32_t* got = topk.data<std::int32_t>() + (h * total_q + q) * width;
      if (!std::equal(expect.begin(), expect.end(), got))
        return failure(format("topk[%lld, %lld] = %s, brute-force sort %s", static_cast<long long>(h),
                              static_cast<long long>(q), ids_string(got, expect.size()).c_str(),
                              ids_string(expect.data(), expect.size()).c_str()));
    }
  }
  return {};
}

CheckResult check_topk_contract(const bench::HostTensor& topk, const bench::Workload& w) {
  try {
    const BatchInfo info = read_batch(w.batch());
    validate_topk(topk.view(), info, static_cast<int>(topk.shape()[0]),
                  static_cast<int>(topk.shape()[2]), /*strict=*/true, Device::kCpu);
  } catch (const Error& e) {
    return failure(e.what());
  }
  return {};
}

CheckResult check_plan(const K2qCsr& plan, const K2qCsr& host, const bench::HostTensor& topk,
                       const std::vector<bench::Request>& requests, int q_per_item, const TileRoute& route) {
  const std::int64_t h_kv = topk.shape()[0], total_q = topk.shape()[1];
  const int width = static_cast<int>(topk.shape()[2]);
  const std::int64_t edges_per_head = total_q * width;

  // Rows level-major, request-minor.
  std::vector<std::int32_t> coords;
  std::int64_t max_blocks = 0;
  for (const auto& r : requests) max_blocks = std::max(max_blocks, blocks_of(r.k_len));
  for (std::int64_t level = 0; level < max_blocks; ++level)
    for (std::size_t b = 0; b < requests.size(); ++b)
      if (level < blocks_of(requests[b].k_len)) {
        coords.push_back(static_cast<std::int32_t>(b));
        coords.push_back(static_cast<std::int32_t>(level));
      }
  const auto total_rows = static_cast<std::int64_t>(coords.size() / 2);
  if (plan.total_rows != total_rows || plan.row_coords != coords)
    return failure(format("row_coords: %lld rows, expected %lld level-major",
                          static_cast<long long>(plan.total_rows), static_cast<long long>(total_rows)));
  if (static_cast<std::int64_t>(plan.row_ptr.size()) != h_kv * (total_rows + 1) ||
      static_cast<std::int64_t>(plan.q_indices.size()) != h_kv * edges_per_head ||
      static_cast<std::int64_t>(plan.qsplit.size()) != h_kv * edges_per_head ||
      static_cast<std::int64_t>(plan.split_counts.size()) != total_q * h_kv)
    return failure("array sizes differ from spec §2");

  std::vector<std::int64_t> row0(requests.size() + 1, 0);  // packed row of each request's query 0
  for (std::size_t b = 0; b < requests.size(); ++b) row0[b + 1] = row0[b] + requests[b].q_len;
  std::vector<std::vector<std::int32_t>> sets(static_cast<std::size_t>(h_kv * total_q));
  const std::int64_t per_head = route.union_tile != nullptr ? tiles_per_head(total_q, route.q_per_tile) : 0;
  for (std::int64_t h = 0; h < h_kv; ++h)
    for (std::size_t b = 0; b < requests.size(); ++b)
      for (std::int64_t q = row0[b]; q < row0[b + 1]; ++q)
        if (!route.routed(static_cast<int>(h), q, per_head))  // a routed row keeps no edge
          sets[h * total_q + q] = selected_set(topk.data<std::int32_t>() + (h * total_q + q) * width,
                                             width, blocks_of(requests[b].k_len));

  for (std::int64_t h = 0; h < h_kv; ++h) {
    std::int64_t edges = 0;
    for (std::int64_t q = 0; q < total_q; ++q) {
      const auto n = static_cast<std::int64_t>(sets[h * total_q + q].size());
      const bool routed = route.routed(static_cast<int>(h), q, per_head);
      if (plan.split_counts[q * h_kv + h] != (routed ? 1 : n))
        return failure(format(routed ? "split_counts[%lld, %lld] = %d, a row routed to the tile-union kernel has 1"
                                     : "split_counts[%lld, %lld] = %d, the row selects %lld blocks",
                              static_cast<long long>(q), static_cast<long long>(h),
                              plan.split_counts[q * h_kv + h], static_cast<long long>(n)));
      edges += n;
    }
    const std::int32_t* ptr = plan.row_ptr.data() + h * (total_rows + 1);
    if (ptr[0] != 0 || ptr[total_rows] != edges)
      return failure(format("row_ptr[%lld] spans %d..%d, sum of split_counts = %lld",
                            static_cast<long long>(h), ptr[0], ptr[total_rows],
                            static_cast<long long>(edges)));
    const std::int32_t* qi = plan.q_indices.data() + h * edges_per_head;
    const std::int32_t* qs = plan.qsplit.data() + h * edges_per_head;
    for (std::int64_t r = 0; r < total_rows; ++r) {
      if (ptr[r + 1] < ptr[r]) return failure(format("row_ptr[%lld, %lld] decreases", static_cast<long long>(h), static_cast<long long>(r)));
      const std::int32_t b = coords[2 * r], block = coords[2 * r + 1];
      for (std::int32_t e = ptr[r]; e < ptr[r + 1]; ++e) {
        const std::int32_t q_local = qi[e];
        const auto bad_edge = [&] {
          return failure(format("q_indices[%lld, %d] = %d: not an ascending query of request %d that selected block %d",
                                static_cast<long long>(h), e, q_local, b, block));
        };
        if (q_local < 0 || q_local >= requests[b].q_len || (e > ptr[r] && q_local <= qi[e - 1])) return bad_edge();
        const auto& set = sets[h * total_q + row0[b] + q_local];
        const auto at = std::find(set.begin(), set.end(), block);
        if (at == set.end()) return bad_edge();
        const auto slot = static_cast<std::int32_t>(at - set.begin());
        if (qs[e] != (q_local | (slot << 24)))
          return failure(format("qsplit[%lld, %d] = %#x, expected query %d slot %d",
                                static_cast<long long>(h), e, static_cast<unsigned>(qs[e]), q_local, slot));
      }
    }
    for (std::int64_t e = edges; e < edges_per_head; ++e)
      if (qi[e] != -1 || qs[e] != -1)
        return failure(format("q_indices/qsplit[%lld, %lld]: tail not -1", static_cast<long long>(h), static_cast<long long>(e)));
  }

  // Work items: chunks of at most q_per_item edges tiling every row exactly once.
  if (static_cast<std::int64_t>(plan.work.size()) > plan.work_capacity)
    return failure(format("work_count %zu exceeds the capacity %lld", plan.work.size(),
                          static_cast<long long>(plan.work_capacity)));
  std::vector<std::int32_t> covered(static_cast<std::size_t>(h_kv * edges_per_head), 0);
  for (const WorkItem& it : plan.work) {
    const bool fields_ok = it.kv_head >= 0 && it.kv_head < h_kv && it.row >= 0 && it.row < total_rows &&
                           it.q_count >= 1 && it.q_count <= q_per_item && it.b == coords[2 * it.row] &&
                           it.block == coords[2 * it.row + 1];
    const std::int32_t* ptr = plan.row_ptr.data() + (fields_ok ? it.kv_head * (total_rows + 1) : 0);
    if (!fields_ok || it.q_begin < ptr[it.row] || it.q_begin + it.q_count > ptr[it.row + 1])
      return failure(format("work item (%d, %d, %d, %d, %d, %d) is not a chunk of its row", it.kv_head,
                            it.row, it.q_begin, it.q_count, it.b, it.block));
    for (std::int32_t e = it.q_begin; e < it.q_begin + it.q_count; ++e) ++covered[it.kv_head * edges_per_head + e];
  }
  for (std::int64_t h = 0; h < h_kv; ++h)
    for (std::int64_t e = 0; e < plan.row_ptr[h * (total_rows + 1) + total_rows]; ++e)
      if (covered[h * edges_per_head + e] != 1)
        return failure(format("edge %lld of head %lld covered by %d work items", static_cast<long long>(e),
                              static_cast<long long>(h), covered[h * edges_per_head + e]));

  // The host builder is the oracle: arrays byte-identical, work items equal as a set.
  auto sorted_work = [](std::vector<WorkItem> w) {
    std::sort(w.begin(), w.end(), [](const WorkItem& a, const WorkItem& b) {
      return std::tie(a.kv_head, a.row, a.q_begin) < std::tie(b.kv_head, b.row, b.q_begin);
    });
    return w;
  };
  if (plan.row_ptr != host.row_ptr || plan.q_indices != host.q_indices || plan.qsplit != host.qsplit ||
      plan.split_counts != host.split_counts || plan.row_coords != host.row_coords)
    return failure("arrays differ from the host builder's");
  if (sorted_work(plan.work) != sorted_work(host.work)) return failure("work items differ from the host builder's");
  return {};
}

}  // namespace msa::tool
