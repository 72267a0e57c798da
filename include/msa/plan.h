// The KV-block-major plan: reverse (k2q) CSR and work list (spec §2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "msa/options.h"
#include "msa/shapes.h"

namespace msa {

// One unit of KV-block-major work: queries [q_begin, q_begin + q_count) of q_indices[kv_head]
// (absolute positions in that head's edge list, all inside one CSR row). The CUDA planner writes
// its work list as WorkItem[work_count] and the kernels read it as such.
struct WorkItem {
  std::int32_t kv_head;
  std::int32_t row;      // CSR row (level-major, request-minor)
  std::int32_t q_begin;  // first edge, index into q_indices[kv_head, :]
  std::int32_t q_count;  // 1..q_per_item (0 only in a device plan of a batch that breaks the
                         // contract: its items are kept inside the head's edges, docs/numerics.md)
  std::int32_t b;        // request
  std::int32_t block;    // request-local KV block
  friend bool operator==(const WorkItem&, const WorkItem&) = default;
};
static_assert(sizeof(WorkItem) == 6 * sizeof(std::int32_t));

// Host-known sizes of a problem: what capacities are computed from.
struct ProblemSize {
  std::int64_t batch = 0;      // B
  std::int64_t total_q = 0;    // packed query rows
  std::int64_t max_k_len = 0;  // largest k_len in the batch (an upper bound is fine)
};

// The bytes msa's operators allocate for a workspace of their own (no set_workspace()) when a
// plan needs `need` bytes and they hold fewer: the need and an eighth more (at most 256 MiB), in
// whole 2 MiB units (at least one). A need that grows a little with each call, as a chunked prefill's does with
// its prefix (workspace_bytes() grows with max_k_len), then reallocates once in several hundred
// calls rather than in every plan(); a reallocation frees the old memory first, which waits for
// the device. The Python wrappers size the buffers they allocate the same way.
inline constexpr std::size_t kWorkspaceGranule = std::size_t{2} << 20;        // 2 MiB
inline constexpr std::size_t kWorkspaceHeadroomMax = std::size_t{256} << 20;  // 256 MiB
constexpr std::size_t grown_workspace_bytes(std::size_t need) {
  const std::size_t headroom = need / 8 < kWorkspaceHeadroomMax ? need / 8 : kWorkspaceHeadroomMax;
  if (need > ~std::size_t{0} - headroom - kWorkspaceGranule) return need;  // no room to round
  const std::size_t units = (need + headroom + kWorkspaceGranule - 1) / kWorkspaceGranule;
  return (units > 0 ? units : 1) * kWorkspaceGranule;
}

// Element counts of every plan array for a problem; the work capacity is the spec's bound
// total_rows * h_kv + ceil(total_q * topk * h_kv / q_per_item), with total_rows bounded by
// batch * ceil(max_k_len / kBlockSize).
struct K2qSizes {
  std::int64_t max_rows;        // bound on total_rows
  std::int64_t edges_per_head;  // total_q * topk
  std::int64_t work_capacity;
};
K2qSizes k2q_sizes(const AttentionShape& shape, const ProblemSize& problem, int q_per_item);

// The work-item size a plan of total_q queries uses: `option` (Options::q_per_item) when it is
// >= 1; when 0 (automatic), the queries of one 128-row M tile, min(64, ceil(128 / G)), for
// problems of fewer than kAutoQPerItemRows (query, head, slot) rows = total_q * topk * h_q, and
// max(64, floor(256 / G)) above (256 queries at G = 1, 128 at G = 2, 85 at G = 3, 64 from
// G = 4). Small items spread a small problem's hot blocks (the local block, chosen by every
// query of a chunk) over many CTAs; large ones cut the items of a large problem, which has
// enough to keep every SM busy, and fill two M tiles where 64 queries would fill one or half of
// one (docs/performance.md, steps 22 and 85).
inline constexpr std::int64_t kAutoQPerItemRows = std::int64_t{1} << 22;
int plan_q_per_item(const AttentionShape& shape, std::int64_t total_q, int option);

// The plan in host memory. Arrays are row-major with the shapes in brackets.
struct K2qCsr {
  int h_kv = 0;
  int topk = 0;
  int q_per_item = 0;
  std::int64_t batch = 0;
  std::int64_t total_q = 0;
  std::int64_t total_rows = 0;              // sum_b ceil(k_len[b] / kBlockSize)
  std::vector<std::int32_t> row_coords;     // [total_rows, 2] = (b, block)
  std::vector<std::int32_t> row_ptr;        // [h_kv, total_rows + 1] exclusive edge prefix
  std::vector<std::int32_t> q_indices;      // [h_kv, total_q * topk] request-local q, -1 tail
  std::vector<std::int32_t> qsplit;         // [h_kv, total_q * topk] q_local | slot << 24, -1 tail
                                            // (qsplit::encode/query/slot, src/core/plan_encoding.h)
  std::vector<std::int32_t> split_counts;   // [total_q, h_kv] valid edges of each query row
  std::vector<WorkItem> work;               // [work_count], order free
  std::int64_t work_capacity = 0;           // host bound that work.size() never exceeds
};

// The host builder (the oracle for the device builder). batch and topk
// ([h_kv, total_q, topk] int32) must be CPU tensors. Ids outside [0, ceil(k_len / 128)) and
// duplicates are ignored unless options.strict, which rejects them with an msa::Error.
K2qCsr build_k2q_csr(const AttentionShape& shape, const VarlenBatch& batch,
                     const TensorView& topk, const Options& options);

}  // namespace msa
