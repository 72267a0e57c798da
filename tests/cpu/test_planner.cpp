// The host k2q planner (spec §2) against a brute-force construction written plainly here.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/workload.h"
#include "core/k2q_host.h"
#include "core/validate.h"
#include "msa/msa.h"

namespace {

using msa::bench::HostTensor;
using msa::bench::Request;
using msa::bench::Selection;

// A packed batch and top-k rows [h_kv, total_q, topk] from the bench generators.
struct Inputs {
  std::vector<Request> requests;
  int h_kv = 1;
  int topk = 1;
  HostTensor cu_q, k_len, ids;

  Inputs(std::vector<Request> reqs, int h_kv_, int topk_, Selection sel, std::uint64_t seed)
      : requests(std::move(reqs)), h_kv(h_kv_), topk(topk_) {
    const auto b_count = static_cast<std::int64_t>(requests.size());
    cu_q = HostTensor(msa::DType::kInt32, {b_count + 1});
    k_len = HostTensor(msa::DType::kInt32, {b_count});
    for (std::int64_t b = 0; b < b_count; ++b) {
      cu_q.data<std::int32_t>()[b + 1] = cu_q.data<std::int32_t>()[b] + requests[b].q_len;
      k_len.data<std::int32_t>()[b] = requests[b].k_len;
    }
    msa::bench::fill_topk(ids, requests, h_kv, topk, sel, 0.25, seed);
  }
  msa::VarlenBatch batch() const { return {cu_q.view(), k_len.view()}; }
  std::int64_t total_q() const { return cu_q.data<std::int32_t>()[requests.size()]; }
  std::int32_t& id(std::int64_t h, std::int64_t q, int s) {
    return ids.data<std::int32_t>()[(h * total_q() + q) * topk + s];
  }
  msa::AttentionShape shape(int group = 1) const {
    msa::AttentionShape s;
    s.h_kv = h_kv;
    s.h_q = h_kv * group;
    s.topk = topk;
    return s;
  }
};

msa::K2qCsr plan(const Inputs& in, int q_per_item, bool strict = false, int group = 1) {
  msa::Options o;
  o.q_per_item = q_per_item;
  o.strict = strict;
  return msa::build_k2q_csr(in.shape(group), in.batch(), in.ids.view(), o);
}

// The plan built the obvious way: a std::set per query, a std::map of edge lists per row.
struct Oracle {
  std::int64_t total_rows = 0;
  std::vector<std::int32_t> row_coords, row_ptr, q_indices, qsplit, split_counts;
  std::vector<msa::WorkItem> work;  // sorted by (kv_head, row, q_begin)
};

Oracle brute_force(const Inputs& in, int q_per_item) {
  Oracle o;
  const std::int64_t total_q = in.total_q();
  const int h_kv = in.h_kv, k = in.topk;
  std::vector<std::pair<int, int>> level_major;  // (block, b): sorting gives the row order
  for (int b = 0; b < static_cast<int>(in.requests.size()); ++b)
    for (int blk = 0; blk * 128 < in.requests[b].k_len; ++blk) level_major.emplace_back(blk, b);
  std::sort(level_major.begin(), level_major.end());
  std::map<std::pair<int, int>, int> row_of;  // (b, block) -> row
  for (std::size_t r = 0; r < level_major.size(); ++r) {
    row_of[{level_major[r].second, level_major[r].first}] = static_cast<int>(r);
    o.row_coords.push_back(level_major[r].second);
    o.row_coords.push_back(level_major[r].first);
  }
  o.total_rows = static_cast<std::int64_t>(level_major.size());
  o.split_counts.assign(static_cast<std::size_t>(total_q * h_kv), 0);
  const auto* ids = in.ids.data<std::int32_t>();
  for (int h = 0; h < h_kv; ++h) {
    std::map<int, std::vector<std::pair<int, int>>> edges;  // row -> (q_local, slot)
    std::int64_t q = 0;
    for (int b = 0; b < static_cast<int>(in.requests.size()); ++b) {
      const int blocks = (in.requests[b].k_len + 127) / 128;
      for (int i = 0; i < in.requests[b].q_len; ++i, ++q) {
        std::set<int> sel;
        for (int s = 0; s < k; ++s) {
          const int id = ids[(h * total_q + q) * k + s];
          if (id >= 0 && id < blocks) sel.insert(id);
        }
        o.split_counts[q * h_kv + h] = static_cast<int>(sel.size());
        int slot = 0;
        for (int blk : sel) edges[row_of.at({b, blk})].emplace_back(i, slot++);
      }
    }
    std::vector<std::int32_t> qi(static_cast<std::size_t>(total_q * k), -1), qs = qi;
    o.row_ptr.push_back(0);
    int e = 0;
    for (int r = 0; r < o.total_rows; ++r) {
      auto& list = edges[r];
      std::sort(list.begin(), list.end());
      const int begin = e;
      for (auto [q_local, slot] : list) {
        qi[e] = q_local;
        qs[e] = q_local + slot * (1 << 24);
        ++e;
      }
      o.row_ptr.push_back(e);
      for (int c = begin; c < e; c += q_per_item)
        o.work.push_back(
            {h, r, c, std::min(q_per_item, e - c), o.row_coords[2 * r], o.row_coords[2 * r + 1]});
    }
    o.q_indices.insert(o.q_indices.end(), qi.begin(), qi.end());
    o.qsplit.insert(o.qsplit.end(), qs.begin(), qs.end());
  }
  return o;
}

// Equality of two int arrays reporting the first difference (gtest would print all of them).
void expect_same(const std::vector<std::int32_t>& got, const std::vector<std::int32_t>& want,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
  EXPECT_TRUE(diff.first == got.end()) << what << " differs first at " << (diff.first - got.begin())
                                       << ": " << *diff.first << " vs " << *diff.second;
}

auto item_key(const msa::WorkItem& w) { return std::tie(w.kv_head, w.row, w.q_begin); }

// Everything spec §2 promises, against the oracle.
void check_plan(const Inputs& in, int q_per_item, int group = 1) {
  const msa::K2qCsr p = plan(in, q_per_item, false, group);
  const Oracle o = brute_force(in, q_per_item);
  EXPECT_EQ(p.total_rows, o.total_rows);
  EXPECT_EQ(p.total_q, in.total_q());
  expect_same(p.row_coords, o.row_coords, "row_coords");
  expect_same(p.row_ptr, o.row_ptr, "row_ptr");
  expect_same(p.q_indices, o.q_indices, "q_indices");
  expect_same(p.qsplit, o.qsplit, "qsplit");
  expect_same(p.split_counts, o.split_counts, "split_counts");

  // Work items: the same set as the oracle's chunks (so each edge is covered exactly once).
  std::vector<msa::WorkItem> sorted = p.work;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return item_key(a) < item_key(b); });
  EXPECT_TRUE(sorted == o.work) << "work items differ as a set";
  std::vector<int> covered(static_cast<std::size_t>(in.h_kv * in.total_q() * in.topk), 0);
  for (const auto& w : p.work) {
    EXPECT_GE(w.q_count, 1);
    EXPECT_LE(w.q_count, q_per_item);
    for (int e = w.q_begin; e < w.q_begin + w.q_count; ++e)
      ++covered[w.kv_head * in.total_q() * in.topk + e];
  }
  for (int h = 0; h < in.h_kv; ++h)
    for (std::int64_t e = 0; e < in.total_q() * in.topk; ++e)
      ASSERT_EQ(covered[h * in.total_q() * in.topk + e],
                e < p.row_ptr[h * (p.total_rows + 1) + p.total_rows] ? 1 : 0)
          << "edge " << e << " of head " << h;
  // Largest first, ties in (kv_head, row, q_begin) order.
  for (std::size_t i = 1; i < p.work.size(); ++i) {
    const auto& a = p.work[i - 1];
    const auto& b = p.work[i];
    EXPECT_TRUE(a.q_count > b.q_count || (a.q_count == b.q_count && item_key(a) < item_key(b)))
        << "work order at " << i;
  }
  // Capacity: the spec bound from host shapes only.
  std::int64_t max_k = 0;
  for (const auto& r : in.requests) max_k = std::max<std::int64_t>(max_k, r.k_len);
  const std::int64_t bound =
      static_cast<std::int64_t>(in.requests.size()) * ((max_k + 127) / 128) * in.h_kv +
      (in.total_q() * in.topk * in.h_kv + q_per_item - 1) / q_per_item;
  EXPECT_EQ(p.work_capacity, bound);
  EXPECT_LE(static_cast<std::int64_t>(p.work.size()), p.work_capacity);
  // Deterministic, order of items included.
  const msa::K2qCsr again = plan(in, q_per_item, false, group);
  EXPECT_TRUE(again.work == p.work);
  EXPECT_TRUE(again.qsplit == p.qsplit);
}

std::vector<Request> random_requests(std::mt19937_64& rng, int count, int max_prefix, int max_q) {
  std::uniform_int_distribution<int> prefix(0, max_prefix), q_len(0, max_q);
  std::vector<Request> reqs;
  for (int i = 0; i < count; ++i) {
    const int q = q_len(rng);
    reqs.push_back({q, prefix(rng) + q});
  }
  return reqs;
}

TEST(Planner, HandComputedExample) {
  // Request 0: 1 query at position 299 (blocks 0..2); request 1: 2 queries at 128, 129
  // (blocks 0..1). Rows level-major: (0,0) (1,0) (0,1) (1,1) (0,2).
  Inputs in({{1, 300}, {2, 130}}, 1, 2, Selection::kRandom, 1);
  const std::int32_t rows[3][2] = {{2, 0}, {5, 1}, {1, 0}};  // 5 is out of range: ignored
  for (int q = 0; q < 3; ++q)
    for (int s = 0; s < 2; ++s) in.id(0, q, s) = rows[q][s];
  const msa::K2qCsr p = plan(in, 1);
  EXPECT_EQ(p.total_rows, 5);
  EXPECT_EQ(p.row_coords, (std::vector<std::int32_t>{0, 0, 1, 0, 0, 1, 1, 1, 0, 2}));
  EXPECT_EQ(p.row_ptr, (std::vector<std::int32_t>{0, 1, 2, 2, 4, 5}));
  EXPECT_EQ(p.q_indices, (std::vector<std::int32_t>{0, 1, 0, 1, 0, -1}));
  EXPECT_EQ(p.qsplit, (std::vector<std::int32_t>{0, 1, 0, 1 | (1 << 24), 0 | (1 << 24), -1}));
  EXPECT_EQ(p.split_counts, (std::vector<std::int32_t>{2, 1, 2}));
  EXPECT_EQ(p.work, (std::vector<msa::WorkItem>{{0, 0, 0, 1, 0, 0},
                                                {0, 1, 1, 1, 1, 0},
                                                {0, 3, 2, 1, 1, 1},
                                                {0, 3, 3, 1, 1, 1},
                                                {0, 4, 4, 1, 0, 2}}));
  EXPECT_EQ(p.work_capacity, 2 * 3 + 6);
  // Two queries per item: row 3 becomes one item of 2 and goes first.
  EXPECT_EQ(plan(in, 2).work,
            (std::vector<msa::WorkItem>{
                {0, 3, 2, 2, 1, 1}, {0, 0, 0, 1, 0, 0}, {0, 1, 1, 1, 1, 0}, {0, 4, 4, 1, 0, 2}}));
}

TEST(Planner, SizesFollowTheSpecBound) {
  msa::AttentionShape s;
  s.h_kv = 4;
  s.topk = 16;
  const msa::K2qSizes z = msa::k2q_sizes(s, {3, 1000, 300}, 64);
  EXPECT_EQ(z.max_rows, 3 * 3);
  EXPECT_EQ(z.edges_per_head, 16000);
  EXPECT_EQ(z.work_capacity, 9 * 4 + (16000 * 4 + 63) / 64);
  EXPECT_THROW(msa::k2q_sizes(s, {1, 1, 1}, 0), msa::Error);
}

TEST(Planner, MatchesBruteForceOnGeneratedWorkloads) {
  std::mt19937_64 rng(7);
  int cases = 0;
  for (Selection sel :
       {Selection::kRandom, Selection::kTileShared, Selection::kClustered, Selection::kAll}) {
    for (auto [h_kv, group, topk] :
         {std::tuple{1, 1, 16}, std::tuple{4, 16, 16}, std::tuple{2, 4, 4}, std::tuple{4, 1, 32},
          std::tuple{1, 16, 1}}) {
      for (int q_per_item : {1, 7, 64}) {
        SCOPED_TRACE(std::string(msa::bench::selection_name(sel)) + " h_kv " +
                     std::to_string(h_kv) + " topk " + std::to_string(topk) + " q_per_item " +
                     std::to_string(q_per_item));
        Inputs in(random_requests(rng, 1 + static_cast<int>(rng() % 6), 2000, 300), h_kv, topk, sel,
                  rng());
        check_plan(in, q_per_item, group);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 60);
}

// q_per_item 0 (the default): one M tile's queries for small problems, max(64, 256 / G) for
// large ones; an explicit value is kept.
TEST(Planner, AutomaticWorkItemSize) {
  const auto shape = [](int h_q, int h_kv) {
    msa::AttentionShape s;
    s.h_q = h_q;
    s.h_kv = h_kv;
    s.topk = 16;
    return s;
  };
  EXPECT_EQ(msa::plan_q_per_item(shape(64, 4), 171, 0), 8);    // G = 16: 8 x 16 rows
  EXPECT_EQ(msa::plan_q_per_item(shape(32, 4), 171, 0), 16);   // G = 8
  EXPECT_EQ(msa::plan_q_per_item(shape(12, 4), 171, 0), 43);   // G = 3: ceil(128 / 3)
  EXPECT_EQ(msa::plan_q_per_item(shape(4, 4), 171, 0), 64);    // G = 1: at most 64
  EXPECT_EQ(msa::plan_q_per_item(shape(64, 4), 171, 13), 13);  // explicit
  // total_q * topk * h_q rows: 4095 * 16 * 64 < 2^22 <= 4096 * 16 * 64.
  EXPECT_EQ(msa::plan_q_per_item(shape(64, 4), 4095, 0), 8);
  EXPECT_EQ(msa::plan_q_per_item(shape(64, 4), 4096, 0), 64);
  EXPECT_EQ(msa::plan_q_per_item(shape(64, 4), std::int64_t{1} << 40, 0), 64);  // no overflow
  // Large problems at small G: two M tiles of rows (4096 * 16 * 64 rows at h_q 64).
  EXPECT_EQ(msa::plan_q_per_item(shape(64, 64), 4096, 0), 256);  // G = 1
  EXPECT_EQ(msa::plan_q_per_item(shape(64, 64), 4095, 0), 64);   // G = 1, small: at most 64
  EXPECT_EQ(msa::plan_q_per_item(shape(64, 32), 4096, 0), 128);  // G = 2
  EXPECT_EQ(msa::plan_q_per_item(shape(48, 16), 8192, 0), 85);   // G = 3: floor(256 / 3)
  EXPECT_EQ(msa::plan_q_per_item(shape(64, 16), 4096, 0), 64);   // G = 4

  // The plan records the size it used and its work items follow it.
  std::mt19937_64 rng(12);
  Inputs in(random_requests(rng, 3, 2000, 300), 4, 16, Selection::kClustered, rng());
  const msa::K2qCsr p = plan(in, 0, false, 16);
  EXPECT_EQ(p.q_per_item, 8);
  check_plan(in, 8, 16);
  const Oracle o = brute_force(in, 8);
  ASSERT_EQ(p.work.size(), o.work.size());
  for (const msa::WorkItem& w : p.work) EXPECT_LE(w.q_count, 8);
}

TEST(Planner, AdversarialRows) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // Short requests make K larger than the number of blocks.
    Inputs in(random_requests(rng, 5, round % 2 ? 200 : 1500, 150), 2, 8, Selection::kRandom,
              rng());
    std::uniform_int_distribution<int> kind(0, 5), any(-3, 20), slot(0, 7);
    for (int h = 0; h < 2; ++h) {
      for (std::int64_t q = 0; q < in.total_q(); ++q) {
        switch (kind(rng)) {
          case 0:  // all -1
            for (int s = 0; s < 8; ++s) in.id(h, q, s) = -1;
            break;
          case 1:  // duplicates
            in.id(h, q, slot(rng)) = in.id(h, q, 0);
            in.id(h, q, 7) = in.id(h, q, 0);
            break;
          case 2:  // out of range, negatives, padding holes
            in.id(h, q, slot(rng)) = 1 << 30;
            in.id(h, q, slot(rng)) = -7;
            in.id(h, q, 0) = -1;
            break;
          case 3:  // anything
            for (int s = 0; s < 8; ++s) in.id(h, q, s) = any(rng);
            break;
          default:  // producer-contract row
            break;
        }
      }
    }
    check_plan(in, 1 + round * 5);
  }
}

TEST(Planner, HotBlockSplitsIntoManyItems) {
  // Every query of every request picks block 0 (and its local block).
  Inputs in({{700, 1000}, {300, 300}, {0, 50}}, 2, 4, Selection::kRandom, 3);
  for (int h = 0; h < 2; ++h)
    for (std::int64_t q = 0; q < in.total_q(); ++q) in.id(h, q, 0) = 0;
  check_plan(in, 5);
  const msa::K2qCsr p = plan(in, 5);
  // Row 0 = (request 0, block 0): all 700 queries, so ceil(700 / 5) items of head 0.
  EXPECT_EQ(p.row_ptr[1] - p.row_ptr[0], 700);
  const auto items = std::count_if(p.work.begin(), p.work.end(), [](const msa::WorkItem& w) {
    return w.kv_head == 0 && w.row == 0;
  });
  EXPECT_EQ(items, 140);
  EXPECT_EQ(p.work.front().q_count, 5);
}

TEST(Planner, HundredsOfRequestsAndGroupSizes) {
  std::mt19937_64 rng(5);
  for (int group : {1, 16}) {
    Inputs in(random_requests(rng, 300, 3000, 8), 4, 16, Selection::kClustered, rng());
    check_plan(in, 16, group);
  }
}

TEST(Planner, EmptyBatchesAndRequestsWithoutQueries) {
  // No requests at all.
  Inputs none({}, 2, 4, Selection::kRandom, 1);
  const msa::K2qCsr p0 = plan(none, 8);
  EXPECT_EQ(p0.total_rows, 0);
  EXPECT_EQ(p0.row_ptr, (std::vector<std::int32_t>{0, 0}));
  EXPECT_TRUE(p0.work.empty());
  EXPECT_EQ(p0.work_capacity, 0);
  // Rows exist but total_q = 0: all row_ptr zero, nothing to do.
  Inputs no_q({{0, 300}, {0, 0}, {0, 129}}, 2, 4, Selection::kRandom, 1);
  const msa::K2qCsr p1 = plan(no_q, 8);
  EXPECT_EQ(p1.total_rows, 5);
  EXPECT_EQ(p1.row_coords, (std::vector<std::int32_t>{0, 0, 2, 0, 0, 1, 2, 1, 0, 2}));
  EXPECT_EQ(p1.row_ptr, std::vector<std::int32_t>(12, 0));
  EXPECT_TRUE(p1.q_indices.empty());
  EXPECT_TRUE(p1.work.empty());
  check_plan(no_q, 8);
  // q_len = 0 requests between others, and a single query per request.
  Inputs mixed({{0, 500}, {1, 1}, {0, 0}, {3, 700}, {1, 129}}, 3, 4, Selection::kRandom, 9);
  check_plan(mixed, 2);
}

TEST(Planner, RejectsWhatItCannotEncode) {
  Inputs in({{3, 300}}, 2, 4, Selection::kRandom, 1);
  msa::AttentionShape wide = in.shape();
  wide.topk = 256;
  try {
    msa::build_k2q_csr(wide, in.batch(), in.ids.view(), {});
    FAIL() << "expected msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), "shape.topk");
    EXPECT_EQ(e.value(), "256");
  }
  msa::TensorView ids = in.ids.view();
  ids.shape[1] = 2;
  try {
    msa::build_k2q_csr(in.shape(), in.batch(), ids, {});
    FAIL() << "expected msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), "topk.shape[1]");
    EXPECT_EQ(e.value(), "2");
  }
  msa::Options o;
  o.q_per_item = -1;
  EXPECT_THROW(msa::build_k2q_csr(in.shape(), in.batch(), in.ids.view(), o), msa::Error);
  in.k_len.data<std::int32_t>()[0] = 2;
  try {
    plan(in, 4);
    FAIL() << "expected msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), "k_len[0]");
    EXPECT_EQ(e.value(), "2");
  }
}

// Strict mode: one broken row at a time; the error names it, non-strict plans it.
class PlannerStrict : public ::testing::Test {
 protected:
  // Request 0: 2 queries, local 0 (one valid id). Request 1: 3 queries, local 4 (4 ids).
  // Request 2: 129 queries at 127..255, so query 5 has local 0 of 2 blocks.
  Inputs in{{{2, 2}, {3, 520}, {129, 256}}, 2, 4, Selection::kRandom, 21};

  void expect_violation(std::int64_t h, std::int64_t q, std::vector<std::int32_t> row, int slot,
                        std::int32_t value, const std::string& rule) {
    for (int s = 0; s < 4; ++s) in.id(h, q, s) = row[s];
    try {
      plan(in, 4, /*strict=*/true);
      ADD_FAILURE() << "expected a strict-mode error for " << rule;
    } catch (const msa::Error& e) {
      EXPECT_EQ(e.argument(), "topk[" + std::to_string(h) + ", " + std::to_string(q) + ", " +
                                  std::to_string(slot) + "]");
      EXPECT_EQ(e.value(), std::to_string(value));
      EXPECT_NE(e.message().find(rule), std::string::npos) << e.message();
    }
    check_plan(in, 4);  // the same row is fine without strict
  }
};

TEST_F(PlannerStrict, GeneratedRowsPass) {
  EXPECT_NO_THROW(plan(in, 4, true));
  const msa::BatchInfo info = msa::read_batch(in.batch());
  EXPECT_NO_THROW(msa::validate_topk(in.ids.view(), info, 2, 4, true, msa::Device::kCpu));
}
TEST_F(PlannerStrict, ValidIdAfterPadding) {
  expect_violation(1, 3, {1, -1, 3, 4}, 2, 3, "-1-padded prefix");
}
TEST_F(PlannerStrict, NegativeOtherThanPadding) {
  expect_violation(1, 3, {1, 2, 4, -7}, 3, -7, "negative id");
}
TEST_F(PlannerStrict, Duplicate) { expect_violation(0, 4, {1, 1, 3, 4}, 1, 1, "duplicate"); }
TEST_F(PlannerStrict, BeyondLocalInRange) {
  expect_violation(1, 5, {1, -1, -1, -1}, 0, 1, "beyond the query's local block 0");
}
TEST_F(PlannerStrict, BeyondLocalOutOfRange) {
  expect_violation(0, 1, {7, -1, -1, -1}, 0, 7, "beyond the query's local block 0");
}
TEST_F(PlannerStrict, LastIsNotLocal) {
  expect_violation(1, 2, {0, 4, 1, 3}, 3, 3, "last valid id is not the local block 4");
}
TEST_F(PlannerStrict, WrongCount) {
  expect_violation(0, 3, {2, 4, -1, -1}, 2, -1, "wrong count: 2 valid ids");
}
TEST_F(PlannerStrict, AllPaddingRow) {
  expect_violation(1, 0, {-1, -1, -1, -1}, 0, -1, "wrong count: 0 valid ids");
}
TEST_F(PlannerStrict, FirstOffenderInMemoryOrder) {
  in.id(1, 0, 0) = 9;  // later in memory (head 1)
  expect_violation(0, 6, {1, 0, 1, 1}, 2, 1, "duplicate");
}
TEST_F(PlannerStrict, QueryMajorLayoutNamesQueryFirst) {
  // The decode layout [total_q, h_kv, topk]: names are topk[query, head, slot].
  const std::int64_t total_q = in.total_q();
  HostTensor qmajor(msa::DType::kInt32, {total_q, 2, 4});
  in.id(1, 3, 3) = 2;  // request 1, local 4: the last valid id is not local
  for (std::int64_t q = 0; q < total_q; ++q)
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 4; ++s) qmajor.data<std::int32_t>()[(q * 2 + h) * 4 + s] = in.id(h, q, s);
  const msa::BatchInfo info = msa::read_batch(in.batch());
  try {
    msa::validate_topk(qmajor.view(), info, 2, 4, true, msa::Device::kCpu, /*head_major=*/false);
    FAIL() << "expected msa::Error";
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), "topk[3, 1, 3]");
    EXPECT_EQ(e.value(), "2");
  }
  EXPECT_NO_THROW(msa::validate_topk(qmajor.view(), info, 2, 4, false, msa::Device::kCpu, false));
}

TEST(Planner, RowSelectionIsTheSortedSetOfInRangeIds) {
  const std::int32_t ids[] = {5, -1, 2, 9, 2, 0, -4, 5};
  std::int32_t sorted[8];
  ASSERT_EQ(msa::row_selection(ids, 1, 8, 6, sorted), 3);
  EXPECT_EQ(std::vector<std::int32_t>(sorted, sorted + 3), (std::vector<std::int32_t>{0, 2, 5}));
  // Strided slots (the query-major layout).
  const std::int32_t strided[] = {3, 100, 1, 100, 3, 100};
  ASSERT_EQ(msa::row_selection(strided, 2, 3, 4, sorted), 2);
  EXPECT_EQ(sorted[0], 1);
  EXPECT_EQ(sorted[1], 3);
}

}  // namespace
