// The public Combine on the device: the prefill's combine kernel over caller tensors, through
// the combine's (partial dtype, head dim) dispatch.
#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "core/check.h"
#include "core/impl.h"
#include "core/validate.h"
#include "cuda/api/dispatch.h"
#include "cuda/api/host_mirrors.h"
#include "cuda/combine/launch.h"

namespace msa::cuda {

namespace {

class CombineCuda final : public Combine::Impl {
 public:
  void plan(std::int64_t total_q, cudaStream_t) override {
    MSA_REQUIRE(total_q >= 0 && total_q <= INT32_MAX, "total_q", std::to_string(total_q), "must be in [0, 2^31)");
  }

  void run(const CombineArgs& args, cudaStream_t stream) override {
    validate_combine(shape, args, Device::kCuda, options.strict);  // metadata only
    // What the kernel reads: 16-bit partials, every tensor but out contiguous, out rows on
    // 16-byte boundaries (check_layout) with strides of whole 16-byte chunks.
    MSA_REQUIRE(args.o_partial.dtype == DType::kBF16 || args.o_partial.dtype == DType::kFP16, "o_partial.dtype",
                to_string(args.o_partial.dtype),
                "the CUDA combine reads bf16 or fp16 partials (fp32: the CPU backend)");
    const auto contiguous = [](const TensorView& t, const char* name) {
      MSA_REQUIRE(!t.present() || t.is_contiguous(), std::string(name) + ".stride", t.shape_string(),
                  "the CUDA combine needs it contiguous");
    };
    contiguous(args.o_partial, "o_partial");
    contiguous(args.lse_partial, "lse_partial");
    contiguous(args.split_counts, "split_counts");
    contiguous(args.sinks, "sinks");
    contiguous(args.lse, "lse");
    MSA_REQUIRE(
        args.out.numel() == 0 || (combine_out_stride(args.out, 0) % 8 == 0 && combine_out_stride(args.out, 1) % 8 == 0),
        "out.stride", std::to_string(args.out.stride[0]) + ", " + std::to_string(args.out.stride[1]),
        "the CUDA combine needs token and head strides that are multiples of 8 elements");
    if (options.strict) {  // split counts and sinks, read on the host (one synchronisation)
      HostMirrors m;
      CombineArgs h = args;
      h.split_counts = m.mirror(args.split_counts, stream);
      h.sinks = m.mirror(args.sinks, stream);
      m.wait(stream);
      for (TensorView* t : {&h.o_partial, &h.lse_partial, &h.out, &h.lse}) *t = as_host(*t);
      validate_combine(shape, h, Device::kCpu, true);
    }
    CombineParams c{};
    c.o_partial = args.o_partial.data;
    c.lse_partial = args.lse_partial.ptr<const float>();
    c.split_counts = args.split_counts.ptr<const std::int32_t>();
    c.sinks = args.sinks.present() ? args.sinks.ptr<const float>() : nullptr;
    c.out = args.out.data;
    c.stride_out_token = combine_out_stride(args.out, 0);
    c.stride_out_head = combine_out_stride(args.out, 1);
    c.lse = args.lse.present() ? args.lse.ptr<float>() : nullptr;
    c.total_q = args.o_partial.dim(1);
    c.h_q = shape.h_q;
    c.group = shape.group();
    c.topk = shape.topk;
    c.uniform_count = 1;  // unused: split_counts is given
    c.out_fp16 = args.out.dtype == DType::kFP16;
    dispatch_combine(args.o_partial.dtype, shape.d, [&]<DType kDtype, int kHeadDim>() {
      launch_combine<kDtype, kHeadDim>(c, /*sm_count=*/0, stream, /*programmatic=*/false);  // no tile list
    });
  }
};

}  // namespace

std::unique_ptr<Combine::Impl> make_combine() { return std::make_unique<CombineCuda>(); }

}  // namespace msa::cuda
