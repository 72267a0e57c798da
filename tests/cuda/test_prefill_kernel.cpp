// The two sm_90a prefill kernels alone, launched directly, in every dtype of the instance list,
// against the CPU oracles of src/cpu:
//  - block-major: the host plan (msa::build_k2q_csr, its work items shuffled: results must not
//    depend on order) and cpu::sparse_prefill_partials, which writes each edge's normalised
//    partial at its slot exactly as the kernel must;
//  - tile-union: every tile, and cpu::sparse_prefill_gather (one FP64 softmax per row), which
//    is what the kernel leaves in slot 0.
// Every entry the oracle does not write must keep its poison bits, every cache slot no request
// reads holds NaN, and a second launch on a small grid (each CTA loops over many items or
// tiles) must give the same bits; so must the tile-union kernel's decode instance, whose
// warpgroups skip the blocks none of their rows chose.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "cpu/reference.h"
#include "cuda/api/dispatch.h"
#include "cuda/api/prefill_params.h"
#include "cuda/api/prefill_workspace.h"
#include "cuda/prefill/sm90/common/tma.h"
#include "cuda/prefill/sm90/launch.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"
#include "msa/msa.h"
#include "tests/support/case_name.h"
#include "tests/support/compare.h"
#include "tests/support/cuda_check.h"
#include "tests/support/device_tensor.h"
#include "tests/support/poison.h"

namespace {

using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Selection;
using msa::bench::Workload;
using msa::bench::WorkloadSpec;
using msa::test::DeviceBuffer;
using msa::test::DeviceTensor;

enum class Kernel { kBlockMajor, kTileUnion };

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
  Kernel kernel = Kernel::kBlockMajor;
  msa::DType dtype = msa::DType::kBF16;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Workload make_case_workload(const Case& c) {
  WorkloadSpec spec;
  spec.shape.h_q = c.h_q;
  spec.shape.h_kv = c.h_kv;
  spec.shape.topk = c.topk;
  spec.requests = c.requests;
  spec.page_size = c.page_size;
  spec.token_major_pages = c.token_major;
  spec.selection = c.selection;
  spec.dtype = c.dtype;
  spec.seed = c.seed;
  Workload w = msa::bench::make_workload(spec);
  if (c.beyond_local) {  // first -1 of each row -> the request's last block when past local
    const auto* cu_q = w.cu_seqlens_q.data<std::int32_t>();
    const auto* k_len = w.k_len.data<std::int32_t>();
    auto* ids = w.topk.data<std::int32_t>();
    for (int g = 0; g < c.h_kv; ++g)
      for (std::size_t b = 0; b < c.requests.size(); ++b)
        for (int q = cu_q[b]; q < cu_q[b + 1]; ++q) {
          std::int32_t* row = ids + (std::int64_t(g) * w.total_q + q) * c.topk;
          const int last = (k_len[b] - 1) / msa::kBlockSize;
          const int local = (k_len[b] - (cu_q[b + 1] - cu_q[b]) + (q - cu_q[b])) / msa::kBlockSize;
          if (last > local && std::find(row, row + c.topk, last) == row + c.topk)
            for (int j = 0; j < c.topk; ++j)
              if (row[j] < 0) {
                row[j] = last;
                break;
              }
        }
  }
  msa::test::poison_unread_cache(w);  // NaN wherever no request reads: never in a result
  return w;
}

// The workload on the device, as the operator layer would pass it to the kernels.
struct DeviceInputs {
  DeviceTensor q, k, v, page_table, cu_seqlens_k, cu_seqlens_q, k_len, topk;
  msa::PrefillArgs args;
  explicit DeviceInputs(const Workload& w)
      : q(w.q), k(w.k, w.kv().k), v(w.v, w.kv().v), page_table(w.spec.page_size > 0, w.page_table, w.page_table.view()),
        cu_seqlens_k(w.spec.page_size == 0, w.cu_seqlens_k, w.cu_seqlens_k.view()), cu_seqlens_q(w.cu_seqlens_q),
        k_len(w.k_len), topk(w.topk) {
    args.q = q.view;
    args.kv = msa::KvCache{k.view, v.view, page_table.view, cu_seqlens_k.view};
    args.batch = msa::VarlenBatch{cu_seqlens_q.view, k_len.view};
    args.topk = topk.view;
  }
};

// o_partial [topk, total_q, h_q, d] and lse_partial [topk, total_q, h_q] on the host as fp32.
struct Partials {
  std::vector<float> o, lse;
};

// The launch's partials, read back into fp32 (o from the instance's 16-bit dtype), with the
// raw bits kept for the reproducibility and poison checks.
struct DeviceOut {
  std::vector<std::uint16_t> o_bits;
  std::vector<float> lse;
};

class PrefillKernel : public ::testing::TestWithParam<Case> {};

TEST_P(PrefillKernel, MatchesCpuOracle) {
  MSA_SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  Workload w = make_case_workload(c);
  const msa::AttentionShape shape = w.spec.shape;
  const int d = shape.d;
  const std::int64_t plane = w.total_q * shape.h_q;
  const std::int64_t rows = shape.topk * plane;
  DeviceInputs in(w);
  DeviceBuffer d_o(static_cast<std::size_t>(rows * d * 2)), d_lse(static_cast<std::size_t>(rows * 4));
  ASSERT_TRUE(d_o && d_lse);

  msa::cuda::PrefillWorkspace ws;
  ws.o_partial = d_o.get();
  ws.lse_partial = d_lse.as<float>();
  const auto attn = msa::cuda::attention_params(shape, in.args, w.total_q, ws);
  const auto tma = msa::cuda::prefill_sm90::make_prefill_tma(attn, c.dtype, d);
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

  // The oracle and what the kernel needs beside the attention problem.
  Partials ref{std::vector<float>(static_cast<std::size_t>(rows * d), std::numeric_limits<float>::quiet_NaN()),
               std::vector<float>(static_cast<std::size_t>(rows), std::numeric_limits<float>::quiet_NaN())};
  DeviceBuffer d_work, d_count, d_qsplit;
  msa::K2qCsr csr;
  if (c.kernel == Kernel::kBlockMajor) {
    msa::Options options;
    options.q_per_item = c.q_per_item;
    csr = msa::build_k2q_csr(shape, w.batch(), w.topk.view(), options);
    ASSERT_FALSE(csr.work.empty());
    msa::cpu::sparse_prefill_partials(shape, w.prefill_args(HostTensor(), HostTensor()), csr, ref.o.data(),
                                      ref.lse.data());
    std::shuffle(csr.work.begin(), csr.work.end(), std::mt19937_64(c.seed));
    const auto count = static_cast<std::int32_t>(csr.work.size());
    d_work = DeviceBuffer(csr.work.data(), csr.work.size() * sizeof(msa::WorkItem));
    d_count = DeviceBuffer(&count, sizeof count);
    d_qsplit = DeviceBuffer(csr.qsplit.data(), csr.qsplit.size() * 4);
  } else {
    HostTensor out(msa::DType::kFP32, {w.total_q, shape.h_q, d}), lse(msa::DType::kFP32, {w.total_q, shape.h_q});
    msa::cpu::sparse_prefill_gather(shape, w.prefill_args(out, lse));
    std::memcpy(ref.o.data(), out.raw(), out.bytes());  // slot 0
    std::memcpy(ref.lse.data(), lse.raw(), lse.bytes());
  }

  // The tile-union kernel's instances: the prefill's narrow one; the decode's (its warpgroups
  // skip blocks none of their rows chose), which must leave every result bitwise as the
  // prefill's does; and at G <= 3 the wide one (tiles of up to 128 queries walked over groups
  // of KV heads: other unions, so other summation orders, held to the oracle's tolerance).
  using msa::cuda::TileUnionUse;
  const int wide_q = msa::cuda::tile_union_free_queries(shape.group(), shape.topk);
  const auto launch = [&](int sm_count, DeviceOut& got, TileUnionUse use = TileUnionUse::kPrefill) {
    d_o.poison();
    d_lse.poison();
    msa::cuda::dispatch_prefill(c.dtype, d, [&]<msa::DType kDtype, int kHeadDim>() {
      if (c.kernel == Kernel::kBlockMajor) {
        const msa::cuda::prefill_sm90::BlockMajorParams p{attn, d_work.as<const msa::WorkItem>(),
                                                          d_count.as<const std::int32_t>(),
                                                          d_qsplit.as<const std::int32_t>(), w.total_q * shape.topk};
        msa::cuda::launch_block_major<kDtype, kHeadDim>(p, tma, sm_count, nullptr);
        return;
      }
      const bool wide = use == TileUnionUse::kWidePrefill;
      const auto p = msa::cuda::tile_union_params(
          attn, in.args, static_cast<std::int64_t>(c.requests.size()),
          wide ? wide_q : msa::cuda::tile_union_queries_per_tile(shape.group(), shape.topk),
          wide ? (shape.h_kv + 1) / 2 : shape.h_kv, nullptr, nullptr);
      if (use == TileUnionUse::kDecode)
        msa::cuda::launch_tile_union<kDtype, kHeadDim, TileUnionUse::kDecode>(p, tma, sm_count, nullptr);
      else if (wide)
        msa::cuda::launch_tile_union<kDtype, kHeadDim, TileUnionUse::kWidePrefill>(p, tma, sm_count, nullptr);
      else
        msa::cuda::launch_tile_union<kDtype, kHeadDim, TileUnionUse::kPrefill>(p, tma, sm_count, nullptr);
    });
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    got.o_bits = d_o.download<std::uint16_t>();
    got.lse = d_lse.download<float>();
  };
  const auto reproducible = [&](const DeviceOut& a, const DeviceOut& b, const char* what) {
    EXPECT_EQ(a.o_bits, b.o_bits) << "o_partial differs " << what;
    EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4), 0) << "lse_partial differs " << what;
  };
  // Rows the oracle wrote are compared; every other row must still hold the poison.
  std::int64_t empty_rows = 0, compared = 0;
  const auto matches_oracle = [&](const DeviceOut& got, const char* what) {
    HostTensor as_float(c.dtype, {rows * d});
    std::memcpy(as_float.raw(), got.o_bits.data(), as_float.bytes());
    std::vector<float> got_o, ref_o, got_lse, ref_lse;
    std::int64_t stray = 0;
    empty_rows = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const bool expected = !std::isnan(ref.lse[r]);
      if (!expected) {
        stray += !msa::test::is_poison_bits(&got.lse[r], 4) ||
                 !msa::test::is_poison_bits(&got.o_bits[r * d], static_cast<std::size_t>(d) * 2);
        continue;
      }
      empty_rows += std::isinf(ref.lse[r]);
      got_lse.push_back(got.lse[r]);
      ref_lse.push_back(ref.lse[r]);
      for (int i = 0; i < d; ++i) {
        got_o.push_back(as_float.get(r * d + i));
        ref_o.push_back(ref.o[r * d + i]);
      }
    }
    ASSERT_FALSE(got_lse.empty()) << what;
    EXPECT_TRUE(msa::test::close(got_o, ref_o)) << "o_partial, " << what;
    EXPECT_TRUE(msa::test::close(got_lse, ref_lse, msa::test::kLseTolerance)) << "lse_partial, " << what;
    EXPECT_EQ(stray, 0) << "entries written outside the oracle's rows, " << what;
    compared = static_cast<std::int64_t>(got_lse.size());
  };

  DeviceOut first, second;
  launch(sms, first);
  if (HasFatalFailure()) return;
  launch(5, second);
  if (HasFatalFailure()) return;
  reproducible(first, second, "between grids");
  if (c.kernel == Kernel::kTileUnion) {
    DeviceOut skipping;
    launch(sms, skipping, TileUnionUse::kDecode);
    if (HasFatalFailure()) return;
    reproducible(first, skipping, "with blocks skipped");
  }
  if (c.kernel == Kernel::kTileUnion && wide_q > msa::cuda::kTileUnionNarrowQueries) {
    // Every wide tile's union fits the list in these cases (the operator checks it before it
    // takes the wide instance).
    const auto* k_len = w.k_len.data<std::int32_t>();
    const auto requests = static_cast<std::int64_t>(c.requests.size());
    ASSERT_TRUE(msa::tile_unions_fit(w.cu_seqlens_q.data<std::int32_t>(), k_len, requests, w.total_q,
                                     *std::max_element(k_len, k_len + requests), shape.topk, wide_q,
                                     msa::cuda::kTileUnionMaxEntries));
    DeviceOut wide, wide_small_grid;
    launch(sms, wide, TileUnionUse::kWidePrefill);
    if (HasFatalFailure()) return;
    launch(5, wide_small_grid, TileUnionUse::kWidePrefill);
    if (HasFatalFailure()) return;
    reproducible(wide, wide_small_grid, "between grids (wide tiles)");
    matches_oracle(wide, "wide tiles");
    if (HasFatalFailure()) return;
  }
  matches_oracle(first, c.kernel == Kernel::kBlockMajor ? "block-major" : "tile-union");
  if (HasFatalFailure()) return;
  if (c.beyond_local && c.kernel == Kernel::kBlockMajor) {
    EXPECT_GT(empty_rows, 0) << "the case was meant to hold edges with no visible key";
  }
  std::printf("[%s] rows %lld, empty %lld\n", c.name.c_str(), static_cast<long long>(compared),
              static_cast<long long>(empty_rows));
}

// The dtypes of this build's prefill instances (MSA_CUDA_DTYPES).
std::vector<msa::DType> built_dtypes() {
  std::vector<msa::DType> v;
#define MSA_BUILT(DT, D) v.push_back(msa::DType::DT);
  MSA_PREFILL_INSTANCES(MSA_BUILT)
#undef MSA_BUILT
  return v;
}

std::vector<Case> cases() {
  std::vector<Case> base;
  // Prefix not a multiple of 128, tail blocks, a single-query request, G = 16.
  base.push_back({"page128_g16", 64, 4, 4, {{300, 1000}, {1, 77}, {130, 130}}, 128});
  // Token-major pages of 64 (a block spans two pages), G = 4, no-visible-key edges.
  base.push_back({"page64_g4_tokmajor", 16, 4, 8, {{257, 700}, {1, 1}, {40, 300}}, 64, true, Selection::kRandom,
                  true, 64, 2});
  // Pages of 16 (eight per block), G = 1.
  base.push_back({"page16_g1", 4, 4, 5, {{200, 900}, {3, 129}}, 16, false, Selection::kRandom, false, 64, 3});
  // Flat varlen K/V, G = 16, no-visible-key edges.
  base.push_back({"flat_g16", 32, 2, 8, {{300, 1000}, {1, 1000}, {64, 64}}, 0, false, Selection::kRandom, true, 64, 4});
  // Hot rows: every query selects every block -> items of q_count 64 at G = 16 (8 M tiles).
  base.push_back({"hot_page32_g16", 16, 1, 8, {{300, 700}}, 32, false, Selection::kAll, false, 64, 5});
  // Items smaller than an M tile but G = 8, pages of 128, q_per_item 13.
  base.push_back({"page128_g8_qpi13", 16, 2, 6, {{100, 500}, {77, 77}}, 128, false, Selection::kRandom, false, 13, 6});
  // G = 6 does not divide the 64-row M tile: queries straddle tiles and TMA boxes are one row.
  base.push_back({"page128_g6_straddle", 12, 2, 6, {{200, 700}, {9, 9}}, 128, false, Selection::kRandom, false, 64, 7});
  // G = 2: boxes of two rows start mid swizzle atom (rows 2, 4, 6 of each 8).
  base.push_back({"page32_g2", 8, 4, 8, {{150, 600}}, 32, false, Selection::kRandom, false, 64, 8});
  // Tile-shared selections: tiles spanning requests (segments), topk 32.
  base.push_back({"tile_shared_page64_g8_topk32", 16, 2, 32, {{70, 5000}, {5, 300}, {40, 40}}, 64, false,
                  Selection::kTileShared, false, 64, 9});
  std::vector<Case> v;
  for (const Kernel kernel : {Kernel::kBlockMajor, Kernel::kTileUnion})
    for (const msa::DType dtype : built_dtypes())
      for (Case c : base) {
        c.kernel = kernel;
        c.dtype = dtype;
        c.name = std::string(kernel == Kernel::kBlockMajor ? "block_major_" : "tile_union_") +
                 (dtype == msa::DType::kBF16 ? "bf16_" : "fp16_") + c.name;
        v.push_back(c);
      }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Sm90, PrefillKernel, ::testing::ValuesIn(cases()), msa::test::CaseName{});

}  // namespace
