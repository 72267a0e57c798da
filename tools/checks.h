// Independent checks of each stage's output: brute-force recomputations on sampled rows and
// the plan's invariants, written without the library code they check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "core/tile_route.h"
#include "msa/plan.h"

namespace msa::tool {

struct CheckResult {
  bool ok = true;
  double max_err = 0;  // largest |got - ref| seen (0 for exact checks)
  std::string detail;  // the first failure, empty when ok
};

// Up to per_request query rows of each request (its first, last and evenly spaced ones), as
// packed row indices.
std::vector<std::int64_t> sample_rows(const std::vector<bench::Request>& requests, int per_request);

// Indexer scores [h_i, total_q, cols] of the sampled rows against FP64 dot products over the
// index-K cache: |err| <= 2e-4 max(1, |ref|) and -inf exactly where no key is visible (spec §7).
CheckResult check_indexer(const bench::Workload& w, const bench::HostTensor& scores,
                          const std::vector<std::int64_t>& rows, double scale);

// Sampled top-k rows [h, total_q, topk] against a brute-force sort of their scores (spec §5).
CheckResult check_topk_rows(const bench::HostTensor& topk, const bench::HostTensor& scores,
                            const std::vector<bench::Request>& requests,
                            const std::vector<std::int64_t>& rows);

// The producer contract (msa validation, strict): ids a -1-padded prefix, unique, <= local,
// local last, min(topk, local + 1) of them.
CheckResult check_topk_contract(const bench::HostTensor& topk, const bench::Workload& w);

// The plan's spec §2 invariants recomputed from the top-k rows, then byte equality of its
// arrays with the host builder's (work items as a set). Rows of the tiles `route` sends to
// the tile-union kernel (PrefillPath::kAuto) must have no edge and split count 1.
CheckResult check_plan(const K2qCsr& plan, const K2qCsr& host, const bench::HostTensor& topk,
                       const std::vector<bench::Request>& requests, int q_per_item, const TileRoute& route);

}  // namespace msa::tool
