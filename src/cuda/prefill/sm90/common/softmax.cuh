// The masked softmax of one S tile (this consumer thread's two rows, base 2) in its two
// variants: one pass over a single block (block_major/: the block is the whole row) and the
// online update across a tile's union blocks (tile_union/). Both write P in the instance's
// 16-bit type into the P V operand.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

#include "cuda/common/ptx.cuh"
#include "cuda/prefill/sm90/common/kv_ring.cuh"
#include "cuda/prefill/sm90/common/traits.h"

namespace msa::cuda::prefill_sm90 {

// Sets S to -inf past each row's visible keys (key_limit per row half: keys [0, limit) of the
// block) and on the 16-token chunks of invalid pages (`chunks`, block_chunks()). A warp whose
// rows each see the whole block or none of it (limit 128 or 0: every block but a row's causal
// one and a request's last; in the tile-union kernel also a row that did not choose the block)
// skips the selects when the block lies wholly below k_len (`block_whole`, warp-uniform) on
// valid pages: the callers take a row of limit 0 as empty from the limit itself (row_max,
// exponent_reference), which gives the masked values' results bit for bit, -inf and 0, while S
// is finite. Keys past k_len may hold anything (stale cache memory), NaN included, which only a
// select keeps out of P; hence the condition on the block (docs/numerics.md).
// Value i of the m64nNk16 accumulator is column 8 * (i / 4) + (i & 1) + 2 * (lane % 4): the
// constant part is compared with the limit less the lane's part, so that no per-value column is
// kept in a register, and its 16-token chunk is i / 8 whatever the lane.
__device__ __forceinline__ bool whole_or_none(int limit) { return limit == kBlockSize || limit <= 0; }
template <class AccS>
__device__ __forceinline__ void mask_keys(AccS& acc_s, const int (&key_limit)[2], std::uint32_t chunks,
                                          bool block_whole, int ct) {
  if (block_whole && chunks == kAllChunks &&
      __all_sync(0xffffffffu, whole_or_none(key_limit[0]) && whole_or_none(key_limit[1])))
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

// This thread's part of each row half's maximum of the masked S; -inf for a row that sees no
// key of the block (mask_keys may have left its values unmasked).
template <class AccS>
__device__ __forceinline__ void row_max(const AccS& acc_s, const int (&key_limit)[2], float (&mx)[2]) {
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int i = 0; i < cute::size(acc_s); ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], acc_s(i));
#pragma unroll
  for (int half = 0; half < 2; ++half)
    if (key_limit[half] <= 0) mx[half] = -INFINITY;
}

// The reference exponentiate() subtracts for a row: +inf where the row sees no key of the block
// (its P is then exp2(-inf) = 0 whether or not mask_keys masked its values), else `m`.
__device__ __forceinline__ float exponent_reference(int key_limit, float m) { return key_limit <= 0 ? INFINITY : m; }

// P = exp2(s * scale_log2 - m) into `p` (the P V operand, or S itself: value i is read before
// it is written); returns this thread's part of each row half's sum.
template <class AccS, class FragP>
__device__ __forceinline__ void exponentiate(const AccS& acc_s, FragP& p, float scale_log2, const float (&m)[2],
                                             float (&sum)[2]) {
  using Element = typename FragP::value_type;
  sum[0] = sum[1] = 0.f;
#pragma unroll
  for (int i = 0; i < cute::size(acc_s); ++i) {
    const int half = (i >> 1) & 1;
    const float e = fast_exp2(fmaf(acc_s(i), scale_log2, -m[half]));
    sum[half] += e;
    p(i) = static_cast<Element>(e);
  }
}

// One-pass softmax of a whole row's single block: masks S and writes P; per row half returns
// m_scaled (max * scale_log2, 0 for an empty row) and this thread's part of the row sum (the
// quad's four parts add up in the epilogue).
template <class AccS, class FragP>
__device__ __forceinline__ void softmax_one_pass(AccS& acc_s, FragP& frag_p, const int (&key_limit)[2],
                                                 std::uint32_t chunks, bool block_whole, float scale_log2, int ct,
                                                 float (&m_scaled)[2], float (&row_sum)[2]) {
  mask_keys(acc_s, key_limit, chunks, block_whole, ct);
  float mx[2], m_use[2];
  row_max(acc_s, key_limit, mx);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    mx[half] = quad_max(mx[half]);
    // An empty row keeps every s = -inf; subtracting 0 keeps exp2 at 0 instead of NaN.
    m_scaled[half] = mx[half] == -INFINITY ? 0.f : mx[half] * scale_log2;
    m_use[half] = exponent_reference(key_limit[half], m_scaled[half]);
  }
  exponentiate(acc_s, frag_p, scale_log2, m_use, row_sum);
}

// Online softmax state of this thread's two rows: the reference max P is taken against
// (times scale_log2; -inf before any visible key) and this thread's part of the running sum
// (every lane of a quad applies the same rescale factors). The reference trails the row's true
// running max by at most kMaxLag where a block's maximum is taken, and by at most 15 (kHotSum,
// below) in settled warps, so P <= 2^15: O / l and m + log2(l) are those of the true max, with
// rescales only when a block raises the max by more than that.
struct SoftmaxState {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};
};
constexpr float kMaxLag = 8.f;  // base 2; P and l stay far from FP32's and the 16-bit P's range

// The online update in two halves, so that a warpgroup's P(u-1) V(u-1) may still run on the
// tensor cores while the softmax of S(u) runs. softmax_fold masks S, folds it into the running
// state and leaves P = exp2(s * scale_log2 - m) in S's registers (FP32), with alpha per row half,
// the factor on the O accumulated so far; it touches neither O nor the P V operand, and returns
// whether any row of the warp moved its reference (else alpha is 1 throughout). Once that P V
// has completed, softmax_settle finishes a settled warp's fold (below), and softmax_apply
// rescales O by alpha (if so) and writes P into the operand.
// Skipping the rescale when no row moved ran tile-shared 8k 1.3% faster than rescaling every
// block (docs/performance.md step 60).
//
// Settled warps take no maximum. Once every row of a warp that sees a key of the block has a
// reference, P is taken against it as it stands, and the row maximum (64 FMNMX, the quad's
// shuffles and a vote a warp and block: 16% of the consumers' instructions, step 92) is taken
// only where a part of a row sum passes kHotSum, which every P of a part otherwise stays below.
// There the row's reference moves up by the whole power of two of its largest P, which scales P,
// the row sum and O exactly (rescale_hot); a P that overflowed (a score 128 or more above the
// reference) is recomputed from S (`recompute_s`) and takes the maximum. Any reference is exact
// for the online softmax as long as P stays finite: P <= kHotSum keeps P, l and O far from the
// range of FP32 and of the 16-bit P, and a reference is never above the row's running maximum
// (it is a block maximum, or the whole power of two below a P), so no key the row weighs falls
// out of range below it. The check on the row sums waits until P(u-1) V(u-1) has completed
// (softmax_settle, just before softmax_apply): taken right after the exponentials, the vote
// waited on the sums' FADD chains and ran G = 1 S = 6000-8k 1.0-1.4% slower
// (docs/performance.md step 93).

// The reference P is taken against in a row half: +inf where the row sees no key of the block
// (P = 0), its reference otherwise (0 before any visible key: exp2(-inf) = 0, never NaN).
__device__ __forceinline__ float row_reference(int key_limit, float m) {
  return exponent_reference(key_limit, m == -INFINITY ? 0.f : m);
}

// The lazy update with the block's row maximum (masked S in acc_s).
template <class AccS>
__device__ __forceinline__ bool fold_exact(AccS& acc_s, const int (&key_limit)[2], float scale_log2, SoftmaxState& st,
                                           float (&alpha)[2]) {
  float mx[2];
  row_max(acc_s, key_limit, mx);
  float m_blk[2];
  bool move[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    m_blk[half] = quad_max(mx[half]) * scale_log2;
    move[half] = m_blk[half] > st.m[half] + kMaxLag;  // a wholly masked block (-inf) never moves
  }
  const bool rescale = __any_sync(0xffffffffu, move[0] || move[1]);
  alpha[0] = alpha[1] = 1.f;
  if (rescale) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (move[half]) {
        alpha[half] = fast_exp2(st.m[half] - m_blk[half]);  // 0 while the row was empty
        st.m[half] = m_blk[half];
      }
    }
  }
  float m_use[2], sum[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) m_use[half] = row_reference(key_limit[half], st.m[half]);
  exponentiate(acc_s, acc_s, scale_log2, m_use, sum);
#pragma unroll
  for (int half = 0; half < 2; ++half) st.l[half] = st.l[half] * alpha[half] + sum[half];
  return rescale;
}

// A part of a row sum past kHotSum, 2^15, says a P may have passed it. Far above the parts of a
// row whose scores stay below its reference plus the lazy lag (kMaxLag: at most 32 * 2^8), and
// below FP16's largest value (65504), which a P of the FP16 instances must not pass.
constexpr float kHotSum = 32768.f;

// A settled warp whose P passed kHotSum somewhere (acc_s holds P, `sum` this thread's parts of
// the row sums): where every P is finite, each row whose largest P passed 2^kMaxLag moves its
// reference up by k, that P's binary exponent, and P, its sum and (through alpha) O are scaled by
// 2^-k, exactly; returns false where some P overflowed (acc_s then holds nothing of use).
template <class AccS>
__device__ __forceinline__ bool rescale_hot(AccS& acc_s, SoftmaxState& st, float (&alpha)[2], const float (&sum)[2],
                                            bool& moved) {
  float mx[2] = {0.f, 0.f};  // the largest P of each row half (P >= 0; 0 where the row sees no key)
#pragma unroll
  for (int i = 0; i < cute::size(acc_s); ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], acc_s(i));
#pragma unroll
  for (int half = 0; half < 2; ++half) mx[half] = quad_max(mx[half]);
  if (!__all_sync(0xffffffffu, isfinite(mx[0]) && isfinite(mx[1]))) return false;
  constexpr float kLagP = 256.f;  // 2^kMaxLag
  static_assert(kMaxLag == 8.f, "kLagP is 2^kMaxLag");
  bool move[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    move[half] = mx[half] > kLagP;
    // k: the binary exponent of mx (normal, in [2^8, 2^128)), at most 126 so that 2^-k is normal.
    const int k = move[half] ? min((__float_as_int(mx[half]) >> 23) - 127, 126) : 0;
    alpha[half] = __int_as_float((127 - k) << 23);  // 2^-k
    if (move[half]) st.m[half] += static_cast<float>(k);
  }
#pragma unroll
  for (int i = 0; i < cute::size(acc_s); ++i) acc_s(i) *= alpha[(i >> 1) & 1];
#pragma unroll
  for (int half = 0; half < 2; ++half) st.l[half] = st.l[half] * alpha[half] + sum[half] * alpha[half];
  moved = __any_sync(0xffffffffu, move[0] || move[1]);
  return true;
}

// A settled warp's block between softmax_fold and softmax_settle: this thread's parts of the
// row sums, held until P V(u - 1) has completed so that their check does not wait on them.
struct FoldPending {
  bool settled = false;  // warp-uniform: P taken against the references; its sums unchecked
  float sum[2] = {0.f, 0.f};
};

// Masks S and folds it into the state (alpha, returns whether O needs it). kSettle false: every
// block takes its maximum (the decode's skipping instances, whose several inlined phase shapes
// ptxas serialised with the settled path's branches: C7520). A settled warp leaves P in acc_s,
// alpha 1 and its sums in `pend` for softmax_settle.
template <bool kSettle, class AccS>
__device__ __forceinline__ bool softmax_fold(AccS& acc_s, const int (&key_limit)[2], std::uint32_t chunks,
                                             bool block_whole, float scale_log2, SoftmaxState& st, int ct,
                                             float (&alpha)[2], FoldPending& pend) {
  mask_keys(acc_s, key_limit, chunks, block_whole, ct);
  pend.settled = false;
  if constexpr (!kSettle) return fold_exact(acc_s, key_limit, scale_log2, st, alpha);
  // A row that sees a key of the block and has no reference yet needs the maximum.
  const bool unsettled = (key_limit[0] > 0 && st.m[0] == -INFINITY) || (key_limit[1] > 0 && st.m[1] == -INFINITY);
  if (!__any_sync(0xffffffffu, unsettled)) {
    float m_use[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) m_use[half] = row_reference(key_limit[half], st.m[half]);
    exponentiate(acc_s, acc_s, scale_log2, m_use, pend.sum);
    alpha[0] = alpha[1] = 1.f;
    pend.settled = true;
    return false;
  }
  return fold_exact(acc_s, key_limit, scale_log2, st, alpha);
}

// The settled block's check, before softmax_apply: its sums join the state where every part
// stays below kHotSum; otherwise rescale_hot, or where a P overflowed, S again
// (recompute_s(acc_s): this thread's accumulator values, unmasked) and the block's maximum.
template <bool kSettle, class AccS, class Recompute>
__device__ __forceinline__ bool softmax_settle(AccS& acc_s, const int (&key_limit)[2], std::uint32_t chunks,
                                               bool block_whole, float scale_log2, SoftmaxState& st, int ct,
                                               float (&alpha)[2], bool rescale, const FoldPending& pend,
                                               const Recompute& recompute_s) {
  if constexpr (!kSettle) return rescale;
  if (!pend.settled) return rescale;
  if (__all_sync(0xffffffffu, pend.sum[0] <= kHotSum && pend.sum[1] <= kHotSum)) {  // false for inf
#pragma unroll
    for (int half = 0; half < 2; ++half) st.l[half] += pend.sum[half];
    return false;
  }
  bool moved = false;
  if (rescale_hot(acc_s, st, alpha, pend.sum, moved)) return moved;
  recompute_s(acc_s);  // rare: a score 128 or more above its row's reference
  mask_keys(acc_s, key_limit, chunks, block_whole, ct);
  return fold_exact(acc_s, key_limit, scale_log2, st, alpha);
}

template <class AccS, class FragP, class AccO>
__device__ __forceinline__ void softmax_apply(const AccS& acc_s, FragP& frag_p, AccO& acc_o, const float (&alpha)[2],
                                              bool rescale) {
  using Element = typename FragP::value_type;
  if (rescale) {
#pragma unroll
    for (int i = 0; i < cute::size(acc_o); ++i) acc_o(i) *= alpha[(i >> 1) & 1];
  }
#pragma unroll
  for (int i = 0; i < cute::size(acc_s); ++i) frag_p(i) = static_cast<Element>(acc_s(i));
}

}  // namespace msa::cuda::prefill_sm90
