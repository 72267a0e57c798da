// The sm_90a KV-block-major sparse prefill kernel: a persistent loop over work items (CTA c
// takes items c, c + gridDim.x, ... below *work_count), warp specialised like the tile-union
// kernel (FlashAttention-3 structure). A step is one 128-row M tile of an item against the
// item's block; an item has ceil(q_count * G / 128) steps.
//
// Producer warpgroup (40 registers):
//   - the loader (warp 0) streams each item's K and V block with TMA into 2-stage rings (one
//     stage per item, so the next item's block loads while this one computes), and zeroes the
//     V rows past k_len of a request's last block (stale cache memory may hold NaN);
//   - three builder warps prepare each step's Q buffer: the rows' facts (query, head, slot,
//     visible keys) from the plan's qsplit words, loaded a step ahead, and one TMA box per
//     query (its G head rows); Q buffers and their facts are double buffered.
// Consumer warpgroups 1 and 2 (232 registers), 64 rows each: S = Q K^T, the one-pass softmax,
// O = P V and the epilogue (normalised partial and LSE into the row's slot). A named-barrier
// turn makes the two warpgroups alternate their WGMMA issue, so one's softmax and epilogue run
// while the other's GEMMs occupy the tensor cores.
//
// Synchronisation (mbarriers, phase = use count / buffers & 1):
//   k_full[2], v_full[2] (TMA bytes)    k_empty[2], v_empty[2] (256, after an item's last step)
//   q_full[2] (96 builder arrivals + TMA bytes)   q_empty[2] (256, after the O stores read it)
//   v_tail (loader only: the V load of a block it zero-fills)
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "cuda/prefill/sm90/config.h"
#include "cuda/prefill/sm90/epilogue.cuh"
#include "cuda/prefill/sm90/mainloop.cuh"
#include "cuda/prefill/sm90/params.h"

namespace msa::cuda::prefill_sm90 {

__device__ __forceinline__ void run_loader(const PrefillParams& p, const PrefillTma& tma, SharedStorage& smem) {
  const int work_count = *p.work_count;
  std::uint32_t use = 0;
  std::uint32_t tail_phase = 0;
  for (int item = blockIdx.x; item < work_count; item += gridDim.x, ++use) {
    const int lane = opaque_tid();
    const ItemCoords it = load_item(p, item);
    load_kv_stage(p, tma, smem, use, it.kv_head, it.b, it.block_start, it.k_len, tail_phase, lane);
  }
}

// Builder bt (0..95) owns tile rows bt and bt + 96 (< 128) of every step.
__device__ __forceinline__ void run_builders(const PrefillParams& p, const PrefillTma& tma, SharedStorage& smem) {
  const int work_count = *p.work_count;
  int item = blockIdx.x;
  if (item >= work_count) return;
  ItemCoords it = load_item(p, item);
  // The block's valid-page chunks, read with the item (their latency hides behind the next
  // wait for a free Q buffer); builder 0 publishes them with each step's row facts.
  std::uint32_t chunks = block_chunks(p, it.b, it.block_start, it.k_len);
  int tile = 0;
  constexpr int kRows = TmaTraits::kTileM;
  std::uint32_t qs0 = row_qsplit(p, it, opaque_tid() - 32);
  std::uint32_t qs1 = opaque_tid() - 32 + kBuilderThreads < kRows ? row_qsplit(p, it, opaque_tid() - 32 + kBuilderThreads) : 0u;
  for (std::uint32_t step = 0;; ++step) {
    const int bt = opaque_tid() - 32;
    const int buf = static_cast<int>(step & 1u);
    Barrier64::wait(&smem.q_empty[buf], phase_of(step) ^ 1u);
    const int base = tile * kRows;
    prepare_row(p, tma, it, base + bt, bt, qs0, smem.q[buf], smem.rows[buf], &smem.q_full[buf]);
    if (bt + kBuilderThreads < kRows)
      prepare_row(p, tma, it, base + bt + kBuilderThreads, bt + kBuilderThreads, qs1, smem.q[buf], smem.rows[buf],
                  &smem.q_full[buf]);
    // Each builder's arrival publishes its row facts; builder 0 also arms the Q bytes (TMA
    // completions may come first: the transaction count goes negative meanwhile).
    if (bt == 0) {
      smem.chunks[buf] = chunks;
      const int real = max(0, min(kRows, it.rows - base));
      Barrier64::arrive_and_expect_tx(&smem.q_full[buf],
                                      static_cast<std::uint32_t>(real * TmaTraits::kHeadDim * sizeof(Element)));
    } else {
      Barrier64::arrive(&smem.q_full[buf]);
    }
    // The next step, and its qsplit words (their latency hides behind the next wait).
    if (++tile == item_tiles(it)) {
      item += gridDim.x;
      if (item >= work_count) break;
      it = load_item(p, item);
      chunks = block_chunks(p, it.b, it.block_start, it.k_len);
      tile = 0;
    }
    qs0 = row_qsplit(p, it, tile * kRows + bt);
    qs1 = bt + kBuilderThreads < kRows ? row_qsplit(p, it, tile * kRows + bt + kBuilderThreads) : 0u;
  }
}

__device__ __forceinline__ void run_consumers(const PrefillParams& p, const PrefillTma& tma, SharedStorage& smem,
                                              int ct) {
  using namespace cute;
  const Turn turn{ct / 128};
  turn.start();

  typename TmaTraits::MmaQK mma_qk;
  Tensor tScS = mma_qk.get_slice(ct).partition_C(make_identity_tensor(Shape<Int<TmaTraits::kTileM>, Int<TmaTraits::kBlockN>>{}));
  int row[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) row[half] = get<0>(tScS(2 * half));

  const int work_count = *p.work_count;
  std::uint32_t step = 0;
  std::uint32_t use = 0;
  int rows = blockIdx.x < work_count ? p.work[std::int64_t(blockIdx.x) * 6 + 3] * p.group : 0;
  for (int item = blockIdx.x; item < work_count; item += gridDim.x, ++use) {
    const int s = static_cast<int>(use & 1u);
    const int tiles = max(1, (rows + TmaTraits::kTileM - 1) / TmaTraits::kTileM);
    // The next item's row count, read early.
    const int next = item + static_cast<int>(gridDim.x);
    rows = next < work_count ? p.work[std::int64_t(next) * 6 + 3] * p.group : 0;
    for (int tile = 0; tile < tiles; ++tile, ++step) {
      const int buf = static_cast<int>(step & 1u);
      const bool last = tile + 1 == tiles;
      Barrier64::wait(&smem.q_full[buf], phase_of(step));
      const RowInfo* facts = smem.rows[buf];
      const std::uint32_t chunks = smem.chunks[buf];
      int key_limit[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) key_limit[half] = facts[row[half]].key_limit;

      Tensor acc_s = partition_fragment_C(TmaTraits::MmaQK{}, Shape<Int<TmaTraits::kTileM>, Int<TmaTraits::kBlockN>>{});
      Barrier64::wait(&smem.k_full[s], phase_of(use));
      turn.sync();
      warpgroup_fence_operand(acc_s);
      warpgroup_arrive();
      issue_qk(smem.q[buf], smem.k[s], ct, acc_s);
      warpgroup_commit_batch();
      turn.pass();
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc_s);
      if (last) Barrier64::arrive(&smem.k_empty[s]);

      auto frag_p = make_frag_p();
      float m_scaled[2], row_sum[2];
      softmax_block(acc_s, frag_p, key_limit, chunks, p.scale_log2, ct, m_scaled, row_sum);

      Tensor acc_o = partition_fragment_C(TmaTraits::MmaPV{}, Shape<Int<TmaTraits::kTileM>, Int<TmaTraits::kHeadDim>>{});
      Barrier64::wait(&smem.v_full[s], phase_of(use));
      turn.sync();
      warpgroup_fence_operand(frag_p);
      warpgroup_fence_operand(acc_o);
      warpgroup_arrive();
      issue_pv<false>(frag_p, smem.v[s], ct, acc_o);
      warpgroup_commit_batch();
      turn.pass();
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc_o);
      if (last) Barrier64::arrive(&smem.v_empty[s]);

      store_step(p, tma, acc_o, m_scaled, row_sum, smem.q[buf], facts, opaque_tid() - 128);
      Barrier64::arrive(&smem.q_empty[buf]);
    }
  }
  turn.finish();
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");  // O stores complete
}

__global__ void __launch_bounds__(kThreads, 1)
    prefill_sm90_kernel(const __grid_constant__ PrefillParams p, const __grid_constant__ PrefillTma tma) {
  extern __shared__ std::uint8_t smem_raw[];
  auto& smem = *reinterpret_cast<SharedStorage*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) &
                                                 ~std::uintptr_t(1023));
  const int tid = threadIdx.x;
  if (tid == 0) {
    init_kv_ring(smem);
    for (int i = 0; i < 2; ++i) {
      Barrier64::init(&smem.q_full[i], kBuilderThreads);
      Barrier64::init(&smem.q_empty[i], kConsumerThreads);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  // PDL: the plan (work list, qsplit) may come from the previous kernel in the stream.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");

  if (tid < 128) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (tid < 32) run_loader(p, tma, smem);
    else run_builders(p, tma, smem);
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    run_consumers(p, tma, smem, tid - 128);
  }
  // Let the combine kernel launch; it still waits for this grid's writes to be visible.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace msa::cuda::prefill_sm90
