// The public Indexer on the device: the sm_90a prefill indexer kernel over caller tensors
// (index queries, the index-K cache, the varlen batch and the scores all in device memory).
// plan() has nothing to prepare; run() is one launch that reads the batch on the device, so a
// captured graph replays it with new contents in the same buffers.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <string>

#include "core/check.h"
#include "core/impl.h"
#include "core/validate.h"
#include "cuda/api/device.h"
#include "cuda/api/dispatch.h"
#include "cuda/api/host_mirrors.h"
#include "cuda/api/prefill_params.h"
#include "cuda/indexer/launch.h"
#include "cuda/prefill/sm90/common/tma.h"

namespace msa::cuda {

namespace {

class IndexerCuda final : public Indexer::Impl {
 public:
  void plan(const VarlenBatch&, cudaStream_t) override {}

  void run(const IndexerArgs& args, cudaStream_t stream) override {
    const BatchInfo info = validate_indexer(h_i, d, args, Device::kCuda);  // metadata only
    MSA_REQUIRE(h_i <= kIndexerTileRows, "h_i", std::to_string(h_i),
                "the CUDA indexer takes at most " + std::to_string(kIndexerTileRows) + " index heads");
    const std::int64_t batch = info.batch, total_q = info.total_q, cols = args.scores.dim(2);
    MSA_REQUIRE(total_q <= INT32_MAX, "index_q.shape[0]", std::to_string(total_q), "must be below 2^31");
    MSA_REQUIRE(batch < INT32_MAX, "k_len.shape[0]", std::to_string(batch), "must be below 2^31 - 1");
    MSA_REQUIRE(batch > 0 || total_q == 0, "k_len.shape[0]", "0",
                "an empty batch has no query rows, but index_q has " + std::to_string(total_q));
    MSA_REQUIRE(cols <= INT32_MAX, "scores.shape[2]", std::to_string(cols), "must be below 2^31");
    const KvCache& kv = args.index_k;
    MSA_REQUIRE(kv.k.dim(0) <= INT32_MAX, "index_k.k.shape[0]", std::to_string(kv.k.dim(0)),
                "the CUDA indexer needs fewer than 2^31 pages or rows (32-bit TMA coordinates)");
    MSA_REQUIRE(kv.paged() || contiguous_vector(kv.cu_seqlens_k), "index_k.cu_seqlens_k.stride[0]",
                std::to_string(kv.cu_seqlens_k.stride[0]), "device batch tensors must be contiguous");
    if (options.strict) {  // the batch and page table values, read on the host (one synchronisation)
      HostMirrors m;
      IndexerArgs h = args;
      h.batch.cu_seqlens_q = m.mirror(args.batch.cu_seqlens_q, stream);
      h.batch.k_len = m.mirror(args.batch.k_len, stream);
      if (kv.paged())
        h.index_k.page_table = m.mirror(kv.page_table, stream);
      else
        h.index_k.cu_seqlens_k = m.mirror(kv.cu_seqlens_k, stream);
      m.wait(stream);
      h.index_q = as_host(args.index_q);
      h.index_k.k = as_host(kv.k);
      h.scores = as_host(args.scores);
      validate_indexer(h_i, d, h, Device::kCpu);
    }
    if (total_q == 0 || cols == 0) return;  // no score to write

    IndexerParams p{};
    set_kv_params(p.cache, kv);
    p.cache.h_kv = 1;
    p.index_q = args.index_q.data;
    p.stride_q_token = args.index_q.stride[0];
    p.stride_q_head = args.index_q.stride[1];
    p.cu_seqlens_q = args.batch.cu_seqlens_q.ptr<const std::int32_t>();
    p.stride_cu_seqlens_q = args.batch.cu_seqlens_q.stride[0];
    p.k_len = args.batch.k_len.ptr<const std::int32_t>();
    p.stride_k_len = args.batch.k_len.stride[0];
    p.scores = args.scores.ptr<float>();
    p.stride_scores_head = args.scores.stride[0];
    p.stride_scores_token = args.scores.stride[1];
    p.stride_scores_col = args.scores.stride[2];
    p.total_q = total_q;
    p.batch = static_cast<int>(batch);
    p.h_i = h_i;
    p.cols = static_cast<int>(cols);
    p.queries_per_tile = kIndexerTileRows / h_i;
    if (sm_count_ == 0) sm_count_ = current_sm_count();
    p.chunk_cols = indexer_chunk_cols(total_q, p.queries_per_tile, p.cols, sm_count_);
    p.chunks = (p.cols + p.chunk_cols - 1) / p.chunk_cols;
    p.scale = scale > 0.f ? scale : 1.f / std::sqrt(static_cast<float>(d));
    IndexerTma tma{};
    tma.k = prefill_sm90::make_kv_tensor_map(p.cache, kv.k.data, kv.k.dtype, d, "index_k.stride");
    tma.box_rows = prefill_sm90::kv_box_rows(p.cache);
    dispatch_indexer(args.index_q.dtype, [&]<DType kDtype>() { launch_indexer<kDtype>(p, tma, sm_count_, stream); });
  }

 private:
  int sm_count_ = 0;
};

}  // namespace

std::unique_ptr<Indexer::Impl> make_indexer() { return std::make_unique<IndexerCuda>(); }

}  // namespace msa::cuda
