// The public Indexer and IndexerTopK on the device: the sm_90a prefill indexer kernel over caller
// tensors (index queries, the index-K cache, the varlen batch and the scores or top-k all in
// device memory). Indexer::plan() has nothing to prepare; IndexerTopK::plan() fixes the unit
// split from host sizes. Each run() reads the batch on the device only (one launch, two for a
// fused call whose rows are split over units), so a captured graph replays it with new contents
// in the same buffers.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/impl.h"
#include "core/validate.h"
#include "cuda/api/device.h"
#include "cuda/api/dispatch.h"
#include "cuda/api/host_mirrors.h"
#include "cuda/api/prefill_params.h"
#include "cuda/common/workspace.h"
#include "cuda/indexer/launch.h"
#include "cuda/prefill/sm90/common/tma.h"

namespace msa::cuda {

namespace {

// Size checks of what the kernel indexes in 32 bits, and the strict mode's host check of the
// batch and page-table values (one synchronisation), shared by both operators. check(h) runs
// the CPU validation on the host view h of the arguments.
template <class Args, class Check>
void check_index_call(const Args& args, std::int64_t batch, std::int64_t total_q, bool strict, cudaStream_t stream,
                      Check&& check) {
  MSA_REQUIRE(total_q <= INT32_MAX, "index_q.shape[0]", std::to_string(total_q), "must be below 2^31");
  MSA_REQUIRE(batch < INT32_MAX, "k_len.shape[0]", std::to_string(batch), "must be below 2^31 - 1");
  MSA_REQUIRE(batch > 0 || total_q == 0, "k_len.shape[0]", "0",
              "an empty batch has no query rows, but index_q has " + std::to_string(total_q));
  const KvCache& kv = args.index_k;
  MSA_REQUIRE(kv.k.dim(0) <= INT32_MAX, "index_k.k.shape[0]", std::to_string(kv.k.dim(0)),
              "the CUDA indexer needs fewer than 2^31 pages or rows (32-bit TMA coordinates)");
  MSA_REQUIRE(kv.paged() || contiguous_vector(kv.cu_seqlens_k), "index_k.cu_seqlens_k.stride[0]",
              std::to_string(kv.cu_seqlens_k.stride[0]), "device batch tensors must be contiguous");
  if (!strict) return;
  HostMirrors m;
  Args h = args;
  h.batch.cu_seqlens_q = m.mirror(args.batch.cu_seqlens_q, stream);
  h.batch.k_len = m.mirror(args.batch.k_len, stream);
  if (kv.paged())
    h.index_k.page_table = m.mirror(kv.page_table, stream);
  else
    h.index_k.cu_seqlens_k = m.mirror(kv.cu_seqlens_k, stream);
  m.wait(stream);
  h.index_q = as_host(args.index_q);
  h.index_k.k = as_host(kv.k);
  check(h);
}

// The kernel parameters every indexer call shares (the output fields and the unit split are
// the caller's), and the index-K cache's TMA descriptor.
IndexerParams index_params(const TensorView& index_q, const KvCache& kv, const VarlenBatch& batch,
                           std::int64_t total_q, int h_i, int d, float scale) {
  IndexerParams p{};
  set_kv_params(p.cache, kv);
  p.cache.h_kv = 1;
  p.index_q = index_q.data;
  p.stride_q_token = index_q.stride[0];
  p.stride_q_head = index_q.stride[1];
  p.cu_seqlens_q = batch.cu_seqlens_q.ptr<const std::int32_t>();
  p.stride_cu_seqlens_q = batch.cu_seqlens_q.stride[0];
  p.k_len = batch.k_len.ptr<const std::int32_t>();
  p.stride_k_len = batch.k_len.stride[0];
  p.total_q = total_q;
  p.batch = static_cast<int>(batch.k_len.dim(0));
  p.h_i = h_i;
  p.queries_per_tile = kIndexerTileRows / h_i;
  p.scale = scale > 0.f ? scale : 1.f / std::sqrt(static_cast<float>(d));
  return p;
}

IndexerTma index_tma(const IndexerParams& p, const KvCache& kv, int d) {
  IndexerTma tma{};
  tma.k = prefill_sm90::make_kv_tensor_map(p.cache, kv.k.data, kv.k.dtype, d, "index_k.stride");
  tma.box_rows = prefill_sm90::kv_box_rows(p.cache);
  return tma;
}

void check_heads(int h_i) {
  MSA_REQUIRE(h_i <= kIndexerTileRows, "h_i", std::to_string(h_i),
              "the CUDA indexer takes at most " + std::to_string(kIndexerTileRows) + " index heads");
}

class IndexerCuda final : public Indexer::Impl {
 public:
  void plan(const VarlenBatch&, cudaStream_t) override {}

  void run(const IndexerArgs& args, cudaStream_t stream) override {
    const BatchInfo info = validate_indexer(h_i, d, args, Device::kCuda);  // metadata only
    check_heads(h_i);
    const std::int64_t total_q = info.total_q, cols = args.scores.dim(2);
    MSA_REQUIRE(cols <= INT32_MAX, "scores.shape[2]", std::to_string(cols), "must be below 2^31");
    check_index_call(args, info.batch, total_q, options.strict, stream, [&](IndexerArgs h) {
      h.scores = as_host(args.scores);
      validate_indexer(h_i, d, h, Device::kCpu);
    });
    if (total_q == 0 || cols == 0) return;  // no score to write

    IndexerParams p = index_params(args.index_q, args.index_k, args.batch, total_q, h_i, d, scale);
    p.scores = args.scores.ptr<float>();
    p.stride_scores_head = args.scores.stride[0];
    p.stride_scores_token = args.scores.stride[1];
    p.stride_scores_col = args.scores.stride[2];
    p.cols = static_cast<int>(cols);
    if (sm_count_ == 0) sm_count_ = current_sm_count();
    p.chunk_cols = indexer_chunk_cols(total_q, p.queries_per_tile, p.cols, sm_count_);
    p.chunks = (p.cols + p.chunk_cols - 1) / p.chunk_cols;
    const IndexerTma tma = index_tma(p, args.index_k, d);
    dispatch_indexer(args.index_q.dtype,
                     [&]<DType kDtype>() { launch_indexer<kDtype, 0>(p, tma, sm_count_, stream); });
  }

 private:
  int sm_count_ = 0;
};

// The fused indexer + top-k: plan() fixes the unit split (indexer_topk_split) and the partial
// lists' workspace; run() is the indexer kernel with the top-k in its consumers, plus the merge
// when rows are split over units.
class IndexerTopkCuda final : public IndexerTopK::Impl {
 public:
  void set_workspace(void* data, std::size_t bytes) override {
    scratch_.borrow(data, bytes);
    planned_ = false;
  }

  void plan(const ProblemSize& problem, cudaStream_t) override {
    planned_ = false;
    validate_problem(problem);
    check_heads(h_i);
    problem_ = problem;
    split_ = indexer_topk_split(h_i, topk, problem);
    partial_ = static_cast<std::uint64_t*>(scratch_.get(split_.workspace_bytes));
    if (sm_count_ == 0) sm_count_ = current_sm_count();
    planned_ = true;
  }

  void run(const IndexerTopkArgs& args, cudaStream_t stream) override {
    MSA_REQUIRE(planned_, "plan", "none", "call plan() before run()");
    const BatchInfo info = validate_indexer_topk(h_i, d, topk, args, problem_.max_k_len, Device::kCuda);
    check_heads(h_i);
    MSA_REQUIRE(info.batch == problem_.batch, "k_len.shape[0]", std::to_string(info.batch),
                "differs from the planned batch = " + std::to_string(problem_.batch));
    MSA_REQUIRE(info.total_q == problem_.total_q, "index_q.shape[0]", std::to_string(info.total_q),
                "differs from the planned total_q = " + std::to_string(problem_.total_q));
    check_index_call(args, info.batch, info.total_q, options.strict, stream, [&](IndexerTopkArgs h) {
      h.topk = as_host(args.topk);
      validate_indexer_topk(h_i, d, topk, h, problem_.max_k_len, Device::kCpu);
    });
    if (info.total_q == 0) return;

    IndexerParams p = index_params(args.index_q, args.index_k, args.batch, info.total_q, h_i, d, scale);
    p.topk = args.topk.ptr<std::int32_t>();
    p.stride_topk_head = args.topk.stride[0];
    p.stride_topk_token = args.topk.stride[1];
    p.stride_topk_slot = args.topk.stride[2];
    p.k = topk;
    p.cols = split_.cols;
    p.chunk_cols = split_.chunk_cols;
    p.chunks = split_.chunks;
    p.partial = split_.chunks > 1 ? partial_ : nullptr;
    const IndexerTma tma = index_tma(p, args.index_k, d);
    dispatch_indexer(args.index_q.dtype, [&]<DType kDtype>() {
      if (split_.list == 15)
        launch_indexer<kDtype, 15>(p, tma, sm_count_, stream);
      else
        launch_indexer<kDtype, 31>(p, tma, sm_count_, stream);
    });
    if (p.chunks > 1) launch_indexer_merge(p, split_.list, stream);
  }

 private:
  bool planned_ = false;
  ProblemSize problem_;
  IndexerTopkSplit split_;
  DeviceScratch scratch_;
  std::uint64_t* partial_ = nullptr;
  int sm_count_ = 0;
};

}  // namespace

std::unique_ptr<Indexer::Impl> make_indexer() { return std::make_unique<IndexerCuda>(); }
std::unique_ptr<IndexerTopK::Impl> make_indexer_topk() { return std::make_unique<IndexerTopkCuda>(); }

// A bound on what any problem no larger in batch, total_q and max_k_len needs, so that a
// workspace sized for the largest call holds every smaller one's (the split's own bytes shrink
// to 0 as the tiles grow). A split problem's lists take h_i total_q chunks list words of 8 bytes,
// where chunks <= cols / 16 (units of at least 16 columns) and, with tiles < kIndexerTopkWholeRowTiles of
// at most kIndexerTileRows / h_i queries each and chunks <= ceil(kIndexerTopkUnits / tiles),
// h_i total_q chunks <= kIndexerTileRows (kIndexerTopkUnits + kIndexerTopkWholeRowTiles).
std::size_t indexer_topk_workspace_bytes(int h_i, int topk, const ProblemSize& problem) {
  check_heads(h_i);  // before the split divides by the queries of a tile (kIndexerTileRows / h_i)
  const IndexerTopkSplit split = indexer_topk_split(h_i, topk, problem);
  const std::int64_t most_chunks = split.cols / 16;
  if (most_chunks < 2 || problem.total_q <= 0) return split.workspace_bytes;  // no smaller problem splits either
  const std::int64_t rows_chunks =
      std::min(std::int64_t{h_i} * problem.total_q * most_chunks,
               std::int64_t{kIndexerTileRows} * (kIndexerTopkUnits + kIndexerTopkWholeRowTiles));
  const auto bound =
      static_cast<std::size_t>(rows_chunks) * static_cast<std::size_t>(split.list) * sizeof(std::uint64_t);
  MSA_ASSERT(split.workspace_bytes <= bound);
  return bound;
}

}  // namespace msa::cuda
