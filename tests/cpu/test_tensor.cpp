// Tensor views, dtype conversions and the batch reader.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/batch.h"
#include "core/half.h"
#include "msa/msa.h"
#include "tests/support/expect_error.h"

namespace {

TEST(Half, Bf16RoundTripAndRounding) {
  for (float f : {0.f, 1.f, -2.5f, 3.140625f, 0x1p-100f, -65536.f}) {
    EXPECT_EQ(msa::bf16_to_float(msa::float_to_bf16(f)), f) << f;
  }
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(msa::bf16_to_float(msa::float_to_bf16(1.f + 1.f / 256)), 1.f);
  EXPECT_EQ(msa::bf16_to_float(msa::float_to_bf16(1.f + 3.f / 256)), 1.f + 4.f / 256);
  EXPECT_TRUE(std::isnan(msa::bf16_to_float(msa::float_to_bf16(NAN))));
}

TEST(Half, Fp16RoundTripAndRounding) {
  for (float f : {0.f, 1.f, -2.5f, 65504.f, 6.103515625e-05f, 5.960464477539063e-08f}) {
    EXPECT_EQ(msa::fp16_to_float(msa::float_to_fp16(f)), f) << f;
  }
  EXPECT_EQ(msa::fp16_to_float(msa::float_to_fp16(1.f + 1.f / 2048)), 1.f);  // tie to even
  EXPECT_EQ(msa::fp16_to_float(msa::float_to_fp16(1.f + 3.f / 2048)), 1.f + 4.f / 2048);
  EXPECT_TRUE(std::isinf(msa::fp16_to_float(msa::float_to_fp16(70000.f))));
  EXPECT_EQ(msa::fp16_to_float(msa::float_to_fp16(1e-9f)), 0.f);
}

TEST(TensorView, ContiguousStridesAndShapeString) {
  std::vector<float> buf(24);
  auto t = msa::TensorView::contiguous(buf.data(), msa::DType::kFP32, {2, 3, 4});
  EXPECT_EQ(t.stride[0], 12);
  EXPECT_EQ(t.stride[1], 4);
  EXPECT_EQ(t.stride[2], 1);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.shape_string(), "[2, 3, 4]");
  EXPECT_EQ(t.offset(1, 2, 3), 23);
  EXPECT_FALSE(msa::TensorView{}.present());
}

TEST(TensorView, RejectsRankAboveFourAndStrideMismatch) {
  EXPECT_THROW(msa::TensorView::contiguous(nullptr, msa::DType::kFP32, {1, 2, 3, 4, 5}), msa::Error);
  EXPECT_THROW(msa::TensorView::strided(nullptr, msa::DType::kFP32, {2, 3}, {3}), msa::Error);
  const auto t = msa::TensorView::strided(nullptr, msa::DType::kBF16, {2, 3}, {8, 1});
  EXPECT_EQ(t.stride[0], 8);
  EXPECT_EQ(t.rank, 2);
}

TEST(Batch, ReadsPositionsAndRejectsShortKv) {
  std::vector<std::int32_t> cu = {0, 3, 3, 8}, kl = {130, 5, 5};
  msa::VarlenBatch b{msa::TensorView::contiguous(cu.data(), msa::DType::kInt32, {4}),
                     msa::TensorView::contiguous(kl.data(), msa::DType::kInt32, {3})};
  const auto info = msa::read_batch(b);
  EXPECT_EQ(info.total_q, 8);
  EXPECT_EQ(info.pos(0, 0), 127);
  EXPECT_EQ(info.blocks(0), 2);
  EXPECT_EQ(info.request_of(3), 2);
  EXPECT_EQ(info.request_of(2), 0);  // request 1 is empty: row 3 opens request 2
  EXPECT_EQ(info.max_k_len, 130);
  kl[2] = 4;  // k_len < q_len
  try {
    msa::read_batch(b);
    FAIL() << "expected msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), "k_len[2]");
    EXPECT_EQ(e.value(), "4");
  }
}

// The lengths a VarlenBatch takes, from KV offsets: differences of neighbours, B = 0 and
// hostile offsets (a wrapped difference, never undefined behaviour) included.
TEST(Batch, LengthsFromOffsets) {
  using msa::DType;
  using msa::TensorView;
  std::vector<std::int32_t> off = {0, 130, 130, 4099, INT32_MAX, INT32_MIN}, len(5, -7);
  msa::lengths_from_offsets(TensorView::contiguous(off.data(), DType::kInt32, {6}),
                            TensorView::contiguous(len.data(), DType::kInt32, {5}));
  EXPECT_EQ(len, (std::vector<std::int32_t>{130, 0, 3969, INT32_MAX - 4099, 1}));
  msa::lengths_from_offsets(TensorView::contiguous(off.data(), DType::kInt32, {1}),
                            TensorView::contiguous(nullptr, DType::kInt32, {0}));  // B = 0
  // A strided output (every other element) leaves the others alone.
  std::vector<std::int32_t> wide(6, -1);
  msa::lengths_from_offsets(TensorView::contiguous(off.data(), DType::kInt32, {4}),
                            TensorView::strided(wide.data(), DType::kInt32, {3}, {2}));
  EXPECT_EQ(wide, (std::vector<std::int32_t>{130, -1, 0, -1, 3969, -1}));
  // Strided offsets (every other one: 0, 130, INT32_MAX), as an engine's slice may be.
  std::vector<std::int32_t> two(2, -1);
  msa::lengths_from_offsets(TensorView::strided(off.data(), DType::kInt32, {3}, {2}),
                            TensorView::contiguous(two.data(), DType::kInt32, {2}));
  EXPECT_EQ(two, (std::vector<std::int32_t>{130, INT32_MAX - 130}));

  // Errors name the argument, and nothing is written.
  std::fill(len.begin(), len.end(), -7);
  const auto offsets = TensorView::contiguous(off.data(), DType::kInt32, {6});
  const auto lengths = TensorView::contiguous(len.data(), DType::kInt32, {5});
  msa::test::expect_error(
      [&] { msa::lengths_from_offsets(offsets, TensorView::contiguous(len.data(), DType::kInt32, {4})); },
      "lengths.shape[0]", "4");
  msa::test::expect_error(
      [&] { msa::lengths_from_offsets(TensorView::contiguous(off.data(), DType::kFP32, {6}), lengths); },
      "offsets.dtype", "fp32");
  msa::test::expect_error(
      [&] {
        msa::lengths_from_offsets(TensorView::contiguous(off.data(), DType::kInt32, {0}),
                                  TensorView::contiguous(len.data(), DType::kInt32, {0}));
      },
      "offsets.shape[0]", "0");
  msa::test::expect_error([&] { msa::lengths_from_offsets(offsets, TensorView{}); }, "lengths", "absent");
  msa::test::expect_error(
      [&] { msa::lengths_from_offsets(TensorView::strided(off.data(), DType::kInt32, {6}, {0}), lengths); },
      "offsets.stride[0]", "0");
  msa::test::expect_error(
      [&] { msa::lengths_from_offsets(offsets, TensorView::contiguous(off.data() + 1, DType::kInt32, {5})); },
      "lengths.data", "overlaps offsets");
  auto on_gpu = lengths;
  on_gpu.device = msa::Device::kCuda;
  msa::test::expect_error([&] { msa::lengths_from_offsets(offsets, on_gpu); }, "lengths.device", "cuda");
  EXPECT_EQ(len, std::vector<std::int32_t>(5, -7));
}

}  // namespace
