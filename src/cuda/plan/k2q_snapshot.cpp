// The device plan copied back into the host builder's layout (K2qCsr), for tests and debugging.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/plan_encoding.h"
#include "cuda/common/check.h"
#include "cuda/plan/k2q_device.h"

namespace msa::cuda {

K2qCsr k2q_device_snapshot(const K2qDeviceGeometry& g, const K2qDeviceBuffers& buf, cudaStream_t stream) {
  MSA_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto copy = [](void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) MSA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  };
  std::int32_t total_rows = 0, work_count = 0;
  copy(&total_rows, buf.total_rows, sizeof total_rows);
  copy(&work_count, buf.work_count, sizeof work_count);
  total_rows = static_cast<std::int32_t>(std::clamp<std::int64_t>(total_rows, 0, g.max_rows));
  work_count = static_cast<std::int32_t>(std::clamp<std::int64_t>(work_count, 0, g.work_capacity));

  K2qCsr csr;
  csr.h_kv = g.h_kv;
  csr.topk = g.topk;
  csr.q_per_item = g.q_per_item;
  csr.batch = g.batch;
  csr.total_q = g.total_q;
  csr.total_rows = total_rows;
  csr.work_capacity = g.work_capacity;
  const auto n = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  constexpr std::size_t kInt = sizeof(std::int32_t);
  csr.row_coords.resize(n(total_rows) * 2);
  copy(csr.row_coords.data(), buf.row_coords, csr.row_coords.size() * kInt);
  // row_ptr: the first total_rows + 1 entries of each head's max_rows + 1.
  csr.row_ptr.resize(n(g.h_kv) * n(total_rows + 1));
  MSA_CUDA_CHECK(cudaMemcpy2D(csr.row_ptr.data(), n(total_rows + 1) * kInt, buf.row_ptr, n(g.max_rows + 1) * kInt,
                              n(total_rows + 1) * kInt, n(g.h_kv), cudaMemcpyDeviceToHost));
  csr.qsplit.resize(n(g.h_kv) * n(g.edges_per_head));
  copy(csr.qsplit.data(), buf.qsplit, csr.qsplit.size() * kInt);
  // q_indices is the query half of each qsplit word, -1 where the word is unused (the tail).
  csr.q_indices.resize(csr.qsplit.size());
  std::transform(csr.qsplit.begin(), csr.qsplit.end(), csr.q_indices.begin(),
                 [](std::int32_t w) { return w == qsplit::kUnused ? -1 : qsplit::query(w); });
  csr.split_counts.resize(n(g.total_q) * n(g.h_kv));
  copy(csr.split_counts.data(), buf.split_counts, csr.split_counts.size() * kInt);
  csr.work.resize(n(work_count));
  copy(csr.work.data(), buf.work, csr.work.size() * sizeof(WorkItem));
  return csr;
}

}  // namespace msa::cuda
