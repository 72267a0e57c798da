// The sm_90a query-major tile-union sparse prefill kernel: a persistent loop over (KV head,
// query tile) pairs (TileListSchedule: all of them, or the list PrefillPath::kAuto routed
// here, heaviest first), each run whole or as `splits` tiles over parts of its union (the
// decode's split-KV), warp specialised.
//
// Producer warpgroup (40 registers):
//   - builders (warps 1-3) build each tile's union list and gather its Q with TMA into the
//     tile's list / Q buffer (double buffered: tile i + 1 is built while tile i computes); with
//     FP8 K/V they also widen the K of every block the loader landed to fp16 (widen_tile);
//   - the loader (warp 0) streams every union block's K and V into the ring (kv_ring.cuh).
// Consumer warpgroups 1 and 2 (232 registers), 64 rows each: per union block u they issue
// S(u) = Q K(u)^T, then O += P(u-1) V(u-1), and mask and fold S(u) into the online softmax
// while that P V still runs; with FP8 K/V they then widen V(u) to fp16 together (widen_landed),
// having converted their Q rows to fp16 once per tile (fp16_q_in_place);
// with Traits::kSkipBlocks (the decode) a warpgroup skips the blocks that no query of its rows
// chose. The WGMMA issue alternates between them (Turn), so one's softmax runs while the
// other's GEMMs occupy the tensor cores.
//
// Synchronisation (mbarriers, phase = use count / buffers & 1): the ring's (kv_ring.cuh, with
// FP8 K/V its codes-landed barriers too), and
//   list_full[2] (96 builder arrivals)   list_empty[2] (256 consumer + 32 loader arrivals)
//   q_full[kQBuffers] (TMA bytes)        q_empty[kQBuffers] (256, after the O stores read it)
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cute/tensor.hpp>

#include "cuda/common/ptx.cuh"
#include "cuda/common/scheduler.cuh"
#include "cuda/prefill/sm90/common/epilogue.cuh"
#include "cuda/prefill/sm90/common/kernel.cuh"
#include "cuda/prefill/sm90/common/kv_ring.cuh"
#include "cuda/prefill/sm90/common/softmax.cuh"
#include "cuda/prefill/sm90/common/wgmma.cuh"
#include "cuda/prefill/sm90/tile_union/builder.cuh"
#include "cuda/prefill/sm90/tile_union/config.h"
#include "cuda/prefill/sm90/tile_union/params.h"

namespace msa::cuda::prefill_sm90 {

// The tiles a CTA runs: the narrow instances' every tile or the routed list, in tile_of_rank's
// order; the wide instance's (plan-free: every tile) over groups of KV heads (group_heads).
template <class Traits>
__device__ __forceinline__ auto tile_schedule(const TileUnionParams& p) {
  if constexpr (Traits::kWideTiles)
    return GroupedTileSchedule{p.tiles, p.attn.h_kv, p.group_heads};
  else
    return TileListSchedule{p.tiles, p.attn.h_kv, p.tile_list, p.tile_count};
}

// FP8 K/V: widens the K of union entries [u_from, u_to) of `list` (the blocks the loader lands,
// in list order; `use` counts the ring's blocks). K rows past the block's tokens become zeros
// (the key limits hide them anyway). The consumers widen V themselves: three 40-register warps
// widening both bounded an FP8 block (docs/performance.md, steps 14f and 23).
template <class Traits>
__device__ __forceinline__ void widen_tile(TileUnionStorage<Traits>& smem,
                                           const typename TileUnionStorage<Traits>::List& list, int u_from, int u_to,
                                           std::uint32_t& use, int bt) {
  for (int u = u_from; u < u_to; ++u, ++use)
    widen_landed<Traits, false, kBuilderThreads>(smem.kv, use, max(0, union_entry(list, u).tokens), bt);
}

template <class Traits>
__device__ __forceinline__ void builders(const TileUnionParams& p, const PrefillTma& tma,
                                         TileUnionStorage<Traits>& smem) {
  const auto sched = tile_schedule<Traits>(p);
  std::uint32_t iter = 0;
  std::uint32_t use = 0;  // FP8: ring blocks widened
  int prev_u = 0, prev_end = 0;  // FP8: the previous tile's entries not widened yet
  for (const int pos : sched.mine()) {
    const int buf = static_cast<int>(iter & 1u);
    const Tile t = make_tile(p, sched.tile(pos));
    const int bt = opaque_tid() - 32;
    // FP8: the previous tile's first blocks are widened as soon as they land, the rest after
    // this tile's list is built. Building waits for the tile two back to finish, which needed
    // only blocks widened before; the previous tile's list stays readable until its consumers
    // finish. The one Q buffer frees when the previous tile has finished, so its Q is gathered
    // last.
    const int qb = stage_of(iter, kQBuffers<Traits>);
    const auto gather_q = [&] {
      Barrier64::wait(&smem.q_empty[qb], parity_of(iter, kQBuffers<Traits>) ^ 1u);
      load_q<Traits>(p, tma, t, smem.q[qb], &smem.q_full[qb], bt);
    };
    if constexpr (Traits::kFp8Kv) {
      const int to = min(prev_end, prev_u + kStages);
      widen_tile(smem, smem.list[buf ^ 1], prev_u, to, use, bt);
      prev_u = to;
    } else {
      gather_q();  // needs no list: issued first, its latency hides behind the union build
    }
    Barrier64::wait(&smem.list_empty[buf], phase_of(iter) ^ 1u);
    build_list(p, t, smem, smem.list[buf], bt);
    Barrier64::arrive(&smem.list_full[buf]);
    if constexpr (Traits::kFp8Kv) {
      widen_tile(smem, smem.list[buf ^ 1], prev_u, prev_end, use, bt);
      prev_u = smem.list[buf].begin;
      prev_end = smem.list[buf].end;
      gather_q();
    }
    ++iter;
  }
  if constexpr (Traits::kFp8Kv) widen_tile(smem, smem.list[(iter & 1u) ^ 1u], prev_u, prev_end, use, opaque_tid() - 32);
}

// Every union block of every tile, in list order, once the builders published the list. The
// loader releases a list too: without its arrival the builders could rewrite the buffer (two
// tiles on, after consumers that finished an empty union) before the loader has read it.
template <class Traits>
__device__ __forceinline__ void loader(const TileUnionParams& p, const PrefillTma& tma,
                                       TileUnionStorage<Traits>& smem) {
  KvLoader<Traits> kv{p.attn, tma, smem.kv};
  const auto sched = tile_schedule<Traits>(p);
  std::uint32_t iter = 0;
  for (const int pos : sched.mine()) {
    const int buf = static_cast<int>(iter & 1u);
    const int kv_head = make_tile(p, sched.tile(pos)).kv_head;
    Barrier64::wait(&smem.list_full[buf], phase_of(iter));
    const auto& list = smem.list[buf];
    const int end = list.end;
    for (int u = list.begin; u < end; ++u) {
      const UnionEntry e = union_entry(list, u);
      kv.load(kv_head, e.b, e.block_start, e.k_len);
    }
    Barrier64::arrive(&smem.list_empty[buf]);  // every lane read the list
    ++iter;
  }
}

// FP8 K/V: converts this consumer warpgroup's 64 Q rows (bf16, as TMA landed them) to fp16 in
// place for Q K^T in fp16 (K is widened to fp16), each times 2^e, e chosen so that the largest
// finite |q| of its rows below `rows` (the tile's valid rows; padding rows hold stale bytes and
// are converted but not measured) lies in [2^14, 2^15): no finite value overflows, infinities and
// NaN stay what they are, and every element down to 2^-24 of that largest is exact (bf16 has 8
// significant bits, fp16 11, and subnormals reach 2^-24). e = 0 when every finite |q| is 0. The
// caller folds 2^-e into the scores' scale (exact). 128 threads, this one t; `scratch` holds the
// warps' maxima.
template <class Traits>
__device__ __forceinline__ int fp16_q_in_place(typename Traits::Element* sq, int wg, int t, int rows,
                                               std::uint32_t (&scratch)[4]) {
  static_assert(Traits::kFp8Kv && Traits::kColHalves == 2 && Traits::kBoxCols == 64);
  constexpr std::uint32_t kHalfBytes = Traits::kTileM * 128;  // one column half of the tile
  constexpr int kChunks = 8;                                  // 2 halves x 64 rows x 128 B / 16 B / 128
  const std::uint32_t base = static_cast<std::uint32_t>(__cvta_generic_to_shared(sq)) + wg * 64 * 128;
  const auto at = [&](int k) {  // chunk t + 128 k: column half k / 4, 16 bytes of row (t + 128 k) % 512 / 8
    const int idx = t + 128 * k;
    return base + (idx / 512) * kHalfBytes + (idx % 512) * 16;
  };
  uint4 v[kChunks];
  std::uint32_t mx = 0;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[k].x), "=r"(v[k].y), "=r"(v[k].z), "=r"(v[k].w)
                 : "r"(at(k))
                 : "memory");
    if (wg * 64 + ((t + 128 * k) % 512) / 8 < rows) {
      for (const std::uint32_t w : {v[k].x, v[k].y, v[k].z, v[k].w}) {
        const std::uint32_t lo = w & 0x7fffu, hi = (w >> 16) & 0x7fffu;  // |q| bits; 0x7f80 and up: inf, NaN
        mx = max(mx, max(lo < 0x7f80u ? lo : 0u, hi < 0x7f80u ? hi : 0u));
      }
    }
  }
  mx = __reduce_max_sync(0xffffffffu, mx);
  if (t % 32 == 0) scratch[t / 32] = mx;
  named_barrier_sync(kEpilogue0 + wg, 128);
  mx = max(max(scratch[0], scratch[1]), max(scratch[2], scratch[3]));
  int e = 0;
  // The largest's biased exponent x in [1, 254] (subnormals as 1): e = 14 - (x - 127) lies in
  // [-113, 140]; capped at 126 so that 2^e and 2^-e stay normal floats (rows below 2^-112 then
  // keep their largest under 2^14, still exact for bf16 subnormals).
  if (mx != 0u) e = min(141 - max(static_cast<int>(mx >> 7), 1), 126);
  const float f = __int_as_float((e + 127) << 23);  // 2^e
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    std::uint32_t o[4];
    const std::uint32_t in[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float lo = __uint_as_float(in[j] << 16) * f, hi = __uint_as_float(in[j] & 0xffff0000u) * f;
      asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(o[j]) : "f"(hi), "f"(lo));
    }
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(at(k)), "r"(o[0]), "r"(o[1]), "r"(o[2]), "r"(o[3])
                 : "memory");
  }
  cutlass::arch::fence_view_async_shared();  // the stores, visible to WGMMA
  named_barrier_sync(kEpilogue0 + wg, 128);  // every row converted (and scratch read) before the first QK
  return e;
}

template <class Traits>
__device__ __forceinline__ void consumers(const TileUnionParams& p, const PrefillTma& tma,
                                          TileUnionStorage<Traits>& smem, int ct) {
  const int group = p.attn.group;
  const Turn turn{ct / 128};
  turn.start();
  int row[2];
  accumulator_rows<Traits>(ct, row);

  const auto sched = tile_schedule<Traits>(p);
  std::uint32_t iter = 0;
  std::uint32_t use = 0;
  for (const int pos : sched.mine()) {
    const int buf = static_cast<int>(iter & 1u);
    const Tile t = make_tile(p, sched.tile(pos));
    Barrier64::wait(&smem.list_full[buf], phase_of(iter));
    const auto& list = smem.list[buf];
    const int u0 = list.begin;  // the tile's split of the union: entries u0 + [0, n)
    const int n = list.end - u0;
    // This thread's rows: their tile query's membership word and bit (no bit for padding) and
    // position.
    constexpr int kWords = TileUnionStorage<Traits>::List::kQueries / 32;
    std::uint32_t row_bit[2];
    int row_word[2];
    int row_pos[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int qi = row[half] / group;  // < 128
      row_bit[half] = qi < t.nq ? 1u << (kWords == 1 ? qi : qi & 31) : 0u;
      row_word[half] = kWords == 1 ? 0 : qi >> 5;
      row_pos[half] = qi < t.nq ? list.q_pos[qi] : 0;
    }
    // The tile queries owning a row of this warpgroup's 64 (padding rows own none; the skipping
    // instances are the decode's, narrow: one membership word).
    static_assert(!Traits::kSkipBlocks || kWords == 1);
    std::uint32_t wg_queries = 0;
    if constexpr (Traits::kSkipBlocks) {
      const int first = turn.wg * 64, last = min(turn.wg * 64 + 63, t.nq * group - 1);
      for (int qi = first / group; first <= last && qi <= last / group; ++qi) wg_queries |= 1u << qi;
    }
    // FP8 K/V: this thread's share of widening block u's V (the builders widen K).
    auto widen_v = [&](int u) {
      if constexpr (Traits::kFp8Kv)
        widen_landed<Traits, true, kConsumerThreads>(smem.kv, use + u, max(0, union_entry(list, u0 + u).tokens), ct);
    };
    auto key_limits = [&](int u, int(&limit)[2]) {
      const UnionEntry e = union_entry(list, u0 + u);
      const std::uint32_t members = list.members[u0 + u][0];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const std::uint32_t word = kWords == 1 ? members : list.members[u0 + u][row_word[half]];
        limit[half] = (word & row_bit[half]) != 0u ? max(0, min(e.tokens, row_pos[half] - e.block_start + 1)) : 0;
      }
    };

    const int qb = stage_of(iter, kQBuffers<Traits>);
    Barrier64::wait(&smem.q_full[qb], parity_of(iter, kQBuffers<Traits>));
    const typename Traits::Element* sq = smem.q[qb];
    // FP8 K/V: k_descale scales every score of the tile's KV head, and 2^-e undoes the scale of
    // this warpgroup's fp16 Q; v_descale scales its O.
    float fp8_scale_log2 = 0.f, o_scale = 1.f;
    if constexpr (Traits::kFp8Kv) {
      const int e = fp16_q_in_place<Traits>(smem.q[qb], turn.wg, ct % 128, t.nq * group, smem.q_absmax[turn.wg]);
      fp8_scale_log2 = p.attn.scale_log2 * p.attn.k_descale[t.kv_head * p.attn.k_descale_stride] *
                       __int_as_float((127 - e) << 23);  // 2^-e, e in [-113, 126]
      o_scale = p.attn.v_descale[t.kv_head * p.attn.v_descale_stride];
    }

    auto acc_o = make_acc_o<Traits>();
    cute::clear(acc_o);
    SoftmaxState st;

    if (n > 0) {
      auto acc_s = make_acc_s<Traits>();
      auto frag_p = make_frag_p<Traits>();
      // Phase u: S(u) (u < n) and P(u-1) V(u-1) (u > 0) issued as two WGMMA batches, then the
      // softmax of S(u) as soon as its batch completes, while P V may still run; O's rescale
      // and the new P follow P V's completion. The three shapes are separate straight-line
      // code (no WGMMA under a branch).
      auto phase = [&](auto with_qk, auto with_pv, int u) {
        constexpr bool kQk = decltype(with_qk)::value;
        constexpr bool kPv = decltype(with_pv)::value;
        const int s = static_cast<int>((use + u) & 1u);
        const int sp = s ^ 1;  // stage of block u - 1
        if constexpr (kQk) Barrier64::wait(&smem.kv.k_full[s], phase_of(use + u));
        if constexpr (kPv) Barrier64::wait(&smem.kv.v_full[sp], phase_of(use + u - 1));
        turn.sync();
        cute::warpgroup_fence_operand(acc_s);
        cute::warpgroup_fence_operand(acc_o);
        cute::warpgroup_fence_operand(frag_p);
        cute::warpgroup_arrive();
        if constexpr (kQk) {
          issue_qk<Traits>(sq, smem.kv.k[s], ct, acc_s);
          cute::warpgroup_commit_batch();
        }
        if constexpr (kPv) {
          issue_pv<Traits, true>(frag_p, smem.kv.v[sp], ct, acc_o);
          cute::warpgroup_commit_batch();
        }
        turn.pass();
        float alpha[2];
        if constexpr (kQk) {
          cute::warpgroup_wait<kPv ? 1 : 0>();  // S(u) complete; P V may still run
          cute::warpgroup_fence_operand(acc_s);
          Barrier64::arrive(&smem.kv.k_empty[s]);
          int limit[2];
          key_limits(u, limit);
          softmax_fold(acc_s, limit, list.chunks[u0 + u], Traits::kFp8Kv ? fp8_scale_log2 : p.attn.scale_log2, st,
                       ct, alpha);
        }
        if constexpr (kPv) {
          cute::warpgroup_wait<0>();
          cute::warpgroup_fence_operand(acc_o);
          cute::warpgroup_fence_operand(frag_p);
          Barrier64::arrive(&smem.kv.v_empty[sp]);
        }
        if constexpr (kQk) {
          softmax_apply(acc_s, frag_p, acc_o, alpha);
          if constexpr (Traits::kFp8Kv) widen_v(u);
        }
      };
      // Turn u (u = 0..n, the same count in both warpgroups and in both loops below) takes
      // block u with the P V of block u - 1. Without kSkipBlocks, or when every block has a
      // query of this warpgroup's rows, that is the straight pipeline.
      bool every = true;
      if constexpr (Traits::kSkipBlocks)
        for (int u = 0; u < n && every; ++u) every = (list.members[u0 + u][0] & wg_queries) != 0u;
      if (!Traits::kSkipBlocks || every) {
        phase(cute::true_type{}, cute::false_type{}, 0);
        for (int u = 1; u < n; ++u) phase(cute::true_type{}, cute::true_type{}, u);
        phase(cute::false_type{}, cute::true_type{}, n);
      } else if constexpr (Traits::kSkipBlocks) {
        // Otherwise a block that none of its rows chose is skipped: its rows would all be
        // masked, which leaves the state bitwise as it was (alpha 1, P 0). A pending P V is
        // issued alone first, so that no V stage is held across a skipped block (the loader
        // streams in order). The skipped block's stages are released once landed: an early
        // arrival could complete the stage's previous use.
        bool pending = false;
        for (int u = 0; u <= n; ++u) {
          const bool take = u < n && (list.members[u0 + u][0] & wg_queries) != 0u;
          if (take) {
            if (pending)
              phase(cute::true_type{}, cute::true_type{}, u);
            else
              phase(cute::true_type{}, cute::false_type{}, u);
          } else {
            if (pending) {
              phase(cute::false_type{}, cute::true_type{}, u);
            } else {
              turn.sync();
              turn.pass();
            }
            if (u < n) {
              const int s = static_cast<int>((use + u) & 1u);
              Barrier64::wait(&smem.kv.k_full[s], phase_of(use + u));
              Barrier64::arrive(&smem.kv.k_empty[s]);
              // FP8: this warpgroup's share of the V still has to be widened for the other's.
              // Its arrival on v_empty then follows its own v_full arrival, after the stage's
              // previous use completed: it counts towards this use.
              if constexpr (Traits::kFp8Kv)
                widen_v(u);
              else
                Barrier64::wait(&smem.kv.v_full[s], phase_of(use + u));
              Barrier64::arrive(&smem.kv.v_empty[s]);
            }
          }
          pending = take;
        }
      }
    }
    use += n;
    Barrier64::arrive(&smem.list_empty[buf]);
    // Every row's result over the split goes to slot t.split (0 without splits); direct: to out
    // and lse, whose (query, head) indices are slot 0's.
    const int rows = t.nq * group;
    const std::int64_t slot_row = std::int64_t(t.split) * p.attn.total_q + t.q0;
    const auto target = [&](int r) {
      const int qi = r / group;
      const int h = t.kv_head * group + (r - qi * group);
      return RowDest{r < rows, h, static_cast<int>(slot_row + qi), (slot_row + qi) * p.attn.h_q + h};
    };
    // Final rows (p.direct: the prefill's, and an unsplit decode's) get the sink here; a split's
    // slot gets it in the combine.
    const bool final_rows = p.direct;
    float sink[2] = {-INFINITY, -INFINITY};
    if (final_rows && p.attn.sinks != nullptr) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float s = p.attn.sinks[t.kv_head * group + row[half] % group];
        if (isfinite(s)) sink[half] = s * kLog2e;  // a non-finite sink is ignored
      }
    }
    store_tile<Traits, true, true>(tma, final_rows ? tma.out : tma.o_partial, acc_o, st.m, st.l, sink, smem.q[qb],
                                   final_rows ? p.attn.lse : p.attn.lse_partial, opaque_tid() - 128, target, o_scale);
    Barrier64::arrive(&smem.q_empty[qb]);
    ++iter;
  }
  turn.finish();
}

}  // namespace msa::cuda::prefill_sm90
