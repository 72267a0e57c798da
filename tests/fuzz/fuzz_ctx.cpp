// Ctx's mutations, materialisation and invariant checks (tests/fuzz/fuzz_ctx.h).
#include "tests/fuzz/fuzz_ctx.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace msa_fuzz {

void Ctx::read_mutations() {
  while (!r.empty() && static_cast<int>(muts.size()) < kMaxMutations) {
    Mutation m{};
    m.target = r.u8() % (kNumT + 2);
    m.field = r.u8();
    m.v1 = hostile_int(r);
    if ((m.field & 0x0f) % 9 == 8 && m.target < kNumT) m.v2 = hostile_int(r);
    muts.push_back(m);
  }
}

// Shape mutations flagged "pre" (field bit 7) feed the tensor shapes too; the rest apply to
// the operator only, after the tensors are built. Values of "pre" mutations are small.
void Ctx::apply_shape_mutations(bool pre) {
  for (const Mutation& m : muts) {
    if (m.target != kNumT || ((m.field & 0x80) != 0) != pre) continue;
    hostile = true;
    const std::int64_t v = m.v1;
    const std::uint64_t u = static_cast<std::uint64_t>(v);
    const int small = static_cast<int>(u % 41);
    switch ((m.field & 0x7f) % 10) {
      case 0: shape.h_q = pre ? small * 4 : static_cast<int>(v); break;
      case 1: shape.h_kv = pre ? static_cast<int>(u % 9) : static_cast<int>(v); break;
      case 2: {
        static constexpr int kDims[] = {0, 1, 8, 64, 127, 128, 129, 256, 96, 192};
        shape.d = pre ? kDims[u % 10] : static_cast<int>(v);
        break;
      }
      case 3: shape.topk = pre ? small : static_cast<int>(v); break;
      case 4: shape.scale = hostile_float(v); extreme = true; break;
      case 5: shape.h_q = static_cast<int>(static_cast<std::int64_t>(shape.h_kv) * static_cast<int>(u % 40)); break;
      case 6: h_i = pre ? 1 + small % 8 : static_cast<int>(v); break;
      case 7: idx_scale = hostile_float(v); extreme = true; break;
      case 8: topk_op = pre ? small : static_cast<int>(v); break;
      case 9: {
        static constexpr int kDims[] = {64, 256, 0, -128, 1};
        shape.d = kDims[u % 5];
        break;
      }
    }
  }
}

void Ctx::apply_option_mutations() {
  for (const Mutation& m : muts) {
    if (m.target != kNumT + 1) continue;
    hostile = true;
    const std::int64_t v = m.v1;
    switch (m.field % 8) {
      case 0: opt.backend = static_cast<msa::Backend>(static_cast<std::uint8_t>(v)); break;
      case 1: opt.prefill_path = static_cast<msa::PrefillPath>(static_cast<std::uint8_t>(v)); break;
      case 2: opt.q_per_item = static_cast<int>(v); break;
      case 3: opt.strict = !opt.strict; break;
      case 4: q_per_request = static_cast<int>(v); break;
      case 5: head_major = !head_major; break;
      case 6: opt.backend = msa::Backend::kCuda; break;
      case 7: max_k_len_bound = v; break;
    }
  }
}

void Ctx::apply_tensor_mutations() {
  for (const Mutation& m : muts) {
    if (m.target >= kNumT) continue;
    TSpec& s = T[m.target].spec;
    if (!s.used) continue;
    hostile = true;
    const int i = (m.field >> 4) & 3;
    const std::uint64_t u = static_cast<std::uint64_t>(m.v1);
    switch ((m.field & 0x0f) % 9) {
      case 0: s.present = !s.present; break;
      case 1: {
        static constexpr int kRanks[] = {0, 1, 2, 3, 4, 5, -1, 1000, INT32_MAX, INT32_MIN};
        s.rank_override = true;
        s.rank_value = kRanks[u % 10];
        break;
      }
      case 2: s.shape[i] = m.v1; break;
      case 3: s.stride[i] = m.v1; break;
      case 4: {
        static constexpr DType kTypes[] = {DType::kBF16, DType::kFP16, DType::kFP32, DType::kInt32,
                                           static_cast<DType>(7)};
        s.dtype = kTypes[u % 5];
        break;
      }
      case 5: s.device = static_cast<Device>(u % 3); break;
      case 6: s.misalign = static_cast<int>(u % 64); break;
      case 7: s.null_data = true; break;
      case 8: break;  // element writes: after materialisation
    }
  }
}

// Allocates and fills every used tensor. False: a span is too large (skip the input).
bool Ctx::materialize_all() {
  for (int t = 0; t < kNumT; ++t)
    if (T[t].spec.used && !materialize(T[t])) return false;
  return true;
}

void Ctx::apply_element_writes() {
  for (const Mutation& m : muts) {
    if (m.target >= kNumT || (m.field & 0x0f) % 9 != 8) continue;
    Tensor& t = T[m.target];
    if (!t.spec.used) continue;
    hostile = true;
    const std::int64_t n = logical_count(t.view);
    if (n == 0 || n > kMaxIndexElems || t.view.data == nullptr) continue;
    const std::int64_t want = static_cast<std::int64_t>(static_cast<std::uint64_t>(m.v1) % static_cast<std::uint64_t>(n));
    std::int64_t off = 0;
    for_each_index(t.view, [&](std::int64_t lin, std::int64_t o) {
      if (lin == want) off = o;
    });
    // Only inside the allocation: a rank override after materialize() can make a view of
    // no elements (a 1-byte allocation) look like one with elements.
    const auto* at = static_cast<const std::uint8_t*>(t.view.data) + off * static_cast<std::int64_t>(elem_size(t.view.dtype));
    if (!t.has_elems || at < t.alloc || at + elem_size(t.view.dtype) > t.alloc + t.alloc_bytes) continue;
    if (t.view.dtype == DType::kInt32) {
      wr<std::int32_t>(t.view.data, off, static_cast<std::int32_t>(m.v2));
    } else {
      const float f = hostile_float(m.v2);
      store_f(t.view.data, t.view.dtype, off, f);
      // What the tensor now holds: 1e30 written to an fp16 tensor is inf there.
      const float held = load_f(t.view.data, t.view.dtype, off);
      if (std::isnan(held) || std::isinf(held)) {
        const bool neg_inf_ok = (m.target == kLsePartial || m.target == kScores) && held == -kInf;
        if (!neg_inf_ok) nonfinite = true;
      }
      if (std::fabs(f) > 2.f) extreme = true;
    }
  }
}

// Snapshot of every output allocation, for the "no byte changed" checks.
void Ctx::snapshot(std::initializer_list<Tid> outs) {
  for (Tid id : outs) {
    Tensor& t = T[id];
    t.snap.assign(t.alloc, t.alloc + t.alloc_bytes);
  }
}

void Ctx::expect_unchanged(std::initializer_list<Tid> outs, const char* call, const std::string& why) {
  for (Tid id : outs) {
    const Tensor& t = T[id];
    if (!t.spec.used || t.snap.size() != t.alloc_bytes) continue;
    if (t.alloc_bytes && std::memcmp(t.snap.data(), t.alloc, t.alloc_bytes) != 0)
      fail("b", std::string(call) + " threw msa::Error (" + why + ") but changed output " + kTname[id]);
  }
}

// Invariant g: bytes of an output allocation outside its view's elements are untouched.
void Ctx::expect_outside_untouched(std::initializer_list<Tid> outs, const char* call) {
  for (Tid id : outs) {
    const Tensor& t = T[id];
    if (!t.spec.used || t.snap.size() != t.alloc_bytes || t.alloc_bytes == 0) continue;
    const std::int64_t n = logical_count(t.view);
    if (n > kMaxIndexElems) continue;
    const std::int64_t es = static_cast<std::int64_t>(elem_size(t.view.dtype));
    std::vector<std::uint8_t> covered(t.alloc_bytes, 0);
    const std::int64_t base = static_cast<std::uint8_t*>(t.view.data) - t.alloc;
    if (t.view.rank > 0 && t.view.rank <= 4) {
      for_each_index(t.view, [&](std::int64_t, std::int64_t off) {
        const std::int64_t b = base + off * es;
        for (std::int64_t k = 0; k < es; ++k)
          if (b + k >= 0 && b + k < static_cast<std::int64_t>(t.alloc_bytes)) covered[b + k] = true;
      });
    }
    for (std::size_t k = 0; k < t.alloc_bytes; ++k)
      if (!covered[k] && t.alloc[k] != t.snap[k])
        fail("g", std::string(call) + " succeeded but wrote byte " + std::to_string(k) +
                      " of output " + kTname[id] + " outside the view's elements");
  }
}

// Invariant f: every present tensor argument of a successful call keeps the layout rules.
void Ctx::expect_layout_ok(std::initializer_list<Tid> args, const char* call) {
  for (Tid id : args) {
    const TensorView& v = T[id].view;
    if (!T[id].spec.used || v.rank <= 0) continue;
    if (v.rank > msa::kMaxRank)
      fail("f", std::string(call) + " accepted " + kTname[id] + " with rank " + std::to_string(v.rank));
    if (v.device != Device::kCpu)
      fail("f", std::string(call) + " accepted " + kTname[id] + " on a non-CPU device");
    if (v.dtype != DType::kFP32 && v.dtype != DType::kInt32 && v.dtype != DType::kBF16 &&
        v.dtype != DType::kFP16)
      fail("f", std::string(call) + " accepted " + kTname[id] + " with an unknown dtype");
    const int dims = v.rank;
    for (int i = 0; i < dims; ++i)
      if (v.shape[i] < 0)
        fail("f", std::string(call) + " accepted " + kTname[id] + " with negative extent shape[" +
                      std::to_string(i) + "] = " + std::to_string(v.shape[i]));
    if (logical_count(v) == 0) continue;
    for (int i = 0; i < dims; ++i) {
      if (v.shape[i] > 1 && v.stride[i] < 0)
        fail("f", std::string(call) + " accepted " + kTname[id] + " with negative stride[" +
                      std::to_string(i) + "] = " + std::to_string(v.stride[i]));
    }
    // Batch vectors (int32 [B] / [B + 1]) may be strided (e.g. a column of a larger table) but
    // need stride >= 1; every other tensor needs a contiguous last dim.
    const bool batch_vector = id == kCuQ || id == kKLen || id == kCuK || id == kSeqLen || id == kCuQ2 || id == kKLen2;
    if (batch_vector && v.shape[0] > 1 && v.stride[0] < 1)
      fail("f", std::string(call) + " accepted batch vector " + kTname[id] + " with stride " +
                    std::to_string(v.stride[0]) + " (extent " + std::to_string(v.shape[0]) + ")");
    if (!batch_vector && v.shape[dims - 1] > 1 && v.stride[dims - 1] != 1)
      fail("f", std::string(call) + " accepted " + kTname[id] + " with last-dim stride " +
                    std::to_string(v.stride[dims - 1]) + " (extent " + std::to_string(v.shape[dims - 1]) + ")");
    const std::size_t align = elem_size(v.dtype) == 2 ? 16 : elem_size(v.dtype);
    if (reinterpret_cast<std::uintptr_t>(v.data) % align != 0)
      fail("f", std::string(call) + " accepted " + kTname[id] + " with a misaligned pointer (" +
                    std::to_string(reinterpret_cast<std::uintptr_t>(v.data) % 64) + " mod 64)");
  }
}

void Ctx::expect_no_nan(Tid id, const char* call) {
  const Tensor& t = T[id];
  if (!t.spec.used || t.view.rank <= 0 || t.view.data == nullptr) return;
  if (logical_count(t.view) > kMaxIndexElems) return;
  std::int64_t bad = -1;
  for_each_index(t.view, [&](std::int64_t lin, std::int64_t off) {
    if (bad < 0 && std::isnan(load_f(t.view.data, t.view.dtype, off))) bad = lin;
  });
  if (bad >= 0)
    fail("c", std::string(call) + " succeeded on finite inputs but " + kTname[id] +
                  " holds NaN at linear index " + std::to_string(bad));
}

bool Ctx::materialize(Tensor& t) {
  TSpec& s = t.spec;
  TensorView v;
  v.dtype = s.dtype;
  v.device = s.device;
  v.rank = s.present ? s.rank : 0;
  for (int i = 0; i < 4; ++i) {
    v.shape[i] = s.shape[i];
    v.stride[i] = s.stride[i];
  }
  const std::int64_t es = static_cast<std::int64_t>(elem_size(s.dtype));
  const int dims = std::clamp(v.rank, 0, 4);
  bool elems = dims > 0;
  __int128 lo = 0, hi = 0;
  for (int i = 0; i < dims && elems; ++i) {
    if (v.shape[i] <= 0) {
      elems = false;
      break;
    }
    const __int128 span = static_cast<__int128>(v.shape[i] - 1) * v.stride[i];
    if (span > (static_cast<__int128>(1) << 80) || span < -(static_cast<__int128>(1) << 80)) return false;
    (span < 0 ? lo : hi) += span;
  }
  if (elems && (hi - lo + 1) * es > kMaxSpanBytes) return false;
  t.has_elems = elems;
  t.lo = elems ? static_cast<std::int64_t>(lo) : 0;
  t.hi = elems ? static_cast<std::int64_t>(hi) : -1;
  if (!s.present || s.null_data) {
    v.data = nullptr;
    if (s.rank_override) v.rank = s.rank_value;
    t.view = v;
    return true;
  }
  const std::int64_t front = -t.lo * es;
  const std::int64_t pad = front % 64 ? 64 - front % 64 : 0;
  const std::int64_t body = elems ? (t.hi - t.lo + 1) * es : 0;
  t.alloc_bytes = static_cast<std::size_t>(pad + s.misalign + body);
  void* p = nullptr;
  if (posix_memalign(&p, 64, t.alloc_bytes) != 0 || p == nullptr) fail("harness", "posix_memalign");
  t.alloc = static_cast<std::uint8_t*>(p);
  v.data = t.alloc + pad + s.misalign + front;
  t.view = v;
  fill(t);
  if (s.rank_override) t.view.rank = s.rank_value;
  return true;
}

void Ctx::fill(Tensor& t) {
  const TSpec& s = t.spec;
  const TensorView& v = t.view;
  // Slack bytes (alignment pad, misalignment) get a pattern too.
  std::memset(t.alloc, 0xA5, t.alloc_bytes);
  if (!t.has_elems) return;
  const std::int64_t n = t.hi - t.lo + 1;
  switch (s.fill) {
    case Fill::kFloat:
      for (std::int64_t i = 0; i < n; ++i) store_f(v.data, v.dtype, t.lo + i, value(s.vmode, v.dtype));
      break;
    case Fill::kOutput:
      for (std::int64_t i = 0; i < n; ++i) {
        if (v.dtype == DType::kInt32) {
          wr<std::int32_t>(v.data, t.lo + i, -77);
        } else {
          store_f(v.data, v.dtype, t.lo + i, 7.f);
        }
      }
      break;
    case Fill::kInts:
      if (v.dtype != DType::kInt32) {
        for (std::int64_t i = 0; i < n; ++i) store_f(v.data, v.dtype, t.lo + i, static_cast<float>(s.ifill));
        break;
      }
      for (std::int64_t i = 0; i < n; ++i) wr<std::int32_t>(v.data, t.lo + i, s.ifill);
      if (logical_count(v) <= kMaxIndexElems) {
        for_each_index(v, [&](std::int64_t lin, std::int64_t off) {
          wr<std::int32_t>(v.data, off, lin < static_cast<std::int64_t>(s.ivals.size()) ? s.ivals[lin] : s.ifill);
        });
      }
      break;
  }
}

float Ctx::value(int vmode, DType t) {
  const float big = t == DType::kFP16 ? 60000.f : t == DType::kBF16 ? 1e30f : 1e30f;
  switch (vmode) {
    case 1: return (rng.next() & 1 ? 1.f : -1.f) * big * (0.5f + 0.5f * rng.unit());
    case 2: return (rng.next() & 15) == 0 ? (rng.next() & 1 ? big : -big) : rng.sym(0.433f);
    case 3: return 0.f;
    case 4: return rng.sym(1e-30f);
    default: return rng.sym(0.433f);  // uniform with standard deviation 0.25
  }
}

}  // namespace msa_fuzz
