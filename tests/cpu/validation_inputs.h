// The baseline of the table-driven validation tests (tests/cpu/test_validation.cpp runs the
// rows of tests/cpu/test_validation_cases.cpp): valid arguments of each operator, the call a
// row goes through, and the row types.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "bench/workload.h"
#include "msa/msa.h"
#include "tests/support/host_tensor.h"
#include "tests/support/poison.h"

namespace msa::test::validation {

using msa::DType;
using msa::bench::HostTensor;

inline msa::AttentionShape small_shape() {
  msa::AttentionShape s;
  s.h_q = 8;
  s.h_kv = 2;
  s.topk = 4;
  return s;
}

inline msa::bench::WorkloadSpec small_spec(int page_size) {
  msa::bench::WorkloadSpec spec;
  spec.shape = small_shape();
  // total_q = 8; request 0 spans 10 pages of 32, requests 1 and 2 one page each.
  spec.requests = {{5, 300}, {0, 17}, {3, 3}};
  spec.page_size = page_size;
  spec.sinks = true;
  spec.seed = 3;
  return spec;
}

// The call a row goes through.
enum class Op {
  kShape,        // validate_shape and the SparsePrefill constructor
  kPrefill,      // SparsePrefill::run planned on the valid batch (pages of 32)
  kPrefillFlat,  // the same with flat K/V
  kPrefillCuda,  // validate_prefill for a device: metadata only (every view on the device)
  kDecode,       // SparseDecode::run (planned for 3 requests of 2 queries) and validate_decode
  kDecodeCheck,  // validate_decode alone
  kIndexer,
  kTopk,
  kCombine,
};

inline std::string op_name(Op op) {
  static const char* const kNames[] = {"Shape",  "Prefill", "PrefillFlat", "PrefillCuda", "Decode",
                                       "DecodeCheck", "Indexer", "Topk", "Combine"};
  return kNames[static_cast<int>(op)];
}

struct Prefill {
  msa::bench::Workload w;
  HostTensor out, lse;
  msa::PrefillArgs args;
  void load(int page_size, bool token_major = false) {
    auto spec = small_spec(page_size);
    spec.token_major_pages = token_major;
    w = msa::bench::make_workload(spec);
    out = sentinel_tensor(DType::kBF16, {w.total_q, 8, 128});
    lse = sentinel_tensor(DType::kFP32, {w.total_q, 8});
    args = w.prefill_args(out, lse);
  }
};

struct Decode {
  msa::bench::Workload w;
  HostTensor out, lse, query_major;
  msa::DecodeArgs args;
  void load() {
    auto spec = small_spec(64);
    spec.requests = {{2, 300}, {2, 2}, {2, 129}};  // Q = 2 per request, rows b * 2 + t
    w = msa::bench::make_workload(spec);
    out = sentinel_tensor(DType::kBF16, {6, 8, 128});
    lse = sentinel_tensor(DType::kFP32, {6, 8});
    query_major = HostTensor(DType::kInt32, {6, 2, 4});
    for (int q = 0; q < 6; ++q)
      for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 4; ++s)
          query_major.data<std::int32_t>()[(q * 2 + h) * 4 + s] = w.topk.data<std::int32_t>()[(h * 6 + q) * 4 + s];
    args.q = w.q.view();
    args.kv = w.kv();
    args.seq_len = w.k_len.view();
    args.topk = query_major.view();
    args.q_per_request = 2;
    args.sinks = w.sinks.view();
    args.out = out.view();
    args.lse = lse.view();
  }
};

// Valid arguments of the row's operator. `scratch` holds a tensor a mutation puts in place of
// one of them; `value` is the expected value when it is known only at run time (a pointer).
struct Inputs {
  msa::AttentionShape shape = small_shape();
  Prefill p;
  Decode d;
  msa::bench::Workload w;  // indexer and top-k batches
  HostTensor scores, ids;
  msa::IndexerArgs indexer;
  msa::TopkArgs topk;
  HostTensor o_partial, lse_partial, counts, out, lse;
  msa::CombineArgs combine;
  HostTensor scratch;
  std::string value;

  explicit Inputs(Op op) {
    switch (op) {
      case Op::kShape: break;
      case Op::kPrefill: p.load(32); break;
      case Op::kPrefillFlat: p.load(0); break;
      case Op::kPrefillCuda: {
        p.load(32);
        HostTensor bad = copy_of(p.w.topk);
        bad.data<std::int32_t>()[0] = 77;  // strict breach, unreadable on a device
        p.w.page_table.data<std::int32_t>()[0] = -5;
        scratch = std::move(bad);
        p.args.topk = scratch.view();
        for (msa::TensorView* t : {&p.args.q, &p.args.kv.k, &p.args.kv.v, &p.args.kv.page_table,
                                   &p.args.batch.cu_seqlens_q, &p.args.batch.k_len, &p.args.topk, &p.args.sinks,
                                   &p.args.out, &p.args.lse})
          t->device = msa::Device::kCuda;
        break;
      }
      case Op::kDecode:
      case Op::kDecodeCheck: d.load(); break;
      case Op::kIndexer: {
        auto spec = small_spec(16);
        spec.h_i = 2;
        w = msa::bench::make_workload(spec);
        scores = sentinel_tensor(DType::kFP32, {2, w.total_q, 3});  // ceil(300 / 128) = 3
        indexer.index_q = w.index_q.view();
        indexer.index_k = w.index_kv();
        indexer.batch = w.batch();
        indexer.scores = scores.view();
        break;
      }
      case Op::kTopk:
        w = msa::bench::make_workload(small_spec(32));
        scores = HostTensor(DType::kFP32, {2, w.total_q, 3});
        ids = sentinel_tensor(DType::kInt32, {2, w.total_q, 4});
        topk.scores = scores.view();
        topk.batch = w.batch();
        topk.topk = ids.view();
        break;
      case Op::kCombine:
        o_partial = HostTensor(DType::kFP32, {4, 5, 8, 128});
        lse_partial = HostTensor(DType::kFP32, {4, 5, 8});
        counts = HostTensor(DType::kInt32, {5, 2});
        for (int i = 0; i < 10; ++i) counts.data<std::int32_t>()[i] = i % 5;
        out = sentinel_tensor(DType::kBF16, {5, 8, 128});
        lse = sentinel_tensor(DType::kFP32, {5, 8});
        combine.o_partial = o_partial.view();
        combine.lse_partial = lse_partial.view();
        combine.split_counts = counts.view();
        combine.out = out.view();
        combine.lse = lse.view();
        break;
    }
  }
};

using Mutation = void (*)(Inputs&);

struct Reject {
  std::string name;
  Op op;
  Mutation mutate;
  std::string argument, value;
  std::string message = "";  // a part of Error::message(), when the row checks it
  bool strict = false;
};
inline void PrintTo(const Reject& r, std::ostream* os) { *os << r.name; }

struct Accept {
  std::string name;
  Op op;
  Mutation mutate;
};
inline void PrintTo(const Accept& a, std::ostream* os) { *os << a.name; }

// The rows (tests/cpu/test_validation_cases.cpp).
std::vector<Reject> rejections();
std::vector<Accept> acceptances();

}  // namespace msa::test::validation
