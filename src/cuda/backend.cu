// The CUDA backend's operator objects. Operators not yet implemented on the GPU return
// nullptr so that dispatch reports them as unsupported (never a silent CPU fallback).
#include <cuda_runtime.h>

#include "core/impl.h"
#include "msa/error.h"

namespace msa::cuda {

bool device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
}

std::unique_ptr<SparsePrefill::Impl> make_prefill() { return nullptr; }
std::unique_ptr<SparseDecode::Impl> make_decode() { return nullptr; }
std::unique_ptr<Indexer::Impl> make_indexer() { return nullptr; }
std::unique_ptr<TopK::Impl> make_topk() { return nullptr; }
std::unique_ptr<Combine::Impl> make_combine() { return nullptr; }

std::size_t prefill_workspace_bytes(const AttentionShape&, const ProblemSize&, const Options&) {
  throw Error("options.backend", "cuda", "sparse prefill is not available on this backend yet");
}

}  // namespace msa::cuda
