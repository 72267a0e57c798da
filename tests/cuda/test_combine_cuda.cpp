// The CUDA combine kernel against its CPU oracle msa::cpu::combine
// on random bf16 and fp16 partials (the built instances) with -inf slots, n = 0 rows, all -inf
// rows, NaN / +inf LSEs and sinks; bf16 and fp16 outputs, strided out, d = 64 / 128 / 256;
// bitwise-identical reruns.
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

#include "bench/compare.h"
#include "bench/workload.h"
#include "core/impl.h"
#include "cpu/reference.h"
#include "cuda/api/dispatch.h"
#include "cuda/combine/launch.h"
#include "msa/msa.h"
#include "tests/support/compare.h"
#include "tests/support/cuda_check.h"
#include "tests/support/device_tensor.h"
#include "tests/support/poison.h"

namespace {

using msa::bench::HostTensor;

constexpr float kInf = std::numeric_limits<float>::infinity();

// The combine instance for (partial dtype, d), through the operator layer's one dispatch, with
// the current device's SM count where a tile list makes the launch read it (as the operators
// pass theirs).
void launch(const msa::cuda::CombineParams& p, msa::DType partial, int d, cudaStream_t stream, bool programmatic) {
  int device = 0, sm_count = 0;
  if (p.tile_list != nullptr) {
    CUDA_OK(cudaGetDevice(&device));
    CUDA_OK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  }
  msa::cuda::dispatch_combine(partial, d, [&]<msa::DType kDtype, int kHeadDim>() {
    msa::cuda::launch_combine<kDtype, kHeadDim>(p, sm_count, stream, programmatic);
  });
}

struct CombineCase {
  std::string name;
  std::int64_t total_q = 0;
  int h_q = 0;
  int h_kv = 0;
  int topk = 0;
  int d = 128;
  bool sinks = false;
  bool fp16_out = false;
  int out_head_pad = 0;  // out is [total_q, h_q, d + pad] viewed as [total_q, h_q, d]
  std::uint64_t seed = 1;
  msa::DType partial = msa::DType::kBF16;  // o_partial dtype (the instance)
};
// Test names in CTest and gtest output: the case name, not the struct bytes.
void PrintTo(const CombineCase& c, std::ostream* os) { *os << c.name; }

struct CombineInputs {
  HostTensor o_partial;     // [topk, total_q, h_q, d] bf16 | fp16
  HostTensor lse_partial;   // [topk, total_q, h_q] fp32
  HostTensor split_counts;  // [total_q, h_kv] int32
  HostTensor sinks;         // [h_q] fp32 (when the case has sinks)
};

CombineInputs make_inputs(const CombineCase& c) {
  CombineInputs in;
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  in.o_partial = HostTensor(c.partial, {c.topk, c.total_q, c.h_q, c.d});
  for (std::int64_t i = 0; i < in.o_partial.numel(); ++i) in.o_partial.set(i, normal(rng) * 0.5f);
  in.lse_partial = HostTensor(msa::DType::kFP32, {c.topk, c.total_q, c.h_q});
  auto* lse = in.lse_partial.data<float>();
  for (std::int64_t i = 0; i < in.lse_partial.numel(); ++i) {
    const float r = uniform(rng);
    lse[i] = r < 0.15f ? -kInf : (uniform(rng) - 0.5f) * 16.f;
  }
  in.split_counts = HostTensor(msa::DType::kInt32, {c.total_q, c.h_kv});
  auto* counts = in.split_counts.data<std::int32_t>();
  const int group = c.h_q / c.h_kv;
  for (std::int64_t q = 0; q < c.total_q; ++q) {
    for (int g = 0; g < c.h_kv; ++g) {
      const float r = uniform(rng);
      int n = std::uniform_int_distribution<int>(1, c.topk)(rng);
      if (r < 0.08f) n = 0;
      counts[q * c.h_kv + g] = n;
      if (r > 0.08f && r < 0.12f)  // every valid slot -inf: no visible key at all
        for (int s = 0; s < n; ++s)
          for (int h = g * group; h < (g + 1) * group; ++h) lse[(s * c.total_q + q) * c.h_q + h] = -kInf;
      if (r > 0.12f && r < 0.13f && n > 0) lse[(0 * c.total_q + q) * c.h_q + g * group] = kInf;
      if (r > 0.13f && r < 0.14f && n > 0)
        lse[((n - 1) * c.total_q + q) * c.h_q + g * group] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  // Slots at and past n hold garbage the kernel must never read into the sum.
  for (std::int64_t q = 0; q < c.total_q; ++q)
    for (int h = 0; h < c.h_q; ++h)
      for (int s = counts[q * c.h_kv + h / group]; s < c.topk; ++s)
        lse[(s * c.total_q + q) * c.h_q + h] = 1e30f;
  if (c.sinks) {
    in.sinks = HostTensor(msa::DType::kFP32, {c.h_q});
    for (int h = 0; h < c.h_q; ++h) in.sinks.data<float>()[h] = normal(rng) * 2.f;
  }
  return in;
}

using msa::test::DeviceBuffer;

struct GpuResult {
  std::vector<std::uint16_t> out;  // [total_q, h_q, d + pad]
  std::vector<float> lse;          // [total_q, h_q]
};

// The prefill's routed form: only the rows of the first `count` (KV head, query tile) pairs of
// `list` are merged.
struct ListedPairs {
  int q_per_tile = 1;
  std::vector<std::int32_t> list;  // [h_kv * tiles_per_head]; entries past count are junk
  std::int32_t count = 0;
  int pair_ctas = 0;  // CombineParams::pair_ctas (0: the launch picks)
};

void run_gpu(const CombineCase& c, const CombineInputs& in, bool programmatic, GpuResult& r,
             const ListedPairs* listed = nullptr, msa::cuda::CombineKernel kernel = msa::cuda::CombineKernel::kAuto) {
  const int row_elems = c.d + c.out_head_pad;
  const std::size_t out_elems = static_cast<std::size_t>(c.total_q) * c.h_q * row_elems;
  DeviceBuffer o(in.o_partial.bytes()), l(in.lse_partial.bytes()), n(in.split_counts.bytes()),
      sinks(c.sinks ? in.sinks.bytes() : 0), out(out_elems * 2), lse(static_cast<std::size_t>(c.total_q) * c.h_q * 4);
  ASSERT_TRUE(o.get() && l.get() && n.get() && sinks.get() && out.get() && lse.get());
  CUDA_OK(cudaMemcpy(o.get(), in.o_partial.raw(), in.o_partial.bytes(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(l.get(), in.lse_partial.raw(), in.lse_partial.bytes(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(n.get(), in.split_counts.raw(), in.split_counts.bytes(), cudaMemcpyHostToDevice));
  if (c.sinks) {
    CUDA_OK(cudaMemcpy(sinks.get(), in.sinks.raw(), in.sinks.bytes(), cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaMemset(out.get(), 0x7f, out_elems * 2));  // NaN-ish garbage: every row must be written
  CUDA_OK(cudaMemset(lse.get(), 0x7f, static_cast<std::size_t>(c.total_q) * c.h_q * 4));

  msa::cuda::CombineParams p{};
  p.o_partial = o.get();
  p.lse_partial = static_cast<const float*>(l.get());
  p.split_counts = static_cast<const std::int32_t*>(n.get());
  p.sinks = c.sinks ? static_cast<const float*>(sinks.get()) : nullptr;
  p.out = out.get();
  p.stride_out_token = static_cast<std::int64_t>(c.h_q) * row_elems;
  p.stride_out_head = row_elems;
  p.lse = static_cast<float*>(lse.get());
  p.total_q = c.total_q;
  p.h_q = c.h_q;
  p.group = c.h_q / c.h_kv;
  p.topk = c.topk;
  p.uniform_count = 1;
  p.out_fp16 = c.fp16_out;
  p.kernel = kernel;
  DeviceBuffer d_list(listed != nullptr ? listed->list.size() * 4 : 0), d_count(4);
  if (listed != nullptr) {
    ASSERT_TRUE(d_list.get() && d_count.get());
    CUDA_OK(cudaMemcpy(d_list.get(), listed->list.data(), listed->list.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_count.get(), &listed->count, 4, cudaMemcpyHostToDevice));
    p.tile_list = static_cast<const std::int32_t*>(d_list.get());
    p.tile_count = static_cast<const std::int32_t*>(d_count.get());
    p.q_per_tile = listed->q_per_tile;
    p.pair_ctas = listed->pair_ctas;
    p.tiles_per_head = (c.total_q + listed->q_per_tile - 1) / listed->q_per_tile;
  }
  CUDA_OK(cudaDeviceSynchronize());  // the memsets ran on the legacy stream
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  launch(p, c.partial, c.d, stream, programmatic);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
  r.out.resize(out_elems);
  r.lse.resize(static_cast<std::size_t>(c.total_q) * c.h_q);
  CUDA_OK(cudaMemcpy(r.out.data(), out.get(), out_elems * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(r.lse.data(), lse.get(), r.lse.size() * 4, cudaMemcpyDeviceToHost));
}

bool built(msa::DType partial) {
  bool found = false;
#define MSA_BUILT(DT, D) found = found || msa::DType::DT == partial;
  MSA_COMBINE_INSTANCES(MSA_BUILT)
#undef MSA_BUILT
  return found;
}

std::vector<CombineCase> cases() {
  std::vector<CombineCase> all = {
      {"g16_bf16", 300, 64, 4, 16, 128, false, false, 0, 1},
      {"g16_sinks", 257, 64, 4, 16, 128, true, false, 0, 2},
      {"g1_k32", 129, 8, 8, 32, 128, false, false, 8, 3},
      {"k1_sinks_fp16", 100, 16, 2, 1, 128, true, true, 0, 4},
      {"k5_d64", 211, 12, 3, 5, 64, true, false, 0, 5},
      {"k7_d256_strided", 90, 6, 2, 7, 256, false, false, 16, 6},
      {"odd_heads", 333, 3, 1, 16, 128, true, false, 0, 7},
      {"fp16_partials_g16_sinks", 257, 64, 4, 16, 128, true, true, 0, 8, msa::DType::kFP16},
      {"fp16_partials_k5_d64_bf16_out", 211, 12, 3, 5, 64, true, false, 0, 9, msa::DType::kFP16},
  };
  std::erase_if(all, [](const CombineCase& c) { return !built(c.partial); });
  return all;
}

class CombineCuda : public ::testing::TestWithParam<CombineCase> {};

TEST_P(CombineCuda, MatchesReferenceAndIsReproducible) {
  MSA_SKIP_WITHOUT_GPU();
  const CombineCase& c = GetParam();
  const CombineInputs in = make_inputs(c);
  GpuResult a, b;
  run_gpu(c, in, /*programmatic=*/true, a);
  run_gpu(c, in, /*programmatic=*/false, b);
  ASSERT_EQ(a.out.size(), b.out.size());
  EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2), 0) << "out differs between runs";
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4), 0) << "lse differs between runs";

  // The CPU reference operator.
  msa::AttentionShape shape;
  shape.h_q = c.h_q;
  shape.h_kv = c.h_kv;
  shape.d = c.d;
  shape.topk = c.topk;
  HostTensor ref_out(c.fp16_out ? msa::DType::kFP16 : msa::DType::kBF16, {c.total_q, c.h_q, c.d});
  HostTensor ref_lse(msa::DType::kFP32, {c.total_q, c.h_q});
  msa::CombineArgs args;
  args.o_partial = in.o_partial.view();
  args.lse_partial = in.lse_partial.view();
  args.split_counts = in.split_counts.view();
  args.out = ref_out.view();
  args.lse = ref_lse.view();
  if (c.sinks) args.sinks = in.sinks.view();
  msa::cpu::combine(shape, args);

  // The kernel's rows (out may be strided) against the CPU oracle: the three-part check on out,
  // 1e-3 and identical -inf positions on lse; no NaN anywhere (every row is written).
  const int row_elems = c.d + c.out_head_pad;
  HostTensor got_out(c.fp16_out ? msa::DType::kFP16 : msa::DType::kBF16, {c.total_q, c.h_q, c.d});
  for (std::int64_t row = 0; row < c.total_q * c.h_q; ++row)
    std::memcpy(got_out.data<std::uint16_t>() + row * c.d, a.out.data() + row * row_elems, std::size_t(c.d) * 2);
  HostTensor got_lse(msa::DType::kFP32, {c.total_q, c.h_q});
  std::memcpy(got_lse.raw(), a.lse.data(), got_lse.bytes());
  EXPECT_FALSE(msa::test::any_nan(got_out)) << "out";
  EXPECT_FALSE(msa::test::any_nan(got_lse)) << "lse";
  EXPECT_TRUE(msa::test::close(got_out, ref_out)) << "out";
  EXPECT_TRUE(msa::test::close(got_lse, ref_lse, msa::test::kLseTolerance)) << "lse";
}

// Listed pairs (the prefill's routing): each listed pair's rows bitwise as in the every-row
// launch, every other row untouched; tile sizes that split and do not split the CTA's rows
// (1, 5, 8 and 32 queries); a count past the pairs (clamped) and junk past the count (never
// read); a pair's rows on the CTAs the launch picks, on one CTA, on 3 (rounds of rows dealt
// unevenly) and on more CTAs than it has rounds.
TEST_P(CombineCuda, ListedPairsOnly) {
  MSA_SKIP_WITHOUT_GPU();
  const CombineCase& c = GetParam();
  const CombineInputs in = make_inputs(c);
  GpuResult every;
  run_gpu(c, in, /*programmatic=*/false, every);
  const int group = c.h_q / c.h_kv;
  const int row_elems = c.d + c.out_head_pad;
  std::mt19937_64 rng(c.seed * 77 + 5);
  for (const int q_per_tile : {1, 5, 8, 32}) {
    if (q_per_tile * group > 128) continue;  // the union tile's limit (kTileUnionRows)
    const std::int64_t per_head = (c.total_q + q_per_tile - 1) / q_per_tile;
    const std::int64_t pairs = c.h_kv * per_head;
    for (const int variant : {0, 1, 2, 3, 4}) {
      SCOPED_TRACE("q_per_tile " + std::to_string(q_per_tile) + " variant " + std::to_string(variant));
      ListedPairs lp;
      lp.q_per_tile = q_per_tile;
      lp.pair_ctas = variant <= 1 ? 0 : variant == 2 ? 1 : variant == 3 ? 3 : 40;
      std::vector<std::int32_t> order(static_cast<std::size_t>(pairs));
      for (std::int64_t i = 0; i < pairs; ++i) order[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<char> on(static_cast<std::size_t>(pairs), 0);
      if (variant == 1) {  // every pair, the count past them
        lp.list = order;
        lp.count = static_cast<std::int32_t>(pairs + 7);
      } else {  // about half, then junk
        for (const std::int32_t t : order)
          if (rng() % 2 == 0) lp.list.push_back(t);
        lp.count = static_cast<std::int32_t>(lp.list.size());
        while (static_cast<std::int64_t>(lp.list.size()) < pairs) lp.list.push_back(lp.list.size() % 2 ? -3 : 1 << 30);
      }
      for (std::int32_t i = 0; i < std::min<std::int64_t>(lp.count, pairs); ++i) on[lp.list[i]] = 1;
      GpuResult got;
      run_gpu(c, in, /*programmatic=*/true, got, &lp);
      int merged = 0;
      for (std::int64_t q = 0; q < c.total_q; ++q)
        for (int h = 0; h < c.h_q; ++h) {
          const std::int64_t row = q * c.h_q + h;
          const bool listed = on[static_cast<std::size_t>((h / group) * per_head + q / q_per_tile)] != 0;
          merged += listed;
          const std::uint16_t* o = got.out.data() + row * row_elems;
          if (listed) {
            ASSERT_EQ(std::memcmp(o, every.out.data() + row * row_elems, std::size_t(c.d) * 2), 0) << "row " << row;
            ASSERT_EQ(std::memcmp(&got.lse[row], &every.lse[row], 4), 0) << "row " << row;
          } else {
            for (int i = 0; i < c.d; ++i) ASSERT_EQ(o[i], 0x7f7f) << "row " << row << " written";
            std::uint32_t bits;
            std::memcpy(&bits, &got.lse[row], 4);
            ASSERT_EQ(bits, 0x7f7f7f7fu) << "row " << row << " lse written";
          }
        }
      EXPECT_GT(merged, 0);
      if (variant != 1) {
        EXPECT_LT(merged, c.total_q * c.h_q);
      }
    }
  }
}

// The two kernels (registers, bulk copies into shared memory) give the same bits, every row and
// listed pairs alike (the bulk kernel where it applies: any every-row launch; listed pairs whose
// group is whole units of its rows).
TEST_P(CombineCuda, BulkAndLoadsKernelsAgreeBitwise) {
  MSA_SKIP_WITHOUT_GPU();
  const CombineCase& c = GetParam();
  const CombineInputs in = make_inputs(c);
  using msa::cuda::CombineKernel;
  GpuResult loads, bulk;
  run_gpu(c, in, /*programmatic=*/true, loads, nullptr, CombineKernel::kLoads);
  run_gpu(c, in, /*programmatic=*/false, bulk, nullptr, CombineKernel::kBulk);
  ASSERT_EQ(loads.out.size(), bulk.out.size());
  EXPECT_EQ(std::memcmp(loads.out.data(), bulk.out.data(), loads.out.size() * 2), 0) << "out";
  EXPECT_EQ(std::memcmp(loads.lse.data(), bulk.lse.data(), loads.lse.size() * 4), 0) << "lse";
  const int group = c.h_q / c.h_kv;
  const int unit_rows = msa::cuda::kCombineBulkThreads / (c.d / 8);
  if (group % unit_rows != 0) return;  // listed pairs of this group take the loads kernel only
  std::mt19937_64 rng(c.seed * 31 + 1);
  for (const int q_per_tile : {1, 5, 8}) {
    if (q_per_tile * group > 128) continue;
    const std::int64_t pairs = c.h_kv * ((c.total_q + q_per_tile - 1) / q_per_tile);
    for (const int pair_ctas : {0, 1, 3, 40}) {
      SCOPED_TRACE("q_per_tile " + std::to_string(q_per_tile) + " pair_ctas " + std::to_string(pair_ctas));
      ListedPairs lp;
      lp.q_per_tile = q_per_tile;
      lp.pair_ctas = pair_ctas;
      for (std::int64_t t = 0; t < pairs; ++t)
        if (rng() % 3 != 0) lp.list.push_back(static_cast<std::int32_t>(t));
      std::shuffle(lp.list.begin(), lp.list.end(), rng);
      lp.count = static_cast<std::int32_t>(lp.list.size());
      while (static_cast<std::int64_t>(lp.list.size()) < pairs) lp.list.push_back(-1);
      GpuResult a, b;
      run_gpu(c, in, /*programmatic=*/true, a, &lp, CombineKernel::kLoads);
      run_gpu(c, in, /*programmatic=*/true, b, &lp, CombineKernel::kBulk);
      EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2), 0) << "out";
      EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4), 0) << "lse";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CombineCuda, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<CombineCase>& param_info) { return param_info.param.name; });

TEST(CombineCudaErrors, RejectsUnsupported) {
  msa::cuda::CombineParams p{};
  p.total_q = 1;
  p.h_q = 4;
  p.group = 1;
  p.topk = 33;
  EXPECT_THROW(launch(p, msa::DType::kBF16, 128, nullptr, false), msa::Error);
  p.topk = 4;
  EXPECT_THROW(launch(p, msa::DType::kBF16, 96, nullptr, false), msa::Error);
  EXPECT_THROW(launch(p, msa::DType::kFP32, 128, nullptr, false), msa::Error);
  p.group = 3;
  EXPECT_THROW(launch(p, msa::DType::kBF16, 128, nullptr, false), msa::Error);
  p.group = 1;
  p.stride_out_head = 130;
  p.stride_out_token = 4 * 130;
  EXPECT_THROW(launch(p, msa::DType::kBF16, 128, nullptr, false), msa::Error);
}

}  // namespace

namespace {

// The public msa::Combine on the CUDA backend gives the CPU backend's bytes (same ascending
// merge; bf16 partials), names what the kernel cannot take, and checks split counts in strict
// mode.
TEST(CombineCudaOperator, MatchesTheCpuOperator) {
  MSA_SKIP_WITHOUT_GPU();
  const CombineCase c{"operator", 300, 64, 4, 16, 128, true, false, 0, 11};
  const CombineInputs in = make_inputs(c);
  msa::AttentionShape shape{.h_q = c.h_q, .h_kv = c.h_kv, .d = c.d, .topk = c.topk};
  HostTensor cpu_out(msa::DType::kBF16, {c.total_q, c.h_q, c.d}), cpu_lse(msa::DType::kFP32, {c.total_q, c.h_q});
  msa::CombineArgs h{in.o_partial.view(), in.lse_partial.view(), in.split_counts.view(),
                     cpu_out.view(),     cpu_lse.view(),         in.sinks.view()};
  msa::Combine cpu(shape);
  cpu.plan(c.total_q);
  cpu.run(h);

  DeviceBuffer o(in.o_partial.bytes()), l(in.lse_partial.bytes()), n(in.split_counts.bytes()), s(in.sinks.bytes()),
      out(cpu_out.bytes()), lse(cpu_lse.bytes());
  CUDA_OK(cudaMemcpy(o.get(), in.o_partial.raw(), in.o_partial.bytes(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(l.get(), in.lse_partial.raw(), in.lse_partial.bytes(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(n.get(), in.split_counts.raw(), in.split_counts.bytes(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(s.get(), in.sinks.raw(), in.sinks.bytes(), cudaMemcpyHostToDevice));
  const auto on_device = [](msa::TensorView t, void* ptr) {
    t.data = ptr;
    t.device = msa::Device::kCuda;
    return t;
  };
  msa::CombineArgs d{on_device(in.o_partial.view(), o.get()), on_device(in.lse_partial.view(), l.get()),
                     on_device(in.split_counts.view(), n.get()), on_device(cpu_out.view(), out.get()),
                     on_device(cpu_lse.view(), lse.get()),       on_device(in.sinks.view(), s.get())};
  msa::Options o_cuda;
  o_cuda.backend = msa::Backend::kCuda;
  msa::Combine gpu(shape, o_cuda);
  gpu.plan(c.total_q);
  gpu.run(d);
  CUDA_OK(cudaDeviceSynchronize());
  HostTensor gpu_out(msa::DType::kBF16, {c.total_q, c.h_q, c.d}), gpu_lse(msa::DType::kFP32, {c.total_q, c.h_q});
  CUDA_OK(cudaMemcpy(gpu_out.raw(), out.get(), gpu_out.bytes(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gpu_lse.raw(), lse.get(), gpu_lse.bytes(), cudaMemcpyDeviceToHost));
  const auto r_out = msa::bench::compare(gpu_out, cpu_out, {});
  EXPECT_TRUE(r_out.ok) << r_out.summary();
  const auto r_lse = msa::bench::compare(gpu_lse, cpu_lse, {.atol = 1e-5, .rtol = 0.0, .min_cosine = 0.0});
  EXPECT_TRUE(r_lse.ok) << r_lse.summary();

  // fp32 partials are the CPU backend's; a split count past topk is named in strict mode.
  msa::CombineArgs bad = d;
  bad.o_partial.dtype = msa::DType::kFP32;
  try {
    gpu.run(bad);
    ADD_FAILURE() << "fp32 partials accepted";
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), "o_partial.dtype");
  }
  HostTensor counts(msa::DType::kInt32, in.split_counts.shape());
  std::memcpy(counts.raw(), in.split_counts.raw(), counts.bytes());
  counts.data<std::int32_t>()[5] = 17;
  CUDA_OK(cudaMemcpy(n.get(), counts.raw(), counts.bytes(), cudaMemcpyHostToDevice));
  msa::Options strict = o_cuda;
  strict.strict = true;
  msa::Combine checked(shape, strict);
  try {
    checked.run(d);
    ADD_FAILURE() << "split count 17 accepted in strict mode";
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), "split_counts[1, 1]");
    EXPECT_EQ(e.value(), "17");
  }
}

// No query rows: nothing to merge, so an empty out needs neither alignment nor strides
// (check_layout checks neither for an empty view); the launch once asserted both and stopped with
// an internal error. The CUDA operator's own object, so that it runs without a GPU too (the
// public constructor asks for one): nothing is launched.
TEST(CombineCudaOperator, NoRowsTakeAnyEmptyOut) {
  msa::AttentionShape s{.h_q = 2, .h_kv = 1, .d = 128, .topk = 4};
  msa::Options o;
  o.backend = msa::Backend::kCuda;
  alignas(256) static unsigned char memory[256];
  for (const std::size_t offset : {std::size_t{8}, std::size_t{0}}) {
    auto c = msa::cuda::make_combine();
    c->shape = s;
    c->options = o;
    c->plan(0, nullptr);
    msa::CombineArgs args;
    args.o_partial = msa::TensorView::contiguous(memory, msa::DType::kBF16, {4, 0, 2, 128}, msa::Device::kCuda);
    args.lse_partial = msa::TensorView::contiguous(memory, msa::DType::kFP32, {4, 0, 2}, msa::Device::kCuda);
    args.split_counts = msa::TensorView::contiguous(memory, msa::DType::kInt32, {0, 1}, msa::Device::kCuda);
    args.out =
        msa::TensorView::strided(memory + offset, msa::DType::kBF16, {0, 2, 128}, {256, 12, 1}, msa::Device::kCuda);
    EXPECT_NO_THROW(c->run(args, nullptr)) << "out at +" << offset;
  }
}

}  // namespace
