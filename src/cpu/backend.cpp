// The CPU backend's operator objects: validate, then call the reference functions.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/impl.h"
#include "core/plan_inputs.h"
#include "core/validate.h"
#include "cpu/reference.h"

namespace msa::cpu {

namespace {

// Partial buffers of the block-major prefill: o [topk, total_q, h_q, d], lse [topk, total_q, h_q].
std::size_t partial_floats(const AttentionShape& s, std::int64_t total_q) {
  const auto rows = static_cast<std::size_t>(s.topk) * static_cast<std::size_t>(total_q) *
                    static_cast<std::size_t>(s.h_q);
  return rows * static_cast<std::size_t>(s.d) + rows;
}

// Scratch either owned (resized in plan) or borrowed from the caller.
class Scratch {
 public:
  void borrow(void* data, std::size_t bytes) {
    MSA_REQUIRE(reinterpret_cast<std::uintptr_t>(data) % 256 == 0, "workspace.data",
                std::to_string(reinterpret_cast<std::uintptr_t>(data)), "must be 256-byte aligned");
    borrowed_ = static_cast<float*>(data);
    borrowed_floats_ = data != nullptr ? bytes / sizeof(float) : 0;
  }
  float* get(std::size_t floats, bool may_allocate) {
    if (borrowed_) {
      MSA_REQUIRE(floats <= borrowed_floats_, "workspace.bytes",
                  std::to_string(borrowed_floats_ * sizeof(float)),
                  "too small: this plan needs " + std::to_string(floats * sizeof(float)));
      return borrowed_;
    }
    if (owned_.size() < floats) {
      MSA_REQUIRE(may_allocate, "workspace", "unplanned", "call plan() before run()");
      owned_.resize(floats);
    }
    return owned_.data();
  }

 private:
  float* borrowed_ = nullptr;
  std::size_t borrowed_floats_ = 0;
  std::vector<float> owned_;
};

class PrefillCpu final : public SparsePrefill::Impl {
 public:
  void set_workspace(void* data, std::size_t bytes) override {
    scratch_.borrow(data, bytes);
    planned_ = false;  // the partials' room is sized in plan()
  }

  void plan(const VarlenBatch& batch, const TensorView& topk, cudaStream_t) override {
    planned_ = false;
    plan_ = build_k2q_csr(shape, batch, topk, options);  // validates batch and topk first
    scratch_.get(partial_floats(shape, plan_.total_q), /*may_allocate=*/true);
    inputs_.keep(batch, topk);
    planned_ = true;
  }

  void run(const PrefillArgs& args, cudaStream_t) override {
    MSA_REQUIRE(planned_, "plan", "none", "call plan() before run()");
    const BatchInfo info = validate_prefill(shape, args, options, Device::kCpu);
    MSA_REQUIRE(info.batch == plan_.batch, "k_len.shape[0]", std::to_string(info.batch),
                "differs from the planned batch = " + std::to_string(plan_.batch));
    MSA_REQUIRE(info.total_q == plan_.total_q, "q.shape[0]", std::to_string(info.total_q),
                "differs from the planned total_q = " + std::to_string(plan_.total_q));
    inputs_.expect_same(args.batch, args.topk);
    float* o_partial = scratch_.get(partial_floats(shape, plan_.total_q), false);
    float* lse_partial = o_partial + static_cast<std::size_t>(shape.topk) * static_cast<std::size_t>(plan_.total_q) *
                                         static_cast<std::size_t>(shape.h_q) * static_cast<std::size_t>(shape.d);
    cpu::sparse_prefill_partials(shape, args, plan_, o_partial, lse_partial);

    CombineArgs c;
    c.o_partial = TensorView::contiguous(o_partial, DType::kFP32,
                                         {shape.topk, plan_.total_q, shape.h_q, shape.d});
    c.lse_partial = TensorView::contiguous(lse_partial, DType::kFP32,
                                           {shape.topk, plan_.total_q, shape.h_q});
    c.split_counts = TensorView::contiguous(plan_.split_counts.data(), DType::kInt32,
                                            {plan_.total_q, shape.h_kv});
    c.out = args.out;
    c.lse = args.lse;
    c.sinks = args.sinks;
    cpu::combine(shape, c);
  }

  K2qCsr plan_snapshot() const override {
    MSA_REQUIRE(planned_, "plan", "none", "call plan() before plan_snapshot()");
    return plan_;
  }

 private:
  K2qCsr plan_;
  PlanInputs inputs_;
  bool planned_ = false;
  Scratch scratch_;
};

class DecodeCpu final : public SparseDecode::Impl {
 public:
  void set_workspace(void* data, std::size_t) override {  // the CPU decode needs no scratch
    MSA_REQUIRE(reinterpret_cast<std::uintptr_t>(data) % 256 == 0, "workspace.data",
                std::to_string(reinterpret_cast<std::uintptr_t>(data)), "must be 256-byte aligned");
  }
  void plan(std::int64_t batch, int q_per_request, std::int64_t max_seq_len, cudaStream_t) override {
    planned_ = false;
    validate_decode_plan(batch, q_per_request, max_seq_len);
    batch_ = batch;
    q_per_request_ = q_per_request;
    max_seq_len_ = max_seq_len;
    planned_ = true;
  }
  void run(const DecodeArgs& args, cudaStream_t) override {
    MSA_REQUIRE(planned_, "plan", "none", "call plan() before run()");
    const BatchInfo info = validate_decode(shape, args, options, Device::kCpu);
    MSA_REQUIRE(info.batch == batch_, "seq_len.shape[0]", std::to_string(info.batch),
                "differs from the planned batch = " + std::to_string(batch_));
    MSA_REQUIRE(args.q_per_request == q_per_request_, "q_per_request", std::to_string(args.q_per_request),
                "differs from the planned q_per_request = " + std::to_string(q_per_request_));
    // max_seq_len 0: no bound given (sparse_decode()).
    MSA_REQUIRE(max_seq_len_ == 0 || info.max_k_len <= max_seq_len_, "seq_len", std::to_string(info.max_k_len),
                "beyond the planned max_seq_len = " + std::to_string(max_seq_len_));
    cpu::sparse_decode(shape, args);
  }

 private:
  bool planned_ = false;
  std::int64_t batch_ = 0;
  int q_per_request_ = 0;
  std::int64_t max_seq_len_ = 0;
};

class IndexerCpu final : public Indexer::Impl {
 public:
  void plan(const VarlenBatch&, cudaStream_t) override {}
  void run(const IndexerArgs& args, cudaStream_t) override {
    validate_indexer(h_i, d, args, Device::kCpu);
    cpu::indexer(args, scale != 0.f ? scale : 1.f / std::sqrt(static_cast<float>(d)));
  }
};

class TopkCpu final : public TopK::Impl {
 public:
  void plan(const VarlenBatch&, cudaStream_t) override {}
  void run(const TopkArgs& args, cudaStream_t) override {
    validate_topk_args(topk, args, Device::kCpu);
    cpu::topk_select(args, topk, options.topk_ranking);
  }
};

// The twin of the fused indexer + top-k: the indexer's scores into a buffer of
// ceil(max_k_len / 128) columns, then the exact top-k over them (the definition the CUDA kernel
// meets without the buffer).
class IndexerTopkCpu final : public IndexerTopK::Impl {
 public:
  void set_workspace(void*, std::size_t) override {}  // the CPU twin needs none
  void plan(const ProblemSize& problem, cudaStream_t) override {
    planned_ = false;
    validate_problem(problem);
    problem_ = problem;
    planned_ = true;
  }
  void run(const IndexerTopkArgs& args, cudaStream_t) override {
    MSA_REQUIRE(planned_, "plan", "none", "call plan() before run()");
    const BatchInfo info = validate_indexer_topk(h_i, d, topk, args, problem_.max_k_len, Device::kCpu);
    MSA_REQUIRE(info.batch == problem_.batch, "k_len.shape[0]", std::to_string(info.batch),
                "differs from the planned batch = " + std::to_string(problem_.batch));
    MSA_REQUIRE(info.total_q == problem_.total_q, "index_q.shape[0]", std::to_string(info.total_q),
                "differs from the planned total_q = " + std::to_string(problem_.total_q));
    const std::int64_t cols = std::max<std::int64_t>(1, (problem_.max_k_len + kBlockSize - 1) / kBlockSize);
    std::vector<float> scores(static_cast<std::size_t>(h_i) * static_cast<std::size_t>(info.total_q) *
                              static_cast<std::size_t>(cols));
    const TensorView sv = TensorView::contiguous(scores.data(), DType::kFP32, {h_i, info.total_q, cols});
    cpu::indexer(IndexerArgs{args.index_q, args.index_k, args.batch, sv}, scale != 0.f ? scale : 1.f / std::sqrt(static_cast<float>(d)));
    cpu::topk_select(TopkArgs{sv, args.batch, args.topk}, topk, TopkRanking::kExact);
  }

 private:
  bool planned_ = false;
  ProblemSize problem_;
};

class CombineCpu final : public Combine::Impl {
 public:
  void plan(std::int64_t, cudaStream_t) override {}
  void run(const CombineArgs& args, cudaStream_t) override {
    validate_combine(shape, args, Device::kCpu, options.strict);
    cpu::combine(shape, args);
  }
};

}  // namespace

std::unique_ptr<SparsePrefill::Impl> make_prefill() { return std::make_unique<PrefillCpu>(); }
std::unique_ptr<SparseDecode::Impl> make_decode() { return std::make_unique<DecodeCpu>(); }
std::unique_ptr<Indexer::Impl> make_indexer() { return std::make_unique<IndexerCpu>(); }
std::unique_ptr<TopK::Impl> make_topk() { return std::make_unique<TopkCpu>(); }
std::unique_ptr<IndexerTopK::Impl> make_indexer_topk() { return std::make_unique<IndexerTopkCpu>(); }
std::unique_ptr<Combine::Impl> make_combine() { return std::make_unique<CombineCpu>(); }

std::size_t prefill_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem) {
  return partial_floats(shape, problem.total_q) * sizeof(float);
}
std::size_t decode_workspace_bytes(const AttentionShape&, const ProblemSize&) { return 0; }

void lengths_from_offsets(const std::int32_t* offsets, std::int64_t in_step, std::int32_t* lengths,
                          std::int64_t out_step, std::int64_t batch) {
  // In 64 bits, then wrapped to 32 as C++20 defines it: hostile offsets give garbage lengths
  // (which the operators refuse), never undefined behaviour.
  for (std::int64_t b = 0; b < batch; ++b)
    lengths[b * out_step] = static_cast<std::int32_t>(std::int64_t{offsets[(b + 1) * in_step]} - offsets[b * in_step]);
}

}  // namespace msa::cpu
