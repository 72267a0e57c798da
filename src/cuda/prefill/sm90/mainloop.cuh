// Mainloop pieces of the sm_90a sparse prefill kernels: thin PTX helpers, the K/V block load
// (TMA), the WGMMA issue of S = Q K^T and O += P V, and the KV-block-major kernel's own roles:
// the Q tile preparation (row facts from the plan, one TMA box per query) and the one-pass
// softmax of one block. The tile-union kernel (../union_sm90) reuses the shared pieces.
//
// A work item is one KV block of one KV head and up to q_per_item of the queries that chose
// it; its rows are the queries' G heads, packed query-major (row R = query R / G, head R % G)
// and cut into M tiles of 128 rows. A step is one M tile against the item's block.
#pragma once

#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/prefill/sm90/config.h"
#include "cuda/prefill/sm90/params.h"

namespace msa::cuda::prefill_sm90 {

using Barrier64 = cutlass::arch::ClusterTransactionBarrier;
using Element = TmaTraits::Element;

constexpr std::uint32_t kBlockBytes = TmaTraits::kBlockN * TmaTraits::kHeadDim * sizeof(Element);  // one K or V block

// ---- thin PTX helpers ------------------------------------------------------------------

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// 2^x with ex2.approx (exp2(-inf) = +0, which the masking relies on).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
// threadIdx.x, opaque to the compiler: values derived from it are recomputed where used
// instead of being hoisted out of a persistent loop and kept live (or spilled) across it.
__device__ __forceinline__ int opaque_tid() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return tid;
}
// Parity of the phase a 2-deep ring or buffer pair is in at its use-th use (counts wrap).
__device__ __forceinline__ std::uint32_t phase_of(std::uint32_t use) { return (use >> 1) & 1u; }

// ---- K/V blocks with TMA ----------------------------------------------------------------

// Issues the TMA boxes of one K or V block (tokens [block_start, block_start + 128) of request
// b) into `dst`, completing on `bar`: lane j issues page j (paged) or lane 0 the whole block
// (flat). Pages wholly past k_len are addressed out of bounds, which TMA fills with zeros
// without reading. The caller armed `bar` with kBlockBytes.
__device__ __forceinline__ void load_block(const PrefillParams& p, const CUtensorMap* map, int box_rows, int kv_head,
                                           int b, int block_start, int k_len, Element* dst, std::uint64_t* bar,
                                           int lane) {
  const int pages = TmaTraits::kBlockN / box_rows;
  if (lane >= pages) return;
  const int t0 = lane * box_rows;
  int token, page;
  if (p.page_table != nullptr) {
    const int logical = block_start + t0;
    const int col = logical / box_rows;
    token = 0;
    // Ids outside [0, num_pages) address out of bounds too: zeros, never another's memory.
    page = logical < k_len && col < p.page_table_cols
               ? p.page_table[std::int64_t(b) * p.stride_page_table + col]
               : static_cast<int>(min(p.num_pages, std::int64_t(INT32_MAX)));
  } else {
    token = p.cu_seqlens_k[b] + block_start;
    page = 0;
  }
#pragma unroll
  for (int c = 0; c < TmaTraits::kColHalves; ++c)
    cute::SM90_TMA_LOAD_4D::copy(map, bar, static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_LAST),
                                 dst + TmaTraits::kv_box_offset(t0, c), c * TmaTraits::kBoxCols, token, kv_head, page);
}

// Tokens of a block are visible only on valid pages (docs/numerics.md): bit c of the result
// says that tokens [16c, 16c + 16) lie on a page-table entry inside the table and in
// [0, num_pages). Tokens past k_len count as valid (the key limits hide them). Flat K/V: all.
constexpr std::uint32_t kAllChunks = (1u << (TmaTraits::kBlockN / 16)) - 1u;

__device__ __forceinline__ std::uint32_t block_chunks(const PrefillParams& p, int b, int block_start, int k_len) {
  if (p.page_table == nullptr) return kAllChunks;
  std::uint32_t mask = 0;
  const int per_page = p.page_size / 16;
  for (int t0 = 0; t0 < TmaTraits::kBlockN; t0 += p.page_size) {
    const int logical = block_start + t0;
    const int col = logical / p.page_size;
    bool valid = logical >= k_len;
    if (!valid && col < p.page_table_cols) {
      const int page = p.page_table[std::int64_t(b) * p.stride_page_table + col];
      valid = page >= 0 && page < p.num_pages;
    }
    if (valid) mask |= ((1u << per_page) - 1u) << (t0 / 16);
  }
  return mask;
}

// Zeroes token rows [tokens, 128) of a K-layout block (whole 128-byte rows, so the swizzle
// does not matter) and makes the writes visible to the async proxy. One warp.
__device__ __forceinline__ void zero_tail(Element* dst, int tokens, int lane) {
  constexpr int kChunks = 128 / 16;  // 16-byte chunks per 128-byte row
  const int count = (TmaTraits::kBlockN - tokens) * TmaTraits::kColHalves * kChunks;
  for (int i = lane; i < count; i += 32) {
    const int row = tokens + i / (TmaTraits::kColHalves * kChunks);
    const int c = (i / kChunks) % TmaTraits::kColHalves;
    const int chunk = i % kChunks;
    *reinterpret_cast<uint4*>(dst + TmaTraits::kv_box_offset(row, c) + chunk * (16 / sizeof(Element))) =
        make_uint4(0u, 0u, 0u, 0u);
  }
  cutlass::arch::fence_view_async_shared();
}

// The K/V ring's barriers (either kernel's SharedStorage); one thread, before the CTA barrier.
template <class Smem>
__device__ __forceinline__ void init_kv_ring(Smem& smem) {
  for (int i = 0; i < kStages; ++i) {
    Barrier64::init(&smem.k_full[i], 1);
    Barrier64::init(&smem.v_full[i], 1);
    Barrier64::init(&smem.k_empty[i], kConsumerThreads);
    Barrier64::init(&smem.v_empty[i], kConsumerThreads);
  }
  Barrier64::init(&smem.v_tail, 1);
}

// The two consumer warpgroups' turn to issue WGMMAs (named barriers kTurn0 + wg): sync()
// waits for this warpgroup's turn, pass() hands it to the other. Warpgroup 1 passes once at
// the start (warpgroup 0 issues first) and warpgroup 0 takes that last pass at the end.
struct Turn {
  int wg;
  __device__ __forceinline__ void sync() const { named_barrier_sync(kTurn0 + wg, kConsumerThreads); }
  __device__ __forceinline__ void pass() const { named_barrier_arrive(kTurn0 + (wg ^ 1), kConsumerThreads); }
  __device__ __forceinline__ void start() const {
    if (wg == 1) pass();
  }
  __device__ __forceinline__ void finish() const {
    if (wg == 0) sync();
  }
};

// Loads one block's K and V (tokens [block_start, block_start + 128) of request b, KV head
// kv_head) into stage use & 1 of a 2-stage ring, after waiting for the stage to be free. Smem is
// either kernel's SharedStorage (k, v, k_full, k_empty, v_full, v_empty, v_tail). A block
// that ends past k_len has its V rows there zeroed before v_full completes: its V goes through
// the loader's own v_tail barrier first. One warp; tail_phase is v_tail's parity.
template <class Smem>
__device__ __forceinline__ void load_kv_stage(const PrefillParams& p, const PrefillTma& tma, Smem& smem,
                                              std::uint32_t use, int kv_head, int b, int block_start, int k_len,
                                              std::uint32_t& tail_phase, int lane) {
  const int s = static_cast<int>(use & 1u);
  Barrier64::wait(&smem.k_empty[s], phase_of(use) ^ 1u);
  if (lane == 0) Barrier64::arrive_and_expect_tx(&smem.k_full[s], kBlockBytes);
  __syncwarp();
  load_block(p, &tma.k, tma.kv_box_rows, kv_head, b, block_start, k_len, smem.k[s], &smem.k_full[s], lane);
  Barrier64::wait(&smem.v_empty[s], phase_of(use) ^ 1u);
  // A whole block below k_len. Tested on the unclamped distance: written as "the token count
  // clamped to [0, 128] equals 128", the block-major loader took this branch for partial
  // blocks too (a debug build saw the right count and the zero-fill not run), which the
  // NaN-tail tests caught.
  if (k_len - block_start >= TmaTraits::kBlockN) {
    if (lane == 0) Barrier64::arrive_and_expect_tx(&smem.v_full[s], kBlockBytes);
    __syncwarp();
    load_block(p, &tma.v, tma.kv_box_rows, kv_head, b, block_start, k_len, smem.v[s], &smem.v_full[s], lane);
  } else {
    if (lane == 0) Barrier64::arrive_and_expect_tx(&smem.v_tail, kBlockBytes);
    __syncwarp();
    load_block(p, &tma.v, tma.kv_box_rows, kv_head, b, block_start, k_len, smem.v[s], &smem.v_tail, lane);
    Barrier64::wait(&smem.v_tail, tail_phase);
    tail_phase ^= 1u;
    zero_tail(smem.v[s], max(0, k_len - block_start), lane);
    __syncwarp();
    if (lane == 0) Barrier64::arrive(&smem.v_full[s]);
  }
}

// ---- WGMMA issue (the caller fences, arrives and commits) -------------------------------

// S = Q K^T for this consumer warpgroup's 64 rows (ct: consumer thread 0..255).
template <class AccS>
__device__ __forceinline__ void issue_qk(const Element* sq, const Element* sk, int ct, AccS& acc_s) {
  using namespace cute;
  typename TmaTraits::MmaQK mma;
  auto thr = mma.get_slice(ct);
  Tensor sQ = make_tensor(make_smem_ptr(sq), TmaTraits::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(sk), TmaTraits::SmemLayoutK{});
  Tensor tSrQ = thr.partition_fragment_A(sQ);
  Tensor tSrK = thr.partition_fragment_B(sK);
  mma.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
  for (int k = 0; k < size<2>(tSrQ); ++k) {
    gemm(mma, tSrQ(_, _, k), tSrK(_, _, k), acc_s);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
}

// O += P V (kAccumulate) or O = P V for this consumer warpgroup's 64 rows.
template <bool kAccumulate, class FragP, class AccO>
__device__ __forceinline__ void issue_pv(FragP& frag_p, const Element* sv, int ct, AccO& acc_o) {
  using namespace cute;
  typename TmaTraits::MmaPV mma;
  auto thr = mma.get_slice(ct);
  Tensor sV = make_tensor(make_smem_ptr(sv), TmaTraits::SmemLayoutV{});
  Tensor tOrV = thr.partition_fragment_B(sV);
  static_assert(decltype(size<2>(tOrV))::value == decltype(size<2>(frag_p))::value);
  mma.accumulate_ = kAccumulate ? GMMA::ScaleOut::One : GMMA::ScaleOut::Zero;
#pragma unroll
  for (int k = 0; k < size<2>(tOrV); ++k) {
    gemm(mma, frag_p(_, _, k), tOrV(_, _, k), acc_o);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
}

// Register fragment of P as the RS WGMMA's A operand. For 16-bit A the m64k16 register
// layout ((2,2,2) values: k+1, row+8, k+8) equals two consecutive n8 groups of the S
// accumulator, so value i of S (column-major ((2,2,N/8))) is value i of this
// ((2,2,2), 1, N/16) fragment and the conversion is a plain element-wise cast.
__device__ __forceinline__ auto make_frag_p() {
  using namespace cute;
  return make_tensor<Element>(Layout<Shape<Shape<_2, _2, _2>, _1, Int<TmaTraits::kBlockN / 16>>>{});
}

// Sets S to -inf past each row's visible keys (key_limit per row half: keys [0, limit) of the
// block) and on the 16-token chunks of invalid pages (`chunks`, block_chunks()); a warp whose
// rows all see the whole block of valid pages skips it. Value i of the m64nNk16 accumulator is
// column 8 * (i / 4) + (i & 1) + 2 * (lane % 4): the constant part is compared with the limit
// less the lane's part, so that no per-value column is kept in a register, and its 16-token
// chunk is i / 8 whatever the lane.
template <class AccS>
__device__ __forceinline__ void mask_keys(AccS& acc_s, const int (&key_limit)[2], std::uint32_t chunks, int ct) {
  if (__all_sync(0xffffffffu, key_limit[0] == TmaTraits::kBlockN && key_limit[1] == TmaTraits::kBlockN) &&
      chunks == kAllChunks)
    return;
  const int lane_col = 2 * (ct % 4);
  const int lim[2] = {key_limit[0] - lane_col, key_limit[1] - lane_col};
  if (chunks == kAllChunks) {
#pragma unroll
    for (int i = 0; i < cute::size(acc_s); ++i)
      if (8 * (i >> 2) + (i & 1) >= lim[(i >> 1) & 1]) acc_s(i) = -INFINITY;
  } else {  // rare: a page-table entry out of range (one loop for both measured 3% slower)
#pragma unroll
    for (int i = 0; i < cute::size(acc_s); ++i)
      if (8 * (i >> 2) + (i & 1) >= lim[(i >> 1) & 1] || !((chunks >> (i >> 3)) & 1u)) acc_s(i) = -INFINITY;
  }
}

// ---- the KV-block-major kernel's roles -------------------------------------------------

// Everything about a work item that every role needs, read once from the plan.
struct ItemCoords {
  int kv_head;
  int b;               // request
  int block_start;     // block * 128: first token of the block
  int k_len;           // the request's k_len
  int tokens;          // tokens of the block below k_len, 0..128 (the rest is zero-filled)
  int rows;            // packed (query, head) rows = q_count * group
  int q_row0;          // cu_seqlens_q[b]: global row of request-local query 0
  int pos0;            // k_len - q_len: position of request-local query 0
  std::int64_t edge0;  // kv_head * edges_per_head + q_begin: first qsplit entry
};

__device__ __forceinline__ ItemCoords load_item(const PrefillParams& p, int item) {
  const std::int32_t* w = p.work + std::int64_t(item) * 6;
  ItemCoords it;
  it.kv_head = w[0];
  const int q_begin = w[2];
  const int q_count = w[3];
  it.b = w[4];
  it.block_start = w[5] * TmaTraits::kBlockN;
  it.k_len = p.k_len[it.b];
  it.tokens = max(0, min(TmaTraits::kBlockN, it.k_len - it.block_start));
  it.rows = q_count * p.group;
  it.q_row0 = p.cu_seqlens_q[it.b];
  it.pos0 = it.k_len - (p.cu_seqlens_q[it.b + 1] - it.q_row0);
  it.edge0 = std::int64_t(it.kv_head) * p.edges_per_head + q_begin;
  return it;
}

// M tiles of an item.
__device__ __forceinline__ int item_tiles(const ItemCoords& it) {
  return max(1, (it.rows + TmaTraits::kTileM - 1) / TmaTraits::kTileM);
}

// The qsplit word of packed row `packed` of the item (0 for a padding row): loaded a step
// ahead by the builders, so that its latency hides behind the wait for a free Q buffer.
__device__ __forceinline__ std::uint32_t row_qsplit(const PrefillParams& p, const ItemCoords& it, int packed) {
  return packed < it.rows ? static_cast<std::uint32_t>(p.qsplit[it.edge0 + packed / p.group]) : 0u;
}

// Writes the facts of packed row `packed` (tile row r) into `rows` and, for the first row of
// a query's box, issues that box's TMA loads (both column halves) into `sq`, completing on
// `bar`. Padding rows get qg = -1 and no data (their results are never stored).
__device__ __forceinline__ void prepare_row(const PrefillParams& p, const PrefillTma& tma, const ItemCoords& it,
                                            int packed, int r, std::uint32_t qsplit, Element* sq, RowInfo* rows,
                                            std::uint64_t* bar) {
  if (packed >= it.rows) {
    rows[r] = RowInfo{-1, 0, 0, 0};
    return;
  }
  const int qi = packed / p.group;
  const int h = it.kv_head * p.group + (packed - qi * p.group);
  const int q_local = static_cast<int>(qsplit & 0xFFFFFFu);
  const int qg = it.q_row0 + q_local;
  // Visible: t < tokens (below k_len) and block_start + t <= pos (causal).
  const int causal = it.pos0 + q_local - it.block_start + 1;
  // A row outside [0, total_q) (cu_seqlens_q changed on the device since plan()) is padding:
  // its box still loads (TMA zero-fills it, keeping the byte count) but nothing is stored.
  const bool in_range = qg >= 0 && qg < p.total_q;
  rows[r] = RowInfo{in_range ? qg : -1, h, static_cast<int>(qsplit >> 24), max(0, min(it.tokens, causal))};
  if (r % tma.q_box_rows == 0) {
#pragma unroll
    for (int c = 0; c < TmaTraits::kColHalves; ++c)
      cute::SM90_TMA_LOAD_3D::copy(&tma.q, bar, static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL),
                                   sq + TmaTraits::q_box_offset(r, c), c * TmaTraits::kBoxCols, h, qg);
  }
}

// One-pass softmax of this thread's two rows over the block (base 2): masks S, writes
// P = exp2(s * scale_log2 - m) as BF16 into the P V operand; per row half returns m_scaled
// (max * scale_log2, 0 for an empty row) and this thread's part of the row sum (the quad's
// four parts add up in the epilogue).
template <class AccS, class FragP>
__device__ __forceinline__ void softmax_block(AccS& acc_s, FragP& frag_p, const int (&key_limit)[2],
                                              std::uint32_t chunks, float scale_log2, int ct, float (&m_scaled)[2],
                                              float (&row_sum)[2]) {
  mask_keys(acc_s, key_limit, chunks, ct);
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < cute::size(acc_s); ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], acc_s(i));
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    mx[half] = quad_max(mx[half]);
    // An empty row keeps every s = -inf; subtracting 0 keeps exp2 at 0 instead of NaN.
    m_scaled[half] = mx[half] == -INFINITY ? 0.f : mx[half] * scale_log2;
    row_sum[half] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < cute::size(acc_s); ++i) {
    const int half = (i >> 1) & 1;
    const float e = fast_exp2(fmaf(acc_s(i), scale_log2, -m_scaled[half]));
    row_sum[half] += e;
    frag_p(i) = static_cast<Element>(e);
  }
}

}  // namespace msa::cuda::prefill_sm90
