// The fuzz harness's input side (tests/fuzz/fuzz_api.cpp has the contract): limits, the byte
// reader, the 20-byte header (tests/fuzz/make_corpus.py writes the same layout), hostile
// integers and floats, the value RNG and element access of every dtype.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "core/half.h"
#include "msa/msa.h"

namespace msa_fuzz {

using msa::DType;
using msa::Device;
using msa::TensorView;

constexpr std::int64_t kMaxSpanBytes = std::int64_t{8} << 20;  // per tensor
constexpr std::int64_t kMaxIndexElems = std::int64_t{1} << 21;  // logical walks (fill, checks)
constexpr int kMaxMutations = 8;
constexpr std::int64_t kCostBudget = 10000;  // query rows x heads x visible keys per call (~15 ms)
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

inline bool g_allow_nan_sinks = false;
inline bool g_verbose = false;  // MSA_FUZZ_VERBOSE=1: one line per API call and its outcome
inline unsigned g_skip_ops = 0;  // MSA_FUZZ_SKIP_OPS=tensor_view,sizes: operators left out (bit per Op)

[[noreturn]] inline void fail(const char* invariant, const std::string& msg) {
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
inline std::int64_t hostile_int(Reader& r) {
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

inline float hostile_float(std::int64_t sel) {
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

// 16-bit conversions: the library's (round to nearest even, NaN kept), under the harness's names.
inline std::uint16_t to_bf16(float f) { return msa::float_to_bf16(f); }
inline float from_bf16(std::uint16_t h) { return msa::bf16_to_float(h); }
inline std::uint16_t to_fp16(float f) { return msa::float_to_fp16(f); }
inline float from_fp16(std::uint16_t h) { return msa::fp16_to_float(h); }

inline std::size_t elem_size(DType t) { return msa::dtype_size(t); }

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

inline float load_f(const void* data, DType t, std::int64_t off) {
  switch (t) {
    case DType::kBF16: return from_bf16(rd<std::uint16_t>(data, off));
    case DType::kFP16: return from_fp16(rd<std::uint16_t>(data, off));
    case DType::kFP32: return rd<float>(data, off);
    case DType::kInt32: return static_cast<float>(rd<std::int32_t>(data, off));
    case DType::kFP8E4M3: return msa::fp8_e4m3_to_float(rd<std::uint8_t>(data, off));
  }
  return from_bf16(rd<std::uint16_t>(data, off));  // unknown dtypes are 2 bytes (dtype_size)
}
inline void store_f(void* data, DType t, std::int64_t off, float v) {
  switch (t) {
    case DType::kBF16: wr<std::uint16_t>(data, off, to_bf16(v)); return;
    case DType::kFP16: wr<std::uint16_t>(data, off, to_fp16(v)); return;
    case DType::kFP32: wr<float>(data, off, v); return;
    case DType::kInt32: {  // saturating: a float value written into a tensor retyped as int32
      const std::int32_t i = std::isnan(v) ? 0 : v >= 2147483520.f ? INT32_MAX : v <= -2147483648.f ? INT32_MIN : static_cast<std::int32_t>(v);
      wr<std::int32_t>(data, off, i);
      return;
    }
    case DType::kFP8E4M3: wr<std::uint8_t>(data, off, msa::float_to_fp8_e4m3(v)); return;
  }
  wr<std::uint16_t>(data, off, to_bf16(v));
}
}  // namespace msa_fuzz
