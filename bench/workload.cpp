#include "bench/workload.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>
#include <random>
#include <tuple>

#include "core/half.h"

namespace msa::bench {

// ---- HostTensor ------------------------------------------------------------------------
void HostTensor::Free::operator()(void* p) const { ::operator delete(p, std::align_val_t(64)); }

HostTensor::HostTensor(DType dtype, std::vector<std::int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  if (shape_.empty() || shape_.size() > static_cast<std::size_t>(kMaxRank))
    throw Error("shape.rank", std::to_string(shape_.size()), "HostTensor needs rank 1..4");
  numel_ = 1;
  for (auto e : shape_) numel_ *= e;
  const std::size_t n = std::max<std::size_t>(bytes(), 64);
  data_.reset(::operator new(n, std::align_val_t(64)));
  std::memset(data_.get(), 0, n);
}

TensorView HostTensor::view() const {
  TensorView t;
  if (shape_.empty()) return t;
  t.data = data_.get();
  t.dtype = dtype_;
  t.device = Device::kCpu;
  t.rank = static_cast<int>(shape_.size());
  std::int64_t s = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    t.shape[i] = shape_[i];
    t.stride[i] = s;
    s *= shape_[i];
  }
  return t;
}

float HostTensor::get(std::int64_t i) const { return load_as_float(raw(), dtype_, i); }
void HostTensor::set(std::int64_t i, float v) { store_from_float(raw(), dtype_, i, v); }
void HostTensor::fill(float v) {
  for (std::int64_t i = 0; i < numel_; ++i) set(i, v);
}

// ---- names -----------------------------------------------------------------------------
const char* selection_name(Selection s) {
  switch (s) {
    case Selection::kRandom: return "random";
    case Selection::kTileShared: return "tile-shared";
    case Selection::kClustered: return "clustered";
    case Selection::kAll: return "all";
  }
  return "?";
}

Selection parse_selection(const std::string& name) {
  for (Selection s : {Selection::kRandom, Selection::kTileShared, Selection::kClustered, Selection::kAll})
    if (name == selection_name(s)) return s;
  throw Error("selection", name, "expected random, tile-shared, clustered or all");
}

std::int64_t selected_tokens(std::int64_t pos, int topk) {
  const std::int64_t local = pos / kBlockSize;
  return (std::min<std::int64_t>(topk, local + 1) - 1) * kBlockSize + pos % kBlockSize + 1;
}

// ---- top-k generators ------------------------------------------------------------------
namespace {

// k distinct ids drawn uniformly from [0, n).
std::vector<std::int32_t> sample_distinct(std::int32_t n, std::int32_t k, std::mt19937_64& rng) {
  std::vector<std::int32_t> out;
  if (k <= 0 || n <= 0) return out;
  if (k * 4 >= n) {  // dense: partial shuffle
    std::vector<std::int32_t> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    for (std::int32_t i = 0; i < k; ++i) {
      std::uniform_int_distribution<std::int32_t> pick(i, n - 1);
      std::swap(all[i], all[pick(rng)]);
    }
    all.resize(static_cast<std::size_t>(k));
    return all;
  }
  std::vector<std::int32_t> seen;
  std::uniform_int_distribution<std::int32_t> pick(0, n - 1);
  while (static_cast<std::int32_t>(out.size()) < k) {
    const std::int32_t v = pick(rng);
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

}  // namespace

void fill_topk(HostTensor& topk, const std::vector<Request>& requests, int h_kv, int topk_width,
               Selection selection, double clustered_p, std::uint64_t seed) {
  std::int64_t total_q = 0;
  for (const auto& r : requests) total_q += r.q_len;
  topk = HostTensor(DType::kInt32, {h_kv, std::max<std::int64_t>(total_q, 0), topk_width});
  auto* ids = topk.data<std::int32_t>();
  std::fill(ids, ids + topk.numel(), -1);
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 17);
  for (int h = 0; h < h_kv; ++h) {
    std::int64_t row0 = 0;
    for (const auto& r : requests) {
      const std::int64_t prefix = r.k_len - r.q_len;
      std::vector<std::int32_t> shared;  // the current tile's shared picks
      std::int64_t tile = -1;
      for (std::int32_t i = 0; i < r.q_len; ++i) {
        const std::int64_t pos = prefix + i;
        const auto local = static_cast<std::int32_t>(pos / kBlockSize);
        std::int32_t* row = ids + (static_cast<std::int64_t>(h) * total_q + row0 + i) * topk_width;
        std::vector<std::int32_t> picks;
        if (selection == Selection::kAll || local + 1 <= topk_width) {
          for (std::int32_t p = 0; p < std::min(local, topk_width - 1); ++p) picks.push_back(p);
          if (local + 1 > topk_width) picks.clear();  // kAll with too many blocks: fall through
        }
        if (picks.empty() && local > 0 && local + 1 > topk_width) {
          const std::int32_t want = topk_width - 1;
          if (selection == Selection::kRandom || selection == Selection::kAll) {
            picks = sample_distinct(local, want, rng);
          } else {
            // Tiles of 128 queries share picks drawn below the tile's first local block.
            const std::int64_t t = i / kBlockSize;
            if (t != tile) {
              tile = t;
              const auto tile_local = static_cast<std::int32_t>((prefix + t * kBlockSize) / kBlockSize);
              shared = sample_distinct(tile_local, std::min(want, tile_local), rng);
            }
            picks = shared;
            // The tile's first local may hold fewer than want earlier blocks: top up.
            while (static_cast<std::int32_t>(picks.size()) < want) {
              std::uniform_int_distribution<std::int32_t> pick(0, local - 1);
              const std::int32_t v = pick(rng);
              if (std::find(picks.begin(), picks.end(), v) == picks.end()) picks.push_back(v);
            }
            if (selection == Selection::kClustered) {
              std::bernoulli_distribution replace(clustered_p);
              for (auto& p : picks) {
                if (!replace(rng)) continue;
                std::uniform_int_distribution<std::int32_t> pick(0, local - 1);
                for (int tries = 0; tries < 64; ++tries) {
                  const std::int32_t v = pick(rng);
                  if (std::find(picks.begin(), picks.end(), v) == picks.end()) {
                    p = v;
                    break;
                  }
                }
              }
            }
          }
        }
        for (std::size_t s = 0; s < picks.size(); ++s) row[s] = picks[s];
        row[picks.size()] = local;
      }
      row0 += r.q_len;
    }
  }
}

HostTensor query_major_topk(const HostTensor& head_major) {
  const auto& s = head_major.shape();
  HostTensor t(DType::kInt32, {s[1], s[0], s[2]});
  const auto row_bytes = static_cast<std::size_t>(s[2]) * sizeof(std::int32_t);
  for (std::int64_t h = 0; h < s[0]; ++h)
    for (std::int64_t r = 0; r < s[1]; ++r)
      std::memcpy(t.data<std::int32_t>() + (r * s[0] + h) * s[2], head_major.data<std::int32_t>() + (h * s[1] + r) * s[2],
                  row_bytes);
  return t;
}

// ---- workload --------------------------------------------------------------------------
Workload make_workload(const WorkloadSpec& spec) {
  Workload w;
  w.spec = spec;
  const AttentionShape& s = spec.shape;
  const auto b_count = static_cast<std::int64_t>(spec.requests.size());
  std::mt19937_64 rng(spec.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto randn = [&](HostTensor& t, float sd) {
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, normal(rng) * sd);
  };

  w.cu_seqlens_q = HostTensor(DType::kInt32, {b_count + 1});
  w.k_len = HostTensor(DType::kInt32, {std::max<std::int64_t>(b_count, 0)});
  std::int64_t total_k = 0;
  for (std::int64_t b = 0; b < b_count; ++b) {
    w.cu_seqlens_q.data<std::int32_t>()[b + 1] =
        w.cu_seqlens_q.data<std::int32_t>()[b] + spec.requests[b].q_len;
    w.k_len.data<std::int32_t>()[b] = spec.requests[b].k_len;
    total_k += spec.requests[b].k_len;
  }
  w.total_q = w.cu_seqlens_q.data<std::int32_t>()[b_count];

  const bool values = spec.host_values;
  if (values) {
    w.q = HostTensor(spec.dtype, {w.total_q, s.h_q, s.d});
    randn(w.q, spec.qk_sd);
  }

  if (spec.page_size > 0) {
    const std::int64_t ps = spec.page_size;
    std::int64_t max_pages = 1;
    std::vector<std::int64_t> pages_of(static_cast<std::size_t>(b_count));
    for (std::int64_t b = 0; b < b_count; ++b) {
      pages_of[b] = (spec.requests[b].k_len + ps - 1) / ps;
      w.num_pages += pages_of[b];
      max_pages = std::max(max_pages, pages_of[b]);
    }
    w.num_pages = std::max<std::int64_t>(w.num_pages, 1);
    std::vector<std::int32_t> perm(static_cast<std::size_t>(w.num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    w.page_table = HostTensor(DType::kInt32, {b_count, max_pages});
    std::uniform_int_distribution<std::int32_t> any_page(0, static_cast<std::int32_t>(w.num_pages - 1));
    std::size_t next = 0;
    for (std::int64_t b = 0; b < b_count; ++b)
      for (std::int64_t p = 0; p < max_pages; ++p)
        w.page_table.data<std::int32_t>()[b * max_pages + p] = p < pages_of[b] ? perm[next++] : any_page(rng);
    const std::vector<std::int64_t> shape =
        spec.token_major_pages ? std::vector<std::int64_t>{w.num_pages, ps, s.h_kv, s.d}
                               : std::vector<std::int64_t>{w.num_pages, s.h_kv, ps, s.d};
    if (values) {
      w.k = HostTensor(spec.dtype, shape);
      w.v = HostTensor(spec.dtype, shape);
      if (spec.h_i > 0) w.index_k = HostTensor(spec.dtype, {w.num_pages, 1, ps, s.d});
    }
  } else {
    w.cu_seqlens_k = HostTensor(DType::kInt32, {b_count + 1});
    for (std::int64_t b = 0; b < b_count; ++b)
      w.cu_seqlens_k.data<std::int32_t>()[b + 1] =
          w.cu_seqlens_k.data<std::int32_t>()[b] + spec.requests[b].k_len;
    const std::int64_t rows = std::max<std::int64_t>(total_k, 1);
    if (values) {
      w.k = HostTensor(spec.dtype, {rows, s.h_kv, s.d});
      w.v = HostTensor(spec.dtype, {rows, s.h_kv, s.d});
      if (spec.h_i > 0) w.index_k = HostTensor(spec.dtype, {rows, 1, s.d});
    }
  }
  randn(w.k, spec.qk_sd);
  randn(w.v, 0.25f);

  fill_topk(w.topk, spec.requests, s.h_kv, s.topk, spec.selection, spec.clustered_p, spec.seed);
  if (spec.sinks) {
    w.sinks = HostTensor(DType::kFP32, {s.h_q});
    randn(w.sinks, 1.f);
  }
  if (values && spec.h_i > 0) {
    w.index_q = HostTensor(spec.dtype, {w.total_q, spec.h_i, s.d});
    randn(w.index_q, 0.25f);
    randn(w.index_k, 0.25f);
  }
  return w;
}

VarlenBatch Workload::batch() const { return {cu_seqlens_q.view(), k_len.view()}; }

namespace {
TensorView storage_view(const HostTensor& t, bool token_major) {
  TensorView v = t.view();
  if (token_major && v.rank == 4) {  // [pages, page_size, h, d] seen as [pages, h, page_size, d]
    std::swap(v.shape[1], v.shape[2]);
    std::swap(v.stride[1], v.stride[2]);
  }
  return v;
}
}  // namespace

KvCache Workload::kv() const {
  KvCache c;
  c.k = storage_view(k, spec.token_major_pages);
  c.v = storage_view(v, spec.token_major_pages);
  if (spec.page_size > 0) c.page_table = page_table.view();
  else c.cu_seqlens_k = cu_seqlens_k.view();
  return c;
}

KvCache Workload::index_kv() const {
  KvCache c;
  c.k = index_k.view();
  if (spec.page_size > 0) c.page_table = page_table.view();
  else c.cu_seqlens_k = cu_seqlens_k.view();
  return c;
}

PrefillArgs Workload::prefill_args(const HostTensor& out, const HostTensor& lse) const {
  PrefillArgs a;
  a.q = q.view();
  a.kv = kv();
  a.batch = batch();
  a.topk = topk.view();
  a.sinks = sinks.view();
  a.out = out.view();
  a.lse = lse.view();
  return a;
}

namespace {

// The KV head of element i of a K/V storage tensor (paged HND, token-major pages, or flat).
std::int64_t head_of(const HostTensor& storage, bool token_major, std::int64_t i) {
  const auto& s = storage.shape();
  const std::int64_t d = s.back();
  if (s.size() == 4 && !token_major) return (i / (s[2] * d)) % s[1];  // [pages, h_kv, page, d]
  return (i / d) % s[s.size() - 2];                                    // [.., h_kv, d]
}

}  // namespace

Fp8Kv quantise_kv_fp8(Workload& w, const std::vector<float>& k_factors, const std::vector<float>& v_factors) {
  Fp8Kv c{HostTensor(DType::kFP8E4M3, w.k.shape()), HostTensor(DType::kFP8E4M3, w.v.shape()),
          HostTensor(DType::kFP32, {static_cast<std::int64_t>(k_factors.size())}),
          HostTensor(DType::kFP32, {static_cast<std::int64_t>(v_factors.size())})};
  for (std::size_t i = 0; i < k_factors.size(); ++i) c.k_descale.set(static_cast<std::int64_t>(i), k_factors[i]);
  for (std::size_t i = 0; i < v_factors.size(); ++i) c.v_descale.set(static_cast<std::int64_t>(i), v_factors[i]);
  const bool tm = w.spec.token_major_pages;
  for (auto [src, dst, f] : {std::tuple{&w.k, &c.k, &k_factors}, std::tuple{&w.v, &c.v, &v_factors}}) {
    for (std::int64_t i = 0; i < src->numel(); ++i) {
      const float factor = (*f)[f->size() == 1 ? 0 : static_cast<std::size_t>(head_of(*src, tm, i))];
      const std::uint8_t stored = float_to_fp8_e4m3(src->get(i) / factor);
      dst->data<std::uint8_t>()[i] = stored;
      src->set(i, fp8_e4m3_to_float(stored) * factor);
    }
  }
  return c;
}

TensorView retyped(TensorView v, const HostTensor& storage) {
  v.data = storage.raw();
  v.dtype = storage.dtype();
  return v;
}

void poison_cache_tails(Workload& w) {
  const std::int64_t ps = w.spec.page_size;
  if (ps <= 0 || !w.spec.host_values) return;
  const KvCache kv = w.kv();
  const std::int64_t max_pages = w.page_table.shape()[1];
  const std::int64_t h_kv = kv.k.shape[1], d = kv.k.shape[3];
  for (std::size_t b = 0; b < w.spec.requests.size(); ++b) {
    const std::int64_t k_len = w.spec.requests[b].k_len;
    for (std::int64_t t = k_len; t < (k_len + ps - 1) / ps * ps; ++t) {
      const std::int64_t page = w.page_table.data<std::int32_t>()[std::int64_t(b) * max_pages + t / ps];
      for (std::int64_t h = 0; h < h_kv; ++h)
        for (std::int64_t i = 0; i < d; ++i) {
          const std::int64_t off = page * kv.k.stride[0] + h * kv.k.stride[1] + (t % ps) * kv.k.stride[2] + i;
          w.k.data<std::uint16_t>()[off] = 0x7FC0;  // bf16 / fp16 NaN
          w.v.data<std::uint16_t>()[off] = 0x7FC0;
        }
    }
  }
}

}  // namespace msa::bench
