// The SparsePrefill operator and sparse_prefill() under fuzzing (Op kOpPrefill).
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

// Variants (header.variant % 16):
//  0 plan + run; 1 run with other cu_seqlens_q (same B, total_q); 2 run with other k_len;
//  3 run with other top-k values; 4 all three; 5 run with another B or total_q; 6 caller
//  workspace of exactly workspace_bytes(); 7 the same, misaligned by aux bytes; 8 too small
//  by aux bytes; 9 plan a second (other) problem first, then re-plan; 10 sparse_prefill();
//  11 plan(batch, topk, max_k_len, stream); 12 run before plan; 13 moved-from object;
//  14 move-assigned object; 15 plan_snapshot consistency + run.
void op_prefill(Ctx& c) {
  decode_common(c);
  const int B = 1 + c.h.batch % 4;
  Lens l = read_lens(c, B, 48);
  const int variant = c.h.variant % 16;
  c.read_mutations();
  c.apply_shape_mutations(/*pre=*/true);
  c.apply_option_mutations();
  const std::int64_t h_kv = std::max(c.shape.h_kv, 0), h_q = std::max(c.shape.h_q, 0);
  const std::int64_t width = std::max(c.shape.topk, 0);
  fit_budget(l.q_len, l.k_len, h_q, width);

  // The run's batch and selection (variants 1-5).
  std::vector<std::int32_t> q2 = l.q_len;
  std::vector<std::int64_t> k2 = l.k_len;
  const bool other_cu = variant == 1 || variant == 4, other_k = variant == 2 || variant == 4;
  const bool other_topk = variant == 3 || variant == 4, other_shape = variant == 5;
  if (other_cu) {
    std::rotate(q2.begin(), q2.begin() + 1, q2.end());
    if (q2 == l.q_len && B > 1 && q2[0] > 0) {
      --q2[0];
      ++q2[B - 1];
    }
    for (int b = 0; b < B; ++b) k2[b] = std::max<std::int64_t>(k2[b], q2[b]);
  }
  if (other_k)
    for (int b = 0; b < B; ++b) k2[b] = q2[b] + c.rng.below(701 - q2[b]);
  if (other_shape) {
    if (c.h.aux & 1) q2.push_back(static_cast<std::int32_t>(c.rng.below(3)));
    else q2[0] += 1;
    k2.resize(q2.size(), 0);
    for (std::size_t b = 0; b < q2.size(); ++b) k2[b] = std::max<std::int64_t>(k2[b], q2[b]);
  }
  const bool second = other_cu || other_k || other_shape;
  std::vector<std::int64_t> cap(q2.size());
  for (std::size_t b = 0; b < q2.size(); ++b)
    cap[b] = std::max(b < l.k_len.size() ? l.k_len[b] : 0, k2[b]);
  if (cost_of(q2, cap, h_q, width) > 2 * kCostBudget) return;

  std::int64_t rows = 0;
  for (auto q : l.q_len) rows += q;
  std::int64_t rows2 = 0;
  for (auto q : q2) rows2 += q;
  // K/V covers both batches (the first B requests of each).
  std::vector<std::int64_t> cap_b(cap.begin(), cap.begin() + B);
  if (other_shape && q2.size() > static_cast<std::size_t>(B)) cap_b = cap;
  build_kv(c, kK, kV, h_kv, c.shape.d, c.dt, cap_b);
  const int sel = c.h.selection % 6;
  set_shape(c.T[kCuQ].spec, DType::kInt32, {B + 1});
  set_ints(c.T[kCuQ].spec, prefix(l.q_len), 0);
  set_shape(c.T[kKLen].spec, DType::kInt32, {B});
  set_ints(c.T[kKLen].spec, std::vector<std::int32_t>(l.k_len.begin(), l.k_len.end()), static_cast<std::int32_t>(l.k_len[0]));
  build_topk(c, kTopk, h_kv, width, l.q_len, l.k_len, true, sel);
  if (second) {
    const auto B2 = static_cast<std::int64_t>(q2.size());
    set_shape(c.T[kCuQ2].spec, DType::kInt32, {B2 + 1});
    set_ints(c.T[kCuQ2].spec, prefix(q2), 0);
    set_shape(c.T[kKLen2].spec, DType::kInt32, {B2});
    set_ints(c.T[kKLen2].spec, std::vector<std::int32_t>(k2.begin(), k2.end()), 0);
  }
  if (other_topk || (second && rows2 != rows)) build_topk(c, kTopk2, h_kv, width, q2, k2, true, (sel + 1 + c.h.aux) % 6);
  build_attention_io(c, second ? rows2 : rows);
  c.apply_tensor_mutations();
  if (!c.materialize_all()) return;
  retype_float_bits(c, kSinks);
  c.apply_element_writes();
  c.apply_shape_mutations(/*pre=*/false);
  plant_unseen(c, kK, kV, cap_b, h_kv, c.shape.d, kQ);

  const msa::VarlenBatch plan_batch = batch_of(c, kCuQ, kKLen);
  const TensorView plan_topk = c.T[kTopk].view;
  msa::PrefillArgs a;
  a.q = c.T[kQ].view;
  a.kv = kv_of(c, kK, kV);
  a.batch = second ? batch_of(c, kCuQ2, kKLen2) : plan_batch;
  a.topk = c.T[kTopk2].spec.used ? c.T[kTopk2].view : plan_topk;
  a.sinks = c.T[kSinks].view;
  a.out = c.T[kOut].view;
  a.lse = c.T[kLse].view;
  const bool mismatch = second || other_topk;
  const auto outs = {kOut, kLse};
  const auto inputs = {kQ, kK, kV, kPageTable, kCuK, kCuQ, kKLen, kTopk, kSinks, kOut, kLse, kCuQ2, kKLen2, kTopk2};

  auto check_success = [&](const char* what) {
    c.expect_layout_ok(inputs, what);
    if (c.finite_inputs()) {
      c.expect_no_nan(kOut, what);
      c.expect_no_nan(kLse, what);
    }
    if (!mismatch) prefill_oracle(c, a, rows, what);
  };

  if (variant == 10) {
    if (call_checked(c, "sparse_prefill", outs, [&] { msa::sparse_prefill(c.shape, a, c.opt); }) == Outcome::kOk)
      check_success("sparse_prefill");
    return;
  }

  msa::SparsePrefill* op = nullptr;
  std::vector<msa::SparsePrefill> keep;
  keep.reserve(2);
  if (call("SparsePrefill(shape, options)", [&] { keep.emplace_back(c.shape, c.opt); }) != Outcome::kOk) return;
  op = &keep.back();

  if (variant == 12) {
    if (call_checked(c, "SparsePrefill::run before plan", outs, [&] { op->run(a); }) == Outcome::kOk)
      fail("b", "SparsePrefill::run before any plan() succeeded");
    return;
  }

  void* ws_alloc = nullptr;
  struct FreeWs {
    void*& p;
    ~FreeWs() { std::free(p); }
  } free_ws{ws_alloc};
  if (variant >= 6 && variant <= 8) {
    std::int64_t max_k = 0;
    for (auto k : l.k_len) max_k = std::max(max_k, k);
    std::size_t bytes = 0;
    const msa::ProblemSize ps{B, rows, max_k};
    if (call("SparsePrefill::workspace_bytes", [&] { bytes = msa::SparsePrefill::workspace_bytes(c.shape, ps, c.opt); }) != Outcome::kOk)
      return;
    if (bytes > (std::size_t{64} << 20)) return;
    const std::size_t shift = variant == 6 ? 0 : 1 + c.h.aux % 255;
    const std::size_t give = variant == 8 ? (bytes > shift ? bytes - shift : 0) : bytes;
    if (posix_memalign(&ws_alloc, 256, give + (variant == 7 ? shift : 0)) != 0) fail("harness", "posix_memalign");
    void* p = static_cast<std::uint8_t*>(ws_alloc) + (variant == 7 ? shift : 0);
    if (call("SparsePrefill::set_workspace", [&] { op->set_workspace(p, give); }) != Outcome::kOk) return;
  }
  if (variant == 9) {
    // A plan of another selection of the same batch, replaced by the real one below.
    call("SparsePrefill::plan (first)", [&] { op->plan(plan_batch, plan_topk); });
  }

  Outcome planned;
  if (variant == 11 || c.max_k_len_bound >= 0) {
    const std::int64_t bound = c.max_k_len_bound >= 0 ? c.max_k_len_bound : (c.h.aux & 1 ? -1 - c.h.aux : 700);
    planned = call("SparsePrefill::plan(max_k_len)", [&] { op->plan(plan_batch, plan_topk, bound, nullptr); });
  } else {
    planned = call("SparsePrefill::plan", [&] { op->plan(plan_batch, plan_topk); });
  }

  if (variant == 13 || variant == 14) {
    msa::SparsePrefill moved(std::move(*op));
    switch (c.h.aux % 7) {
      case 0: moved_from_call("moved-from SparsePrefill::run", [&] { op->run(a); }); break;
      case 1: moved_from_call("moved-from SparsePrefill::plan", [&] { op->plan(plan_batch, plan_topk); }); break;
      case 2: moved_from_call("moved-from SparsePrefill::set_workspace", [&] { op->set_workspace(nullptr, 0); }); break;
      case 3: moved_from_call("moved-from SparsePrefill::plan_snapshot", [&] { (void)op->plan_snapshot(); }); break;
      case 4: moved_from_call("moved-from SparsePrefill::shape", [&] { (void)op->shape(); }); break;
      case 5: moved_from_call("moved-from SparsePrefill::options", [&] { (void)op->options(); }); break;
      default: break;
    }
    if (variant == 14) {
      *op = std::move(moved);  // back into the moved-from object
    } else {
      keep.emplace_back(std::move(moved));
      op = &keep.back();
    }
  }

  if (variant == 15 && planned == Outcome::kOk) {
    msa::K2qCsr snap;
    if (call("SparsePrefill::plan_snapshot", [&] { snap = op->plan_snapshot(); }) == Outcome::kOk && !c.hostile)
      check_plan(snap, c.shape, l.q_len, l.k_len, msa::plan_q_per_item(c.shape, snap.total_q, c.opt.q_per_item),
                 "SparsePrefill::plan_snapshot");
  }

  const char* what = mismatch ? "SparsePrefill::run (args differ from the plan)" : "SparsePrefill::run";
  const Outcome ran = call_checked(c, what, outs, [&] { op->run(a); });
  if (ran == Outcome::kOk) {
    if (planned != Outcome::kOk) fail("b", "SparsePrefill::run succeeded after a failed plan()");
    check_success(what);
  }

  // Last (nothing reads k_len after it): k_len from the flat caches' KV offsets, checked
  // against the differences it must hold (wrapped to 32 bits) when accepted.
  if (c.T[kCuK].spec.used) {
    const TensorView& cu = c.T[kCuK].view;
    const TensorView& len = c.T[kKLen].view;
    if (call_checked(c, "lengths_from_offsets", {kKLen}, [&] { msa::lengths_from_offsets(cu, len); }) == Outcome::kOk) {
      for (std::int64_t b = 0; b < len.dim(0); ++b) {
        const std::int64_t want = std::int64_t{cu.ptr<const std::int32_t>()[(b + 1) * cu.stride[0]]} -
                                  cu.ptr<const std::int32_t>()[b * cu.stride[0]];
        const std::int64_t out_step = len.dim(0) == 1 ? 0 : len.stride[0];
        if (len.ptr<const std::int32_t>()[b * out_step] != static_cast<std::int32_t>(want))
          fail("h", "lengths_from_offsets: lengths[" + std::to_string(b) + "] is not offsets[b + 1] - offsets[b]");
      }
    }
  }
}
}  // namespace msa_fuzz
