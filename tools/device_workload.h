// Device copies of a workload's prefill tensors, for the stages of `msa run` that run on the
// CUDA backend. Batch and top-k stay on the host: SparsePrefill::plan() stages them itself.
#pragma once

#include <memory>

#include "bench/workload.h"
#include "msa/msa.h"

namespace msa::tool {

class DeviceWorkload {
 public:
  explicit DeviceWorkload(const bench::Workload& w);  // uploads q, k, v, page table, sinks
  ~DeviceWorkload();
  DeviceWorkload(const DeviceWorkload&) = delete;
  DeviceWorkload& operator=(const DeviceWorkload&) = delete;

  // Prefill arguments whose q/kv/sinks/out/lse are device views (batch, topk: host views).
  PrefillArgs args() const;
  // Waits for the device and copies out and lse (shaped like the workload's) back.
  void download(bench::HostTensor& out, bench::HostTensor& lse) const;
  void synchronize() const;

  struct Buffers;

 private:
  std::unique_ptr<Buffers> b_;
};

}  // namespace msa::tool
