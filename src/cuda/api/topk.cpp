// The public TopK on the device: the top-k kernel (either ranking) over caller tensors (scores, the varlen
// batch and the output all in device memory). plan() has nothing to prepare; run() is one
// launch, so a captured graph replays it with new scores and batch contents in the same buffers.
#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "core/check.h"
#include "core/impl.h"
#include "core/validate.h"
#include "cuda/api/host_mirrors.h"
#include "cuda/topk/launch.h"

namespace msa::cuda {

namespace {

class TopkCuda final : public TopK::Impl {
 public:
  void plan(const VarlenBatch&, cudaStream_t) override {}

  void run(const TopkArgs& args, cudaStream_t stream) override {
    validate_topk_args(topk, args, Device::kCuda);  // metadata only
    const TensorView& sc = args.scores;
    const std::int64_t batch = args.batch.k_len.dim(0);
    const std::int64_t total_q = sc.dim(1);
    MSA_REQUIRE(total_q <= INT32_MAX, "scores.shape[1]", std::to_string(total_q), "must be below 2^31");
    MSA_REQUIRE(sc.dim(0) <= INT32_MAX, "scores.shape[0]", std::to_string(sc.dim(0)), "must be below 2^31");
    MSA_REQUIRE(sc.dim(2) <= INT32_MAX, "scores.shape[2]", std::to_string(sc.dim(2)), "must be below 2^31");
    MSA_REQUIRE(batch < INT32_MAX, "k_len.shape[0]", std::to_string(batch), "must be below 2^31 - 1");
    MSA_REQUIRE(batch > 0 || total_q == 0, "k_len.shape[0]", "0",
                "an empty batch has no query rows, but scores has " + std::to_string(total_q));
    if (options.strict) {  // the batch's values, read on the host (one synchronisation)
      HostMirrors m;
      TopkArgs h = args;
      h.batch.cu_seqlens_q = m.mirror(args.batch.cu_seqlens_q, stream);
      h.batch.k_len = m.mirror(args.batch.k_len, stream);
      m.wait(stream);
      h.scores = as_host(args.scores);
      h.topk = as_host(args.topk);
      validate_topk_args(topk, h, Device::kCpu);
    }
    TopkParams p;
    p.scores = sc.ptr<const float>();
    p.scores_stride_h = sc.stride[0];
    p.scores_stride_q = sc.stride[1];
    p.scores_stride_col = sc.stride[2];
    p.cu_seqlens_q = args.batch.cu_seqlens_q.ptr<const std::int32_t>();
    p.cu_seqlens_q_stride = args.batch.cu_seqlens_q.stride[0];
    p.k_len = args.batch.k_len.ptr<const std::int32_t>();
    p.k_len_stride = args.batch.k_len.stride[0];
    p.topk = args.topk.ptr<std::int32_t>();
    p.topk_stride_h = args.topk.stride[0];
    p.topk_stride_q = args.topk.stride[1];
    p.topk_stride_slot = args.topk.stride[2];
    p.total_q = total_q;
    p.h = static_cast<int>(sc.dim(0));
    p.batch = static_cast<int>(batch);
    p.cols = static_cast<int>(sc.dim(2));
    p.k = topk;
    p.quantised = options.topk_ranking == TopkRanking::kQuantised16;
    launch_topk(p, stream);
  }
};

}  // namespace

std::unique_ptr<TopK::Impl> make_topk() { return std::make_unique<TopkCuda>(); }

}  // namespace msa::cuda
