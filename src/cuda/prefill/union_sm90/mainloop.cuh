// Mainloop pieces of the sm_90a query-major tile-union sparse prefill: the Q tile gather, the
// union of a segment's selections, and the online softmax over one union block.
//
// A tile is q_per_tile consecutive queries of one KV head, their G heads packed into the
// 128-row M tile (row r = query r / G, head r % G). A tile may span requests; it is processed
// as segments of one request each, and a row takes part only in its own segment's blocks.
// Within a segment every union block is loaded once for all 128 rows; a row's membership
// bit (its query selected the block) and the causal / k_len limit give its visible keys.
#pragma once

#include <cstdint>

#include <cub/block/block_scan.cuh>
#include <cute/tensor.hpp>

#include "cuda/prefill/sm90/mainloop.cuh"
#include "cuda/prefill/union_sm90/config.h"
#include "cuda/prefill/union_sm90/params.h"

namespace msa::cuda::union_sm90 {

using prefill_sm90::cp_async_16;
using prefill_sm90::fast_exp2;
using prefill_sm90::quad_max;
using Main = prefill_sm90::Mainloop<Traits>;
using BlockScan = cub::BlockScan<int, Traits::kThreads>;

// Queries [q0, q0 + nq) of one KV head.
struct Tile {
  int kv_head;
  int q0;
  int nq;
};

// One request's part of a tile: queries [begin, end) of request b.
struct Segment {
  int b;
  int begin;
  int end;
  int k_len;
  int pos0;    // position of the request's query 0 (k_len - q_len)
  int q_row0;  // cu_seqlens_q[b]
  int blocks;  // ceil(k_len / 128): ids outside [0, blocks) are ignored
};

__device__ __forceinline__ Segment make_segment(const UnionParams& p, int begin, int tile_end) {
  const std::int32_t* cu = p.attn.cu_seqlens_q;
  int lo = 0, hi = p.batch - 1;  // the last request whose first query is <= begin
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (cu[mid] <= begin) lo = mid;
    else hi = mid - 1;
  }
  Segment s;
  s.b = lo;
  s.begin = begin;
  s.end = min(tile_end, cu[lo + 1]);
  s.k_len = max(p.attn.k_len[lo], 0);
  s.q_row0 = cu[lo];
  s.pos0 = s.k_len - (cu[lo + 1] - cu[lo]);
  s.blocks = (s.k_len + Traits::kBlockN - 1) / Traits::kBlockN;
  return s;
}

// Gathers the tile's Q rows with 16-byte cp.async (the caller commits); padding rows are zero.
__device__ __forceinline__ void load_q(const UnionParams& p, const Tile& t, Traits::Element* sq, int tid) {
  using namespace cute;
  constexpr int kChunks = Traits::kChunksPerRow;
  const auto* gq = static_cast<const Traits::Element*>(p.attn.q);
  Tensor sQ = make_tensor(make_smem_ptr(sq), Traits::SmemLayoutQ{});
  const int rows = t.nq * p.attn.group;
  const int chunk = tid % kChunks;
#pragma unroll
  for (int i = 0; i < Traits::kTileM / Traits::kRowsPerPass; ++i) {
    const int r = i * Traits::kRowsPerPass + tid / kChunks;
    const bool valid = r < rows;
    std::int64_t off = chunk * Traits::kChunkElems;
    if (valid) {
      const int qi = r / p.attn.group;
      const int h = t.kv_head * p.attn.group + (r - qi * p.attn.group);
      off += std::int64_t(t.q0 + qi) * p.attn.stride_q_token + std::int64_t(h) * p.attn.stride_q_head;
    }
    cp_async_16(&sQ(r, chunk * Traits::kChunkElems), gq + off, valid);
  }
}

// Row facts of the segment in shared memory (published by build_union's last barrier): per M
// row its tile query (-1: padding or another segment's) and that query's position.
__device__ __forceinline__ void write_row_facts(const UnionParams& p, const Tile& t, const Segment& s,
                                                SharedStorage& smem, int tid) {
  if (tid >= Traits::kTileM) return;
  const int i = tid / p.attn.group;
  const int qg = t.q0 + i;
  const bool mine = i < t.nq && qg >= s.begin && qg < s.end;
  smem.row_query[tid] = mine ? i : -1;
  smem.row_pos[tid] = s.pos0 + (qg - s.q_row0);
}

// The union of the segment's selections into smem.blocks[0, union_size), first-seen order
// (query-major, slot order: deterministic), and for each union block the bit mask of the tile
// queries that selected it. Ids outside [0, blocks) and repeats are ignored. Entry e of the
// segment is (query e / topk, slot e % topk); thread t owns entries 2t and 2t + 1 (the block
// scan's blocked arrangement). Also writes the segment's row facts. Ends with a barrier: the
// union and the row facts are visible to all threads.
__device__ __forceinline__ void build_union(const UnionParams& p, const Tile& t, const Segment& s,
                                            SharedStorage& smem, BlockScan::TempStorage& scan_temp,
                                            int tid) {
  const int topk = p.attn.topk;
  const int n = (s.end - s.begin) * topk;
  const std::int32_t* g_ids = p.topk + std::int64_t(t.kv_head) * p.stride_topk_head;
  int e2[2] = {2 * tid, 2 * tid + 1};
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int e = e2[j];
    if (e >= kMaxEntries) continue;
    int id = -1;
    if (e < n) {
      id = g_ids[std::int64_t(s.begin + e / topk) * p.stride_topk_token + e % topk];
      if (id < 0 || id >= s.blocks) id = -1;
    }
    smem.ids[e] = id;
  }
  __syncthreads();
  int is_first[2], rank[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int e = e2[j];
    int f = -1;
    if (e < n && smem.ids[e] >= 0) {
      const int id = smem.ids[e];
      f = e;
      for (int k = 0; k < e; ++k)
        if (smem.ids[k] == id) { f = k; break; }
    }
    if (e < kMaxEntries) smem.first[e] = f;
    is_first[j] = f >= 0 && f == e;
  }
  int total = 0;
  BlockScan(scan_temp).ExclusiveSum(is_first, rank, total);
#pragma unroll
  for (int j = 0; j < 2; ++j)
    if (is_first[j]) {
      smem.rank[e2[j]] = rank[j];
      smem.blocks[rank[j]] = smem.ids[e2[j]];
      smem.members[rank[j]] = 0u;
    }
  if (tid == 0) smem.union_size = total;
  write_row_facts(p, t, s, smem, tid);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int e = e2[j];
    if (e < n && smem.first[e] >= 0)
      atomicOr(&smem.members[smem.rank[smem.first[e]]], 1u << (s.begin - t.q0 + e / topk));
  }
  __syncthreads();
}

// Online softmax state of this thread's two rows: running max (already times scale_log2;
// -inf before any visible key) and this thread's part of the running sum (the quad's four
// parts add up in the epilogue; every lane of a quad applies the same rescale factors).
struct SoftmaxState {
  float m[2];
  float l[2];
};

// Masks S for union block (block_start, tokens, members), folds it into the running state,
// rescales O and writes P (bf16) into the P V operand fragment.
template <class AccS, class FragP, class AccO>
__device__ __forceinline__ void softmax_online(AccS& acc_s, FragP& frag_p, AccO& acc_o, const SharedStorage& smem,
                                               int block_start, int tokens, std::uint32_t members,
                                               float scale_log2, SoftmaxState& st, int tid) {
  using namespace cute;
  typename Traits::MmaQK mma;
  auto thr = mma.get_slice(tid);
  Tensor tScS = thr.partition_C(make_identity_tensor(Shape<Int<Traits::kTileM>, Int<Traits::kBlockN>>{}));
  int key_limit[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = get<0>(tScS(2 * half));
    const int query = smem.row_query[r];
    const bool selected = query >= 0 && ((members >> query) & 1u);
    key_limit[half] = selected ? max(0, min(tokens, smem.row_pos[r] - block_start + 1)) : 0;
  }
  if (!__all_sync(0xffffffffu, key_limit[0] == Traits::kBlockN && key_limit[1] == Traits::kBlockN)) {
#pragma unroll
    for (int i = 0; i < size(acc_s); ++i)
      if (get<1>(tScS(i)) >= key_limit[(i >> 1) & 1]) acc_s(i) = -INFINITY;
  }
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
  // Rescale O first: P then takes S's registers as S is consumed.
#pragma unroll
  for (int i = 0; i < size(acc_o); ++i) acc_o(i) *= alpha[(i >> 1) & 1];
#pragma unroll
  for (int i = 0; i < size(acc_s); ++i) {
    const int half = (i >> 1) & 1;
    const float e = fast_exp2(fmaf(acc_s(i), scale_log2, -m_use[half]));
    sum[half] += e;
    frag_p(i) = static_cast<Traits::Element>(e);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) st.l[half] = st.l[half] * alpha[half] + sum[half];
}

}  // namespace msa::cuda::union_sm90
