// Seeded synthetic workloads: packed batches, paged or flat K/V with a random page
// permutation, and the top-k generators of targets.md (random, tile-shared, clustered), plus
// "all" (every visible block: the dense-equivalence case). Shared by tests, `msa run` and
// `msa bench`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "msa/msa.h"

namespace msa::bench {

// An owning, 64-byte aligned, contiguous host tensor.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<std::int64_t> shape);  // zero-filled

  TensorView view() const;  // absent (rank 0) for a default-constructed tensor
  bool empty() const { return shape_.empty(); }
  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const { return numel_; }
  std::size_t bytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  void* raw() const { return data_.get(); }
  template <class T>
  T* data() const { return static_cast<T*>(raw()); }
  float get(std::int64_t i) const;      // element i as float
  void set(std::int64_t i, float v);    // rounds to the dtype
  void fill(float v);

 private:
  struct Free { void operator()(void* p) const; };
  DType dtype_ = DType::kFP32;
  std::vector<std::int64_t> shape_;
  std::int64_t numel_ = 0;
  std::unique_ptr<void, Free> data_;
};

enum class Selection { kRandom, kTileShared, kClustered, kAll };
const char* selection_name(Selection s);
Selection parse_selection(const std::string& name);  // msa::Error on an unknown name

struct Request {
  std::int32_t q_len = 0;  // new query tokens
  std::int32_t k_len = 0;  // final KV length (prefix + q_len)
};

struct WorkloadSpec {
  AttentionShape shape;
  std::vector<Request> requests;
  int page_size = 128;             // 16/32/64/128; 0 = flat varlen K/V
  bool token_major_pages = false;  // store pages as [pages, page_size, h_kv, d] (strided view)
  DType dtype = DType::kBF16;
  Selection selection = Selection::kRandom;
  double clustered_p = 0.25;       // fraction replaced per query (kClustered)
  bool sinks = false;
  float qk_sd = 0.25f;              // standard deviation of q and k values (v: 0.25)
  int h_i = 0;                     // index heads for the indexer inputs (0: none)
  std::uint64_t seed = 1;
  // false: q, k, v and the index tensors are not allocated (a GPU benchmark fills its own on
  // the device); batch, page table, top-k and sinks are built as usual.
  bool host_values = true;
};

// Host inputs of one prefill (or indexer) call.
struct Workload {
  WorkloadSpec spec;
  std::int64_t total_q = 0;
  std::int64_t num_pages = 0;
  HostTensor q;             // [total_q, h_q, d]
  HostTensor k, v;          // paged storage (see token_major_pages) or flat [total_k, h_kv, d]
  HostTensor page_table;    // [B, max_pages] int32 (paged)
  HostTensor cu_seqlens_k;  // [B + 1] int32 (flat)
  HostTensor cu_seqlens_q;  // [B + 1] int32
  HostTensor k_len;         // [B] int32
  HostTensor topk;          // [h_kv, total_q, topk] int32, producer-contract rows
  HostTensor sinks;         // [h_q] fp32 (when spec.sinks)
  HostTensor index_q;       // [total_q, h_i, d] (when h_i > 0)
  HostTensor index_k;       // paged [num_pages, 1, page_size, d] or flat [total_k, 1, d]

  VarlenBatch batch() const;
  KvCache kv() const;        // views of k, v with the page table / cu_seqlens_k
  KvCache index_kv() const;  // index_k with the page table / cu_seqlens_k
  // Prefill arguments writing into out [total_q, h_q, d] and lse [total_q, h_q] (lse may be
  // an empty HostTensor = absent).
  PrefillArgs prefill_args(const HostTensor& out, const HostTensor& lse) const;
};

// Writes NaN into every K/V slot of each request's last page at or past its k_len (paged
// workloads with host values): memory the spec leaves undefined (stale cache contents), which
// no result may depend on (P is 0 there, but 0 * NaN is not).
void poison_cache_tails(Workload& w);

// FP8 E4M3 copies of w's K and V (stored = fp8(value / descale), satfinite) with their descale
// factors, [1] (per tensor) or [h_kv] (per KV head); w's K and V become the dequantised values
// (fp8 * descale, rounded to w's dtype: exact when the factors are powers of two), which is
// what a reference must read. NaN (poisoned tails) stays NaN (code 0x7f).
struct Fp8Kv {
  HostTensor k, v, k_descale, v_descale;
};
Fp8Kv quantise_kv_fp8(Workload& w, const std::vector<float>& k_factors, const std::vector<float>& v_factors);

// `v` pointing at `storage`'s data, with its dtype (e.g. a K/V view retyped to its FP8 copy).
TensorView retyped(TensorView v, const HostTensor& storage);

// Builds every tensor from the spec. Values: randn * 0.25 for Q/K/V and the index branch,
// sinks randn; pages a random permutation of physical ids; unused page-table entries hold
// random in-range ids.
Workload make_workload(const WorkloadSpec& spec);

// The MSA decode layout of a head-major top-k: [h_kv, rows, K] -> [rows, h_kv, K], contiguous.
HostTensor query_major_topk(const HostTensor& head_major);

// Fills topk [h_kv, total_q, topk] with the generator's rows (producer contract: a -1-padded
// prefix of unique ids <= local, local block last, min(topk, local + 1) ids).
void fill_topk(HostTensor& topk, const std::vector<Request>& requests, int h_kv, int topk_width,
               Selection selection, double clustered_p, std::uint64_t seed);

// Number of visible key tokens of one row's selection (the effective-FLOP count of
// targets.md): (min(K, local + 1) - 1) * 128 + pos % 128 + 1 for producer-contract rows.
std::int64_t selected_tokens(std::int64_t pos, int topk);

}  // namespace msa::bench
