// Backend choice and the knobs shared by the operator objects.
#pragma once

#include <cstdint>

// The one CUDA type of the public API, declared as the toolkit declares it so that this
// header needs no CUDA include. nullptr is the default stream.
typedef struct CUstream_st* cudaStream_t;

namespace msa {

enum class Backend : std::uint8_t { kCpu, kCuda };
const char* backend_name(Backend b);
// True when this build has the CUDA backend and a CUDA device is visible.
bool cuda_available();

// How the CUDA sparse prefill organises its work (both give the same results within the spec's
// tolerances; the CPU backend ignores it).
enum class PrefillPath : std::uint8_t {
  // KV-block-major (spec §2): each selected block's K/V is loaded once for all queries that
  // chose it; one partial per (query, block) edge, merged by the combine. The right choice for
  // independent (random) selections.
  kBlockMajor,
  // Query-major over the union of a tile's selections: each tile of neighbouring queries loads
  // the union of their blocks once and runs an online softmax, one result per query written
  // straight to out / lse, no per-block partials and no combine. Wins when neighbouring queries
  // share most of their blocks. plan() launches nothing (it stages host inputs only).
  kTileUnion,
  // Decided per query tile by plan(), on the device: a tile (the queries of one tile-union M
  // tile, one KV head) goes to the tile-union kernel when a cost model measured per GQA group
  // says it costs no more there (its union of blocks at most 0.31 of its queries' edges at
  // G = 16, 0.16 at G = 8, 0.08 at G = 4), the rest to the block-major kernel; run() launches
  // both, each on its share. No host synchronisation, and run() stays capturable. The default.
  // The plan (plan_snapshot()) then leaves the union tiles' rows out: no edge, split count 1.
  // Where the model, given the batch alone (each tile's union at its bound), finds every tile
  // cheaper on the tile-union kernel than the routed call with its fixed cost, its largest
  // tile included (short contexts: one request up to 6272 tokens at G = 16, K = 16; not small
  // chunks on long prefixes, whose few tiles each hold a large union), every tile goes there as
  // with kTileUnion, and plan() launches nothing.
  kAuto,
};
const char* prefill_path_name(PrefillPath p);

// How TopK ranks a row's candidate blocks (spec §5). Both keep the row's contract: the local
// block last, n <= topk rows as 0..n-1 then -1, the chosen ids in descending rank order.
enum class TopkRanking : std::uint8_t {
  // By score, ties to the smaller block id; NaN below every number (-inf included), -0 equal to
  // +0. The default.
  kExact,
  // MSA's 16-bit quantised key. Over the row's ranked candidates (blocks 0..n-2) take the
  // finite scores' lo = min and hi = max; scale = hi > lo ? 65534 / (hi - lo) : 0 and
  // bias = fma(-lo, scale, 1.5) (scale 0 and bias 1.5 when no score is finite); a finite score
  // s gets level q = trunc(fma(s, scale, bias)) clamped to [0, 65535], -inf and NaN get 0, +inf
  // 65535. Rank by level, ties to the smaller block id. On finite rows this is the selection of
  // MSA's own top-k, bit for bit (its id tie-break agrees for ids below 65536; larger ids, which
  // it truncates, still break ties to the smaller id here).
  kQuantised16,
};
const char* topk_ranking_name(TopkRanking r);

struct Options {
  Backend backend = Backend::kCpu;
  // Check the top-k producer contract (ids unique, a -1-padded prefix, <= the local block,
  // the local block last) and report the first offending (head, query, slot, value). Off, the
  // operators still never read out of bounds: a row's selection is the set of its in-range ids.
  bool strict = false;
  // Planner: a work item covers at most this many of a block's queries (spec §2); 0 (the
  // default): chosen per plan from the problem's size (msa::plan_q_per_item, plan.h).
  int q_per_item = 0;
  // CUDA sparse prefill organisation (see PrefillPath).
  PrefillPath prefill_path = PrefillPath::kAuto;
  // TopK's ranking (see TopkRanking); the other operators ignore it.
  TopkRanking topk_ranking = TopkRanking::kExact;
};

}  // namespace msa
