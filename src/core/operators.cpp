// The public operator objects: thin forwards to the backend Impl chosen in dispatch.cpp.
#include <string>

#include "core/impl.h"
#include "msa/error.h"

namespace msa {

#define MSA_MOVE_ONLY(Class)                                 \
  Class::~Class() = default;                                 \
  Class::Class(Class&&) noexcept = default;                  \
  Class& Class::operator=(Class&&) noexcept = default;

MSA_MOVE_ONLY(SparsePrefill)
MSA_MOVE_ONLY(SparseDecode)
MSA_MOVE_ONLY(Indexer)
MSA_MOVE_ONLY(TopK)
MSA_MOVE_ONLY(IndexerTopK)
MSA_MOVE_ONLY(Combine)
#undef MSA_MOVE_ONLY

namespace {

// The backend object of an operator; a moved-from operator has none and says so.
template <class ImplPtr>
auto& live(const ImplPtr& impl, const char* op) {
  if (!impl) throw Error(op, "moved-from", "this operator object was moved from; construct a new one");
  return *impl;
}

}  // namespace

// ---- sparse prefill --------------------------------------------------------------------
SparsePrefill::SparsePrefill(const AttentionShape& shape, const Options& options)
    : impl_(make_prefill_impl(shape, options)) {}
std::size_t SparsePrefill::workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                           const Options& options) {
  return prefill_workspace_bytes(shape, problem, options);
}
void SparsePrefill::set_workspace(void* data, std::size_t bytes) { live(impl_, "SparsePrefill").set_workspace(data, bytes); }
void SparsePrefill::plan(const VarlenBatch& batch, const TensorView& topk, cudaStream_t stream) {
  live(impl_, "SparsePrefill").plan(batch, topk, stream);
}
void SparsePrefill::plan(const VarlenBatch& batch, const TensorView& topk, std::int64_t max_k_len,
                         cudaStream_t stream) {
  if (max_k_len < 0) throw Error("max_k_len", std::to_string(max_k_len), "must be >= 0");
  live(impl_, "SparsePrefill").plan_bounded(batch, topk, max_k_len, stream);
}
void SparsePrefill::run(const PrefillArgs& args, cudaStream_t stream) { live(impl_, "SparsePrefill").run(args, stream); }
K2qCsr SparsePrefill::plan_snapshot() const { return live(impl_, "SparsePrefill").plan_snapshot(); }
const AttentionShape& SparsePrefill::shape() const { return live(impl_, "SparsePrefill").shape; }
const Options& SparsePrefill::options() const { return live(impl_, "SparsePrefill").options; }

void sparse_prefill(const AttentionShape& shape, const PrefillArgs& args, const Options& options,
                    cudaStream_t stream) {
  SparsePrefill op(shape, options);
  op.plan(args.batch, args.topk, stream);
  op.run(args, stream);
}

// ---- sparse decode ---------------------------------------------------------------------
SparseDecode::SparseDecode(const AttentionShape& shape, const Options& options)
    : impl_(make_decode_impl(shape, options)) {}
std::size_t SparseDecode::workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                          const Options& options) {
  return decode_workspace_bytes(shape, problem, options);
}
void SparseDecode::set_workspace(void* data, std::size_t bytes) { live(impl_, "SparseDecode").set_workspace(data, bytes); }
void SparseDecode::plan(std::int64_t batch, int q_per_request, std::int64_t max_seq_len,
                        cudaStream_t stream) {
  live(impl_, "SparseDecode").plan(batch, q_per_request, max_seq_len, stream);
}
void SparseDecode::run(const DecodeArgs& args, cudaStream_t stream) { live(impl_, "SparseDecode").run(args, stream); }
const AttentionShape& SparseDecode::shape() const { return live(impl_, "SparseDecode").shape; }
const Options& SparseDecode::options() const { return live(impl_, "SparseDecode").options; }

void sparse_decode(const AttentionShape& shape, const DecodeArgs& args, const Options& options,
                   cudaStream_t stream) {
  SparseDecode op(shape, options);
  op.plan(args.seq_len.dim(0), args.q_per_request, 0, stream);
  op.run(args, stream);
}

// ---- indexer, top-k, combine -----------------------------------------------------------
Indexer::Indexer(int h_i, int d, float scale, const Options& options)
    : impl_(make_indexer_impl(h_i, d, scale, options)) {}
void Indexer::plan(const VarlenBatch& batch, cudaStream_t stream) { live(impl_, "Indexer").plan(batch, stream); }
void Indexer::run(const IndexerArgs& args, cudaStream_t stream) { live(impl_, "Indexer").run(args, stream); }

TopK::TopK(int topk, const Options& options) : impl_(make_topk_impl(topk, options)) {}
void TopK::plan(const VarlenBatch& batch, cudaStream_t stream) { live(impl_, "TopK").plan(batch, stream); }
void TopK::run(const TopkArgs& args, cudaStream_t stream) { live(impl_, "TopK").run(args, stream); }

IndexerTopK::IndexerTopK(int h_i, int d, int topk, float scale, const Options& options)
    : impl_(make_indexer_topk_impl(h_i, d, topk, scale, options)) {}
std::size_t IndexerTopK::workspace_bytes(int h_i, int topk, const ProblemSize& problem, const Options& options) {
  return indexer_topk_workspace_bytes(h_i, topk, problem, options);
}
void IndexerTopK::set_workspace(void* data, std::size_t bytes) {
  live(impl_, "IndexerTopK").set_workspace(data, bytes);
}
void IndexerTopK::plan(const ProblemSize& problem, cudaStream_t stream) { live(impl_, "IndexerTopK").plan(problem, stream); }
void IndexerTopK::run(const IndexerTopkArgs& args, cudaStream_t stream) { live(impl_, "IndexerTopK").run(args, stream); }

Combine::Combine(const AttentionShape& shape, const Options& options)
    : impl_(make_combine_impl(shape, options)) {}
void Combine::plan(std::int64_t total_q, cudaStream_t stream) { live(impl_, "Combine").plan(total_q, stream); }
void Combine::run(const CombineArgs& args, cudaStream_t stream) { live(impl_, "Combine").run(args, stream); }

}  // namespace msa
