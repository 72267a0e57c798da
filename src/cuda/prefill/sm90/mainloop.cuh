// Mainloop of the sm_90a KV-block-major sparse prefill: loads (K/V block, Q tile gather) and
// the per-M-tile math (S = Q K^T, masked one-pass softmax, O = P V) of one work item.
//
// K/V loads use 16-byte cp.async: a block is 128 tokens that may span 1..8 pages (page size
// 16..128) or a flat varlen range, and tokens past k_len must land as zeros. One code path
// (per-token address, src-size 0 for zero fill) covers every layout with no tensor map per
// cache; a block's load is amortised over all the M tiles of its item. The Q gather, one per
// M tile, uses TMA: one box per query (its G head rows are one strided [G, d] slab), issued by
// one thread, instead of 16-byte copies whose address math every thread repeats per row.
#pragma once

#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/prefill/sm90/config.h"
#include "cuda/prefill/sm90/params.h"

namespace msa::cuda::prefill_sm90 {

// ---- thin PTX helpers ------------------------------------------------------------------

// 16-byte async copy global -> shared; src_bytes = 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const std::uint32_t s = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
// Makes this thread's generic-proxy shared-memory writes (cp.async, st.shared) visible to
// the async proxy (WGMMA operand reads); must precede the barrier that publishes them.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
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

// ---- one work item ---------------------------------------------------------------------

// Everything about a work item that every thread needs, read once from the plan.
struct ItemCoords {
  int kv_head;
  int b;             // request
  int block_start;   // block * 128: first token of the block
  int tokens;        // tokens of the block below k_len, 0..128 (the rest is zero-filled)
  int rows;          // packed (query, head) rows = q_count * group
  int q_row0;        // cu_seqlens_q[b]: global row of request-local query 0
  int pos0;          // k_len - q_len: position of request-local query 0
  std::int64_t edge0;  // kv_head * edges_per_head + q_begin: first qsplit entry
};

__device__ __forceinline__ ItemCoords load_item(const PrefillParams& p, int item) {
  const std::int32_t* w = p.work + std::int64_t(item) * 6;
  ItemCoords it;
  it.kv_head = w[0];
  const int q_begin = w[2];
  const int q_count = w[3];
  it.b = w[4];
  it.block_start = w[5] * 128;
  const int k_len = p.k_len[it.b];
  it.tokens = max(0, min(128, k_len - it.block_start));
  it.rows = q_count * p.group;
  it.q_row0 = p.cu_seqlens_q[it.b];
  it.pos0 = k_len - (p.cu_seqlens_q[it.b + 1] - it.q_row0);
  it.edge0 = std::int64_t(it.kv_head) * p.edges_per_head + q_begin;
  return it;
}

template <class Traits>
struct Mainloop {
  using Element = typename Traits::Element;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kTileM = Traits::kTileM;
  static constexpr int kChunkElems = Traits::kChunkElems;
  static constexpr int kChunksPerRow = Traits::kChunksPerRow;
  static constexpr int kRowsPerPass = Traits::kRowsPerPass;

  // Element offset of KV token t (block-local) of the item in k / v (shared strides).
  static __device__ __forceinline__ std::int64_t kv_token_offset(const PrefillParams& p,
                                                                 const ItemCoords& it, int t) {
    const int token = it.block_start + t;
    if (p.page_table == nullptr)
      return (std::int64_t(p.cu_seqlens_k[it.b]) + token) * p.stride_kv_token +
             std::int64_t(it.kv_head) * p.stride_kv_head;
    // page_size is a power of two (validated on the host).
    const int shift = __ffs(p.page_size) - 1;
    const std::int64_t page = p.page_table[std::int64_t(it.b) * p.stride_page_table + (token >> shift)];
    return page * p.stride_kv_page + std::int64_t(it.kv_head) * p.stride_kv_head +
           std::int64_t(token & (p.page_size - 1)) * p.stride_kv_token;
  }

  // Issues the K (kWhich 0) or V (kWhich 1) block load: 16 threads per token row (256
  // contiguous bytes); tokens at or past k_len are zero-filled so that masked columns
  // multiply finite zeros in P V.
  // kUnroll = false keeps one token's address live at a time (for callers short of registers).
  template <int kWhich, bool kUnroll = true>
  static __device__ __forceinline__ void load_kv(const PrefillParams& p, const ItemCoords& it,
                                                 Element* smem, int tid) {
    using namespace cute;
    const Element* gsrc = static_cast<const Element*>(kWhich == 0 ? p.k : p.v);
    const int chunk = tid % kChunksPerRow;
    Tensor sK = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutK{});
    Tensor sV = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutV{});
#pragma unroll(kUnroll ? kBlockN / kRowsPerPass : 1)
    for (int i = 0; i < kBlockN / kRowsPerPass; ++i) {
      const int t = i * kRowsPerPass + tid / kChunksPerRow;
      const bool valid = t < it.tokens;
      const std::int64_t off = (valid ? kv_token_offset(p, it, t) : 0) + chunk * kChunkElems;
      if constexpr (kWhich == 0)
        cp_async_16(&sK(t, chunk * kChunkElems), gsrc + off, valid);
      else
        cp_async_16(&sV(chunk * kChunkElems, t), gsrc + off, valid);
    }
  }

  // Gathers M tile `tile` of the item into one Q buffer with TMA and records each row's
  // RowInfo. Packed row R = tile * 64 + r is (query R / G, head R % G); thread r < 64 owns row
  // r, and the thread of a box's first row issues that box (box_rows heads of one query, both
  // column halves). Rows past q_count * G get no data (their results are never stored: rows
  // are independent in S, softmax and P V). Thread 0 arms `bar` with the bytes of the real
  // rows; completion before the arm is fine (the transaction count may go negative).
  // Before writing a box a thread waits until its own TMA store of that box from the buffer's
  // previous use has read it (the same thread issues both, see Epilogue::store).
  static __device__ __forceinline__ void load_q_tile(const PrefillParams& p, const PrefillTma& tma,
                                                     const ItemCoords& it, int tile, Element* smem,
                                                     RowInfo* rows, std::uint64_t* bar, int tid) {
    if (tid >= kTileM) return;
    const int r = tid;
    const int packed = tile * kTileM + r;
    RowInfo info{-1, 0, 0, 0};
    if (packed < it.rows) {
      const int qi = packed / p.group;
      const int h = it.kv_head * p.group + (packed - qi * p.group);
      const std::uint32_t v = static_cast<std::uint32_t>(p.qsplit[it.edge0 + qi]);
      const int q_local = static_cast<int>(v & 0xFFFFFFu);
      const int qg = it.q_row0 + q_local;
      // Visible: t < tokens (below k_len) and block_start + t <= pos (causal).
      const int causal = it.pos0 + q_local - it.block_start + 1;
      info = RowInfo{qg, h, static_cast<int>(v >> 24), max(0, min(it.tokens, causal))};
      if (r % tma.box_rows == 0) {
        cute::tma_store_wait<0>();
#pragma unroll
        for (int c = 0; c < Traits::kColHalves; ++c)
          cute::SM90_TMA_LOAD_3D::copy(&tma.q, bar, static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL),
                                       smem + Traits::q_box_offset(r, c), c * Traits::kBoxCols, h, qg);
      }
    }
    rows[r] = info;
    if (tid == 0) {
      const int real = max(0, min(kTileM, it.rows - tile * kTileM));
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(
          bar, static_cast<std::uint32_t>(real * kHeadDim * sizeof(Element)));
    }
  }

  // S = Q K^T for this warpgroup's 64 rows. The WGMMAs run asynchronously while
  // `overlap()` executes (it must not touch acc_s); returns once they have completed.
  template <class AccS, class Overlap>
  static __device__ __forceinline__ void gemm_qk(const Element* sq, const Element* sk, int tid,
                                                 AccS& acc_s, Overlap&& overlap) {
    using namespace cute;
    typename Traits::MmaQK mma;
    auto thr = mma.get_slice(tid);
    Tensor sQ = make_tensor(make_smem_ptr(sq), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(sk), typename Traits::SmemLayoutK{});
    Tensor tSrQ = thr.partition_fragment_A(sQ);  // smem descriptors (V, M, K)
    Tensor tSrK = thr.partition_fragment_B(sK);  // smem descriptors (V, N, K)
    warpgroup_fence_operand(acc_s);
    warpgroup_arrive();
    mma.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
    for (int k = 0; k < size<2>(tSrQ); ++k) {
      gemm(mma, tSrQ(_, _, k), tSrK(_, _, k), acc_s);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    overlap();
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_s);
  }

  // Masks S, takes the one-pass softmax of each row over the block's 128 keys (base 2) and
  // writes P = exp2(s * scale_log2 - m) as BF16 into the PV A-operand fragment.
  // Accumulator fragment (m64nNk16 C layout): value i of a thread is row half (i >> 1) & 1
  // (rows r, r + 8) and column 8 * (i >> 2) + 2 * (lane % 4) + (i & 1); the identity tensor
  // gives the coordinates, the row half drives the per-row reductions.
  // Outputs per row half: m_scaled (max * scale_log2, 0 for an empty row) and the row sum.
  template <class AccS, class FragP>
  static __device__ __forceinline__ void softmax(AccS& acc_s, FragP& frag_p, const RowInfo* rows,
                                                 float scale_log2, int tid, float (&m_scaled)[2],
                                                 float (&row_sum)[2]) {
    using namespace cute;
    typename Traits::MmaQK mma;
    auto thr = mma.get_slice(tid);
    Tensor tScS = thr.partition_C(make_identity_tensor(Shape<Int<kTileM>, Int<kBlockN>>{}));
    static_assert(decltype(size(acc_s))::value == kBlockN / 2);
    int key_limit[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) key_limit[half] = rows[get<0>(tScS(2 * half))].key_limit;

    // Most edges see the whole block (every block but a query's local one and a request's
    // last): the warp skips the mask when all of its rows do.
    if (!__all_sync(0xffffffffu, key_limit[0] == kBlockN && key_limit[1] == kBlockN)) {
#pragma unroll
      for (int i = 0; i < size(acc_s); ++i)
        if (get<1>(tScS(i)) >= key_limit[(i >> 1) & 1]) acc_s(i) = -INFINITY;
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < size(acc_s); ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], acc_s(i));
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      mx[half] = quad_max(mx[half]);
      // An empty row keeps every s = -inf; subtracting 0 keeps exp2 at 0 instead of NaN.
      m_scaled[half] = mx[half] == -INFINITY ? 0.f : mx[half] * scale_log2;
      row_sum[half] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < size(acc_s); ++i) {
      const int half = (i >> 1) & 1;
      const float e = fast_exp2(fmaf(acc_s(i), scale_log2, -m_scaled[half]));
      row_sum[half] += e;
      frag_p(i) = static_cast<Element>(e);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) row_sum[half] = quad_sum(row_sum[half]);
  }

  // O = P V (or O += P V with accumulate) for this warpgroup's 64 rows; returns once the
  // WGMMAs have completed.
  template <class FragP, class AccO>
  static __device__ __forceinline__ void gemm_pv(FragP& frag_p, const Element* sv, int tid,
                                                 AccO& acc_o, bool accumulate = false) {
    using namespace cute;
    typename Traits::MmaPV mma;
    auto thr = mma.get_slice(tid);
    Tensor sV = make_tensor(make_smem_ptr(sv), typename Traits::SmemLayoutV{});
    Tensor tOrV = thr.partition_fragment_B(sV);  // smem descriptors (V, N, K)
    static_assert(decltype(size<2>(tOrV))::value == decltype(size<2>(frag_p))::value);
    warpgroup_fence_operand(frag_p);
    warpgroup_fence_operand(acc_o);
    warpgroup_arrive();
    mma.accumulate_ = accumulate ? GMMA::ScaleOut::One : GMMA::ScaleOut::Zero;
#pragma unroll
    for (int k = 0; k < size<2>(tOrV); ++k) {
      gemm(mma, frag_p(_, _, k), tOrV(_, _, k), acc_o);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc_o);
  }

  // Register fragment of P as the RS WGMMA's A operand. For 16-bit A the m64k16 register
  // layout ((2,2,2) values: k+1, row+8, k+8) equals two consecutive n8 groups of the S
  // accumulator, so value i of S (column-major ((2,2,N/8))) is value i of this
  // ((2,2,2), 1, N/16) fragment and the conversion is a plain element-wise cast.
  static __device__ __forceinline__ auto make_frag_p() {
    using namespace cute;
    return make_tensor<Element>(
        Layout<Shape<Shape<_2, _2, _2>, _1, Int<kBlockN / 16>>>{});
  }
};

}  // namespace msa::cuda::prefill_sm90
