// The sm_90a KV-block-major prefill kernel alone: seeded workloads, the host plan, the
// kernel launched directly, and every (slot, query, head) partial it must write compared with
// an FP64 recomputation over that one block; every other output entry must stay untouched.
// Paged cases hold NaN in every cache slot past a request's k_len.
//
// The plan comes from the host k2q builder (msa::build_k2q_csr), tested on its own in
// tests/cpu/test_planner.cpp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <ostream>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "cuda/prefill/sm90/launch.h"
#include "cuda/prefill/sm90/params.h"
#include "msa/options.h"
#include "msa/plan.h"

namespace {

using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Selection;
using msa::bench::Workload;
using msa::bench::WorkloadSpec;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// The plan in the kernel's form: qsplit [h_kv, total_q * topk] and work items [n, 6], from
// the host builder (the oracle), with the items shuffled: results must not depend on order.
struct TestPlan {
  std::vector<std::int32_t> qsplit;
  std::vector<std::int32_t> work;  // (kv_head, row, q_begin, q_count, b, block) per item
  int max_q_count = 0;
};

TestPlan build_plan(const Workload& w, int q_per_item, std::uint64_t seed) {
  msa::Options options;
  options.q_per_item = q_per_item;
  msa::K2qCsr csr = msa::build_k2q_csr(w.spec.shape, w.batch(), w.topk.view(), options);
  std::shuffle(csr.work.begin(), csr.work.end(), std::mt19937_64(seed));
  TestPlan plan;
  plan.qsplit = std::move(csr.qsplit);
  for (const msa::WorkItem& it : csr.work) {
    plan.work.insert(plan.work.end(), {it.kv_head, it.row, it.q_begin, it.q_count, it.b, it.block});
    plan.max_q_count = std::max(plan.max_q_count, it.q_count);
  }
  return plan;
}

// Device copy of a host buffer, freed with the object.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const void* host, std::size_t n) : bytes(n) {
    if (cudaMalloc(&ptr, std::max<std::size_t>(n, 16)) != cudaSuccess) ptr = nullptr;
    if (ptr && host && n) cudaMemcpy(ptr, host, n, cudaMemcpyHostToDevice);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr); }
};

struct Case {
  std::string name;
  int h_q, h_kv, topk;
  std::vector<Request> requests;
  int page_size;             // 0 = flat
  bool token_major = false;  // paged storage [pages, page_size, h_kv, d]
  Selection selection = Selection::kRandom;
  bool beyond_local = false;  // add in-range ids past a query's local block (no visible key)
  int q_per_item = 64;
  std::uint64_t seed = 1;
};
// Test names in CTest and gtest output: the case name, not the struct bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Raw outputs of one launch.
struct Outputs {
  std::vector<std::uint16_t> o;  // [topk, total_q, h_q, 128] bf16 bits
  std::vector<float> lse;        // [topk, total_q, h_q]
};

double bf16_to_double(std::uint16_t bits) {
  const std::uint32_t u = std::uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

class PrefillKernel : public ::testing::TestWithParam<Case> {};

TEST_P(PrefillKernel, MatchesFp64PerBlock) {
  if (!msa::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  constexpr int kD = 128;

  WorkloadSpec spec;
  spec.shape.h_q = c.h_q;
  spec.shape.h_kv = c.h_kv;
  spec.shape.d = kD;
  spec.shape.topk = c.topk;
  spec.requests = c.requests;
  spec.page_size = c.page_size;
  spec.token_major_pages = c.token_major;
  spec.selection = c.selection;
  spec.seed = c.seed;
  Workload w = msa::bench::make_workload(spec);
  const int batch = static_cast<int>(c.requests.size());
  const int group = c.h_q / c.h_kv;
  const auto* cu_q = w.cu_seqlens_q.data<std::int32_t>();
  const auto* k_len = w.k_len.data<std::int32_t>();

  if (c.beyond_local) {  // first -1 of each row -> the request's last block when past local
    auto* ids = w.topk.data<std::int32_t>();
    for (int g = 0; g < c.h_kv; ++g)
      for (int b = 0; b < batch; ++b)
        for (int q = cu_q[b]; q < cu_q[b + 1]; ++q) {
          std::int32_t* row = ids + (std::int64_t(g) * w.total_q + q) * c.topk;
          const int last = (k_len[b] - 1) / 128;
          const int local = (k_len[b] - (cu_q[b + 1] - cu_q[b]) + (q - cu_q[b])) / 128;
          if (last > local && std::find(row, row + c.topk, last) == row + c.topk)
            for (int j = 0; j < c.topk; ++j)
              if (row[j] < 0) { row[j] = last; break; }
        }
  }

  msa::bench::poison_cache_tails(w);  // NaN past each k_len in its last page: never read into a result
  const TestPlan plan = build_plan(w, c.q_per_item, c.seed);
  const int work_count = static_cast<int>(plan.work.size() / 6);
  ASSERT_GT(work_count, 0);

  // Device inputs.
  const msa::KvCache kv = w.kv();
  DeviceBuffer d_q(w.q.raw(), w.q.bytes()), d_k(w.k.raw(), w.k.bytes()), d_v(w.v.raw(), w.v.bytes());
  DeviceBuffer d_pt(c.page_size ? w.page_table.raw() : nullptr, c.page_size ? w.page_table.bytes() : 0);
  DeviceBuffer d_cuk(c.page_size ? nullptr : w.cu_seqlens_k.raw(), c.page_size ? 0 : w.cu_seqlens_k.bytes());
  DeviceBuffer d_cuq(w.cu_seqlens_q.raw(), w.cu_seqlens_q.bytes()), d_klen(w.k_len.raw(), w.k_len.bytes());
  DeviceBuffer d_work(plan.work.data(), plan.work.size() * 4), d_count(&work_count, 4);
  DeviceBuffer d_qsplit(plan.qsplit.data(), plan.qsplit.size() * 4);
  const std::int64_t plane = w.total_q * c.h_q;
  DeviceBuffer d_o(nullptr, std::size_t(c.topk) * plane * kD * 2), d_lse(nullptr, std::size_t(c.topk) * plane * 4);
  for (void* ptr : {d_q.ptr, d_k.ptr, d_v.ptr, d_pt.ptr, d_cuk.ptr, d_cuq.ptr, d_klen.ptr, d_work.ptr,
                    d_count.ptr, d_qsplit.ptr, d_o.ptr, d_lse.ptr})
    ASSERT_NE(ptr, nullptr);

  msa::cuda::PrefillParams p{};
  p.q = d_q.ptr;
  p.stride_q_token = std::int64_t(c.h_q) * kD;
  p.stride_q_head = kD;
  p.k = d_k.ptr;
  p.v = d_v.ptr;
  if (c.page_size) {
    p.stride_kv_page = kv.k.stride[0];
    p.stride_kv_head = kv.k.stride[1];
    p.stride_kv_token = kv.k.stride[2];
    p.num_pages = w.num_pages;
    p.page_size = c.page_size;
    p.page_table = static_cast<const std::int32_t*>(d_pt.ptr);
    p.stride_page_table = w.page_table.shape()[1];
    p.page_table_cols = w.page_table.shape()[1];
  } else {
    p.stride_kv_token = kv.k.stride[0];
    p.stride_kv_head = kv.k.stride[1];
    p.kv_rows = w.k.shape()[0];
    p.cu_seqlens_k = static_cast<const std::int32_t*>(d_cuk.ptr);
  }
  p.cu_seqlens_q = static_cast<const std::int32_t*>(d_cuq.ptr);
  p.k_len = static_cast<const std::int32_t*>(d_klen.ptr);
  p.work = static_cast<const std::int32_t*>(d_work.ptr);
  p.work_count = static_cast<const std::int32_t*>(d_count.ptr);
  p.qsplit = static_cast<const std::int32_t*>(d_qsplit.ptr);
  p.edges_per_head = w.total_q * c.topk;
  p.o_partial = d_o.ptr;
  p.lse_partial = static_cast<float*>(d_lse.ptr);
  p.total_q = w.total_q;
  p.h_q = c.h_q;
  p.h_kv = c.h_kv;
  p.group = group;
  p.topk = c.topk;
  const double scale = 1.0 / std::sqrt(double(kD));
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);

  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // Two grids: the full persistent grid and a small one (every CTA loops over many items);
  // the outputs must be bitwise identical.
  auto run = [&](int grid, Outputs& out) {
    CUDA_OK(cudaMemset(d_o.ptr, 0xFF, d_o.bytes));  // NaN bits: unwritten entries stay NaN
    CUDA_OK(cudaMemset(d_lse.ptr, 0xFF, d_lse.bytes));
    msa::cuda::launch_prefill_sm90(p, grid, nullptr);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    out.o.resize(d_o.bytes / 2);
    out.lse.resize(d_lse.bytes / 4);
    CUDA_OK(cudaMemcpy(out.o.data(), d_o.ptr, d_o.bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(out.lse.data(), d_lse.ptr, d_lse.bytes, cudaMemcpyDeviceToHost));
  };
  Outputs first, second;
  run(sms * msa::cuda::prefill_sm90_ctas_per_sm(), first);
  if (HasFatalFailure()) return;
  run(std::min(work_count, 5), second);
  if (HasFatalFailure()) return;
  EXPECT_EQ(std::memcmp(first.o.data(), second.o.data(), first.o.size() * 2), 0) << "o not reproducible";
  EXPECT_EQ(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * 4), 0) << "lse not reproducible";

  // FP64 reference of every expected entry.
  auto kv_index = [&](int b, int g, int token) -> std::int64_t {
    if (c.page_size == 0)
      return (std::int64_t(w.cu_seqlens_k.data<std::int32_t>()[b]) + token) * kv.k.stride[0] + g * kv.k.stride[1];
    const std::int64_t page = w.page_table.data<std::int32_t>()[b * w.page_table.shape()[1] + token / c.page_size];
    return page * kv.k.stride[0] + g * kv.k.stride[1] + (token % c.page_size) * kv.k.stride[2];
  };
  std::vector<char> expected(static_cast<std::size_t>(c.topk * plane), 0);
  double dot = 0, norm_ref = 0, norm_got = 0, max_err = 0, max_lse_err = 0;
  std::int64_t bad = 0, bad_lse = 0, empty_rows = 0;
  std::vector<double> s(128), qf(kD), kf(128 * kD), vf(128 * kD);
  for (int item = 0; item < work_count; ++item) {
    const std::int32_t* wi = &plan.work[6 * item];
    const int g = wi[0], q_begin = wi[2], q_count = wi[3], b = wi[4], blk = wi[5];
    const int q_len = cu_q[b + 1] - cu_q[b];
    const int tokens = std::min(128, k_len[b] - blk * 128);
    for (int t = 0; t < tokens; ++t)
      for (int d = 0; d < kD; ++d) {
        const std::int64_t idx = kv_index(b, g, blk * 128 + t) + d;
        kf[t * kD + d] = w.k.get(idx);
        vf[t * kD + d] = w.v.get(idx);
      }
    for (int e = q_begin; e < q_begin + q_count; ++e) {
      const std::uint32_t v = static_cast<std::uint32_t>(plan.qsplit[g * p.edges_per_head + e]);
      const int q_local = static_cast<int>(v & 0xFFFFFF), slot = static_cast<int>(v >> 24);
      const int qg = cu_q[b] + q_local;
      const int pos = k_len[b] - q_len + q_local;
      const int visible = std::max(0, std::min(tokens, pos - blk * 128 + 1));
      for (int j = 0; j < group; ++j) {
        const int h = g * group + j;
        const std::int64_t row = slot * plane + std::int64_t(qg) * c.h_q + h;
        ASSERT_EQ(expected[row], 0) << "plan wrote (slot, q, h) twice";
        expected[row] = 1;
        for (int d = 0; d < kD; ++d) qf[d] = w.q.get((std::int64_t(qg) * c.h_q + h) * kD + d);
        double m = -std::numeric_limits<double>::infinity();
        for (int t = 0; t < visible; ++t) {
          double acc = 0;
          for (int d = 0; d < kD; ++d) acc += qf[d] * kf[t * kD + d];
          s[t] = acc * scale;
          m = std::max(m, s[t]);
        }
        double z = 0;
        for (int t = 0; t < visible; ++t) z += std::exp(s[t] - m);
        const double ref_lse = visible ? m + std::log(z) : -std::numeric_limits<double>::infinity();
        const float got_lse = first.lse[row];
        if (!visible) {
          ++empty_rows;
          if (!(std::isinf(got_lse) && got_lse < 0)) ++bad_lse;
        } else if (!(std::abs(got_lse - ref_lse) <= 1e-3)) {
          ++bad_lse;
        }
        if (visible) max_lse_err = std::max(max_lse_err, std::abs(got_lse - ref_lse));
        for (int d = 0; d < kD; ++d) {
          double ref = 0;
          for (int t = 0; t < visible; ++t) ref += std::exp(s[t] - ref_lse) * vf[t * kD + d];
          const double got = bf16_to_double(first.o[row * kD + d]);
          const double err = std::abs(got - ref);
          if (!(err <= 1e-2 + 1e-2 * std::abs(ref)) || (!visible && got != 0.0)) {
            if (bad < 5)
              ADD_FAILURE() << "o[slot " << slot << ", q " << qg << ", h " << h << ", d " << d << "] = " << got
                            << ", expected " << ref << " (block " << blk << ", visible " << visible << ")";
            ++bad;
          }
          max_err = std::max(max_err, std::isnan(err) ? 1e30 : err);
          dot += ref * got;
          norm_ref += ref * ref;
          norm_got += got * got;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "max |err| " << max_err;
  EXPECT_EQ(bad_lse, 0) << "max lse |err| " << max_lse_err;
  const double cosine = dot / std::sqrt(norm_ref * norm_got);
  EXPECT_GE(cosine, 0.9999);
  if (c.beyond_local) {
    EXPECT_GT(empty_rows, 0) << "the case was meant to hold edges with no visible key";
  }

  // Untouched entries keep the poison bits.
  std::int64_t stray = 0;
  for (std::int64_t row = 0; row < c.topk * plane; ++row) {
    if (expected[row]) continue;
    std::uint32_t bits;
    std::memcpy(&bits, &first.lse[row], 4);
    bool touched = bits != 0xFFFFFFFFu;
    for (int d = 0; d < kD && !touched; ++d) touched = first.o[row * kD + d] != 0xFFFF;
    stray += touched;
  }
  EXPECT_EQ(stray, 0) << "entries written outside the plan";
  RecordProperty("items", work_count);
  std::printf("[%s] items %d, max q_count %d, empty rows %lld, max |o err| %.3g, max |lse err| %.3g, cosine %.8f\n",
              c.name.c_str(), work_count, plan.max_q_count, static_cast<long long>(empty_rows), max_err,
              max_lse_err, cosine);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // Prefix not a multiple of 128, tail blocks, a single-query request, G = 16.
  v.push_back({"page128_g16", 64, 4, 4, {{300, 1000}, {1, 77}, {130, 130}}, 128});
  // Token-major pages of 64 (a block spans two pages), G = 4, no-visible-key edges.
  v.push_back({"page64_g4_tokmajor", 16, 4, 8, {{257, 700}, {1, 1}, {40, 300}}, 64, true,
               Selection::kRandom, true, 64, 2});
  // Pages of 16 (eight per block), G = 1.
  v.push_back({"page16_g1", 4, 4, 5, {{200, 900}, {3, 129}}, 16, false, Selection::kRandom, false, 64, 3});
  // Flat varlen K/V, G = 16, no-visible-key edges.
  v.push_back({"flat_g16", 32, 2, 8, {{300, 1000}, {1, 1000}, {64, 64}}, 0, false, Selection::kRandom, true, 64, 4});
  // Hot rows: every query selects every block -> items of q_count 64 at G = 16 (8 M tiles).
  v.push_back({"hot_page32_g16", 16, 1, 8, {{300, 700}}, 32, false, Selection::kAll, false, 64, 5});
  // Items smaller than an M tile but G = 8, pages of 128, q_per_item 13.
  v.push_back({"page128_g8_qpi13", 16, 2, 6, {{100, 500}, {77, 77}}, 128, false, Selection::kRandom, false, 13, 6});
  // G = 6 does not divide the 64-row M tile: queries straddle tiles and TMA boxes are one row.
  v.push_back({"page128_g6_straddle", 12, 2, 6, {{200, 700}, {9, 9}}, 128, false, Selection::kRandom, false, 64, 7});
  // G = 2: boxes of two rows start mid swizzle atom (rows 2, 4, 6 of each 8).
  v.push_back({"page32_g2", 8, 4, 8, {{150, 600}}, 32, false, Selection::kRandom, false, 64, 8});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Sm90, PrefillKernel, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& param_info) { return param_info.param.name; });

}  // namespace
