// The host k2q planner (spec §2): the oracle the device builder must match byte for byte.
#include "core/k2q_host.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/check.h"
#include "core/plan_encoding.h"
#include "core/validate.h"

namespace msa {

namespace {

constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
// Every slot (< topk) fits the qsplit word's slot field, the bits above the query.
constexpr int kMaxPlanTopk = (1 << (32 - qsplit::kQueryBits)) - 1;

// Level-major, request-minor numbering of the (request, block) rows: all requests' block 0,
// then block 1 of the requests that have one, and so on.
struct RowMap {
  std::vector<std::int64_t> first;   // [B + 1]: request b's blocks are at first[b] + block
  std::vector<std::int32_t> row_of;  // [total_rows]: (first[b] + block) -> row id
  std::vector<std::int32_t> coords;  // [total_rows, 2] = (b, block) by row id
};

RowMap map_rows(const BatchInfo& info) {
  RowMap m;
  m.first.assign(static_cast<std::size_t>(info.batch + 1), 0);
  for (std::int64_t b = 0; b < info.batch; ++b) m.first[b + 1] = m.first[b] + info.blocks(b);
  const std::int64_t total_rows = m.first[info.batch];
  MSA_REQUIRE(total_rows < kInt32Max, "k_len", std::to_string(total_rows) + " rows",
              "the plan's row count, sum of ceil(k_len / " + std::to_string(kBlockSize) + "), must fit in int32");
  // start[l] = rows in levels < l. First start[c - 1] = requests with exactly c blocks; the
  // suffix sum turns that into requests that have block l; an exclusive scan gives the starts.
  const std::int64_t levels = info.max_blocks();
  std::vector<std::int64_t> start(static_cast<std::size_t>(levels + 1), 0);
  for (std::int64_t b = 0; b < info.batch; ++b)
    if (info.blocks(b) > 0) ++start[info.blocks(b) - 1];
  for (std::int64_t l = levels - 2; l >= 0; --l) start[l] += start[l + 1];
  std::int64_t acc = 0;
  for (std::int64_t l = 0; l <= levels; ++l) {
    const std::int64_t in_level = start[l];
    start[l] = acc;
    acc += in_level;
  }
  m.row_of.resize(static_cast<std::size_t>(total_rows));
  m.coords.resize(static_cast<std::size_t>(total_rows * 2));
  // Visiting requests in ascending order keeps each level request-minor.
  for (std::int64_t b = 0; b < info.batch; ++b) {
    for (std::int64_t l = 0; l < info.blocks(b); ++l) {
      const std::int64_t row = start[l]++;
      m.row_of[m.first[b] + l] = static_cast<std::int32_t>(row);
      m.coords[row * 2] = static_cast<std::int32_t>(b);
      m.coords[row * 2 + 1] = static_cast<std::int32_t>(l);
    }
  }
  return m;
}

}  // namespace

int row_selection(const std::int32_t* ids, std::int64_t slot_stride, int topk,
                  std::int64_t n_blocks, std::int32_t* sorted) {
  int count = 0;
  for (int s = 0; s < topk; ++s) {
    const std::int32_t id = ids[s * slot_stride];
    if (id < 0 || id >= n_blocks) continue;
    // Insertion into the ascending list: topk is small, and duplicates are found on the way.
    int i = count;
    while (i > 0 && sorted[i - 1] > id) --i;
    if (i > 0 && sorted[i - 1] == id) continue;
    std::copy_backward(sorted + i, sorted + count, sorted + count + 1);
    sorted[i] = id;
    ++count;
  }
  return count;
}

std::optional<RowViolation> check_row_contract(const std::int32_t* ids, std::int64_t slot_stride,
                                               int topk, std::int64_t local) {
  int count = 0;  // valid ids so far; a -1-padded prefix keeps them in slots 0..count-1
  for (int s = 0; s < topk; ++s) {
    const std::int32_t id = ids[s * slot_stride];
    if (id == -1) continue;
    if (id < 0) return RowViolation{s, id, "negative id other than the -1 padding"};
    if (count != s)
      return RowViolation{s, id, "valid id after -1 padding (ids must be a -1-padded prefix)"};
    if (id > local)
      return RowViolation{s, id,
                          "block id beyond the query's local block " + std::to_string(local)};
    for (int j = 0; j < s; ++j)
      if (ids[j * slot_stride] == id)
        return RowViolation{s, id, "duplicate block id (also in slot " + std::to_string(j) + ")"};
    ++count;
  }
  if (count > 0 && ids[(count - 1) * slot_stride] != local)
    return RowViolation{count - 1, ids[(count - 1) * slot_stride],
                        "the last valid id is not the local block " + std::to_string(local)};
  // Unique ids in [0, local] cannot exceed min(topk, local + 1): only too few remain.
  const std::int64_t want = std::min<std::int64_t>(topk, local + 1);
  if (count != want)
    return RowViolation{
        count, -1,
        "wrong count: " + std::to_string(count) +
            " valid ids, a full row has min(topk, local + 1) = " + std::to_string(want)};
  return std::nullopt;
}

int plan_q_per_item(const AttentionShape& shape, std::int64_t total_q, int option) {
  if (option >= 1) return option;
  const std::int64_t group = shape.h_kv >= 1 ? std::max<std::int64_t>(1, shape.h_q / shape.h_kv) : 1;
  const double rows = static_cast<double>(total_q) * shape.topk * shape.h_q;  // no overflow
  if (rows >= static_cast<double>(kAutoQPerItemRows)) return static_cast<int>(std::max<std::int64_t>(64, 256 / group));
  return static_cast<int>(std::min<std::int64_t>(64, (128 + group - 1) / group));
}

K2qSizes k2q_sizes(const AttentionShape& shape, const ProblemSize& problem, int q_per_item) {
  validate_shape(shape);
  MSA_REQUIRE(q_per_item >= 1 && q_per_item <= (1 << 20), "q_per_item", std::to_string(q_per_item),
              "must be in 1..2^20");
  validate_problem(problem);
  // Bounded operands (batch, total_q < 2^31, blocks <= 2^23, h_kv <= 2^10, topk <= 32): every
  // product below fits in int64; the results must fit the plan's int32 indices.
  K2qSizes s;
  s.max_rows = problem.batch * ((problem.max_k_len + kBlockSize - 1) / kBlockSize);
  MSA_REQUIRE(s.max_rows < kInt32Max, "problem.max_k_len", std::to_string(problem.max_k_len),
              "batch * ceil(max_k_len / " + std::to_string(kBlockSize) + ") = " + std::to_string(s.max_rows) +
                  " plan rows must fit in int32");
  s.edges_per_head = problem.total_q * shape.topk;
  MSA_REQUIRE(s.edges_per_head <= kInt32Max, "problem.total_q", std::to_string(problem.total_q),
              "total_q * topk = " + std::to_string(s.edges_per_head) + " edges must fit in int32");
  // Each non-empty row adds at most one partial chunk to the floor(edges / q_per_item) full ones.
  s.work_capacity =
      s.max_rows * shape.h_kv + (s.edges_per_head * shape.h_kv + q_per_item - 1) / q_per_item;
  MSA_REQUIRE(s.work_capacity <= kInt32Max, "problem", std::to_string(s.work_capacity) + " work items",
              "the plan's work capacity must fit in int32");
  return s;
}

K2qCsr build_k2q_csr(const AttentionShape& shape, const VarlenBatch& batch, const TensorView& topk,
                     const Options& options) {
  return build_k2q_csr_routed(shape, batch, topk, options, TileRoute{});
}

K2qCsr build_k2q_csr_routed(const AttentionShape& shape, const VarlenBatch& batch, const TensorView& topk,
                            const Options& options, const TileRoute& route) {
  MSA_REQUIRE(shape.h_kv >= 1, "shape.h_kv", std::to_string(shape.h_kv), "must be >= 1");
  MSA_REQUIRE(shape.topk >= 1 && shape.topk <= kMaxPlanTopk, "shape.topk", std::to_string(shape.topk),
              "must be in 1.." + std::to_string(kMaxPlanTopk) + " (the qsplit word's slot field)");
  MSA_REQUIRE(options.q_per_item >= 0, "options.q_per_item", std::to_string(options.q_per_item),
              "must be >= 0 (0: automatic)");
  // Everything is checked (strict contract included) before the plan is built.
  const BatchInfo info = read_batch(batch);
  validate_topk(topk, info, shape.h_kv, shape.topk, options.strict, Device::kCpu);
  const int h_kv = shape.h_kv;
  const int k = shape.topk;
  const std::int64_t edges = info.total_q * k;  // per head
  MSA_REQUIRE(edges <= kInt32Max, "topk.shape[1]", std::to_string(info.total_q),
              "total_q * topk must fit in int32 (row_ptr and q_begin are int32)");

  K2qCsr csr;
  csr.h_kv = h_kv;
  csr.topk = k;
  const std::int32_t q_per_item = plan_q_per_item(shape, info.total_q, options.q_per_item);
  csr.q_per_item = q_per_item;
  csr.batch = info.batch;
  csr.total_q = info.total_q;
  RowMap rows = map_rows(info);
  csr.total_rows = rows.first[info.batch];
  csr.row_coords = std::move(rows.coords);
  const std::int64_t total_rows = csr.total_rows;
  csr.row_ptr.assign(static_cast<std::size_t>(h_kv * (total_rows + 1)), 0);
  csr.q_indices.assign(static_cast<std::size_t>(h_kv * edges), -1);
  csr.qsplit.assign(static_cast<std::size_t>(h_kv * edges), qsplit::kUnused);
  csr.split_counts.assign(static_cast<std::size_t>(info.total_q * h_kv), 0);
  MSA_REQUIRE(route.union_tile == nullptr || route.q_per_tile >= 1, "route.q_per_tile",
              std::to_string(route.q_per_tile), "must be >= 1");
  const std::int64_t per_head = route.union_tile != nullptr ? tiles_per_head(info.total_q, route.q_per_tile) : 0;

  // Per head a counting sort of the edges by row; visiting queries in ascending order makes
  // each row's queries ascending without sorting.
  std::vector<std::int32_t> selection(static_cast<std::size_t>(edges));  // [total_q, k]
  std::vector<int> kept(static_cast<std::size_t>(info.total_q));        // edges of (q, h) in the plan
  std::vector<std::int32_t> cursor(static_cast<std::size_t>(total_rows));
  const auto* ids = topk.ptr<const std::int32_t>();
  for (int h = 0; h < h_kv; ++h) {
    std::int32_t* row_ptr = csr.row_ptr.data() + h * (total_rows + 1);
    for (std::int64_t q = 0; q < info.total_q; ++q) {
      const std::int32_t b = info.request_of(q);
      std::int32_t* sel = selection.data() + q * k;
      // A row routed to the tile-union kernel has no edge here and one slot (its whole result).
      const bool routed = route.routed(h, q, per_head);
      const int n = routed ? 0 : row_selection(ids + topk.offset(h, q, 0), topk.stride[2], k, info.blocks(b), sel);
      kept[q] = n;
      csr.split_counts[q * h_kv + h] = routed ? 1 : n;
      for (int s = 0; s < n; ++s) ++row_ptr[rows.row_of[rows.first[b] + sel[s]] + 1];
    }
    for (std::int64_t r = 0; r < total_rows; ++r) row_ptr[r + 1] += row_ptr[r];
    std::copy(row_ptr, row_ptr + total_rows, cursor.begin());
    std::int32_t* head_q_indices = csr.q_indices.data() + h * edges;
    std::int32_t* head_qsplit = csr.qsplit.data() + h * edges;
    for (std::int64_t q = 0; q < info.total_q; ++q) {
      const std::int32_t b = info.request_of(q);
      const std::int32_t q_local = static_cast<std::int32_t>(q - info.cu_q[b]);
      const std::int32_t* sel = selection.data() + q * k;
      for (int s = 0; s < kept[q]; ++s) {
        const std::int32_t e = cursor[rows.row_of[rows.first[b] + sel[s]]]++;
        head_q_indices[e] = q_local;
        head_qsplit[e] = qsplit::encode(q_local, s);
      }
    }
  }

  // Work items in (kv_head, row, q_begin) order, then largest first (stable, so deterministic).
  for (int h = 0; h < h_kv; ++h) {
    const std::int32_t* row_ptr = csr.row_ptr.data() + h * (total_rows + 1);
    for (std::int64_t r = 0; r < total_rows; ++r) {
      for (std::int64_t e = row_ptr[r]; e < row_ptr[r + 1]; e += q_per_item) {
        csr.work.push_back(WorkItem{
            h, static_cast<std::int32_t>(r), static_cast<std::int32_t>(e),
            static_cast<std::int32_t>(std::min<std::int64_t>(q_per_item, row_ptr[r + 1] - e)),
            csr.row_coords[r * 2], csr.row_coords[r * 2 + 1]});
      }
    }
  }
  std::stable_sort(csr.work.begin(), csr.work.end(),
                   [](const WorkItem& a, const WorkItem& b) { return a.q_count > b.q_count; });
  csr.work_capacity =
      k2q_sizes(shape, ProblemSize{info.batch, info.total_q, info.max_k_len}, q_per_item)
          .work_capacity;
  MSA_REQUIRE(static_cast<std::int64_t>(csr.work.size()) <= csr.work_capacity, "work_count",
              std::to_string(csr.work.size()),
              "internal error: exceeds the capacity bound " + std::to_string(csr.work_capacity));
  return csr;
}

}  // namespace msa
