// Size queries and TensorView factories with hostile numbers (Ops kOpSizes, kOpTensorView).
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

#include "core/validate.h"  // msa::validate_shape
#include "tests/fuzz/fuzz_build.h"
#include "tests/fuzz/fuzz_ops.h"

namespace msa_fuzz {

// validate_shape, k2q_sizes, workspace_bytes with hostile numbers.
void op_sizes(Ctx& c) {
  Reader& r = c.r;
  msa::AttentionShape s;
  s.h_q = static_cast<int>(hostile_int(r));
  s.h_kv = static_cast<int>(hostile_int(r));
  s.d = (c.h.variant & 1) ? 128 : static_cast<int>(hostile_int(r));
  s.topk = static_cast<int>(hostile_int(r));
  s.scale = (c.h.variant & 2) ? hostile_float(hostile_int(r)) : 0.f;
  if (c.h.variant & 4) {  // mostly valid shapes, hostile problem sizes
    s.h_kv = 1 + c.h.h_kv % 4;
    s.h_q = s.h_kv * (1 + c.h.group % 16);
    s.topk = 1 + c.h.topk % 32;
    s.d = 128;
  }
  msa::ProblemSize ps;
  ps.batch = hostile_int(r);
  ps.total_q = hostile_int(r);
  ps.max_k_len = hostile_int(r);
  const int qpi = static_cast<int>(hostile_int(r));
  msa::Options o;
  o.backend = (c.h.variant & 8) ? static_cast<msa::Backend>(c.h.aux) : msa::Backend::kCpu;
  o.prefill_path = (c.h.variant & 16) ? static_cast<msa::PrefillPath>(c.h.aux) : msa::PrefillPath::kAuto;
  o.q_per_item = qpi;

  if (call("validate_shape", [&] { msa::validate_shape(s); }) == Outcome::kOk) {
    const bool ok = s.h_q >= 1 && s.h_kv >= 1 && s.h_q % s.h_kv == 0 && s.h_q / s.h_kv <= 16 && s.d == 128 &&
                    s.topk >= 1 && s.topk <= 32 && std::isfinite(s.scale) && s.scale >= 0.f;
    if (!ok) fail("h", "validate_shape accepted an invalid shape");
  }
  msa::K2qSizes ks{};
  if (call("k2q_sizes", [&] { ks = msa::k2q_sizes(s, ps, qpi); }) == Outcome::kOk) {
    if (ps.batch >= 0 && ps.total_q >= 0 && ps.max_k_len >= 0 && s.topk >= 1 && s.h_kv >= 1) {
      const __int128 rows = static_cast<__int128>(ps.batch) * ((static_cast<__int128>(ps.max_k_len) + 127) / 128);
      const __int128 edges = static_cast<__int128>(ps.total_q) * s.topk;
      if (ks.max_rows != rows || ks.edges_per_head != edges)
        fail("h", "k2q_sizes wrapped: max_rows " + std::to_string(ks.max_rows) + ", edges_per_head " +
                      std::to_string(ks.edges_per_head));
      if (ks.work_capacity < 0) fail("h", "k2q_sizes: negative work capacity");
    }
  }
  std::size_t w = 0;
  if (call("SparsePrefill::workspace_bytes", [&] { w = msa::SparsePrefill::workspace_bytes(s, ps, o); }) == Outcome::kOk) {
    if (ps.total_q < 0 || ps.batch < 0 || ps.max_k_len < 0)
      fail("h", "SparsePrefill::workspace_bytes accepted a negative problem size");
    // Every block-major prefill keeps at least one FP32 lse partial per (query, head).
    const __int128 floor = static_cast<__int128>(ps.total_q) * s.h_q * 4;
    if (static_cast<__int128>(w) < floor)
      fail("h", "SparsePrefill::workspace_bytes = " + std::to_string(w) + " is below total_q * h_q * 4 (wrapped)");
  }
  call("SparseDecode::workspace_bytes", [&] { (void)msa::SparseDecode::workspace_bytes(s, ps, o); });
  call("backend_name", [&] { (void)msa::backend_name(o.backend); });
  call("prefill_path_name", [&] { (void)msa::prefill_path_name(o.prefill_path); });
  call("dtype_name", [&] { (void)msa::dtype_name(static_cast<DType>(c.h.aux)); });
}

// TensorView factories and queries with hostile ranks and extents.
void op_tensor_view(Ctx& c) {
  Reader& r = c.r;
  const int n = c.h.aux % 7;
  std::int64_t e[6], st[6];
  for (int i = 0; i < 6; ++i) e[i] = hostile_int(r);
  for (int i = 0; i < 6; ++i) st[i] = hostile_int(r);
  static std::uint8_t storage[64];
  void* p = storage;
  const DType dt = static_cast<DType>(c.h.dtype % 5);
  TensorView t;
  const auto make = [&] {
    if (c.h.variant & 1) {
      switch (n) {
        case 0: t = TensorView::strided(p, dt, {}, {}); break;
        case 1: t = TensorView::strided(p, dt, {e[0]}, {st[0]}); break;
        case 2: t = TensorView::strided(p, dt, {e[0], e[1]}, {st[0], st[1]}); break;
        case 3: t = TensorView::strided(p, dt, {e[0], e[1], e[2]}, {st[0], st[1]}); break;
        case 4: t = TensorView::strided(p, dt, {e[0], e[1], e[2], e[3]}, {st[0], st[1], st[2], st[3]}); break;
        case 5: t = TensorView::strided(p, dt, {e[0], e[1], e[2], e[3], e[4]}, {st[0], st[1], st[2], st[3], st[4]}); break;
        default: t = TensorView::strided(p, dt, {e[0], e[1], e[2], e[3], e[4], e[5]}, {st[0]}); break;
      }
    } else {
      switch (n) {
        case 0: t = TensorView::contiguous(p, dt, {}); break;
        case 1: t = TensorView::contiguous(p, dt, {e[0]}); break;
        case 2: t = TensorView::contiguous(p, dt, {e[0], e[1]}); break;
        case 3: t = TensorView::contiguous(p, dt, {e[0], e[1], e[2]}); break;
        case 4: t = TensorView::contiguous(p, dt, {e[0], e[1], e[2], e[3]}); break;
        case 5: t = TensorView::contiguous(p, dt, {e[0], e[1], e[2], e[3], e[4]}); break;
        default: t = TensorView::contiguous(p, dt, {e[0], e[1], e[2], e[3], e[4], e[5]}); break;
      }
    }
  };
  if (call("TensorView factory", make) != Outcome::kOk) return;
  if (n > msa::kMaxRank) fail("h", "TensorView factory accepted rank " + std::to_string(n));
  if (c.h.variant & 2) {
    static constexpr int kRanks[] = {-1, 5, 1000, INT32_MIN, INT32_MAX, -5, 4, 0};
    t.rank = kRanks[c.h.topk % 8];
  }
  // The view lives on the heap with its exact size, so reads past it are reported.
  auto* heap = new TensorView(t);
  call("TensorView::numel", [&] { (void)heap->numel(); });
  call("TensorView::is_contiguous", [&] { (void)heap->is_contiguous(); });
  call("TensorView::last_dim_contiguous", [&] { (void)heap->last_dim_contiguous(); });
  call("TensorView::shape_string", [&] { (void)heap->shape_string(); });
  call("TensorView::present", [&] { (void)heap->present(); });
  delete heap;
}
}  // namespace msa_fuzz
