// The online-softmax row state against a direct FP64 softmax, with and without the lazy
// rescale and the sink seed.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/online_softmax.h"

namespace {

using msa::cpu::OnlineSoftmax;

constexpr double kLn2 = 0.6931471805599453;
constexpr int kDim = 3;  // values per key

struct Tile {
  std::vector<float> scores;  // log2 units
  std::vector<float> values;  // [scores.size(), kDim]
};

struct Result {
  double out[kDim] = {};
  double lse = 0.0;
  int rescales = 0;
};

// The kernel-side loop: max, (maybe) rescale, accumulate.
Result run_online(const std::vector<Tile>& tiles, float threshold, const float* sink) {
  OnlineSoftmax st;
  if (sink) st.seed_sink(*sink);
  float acc[kDim] = {};
  Result r;
  for (const Tile& t : tiles) {
    float tile_max = -INFINITY;
    for (float s : t.scores) tile_max = std::max(tile_max, s);
    if (st.update_max(tile_max, threshold)) {
      ++r.rescales;
      for (float& a : acc) a *= st.scale;
    } else {
      EXPECT_EQ(st.scale, 1.f) << "a skipped rescale must leave scale = 1";
    }
    for (std::size_t i = 0; i < t.scores.size(); ++i) {
      const float p = st.weight(t.scores[i]);
      st.l += p;
      for (int j = 0; j < kDim; ++j) acc[j] += p * t.values[i * kDim + j];
    }
  }
  for (int j = 0; j < kDim; ++j) r.out[j] = st.l > 0.f ? acc[j] / st.l : 0.0;
  r.lse = st.lse();
  return r;
}

Result run_fp64(const std::vector<Tile>& tiles, const float* sink) {
  double m = sink ? *sink : -INFINITY;
  for (const Tile& t : tiles)
    for (float s : t.scores) m = std::max(m, s * kLn2);
  double z = sink ? std::exp(*sink - m) : 0.0;
  double acc[kDim] = {};
  for (const Tile& t : tiles)
    for (std::size_t i = 0; i < t.scores.size(); ++i) {
      const double p = std::exp(t.scores[i] * kLn2 - m);
      z += p;
      for (int j = 0; j < kDim; ++j) acc[j] += p * t.values[i * kDim + j];
    }
  Result r;
  for (int j = 0; j < kDim; ++j) r.out[j] = z > 0.0 ? acc[j] / z : 0.0;
  r.lse = z > 0.0 ? m + std::log(z) : -INFINITY;
  return r;
}

void expect_near(const Result& got, const Result& ref) {
  for (int j = 0; j < kDim; ++j) EXPECT_NEAR(got.out[j], ref.out[j], 1e-5 * (1.0 + std::fabs(ref.out[j])));
  if (std::isinf(ref.lse)) EXPECT_EQ(got.lse, ref.lse);
  else EXPECT_NEAR(got.lse, ref.lse, 1e-5 * (1.0 + std::fabs(ref.lse)));
}

std::vector<Tile> random_tiles(std::mt19937_64& rng, float spread) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> len(1, 40);
  std::vector<Tile> tiles(12);
  for (auto& t : tiles) {
    t.scores.resize(static_cast<std::size_t>(len(rng)));
    for (float& s : t.scores) s = normal(rng) * spread;
    t.values.resize(t.scores.size() * kDim);
    for (float& v : t.values) v = normal(rng);
  }
  return tiles;
}

TEST(OnlineSoftmax, MatchesFp64WithAndWithoutLazyAndSink) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const float spread = trial % 2 ? 12.f : 1.f;  // large spreads make the max jump past 8
    const auto tiles = random_tiles(rng, spread);
    const float sink = std::normal_distribution<float>(0.f, 3.f)(rng);
    for (const float threshold : {0.f, 8.f}) {
      for (const float* s : {static_cast<const float*>(nullptr), &sink}) {
        SCOPED_TRACE(testing::Message() << "trial " << trial << " threshold " << threshold << " sink " << (s != nullptr));
        expect_near(run_online(tiles, threshold, s), run_fp64(tiles, s));
      }
    }
  }
}

TEST(OnlineSoftmax, LazyPathSkipsRescalesAndStillMatches) {
  // Tile maxima 0, 3, 7.5 (growth within 8 of the held max 0: skipped), then 20 (rescale).
  const std::vector<Tile> tiles = {
      {{0.f, -1.f}, {1, 2, 3, -1, 0, 2}},
      {{3.f, 1.f}, {0.5f, 0.5f, -2, 1, 1, 1}},
      {{7.5f}, {-1, -3, 4}},
      {{20.f, 19.f, -5.f}, {2, 0, 1, 0, 1, -1, 3, 3, 3}},
  };
  OnlineSoftmax st;
  EXPECT_TRUE(st.update_max(0.f, 8.f));  // first tile: from empty
  EXPECT_FALSE(st.update_max(3.f, 8.f));
  EXPECT_EQ(st.scale, 1.f);
  EXPECT_EQ(st.m, 0.f);  // the held max does not move on a skip
  EXPECT_FALSE(st.update_max(7.5f, 8.f));
  EXPECT_TRUE(st.update_max(20.f, 8.f));
  EXPECT_EQ(st.scale, std::exp2(-20.f));

  const Result lazy = run_online(tiles, 8.f, nullptr);
  EXPECT_EQ(lazy.rescales, 2);
  const Result eager = run_online(tiles, 0.f, nullptr);
  EXPECT_EQ(eager.rescales, 4);
  expect_near(lazy, run_fp64(tiles, nullptr));
  expect_near(eager, run_fp64(tiles, nullptr));

  // Seeded by a sink of 1 (log2 units 1.44): tile max 3 is within the threshold, no rescale.
  const float sink = 1.f;
  const Result sunk = run_online(tiles, 8.f, &sink);
  EXPECT_EQ(sunk.rescales, 1);
  expect_near(sunk, run_fp64(tiles, &sink));
}

TEST(OnlineSoftmax, EmptyAndSinkOnlyRows) {
  OnlineSoftmax st;
  EXPECT_EQ(st.lse(), -INFINITY);
  EXPECT_FALSE(st.update_max(-INFINITY, 8.f));  // a fully masked tile changes nothing
  EXPECT_EQ(st.weight(-INFINITY), 0.f);
  EXPECT_EQ(st.lse(), -INFINITY);
  st.seed_sink(0.75f);
  EXPECT_NEAR(st.lse(), 0.75f, 1e-6f);
  EXPECT_FALSE(std::isnan(st.lse()));
}

}  // namespace
