// The one place where a backend is chosen for each operator. An operator the chosen backend
// does not implement is an msa::Error, never a silent fallback.
#include <cmath>
#include <string>

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
    impl = cuda_make();
#else
    (void)cuda_make;
#endif
  }
  if (!impl) unsupported(op, options.backend);
#if MSA_WITH_CUDA
  // Checked here, once, so that no CUDA call of the backend meets a missing device first.
  if (options.backend == Backend::kCuda && !cuda::device_present())
    throw Error("options.backend", "cuda", std::string(op) + ": no CUDA device is visible to this process");
#endif
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
