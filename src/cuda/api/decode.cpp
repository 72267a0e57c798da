// The CUDA sparse decode operator (spec §4): plan() fixes the geometry and carves the workspace
// from host-known sizes (B, Q, a bound on seq_len), launching nothing; run() validates the
// metadata, then launches the tile-union kernel over the (KV head, query tile) pairs. When the
// pairs alone would leave SMs idle, each is split over its union and the combine merges the
// splits (programmatic dependent launch); otherwise the kernel writes out and lse itself.
// seq_len, top-k, the page table and sinks are read on the device only, so one captured run()
// replays step after step with new contents in the same buffers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/batch.h"
#include "core/check.h"
#include "core/impl.h"
#include "core/validate.h"
#include "cuda/api/decode_params.h"
#include "cuda/api/device.h"
#include "cuda/api/dispatch.h"
#include "cuda/api/host_mirrors.h"
#include "cuda/combine/launch.h"
#include "cuda/common/workspace.h"
#include "cuda/prefill/sm90/common/tma.h"
#include "cuda/prefill/sm90/launch.h"

namespace msa::cuda {

namespace {

void check_decode_plan(const AttentionShape& shape, std::int64_t batch, int q_per_request, std::int64_t max_seq_len) {
  MSA_REQUIRE(prefill_head_dim_built(shape.d), "shape.d", std::to_string(shape.d),
              "the CUDA sparse decode supports head dim 128 only (for now)");
  validate_decode_plan(batch, q_per_request, max_seq_len);
}

class DecodeCuda final : public SparseDecode::Impl {
 public:
  void set_workspace(void* data, std::size_t bytes) override {
    scratch_.borrow(data, bytes);
    planned_ = false;  // the partials lived in the previous workspace
  }

  void plan(std::int64_t batch, int q_per_request, std::int64_t max_seq_len, cudaStream_t /*stream*/) override {
    planned_ = false;
    check_decode_plan(shape, batch, q_per_request, max_seq_len);
    geo_ = decode_geometry(shape, batch, q_per_request, max_seq_len);
    const std::size_t bytes = decode_workspace(shape, geo_, nullptr).bytes;
    ws_ = decode_workspace(shape, geo_, scratch_.get(bytes));
    if (sm_count_ == 0) sm_count_ = current_sm_count();
    max_seq_len_ = max_seq_len;
    planned_ = true;
  }

  void run(const DecodeArgs& args, cudaStream_t stream) override {
    MSA_REQUIRE(planned_, "plan", "none", "call plan() before run()");
    const BatchInfo info = validate_decode(shape, args, options, Device::kCuda);  // metadata only
    MSA_REQUIRE(info.batch == geo_.batch, "seq_len.shape[0]", std::to_string(info.batch),
                "differs from the planned batch = " + std::to_string(geo_.batch));
    MSA_REQUIRE(args.q_per_request == geo_.q_per_request, "q_per_request", std::to_string(args.q_per_request),
                "differs from the planned q_per_request = " + std::to_string(geo_.q_per_request));
    MSA_REQUIRE(contiguous_vector(args.seq_len), "seq_len.stride[0]", std::to_string(args.seq_len.stride[0]),
                "seq_len must be contiguous");
    MSA_REQUIRE(!args.sinks.present() || contiguous_vector(args.sinks), "sinks.stride[0]",
                std::to_string(args.sinks.stride[0]), "sinks must be contiguous");
    MSA_REQUIRE(!args.lse.present() || (args.lse.stride[0] == shape.h_q && args.lse.stride[1] == 1), "lse.stride",
                args.lse.present() ? std::to_string(args.lse.stride[0]) + ", " + std::to_string(args.lse.stride[1])
                                   : "",
                "lse must be contiguous [B * Q, h_q]");
    check_cuda_decode(args);
    // Strict mode: every value check of the CPU backend on host copies (one synchronisation),
    // plus the planned bound on seq_len, before anything is launched.
    if (options.strict) strict_check(args, stream);
    if (geo_.total_q == 0) return;  // no request: nothing to write

    launch_decode(shape, args, geo_, ws_, sm_count_, stream);
  }

 private:
  void strict_check(const DecodeArgs& a, cudaStream_t stream) const {
    HostMirrors m;
    DecodeArgs h = a;
    h.seq_len = m.mirror(a.seq_len, stream);
    h.topk = m.mirror(a.topk, stream);
    h.kv.page_table = m.mirror(a.kv.page_table, stream);
    h.kv.cu_seqlens_k = m.mirror(a.kv.cu_seqlens_k, stream);
    h.sinks = m.mirror(a.sinks, stream);
    h.k_descale = m.mirror(a.k_descale, stream);
    h.v_descale = m.mirror(a.v_descale, stream);
    m.wait(stream);
    for (TensorView* t : {&h.q, &h.kv.k, &h.kv.v, &h.out, &h.lse}) *t = as_host(*t);
    const BatchInfo info = validate_decode(shape, h, options, Device::kCpu);
    // max_seq_len 0: no bound was given (sparse_decode()).
    MSA_REQUIRE(max_seq_len_ == 0 || info.max_k_len <= max_seq_len_, "seq_len", std::to_string(info.max_k_len),
                "beyond the planned max_seq_len = " + std::to_string(max_seq_len_));
  }

  DeviceScratch scratch_;  // the caller's workspace or this object's, grown by plan()
  bool planned_ = false;
  DecodeGeometry geo_{};
  DecodeWorkspace ws_{};
  std::int64_t max_seq_len_ = 0;
  int sm_count_ = 0;
};

}  // namespace

void launch_decode(const AttentionShape& shape, const DecodeArgs& a, const DecodeGeometry& g, const DecodeWorkspace& w,
                   int sm_count, cudaStream_t stream) {
  const prefill_sm90::AttentionParams attn = decode_attention_params(shape, a, g, w);
  // Building the TMA descriptors is the last thing that may throw, before any launch.
  const prefill_sm90::PrefillTma tma = prefill_sm90::make_prefill_tma(attn, a.q.dtype, a.kv.k.dtype, shape.d);
  const DType q_dtype = a.q.dtype;
  dispatch_decode(q_dtype, a.kv.k.dtype, shape.d, [&]<DType kKvDtype, int kHeadDim>() {
    launch_tile_union<kKvDtype, kHeadDim, TileUnionUse::kDecode>(decode_tile_union_params(attn, a, g), tma, sm_count,
                                                                 stream);
    if (g.splits == 1) return;  // the kernel wrote out and lse itself
    // The partials are in q's dtype (bf16 with FP8 K/V).
    const CombineParams c = decode_combine_params(shape, a, g, w);
    dispatch_combine(q_dtype, kHeadDim,
                     [&]<DType kDtype, int kD>() { launch_combine<kDtype, kD>(c, sm_count, stream, true); });
  });
}

std::unique_ptr<SparseDecode::Impl> make_decode() { return std::make_unique<DecodeCuda>(); }

std::size_t decode_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem, const Options& options) {
  (void)options;
  MSA_REQUIRE(problem.batch == 0 || problem.total_q % problem.batch == 0, "problem.total_q",
              std::to_string(problem.total_q), "must be batch * q_per_request for a decode");
  const int q_per_request = problem.batch > 0 ? static_cast<int>(problem.total_q / problem.batch) : 1;
  check_decode_plan(shape, problem.batch, q_per_request, problem.max_k_len);
  // The most that any decode no larger in batch, total_q and max_k_len needs (a bound of 0, none
  // given, counting as larger than any), so that a workspace sized for the largest step an
  // engine runs holds every smaller one's. Only split steps hold partials, and a step splits
  // only while its (KV head, tile) pairs are at most half of kDecodeCtaTarget, with tiles of at
  // most 16 queries: small steps, which a larger batch does not need. A split's bytes do not
  // shrink as a positive bound grows (more blocks, as many or more splits), so the bound itself
  // (kMaxKvLen for none) is the largest; plan()'s own sizing with none (requests of topk blocks)
  // is taken too.
  const std::int64_t bound = problem.max_k_len > 0 ? problem.max_k_len : kMaxKvLen;
  std::size_t most = 0;
  const std::int64_t most_rows = std::int64_t{kDecodeCtaTarget} / 2 * 16;
  for (std::int64_t b = 1; b <= std::min(problem.batch, most_rows); ++b) {
    for (int q = 1; q <= 16 && b * q <= problem.total_q; ++q) {
      if (std::int64_t{shape.h_kv} * ((b * q + 15) / 16) > kDecodeCtaTarget / 2) break;  // no split from here on
      for (const std::int64_t len : {bound, std::int64_t{0}})
        most = std::max(most, decode_workspace(shape, decode_geometry(shape, b, q, len), nullptr).bytes);
    }
  }
  return most;
}

}  // namespace msa::cuda
