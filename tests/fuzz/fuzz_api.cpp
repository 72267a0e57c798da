// Coverage-guided fuzz target (libFuzzer) of the public msa API on the CPU backend.
//
// One input is one call (or one short sequence of calls) of the API: a fixed 20-byte header
// (struct Header below; tests/fuzz/make_corpus.py writes the seeds with the same layout), then
// per-request lengths, then up to kMaxMutations "mutations" that make the arguments hostile
// (a tensor's shape, stride, rank, dtype, device, alignment, presence or one element; the
// attention shape; the options). Tensor values come from an RNG seeded by the header, so inputs
// stay small.
//
// Memory truth: every TensorView the harness builds points into a buffer the harness owns that
// spans exactly the elements the view can reach from its shape and strides (negative and zero
// strides included), so AddressSanitizer sees any read or write outside a view. Inputs whose
// reachable span is too large are skipped (return -1).
//
// Invariants (a violation aborts with "==msa_fuzz== INVARIANT ..." on stderr):
//   a. no exception other than msa::Error escapes the API;
//   b. an msa::Error names a non-empty argument and value, and no output byte has changed;
//   c. on success with finite inputs (no NaN/inf in data the call can see; sinks not NaN unless
//      MSA_FUZZ_ALLOW_NAN_SINKS=1), no output holds a NaN;
//   d. on success with ordinary inputs (|values| < 0.5, default scale, finite moderate sinks, no
//      mutation): SparsePrefill and SparseDecode match the FP64 oracle
//      msa::cpu::sparse_prefill_gather (out: 1e-2 + 1e-2 |ref|, lse: 1e-3, same -inf
//      positions); the indexer, top-k and combine match the harness's own FP64 oracles;
//   e. (libFuzzer flags) no allocation beyond -malloc_limit_mb from these small inputs;
//   f. a call that succeeds was given no view with a negative stride, a non-unit last-dim stride
//      or a misaligned pointer (the layout rules of every tensor argument);
//   g. on success nothing outside the output views' elements changed (padding, gaps);
//   h. plan arrays (build_k2q_csr, plan_snapshot) are consistent; workspace_bytes never wraps.
//
// Environment: MSA_FUZZ_VERBOSE=1 prints every API call and its outcome (triage);
// MSA_FUZZ_ALLOW_NAN_SINKS=1 exempts NaN sinks from invariant c; MSA_FUZZ_SKIP_OPS=a,b leaves
// operators out (prefill, decode, indexer, topk, combine, plan, sizes, tensor_view), e.g. to
// keep a long run off a known, still-open finding.
//
// Build: cmake --preset fuzz && cmake --build --preset fuzz; run: see README.md "Fuzzing".
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <numeric>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/validate.h"  // msa::validate_shape
#include "cpu/reference.h"  // msa::cpu::sparse_prefill_gather: the FP64 oracle
#include "msa/msa.h"

namespace {

using msa::DType;
using msa::Device;
using msa::TensorView;

constexpr std::int64_t kMaxSpanBytes = std::int64_t{8} << 20;  // per tensor
constexpr std::int64_t kMaxIndexElems = std::int64_t{1} << 21;  // logical walks (fill, checks)
constexpr int kMaxMutations = 8;
constexpr std::int64_t kCostBudget = 10000;  // query rows x heads x visible keys per call (~15 ms)
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

bool g_allow_nan_sinks = false;
bool g_verbose = false;  // MSA_FUZZ_VERBOSE=1: one line per API call and its outcome
unsigned g_skip_ops = 0;  // MSA_FUZZ_SKIP_OPS=tensor_view,sizes: operators left out (bit per Op)

[[noreturn]] void fail(const char* invariant, const std::string& msg) {
  std::fprintf(stderr, "\n==msa_fuzz== INVARIANT %s VIOLATED: %s\n", invariant, msg.c_str());
  std::fflush(stderr);
  std::abort();
}

// ---- input bytes -----------------------------------------------------------------------

// Reads from the front; an exhausted input reads as zeros (the ordinary, valid choice).
class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  std::uint8_t u8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() { return u16() | (static_cast<std::uint32_t>(u16()) << 16); }
  std::uint64_t u64() { return u32() | (static_cast<std::uint64_t>(u32()) << 32); }
  bool empty() const { return n_ == 0; }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
};

// Keep in sync with tests/fuzz/make_corpus.py (HEADER).
struct Header {
  std::uint8_t op;         // 0: operator, % kOps
  std::uint8_t batch;      // 1: B = 1 + batch % 4
  std::uint8_t h_kv;       // 2: 1 + h_kv % 4
  std::uint8_t group;      // 3: 1 + group % 16
  std::uint8_t topk;       // 4: 1 + topk % 32
  std::uint8_t page;       // 5: % 5: page size 16, 32, 64, 128, flat
  std::uint8_t layout;     // 6: bits 0-2 K/V layout (% 6), 3 q padded, 4 out padded, 5 lse padded,
                           //    6 topk padded
  std::uint8_t dtype;      // 7: bit 0 fp16, bit 1 o_partial bf16 (combine)
  std::uint8_t values;     // 8: % 5: ordinary, extreme, mixed, zeros, tiny
  std::uint8_t sinks;      // 9: % 7: none, finite, NaN, +inf, -inf, +-1e30, mixed
  std::uint8_t outputs;    // 10: bit 0 no lse, 1 spare page-table columns, 2 spare pages,
                           //     3 gaps between flat requests
  std::uint8_t selection;  // 11: % 6: contract, hostile ids, all -1, dense, duplicates, shuffled
  std::uint8_t strict;     // 12: bit 0 Options::strict
  std::uint8_t plant;      // 13: % 4: none, NaN in unseen K, unseen V, unseen K/V and q gaps
  std::uint8_t variant;    // 14: operator-specific (see each op)
  std::uint8_t aux;        // 15: operator-specific
  std::uint32_t seed;      // 16: value RNG seed
};
static_assert(sizeof(Header) == 20, "make_corpus.py writes 20 header bytes");

enum Op : int {
  kOpPrefill,
  kOpDecode,
  kOpIndexer,
  kOpTopk,
  kOpCombine,
  kOpPlan,
  kOpSizes,
  kOpTensorView,
  kOps
};

// Integers that break arithmetic.
std::int64_t hostile_int(Reader& r) {
  static constexpr std::int64_t kTable[] = {
      0, 1, -1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 127, 128, 129, 255, 256, 4096,
      1 << 24, (1 << 24) + 1, INT32_MAX, INT32_MAX - 1, INT32_MAX - 127, INT32_MAX - 128,
      INT32_MIN, INT32_MIN + 1, std::int64_t{1} << 31, std::int64_t{1} << 32,
      (std::int64_t{1} << 32) + 1, std::int64_t{1} << 40, std::int64_t{1} << 62, INT64_MAX,
      INT64_MIN, -2, -8, -128, -(std::int64_t{1} << 31) - 1, 1 << 20, (1 << 27) + 1, 1 << 28};
  constexpr int kN = sizeof(kTable) / sizeof(kTable[0]);
  const std::uint8_t sel = r.u8();
  if (sel < kN) return kTable[sel];
  if (sel < 200) return static_cast<std::int16_t>(r.u16());
  if (sel < 230) return static_cast<std::int32_t>(r.u32());
  return static_cast<std::int64_t>(r.u64());
}

float hostile_float(std::int64_t sel) {
  static constexpr float kTable[] = {0.f,   kNaN,   kInf,  -kInf, 1e30f, -1e30f, 3.3e38f,
                                     -1.f,  1e-30f, 0.5f,  1.f,   2.f,   1e-45f, 65504.f,
                                     7.f,   -3.3e38f};
  constexpr int kN = sizeof(kTable) / sizeof(kTable[0]);
  return kTable[static_cast<std::uint64_t>(sel) % kN];
}

// ---- values ----------------------------------------------------------------------------

struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float unit() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  float sym(float a) { return (2.f * unit() - 1.f) * a; }
  std::int64_t below(std::int64_t n) {
    return n <= 0 ? 0 : static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n));
  }
};

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint16_t to_fp16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (ax < 0x38800000u) {  // half subnormal or zero
    float a;
    std::memcpy(&a, &ax, 4);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(a * 16777216.f)));
  }
  std::uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);
  const std::uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}
float from_fp16(std::uint16_t h) {
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float v;
  if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -24);
  } else if (e == 31) {
    v = m ? kNaN : kInf;
  } else {
    v = std::ldexp(static_cast<float>(m | 0x400u), static_cast<int>(e) - 25);
  }
  return (h & 0x8000u) ? -v : v;
}

std::size_t elem_size(DType t) { return msa::dtype_size(t); }

// Element access through memcpy: the harness's own pointers may be deliberately misaligned.
template <class T>
T rd(const void* base, std::int64_t off) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + off * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
  return v;
}
template <class T>
void wr(void* base, std::int64_t off, T v) {
  std::memcpy(static_cast<char*>(base) + off * static_cast<std::int64_t>(sizeof(T)), &v, sizeof(T));
}

float load_f(const void* data, DType t, std::int64_t off) {
  switch (t) {
    case DType::kBF16: return from_bf16(rd<std::uint16_t>(data, off));
    case DType::kFP16: return from_fp16(rd<std::uint16_t>(data, off));
    case DType::kFP32: return rd<float>(data, off);
    case DType::kInt32: return static_cast<float>(rd<std::int32_t>(data, off));
  }
  return from_bf16(rd<std::uint16_t>(data, off));  // unknown dtypes are 2 bytes (dtype_size)
}
void store_f(void* data, DType t, std::int64_t off, float v) {
  switch (t) {
    case DType::kBF16: wr<std::uint16_t>(data, off, to_bf16(v)); return;
    case DType::kFP16: wr<std::uint16_t>(data, off, to_fp16(v)); return;
    case DType::kFP32: wr<float>(data, off, v); return;
    case DType::kInt32: {  // saturating: a float value written into a tensor retyped as int32
      const std::int32_t i = std::isnan(v) ? 0 : v >= 2147483520.f ? INT32_MAX : v <= -2147483648.f ? INT32_MIN : static_cast<std::int32_t>(v);
      wr<std::int32_t>(data, off, i);
      return;
    }
  }
  wr<std::uint16_t>(data, off, to_bf16(v));
}

// ---- tensors ---------------------------------------------------------------------------

enum Tid : int {
  kQ, kK, kV, kPageTable, kCuK, kCuQ, kKLen, kTopk, kSinks, kOut, kLse, kScores, kIndexQ,
  kIndexK, kOPartial, kLsePartial, kSplitCounts, kSeqLen, kTopkOut, kCuQ2, kKLen2, kTopk2, kNumT
};
const char* const kTname[kNumT] = {
    "q", "k", "v", "page_table", "cu_seqlens_k", "cu_seqlens_q", "k_len", "topk", "sinks", "out",
    "lse", "scores", "index_q", "index_k", "o_partial", "lse_partial", "split_counts", "seq_len",
    "topk_out", "cu_seqlens_q(run)", "k_len(run)", "topk(run)"};

enum class Fill { kFloat, kInts, kOutput };

struct TSpec {
  bool used = false;
  bool present = true;
  DType dtype = DType::kFP32;
  Device device = Device::kCpu;
  int rank = 0;
  std::int64_t shape[4] = {0, 0, 0, 0};
  std::int64_t stride[4] = {0, 0, 0, 0};
  bool rank_override = false;
  int rank_value = 0;
  int misalign = 0;  // bytes
  bool null_data = false;
  Fill fill = Fill::kFloat;
  int vmode = 0;                     // float values: see Header::values
  std::vector<std::int32_t> ivals;   // int tensors: values by row-major logical index
  std::int32_t ifill = 0;            // int tensors: everything else
};

struct Tensor {
  TSpec spec;
  TensorView view;
  std::uint8_t* alloc = nullptr;
  std::size_t alloc_bytes = 0;
  std::int64_t lo = 0, hi = -1;  // reachable element offsets relative to view.data
  bool has_elems = false;
  std::vector<std::uint8_t> snap;
  Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { std::free(alloc); }
  std::uint8_t* data_begin() const { return static_cast<std::uint8_t*>(view.data) + lo * static_cast<std::int64_t>(elem_size(view.dtype)); }
};

// Contiguous strides, optionally with `pad` extra elements after each row of the last dim and
// each outer slice.
void set_shape(TSpec& s, DType dt, std::initializer_list<std::int64_t> shape, std::int64_t pad = 0) {
  s.used = true;
  s.dtype = dt;
  s.rank = static_cast<int>(shape.size());
  int i = 0;
  for (std::int64_t e : shape) s.shape[i++] = e;
  std::int64_t st = 1;
  for (int j = s.rank - 1; j >= 0; --j) {
    s.stride[j] = st;
    const std::int64_t e = std::max<std::int64_t>(s.shape[j], 0);
    st = st * e + (j < s.rank ? pad : 0);
  }
  s.stride[s.rank - 1] = 1;
}

// Number of elements of a view's logical index space, saturated at 2^62; 0 if any extent <= 0.
std::int64_t logical_count(const TensorView& v) {
  if (v.rank <= 0) return 0;
  const int dims = std::min(v.rank, 4);
  __int128 n = 1;
  for (int i = 0; i < dims; ++i) {
    if (v.shape[i] <= 0) return 0;
    n *= v.shape[i];
    if (n > (static_cast<__int128>(1) << 62)) return std::int64_t{1} << 62;
  }
  return static_cast<std::int64_t>(n);
}

// Calls f(linear_index, element_offset) over the logical index space in row-major order.
template <class F>
void for_each_index(const TensorView& v, F&& f) {
  const int dims = std::clamp(v.rank, 0, 4);
  if (logical_count(v) == 0) return;
  std::int64_t idx[4] = {0, 0, 0, 0};
  std::int64_t e[4] = {1, 1, 1, 1};
  for (int i = 0; i < dims; ++i) e[i] = v.shape[i];
  std::int64_t lin = 0;
  while (true) {
    std::int64_t off = 0;
    for (int i = 0; i < dims; ++i) off += idx[i] * v.stride[i];
    f(lin++, off);
    int d = dims - 1;
    while (d >= 0 && ++idx[d] == e[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

// True when distinct logical indices reach distinct elements (sufficient test).
bool injective(const TensorView& v) {
  const int dims = std::clamp(v.rank, 0, 4);
  std::vector<std::pair<std::int64_t, std::int64_t>> ds;  // (|stride|, extent)
  for (int i = 0; i < dims; ++i) {
    if (v.shape[i] <= 0) return true;
    if (v.shape[i] == 1) continue;
    if (v.stride[i] == 0) return false;
    ds.emplace_back(v.stride[i] < 0 ? -v.stride[i] : v.stride[i], v.shape[i]);
  }
  std::sort(ds.begin(), ds.end());
  __int128 need = 1;
  for (const auto& [s, e] : ds) {
    if (s < need) return false;
    need = static_cast<__int128>(s) * e;
  }
  return true;
}

class Ctx;

// ---- the call context ------------------------------------------------------------------

struct Mutation {
  int target;
  int field;
  std::int64_t v1;
  std::int64_t v2;
};

class Ctx {
 public:
  Ctx(const Header& h, Reader& r) : h(h), r(r), rng(h.seed ^ (std::uint64_t{h.op} << 40)) {}

  Header h;
  Reader& r;
  Rng rng;
  Tensor T[kNumT];
  std::vector<Mutation> muts;

  msa::AttentionShape shape;  // what the operator gets (post mutations)
  msa::Options opt;
  int page_size = 0;  // 0 = flat
  DType dt = DType::kBF16;

  bool hostile = false;    // some mutation applied: no oracle comparison
  bool extreme = false;    // values beyond the ordinary range somewhere
  bool nonfinite = false;  // NaN/inf in data a call may see
  bool nan_sinks = false;
  bool inf_sinks = false;
  bool huge_sinks = false;

  // Op parameters that mutations may change.
  int q_per_request = 1;
  bool head_major = false;
  int h_i = 1;
  float idx_scale = 0.f;
  int topk_op = 1;
  std::int64_t max_k_len_bound = -1;  // >= 0: plan(batch, topk, max_k_len, stream)

  void read_mutations() {
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
  void apply_shape_mutations(bool pre) {
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

  void apply_option_mutations() {
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

  void apply_tensor_mutations() {
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
  bool materialize_all() {
    for (int t = 0; t < kNumT; ++t)
      if (T[t].spec.used && !materialize(T[t])) return false;
    return true;
  }

  void apply_element_writes() {
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
  void snapshot(std::initializer_list<Tid> outs) {
    for (Tid id : outs) {
      Tensor& t = T[id];
      t.snap.assign(t.alloc, t.alloc + t.alloc_bytes);
    }
  }

  void expect_unchanged(std::initializer_list<Tid> outs, const char* call, const std::string& why) {
    for (Tid id : outs) {
      const Tensor& t = T[id];
      if (!t.spec.used || t.snap.size() != t.alloc_bytes) continue;
      if (t.alloc_bytes && std::memcmp(t.snap.data(), t.alloc, t.alloc_bytes) != 0)
        fail("b", std::string(call) + " threw msa::Error (" + why + ") but changed output " + kTname[id]);
    }
  }

  // Invariant g: bytes of an output allocation outside its view's elements are untouched.
  void expect_outside_untouched(std::initializer_list<Tid> outs, const char* call) {
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
  void expect_layout_ok(std::initializer_list<Tid> args, const char* call) {
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

  // Invariant c.
  bool finite_inputs() const { return !nonfinite && (g_allow_nan_sinks ? !nan_sinks : true); }
  bool ordinary() const {
    return !hostile && !extreme && !nonfinite && !nan_sinks && !inf_sinks && !huge_sinks;
  }

  void expect_no_nan(Tid id, const char* call) {
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

 private:
  bool materialize(Tensor& t) {
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

  void fill(Tensor& t) {
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

  float value(int vmode, DType t) {
    const float big = t == DType::kFP16 ? 60000.f : t == DType::kBF16 ? 1e30f : 1e30f;
    switch (vmode) {
      case 1: return (rng.next() & 1 ? 1.f : -1.f) * big * (0.5f + 0.5f * rng.unit());
      case 2: return (rng.next() & 15) == 0 ? (rng.next() & 1 ? big : -big) : rng.sym(0.433f);
      case 3: return 0.f;
      case 4: return rng.sym(1e-30f);
      default: return rng.sym(0.433f);  // uniform with standard deviation 0.25
    }
  }
};

// ---- calls -----------------------------------------------------------------------------

enum class Outcome { kOk, kError };

// Runs f; msa::Error is an outcome (checked for naming), anything else is invariant a.
template <class F>
Outcome call(const char* what, F&& f) {
  try {
    f();
    if (g_verbose) std::fprintf(stderr, "msa_fuzz: %s -> ok\n", what);
    return Outcome::kOk;
  } catch (const msa::Error& e) {
    if (g_verbose) std::fprintf(stderr, "msa_fuzz: %s -> %s\n", what, e.what());
    if (e.argument().empty() || e.value().empty())
      fail("b", std::string(what) + ": msa::Error with an empty argument or value: " + e.what());
    return Outcome::kError;
  } catch (const std::exception& e) {
    fail("a", std::string(what) + ": exception other than msa::Error escaped: " + typeid(e).name() +
                  ": " + e.what());
  } catch (...) {
    fail("a", std::string(what) + ": non-std exception escaped");
  }
}

// Same, returning the error's text (for the unchanged-output message).
template <class F>
Outcome call_checked(Ctx& c, const char* what, std::initializer_list<Tid> outs, F&& f) {
  c.snapshot(outs);
  std::string why;
  Outcome o;
  try {
    f();
    o = Outcome::kOk;
  } catch (const msa::Error& e) {
    if (e.argument().empty() || e.value().empty())
      fail("b", std::string(what) + ": msa::Error with an empty argument or value: " + e.what());
    why = e.what();
    o = Outcome::kError;
  } catch (const std::exception& e) {
    fail("a", std::string(what) + ": exception other than msa::Error escaped: " + typeid(e).name() +
                  ": " + e.what());
  } catch (...) {
    fail("a", std::string(what) + ": non-std exception escaped");
  }
  if (g_verbose) std::fprintf(stderr, "msa_fuzz: %s -> %s\n", what, o == Outcome::kOk ? "ok" : why.c_str());
  if (o == Outcome::kError) c.expect_unchanged(outs, what, why);
  else c.expect_outside_untouched(outs, what);
  return o;
}

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

std::int64_t blocks_of(std::int64_t k_len) { return (k_len + msa::kBlockSize - 1) / msa::kBlockSize; }

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

// ---- operators -------------------------------------------------------------------------

void check_plan(const msa::K2qCsr& p, const msa::AttentionShape& s, const std::vector<std::int32_t>& q_len,
                const std::vector<std::int64_t>& k_len, int q_per_item, const char* what);

struct Lens {
  std::vector<std::int32_t> q_len;
  std::vector<std::int64_t> k_len;
};

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

// Calls a method of a moved-from operator object: an msa::Error or a harmless no-op is fine.
template <class F>
void moved_from_call(const char* what, F&& f) {
  call(what, std::forward<F>(f));
}

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
      check_plan(snap, c.shape, l.q_len, l.k_len, c.opt.q_per_item, "SparsePrefill::plan_snapshot");
  }

  const char* what = mismatch ? "SparsePrefill::run (args differ from the plan)" : "SparsePrefill::run";
  const Outcome ran = call_checked(c, what, outs, [&] { op->run(a); });
  if (ran == Outcome::kOk) {
    if (planned != Outcome::kOk) fail("b", "SparsePrefill::run succeeded after a failed plan()");
    check_success(what);
  }
}

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

// o_partial [topk, rows, h_q, d] (fp32 | bf16), lse_partial, split_counts, sinks. NaN planted in
// slots beyond a row's count and in slots with lse -inf must not leak. Variant bit 3: moved-from.
void op_combine(Ctx& c) {
  decode_common(c);
  const std::int64_t rows = c.h.aux % 9;
  c.read_mutations();
  c.apply_shape_mutations(true);
  c.apply_option_mutations();
  const std::int64_t h_kv = std::max(c.shape.h_kv, 0), h_q = std::max(c.shape.h_q, 0);
  const std::int64_t K = std::max(c.shape.topk, 0), d = std::max(c.shape.d, 0);
  const DType pdt = (c.h.dtype & 2) ? DType::kBF16 : DType::kFP32;
  TSpec& op_ = c.T[kOPartial].spec;
  set_shape(op_, pdt, {K, rows, h_q, d}, (c.h.layout & 8) ? 8 : 0);
  op_.fill = Fill::kFloat;
  op_.vmode = c.h.values % 5;
  TSpec& lp = c.T[kLsePartial].spec;
  set_shape(lp, DType::kFP32, {K, rows, h_q});
  std::vector<std::int32_t> lbits(static_cast<std::size_t>(K * rows * h_q));
  for (auto& b : lbits) {
    float f = c.rng.sym(5.f);
    if (c.rng.below(6) == 0) f = -kInf;
    if (c.h.values % 5 == 1) f = c.rng.sym(1e30f);
    std::memcpy(&b, &f, 4);
  }
  set_ints(lp, std::move(lbits), 0);
  lp.dtype = DType::kInt32;
  TSpec& sc = c.T[kSplitCounts].spec;
  set_shape(sc, DType::kInt32, {rows, h_kv});
  std::vector<std::int32_t> counts(static_cast<std::size_t>(rows * h_kv));
  for (auto& n : counts) n = static_cast<std::int32_t>(c.rng.below(K + 1));
  set_ints(sc, counts, 0);
  TSpec& out = c.T[kOut].spec;
  set_shape(out, c.dt, {rows, h_q, d}, (c.h.layout & 16) ? 8 : 0);
  out.fill = Fill::kOutput;
  if (!(c.h.outputs & 1)) {
    set_shape(c.T[kLse].spec, DType::kFP32, {rows, h_q}, (c.h.layout & 32) ? 1 : 0);
    c.T[kLse].spec.fill = Fill::kOutput;
  }
  build_sinks(c, h_q);
  c.apply_tensor_mutations();
  if (!c.materialize_all()) return;
  retype_float_bits(c, kSinks);
  retype_float_bits(c, kLsePartial);
  c.apply_element_writes();
  c.apply_shape_mutations(false);
  const std::int64_t group = h_kv > 0 ? h_q / h_kv : 1;
  // Unseen partials: NaN in slots >= count and in slots whose lse is -inf.
  if ((c.h.plant % 4) != 0 && !c.hostile) {
    const TensorView& o = c.T[kOPartial].view;
    const TensorView& l = c.T[kLsePartial].view;
    for (std::int64_t s = 0; s < K; ++s)
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t h = 0; h < h_q; ++h) {
          const bool beyond = s >= counts[r * h_kv + h / group];
          const bool dead = rd<float>(l.data, s * l.stride[0] + r * l.stride[1] + h * l.stride[2]) == -kInf;
          if (beyond || dead) store_f(o.data, o.dtype, s * o.stride[0] + r * o.stride[1] + h * o.stride[2] + c.rng.below(d), kNaN);
        }
  }
  msa::CombineArgs a;
  a.o_partial = c.T[kOPartial].view;
  a.lse_partial = c.T[kLsePartial].view;
  a.split_counts = c.T[kSplitCounts].view;
  a.out = c.T[kOut].view;
  a.lse = c.T[kLse].view;
  a.sinks = c.T[kSinks].view;
  std::vector<msa::Combine> keep;
  keep.reserve(2);
  if (call("Combine(shape, options)", [&] { keep.emplace_back(c.shape, c.opt); }) != Outcome::kOk) return;
  msa::Combine* op = &keep.back();
  call("Combine::plan", [&] { op->plan(rows - (c.h.variant & 4 ? 5 : 0)); });
  if (c.h.variant & 8) {
    msa::Combine moved(std::move(*op));
    moved_from_call("moved-from Combine::run", [&] { op->run(a); });
    keep.emplace_back(std::move(moved));
    op = &keep.back();
  }
  if (call_checked(c, "Combine::run", {kOut, kLse}, [&] { op->run(a); }) != Outcome::kOk) return;
  c.expect_layout_ok({kOPartial, kLsePartial, kSplitCounts, kOut, kLse, kSinks}, "Combine::run");
  if (c.finite_inputs()) {
    c.expect_no_nan(kOut, "Combine::run");
    c.expect_no_nan(kLse, "Combine::run");
  }
  if (!c.ordinary() || !injective(a.out) || (a.lse.rank > 0 && !injective(a.lse))) return;
  // FP64 oracle of spec §3 (+ the sink term of §6).
  const TensorView& o = a.o_partial;
  const TensorView& l = a.lse_partial;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t h = 0; h < h_q; ++h) {
      const std::int64_t n = counts[r * h_kv + h / group];
      const bool has_sink = a.sinks.rank > 0;
      const double sink = has_sink ? rd<float>(a.sinks.data, h * a.sinks.stride[0]) : 0.0;
      double m = has_sink ? sink : -std::numeric_limits<double>::infinity();
      for (std::int64_t s = 0; s < n; ++s) m = std::max<double>(m, rd<float>(l.data, s * l.stride[0] + r * l.stride[1] + h * l.stride[2]));
      double z = has_sink ? std::exp(sink - m) : 0.0;
      std::vector<double> w(static_cast<std::size_t>(n));
      for (std::int64_t s = 0; s < n; ++s) {
        w[s] = std::exp(rd<float>(l.data, s * l.stride[0] + r * l.stride[1] + h * l.stride[2]) - m);
        z += w[s];
      }
      const bool empty = !(z > 0) || !std::isfinite(z) || std::isinf(m);
      const double lse = empty ? -std::numeric_limits<double>::infinity() : m + std::log(z);
      if (a.lse.rank > 0) {
        const float got = rd<float>(a.lse.data, r * a.lse.stride[0] + h * a.lse.stride[1]);
        const bool ok = std::isinf(lse) ? got == -kInf : std::fabs(got - lse) <= 1e-3;
        if (!ok) fail("d", "Combine::run: lse[" + std::to_string(r) + ", " + std::to_string(h) + "] = " + std::to_string(got) + ", oracle " + std::to_string(lse));
      }
      for (std::int64_t j = 0; j < d; ++j) {
        double want = 0;
        if (!empty)
          for (std::int64_t s = 0; s < n; ++s)
            if (w[s] != 0) want += w[s] / z * load_f(o.data, o.dtype, s * o.stride[0] + r * o.stride[1] + h * o.stride[2] + j);
        const float got = load_f(a.out.data, a.out.dtype, r * a.out.stride[0] + h * a.out.stride[1] + j);
        if (!(std::fabs(got - want) <= 1e-2 + 1e-2 * std::fabs(want)))
          fail("d", "Combine::run: out[" + std::to_string(r) + ", " + std::to_string(h) + ", " + std::to_string(j) + "] = " +
                        std::to_string(got) + ", oracle " + std::to_string(want));
      }
    }
  }
}

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
  static constexpr int kQpi[] = {64, 1, 2, 3, 7, 64, 1 << 20, 16};
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
    if (!c.hostile) check_plan(p, c.shape, l.q_len, l.k_len, c.opt.q_per_item, "build_k2q_csr");
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
      check_plan(s, c.shape, l.q_len, l.k_len, c.opt.q_per_item, "plan_snapshot");
  }
}

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

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  omp_set_num_threads(1);
  const char* env = std::getenv("MSA_FUZZ_ALLOW_NAN_SINKS");
  g_allow_nan_sinks = env != nullptr && env[0] == '1';
  env = std::getenv("MSA_FUZZ_VERBOSE");
  g_verbose = env != nullptr && env[0] == '1';
  if ((env = std::getenv("MSA_FUZZ_SKIP_OPS")) != nullptr) {
    static const char* const kNames[kOps] = {"prefill", "decode", "indexer", "topk", "combine", "plan", "sizes", "tensor_view"};
    const std::string list = std::string(",") + env + ",";
    for (int op = 0; op < kOps; ++op)
      if (list.find(std::string(",") + kNames[op] + ",") != std::string::npos) g_skip_ops |= 1u << op;
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Header h{};
  std::memcpy(&h, data, std::min(size, sizeof(Header)));
  Reader r(data + std::min(size, sizeof(Header)), size - std::min(size, sizeof(Header)));
  if (g_skip_ops & (1u << (h.op % kOps))) return -1;
  Ctx c(h, r);
  switch (h.op % kOps) {
    case kOpPrefill: op_prefill(c); break;
    case kOpDecode: op_decode(c); break;
    case kOpIndexer: op_indexer(c); break;
    case kOpTopk: op_topk(c); break;
    case kOpCombine: op_combine(c); break;
    case kOpPlan: op_plan(c); break;
    case kOpSizes: op_sizes(c); break;
    case kOpTensorView: op_tensor_view(c); break;
  }
  return 0;
}
