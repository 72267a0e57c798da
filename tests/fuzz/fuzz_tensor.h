// The harness's tensors: which tensor (Tid), how it is built (TSpec), the buffer spanning exactly
// the elements its view can reach (Tensor), and walks over a view's logical index space.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <utility>
#include <vector>

#include "tests/fuzz/fuzz_input.h"

namespace msa_fuzz {

// ---- tensors ---------------------------------------------------------------------------

enum Tid : int {
  kQ, kK, kV, kPageTable, kCuK, kCuQ, kKLen, kTopk, kSinks, kOut, kLse, kScores, kIndexQ,
  kIndexK, kOPartial, kLsePartial, kSplitCounts, kSeqLen, kTopkOut, kCuQ2, kKLen2, kTopk2, kNumT
};
inline const char* const kTname[kNumT] = {
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
inline void set_shape(TSpec& s, DType dt, std::initializer_list<std::int64_t> shape, std::int64_t pad = 0) {
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
inline std::int64_t logical_count(const TensorView& v) {
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
inline bool injective(const TensorView& v) {
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
}  // namespace msa_fuzz
