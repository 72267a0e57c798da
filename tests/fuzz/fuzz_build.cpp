// Problem builders (K/V, top-k rows, sinks, unseen-element planting), the FP64 attention oracle
// and the set-up every attention operator shares (tests/fuzz/fuzz_build.h).
#include "tests/fuzz/fuzz_build.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "cpu/reference.h"  // msa::cpu::sparse_prefill_gather: the FP64 oracle

namespace msa_fuzz {

// ---- problem builders ------------------------------------------------------------------

void set_ints(TSpec& s, std::vector<std::int32_t> vals, std::int32_t ifill) {
  s.fill = Fill::kInts;
  s.ivals = std::move(vals);
  s.ifill = ifill;
}

std::vector<std::int32_t> prefix(const std::vector<std::int32_t>& len) {
  std::vector<std::int32_t> cu(len.size() + 1, 0);
  for (std::size_t b = 0; b < len.size(); ++b) cu[b + 1] = cu[b] + len[b];
  return cu;
}

// Work estimate: query rows x heads x visible keys (capped by topk blocks).
std::int64_t cost_of(const std::vector<std::int32_t>& q_len, const std::vector<std::int64_t>& k_len,
                     std::int64_t heads, std::int64_t topk) {
  std::int64_t c = 0;
  const std::int64_t keys_cap = std::max<std::int64_t>(topk, 1) * msa::kBlockSize;
  for (std::size_t b = 0; b < q_len.size(); ++b)
    c += q_len[b] * std::max<std::int64_t>(heads, 1) * std::min(std::max<std::int64_t>(k_len[b], 1), keys_cap);
  return c;
}

void fit_budget(std::vector<std::int32_t>& q_len, const std::vector<std::int64_t>& k_len,
                std::int64_t heads, std::int64_t topk) {
  while (cost_of(q_len, k_len, heads, topk) > kCostBudget) {
    auto it = std::max_element(q_len.begin(), q_len.end());
    if (*it == 0) break;
    *it /= 2;
  }
}

// Paged or flat storage for B requests of cap[b] tokens: k (and v) [.., heads, .., d].
void build_kv(Ctx& c, Tid tk, Tid tv, std::int64_t heads, std::int64_t d, DType dt,
              const std::vector<std::int64_t>& cap) {
  const int layout = (c.h.layout & 7) % 6;
  const std::int64_t B = static_cast<std::int64_t>(cap.size());
  Rng& rng = c.rng;
  TSpec& k = c.T[tk].spec;
  if (c.page_size > 0) {
    const std::int64_t ps = c.page_size;
    std::vector<std::int64_t> used(static_cast<std::size_t>(B));
    std::int64_t pages = 0, max_pages = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      used[b] = (cap[b] + ps - 1) / ps;
      pages += used[b];
      max_pages = std::max(max_pages, used[b]);
    }
    const std::int64_t P = pages + ((c.h.outputs & 4) ? 1 + rng.below(3) : 0);
    std::vector<std::int32_t> perm(static_cast<std::size_t>(P));
    std::iota(perm.begin(), perm.end(), 0);
    for (std::int64_t i = P - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
    const std::int64_t cols = max_pages + ((c.h.outputs & 2) ? 1 + rng.below(3) : 0);
    std::vector<std::int32_t> table(static_cast<std::size_t>(B * cols));
    std::int64_t next = 0;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t p = 0; p < cols; ++p)
        table[b * cols + p] = p < used[b] ? perm[next++] : static_cast<std::int32_t>(rng.below(P + 8) - 4);
    set_shape(c.T[kPageTable].spec, DType::kInt32, {B, cols});
    set_ints(c.T[kPageTable].spec, std::move(table), 0);
    set_shape(k, dt, {P, heads, ps, d});
    switch (layout) {
      case 1: k.stride[0] = ps * heads * d; k.stride[1] = d; k.stride[2] = heads * d; break;
      case 2: {
        const std::int64_t row = d + 8;
        k.stride[2] = row;
        k.stride[1] = ps * row;
        k.stride[0] = heads * ps * row + 64;
        break;
      }
      case 3: k.stride[1] = 0; k.stride[0] = ps * d; break;
      case 4: k.stride[0] = 0; break;
      case 5: k.stride[0] = -k.stride[0]; break;
      default: break;
    }
  } else {
    std::vector<std::int32_t> cu(static_cast<std::size_t>(B + 1));
    const bool gaps = (c.h.outputs & 8) != 0;
    cu[0] = gaps ? static_cast<std::int32_t>(rng.below(5)) : 0;
    for (std::int64_t b = 0; b < B; ++b)
      cu[b + 1] = static_cast<std::int32_t>(cu[b] + cap[b] + (gaps ? rng.below(5) : 0));
    const std::int64_t total = cu[B] + (gaps ? rng.below(5) : 0);
    set_shape(c.T[kCuK].spec, DType::kInt32, {B + 1});
    set_ints(c.T[kCuK].spec, std::move(cu), 0);
    set_shape(k, dt, {total, heads, d});
    switch (layout) {
      case 2: k.stride[1] = d + 8; k.stride[0] = heads * (d + 8) + 16; break;
      case 3: k.stride[1] = 0; k.stride[0] = d; break;
      case 4: k.stride[0] = 0; break;
      case 5: k.stride[0] = -k.stride[0]; break;
      default: break;
    }
  }
  k.fill = Fill::kFloat;
  k.vmode = c.h.values % 5;
  if (tv != kNumT) c.T[tv].spec = k;
}

namespace {

// One top-k row of `width` slots for a query whose local block is `local` in a request of
// n_blocks blocks.
void gen_row(Rng& rng, int mode, int width, std::int64_t local, std::int64_t n_blocks, std::int32_t* out) {
  for (int s = 0; s < width; ++s) out[s] = -1;
  if (width <= 0) return;
  const auto contract = [&] {
    const std::int64_t n = local + 1;
    if (n <= width) {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(local));
      std::iota(ids.begin(), ids.end(), 0);
      for (std::int64_t i = local - 1; i > 0; --i) std::swap(ids[i], ids[rng.below(i + 1)]);
      for (std::int64_t s = 0; s < local; ++s) out[s] = ids[s];
      out[local] = static_cast<std::int32_t>(local);
      return;
    }
    int have = 0;
    while (have < width - 1) {
      const auto id = static_cast<std::int32_t>(rng.below(local));
      if (std::find(out, out + have, id) == out + have) out[have++] = id;
    }
    out[width - 1] = static_cast<std::int32_t>(local);
  };
  switch (mode) {
    case 1:
      for (int s = 0; s < width; ++s) {
        static constexpr std::int32_t kOdd[] = {-1, -2, INT32_MIN, INT32_MAX, 0};
        const std::int64_t pick = rng.below(8);
        out[s] = pick < 5 ? kOdd[pick] : static_cast<std::int32_t>(rng.below(n_blocks + 3) - (pick == 7 ? 1 : 0));
      }
      break;
    case 2: break;
    case 3:
      for (int s = 0; s < width && s < n_blocks; ++s) out[s] = s;
      break;
    case 4:
      for (int s = 0; s < width; ++s) out[s] = static_cast<std::int32_t>(local);
      break;
    case 5:
      contract();
      if (width > 1) std::swap(out[rng.below(width)], out[rng.below(width)]);
      break;
    default: contract(); break;
  }
}

}  // namespace

// topk [h_kv, rows, width] (head-major) or [rows, h_kv, width]; row r is query q_local of its
// request with local block pos / 128.
void build_topk(Ctx& c, Tid id, std::int64_t h_kv, std::int64_t width, const std::vector<std::int32_t>& q_len,
                const std::vector<std::int64_t>& k_len, bool head_major, int mode) {
  std::int64_t rows = 0;
  for (auto q : q_len) rows += q;
  TSpec& s = c.T[id].spec;
  const std::int64_t pad = (c.h.layout & 64) ? 3 : 0;
  if (head_major) set_shape(s, DType::kInt32, {h_kv, rows, width}, pad);
  else set_shape(s, DType::kInt32, {rows, h_kv, width}, pad);
  std::vector<std::int32_t> vals(static_cast<std::size_t>(std::max<std::int64_t>(h_kv, 0) * rows * std::max<std::int64_t>(width, 0)));
  std::vector<std::int32_t> row(static_cast<std::size_t>(std::max<std::int64_t>(width, 0)));
  std::int64_t r = 0;
  for (std::size_t b = 0; b < q_len.size(); ++b) {
    for (std::int32_t i = 0; i < q_len[b]; ++i, ++r) {
      const std::int64_t pos = k_len[b] - q_len[b] + i;
      for (std::int64_t g = 0; g < h_kv; ++g) {
        gen_row(c.rng, mode, static_cast<int>(width), std::max<std::int64_t>(pos, 0) / msa::kBlockSize,
                blocks_of(k_len[b]), row.data());
        for (std::int64_t s2 = 0; s2 < width; ++s2) {
          const std::int64_t lin = head_major ? (g * rows + r) * width + s2 : (r * h_kv + g) * width + s2;
          vals[lin] = row[s2];
        }
      }
    }
  }
  set_ints(s, std::move(vals), -1);
}

void build_sinks(Ctx& c, std::int64_t h_q) {
  const int mode = c.h.sinks % 7;
  if (mode == 0) return;
  TSpec& s = c.T[kSinks].spec;
  set_shape(s, DType::kFP32, {h_q});
  std::vector<std::int32_t> bits(static_cast<std::size_t>(std::max<std::int64_t>(h_q, 0)));
  for (auto& b : bits) {
    float f = c.rng.sym(3.f);
    int m = mode == 6 ? static_cast<int>(c.rng.below(6)) : mode;
    switch (m) {
      case 2: f = kNaN; c.nan_sinks = true; break;
      case 3: f = kInf; c.inf_sinks = true; break;
      case 4: f = -kInf; c.inf_sinks = true; break;
      case 5: f = (c.rng.next() & 1) ? 1e30f : -1e30f; c.huge_sinks = true; break;
      default: break;
    }
    std::memcpy(&b, &f, 4);
  }
  // Stored as int bit patterns through the int fill, viewed as fp32.
  set_ints(s, std::move(bits), 0);
  s.dtype = DType::kInt32;  // fill as ints; switched to fp32 below
}

// The int fill writes int32 patterns; tensors that carry float bits are retyped afterwards.
void retype_float_bits(Ctx& c, Tid id) {
  if (c.T[id].spec.used && c.T[id].view.rank != 0 && c.T[id].spec.dtype == DType::kInt32 &&
      c.T[id].spec.fill == Fill::kInts)
    c.T[id].view.dtype = DType::kFP32;
}

// K/V (and index K) elements no request can see: beyond k_len, unused pages, stride gaps.
// Plants NaN there (and in q's gaps) when the header asks; only for unmutated problems.
void plant_unseen(Ctx& c, Tid tk, Tid tv, const std::vector<std::int64_t>& k_len, std::int64_t heads,
                  std::int64_t d, Tid tq) {
  const int mode = c.h.plant % 4;
  if (mode == 0 || c.hostile) return;
  const Tensor& K = c.T[tk];
  if (!K.has_elems || K.view.data == nullptr) return;
  const std::int64_t n = K.hi - K.lo + 1;
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(n), 0);
  const TensorView& kv = K.view;
  const bool paged = c.T[kPageTable].spec.used;
  const TensorView& pt = c.T[kPageTable].view;
  const TensorView& cu = c.T[kCuK].view;
  for (std::size_t b = 0; b < k_len.size(); ++b) {
    for (std::int64_t t = 0; t < k_len[b]; ++t) {
      for (std::int64_t h = 0; h < heads; ++h) {
        std::int64_t off;
        if (paged) {
          const std::int64_t ps = kv.shape[2];
          const std::int64_t page = rd<std::int32_t>(pt.data, b * pt.stride[0] + (t / ps) * pt.stride[1]);
          off = page * kv.stride[0] + h * kv.stride[1] + (t % ps) * kv.stride[2];
        } else {
          off = (rd<std::int32_t>(cu.data, b * cu.stride[0]) + t) * kv.stride[0] + h * kv.stride[1];
        }
        for (std::int64_t j = 0; j < d; ++j) {
          const std::int64_t e = off + j - K.lo;
          if (e >= 0 && e < n) seen[e] = true;
        }
      }
    }
  }
  std::vector<std::int64_t> unseen;
  for (std::int64_t e = 0; e < n; ++e)
    if (!seen[e]) unseen.push_back(e);
  if (unseen.empty()) return;
  for (int i = 0; i < 4; ++i) {
    const std::int64_t e = unseen[c.rng.below(static_cast<std::int64_t>(unseen.size()))] + K.lo;
    if (mode & 1) store_f(c.T[tk].view.data, kv.dtype, e, kNaN);
    if ((mode & 2) && tv != kNumT) store_f(c.T[tv].view.data, kv.dtype, e, kNaN);
  }
  // q: elements of its span no logical index reaches (row padding).
  if (mode == 3 && tq != kNumT) {
    Tensor& Q = c.T[tq];
    if (!Q.has_elems || logical_count(Q.view) > kMaxIndexElems) return;
    std::vector<std::uint8_t> used(static_cast<std::size_t>(Q.hi - Q.lo + 1), 0);
    for_each_index(Q.view, [&](std::int64_t, std::int64_t off) { used[off - Q.lo] = true; });
    for (std::size_t e = 0; e < used.size(); ++e)
      if (!used[e]) store_f(Q.view.data, Q.view.dtype, static_cast<std::int64_t>(e) + Q.lo, kNaN);
  }
}

// ---- oracles ---------------------------------------------------------------------------

namespace {

struct OwnedOut {
  std::vector<std::uint8_t> out, lse;
  TensorView out_view, lse_view;
};

OwnedOut oracle_outputs(DType dt, std::int64_t rows, std::int64_t h_q, std::int64_t d) {
  OwnedOut o;
  o.out.assign(static_cast<std::size_t>(rows * h_q * d) * elem_size(dt) + 16, 0);
  o.lse.assign(static_cast<std::size_t>(rows * h_q) * 4 + 16, 0);
  o.out_view = TensorView::contiguous(o.out.data(), dt, {rows, h_q, d});
  o.lse_view = TensorView::contiguous(o.lse.data(), DType::kFP32, {rows, h_q});
  return o;
}

void compare_attention(const char* what, const TensorView& out, const TensorView& lse,
                       const OwnedOut& ref, std::int64_t rows, std::int64_t h_q, std::int64_t d) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t h = 0; h < h_q; ++h) {
      if (lse.rank > 0) {
        const float got = rd<float>(lse.data, r * lse.stride[0] + h * lse.stride[1]);
        const float want = rd<float>(ref.lse_view.data, r * h_q + h);
        const bool inf_g = std::isinf(got) && got < 0, inf_w = std::isinf(want) && want < 0;
        if (inf_g != inf_w || (!inf_w && !(std::fabs(got - want) <= 1e-3f)))
          fail("d", std::string(what) + ": lse[" + std::to_string(r) + ", " + std::to_string(h) +
                        "] = " + std::to_string(got) + ", the FP64 oracle gives " + std::to_string(want));
      }
      for (std::int64_t j = 0; j < d; ++j) {
        const float got = load_f(out.data, out.dtype, r * out.stride[0] + h * out.stride[1] + j * out.stride[2]);
        const float want = load_f(ref.out_view.data, out.dtype, (r * h_q + h) * d + j);
        if (!(std::fabs(got - want) <= 1e-2f + 1e-2f * std::fabs(want)))
          fail("d", std::string(what) + ": out[" + std::to_string(r) + ", " + std::to_string(h) + ", " +
                        std::to_string(j) + "] = " + std::to_string(got) + ", the FP64 oracle gives " +
                        std::to_string(want));
      }
    }
  }
}

}  // namespace

// Sparse prefill against msa::cpu::sparse_prefill_gather on the same arguments.
void prefill_oracle(Ctx& c, const msa::PrefillArgs& a, std::int64_t rows, const char* what) {
  if (!c.ordinary() || !injective(a.out) || (a.lse.rank > 0 && !injective(a.lse))) return;
  OwnedOut ref = oracle_outputs(a.out.dtype, rows, c.shape.h_q, c.shape.d);
  msa::PrefillArgs o = a;
  o.out = ref.out_view;
  o.lse = ref.lse_view;
  if (call("oracle sparse_prefill_gather", [&] { msa::cpu::sparse_prefill_gather(c.shape, o); }) != Outcome::kOk)
    fail("d", std::string(what) + " accepted arguments the oracle rejects");
  compare_attention(what, a.out, a.lse, ref, rows, c.shape.h_q, c.shape.d);
}

// ---- per-operator set-up ---------------------------------------------------------------

void decode_common(Ctx& c) {
  c.dt = (c.h.dtype & 1) ? DType::kFP16 : DType::kBF16;
  static constexpr int kPages[] = {16, 32, 64, 128, 0};
  c.page_size = kPages[c.h.page % 5];
  c.shape.h_kv = 1 + c.h.h_kv % 4;
  c.shape.h_q = c.shape.h_kv * (1 + c.h.group % 16);
  c.shape.d = 128;
  c.shape.topk = 1 + c.h.topk % 32;
  c.opt.strict = (c.h.strict & 1) != 0;
  if (c.h.values % 5 == 1 || c.h.values % 5 == 2) c.extreme = true;
}

Lens read_lens(Ctx& c, int B, int max_q) {
  Lens l;
  for (int b = 0; b < B; ++b) {
    const std::int32_t q = c.r.u8() % (max_q + 1);
    const std::int64_t extra = c.r.u16() % 701;
    l.q_len.push_back(q);
    l.k_len.push_back(std::min<std::int64_t>(700, q + extra));
  }
  return l;
}

// q, out, lse, sinks of an attention call with `rows` query rows.
void build_attention_io(Ctx& c, std::int64_t rows) {
  const std::int64_t h_q = c.shape.h_q, d = c.shape.d;
  TSpec& q = c.T[kQ].spec;
  set_shape(q, c.dt, {rows, h_q, d}, (c.h.layout & 8) ? 8 : 0);
  q.fill = Fill::kFloat;
  q.vmode = c.h.values % 5;
  TSpec& out = c.T[kOut].spec;
  set_shape(out, c.dt, {rows, h_q, d}, (c.h.layout & 16) ? 8 : 0);
  out.fill = Fill::kOutput;
  if (!(c.h.outputs & 1)) {
    TSpec& lse = c.T[kLse].spec;
    set_shape(lse, DType::kFP32, {rows, h_q}, (c.h.layout & 32) ? 1 : 0);
    lse.fill = Fill::kOutput;
  }
  build_sinks(c, h_q);
}

msa::VarlenBatch batch_of(Ctx& c, Tid cu, Tid kl) { return {c.T[cu].view, c.T[kl].view}; }

msa::KvCache kv_of(Ctx& c, Tid k, Tid v) {
  msa::KvCache kv;
  kv.k = c.T[k].view;
  if (v != kNumT) kv.v = c.T[v].view;
  if (c.T[kPageTable].spec.used) kv.page_table = c.T[kPageTable].view;
  if (c.T[kCuK].spec.used) kv.cu_seqlens_k = c.T[kCuK].view;
  return kv;
}

}  // namespace msa_fuzz
