// The Indexer and TopK operators under fuzzing (Ops kOpIndexer, kOpTopk), each with an FP64 /
// exact oracle of its own.
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

// Paged/flat index K of one head, scores [h_i, rows, cols]. Variants: % 4 == 3 moved-from.
void op_indexer(Ctx& c) {
  decode_common(c);
  const int B = 1 + c.h.batch % 4;
  c.h_i = 1 + c.h.aux % 4;
  c.idx_scale = (c.h.variant & 4) ? 0.05f : 0.f;
  Lens l = read_lens(c, B, 48);
  c.read_mutations();
  c.apply_shape_mutations(true);
  c.apply_option_mutations();
  const std::int64_t d = c.shape.d;
  const std::int64_t h_i = std::max(c.h_i, 0);
  // Indexer work: rows x heads x all visible keys.
  fit_budget(l.q_len, l.k_len, h_i, 1 << 20);
  std::int64_t rows = 0, max_k = 0;
  for (auto q : l.q_len) rows += q;
  for (auto k : l.k_len) max_k = std::max(max_k, k);
  build_kv(c, kIndexK, kNumT, 1, d, c.dt, l.k_len);
  set_shape(c.T[kCuQ].spec, DType::kInt32, {B + 1});
  set_ints(c.T[kCuQ].spec, prefix(l.q_len), 0);
  set_shape(c.T[kKLen].spec, DType::kInt32, {B});
  set_ints(c.T[kKLen].spec, std::vector<std::int32_t>(l.k_len.begin(), l.k_len.end()), static_cast<std::int32_t>(l.k_len[0]));
  TSpec& iq = c.T[kIndexQ].spec;
  set_shape(iq, c.dt, {rows, h_i, d}, (c.h.layout & 8) ? 8 : 0);
  iq.fill = Fill::kFloat;
  iq.vmode = c.h.values % 5;
  const std::int64_t cols = blocks_of(max_k) + (c.h.variant & 3);
  TSpec& sc = c.T[kScores].spec;
  set_shape(sc, DType::kFP32, {h_i, rows, cols}, (c.h.layout & 16) ? 2 : 0);
  sc.fill = Fill::kOutput;
  c.apply_tensor_mutations();
  if (!c.materialize_all()) return;
  c.apply_element_writes();
  c.apply_shape_mutations(false);
  plant_unseen(c, kIndexK, kNumT, l.k_len, 1, d, kIndexQ);

  msa::IndexerArgs a;
  a.index_q = c.T[kIndexQ].view;
  a.index_k = kv_of(c, kIndexK, kNumT);
  a.batch = batch_of(c, kCuQ, kKLen);
  a.scores = c.T[kScores].view;
  std::vector<msa::Indexer> keep;
  keep.reserve(2);
  if (call("Indexer(h_i, d, scale, options)", [&] { keep.emplace_back(c.h_i, c.shape.d, c.idx_scale, c.opt); }) != Outcome::kOk)
    return;
  msa::Indexer* op = &keep.back();
  call("Indexer::plan", [&] { op->plan(a.batch); });
  if ((c.h.variant & 3) == 3 && (c.h.variant & 8)) {
    msa::Indexer moved(std::move(*op));
    moved_from_call("moved-from Indexer::run", [&] { op->run(a); });
    keep.emplace_back(std::move(moved));
    op = &keep.back();
  }
  if (call_checked(c, "Indexer::run", {kScores}, [&] { op->run(a); }) != Outcome::kOk) return;
  c.expect_layout_ok({kIndexQ, kIndexK, kPageTable, kCuK, kCuQ, kKLen, kScores}, "Indexer::run");
  if (c.finite_inputs()) c.expect_no_nan(kScores, "Indexer::run");
  if (!c.ordinary() || !injective(a.scores)) return;
  // FP64 oracle: scale * max over visible tokens of <index_q, index_k>.
  const float scale = c.idx_scale != 0.f ? c.idx_scale : 1.f / std::sqrt(static_cast<float>(d));
  const TensorView& k = a.index_k.k;
  const bool paged = a.index_k.paged();
  const std::vector<std::int32_t> cu = prefix(l.q_len);
  for (int b = 0; b < B; ++b) {
    for (std::int32_t i = 0; i < l.q_len[b]; ++i) {
      const std::int64_t r = cu[b] + i, pos = l.k_len[b] - l.q_len[b] + i;
      for (std::int64_t h = 0; h < h_i; ++h) {
        for (std::int64_t p = 0; p < cols; ++p) {
          double best = -std::numeric_limits<double>::infinity();
          for (std::int64_t t = p * msa::kBlockSize; t < std::min<std::int64_t>((p + 1) * msa::kBlockSize, pos + 1); ++t) {
            std::int64_t off;
            if (paged) {
              const TensorView& pt = a.index_k.page_table;
              const std::int64_t ps = k.shape[2];
              const std::int64_t page = rd<std::int32_t>(pt.data, b * pt.stride[0] + (t / ps) * pt.stride[1]);
              off = page * k.stride[0] + (t % ps) * k.stride[2];
            } else {
              const TensorView& ck = a.index_k.cu_seqlens_k;
              off = (rd<std::int32_t>(ck.data, b * ck.stride[0]) + t) * k.stride[0];
            }
            double dot = 0;
            for (std::int64_t j = 0; j < d; ++j)
              dot += static_cast<double>(load_f(a.index_q.data, a.index_q.dtype, r * a.index_q.stride[0] + h * a.index_q.stride[1] + j)) *
                     load_f(k.data, k.dtype, off + j);
            best = std::max(best, dot);
          }
          const float want = static_cast<float>(scale * best);
          const float got = rd<float>(a.scores.data, h * a.scores.stride[0] + r * a.scores.stride[1] + p * a.scores.stride[2]);
          const bool ok = std::isinf(want) ? got == want : std::fabs(got - want) <= 2e-4f * std::max(1.f, std::fabs(want));
          if (!ok)
            fail("d", "Indexer::run: scores[" + std::to_string(h) + ", " + std::to_string(r) + ", " +
                          std::to_string(p) + "] = " + std::to_string(got) + ", FP64 oracle " + std::to_string(want));
        }
      }
    }
  }
}

// scores [h, rows, cols] fp32 with ties, -inf and (value mode) NaN. Variants: bit 3 moved-from.
void op_topk(Ctx& c) {
  decode_common(c);
  const int B = 1 + c.h.batch % 4;
  c.topk_op = 1 + c.h.topk % 32;
  Lens l = read_lens(c, B, 48);
  // Longer requests than attention allows: sorting is cheap.
  for (auto& k : l.k_len) k = k * (1 + c.h.aux % 8);
  c.read_mutations();
  c.apply_shape_mutations(true);
  c.apply_option_mutations();
  const std::int64_t heads = 1 + c.h.h_kv % 4;
  std::int64_t rows = 0, max_k = 0;
  for (auto q : l.q_len) rows += q;
  for (auto k : l.k_len) max_k = std::max(max_k, k);
  const std::int64_t cols = blocks_of(max_k) + (c.h.variant & 3);
  set_shape(c.T[kCuQ].spec, DType::kInt32, {B + 1});
  set_ints(c.T[kCuQ].spec, prefix(l.q_len), 0);
  set_shape(c.T[kKLen].spec, DType::kInt32, {B});
  set_ints(c.T[kKLen].spec, std::vector<std::int32_t>(l.k_len.begin(), l.k_len.end()), static_cast<std::int32_t>(l.k_len[0]));
  TSpec& sc = c.T[kScores].spec;
  set_shape(sc, DType::kFP32, {heads, rows, cols}, (c.h.layout & 16) ? 1 : 0);
  // Scores: quantised (ties), some -inf, NaN in value mode 1.
  std::vector<std::int32_t> bits(static_cast<std::size_t>(heads * rows * cols));
  const int vm = c.h.values % 5;
  for (auto& b : bits) {
    float f = static_cast<float>(c.rng.below(vm == 3 ? 2 : 16));
    const std::int64_t roll = c.rng.below(16);
    if (roll == 0) f = -kInf;
    if (roll == 1 && vm == 1) f = kNaN;
    if (roll == 2 && vm == 2) f = kInf;
    std::memcpy(&b, &f, 4);
  }
  if (vm == 1) c.nonfinite = true;
  set_ints(sc, std::move(bits), 0);
  sc.dtype = DType::kInt32;
  const auto width = std::max(c.topk_op, 0);
  TSpec& out = c.T[kTopkOut].spec;
  set_shape(out, DType::kInt32, {heads, rows, width}, (c.h.layout & 64) ? 2 : 0);
  out.fill = Fill::kOutput;
  c.apply_tensor_mutations();
  if (!c.materialize_all()) return;
  retype_float_bits(c, kScores);
  c.apply_element_writes();
  c.apply_shape_mutations(false);

  msa::TopkArgs a;
  a.scores = c.T[kScores].view;
  a.batch = batch_of(c, kCuQ, kKLen);
  a.topk = c.T[kTopkOut].view;
  std::vector<msa::TopK> keep;
  keep.reserve(2);
  if (call("TopK(topk, options)", [&] { keep.emplace_back(c.topk_op, c.opt); }) != Outcome::kOk) return;
  msa::TopK* op = &keep.back();
  call("TopK::plan", [&] { op->plan(a.batch); });
  if (c.h.variant & 8) {
    msa::TopK moved(std::move(*op));
    moved_from_call("moved-from TopK::run", [&] { op->run(a); });
    keep.emplace_back(std::move(moved));
    op = &keep.back();
  }
  if (call_checked(c, "TopK::run", {kTopkOut}, [&] { op->run(a); }) != Outcome::kOk) return;
  c.expect_layout_ok({kScores, kCuQ, kKLen, kTopkOut}, "TopK::run");
  if (c.hostile || !injective(a.topk)) return;
  // Exact oracle (spec §5); with NaN scores only the structural rules.
  const std::vector<std::int32_t> cu = prefix(l.q_len);
  std::vector<std::int32_t> ids;
  for (std::int64_t h = 0; h < heads; ++h) {
    for (int b = 0; b < B; ++b) {
      for (std::int32_t i = 0; i < l.q_len[b]; ++i) {
        const std::int64_t r = cu[b] + i;
        const std::int64_t local = (l.k_len[b] - l.q_len[b] + i) / msa::kBlockSize;
        const std::int32_t* row = a.topk.ptr<const std::int32_t>() + h * a.topk.stride[0] + r * a.topk.stride[1];
        const float* s = a.scores.ptr<const float>() + h * a.scores.stride[0] + r * a.scores.stride[1];
        const auto where = [&] { return "TopK::run: row (" + std::to_string(h) + ", " + std::to_string(r) + ")"; };
        if (local + 1 <= width) {
          for (std::int64_t k = 0; k < width; ++k)
            if (row[k] != (k <= local ? k : -1))
              fail("d", where() + " slot " + std::to_string(k) + " = " + std::to_string(row[k]) + ", expected " +
                            std::to_string(k <= local ? k : -1));
          continue;
        }
        if (row[width - 1] != local) fail("d", where() + ": last slot is not the local block");
        bool nan = false;
        for (std::int64_t p = 0; p < local; ++p) nan = nan || std::isnan(s[p]);
        ids.resize(static_cast<std::size_t>(local));
        std::iota(ids.begin(), ids.end(), 0);
        if (!nan) {
          std::stable_sort(ids.begin(), ids.end(), [&](std::int32_t x, std::int32_t y) { return s[x] > s[y]; });
          for (std::int64_t k = 0; k + 1 < width; ++k)
            if (row[k] != ids[k])
              fail("d", where() + " slot " + std::to_string(k) + " = " + std::to_string(row[k]) +
                            ", exact top-k gives " + std::to_string(ids[k]));
        } else {
          for (std::int64_t k = 0; k + 1 < width; ++k) {
            if (row[k] < 0 || row[k] >= local) fail("d", where() + ": id out of [0, local)");
            for (std::int64_t j = 0; j < k; ++j)
              if (row[j] == row[k]) fail("d", where() + ": duplicate id");
          }
        }
      }
    }
  }
}
}  // namespace msa_fuzz
