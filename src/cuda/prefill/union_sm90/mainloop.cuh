// Mainloop roles of the sm_90a query-major tile-union sparse prefill.
//
// A tile is q_per_tile consecutive queries of one KV head, their G heads packed into the
// 128-row M tile (row r = query r / G, head r % G). Its union is the set of (request, block)
// pairs its queries selected, deduplicated in first-seen order (query-major, slot order: the
// result is deterministic); every union block's K/V is loaded once for all 128 rows, and a
// row sees a block's keys only if its query selected it (a membership bit per query) and
// the causal / k_len limit allows. A tile may span requests: each request is a segment, and a
// query's entries name its own segment, so rows of other segments see nothing of them.
//
// Roles (see kernel.cuh): builders (3 warps) build the union list and gather Q, the loader
// (1 warp) streams K/V with TMA, two consumer warpgroups compute.
#pragma once

#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/prefill/sm90/mainloop.cuh"
#include "cuda/prefill/sm90/params.h"
#include "cuda/prefill/union_sm90/config.h"
#include "cuda/prefill/union_sm90/params.h"

namespace msa::cuda::union_sm90 {

using prefill_sm90::Barrier64;
using prefill_sm90::Element;
using prefill_sm90::fast_exp2;
using prefill_sm90::issue_pv;
using prefill_sm90::issue_qk;
using prefill_sm90::kBlockBytes;
using prefill_sm90::block_chunks;
using prefill_sm90::load_block;
using prefill_sm90::init_kv_ring;
using prefill_sm90::load_kv_stage;
using prefill_sm90::make_frag_p;
using prefill_sm90::mask_keys;
using prefill_sm90::named_barrier_arrive;
using prefill_sm90::named_barrier_sync;
using prefill_sm90::opaque_tid;
using prefill_sm90::phase_of;
using prefill_sm90::quad_max;
using prefill_sm90::quad_sum;
using prefill_sm90::Turn;
using prefill_sm90::zero_tail;

// Queries [q0, q0 + nq) of one KV head: the tile-th (KV head, query tile) pair.
struct Tile {
  int kv_head;
  int q0;
  int nq;
};

__device__ __forceinline__ Tile make_tile(const UnionParams& p, int tile) {
  const int per_head = static_cast<int>(p.tiles / p.attn.h_kv);
  Tile t;
  t.kv_head = static_cast<int>(tile / per_head);
  t.q0 = static_cast<int>((tile - t.kv_head * per_head) * p.q_per_tile);
  t.nq = static_cast<int>(min(std::int64_t(p.q_per_tile), p.attn.total_q - t.q0));
  return t;
}

// Union entry u of a list, decoded (the builders pack it as segment << 24 | block id).
struct UnionEntry {
  int b;            // request
  int k_len;        // its k_len
  int block_start;  // block id * 128
  int tokens;       // tokens of the block below k_len, 1..128
};

__device__ __forceinline__ UnionEntry union_entry(const UnionList& list, int u) {
  const int key = list.block[u];
  const int seg = key >> 24;
  UnionEntry e;
  e.b = list.seg_b[seg];
  e.k_len = list.seg_klen[seg];
  e.block_start = (key & 0xFFFFFF) * Traits::kBlockN;
  e.tokens = min(Traits::kBlockN, e.k_len - e.block_start);
  return e;
}

// ---- builders: the union list and the Q gather -------------------------------------------

// Builds tile t's union into `list` (96 builder threads, bt = 0..95); each builder's mbarrier
// arrival afterwards publishes its writes to the loader and the consumers.
__device__ __forceinline__ void build_list(const UnionParams& p, const Tile& t, SharedStorage& smem,
                                           UnionList& list, int bt) {
  const std::int32_t* cu = p.attn.cu_seqlens_q;
  const int topk = p.attn.topk;
  const int n = t.nq * topk;
  // 1. Each query's request (the last one starting at or before it) and position.
  if (bt < t.nq) {
    const int qg = t.q0 + bt;
    int lo = 0, hi = p.batch - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (cu[mid] <= qg) lo = mid;
      else hi = mid - 1;
    }
    const int k_len = max(p.attn.k_len[lo], 0);
    smem.rank[bt] = lo;  // scratch until step 3
    list.q_pos[bt] = k_len - (cu[lo + 1] - cu[lo]) + (qg - cu[lo]);
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // 2. Segments: a new one starts wherever the request changes.
  if (bt < t.nq) {
    int seg = 0;
    for (int j = 1; j <= bt; ++j) seg += smem.rank[j] != smem.rank[j - 1];
    smem.q_seg[bt] = seg;
    if (bt == 0 || smem.rank[bt] != smem.rank[bt - 1]) {
      list.seg_b[seg] = smem.rank[bt];
      list.seg_klen[seg] = max(p.attn.k_len[smem.rank[bt]], 0);
    }
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // 3. Entry keys; ids outside [0, ceil(k_len / 128)) are ignored.
  const std::int32_t* ids = p.topk + std::int64_t(t.kv_head) * p.stride_topk_head;
  for (int e = bt; e < n; e += kBuilderThreads) {
    const int i = e / topk;
    const int seg = smem.q_seg[i];
    const int blocks = (list.seg_klen[seg] + Traits::kBlockN - 1) / Traits::kBlockN;
    const int id = ids[std::int64_t(t.q0 + i) * p.stride_topk_token + (e - i * topk)];
    smem.key[e] = id >= 0 && id < blocks ? (seg << 24) | id : -1;
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // 4. Each entry's first occurrence.
  for (int e = bt; e < n; e += kBuilderThreads) {
    const int key = smem.key[e];
    int f = -1;
    if (key >= 0) {
      f = e;
      for (int j = 0; j < e; ++j)
        if (smem.key[j] == key) {
          f = j;
          break;
        }
    }
    smem.first[e] = f;
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // 5. Ranks of the first occurrences, in entry order (one warp, 32 entries per ballot).
  if (bt < 32) {
    int base = 0;
    for (int c = 0; c < n; c += 32) {
      const int e = c + bt;
      const bool is_first = e < n && smem.first[e] == e;
      const unsigned ballot = __ballot_sync(0xffffffffu, is_first);
      if (is_first) {
        const int r = base + __popc(ballot & ((1u << bt) - 1u));
        smem.rank[e] = r;
        list.block[r] = smem.key[e];
        list.members[r] = 0u;
      }
      base += __popc(ballot);
    }
    if (bt == 0) list.size = base;
  }
  named_barrier_sync(kBuilders, kBuilderThreads);
  // 6. Membership: query i selected union entry rank[first[e]]; and each entry's 16-token
  // chunks on valid pages.
  for (int e = bt; e < n; e += kBuilderThreads) {
    const int f = smem.first[e];
    if (f >= 0) atomicOr(&list.members[smem.rank[f]], 1u << (e / topk));
  }
  for (int u = bt; u < list.size; u += kBuilderThreads) {
    const int key = list.block[u];
    const int seg = key >> 24;
    list.chunks[u] = static_cast<std::uint8_t>(
        block_chunks(p.attn, list.seg_b[seg], (key & 0xFFFFFF) * Traits::kBlockN, list.seg_klen[seg]));
  }
  // The scratch arrays are free for the next tile once every builder is done reading them.
  named_barrier_sync(kBuilders, kBuilderThreads);
}

// Gathers tile t's Q rows into `sq` with TMA (one box per query's heads and column half);
// padding rows get no data (their results are never stored). Builder 0 arms `bar`.
__device__ __forceinline__ void load_q(const UnionParams& p, const PrefillTma& tma, const Tile& t, Element* sq,
                                       std::uint64_t* bar, int bt) {
  const int group = p.attn.group;
  const int rows = t.nq * group;
  if (bt == 0) Barrier64::arrive_and_expect_tx(bar, static_cast<std::uint32_t>(rows * Traits::kHeadDim * sizeof(Element)));
  for (int r = bt; r < rows; r += kBuilderThreads) {
    if (r % tma.q_box_rows != 0) continue;
    const int qi = r / group;
    const int h = t.kv_head * group + (r - qi * group);
#pragma unroll
    for (int c = 0; c < Traits::kColHalves; ++c)
      cute::SM90_TMA_LOAD_3D::copy(&tma.q, bar, static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST),
                                   sq + Traits::q_box_offset(r, c), c * Traits::kBoxCols, h, t.q0 + qi);
  }
}

// ---- consumers: the math of one union block -----------------------------------------------

// Online softmax state of this thread's two rows: running max (already times scale_log2;
// -inf before any visible key) and this thread's part of the running sum (the quad's four
// parts add up in the epilogue; every lane of a quad applies the same rescale factors).
struct SoftmaxState {
  float m[2];
  float l[2];
};

// Masks S to each row's visible keys (key_limit per row half: keys [0, limit) of the block;
// `chunks`: the block's 16-token chunks on valid pages),
// folds it into the running state, rescales O and writes P (bf16) into the P V operand.
template <class AccS, class FragP, class AccO>
__device__ __forceinline__ void softmax_online(AccS& acc_s, FragP& frag_p, AccO& acc_o, const int (&key_limit)[2],
                                               std::uint32_t chunks, float scale_log2, SoftmaxState& st, int ct) {
  using namespace cute;
  mask_keys(acc_s, key_limit, chunks, ct);
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < size(acc_s); ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], acc_s(i));
  float m_use[2], alpha[2], sum[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float m_new = fmaxf(st.m[half], quad_max(mx[half]) * scale_log2);
    // Before any visible key the row stays empty: subtract 0 (exp2(-inf) = 0, never NaN).
    m_use[half] = m_new == -INFINITY ? 0.f : m_new;
    alpha[half] = fast_exp2(st.m[half] - m_use[half]);  // 0 while the row was empty
    st.m[half] = m_new;
    sum[half] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < size(acc_o); ++i) acc_o(i) *= alpha[(i >> 1) & 1];
#pragma unroll
  for (int i = 0; i < size(acc_s); ++i) {
    const int half = (i >> 1) & 1;
    const float e = fast_exp2(fmaf(acc_s(i), scale_log2, -m_use[half]));
    sum[half] += e;
    frag_p(i) = static_cast<Element>(e);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) st.l[half] = st.l[half] * alpha[half] + sum[half];
}

}  // namespace msa::cuda::union_sm90
