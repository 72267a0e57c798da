// The consumers of the decode's FP8 tile-union instance (Traits::kWarpMma): eight independent
// warps, warp w owning tile rows [16 w, 16 w + 16) (at G = 16 one query's heads). Each walks the
// tile's union in list order and computes only the blocks that a query of its rows chose:
//   S = Q K^T on mma.sync m16n8k16 (fp16 in, fp32 out), K's FP8 codes widened in registers;
//   the online softmax of its 16 rows (base 2, in the registers of the S accumulator);
//   O += P V, V's codes widened in registers likewise.
// A decode block is mostly one query's, so a 64-row WGMMA warpgroup spent three quarters of its
// tensor and softmax work on rows that chose nothing, and widening K / V in shared memory cost a
// round trip and a barrier per block; here neither happens. The ring holds only codes, so it
// is deeper (Traits::kRingStages). Three kernels share this code: the plain one, the one with
// ways (below), and the one that takes each tile's Q from a ring stage of its own and stores O
// from registers (Traits::kQInRing: no Q buffer, a sixth stage instead), where the plan
// expects unions that repeat blocks (tile_union_decode_q_in_ring).
//
// Ways (an in-CTA split): a tile of fewer than 128 rows needs only `groups` = ceil(rows / 16)
// warps; up to 8 / groups `ways` warps per 16-row group (one per 4 entries of the tile's split)
// share that group's blocks (way w computes the group's chosen blocks c with c % ways == w, in
// list order), each with its own softmax state. The ways other than 0 publish O / l (fp16:
// |O / l| is at most the largest V code, 448) and (m, l) of their rows, in the Q buffer's rows
// past the groups' and in `merge_ml`; way 0 merges them and stores the tile. A tile of one request at Q = 1, G = 16
// thus runs its blocks on eight warps instead of one.
//
// Fragments (PTX m16n8k16, lane = 4 g + t): A holds rows g and g + 8, k = 2t, 2t + 1, 2t + 8,
// 2t + 9; B column n = g, the same k; C rows g, g + 8, columns 2t, 2t + 1. The k order of a
// product is free as long as A and B agree, and so is the order of O's columns, so both are
// chosen for contiguous loads:
//   Q K^T, k-step j: logical k = 2t + {0, 1} is d = 32 t + 4 j + {0, 1}, 2t + 8 + {0, 1} is
//     d = 32 t + 4 j + {2, 3}: a thread reads d in [32 t, 32 t + 32) of its Q rows and of key
//     8 i + g of n-tile i (two 16-byte loads, one 32-bit word of four codes per k-step);
//   P V, k-step j (keys 16 j .. 16 j + 15, P from S's n-tiles 2 j and 2 j + 1): B column n of
//     n-tile m is d = 16 n + m, so a thread reads d in [16 g, 16 g + 16) of keys 16 j + 2t,
//     + 1, + 8, + 9 (four 16-byte loads), and holds O at d in [32 t, 32 t + 32) of its rows.
// Every 16-byte load above falls on eight distinct 16-byte bank groups per quarter warp under
// the ring's 128-byte swizzle (chunk c of row r at c ^ (r % 8)).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cutlass/arch/barrier.h>

#include "cuda/common/ptx.cuh"
#include "cuda/prefill/sm90/common/epilogue.cuh"
#include "cuda/prefill/sm90/common/kv_ring.cuh"
#include "cuda/prefill/sm90/tile_union/builder.cuh"
#include "cuda/prefill/sm90/tile_union/config.h"
#include "cuda/prefill/sm90/tile_union/params.h"

namespace msa::cuda::prefill_sm90 {

namespace warp_mma {

// C += A B on one m16n8k16 tile, fp16 operands, fp32 accumulators.
__device__ __forceinline__ void mma_f16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                        std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same with bf16 operands (the tile-union prefill's rare recompute of S, kernel.cuh).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t pack_f16(float lo, float hi) {
  std::uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  std::uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// A bf16 pair times 2^e (f), as an fp16 pair.
__device__ __forceinline__ std::uint32_t bf16x2_to_f16x2(std::uint32_t w, float f) {
  return pack_f16(__uint_as_float(w << 16) * f, __uint_as_float(w & 0xffff0000u) * f);
}

// Four E4M3 codes (byte i = column i) -> two fp16 pairs, exactly (the hardware conversion;
// every E4M3 value is an fp16 value; the NaN codes stay NaN).
__device__ __forceinline__ uint2 widen_e4m3x4_f16(std::uint32_t codes) {
  uint2 out;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n cvt.rn.f16x2.e4m3x2 %1, hi;\n}"
      : "=r"(out.x), "=r"(out.y)
      : "r"(codes));
  return out;
}

__device__ __forceinline__ uint4 load16(const std::uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }

// Byte offset of 16-bit element (r, 8 c) of a [kTileM, 128] tile of two column halves of
// 128-byte swizzled rows (the Q buffer): chunk c (0..15) of row r.
template <class Traits>
__device__ __forceinline__ int q_chunk_offset(int r, int c) {
  return (c / 8) * Traits::kTileM * 128 + r * 128 + (((c % 8) ^ (r % 8)) << 4);
}

}  // namespace warp_mma

// One tile of the consumer warps. kWays (the ways instance, Traits::kWays): the tile's `ways`
// warps per row group share the group's blocks and, when ways > 1, way 0 merges them before the
// epilogue. Else (the other instance) each warp owns its 16 rows alone, in code with nothing of
// the ways: one instance for both measured 3-4% slower where no tile had ways (step 53).
template <bool kWays, class Traits>
__device__ __forceinline__ void warp_tile(const TileUnionParams& p, const PrefillTma& tma,
                                          TileUnionStorage<Traits>& smem, const Tile& t, std::uint32_t iter,
                                          std::uint32_t use, int warp, int lane, int groups, int ways) {
  using namespace warp_mma;
  constexpr int kRing = Traits::kRingStages;
  const int g = lane / 4, tq = lane % 4;
  const int group = p.attn.group;
  const int buf = static_cast<int>(iter & 1u);
  const auto& list = smem.list[buf];
  const int u0 = list.begin;  // the tile's split of the union: entries u0 + [0, n)
  const int n = list.end - u0;
  const int rows = t.nq * group;
  // kWays: the warp's row group and way (see the top), a warp past the last way computing
  // nothing; else warp w alone owns rows [16 w, 16 w + 16).
  const int rg = kWays ? warp % groups : warp, way = kWays ? warp / groups : 0;
  const bool working = !kWays || way < ways;
  const int row[2] = {16 * rg + g, 16 * rg + g + 8};  // this thread's tile rows
  // Each row's tile query: its membership bit (none for padding rows) and position; the
  // warp's queries are those of its 16 rows.
  std::uint32_t row_bit[2];
  int row_pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int qi = row[h] / group;
    row_bit[h] = qi < t.nq && working ? 1u << qi : 0u;
    row_pos[h] = qi < t.nq ? list.q_pos[qi] : 0;
  }
  const std::uint32_t warp_queries = __reduce_or_sync(0xffffffffu, row_bit[0] | row_bit[1]);

  // Q: d in [32 tq, 32 tq + 32) of both rows (4 chunks each), to fp16 times 2^e, e chosen per
  // warp so that the largest finite |q| of its valid rows lies in [2^14, 2^15): no finite value
  // overflows, infinities and NaN stay what they are, and every element down to 2^-24 of that
  // largest is exact (bf16 has 8 significant bits, fp16 11). e = 0 when every finite |q| is 0;
  // e <= 126 keeps 2^e and 2^-e normal floats (padding rows hold stale bytes: converted, not
  // measured).
  // Q's column halves: a ring stage's K and V (kQInRing: ring use `use`, the tile's blocks
  // following it; this thread's chunks 4 tq .. lie in half tq / 2), or the Q buffer.
  constexpr std::uint32_t kQStage = Traits::kQInRing ? 1u : 0u;
  const std::uint8_t* q_mine = nullptr;
  std::uint8_t* sq = nullptr;  // the Q buffer (the ways merge and the staged O)
  if constexpr (Traits::kQInRing) {
    const int s = stage_of(use, kRing);
    Barrier64::wait(&smem.kv.k_full[s], parity_of(use, kRing));
    Barrier64::wait(&smem.kv.v_full[s], parity_of(use, kRing));
    q_mine = reinterpret_cast<const std::uint8_t*>(tq < 2 ? smem.kv.k[s] : smem.kv.v[s]);
  } else {
    const int qb = stage_of(iter, kQBuffers<Traits>);
    Barrier64::wait(&smem.q_full[qb], parity_of(iter, kQBuffers<Traits>));
    sq = reinterpret_cast<std::uint8_t*>(smem.q[qb]);
  }
  // This thread's chunk c of row `r`'s Q.
  const auto q_chunk = [&](int r, int c) -> const std::uint8_t* {
    if constexpr (Traits::kQInRing)
      return q_mine + q_chunk_offset<Traits>(r, 4 * (tq % 2) + c);
    else
      return sq + q_chunk_offset<Traits>(r, 4 * tq + c);
  };
  uint4 qraw[2][4];
  std::uint32_t mx = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      // A warp past the last way reads nothing: its group's way 0 may be staging O there.
      qraw[h][c] = working ? load16(q_chunk(row[h], c)) : make_uint4(0u, 0u, 0u, 0u);
      if (row[h] < rows) {
        for (const std::uint32_t w : {qraw[h][c].x, qraw[h][c].y, qraw[h][c].z, qraw[h][c].w}) {
          const std::uint32_t lo = w & 0x7fffu, hi = (w >> 16) & 0x7fffu;  // |q| bits; 0x7f80 and up: inf, NaN
          mx = max(mx, max(lo < 0x7f80u ? lo : 0u, hi < 0x7f80u ? hi : 0u));
        }
      }
    }
  }
  mx = __reduce_max_sync(0xffffffffu, mx);
  if constexpr (Traits::kQInRing) {  // Q is in registers: its stage goes back to the loader
    __syncwarp();
    if (lane == 0) {
      Barrier64::arrive(&smem.kv.k_empty[stage_of(use, kRing)]);
      Barrier64::arrive(&smem.kv.v_empty[stage_of(use, kRing)]);
    }
  }
  // The largest's biased exponent x in [1, 254] (subnormals as 1): e = 14 - (x - 127).
  const int e = mx != 0u ? min(141 - max(static_cast<int>(mx >> 7), 1), 126) : 0;
  std::uint32_t qa[8][4];  // A fragments of the 8 k-steps
  {
    const float f = __int_as_float((e + 127) << 23);  // 2^e
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const std::uint32_t w0[4] = {qraw[0][c].x, qraw[0][c].y, qraw[0][c].z, qraw[0][c].w};
      const std::uint32_t w1[4] = {qraw[1][c].x, qraw[1][c].y, qraw[1][c].z, qraw[1][c].w};
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // k-step 2c + half: words 2 half, 2 half + 1
        qa[2 * c + half][0] = bf16x2_to_f16x2(w0[2 * half], f);
        qa[2 * c + half][1] = bf16x2_to_f16x2(w1[2 * half], f);
        qa[2 * c + half][2] = bf16x2_to_f16x2(w0[2 * half + 1], f);
        qa[2 * c + half][3] = bf16x2_to_f16x2(w1[2 * half + 1], f);
      }
    }
  }
  // k_descale scales every score of the KV head, 2^-e undoes Q's scale; v_descale scales O.
  const float score_scale =
      p.attn.scale_log2 * p.attn.k_descale[t.kv_head * p.attn.k_descale_stride] * __int_as_float((127 - e) << 23);
  const float o_scale = p.attn.v_descale[t.kv_head * p.attn.v_descale_stride];

  float o[16][4];
#pragma unroll
  for (int m = 0; m < 16; ++m) o[m][0] = o[m][1] = o[m][2] = o[m][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};  // running max times score_scale
  float l_run[2] = {0.f, 0.f};              // this thread's part of the running sums
  int seen = 0;                             // blocks the group's queries chose so far

#pragma unroll 1
  for (int u = 0; u < n; ++u) {
    const std::uint32_t at = use + kQStage + static_cast<std::uint32_t>(u);
    const int s = stage_of(at, kRing);
    const std::uint32_t parity = parity_of(at, kRing);
    const std::uint32_t members = list.members[u0 + u][0];
    // A stage is released only after it landed for this use: an earlier arrival could count
    // towards its previous use, before every warp was done with that.
    Barrier64::wait(&smem.kv.k_full[s], parity);
    bool mine = (members & warp_queries) != 0u;
    if (kWays && mine && ways > 1) mine = seen++ % ways == way;  // the group's chosen blocks, dealt round the ways
    if (!mine) {  // no row of this warp sees the block, or another way computes it: state unchanged
      __syncwarp();
      if (lane == 0) Barrier64::arrive(&smem.kv.k_empty[s]);
      Barrier64::wait(&smem.kv.v_full[s], parity);
      __syncwarp();
      if (lane == 0) Barrier64::arrive(&smem.kv.v_empty[s]);
      continue;
    }
    const UnionEntry ent = union_entry(list, u0 + u);
    const int tokens = max(0, ent.tokens);

    // The block in two halves of 64 keys (kh = 0, 1), each folded into the state on its own,
    // so that only half of S is live beside O and Q's fragments.
    int limit[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      limit[h] = (members & row_bit[h]) != 0u ? max(0, min(tokens, row_pos[h] - ent.block_start + 1)) : 0;
    const std::uint32_t chunks = list.chunks[u0 + u];
    const bool whole =
        __all_sync(0xffffffffu, limit[0] == kBlockSize && limit[1] == kBlockSize) && chunks == kAllChunks;
#pragma unroll 1
    for (int kh = 0; kh < 2; ++kh) {
      // S = Q K^T over keys 64 kh + [0, 64): n-tile i is keys 64 kh + 8 i ..; this thread loads
      // key 64 kh + 8 i + g (row swizzle g).
      float sacc[8][4];
      {
        const std::uint8_t* kb = reinterpret_cast<const std::uint8_t*>(smem.kv.k[s]) + kh * 8192 + g * 128;
        const int c0 = ((2 * tq) ^ g) << 4, c1 = ((2 * tq + 1) ^ g) << 4;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint4 k0 = load16(kb + i * 1024 + c0), k1 = load16(kb + i * 1024 + c1);
          const std::uint32_t w[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
          sacc[i][0] = sacc[i][1] = sacc[i][2] = sacc[i][3] = 0.f;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const uint2 b = widen_e4m3x4_f16(w[j]);  // k 2t, 2t + 1 | 2t + 8, 2t + 9
            mma_f16(sacc[i], qa[j], b.x, b.y);
          }
        }
      }
      if (kh == 1) {
        __syncwarp();
        if (lane == 0) Barrier64::arrive(&smem.kv.k_empty[s]);
      }

      // Mask: keys past a row's limit (its query did not choose the block: 0; causal / k_len)
      // and on invalid pages' 16-token chunks; a warp whose rows all see the whole block of
      // valid pages skips it. Value v of n-tile i: row half v / 2, key 64 kh + 8 i + 2 tq + v % 2.
      if (!whole) {
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int v = 0; v < 4; ++v)
            if (64 * kh + 8 * i + 2 * tq + (v & 1) >= limit[v >> 1] || !((chunks >> (4 * kh + (i >> 1))) & 1u))
              sacc[i][v] = -INFINITY;
      }

      // Online softmax of the two rows.
      float alpha[2], m_use[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx_s = -INFINITY;
#pragma unroll
        for (int i = 0; i < 8; ++i) mx_s = fmaxf(mx_s, fmaxf(sacc[i][2 * h], sacc[i][2 * h + 1]));
        const float m_new = fmaxf(m_run[h], quad_max(mx_s) * score_scale);
        m_use[h] = m_new == -INFINITY ? 0.f : m_new;  // an empty row stays empty: exp2(-inf) = 0
        alpha[h] = fast_exp2(m_run[h] - m_use[h]);
        m_run[h] = m_new;
      }
      float sum[2] = {0.f, 0.f};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          sacc[i][v] = fast_exp2(fmaf(sacc[i][v], score_scale, -m_use[v >> 1]));
          sum[v >> 1] += sacc[i][v];
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * alpha[h] + sum[h];
#pragma unroll
      for (int m = 0; m < 16; ++m)
#pragma unroll
        for (int v = 0; v < 4; ++v) o[m][v] *= alpha[v >> 1];
      // P as the A fragments of P V's k-steps: k-step j is S's n-tiles 2 j and 2 j + 1.
      std::uint32_t pa[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        pa[j][0] = pack_f16(sacc[2 * j][0], sacc[2 * j][1]);
        pa[j][1] = pack_f16(sacc[2 * j][2], sacc[2 * j][3]);
        pa[j][2] = pack_f16(sacc[2 * j + 1][0], sacc[2 * j + 1][1]);
        pa[j][3] = pack_f16(sacc[2 * j + 1][2], sacc[2 * j + 1][3]);
      }

      // O += P V: k-step j's rows 64 kh + 16 j + 2 tq + {0, 1, 8, 9}, chunk g of each (d in
      // [16 g, 16 g + 16)); rows past the block's tokens read as zeros (stale cache bytes may
      // be NaN codes, and P = 0 times NaN is NaN). Byte b of word w is n-tile 4 w + b.
      if (kh == 0) Barrier64::wait(&smem.kv.v_full[s], parity);
      const std::uint8_t* vb = reinterpret_cast<const std::uint8_t*>(smem.kv.v[s]);
      const int ca = (g ^ (2 * tq)) << 4, cb = (g ^ (2 * tq + 1)) << 4;  // swizzles of rows 2 tq (+ 8), + 1 (+ 9)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int ra = 64 * kh + 16 * j + 2 * tq;
        const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
        const uint4 va = ra < tokens ? load16(vb + ra * 128 + ca) : zero;
        const uint4 vb1 = ra + 1 < tokens ? load16(vb + (ra + 1) * 128 + cb) : zero;
        const uint4 vc = ra + 8 < tokens ? load16(vb + (ra + 8) * 128 + ca) : zero;
        const uint4 vd = ra + 9 < tokens ? load16(vb + (ra + 9) * 128 + cb) : zero;
        const std::uint32_t wa[4] = {va.x, va.y, va.z, va.w}, wb[4] = {vb1.x, vb1.y, vb1.z, vb1.w};
        const std::uint32_t wc[4] = {vc.x, vc.y, vc.z, vc.w}, wd[4] = {vd.x, vd.y, vd.z, vd.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          // {row a, row b} pairs of bytes 0, 1 (n-tiles 4w, 4w + 1) and 2, 3 (4w + 2, 4w + 3).
          const uint2 b0_lo = widen_e4m3x4_f16(__byte_perm(wa[w], wb[w], 0x5140));
          const uint2 b0_hi = widen_e4m3x4_f16(__byte_perm(wa[w], wb[w], 0x7362));
          const uint2 b1_lo = widen_e4m3x4_f16(__byte_perm(wc[w], wd[w], 0x5140));
          const uint2 b1_hi = widen_e4m3x4_f16(__byte_perm(wc[w], wd[w], 0x7362));
          mma_f16(o[4 * w + 0], pa[j], b0_lo.x, b1_lo.x);
          mma_f16(o[4 * w + 1], pa[j], b0_lo.y, b1_lo.y);
          mma_f16(o[4 * w + 2], pa[j], b0_hi.x, b1_hi.x);
          mma_f16(o[4 * w + 3], pa[j], b0_hi.y, b1_hi.y);
        }
      }
    }
    __syncwarp();
    if (lane == 0) Barrier64::arrive(&smem.kv.v_empty[s]);
  }
  Barrier64::arrive(&smem.list_empty[buf]);

  float l_sum[2] = {quad_sum(l_run[0]), quad_sum(l_run[1])};
  if (kWays && ways > 1) {
    // Ways 1.. publish (m, l) and O / l of their rows; way w of group rg uses slot
    // (w - 1) groups + rg: Q buffer rows 16 (groups + slot) + [0, 16), past every group's rows
    // (16 ways groups <= 128), which no warp reads any more.
    const int slot = (way - 1) * groups + rg;
    if (working && way > 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float inv = l_sum[h] > 0.f ? 1.f / l_sum[h] : 0.f;
        if (tq == 0) smem.merge_ml[slot][g + 8 * h] = make_float2(m_run[h], l_sum[h]);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int m0 = 8 * (c & 1), v = 2 * h + (c >> 1);
          uint4 w;
          w.x = pack_f16(o[m0 + 0][v] * inv, o[m0 + 1][v] * inv);
          w.y = pack_f16(o[m0 + 2][v] * inv, o[m0 + 3][v] * inv);
          w.z = pack_f16(o[m0 + 4][v] * inv, o[m0 + 5][v] * inv);
          w.w = pack_f16(o[m0 + 6][v] * inv, o[m0 + 7][v] * inv);
          *reinterpret_cast<uint4*>(sq + q_chunk_offset<Traits>(16 * (groups + slot) + g + 8 * h, 4 * tq + c)) = w;
        }
      }
      cutlass::arch::fence_view_async_shared();  // before the next tile's Q lands there (TMA)
    }
    named_barrier_sync(kWayMerge, kConsumerThreads);
    if (working && way == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float top = m_run[h];
        for (int k = 1; k < ways; ++k) top = fmaxf(top, smem.merge_ml[(k - 1) * groups + rg][g + 8 * h].x);
        const float base = top == -INFINITY ? 0.f : top;  // every way empty: stays empty
        const float a0 = fast_exp2(m_run[h] - base);
        l_sum[h] *= a0;
#pragma unroll
        for (int m = 0; m < 16; ++m) {
          o[m][2 * h] *= a0;
          o[m][2 * h + 1] *= a0;
        }
        for (int k = 1; k < ways; ++k) {
          const int sl = (k - 1) * groups + rg;
          const float2 ml = smem.merge_ml[sl][g + 8 * h];
          const float wk = ml.y * fast_exp2(ml.x - base);  // that way's l, on this max
          l_sum[h] += wk;
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int m0 = 8 * (c & 1), v = 2 * h + (c >> 1);
            const uint4 w = load16(sq + q_chunk_offset<Traits>(16 * (groups + sl) + g + 8 * h, 4 * tq + c));
            const std::uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&ws[i]));
              o[m0 + 2 * i][v] = fmaf(wk, f.x, o[m0 + 2 * i][v]);
              o[m0 + 2 * i + 1][v] = fmaf(wk, f.y, o[m0 + 2 * i + 1][v]);
            }
          }
        }
        m_run[h] = top;
      }
    }
  }

  // Epilogue: as store_tile, per row group, by its way 0. Rows go to slot t.split (direct: out
  // and lse, with the sink).
  const TileRowDest target = tile_row_dest(p, t);
  const bool final_rows = p.direct;
  const bool storing = !kWays || (working && way == 0);  // the group's rows are this warp's to store
  RowNorm norm[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sink = -INFINITY;
    if (final_rows && p.attn.sinks != nullptr) {
      const float sk = p.attn.sinks[t.kv_head * group + row[h] % group];
      if (isfinite(sk)) sink = sk * kLog2e;  // a non-finite sink is ignored
    }
    norm[h] = row_norm<true>(m_run[h], l_sum[h], sink, o_scale);
  }
  float* lse = final_rows ? p.attn.lse : p.attn.lse_partial;
  if (storing && lse != nullptr && tq == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const RowDest dest = target(row[h]);
      if (dest.valid) lse[dest.lse_index] = norm[h].lse;
    }
  }
  // Chunk c of this thread's 32 columns (32 tq + 8 c ..): c = 0, 1 from O column 2 tq (n-tiles
  // 0-7, 8-15), c = 2, 3 from column 2 tq + 1.
  const auto chunk = [&](int h, int c) {
    const int m0 = 8 * (c & 1), v = 2 * h + (c >> 1);
    const float f = norm[h].inv;
    uint4 w;
    w.x = pack_bf16(o[m0 + 0][v] * f, o[m0 + 1][v] * f);
    w.y = pack_bf16(o[m0 + 2][v] * f, o[m0 + 3][v] * f);
    w.z = pack_bf16(o[m0 + 4][v] * f, o[m0 + 5][v] * f);
    w.w = pack_bf16(o[m0 + 6][v] * f, o[m0 + 7][v] * f);
    return w;
  };
  if constexpr (Traits::kQInRing) {
    // No buffer to stage O in: each row goes from registers to out [total_q, h_q, d] (its
    // strides; 16-byte aligned rows) or o_partial [slots * total_q, h_q, d]. The quad first
    // transposes its chunks (lane tq then holds chunk tq of each quad lane k), so that store k
    // writes the row's bytes [64 k, 64 k + 64) whole.
    using Element = typename Traits::Element;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const RowDest dest = target(row[h]);
      uint4 in[4], out[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) in[c] = chunk(h, c);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int send = (tq - r) & 3, from = (tq + r) & 3;
        const uint4 v = send == 0 ? in[0] : send == 1 ? in[1] : send == 2 ? in[2] : in[3];
        const int src = (lane & ~3) | from;
        const uint4 got = make_uint4(__shfl_sync(0xffffffffu, v.x, src), __shfl_sync(0xffffffffu, v.y, src),
                                     __shfl_sync(0xffffffffu, v.z, src), __shfl_sync(0xffffffffu, v.w, src));
#pragma unroll
        for (int k = 0; k < 4; ++k)
          if (k == from) out[k] = got;
      }
      if (!dest.valid) continue;  // the quad's rows: valid or not together
      Element* dst = final_rows ? static_cast<Element*>(p.attn.out) + dest.o_row * p.attn.stride_out_token +
                                      dest.h * p.attn.stride_out_head
                                : static_cast<Element*>(p.attn.o_partial) +
                                      (std::int64_t(dest.o_row) * p.attn.h_q + dest.h) * Traits::kHeadDim;
#pragma unroll
      for (int k = 0; k < 4; ++k) *reinterpret_cast<uint4*>(dst + 32 * k + 8 * tq) = out[k];
    }
  } else {
    // O is staged into the group's own rows of the Q buffer (read above) and stored with TMA by
    // the lane owning a box's first row. A box (q_box_rows: G when it divides 64, else 1)
    // never straddles two groups' rows.
#pragma unroll
    for (int h = 0; h < 2 && storing; ++h) {
#pragma unroll
      for (int c = 0; c < 4; ++c)
        *reinterpret_cast<uint4*>(sq + q_chunk_offset<Traits>(row[h], 4 * tq + c)) = chunk(h, c);
    }
    cutlass::arch::fence_view_async_shared();  // the stores, visible to TMA
    __syncwarp();
    if (storing && lane < 16) {
      const int r = 16 * rg + lane;
      if (r % tma.q_box_rows == 0) {
        const RowDest dest = target(r);
        if (dest.valid)
          store_staged_box<Traits, true>(final_rows ? tma.out : tma.o_partial,
                                         smem.q[stage_of(iter, kQBuffers<Traits>)], r, dest);
      }
    }
    Barrier64::arrive(&smem.q_empty[stage_of(iter, kQBuffers<Traits>)]);
  }
}

// The consumer warps (ct = 0..255) over the tiles of `sched`, in the order the builders and
// the loader take them.
template <class Traits, class Schedule>
__device__ __forceinline__ void warp_consumers(const TileUnionParams& p, const PrefillTma& tma,
                                               TileUnionStorage<Traits>& smem, int ct, const Schedule& sched) {
  static_assert(Traits::kWarpMma && Traits::kTileM == 128 && Traits::kHeadDim == 128 && Traits::kBoxCols == 64);
  static_assert(TileUnionStorage<Traits>::List::kQueries == 32, "one membership word per entry");
  constexpr int kWarps = kConsumerThreads / 32;
  constexpr int kWayEntries = kDecodeWayEntries;
  static_assert(kWarps * 16 == Traits::kTileM, "a warp per 16 tile rows");
  const int warp = ct / 32, lane = ct % 32;

  std::uint32_t iter = 0;
  std::uint32_t use = 0;  // ring blocks passed
  for (const int pos : sched.mine()) {
    const int buf = static_cast<int>(iter & 1u);
    const Tile t = make_tile(p, sched.tile(pos));
    Barrier64::wait(&smem.list_full[buf], phase_of(iter));
    const auto& list = smem.list[buf];
    const int n = list.end - list.begin;
    // The ways instance: the tile's 16-row groups and ways (see the top). A way gets
    // kWayEntries of the split's entries at least: on splits of one or two blocks (small steps)
    // the merge made ways 2-3 us slower (docs/performance.md step 53).
    if constexpr (Traits::kWays) {
      const int groups = (t.nq * p.attn.group + 15) / 16;
      warp_tile<true>(p, tma, smem, t, iter, use, warp, lane, groups, max(1, min(kWarps / groups, n / kWayEntries)));
    } else {
      warp_tile<false>(p, tma, smem, t, iter, use, warp, lane, kWarps, 1);
    }
    use += static_cast<std::uint32_t>(n) + (Traits::kQInRing ? 1u : 0u);
    ++iter;
  }
}

}  // namespace msa::cuda::prefill_sm90
