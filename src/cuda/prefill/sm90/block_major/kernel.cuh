// The sm_90a KV-block-major sparse prefill kernel: a persistent loop over the plan's work
// items (WorkListSchedule), warp specialised like the tile-union kernel (FlashAttention-3
// structure). A step is one 128-row M tile of an item against the item's block; an item has
// ceil(q_count * G / 128) steps.
//
// Producer warpgroup (40 registers):
//   - the loader (warp 0) streams each item's K and V block into the ring (common/kv_ring.cuh);
//   - three builder warps prepare each step's Q buffer: the rows' facts (query, head, slot,
//     visible keys) from the plan's qsplit words, loaded a step ahead, and one TMA box per
//     query (its G head rows), or 16-byte cp.async row copies where a box would be one or two
//     rows (Traits::kRowCopies); Q buffers and their facts are double buffered.
// Consumer warpgroups 1 and 2 (232 registers), 64 rows each: S = Q K^T, the one-pass softmax,
// O = P V and the epilogue (normalised partial and LSE into the row's slot); the second one
// only passes the barriers of a step whose 64 rows are all padding (8-19% off the runs of
// 16-171-token chunks on 64k-128k prefixes, docs/performance.md step 63). They issue their
// WGMMAs independently: taking turns (as the tile-union kernel does) made the kernel about 1%
// slower at 2k-32k queries and no faster on small chunks (docs/performance.md, step 62).
//
// Synchronisation (mbarriers, phase = use count / buffers & 1): the ring's (kv_ring.cuh), and
//   q_full[2] (96 builder arrivals + TMA bytes     q_empty[2] (256, once the O stores read it,
//     or + cp.async completions)                   checked after the next step's S = QK^T)
// Each consumer releases a step's Q buffer only after it has seen the buffer full, idle or not.
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cute/tensor.hpp>

#include "cuda/common/ptx.cuh"
#include "cuda/common/scheduler.cuh"
#include "cuda/prefill/sm90/block_major/config.h"
#include "cuda/prefill/sm90/block_major/mainloop.cuh"
#include "cuda/prefill/sm90/block_major/params.h"
#include "cuda/prefill/sm90/common/epilogue.cuh"
#include "cuda/prefill/sm90/common/kernel.cuh"
#include "cuda/prefill/sm90/common/kv_ring.cuh"
#include "cuda/prefill/sm90/common/softmax.cuh"
#include "cuda/prefill/sm90/common/wgmma.cuh"

namespace msa::cuda::prefill_sm90 {

__device__ __forceinline__ WorkListSchedule work_schedule(const BlockMajorParams& p) {
  return WorkListSchedule{p.work, p.work_count};
}

// One block per item, into the item's stage.
template <class Traits>
__device__ __forceinline__ void loader(const BlockMajorParams& p, const PrefillTma& tma,
                                       BlockMajorStorage<Traits>& smem) {
  KvLoader<Traits> kv{p.attn, tma, smem.kv};
  const WorkListSchedule sched = work_schedule(p);
  for (const int pos : sched.mine()) {
    const ItemCoords it = load_item(p, sched.item(pos));
    kv.load(it.kv_head, it.b, it.block_start, it.k_len, p.kv_once);
  }
}

// Builder bt (0..95) owns tile rows bt and bt + 96 (< 128) of every step.
template <class Traits>
__device__ __forceinline__ void builders(const BlockMajorParams& p, const PrefillTma& tma,
                                         BlockMajorStorage<Traits>& smem) {
  constexpr int kRows = Traits::kTileM;
  const WorkListSchedule sched = work_schedule(p);
  const int count = sched.size();
  int pos = blockIdx.x;
  if (pos >= count) return;
  ItemCoords it = load_item(p, sched.item(pos));
  // The block's valid-page chunks, read with the item (their latency hides behind the next
  // wait for a free Q buffer); builder 0 publishes them with each step's row facts.
  std::uint32_t chunks = block_chunks(p.attn, it.b, it.block_start, it.k_len);
  int tile = 0;
  std::int32_t qs0 = row_qsplit(p, it, opaque_tid() - 32);
  std::int32_t qs1 =
      opaque_tid() - 32 + kBuilderThreads < kRows ? row_qsplit(p, it, opaque_tid() - 32 + kBuilderThreads) : 0;
  for (std::uint32_t step = 0;; ++step) {
    const int bt = opaque_tid() - 32;
    const int buf = static_cast<int>(step & 1u);
    Barrier64::wait(&smem.q_empty[buf], phase_of(step) ^ 1u);
    const int base = tile * kRows;
    prepare_row<Traits>(p.attn, tma, it, base + bt, bt, qs0, smem.q[buf], smem.rows[buf], smem.q_src[buf],
                        &smem.q_full[buf]);
    if (bt + kBuilderThreads < kRows)
      prepare_row<Traits>(p.attn, tma, it, base + bt + kBuilderThreads, bt + kBuilderThreads, qs1, smem.q[buf],
                          smem.rows[buf], smem.q_src[buf], &smem.q_full[buf]);
    // Thread copies: every row's facts first, then the rows. Their completion is an arrival of
    // its own on q_full (the barrier's pending count is raised now and lowered as they land),
    // so the builders go on without waiting; the consumers fence the rows to WGMMA's proxy.
    if constexpr (Traits::kRowCopies) {
      named_barrier_sync(kBuilders, kBuilderThreads);
      gather_q_rows<Traits>(p.attn, smem.q_src[buf], smem.q[buf], bt);
      asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(
                       static_cast<std::uint32_t>(__cvta_generic_to_shared(&smem.q_full[buf])))
                   : "memory");
    }
    // Each builder's arrival publishes its row facts; builder 0 also arms the Q bytes of TMA
    // boxes (completions may come first: the transaction count goes negative meanwhile).
    if (bt == 0) {
      smem.chunks[buf] = chunks;
      const int real = Traits::kRowCopies ? 0 : max(0, min(kRows, it.rows - base));
      Barrier64::arrive_and_expect_tx(
          &smem.q_full[buf], static_cast<std::uint32_t>(real * Traits::kHeadDim * sizeof(typename Traits::Element)));
    } else {
      Barrier64::arrive(&smem.q_full[buf]);
    }
    // The next step, and its qsplit words (their latency hides behind the next wait).
    if (++tile == item_steps<Traits>(it.rows)) {
      pos = next_position(pos);
      if (pos >= count) break;
      it = load_item(p, sched.item(pos));
      chunks = block_chunks(p.attn, it.b, it.block_start, it.k_len);
      tile = 0;
    }
    qs0 = row_qsplit(p, it, tile * kRows + bt);
    qs1 = bt + kBuilderThreads < kRows ? row_qsplit(p, it, tile * kRows + bt + kBuilderThreads) : 0;
  }
}

template <class Traits>
__device__ __forceinline__ void consumers(const BlockMajorParams& p, const PrefillTma& tma,
                                          BlockMajorStorage<Traits>& smem, int ct) {
  int row[2];
  accumulator_rows<Traits>(ct, row);

  const WorkListSchedule sched = work_schedule(p);
  const int count = sched.size();
  std::uint32_t step = 0;
  std::uint32_t use = 0;
  // The previous step's O stores are read out of its Q buffer while this step's S = QK^T runs;
  // the buffer is released once they have (stores_read), not at the end of its own step.
  int pending = -1;  // Q buffer whose stores may still be reading it
  // The next item's row count, read an item ahead.
  int rows = blockIdx.x < count ? sched.item(blockIdx.x).q_count * p.attn.group : 0;
  static_assert(Traits::kRingStages == kStages, "stages taken as use & 1");
  for (const int pos : sched.mine()) {
    const int s = static_cast<int>(use & 1u);
    const int item_rows = rows;
    const int steps = item_steps<Traits>(rows);
    const int next = next_position(pos);
    rows = next < count ? sched.item(next).q_count * p.attn.group : 0;
    for (int tile = 0; tile < steps; ++tile, ++step) {
      const int buf = static_cast<int>(step & 1u);
      const bool last = tile + 1 == steps;
      Barrier64::wait(&smem.q_full[buf], phase_of(step));
      // Rows copied by threads (generic proxy) are read by WGMMA (async proxy).
      if constexpr (Traits::kRowCopies) cutlass::arch::fence_view_async_shared();
      const RowInfo* facts = smem.rows[buf];
      const std::uint32_t chunks = smem.chunks[buf];
      int key_limit[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) key_limit[half] = facts[row[half]].key_limit;

      // The second consumer warpgroup's 64 rows are all padding where the item's last step
      // holds at most 64 rows (the one step of an item of at most 4 queries at G = 16, the last
      // of one of 9-12): it then issues no GEMM, softmax or store, only the ring's and the Q
      // buffer's barriers. The test is made warp-uniform (a shuffle) so that ptxas keeps the
      // WGMMAs asynchronous, and the accumulators live inside the busy branch only, so that no
      // path reads them unwritten.
      const bool idle = warp_uniform(tile * Traits::kTileM + (ct / 128) * 64 >= item_rows ? 1 : 0) != 0;
      if (idle) {
        Barrier64::wait(&smem.kv.k_full[s], phase_of(use));
        if (last) Barrier64::arrive(&smem.kv.k_empty[s]);
        if (pending >= 0) {
          stores_read();
          Barrier64::arrive(&smem.q_empty[pending]);
        }
        Barrier64::wait(&smem.kv.v_full[s], phase_of(use));
        if (last) Barrier64::arrive(&smem.kv.v_empty[s]);
        // No stores read this buffer, but the release waits for it to be full. A release
        // before that could count towards the buffer's previous use: at items of 9-12 queries
        // (a busy step, then an idle one) this warpgroup's idle arrivals for steps s and s + 2
        // could complete the buffer's release of step s while the other warpgroup still stages
        // step s's O in it (docs/performance.md step 73).
        Barrier64::wait(&smem.q_full[buf], phase_of(step));
        Barrier64::arrive(&smem.q_empty[buf]);
        pending = -1;
        continue;
      }
      auto acc_s = make_acc_s<Traits>();
      Barrier64::wait(&smem.kv.k_full[s], phase_of(use));
      cute::warpgroup_fence_operand(acc_s);
      cute::warpgroup_arrive();
      issue_qk<Traits>(smem.q[buf], smem.kv.k[s], ct, acc_s);
      cute::warpgroup_commit_batch();
      cute::warpgroup_wait<0>();
      cute::warpgroup_fence_operand(acc_s);
      if (last) Barrier64::arrive(&smem.kv.k_empty[s]);
      if (pending >= 0) {
        stores_read();
        Barrier64::arrive(&smem.q_empty[pending]);
        pending = -1;
      }

      auto frag_p = make_frag_p<Traits>();
      float m_scaled[2], row_sum[2];
      // A row that sees all 128 keys proves the block wholly below k_len (every row of a step
      // chose its block; limit 0 is a padding row's).
      const bool whole = __any_sync(0xffffffffu, key_limit[0] == kBlockSize || key_limit[1] == kBlockSize);
      softmax_one_pass(acc_s, frag_p, key_limit, chunks, whole, p.attn.scale_log2, ct, m_scaled, row_sum);

      auto acc_o = make_acc_o<Traits>();
      Barrier64::wait(&smem.kv.v_full[s], phase_of(use));
      cute::warpgroup_fence_operand(frag_p);
      cute::warpgroup_fence_operand(acc_o);
      cute::warpgroup_arrive();
      issue_pv<Traits, false>(frag_p, smem.kv.v[s], ct, acc_o);
      cute::warpgroup_commit_batch();
      cute::warpgroup_wait<0>();
      cute::warpgroup_fence_operand(acc_o);
      if (last) Barrier64::arrive(&smem.kv.v_empty[s]);

      // Each row goes to its edge's slot: row slot * total_q + qg of o_partial seen as
      // [topk * total_q, h_q, d] (< 2^31, asserted at launch), and of lse_partial. A slot past
      // the partials (a qsplit word no valid plan makes: a batch broken on the device) is not
      // stored.
      const auto target = [&](int r) {
        const RowInfo info = facts[r];
        const int o_row = info.slot * static_cast<int>(p.attn.total_q) + info.qg;
        return RowDest{info.qg >= 0 && info.slot < p.attn.slots, info.h, o_row,
                       std::int64_t(o_row) * p.attn.h_q + info.h};
      };
      const float no_sink[2] = {-INFINITY, -INFINITY};  // the combine applies sinks
      // o_partial as [slots * total_q, h_q, d].
      const OutRows o_rows{&tma.o_partial, p.attn.o_partial, std::int64_t{p.attn.h_q} * Traits::kHeadDim,
                           Traits::kHeadDim};
      store_tile<Traits, false>(tma, o_rows, acc_o, m_scaled, row_sum, no_sink, smem.q[buf], p.attn.lse_partial,
                                opaque_tid() - 128, target);
      pending = buf;
    }
    ++use;
  }
  if (pending >= 0) {
    stores_read();
    Barrier64::arrive(&smem.q_empty[pending]);
  }
  stores_complete();
}

}  // namespace msa::cuda::prefill_sm90
