#include "tools/device_workload.h"

#if MSA_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

namespace msa::tool {

#if MSA_WITH_CUDA

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(what, cudaGetErrorName(e), cudaGetErrorString(e));
}

void copy_back(void* dst, const TensorView& src, std::size_t bytes) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaMemcpy(dst, src.data, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
}

}  // namespace

struct DeviceWorkload::Buffers {
  std::vector<void*> owned;
  TensorView q, k, v, page_table, cu_seqlens_k, cu_seqlens_q, k_len, sinks, index_q, index_k;
  TensorView k_fp8, v_fp8, k_descale, v_descale;  // set_fp8_kv (the decode's FP8 K/V)
  TensorView topk;           // [h_kv, total_q, K] (a transposed view when query-major)
  TensorView topk_storage;   // the memory as laid out: [h_kv, total_q, K] or [total_q, h_kv, K]
  bool query_major = false;
  TensorView scores, out, lse;
  bool paged = false;

  void* allocate(std::size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<std::size_t>(bytes, 256)), "cudaMalloc");
    owned.push_back(p);
    return p;
  }
  // A device copy of `host` with the view's shape and strides (e.g. token-major pages); an
  // absent view stays absent.
  TensorView upload(const bench::HostTensor& host, TensorView view) {
    if (!view.present()) return view;
    view.data = allocate(host.bytes());
    view.device = Device::kCuda;
    check(cudaMemcpy(view.data, host.raw(), host.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
    return view;
  }
  TensorView zeros(DType dtype, std::initializer_list<std::int64_t> shape) {
    std::int64_t n = 1;
    for (std::int64_t e : shape) n *= e;
    const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(dtype);
    void* p = allocate(bytes);
    check(cudaMemset(p, 0, std::max<std::size_t>(bytes, 256)), "cudaMemset");
    return TensorView::contiguous(p, dtype, shape, Device::kCuda);
  }
  KvCache cache(TensorView key, TensorView value) const {
    KvCache c;
    c.k = key;
    c.v = value;
    if (paged) c.page_table = page_table;
    else c.cu_seqlens_k = cu_seqlens_k;
    return c;
  }
};

DeviceWorkload::DeviceWorkload(const bench::Workload& w, std::int64_t score_cols, bool query_major_topk)
    : b_(std::make_unique<Buffers>()) {
  Buffers& b = *b_;
  const AttentionShape& s = w.spec.shape;
  const KvCache kv = w.kv();
  b.paged = w.spec.page_size > 0;
  b.q = b.upload(w.q, w.q.view());
  b.k = b.upload(w.k, kv.k);
  b.v = b.upload(w.v, kv.v);
  b.page_table = b.upload(w.page_table, kv.page_table);
  b.cu_seqlens_k = b.upload(w.cu_seqlens_k, kv.cu_seqlens_k);
  b.cu_seqlens_q = b.upload(w.cu_seqlens_q, w.cu_seqlens_q.view());
  b.k_len = b.upload(w.k_len, w.k_len.view());
  b.sinks = b.upload(w.sinks, w.sinks.view());
  b.index_q = b.upload(w.index_q, w.index_q.view());
  b.index_k = b.upload(w.index_k, w.index_k.view());
  b.query_major = query_major_topk;
  if (query_major_topk) {
    b.topk_storage = b.zeros(DType::kInt32, {w.total_q, s.h_kv, s.topk});
    b.topk = b.topk_storage;  // [total_q, h_kv, K] seen as [h_kv, total_q, K]
    std::swap(b.topk.shape[0], b.topk.shape[1]);
    std::swap(b.topk.stride[0], b.topk.stride[1]);
  } else {
    b.topk_storage = b.zeros(DType::kInt32, {s.h_kv, w.total_q, s.topk});
    b.topk = b.topk_storage;
  }
  if (!w.topk.empty()) set_topk(w.topk);
  if (score_cols > 0 && w.spec.h_i > 0) b.scores = b.zeros(DType::kFP32, {w.spec.h_i, w.total_q, score_cols});
  b.out = b.zeros(w.spec.dtype, {w.total_q, s.h_q, s.d});
  b.lse = b.zeros(DType::kFP32, {w.total_q, s.h_q});
}

DeviceWorkload::~DeviceWorkload() {
  for (void* p : b_->owned) cudaFree(p);
}

VarlenBatch DeviceWorkload::batch() const { return {b_->cu_seqlens_q, b_->k_len}; }

IndexerArgs DeviceWorkload::indexer_args() const {
  IndexerArgs a;
  a.index_q = b_->index_q;
  a.index_k = b_->cache(b_->index_k, {});
  a.batch = batch();
  a.scores = b_->scores;
  return a;
}

TopkArgs DeviceWorkload::topk_args() const {
  TopkArgs a;
  a.scores = b_->scores;
  a.batch = batch();
  a.topk = b_->topk;
  return a;
}

TensorView DeviceWorkload::topk() const { return b_->topk; }

PrefillArgs DeviceWorkload::prefill_args() const {
  PrefillArgs a;
  a.q = b_->q;
  a.kv = b_->cache(b_->k, b_->v);
  a.batch = batch();
  a.topk = b_->topk;
  a.sinks = b_->sinks;
  a.out = b_->out;
  a.lse = b_->lse;
  return a;
}

DecodeArgs DeviceWorkload::decode_args(int q_per_request) const {
  DecodeArgs a;
  a.q = b_->q;
  const bool fp8 = b_->k_fp8.present();
  a.kv = fp8 ? b_->cache(b_->k_fp8, b_->v_fp8) : b_->cache(b_->k, b_->v);
  a.k_descale = b_->k_descale;
  a.v_descale = b_->v_descale;
  a.seq_len = b_->k_len;
  a.topk = b_->topk_storage;
  a.topk_head_major = !b_->query_major;
  a.q_per_request = q_per_request;
  a.sinks = b_->sinks;
  a.out = b_->out;
  a.lse = b_->lse;
  return a;
}

void DeviceWorkload::set_scores(const bench::HostTensor& scores) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaMemcpy(b_->scores.data, scores.raw(), scores.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
}

void DeviceWorkload::set_topk(const bench::HostTensor& head_major) {
  const TensorView& t = b_->topk;
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (!b_->query_major) {
    check(cudaMemcpy(t.data, head_major.raw(), head_major.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
    return;
  }
  const bench::HostTensor qm = bench::query_major_topk(head_major);
  check(cudaMemcpy(t.data, qm.raw(), qm.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
}

void DeviceWorkload::set_fp8_kv(const bench::Workload& w, const bench::Fp8Kv& f) {
  Buffers& b = *b_;
  const KvCache kv = w.kv();
  b.k_fp8 = b.upload(f.k, bench::retyped(kv.k, f.k));
  b.v_fp8 = b.upload(f.v, bench::retyped(kv.v, f.v));
  b.k_descale = b.upload(f.k_descale, f.k_descale.view());
  b.v_descale = b.upload(f.v_descale, f.v_descale.view());
}

void DeviceWorkload::get_topk(bench::HostTensor& head_major) const {
  const TensorView& t = b_->topk;  // [h, rows, K] with the storage's strides
  const std::int64_t h = t.dim(0), rows = t.dim(1), k = t.dim(2);
  if (!b_->query_major) {
    copy_back(head_major.raw(), t, head_major.bytes());
    return;
  }
  bench::HostTensor qm(DType::kInt32, {rows, h, k});
  copy_back(qm.raw(), t, qm.bytes());
  auto* dst = head_major.data<std::int32_t>();
  const auto* src = qm.data<const std::int32_t>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < h; ++j) std::copy_n(src + (r * h + j) * k, k, dst + (j * rows + r) * k);
}

void DeviceWorkload::get_scores(bench::HostTensor& scores) const { copy_back(scores.raw(), b_->scores, scores.bytes()); }

void DeviceWorkload::get_outputs(bench::HostTensor& out, bench::HostTensor& lse) const {
  copy_back(out.raw(), b_->out, out.bytes());
  copy_back(lse.raw(), b_->lse, lse.bytes());
}

void DeviceWorkload::synchronize() const { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

#else

struct DeviceWorkload::Buffers {};
DeviceWorkload::DeviceWorkload(const bench::Workload&, std::int64_t, bool) {
  throw Error("backend", "cuda", "this build has no CUDA backend");
}
DeviceWorkload::~DeviceWorkload() = default;
VarlenBatch DeviceWorkload::batch() const { return {}; }
IndexerArgs DeviceWorkload::indexer_args() const { return {}; }
TopkArgs DeviceWorkload::topk_args() const { return {}; }
TensorView DeviceWorkload::topk() const { return {}; }
PrefillArgs DeviceWorkload::prefill_args() const { return {}; }
DecodeArgs DeviceWorkload::decode_args(int) const { return {}; }
void DeviceWorkload::set_scores(const bench::HostTensor&) {}
void DeviceWorkload::set_topk(const bench::HostTensor&) {}
void DeviceWorkload::set_fp8_kv(const bench::Workload&, const bench::Fp8Kv&) {}
void DeviceWorkload::get_topk(bench::HostTensor&) const {}
void DeviceWorkload::get_scores(bench::HostTensor&) const {}
void DeviceWorkload::get_outputs(bench::HostTensor&, bench::HostTensor&) const {}
void DeviceWorkload::synchronize() const {}

#endif

}  // namespace msa::tool
