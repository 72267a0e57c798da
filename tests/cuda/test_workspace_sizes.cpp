// workspace_bytes() of the CUDA operators never shrinks as the problem grows (sizes only, no GPU
// needed): a workspace sized once for the largest call an engine makes holds every smaller
// call's (include/msa/prefill.h, decode.h, indexer.h). A review found it shrinking: the
// planner's histogram units changed size with max_k_len, the decode's partials went to 0 once a
// batch filled the GPU, and the fused indexer + top-k's lists likewise past 98 query tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>

#include "cuda/api/decode_params.h"
#include "cuda/api/prefill_workspace.h"
#include "msa/msa.h"

namespace {

msa::Options cuda_options() {
  msa::Options o;
  o.backend = msa::Backend::kCuda;
  return o;
}

std::size_t prefill_bytes(const msa::AttentionShape& s, std::int64_t b, std::int64_t q, std::int64_t k,
                          msa::PrefillPath path = msa::PrefillPath::kAuto) {
  msa::Options o = cuda_options();
  o.prefill_path = path;
  return msa::SparsePrefill::workspace_bytes(s, {.batch = b, .total_q = q, .max_k_len = k}, o);
}
std::size_t decode_bytes(const msa::AttentionShape& s, std::int64_t b, int q, std::int64_t k) {
  return msa::SparseDecode::workspace_bytes(s, {.batch = b, .total_q = b * q, .max_k_len = k}, cuda_options());
}
std::size_t indexer_bytes(int h_i, int topk, std::int64_t b, std::int64_t q, std::int64_t k) {
  return msa::IndexerTopK::workspace_bytes(h_i, topk, {.batch = b, .total_q = q, .max_k_len = k}, cuda_options());
}

TEST(WorkspaceSizes, TheReviewsCases) {
  const msa::AttentionShape s{.h_q = 64, .h_kv = 8, .d = 128, .topk = 16};
  // The planner's units: 64 queries each at max_k_len 131072, 128 at 200000.
  EXPECT_LE(prefill_bytes(s, 1, 65536, 131072), prefill_bytes(s, 1, 65536, 200000));
  EXPECT_LE(prefill_bytes(s, 1, 4064, 131072), prefill_bytes(s, 1, 4065, 131072));
  // Q = 1: B = 8 splits, B = 16 fills the GPU unsplit.
  EXPECT_GT(decode_bytes(s, 8, 1, 131072), std::size_t{0});
  EXPECT_LE(decode_bytes(s, 8, 1, 131072), decode_bytes(s, 16, 1, 131072));
  // The fused indexer + top-k: rows split over units below 99 query tiles (64 queries each at 4
  // index heads), whole past them.
  EXPECT_GT(indexer_bytes(4, 16, 1, 98 * 64, 131072), std::size_t{0});
  EXPECT_LE(indexer_bytes(4, 16, 1, 98 * 64, 131072), indexer_bytes(4, 16, 1, 99 * 64, 131072));
}

// PrefillPath::kTileUnion plans nothing on the device and writes every row final: its workspace
// holds only the staging of host inputs, not the planner's arrays and the partials (35 GB here,
// which a caller sizing for it once had to allocate).
TEST(WorkspaceSizes, ForcedTileUnionHoldsNoPlanNorPartials) {
  const msa::AttentionShape s{.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
  const std::size_t staging = std::size_t{4} * 131072 * 16 * 4 + 2 * 256;  // host top-k, then the batch
  EXPECT_LE(prefill_bytes(s, 1, 131072, 131072, msa::PrefillPath::kTileUnion), staging + 1024);
  EXPECT_GT(prefill_bytes(s, 1, 131072, 131072, msa::PrefillPath::kBlockMajor), std::size_t{1} << 34);
}

// A decode planned with no bound on seq_len (max_k_len 0) counts as larger than any bound: plan()
// then sizes for requests of topk blocks, which a small positive bound's workspace held too
// little for (a review's cases), and a workspace_bytes() of 0 holds every positive bound's.
TEST(WorkspaceSizes, DecodeWithNoBoundCountsAsTheLargest) {
  const auto need = [](const msa::AttentionShape& s, std::int64_t b, int q, std::int64_t k) {
    return msa::cuda::decode_workspace(s, msa::cuda::decode_geometry(s, b, q, k), nullptr).bytes;
  };
  const msa::AttentionShape one{.h_q = 1, .h_kv = 1, .d = 128, .topk = 16};
  EXPECT_GT(need(one, 1, 1, 0), std::size_t{0});
  EXPECT_GE(decode_bytes(one, 1, 1, 64), need(one, 1, 1, 0));
  const msa::AttentionShape three{.h_q = 3, .h_kv = 1, .d = 128, .topk = 22};
  EXPECT_GE(decode_bytes(three, 23, 10, 182), need(three, 4, 16, 0));
  for (const std::int64_t k : {std::int64_t{1}, std::int64_t{4096}, std::int64_t{1} << 20, msa::kMaxKvLen})
    EXPECT_GE(decode_bytes(three, 23, 10, 0), need(three, 4, 16, k)) << k;
}

// IndexerTopK::workspace_bytes names h_i past the CUDA indexer's 256 heads (it divided by the
// queries of a tile, 256 / h_i = 0, and stopped the process).
TEST(WorkspaceSizes, IndexerHeadsPastTheTileAreNamed) {
  try {
    (void)indexer_bytes(300, 16, 1, 1, 128);
    ADD_FAILURE() << "h_i = 300 accepted";
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), "h_i");
  }
}

// Random problems and smaller ones (each of batch, total_q and max_k_len at most the larger's).
TEST(WorkspaceSizes, NeverShrinkAsTheProblemGrows) {
  std::mt19937_64 rng(51);
  const auto below = [&](std::int64_t v, std::int64_t lo) {  // in [lo, v]
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(v - lo + 1));
  };
  int split_decodes = 0, split_indexers = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int h_kv = 1 << (rng() % 4), group = 1 << (rng() % 5);
    const int topk = 1 + static_cast<int>(rng() % 32);
    const msa::AttentionShape s{.h_q = h_kv * group, .h_kv = h_kv, .d = 128, .topk = topk};
    const std::int64_t k = below(1 << 20, 1), b = below(160, 1);
    const std::int64_t k2 = below(k, 1), b2 = below(b, 1);
    // Prefill: total_q up to 64k.
    const std::int64_t q = below(1 << 16, 0), q2 = below(q, 0);
    const auto path = static_cast<msa::PrefillPath>(rng() % 3);
    EXPECT_LE(prefill_bytes(s, b2, q2, k2, path), prefill_bytes(s, b, q, k, path)) << trial;
    // Decode: Q per request 1..16, the smaller any Q with b2 * Q2 <= b * Q.
    const int qd = static_cast<int>(below(16, 1));
    const int qd2 = static_cast<int>(std::min<std::int64_t>(below(16, 1), b * qd / b2));
    const std::size_t small = decode_bytes(s, b2, qd2, k2);
    split_decodes += small > 0;
    EXPECT_LE(small, decode_bytes(s, b, qd, k)) << trial;
    // Indexer + top-k: 1..16 index heads.
    const int h_i = 1 << (rng() % 5);
    const std::size_t small_i = indexer_bytes(h_i, topk, b2, q2, k2);
    split_indexers += small_i > 0;
    EXPECT_LE(small_i, indexer_bytes(h_i, topk, b, q, k)) << trial;
  }
  EXPECT_GT(split_decodes, 20);  // the smaller problems include split ones, which need bytes
  EXPECT_GT(split_indexers, 20);
}

// A prefill of one request of at most 16 queries runs as a decode step in a region of the
// prefill's workspace (docs/layouts.md), sized by a closed form: it must hold the decode's own
// need at every Q and bound that the problem holds, and never shrink as the problem grows.
TEST(WorkspaceSizes, PrefillDecodeRegionHoldsEveryDecodeStep) {
  std::mt19937_64 rng(68);
  for (int trial = 0; trial < 300; ++trial) {
    const int h_kv = 1 << (rng() % 4), group = 1 << (rng() % 5);
    const int topk = 1 + static_cast<int>(rng() % 32);
    const msa::AttentionShape s{.h_q = h_kv * group, .h_kv = h_kv, .d = 128, .topk = topk};
    const std::int64_t k = 513 + static_cast<std::int64_t>(rng() % (1 << 20));
    const std::int64_t q = 1 + static_cast<std::int64_t>(rng() % 40);
    const msa::cuda::PrefillWorkspace w = msa::cuda::prefill_workspace(s, {.batch = 1 + static_cast<std::int64_t>(rng() % 3), .total_q = q, .max_k_len = k}, cuda_options(), nullptr);
    for (int qd = 1; qd <= std::min<std::int64_t>(q, 16); ++qd) {
      const std::int64_t kd = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(k));
      const std::size_t need = msa::cuda::decode_workspace(s, msa::cuda::decode_geometry(s, 1, qd, kd), nullptr).bytes;
      EXPECT_LE(need, w.decode_bytes) << trial << " q " << qd << " k " << kd;
    }
  }
}

}  // namespace

// The FP8 decode's kernel with ways (tile_union_decode_ways, docs/performance.md step 53) only
// where a tile of at most 32 rows has a split that can hold two ways' entries (8): tiles of 64
// rows and more, and steps split into splits of a few blocks, take the kernel without.
TEST(DecodeGeometry, WaysOnlyWhereASplitCanHoldTwoWays) {
  const msa::AttentionShape s{.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
  const auto geo = [&](std::int64_t b, int q, std::int64_t k) { return msa::cuda::decode_geometry(s, b, q, k); };
  EXPECT_TRUE(geo(32, 1, 100000).ways);   // tiles of one request (16 rows), 16 entries, unsplit
  EXPECT_TRUE(geo(16, 1, 100000).ways);   // two splits of 8
  EXPECT_TRUE(geo(32, 2, 100000).ways);   // 32 rows
  EXPECT_FALSE(geo(32, 4, 100000).ways);  // 64 rows
  EXPECT_FALSE(geo(8, 1, 4000).ways);     // four splits of 4
  EXPECT_FALSE(geo(4, 2, 1000).ways);     // 8 blocks a request, eight splits
  EXPECT_FALSE(geo(32, 8, 100000).ways);  // 128 rows
  EXPECT_FALSE(geo(128, 16, 100000).ways);
}

// The FP8 decode's kernel with Q in the ring (tile_union_decode_q_in_ring, docs/performance.md
// steps 55 and 56) only where a request's queries in a tile would repeat blocks at 1.25 choices
// per block of their expected union: short requests (few blocks to choose from) at Q of 2 and
// more; never with ways, nor without a bound on seq_len.
TEST(DecodeGeometry, QInRingWhereUnionsRepeatBlocks) {
  const msa::AttentionShape s{.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
  const auto geo = [&](std::int64_t b, int q, std::int64_t k) { return msa::cuda::decode_geometry(s, b, q, k); };
  EXPECT_TRUE(geo(128, 8, 10000).q_in_ring);    // 128 choices, 79 blocks
  EXPECT_TRUE(geo(32, 16, 10000).q_in_ring);    // sibling tiles of 8 queries
  EXPECT_TRUE(geo(96, 8, 1024).q_in_ring);      // 8 blocks: every one chosen by every query
  EXPECT_TRUE(geo(1, 8, 1000).q_in_ring);       // split
  EXPECT_TRUE(geo(8, 2, 1000).q_in_ring);       // tiles of four requests, 8 blocks each
  EXPECT_FALSE(geo(128, 8, 200000).q_in_ring);  // choices mostly on blocks of their own
  EXPECT_TRUE(geo(128, 8, 31488).q_in_ring);    // 246 blocks: 1.2505 choices per expected block
  EXPECT_FALSE(geo(128, 8, 31489).q_in_ring);   // 247 blocks: 1.2494
  EXPECT_TRUE(geo(128, 4, 10000).q_in_ring);    // two requests a tile, 4 queries each: 1.36
  EXPECT_FALSE(geo(128, 4, 100000).q_in_ring);  // 1.03
  EXPECT_TRUE(geo(70, 4, 7000).q_in_ring);      // 55 blocks: 1.56
  EXPECT_FALSE(geo(70, 4, 30000).q_in_ring);    // 235 blocks: 1.11 (DecodeCuda's fp8_b70_q4_g16_plain)
  EXPECT_FALSE(geo(64, 2, 6000).q_in_ring);     // 47 blocks: 1.21
  EXPECT_FALSE(geo(32, 1, 100000).q_in_ring);   // the kernel with ways
  EXPECT_FALSE(geo(8, 1, 1000).q_in_ring);      // one query, no repeats
  EXPECT_FALSE(geo(128, 8, 0).q_in_ring);       // no bound on seq_len (sparse_decode())
  // DecodeCuda's fp8_q5_g12_ring and fp8_b40_q8_g4_ring run the Q-in-ring kernel.
  EXPECT_TRUE(msa::cuda::decode_geometry({.h_q = 48, .h_kv = 4, .d = 128, .topk = 16}, 9, 5, 1900).q_in_ring);
  EXPECT_TRUE(msa::cuda::decode_geometry({.h_q = 16, .h_kv = 4, .d = 128, .topk = 16}, 40, 8, 1500).q_in_ring);
}

// Few (KV head, tile) pairs (tensor-parallel shapes: h_kv 1 and 2) take 32 splits of at least
// two entries and, at equal splits, the tiling whose CTAs do the least work (docs/performance.md
// step 70); 4 pairs and more keep 16 splits, and half a wave of CTAs is not traded for twice as
// many of half the work. The prefill's split calls keep 16.
TEST(DecodeGeometry, FewPairsTakeMoreSplitsAndCtas) {
  const auto geo = [](int h_kv, std::int64_t b, int q, std::int64_t k) {
    return msa::cuda::decode_geometry({.h_q = 16 * h_kv, .h_kv = h_kv, .d = 128, .topk = 16}, b, q, k);
  };
  const auto g1 = geo(1, 1, 8, 100000);  // one pair: 32 splits
  EXPECT_EQ(g1.pairs, 1);
  EXPECT_EQ(g1.splits, 32);
  const auto g2 = geo(2, 1, 8, 100000);  // two pairs: 32
  EXPECT_EQ(g2.splits, 32);
  EXPECT_EQ(geo(4, 1, 8, 100000).splits, 16);  // four pairs: 16
  EXPECT_EQ(geo(1, 1, 1, 100000).splits, 16);  // one query: 16 entries
  EXPECT_EQ(geo(1, 1, 2, 100000).splits, 32);  // 32 entries: a split per entry
  EXPECT_EQ(geo(2, 1, 2, 100000).splits, 32);  // two pairs too
  EXPECT_EQ(geo(1, 1, 2, 3000).splits, 32);    // 24 blocks, but the full tile's bound is 32
  EXPECT_EQ(geo(4, 1, 2, 100000).splits, 16);  // four pairs: 16
  // The split per entry only after the tiling is chosen: two requests of Q = 3 on 24 blocks
  // stay two pairs of one request (24 entries, now 24 splits), not one pair of both (48 entries,
  // 16 splits), and the same at Q = 2 on 20 blocks.
  const auto b2q3 = geo(1, 2, 3, 3000);
  EXPECT_EQ(b2q3.q_per_tile, 3);
  EXPECT_EQ(b2q3.pairs, 2);
  EXPECT_EQ(b2q3.splits, 24);
  const auto b2q2 = geo(1, 2, 2, 2500);
  EXPECT_EQ(b2q2.q_per_tile, 2);
  EXPECT_EQ(b2q2.splits, 20);
  EXPECT_EQ(geo(1, 1, 3, 100000).splits, 16);  // 48 entries: not 32 splits of 1.5
  EXPECT_EQ(geo(1, 1, 4, 100000).splits, 32);  // 64 entries: 32 splits of 2
  const auto g8 = geo(1, 8, 1, 100000);        // 8 requests of one query at h_kv 1: was one pair
  EXPECT_EQ(g8.q_per_tile, 2);                 // of 16 splits of 8 entries; now 4 pairs of 16
  EXPECT_EQ(g8.pairs, 4);                      // splits of 2 (64 CTAs), not 8 of 1 (128 CTAs)
  EXPECT_EQ(g8.splits, 16);
  const auto h4 = geo(4, 2, 1, 100000);  // h_kv 4: 64 CTAs of 2 entries kept over 128 of 1
  EXPECT_EQ(h4.q_per_tile, 8);
  EXPECT_EQ(h4.pairs, 4);
  const auto h4q4 = geo(4, 2, 4, 100000);  // but 128 CTAs of 4 taken over 64 of 8
  EXPECT_EQ(h4q4.q_per_tile, 4);
  EXPECT_EQ(h4q4.pairs, 8);
  EXPECT_EQ(h4q4.splits, 16);
  EXPECT_EQ(geo(4, 1, 8, 1000).splits, 8);  // 8 blocks: a split per entry, as before
  // The prefill's split small calls: within kDecodePairSplits and topk.
  EXPECT_EQ(msa::cuda::prefill_union_splits(1, 8, 8, 100000, 32), msa::cuda::kDecodePairSplits);
  EXPECT_EQ(msa::cuda::prefill_union_splits(1, 8, 8, 100000, 7), 7);
}

// An owned workspace grows with headroom (msa::grown_workspace_bytes): a chunked prefill whose
// prefix grows with every chunk needs a little more workspace each call, and a reallocation
// costs a cudaFree that waits for the whole device. Replayed here as DeviceScratch::get does it:
// 2048-token chunks on prefixes growing from 2k to 256k, then chunks of varying size on a
// growing prefix.
TEST(WorkspaceSizes, AnOwnedWorkspaceGrowsWithHeadroom) {
  using msa::grown_workspace_bytes;
  using msa::kWorkspaceGranule;
  using msa::kWorkspaceHeadroomMax;
  for (const std::size_t need :
       {std::size_t{1}, std::size_t{256}, kWorkspaceGranule - 1, kWorkspaceGranule, kWorkspaceGranule + 1,
        std::size_t{70} << 20, std::size_t{550} << 20, std::size_t{9} << 30, std::size_t{40} << 30}) {
    const std::size_t grown = grown_workspace_bytes(need);
    EXPECT_GE(grown, need + std::min(need / 8, kWorkspaceHeadroomMax)) << need;
    EXPECT_LT(grown, need + std::min(need / 8, kWorkspaceHeadroomMax) + kWorkspaceGranule) << need;
    EXPECT_EQ(grown % kWorkspaceGranule, 0u) << need;
  }
  EXPECT_EQ(msa::grown_workspace_bytes(0), kWorkspaceGranule);
  EXPECT_EQ(msa::grown_workspace_bytes(~std::size_t{0} - 5), ~std::size_t{0} - 5);  // no room to round
  const msa::AttentionShape s{.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
  std::size_t owned = 0;
  int grows = 0, calls = 0, exact_grows = 0;
  std::size_t last_need = 0;
  const auto plan = [&](std::int64_t q, std::int64_t k) {
    const std::size_t need = prefill_bytes(s, 1, q, k);
    ++calls;
    if (need > last_need) ++exact_grows;  // an exact-size workspace reallocates here
    last_need = std::max(last_need, need);
    if (owned < need) {
      owned = grown_workspace_bytes(need);
      ++grows;
    }
    EXPECT_GE(owned, need);
    EXPECT_LE(owned, grown_workspace_bytes(last_need));
  };
  for (std::int64_t k = 2048; k <= 262144; k += 2048) plan(2048, k);
  EXPECT_EQ(calls, 128);
  EXPECT_EQ(exact_grows, 128);  // the need grows with every chunk
  EXPECT_LE(grows, 2) << "reallocations over " << calls << " growing chunks";
  // Chunks of varying size (the largest first) on a prefix that grows by each: the first call
  // sizes the workspace, and the prefix's growth stays within its headroom.
  owned = last_need = 0;
  grows = calls = 0;
  std::int64_t k = 4096;
  for (int i = 0; i < 200; ++i) {
    const std::int64_t q = std::array<std::int64_t, 5>{2048, 171, 1024, 16, 512}[i % 5];
    k += q;
    plan(q, k);
  }
  EXPECT_EQ(grows, 1) << "reallocations over " << calls << " chunks up to k_len " << k;
}
