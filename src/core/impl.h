// Backend interfaces behind the public operator objects. Each backend implements them
// (src/cpu/backend.cpp, src/cuda/api/); core/dispatch.cpp is the one place that picks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "msa/combine.h"
#include "msa/decode.h"
#include "msa/indexer.h"
#include "msa/prefill.h"
#include "msa/topk.h"

namespace msa {

struct SparsePrefill::Impl {
  virtual ~Impl() = default;
  virtual void set_workspace(void* data, std::size_t bytes) = 0;
  virtual void plan(const VarlenBatch& batch, const TensorView& topk, cudaStream_t stream) = 0;
  // plan() with a host bound on k_len (max_k_len >= 0; SparsePrefill::plan's 4-argument
  // overload). Backends that read the batch on the host need no bound and ignore it.
  virtual void plan_bounded(const VarlenBatch& batch, const TensorView& topk,
                            std::int64_t max_k_len, cudaStream_t stream) {
    (void)max_k_len;
    plan(batch, topk, stream);
  }
  virtual void run(const PrefillArgs& args, cudaStream_t stream) = 0;
  virtual K2qCsr plan_snapshot() const = 0;
  AttentionShape shape;
  Options options;
};

struct SparseDecode::Impl {
  virtual ~Impl() = default;
  virtual void set_workspace(void* data, std::size_t bytes) = 0;
  virtual void plan(std::int64_t batch, int q_per_request, std::int64_t max_seq_len,
                    cudaStream_t stream) = 0;
  virtual void run(const DecodeArgs& args, cudaStream_t stream) = 0;
  AttentionShape shape;
  Options options;
};

struct Indexer::Impl {
  virtual ~Impl() = default;
  virtual void plan(const VarlenBatch& batch, cudaStream_t stream) = 0;
  virtual void run(const IndexerArgs& args, cudaStream_t stream) = 0;
  int h_i = 0;
  int d = 0;
  float scale = 0.f;
  Options options;
};

struct TopK::Impl {
  virtual ~Impl() = default;
  virtual void plan(const VarlenBatch& batch, cudaStream_t stream) = 0;
  virtual void run(const TopkArgs& args, cudaStream_t stream) = 0;
  int topk = 0;
  Options options;
};

struct IndexerTopK::Impl {
  virtual ~Impl() = default;
  virtual void set_workspace(void* data, std::size_t bytes) = 0;
  virtual void plan(const ProblemSize& problem, cudaStream_t stream) = 0;
  virtual void run(const IndexerTopkArgs& args, cudaStream_t stream) = 0;
  int h_i = 0;
  int d = 0;
  int topk = 0;
  float scale = 0.f;
  Options options;
};

struct Combine::Impl {
  virtual ~Impl() = default;
  virtual void plan(std::int64_t total_q, cudaStream_t stream) = 0;
  virtual void run(const CombineArgs& args, cudaStream_t stream) = 0;
  AttentionShape shape;
  Options options;
};

// core/dispatch.cpp: validate the construction arguments and pick the backend.
std::unique_ptr<SparsePrefill::Impl> make_prefill_impl(const AttentionShape& shape,
                                                       const Options& options);
std::unique_ptr<SparseDecode::Impl> make_decode_impl(const AttentionShape& shape,
                                                     const Options& options);
std::unique_ptr<Indexer::Impl> make_indexer_impl(int h_i, int d, float scale,
                                                 const Options& options);
std::unique_ptr<TopK::Impl> make_topk_impl(int topk, const Options& options);
std::unique_ptr<IndexerTopK::Impl> make_indexer_topk_impl(int h_i, int d, int topk, float scale,
                                                          const Options& options);
std::unique_ptr<Combine::Impl> make_combine_impl(const AttentionShape& shape,
                                                 const Options& options);

// Workspace sizes per backend (bytes).
std::size_t prefill_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                    const Options& options);
std::size_t decode_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                   const Options& options);
std::size_t indexer_topk_workspace_bytes(int h_i, int topk, const ProblemSize& problem,
                                         const Options& options);

namespace cpu {
std::unique_ptr<SparsePrefill::Impl> make_prefill();
std::unique_ptr<SparseDecode::Impl> make_decode();
std::unique_ptr<Indexer::Impl> make_indexer();
std::unique_ptr<TopK::Impl> make_topk();
std::unique_ptr<IndexerTopK::Impl> make_indexer_topk();
std::unique_ptr<Combine::Impl> make_combine();
std::size_t prefill_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem);
std::size_t decode_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem);
// lengths[b * out_step] = offsets[(b + 1) * in_step] - offsets[b * in_step], b < batch.
void lengths_from_offsets(const std::int32_t* offsets, std::int64_t in_step, std::int32_t* lengths,
                          std::int64_t out_step, std::int64_t batch);
}  // namespace cpu

#if MSA_WITH_CUDA
namespace cuda {
// Each returns nullptr when the CUDA backend does not implement the operator yet.
std::unique_ptr<SparsePrefill::Impl> make_prefill();
std::unique_ptr<SparseDecode::Impl> make_decode();
std::unique_ptr<Indexer::Impl> make_indexer();
std::unique_ptr<TopK::Impl> make_topk();
std::unique_ptr<IndexerTopK::Impl> make_indexer_topk();
std::unique_ptr<Combine::Impl> make_combine();
std::size_t prefill_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                    const Options& options);
std::size_t indexer_topk_workspace_bytes(int h_i, int topk, const ProblemSize& problem);
std::size_t decode_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                   const Options& options);
bool device_present();
void lengths_from_offsets(const std::int32_t* offsets, std::int64_t in_step, std::int32_t* lengths,
                          std::int64_t out_step, std::int64_t batch, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace msa
