// The one place where a backend is chosen for each operator. An operator the chosen backend
// does not implement is an msa::Error, never a silent fallback.
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/impl.h"
#include "core/validate.h"

namespace msa {

namespace {

[[noreturn]] void unsupported(const char* op, Backend b) {
  throw Error("options.backend", backend_name(b),
              std::string(op) + " is not available on this backend in this build");
}

template <class ImplPtr, class CpuMake, class CudaMake>
ImplPtr pick(const char* op, const Options& options, CpuMake cpu_make, CudaMake cuda_make) {
  ImplPtr impl;
  if (options.backend == Backend::kCpu) {
    impl = cpu_make();
  } else {
#if MSA_WITH_CUDA
    // Checked here, once, before the backend is made (its constructor may set up the device),
    // so that no CUDA call of the backend meets a missing device first.
    if (!cuda::device_present())
      throw Error("options.backend", "cuda", std::string(op) + ": no CUDA device is visible to this process");
    impl = cuda_make();
#else
    (void)cuda_make;
#endif
  }
  if (!impl) unsupported(op, options.backend);
  return impl;
}

#if MSA_WITH_CUDA
#define MSA_CUDA_MAKE(fn) [] { return cuda::fn(); }
#else
#define MSA_CUDA_MAKE(fn) [] { return decltype(cpu::fn())(); }
#endif

// The geometry checks the selection operators share (Indexer, TopK, IndexerTopK).
void check_index_geometry(int h_i, int d) {
  MSA_REQUIRE(h_i >= 1 && h_i <= kMaxHeads, "h_i", std::to_string(h_i),
              "must be in 1.." + std::to_string(kMaxHeads));
  MSA_REQUIRE(d == 128, "d", std::to_string(d), "unsupported head dim (supported: 128)");
}
void check_index_scale(float scale) {
  MSA_REQUIRE(std::isfinite(scale) && scale >= 0.f, "scale", std::to_string(scale),
              "must be finite and >= 0 (0 = 1/sqrt(d))");
}
void check_topk_width(int topk) {
  MSA_REQUIRE(topk >= 1 && topk <= 32, "topk", std::to_string(topk), "must be in 1..32");
}

}  // namespace

bool cuda_available() {
#if MSA_WITH_CUDA
  return cuda::device_present();
#else
  return false;
#endif
}

namespace {

// A rank-1 int32 vector of n elements (n < 0: any) and any stride >= 1 (the batch vectors of
// the operators must be contiguous; a cu_seqlens_k an engine slices need not be).
void check_strided_int32(const TensorView& t, const std::string& name, Device device, std::int64_t n) {
  check_present(t, name);
  check_device(t, name, device);
  check_dtype(t, name, DType::kInt32);
  check_rank(t, name, 1);
  if (n >= 0) check_dim(t, name, 0, n);
  MSA_REQUIRE(t.dim(0) >= 0, name + ".shape[0]", std::to_string(t.dim(0)), "extents must be >= 0");
  if (t.dim(0) == 0) return;
  MSA_REQUIRE(t.dim(0) == 1 || (t.stride[0] >= 1 && t.stride[0] <= (INT64_MAX / 4) / t.dim(0)), name + ".stride[0]",
              std::to_string(t.stride[0]), "must be >= 1 (and the view within 2^63 bytes)");
  MSA_REQUIRE(t.data != nullptr, name + ".data", "null", "data pointer is null");
  const auto addr = reinterpret_cast<std::uintptr_t>(t.data);
  MSA_REQUIRE(addr % 4 == 0, name + ".data", std::to_string(addr), "must be aligned to 4 bytes");
}

}  // namespace

void lengths_from_offsets(const TensorView& offsets, const TensorView& lengths, cudaStream_t stream) {
  check_strided_int32(offsets, "offsets", offsets.device, -1);
  MSA_REQUIRE(offsets.dim(0) >= 1 && offsets.dim(0) - 1 <= INT32_MAX, "offsets.shape[0]",
              std::to_string(offsets.dim(0)), "must be B + 1 with 0 <= B < 2^31");
  check_strided_int32(lengths, "lengths", offsets.device, offsets.dim(0) - 1);
  const std::int64_t batch = lengths.dim(0);
  if (batch == 0) return;
  // The byte ranges the two address must be disjoint.
  const auto span = [](const TensorView& t) {
    const auto first = reinterpret_cast<std::uintptr_t>(t.data);
    const std::int64_t step = t.dim(0) == 1 ? 1 : t.stride[0];
    return std::pair{first, first + static_cast<std::uintptr_t>(((t.dim(0) - 1) * step + 1) * 4)};
  };
  const auto [in_first, in_end] = span(offsets);
  const auto [out_first, out_end] = span(lengths);
  MSA_REQUIRE(out_end <= in_first || out_first >= in_end, "lengths.data", "overlaps offsets",
              "lengths must not share memory with offsets");
  const std::int64_t in_step = offsets.stride[0], out_step = batch == 1 ? 1 : lengths.stride[0];
  if (offsets.device == Device::kCpu) {
    cpu::lengths_from_offsets(offsets.ptr<const std::int32_t>(), in_step, lengths.ptr<std::int32_t>(), out_step, batch);
    return;
  }
#if MSA_WITH_CUDA
  MSA_REQUIRE(cuda::device_present(), "offsets.device", "cuda", "no CUDA device is visible to this process");
  cuda::lengths_from_offsets(offsets.ptr<const std::int32_t>(), in_step, lengths.ptr<std::int32_t>(), out_step, batch,
                             stream);
#else
  (void)stream;
  throw Error("offsets.device", "cuda", "this build has no CUDA backend");
#endif
}

std::size_t prefill_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                    const Options& options) {
  validate_shape(shape);
  validate_options(options);
  validate_problem(problem);
  if (options.backend == Backend::kCpu) return cpu::prefill_workspace_bytes(shape, problem);
#if MSA_WITH_CUDA
  return cuda::prefill_workspace_bytes(shape, problem, options);
#else
  unsupported("sparse prefill", options.backend);
#endif
}

std::size_t decode_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                   const Options& options) {
  validate_shape(shape);
  validate_options(options);
  validate_problem(problem);
  if (options.backend == Backend::kCpu) return cpu::decode_workspace_bytes(shape, problem);
#if MSA_WITH_CUDA
  return cuda::decode_workspace_bytes(shape, problem, options);
#else
  unsupported("sparse decode", options.backend);
#endif
}

std::unique_ptr<SparsePrefill::Impl> make_prefill_impl(const AttentionShape& shape,
                                                       const Options& options) {
  validate_shape(shape);
  validate_options(options);
  auto impl = pick<std::unique_ptr<SparsePrefill::Impl>>("sparse prefill", options,
                                                         [] { return cpu::make_prefill(); },
                                                         MSA_CUDA_MAKE(make_prefill));
  impl->shape = shape;
  impl->options = options;
  return impl;
}

std::unique_ptr<SparseDecode::Impl> make_decode_impl(const AttentionShape& shape,
                                                     const Options& options) {
  validate_shape(shape);
  validate_options(options);
  auto impl = pick<std::unique_ptr<SparseDecode::Impl>>("sparse decode", options,
                                                        [] { return cpu::make_decode(); },
                                                        MSA_CUDA_MAKE(make_decode));
  impl->shape = shape;
  impl->options = options;
  return impl;
}

std::unique_ptr<Indexer::Impl> make_indexer_impl(int h_i, int d, float scale,
                                                 const Options& options) {
  validate_options(options);
  check_index_geometry(h_i, d);
  check_index_scale(scale);
  auto impl = pick<std::unique_ptr<Indexer::Impl>>("indexer", options,
                                                   [] { return cpu::make_indexer(); },
                                                   MSA_CUDA_MAKE(make_indexer));
  impl->h_i = h_i;
  impl->d = d;
  impl->scale = scale;
  impl->options = options;
  return impl;
}

std::unique_ptr<TopK::Impl> make_topk_impl(int topk, const Options& options) {
  validate_options(options);
  check_topk_width(topk);
  auto impl = pick<std::unique_ptr<TopK::Impl>>("top-k", options, [] { return cpu::make_topk(); },
                                                MSA_CUDA_MAKE(make_topk));
  impl->topk = topk;
  impl->options = options;
  return impl;
}

namespace {

void check_indexer_topk(int h_i, int d, int topk, const Options& options) {
  validate_options(options);
  check_index_geometry(h_i, d);
  check_topk_width(topk);
  MSA_REQUIRE(options.topk_ranking == TopkRanking::kExact, "options.topk_ranking",
              topk_ranking_name(options.topk_ranking),
              "IndexerTopK ranks exactly (the quantised ranking needs each row's score range first: use "
              "Indexer and TopK)");
}

}  // namespace

std::size_t indexer_topk_workspace_bytes(int h_i, int topk, const ProblemSize& problem, const Options& options) {
  check_indexer_topk(h_i, 128, topk, options);
  validate_problem(problem);
  if (options.backend == Backend::kCpu) return 0;
#if MSA_WITH_CUDA
  return cuda::indexer_topk_workspace_bytes(h_i, topk, problem);
#else
  unsupported("indexer + top-k", options.backend);
#endif
}

std::unique_ptr<IndexerTopK::Impl> make_indexer_topk_impl(int h_i, int d, int topk, float scale,
                                                          const Options& options) {
  check_indexer_topk(h_i, d, topk, options);
  check_index_scale(scale);
  auto impl = pick<std::unique_ptr<IndexerTopK::Impl>>("indexer + top-k", options,
                                                       [] { return cpu::make_indexer_topk(); },
                                                       MSA_CUDA_MAKE(make_indexer_topk));
  impl->h_i = h_i;
  impl->d = d;
  impl->topk = topk;
  impl->scale = scale;
  impl->options = options;
  return impl;
}

std::unique_ptr<Combine::Impl> make_combine_impl(const AttentionShape& shape,
                                                 const Options& options) {
  validate_shape(shape);
  validate_options(options);
  auto impl = pick<std::unique_ptr<Combine::Impl>>("combine", options,
                                                   [] { return cpu::make_combine(); },
                                                   MSA_CUDA_MAKE(make_combine));
  impl->shape = shape;
  impl->options = options;
  return impl;
}

}  // namespace msa
