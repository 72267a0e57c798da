#include "tools/device_workload.h"

#if MSA_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <vector>

namespace msa::tool {

#if MSA_WITH_CUDA

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(what, cudaGetErrorName(e), cudaGetErrorString(e));
}

}  // namespace

struct DeviceWorkload::Buffers {
  PrefillArgs args;
  std::vector<void*> owned;

  // A device copy of `host` keeping the view's shape and strides (e.g. token-major pages).
  TensorView upload(const bench::HostTensor& host, TensorView view) {
    if (!view.present()) return view;
    void* p = nullptr;
    check(cudaMalloc(&p, std::max<std::size_t>(host.bytes(), 16)), "cudaMalloc");
    owned.push_back(p);
    check(cudaMemcpy(p, host.raw(), host.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
    view.data = p;
    view.device = Device::kCuda;
    return view;
  }
};

DeviceWorkload::DeviceWorkload(const bench::Workload& w) : b_(std::make_unique<Buffers>()) {
  const AttentionShape& s = w.spec.shape;
  const KvCache kv = w.kv();
  PrefillArgs& a = b_->args;
  a.q = b_->upload(w.q, w.q.view());
  a.kv.k = b_->upload(w.k, kv.k);
  a.kv.v = b_->upload(w.v, kv.v);
  a.kv.page_table = b_->upload(w.page_table, kv.page_table);
  a.kv.cu_seqlens_k = b_->upload(w.cu_seqlens_k, kv.cu_seqlens_k);
  a.sinks = b_->upload(w.sinks, w.sinks.view());
  a.batch = w.batch();
  a.topk = w.topk.view();
  const bench::HostTensor out(w.spec.dtype, {w.total_q, s.h_q, s.d}), lse(DType::kFP32, {w.total_q, s.h_q});
  a.out = b_->upload(out, out.view());
  a.lse = b_->upload(lse, lse.view());
}

DeviceWorkload::~DeviceWorkload() {
  for (void* p : b_->owned) cudaFree(p);
}

PrefillArgs DeviceWorkload::args() const { return b_->args; }

void DeviceWorkload::synchronize() const { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

void DeviceWorkload::download(bench::HostTensor& out, bench::HostTensor& lse) const {
  synchronize();
  check(cudaMemcpy(out.raw(), b_->args.out.data, out.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(lse.raw(), b_->args.lse.data, lse.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
}

#else

struct DeviceWorkload::Buffers {};
DeviceWorkload::DeviceWorkload(const bench::Workload&) {
  throw Error("backend", "cuda", "this build has no CUDA backend");
}
DeviceWorkload::~DeviceWorkload() = default;
PrefillArgs DeviceWorkload::args() const { return {}; }
void DeviceWorkload::download(bench::HostTensor&, bench::HostTensor&) const {}
void DeviceWorkload::synchronize() const {}

#endif

}  // namespace msa::tool
