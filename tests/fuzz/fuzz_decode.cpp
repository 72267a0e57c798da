// The SparseDecode operator and sparse_decode() under fuzzing (Op kOpDecode).
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

// Variants (% 8): 0 run; 1 sparse_decode(); 2 workspace_bytes + set_workspace; 3 plan with
// hostile arguments; 4 moved-from; 5 run twice (bitwise reproducible); 6 plan with another B
// than the run's; 7 plan with a max_seq_len below the run's longest request.
void op_decode(Ctx& c) {
  decode_common(c);
  const int B = 1 + c.h.batch % 4;
  c.q_per_request = 1 + c.h.aux % 16;
  c.head_major = (c.h.variant & 8) != 0;
  std::vector<std::int64_t> seq(static_cast<std::size_t>(B));
  for (int b = 0; b < B; ++b) seq[b] = c.q_per_request + c.r.u16() % (701 - c.q_per_request);
  c.read_mutations();
  c.apply_shape_mutations(true);
  c.apply_option_mutations();
  const int variant = c.h.variant % 8;
  const std::int64_t h_kv = std::max(c.shape.h_kv, 0), h_q = std::max(c.shape.h_q, 0);
  const std::int64_t width = std::max(c.shape.topk, 0);
  const std::int64_t Q = std::clamp(c.q_per_request, 0, 16);
  std::vector<std::int32_t> ql(static_cast<std::size_t>(B), static_cast<std::int32_t>(Q));
  while (cost_of(ql, seq, h_q, width) > kCostBudget) {  // shorter requests, each still >= Q
    auto it = std::max_element(seq.begin(), seq.end());
    if (*it / 2 < std::max<std::int64_t>(Q, 1)) break;
    *it /= 2;
  }
  if (cost_of(ql, seq, h_q, width) > 2 * kCostBudget) return;
  const std::int64_t rows = B * Q;

  build_kv(c, kK, kV, h_kv, c.shape.d, c.dt, seq);
  set_shape(c.T[kSeqLen].spec, DType::kInt32, {B});
  set_ints(c.T[kSeqLen].spec, std::vector<std::int32_t>(seq.begin(), seq.end()), static_cast<std::int32_t>(seq[0]));
  build_topk(c, kTopk, h_kv, width, ql, seq, c.head_major, c.h.selection % 6);
  build_attention_io(c, rows);
  c.apply_tensor_mutations();
  if (!c.materialize_all()) return;
  retype_float_bits(c, kSinks);
  c.apply_element_writes();
  c.apply_shape_mutations(false);
  plant_unseen(c, kK, kV, seq, h_kv, c.shape.d, kQ);

  msa::DecodeArgs a;
  a.q = c.T[kQ].view;
  a.kv = kv_of(c, kK, kV);
  a.seq_len = c.T[kSeqLen].view;
  a.topk = c.T[kTopk].view;
  a.topk_head_major = c.head_major;
  a.q_per_request = c.q_per_request;
  a.sinks = c.T[kSinks].view;
  a.out = c.T[kOut].view;
  a.lse = c.T[kLse].view;
  const auto outs = {kOut, kLse};
  const auto inputs = {kQ, kK, kV, kPageTable, kCuK, kSeqLen, kTopk, kSinks, kOut, kLse};

  auto check_success = [&](const char* what) {
    c.expect_layout_ok(inputs, what);
    if (c.finite_inputs()) {
      c.expect_no_nan(kOut, what);
      c.expect_no_nan(kLse, what);
    }
    if (!c.ordinary() || !injective(a.out) || (a.lse.rank > 0 && !injective(a.lse))) return;
    // The same math as a prefill of B requests of Q queries (spec §4) on the FP64 oracle.
    std::vector<std::int32_t> cu(static_cast<std::size_t>(B + 1));
    for (int b = 0; b <= B; ++b) cu[b] = static_cast<std::int32_t>(b * Q);
    msa::PrefillArgs p;
    p.q = a.q;
    p.kv = a.kv;
    p.batch.cu_seqlens_q = TensorView::contiguous(cu.data(), DType::kInt32, {B + 1});
    p.batch.k_len = a.seq_len;
    p.topk = a.topk;
    if (!a.topk_head_major) {
      std::swap(p.topk.shape[0], p.topk.shape[1]);
      std::swap(p.topk.stride[0], p.topk.stride[1]);
    }
    p.sinks = a.sinks;
    p.out = a.out;
    p.lse = a.lse;
    prefill_oracle(c, p, rows, what);
  };

  if (variant == 1) {
    if (call_checked(c, "sparse_decode", outs, [&] { msa::sparse_decode(c.shape, a, c.opt); }) == Outcome::kOk)
      check_success("sparse_decode");
    return;
  }
  std::vector<msa::SparseDecode> keep;
  keep.reserve(2);
  if (call("SparseDecode(shape, options)", [&] { keep.emplace_back(c.shape, c.opt); }) != Outcome::kOk) return;
  msa::SparseDecode* op = &keep.back();
  if (variant == 2) {
    std::size_t bytes = 0;
    const msa::ProblemSize ps{B, rows, 700};
    call("SparseDecode::workspace_bytes", [&] { bytes = msa::SparseDecode::workspace_bytes(c.shape, ps, c.opt); });
    std::vector<std::uint8_t> ws(bytes + 1);
    call("SparseDecode::set_workspace", [&] { op->set_workspace(ws.data() + (c.h.aux & 1), bytes); });
  }
  if (variant == 3) {
    call("SparseDecode::plan(hostile)", [&] { op->plan(-1 - c.h.aux, c.h.aux - 3, -5, nullptr); });
  }
  if (variant == 6) {
    call("SparseDecode::plan(other B)", [&] { op->plan(B + 1 + (c.h.aux & 1) * -2, c.q_per_request, 700, nullptr); });
  } else if (variant == 7) {
    std::int64_t longest = 0;
    for (auto sl : seq) longest = std::max(longest, sl);
    call("SparseDecode::plan(short max_seq_len)", [&] { op->plan(B, c.q_per_request, longest / 2, nullptr); });
  } else {
    call("SparseDecode::plan", [&] { op->plan(B, c.q_per_request, 700, nullptr); });
  }
  if (variant == 4) {
    msa::SparseDecode moved(std::move(*op));
    switch (c.h.aux % 4) {
      case 0: moved_from_call("moved-from SparseDecode::run", [&] { op->run(a); }); break;
      case 1: moved_from_call("moved-from SparseDecode::plan", [&] { op->plan(B, 1, 700, nullptr); }); break;
      case 2: moved_from_call("moved-from SparseDecode::set_workspace", [&] { op->set_workspace(nullptr, 0); }); break;
      default: break;
    }
    keep.emplace_back(std::move(moved));
    op = &keep.back();
  }
  if (call_checked(c, "SparseDecode::run", outs, [&] { op->run(a); }) != Outcome::kOk) return;
  check_success("SparseDecode::run");
  if (variant == 5) {
    const std::vector<std::uint8_t> first(c.T[kOut].alloc, c.T[kOut].alloc + c.T[kOut].alloc_bytes);
    if (call("SparseDecode::run (again)", [&] { op->run(a); }) != Outcome::kOk)
      fail("b", "SparseDecode::run failed on the arguments it accepted before");
    if (!c.hostile && std::memcmp(first.data(), c.T[kOut].alloc, first.size()) != 0 && injective(a.out))
      fail("d", "SparseDecode::run is not bitwise reproducible");
  }
}
}  // namespace msa_fuzz
