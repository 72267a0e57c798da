// Plans under fuzzing (Op kOpPlan): build_k2q_csr and plan_snapshot, checked by check_plan.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "tests/fuzz/fuzz_build.h"
#include "tests/fuzz/fuzz_ops.h"

namespace msa_fuzz {

// Consistency of a plan (spec §2).
void check_plan(const msa::K2qCsr& p, const msa::AttentionShape& s, const std::vector<std::int32_t>& q_len,
                const std::vector<std::int64_t>& k_len, int q_per_item, const char* what) {
  const auto bad = [&](const std::string& m) { fail("h", std::string(what) + ": " + m); };
  const std::int64_t B = static_cast<std::int64_t>(q_len.size());
  std::int64_t total_q = 0, rows = 0;
  for (auto q : q_len) total_q += q;
  for (auto k : k_len) rows += blocks_of(k);
  if (p.batch != B || p.total_q != total_q || p.total_rows != rows || p.h_kv != s.h_kv || p.topk != s.topk)
    bad("header fields differ from the problem");
  if (p.q_per_item != q_per_item) bad("q_per_item " + std::to_string(p.q_per_item) + ", expected " + std::to_string(q_per_item));
  const std::int64_t edges = total_q * s.topk;
  if (static_cast<std::int64_t>(p.row_coords.size()) != 2 * rows ||
      static_cast<std::int64_t>(p.row_ptr.size()) != s.h_kv * (rows + 1) ||
      static_cast<std::int64_t>(p.q_indices.size()) != s.h_kv * edges ||
      static_cast<std::int64_t>(p.qsplit.size()) != s.h_kv * edges ||
      static_cast<std::int64_t>(p.split_counts.size()) != total_q * s.h_kv)
    bad("array sizes differ from the spec");
  if (static_cast<std::int64_t>(p.work.size()) > p.work_capacity) bad("work count beyond the capacity");
  const std::vector<std::int32_t> cu = prefix(q_len);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t b = p.row_coords[2 * r], blk = p.row_coords[2 * r + 1];
    if (b < 0 || b >= B || blk < 0 || blk >= blocks_of(k_len[b])) bad("row_coords out of range");
  }
  for (std::int64_t h = 0; h < s.h_kv; ++h) {
    const std::int32_t* rp = p.row_ptr.data() + h * (rows + 1);
    std::int64_t sum = 0;
    for (std::int64_t q = 0; q < total_q; ++q) {
      const std::int32_t n = p.split_counts[q * s.h_kv + h];
      if (n < 0 || n > s.topk) bad("split count out of [0, topk]");
      sum += n;
    }
    if (rp[0] != 0 || rp[rows] != sum) bad("row_ptr does not cover the split counts");
    for (std::int64_t r = 0; r < rows; ++r) {
      if (rp[r + 1] < rp[r]) bad("row_ptr decreases");
      const std::int32_t b = p.row_coords[2 * r];
      for (std::int64_t e = rp[r]; e < rp[r + 1]; ++e) {
        const std::int32_t ql = p.q_indices[h * edges + e];
        const std::int32_t qs = p.qsplit[h * edges + e];
        if (ql < 0 || ql >= q_len[b]) bad("q_indices out of the request's queries");
        if (e > rp[r] && p.q_indices[h * edges + e - 1] >= ql) bad("q_indices not ascending in a row");
        if ((qs & 0xffffff) != ql) bad("qsplit's q_local differs from q_indices");
        const std::int32_t slot = static_cast<std::int32_t>(static_cast<std::uint32_t>(qs) >> 24);
        if (slot >= p.split_counts[(cu[b] + ql) * s.h_kv + h]) bad("qsplit slot beyond the row's count");
      }
    }
    for (std::int64_t e = rp[rows]; e < edges; ++e)
      if (p.q_indices[h * edges + e] != -1 || p.qsplit[h * edges + e] != -1) bad("unused tail is not -1");
  }
  std::vector<std::int64_t> covered(static_cast<std::size_t>(s.h_kv * (rows + 1)), 0);
  for (const msa::WorkItem& w : p.work) {
    if (w.kv_head < 0 || w.kv_head >= s.h_kv || w.row < 0 || w.row >= rows) bad("work item out of range");
    const std::int32_t* rp = p.row_ptr.data() + w.kv_head * (rows + 1);
    if (w.q_count < 1 || w.q_count > q_per_item || w.q_begin < rp[w.row] || w.q_begin + w.q_count > rp[w.row + 1])
      bad("work item outside its row");
    if (w.b != p.row_coords[2 * w.row] || w.block != p.row_coords[2 * w.row + 1]) bad("work item (b, block) differs from row_coords");
    covered[w.kv_head * (rows + 1) + w.row] += w.q_count;
  }
  for (std::int64_t h = 0; h < s.h_kv; ++h)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int32_t* rp = p.row_ptr.data() + h * (rows + 1);
      if (covered[h * (rows + 1) + r] != rp[r + 1] - rp[r]) bad("work items do not cover a row's edges");
    }
}

// build_k2q_csr on a batch and selection (hostile via mutations), plus plan_snapshot.
void op_plan(Ctx& c) {
  decode_common(c);
  const int B = 1 + c.h.batch % 4;
  Lens l = read_lens(c, B, 48);
  // Plans are cheap: longer requests than attention allows.
  for (auto& k : l.k_len) k = std::min<std::int64_t>(k * (1 + c.h.aux % 16), INT32_MAX);
  static constexpr int kQpi[] = {64, 1, 2, 3, 7, 0, 1 << 20, 16};  // 0: automatic
  c.opt.q_per_item = kQpi[c.h.variant % 8];
  c.read_mutations();
  c.apply_shape_mutations(true);
  c.apply_option_mutations();
  const std::int64_t h_kv = std::max(c.shape.h_kv, 0), width = std::max(c.shape.topk, 0);
  set_shape(c.T[kCuQ].spec, DType::kInt32, {B + 1});
  set_ints(c.T[kCuQ].spec, prefix(l.q_len), 0);
  set_shape(c.T[kKLen].spec, DType::kInt32, {B});
  set_ints(c.T[kKLen].spec, std::vector<std::int32_t>(l.k_len.begin(), l.k_len.end()), static_cast<std::int32_t>(l.k_len[0]));
  build_topk(c, kTopk, h_kv, width, l.q_len, l.k_len, true, c.h.selection % 6);
  c.apply_tensor_mutations();
  if (!c.materialize_all()) return;
  c.apply_element_writes();
  c.apply_shape_mutations(false);
  const msa::VarlenBatch batch = batch_of(c, kCuQ, kKLen);
  msa::K2qCsr p;
  if (call("build_k2q_csr", [&] { p = msa::build_k2q_csr(c.shape, batch, c.T[kTopk].view, c.opt); }) == Outcome::kOk) {
    c.expect_layout_ok({kCuQ, kKLen, kTopk}, "build_k2q_csr");
    if (!c.hostile) check_plan(p, c.shape, l.q_len, l.k_len, msa::plan_q_per_item(c.shape, p.total_q, c.opt.q_per_item), "build_k2q_csr");
    if (c.opt.strict && !c.hostile) {
      // Strict accepts only contract rows: every row's valid ids were kept.
      for (std::int64_t q = 0; q < p.total_q; ++q)
        for (std::int64_t h = 0; h < p.h_kv; ++h)
          if (p.split_counts[q * p.h_kv + h] == 0 && width > 0) fail("h", "strict build_k2q_csr accepted an empty row");
    }
  }
  if (c.h.variant & 8) {
    std::vector<msa::SparsePrefill> keep;
    if (call("SparsePrefill(shape, options)", [&] { keep.emplace_back(c.shape, c.opt); }) != Outcome::kOk) return;
    if (call("SparsePrefill::plan", [&] { keep.back().plan(batch, c.T[kTopk].view); }) != Outcome::kOk) return;
    msa::K2qCsr s;
    if (call("SparsePrefill::plan_snapshot", [&] { s = keep.back().plan_snapshot(); }) == Outcome::kOk && !c.hostile)
      check_plan(s, c.shape, l.q_len, l.k_len, msa::plan_q_per_item(c.shape, s.total_q, c.opt.q_per_item), "plan_snapshot");
  }
}
}  // namespace msa_fuzz
