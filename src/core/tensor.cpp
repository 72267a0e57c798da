#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "msa/error.h"
#include "msa/options.h"
#include "msa/shapes.h"
#include "msa/tensor.h"
#include "msa/version.h"

namespace msa {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
    case DType::kInt32: return "int32";
    case DType::kFP8E4M3: return "fp8_e4m3";
  }
  return "?";
}

const char* device_name(Device d) {
  switch (d) {
    case Device::kCpu: return "cpu";
    case Device::kCuda: return "cuda";
  }
  return "unknown";
}
const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
  }
  return "unknown";
}
const char* prefill_path_name(PrefillPath p) {
  switch (p) {
    case PrefillPath::kBlockMajor: return "block-major";
    case PrefillPath::kTileUnion: return "tile-union";
    case PrefillPath::kAuto: return "auto";
  }
  return "unknown";
}
const char* topk_ranking_name(TopkRanking r) {
  switch (r) {
    case TopkRanking::kExact: return "exact";
    case TopkRanking::kQuantised16: return "quantised16";
  }
  return "unknown";
}
const char* version_string() { return "0.1.0"; }

float AttentionShape::softmax_scale() const {
  return scale != 0.f ? scale : 1.f / std::sqrt(static_cast<float>(d));
}

std::int64_t TensorView::numel() const {
  if (rank <= 0 || rank > kMaxRank) return 0;
  std::int64_t n = 1;
  bool saturated = false;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] == 0) return 0;  // an empty view, whatever the other extents
    if (shape[i] < 0) return 0;   // invalid extents are rejected by the checks
    if (__builtin_mul_overflow(n, shape[i], &n)) saturated = true;
  }
  return saturated ? std::numeric_limits<std::int64_t>::max() : n;
}

bool TensorView::is_contiguous() const {
  if (!valid_rank()) return false;
  std::int64_t expect = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && stride[i] != expect) return false;
    if (__builtin_mul_overflow(expect, shape[i], &expect)) return false;
  }
  return true;
}

std::string TensorView::shape_string() const {
  if (!valid_rank()) return "[rank " + std::to_string(rank) + "]";
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

// A view with the given shape; rank beyond kMaxRank is an error, never an overflow.
TensorView with_shape(void* data, DType dtype, std::initializer_list<std::int64_t> shape, Device device) {
  if (shape.size() > static_cast<std::size_t>(kMaxRank))
    throw Error("shape.rank", std::to_string(shape.size()), "TensorView holds at most 4 dims");
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), t.shape.begin());
  return t;
}

}  // namespace

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                                  Device device) {
  TensorView t = with_shape(data, dtype, shape, device);
  std::int64_t s = 1;
  for (int j = t.rank - 1; j >= 0; --j) {
    t.stride[j] = s;
    // Strides of the outer dims must fit in int64 (an empty or negative extent is left for the
    // checks to name; the stride product stays defined).
    if (j > 0 && __builtin_mul_overflow(s, t.shape[j], &s))
      throw Error("shape", t.shape_string(), "row-major strides of these extents overflow int64");
  }
  return t;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                               std::initializer_list<std::int64_t> stride, Device device) {
  TensorView t = with_shape(data, dtype, shape, device);
  if (stride.size() != shape.size())
    throw Error("stride.size", std::to_string(stride.size()),
                "must equal the rank " + std::to_string(shape.size()));
  std::copy(stride.begin(), stride.end(), t.stride.begin());
  return t;
}

}  // namespace msa
