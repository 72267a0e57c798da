// The sm_90a KV-block-major sparse prefill kernel: a persistent loop over work items; per
// item the block's K/V is loaded once and stays resident while the item's M tiles of packed
// (query, head) rows stream through a double-buffered Q gather.
//
// Roles: one warpgroup that loads (K/V: cp.async, every thread; Q: TMA, one thread per query
// box), computes (64 rows of the M tile) and stores (TMA, one thread per query box). No
// producer warpgroup: loads are issued between math phases and run one step ahead, a step
// being one M tile of one item.
//
// Pipeline: the CTA's steps form one stream across its items. Each step's loads are issued
// during the previous step (Q of the next tile; at an item's last tile Q tile 0 of the next
// item and, once that tile's P V has read V, the next item's K + V), so every step starts
// with wait_group 0 (K/V), the proxy fence (WGMMA reads what cp.async wrote), the wait on the
// Q buffer's mbarrier and a barrier. That barrier also publishes the RowInfo written with the
// prefetch and retires the previous step, whose Q buffer the new prefetch then overwrites.
// K/V is single buffered, so an item's first step waits for its K/V load; the second CTA
// resident on the SM computes meanwhile.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/prefill/sm90/config.h"
#include "cuda/prefill/sm90/epilogue.cuh"
#include "cuda/prefill/sm90/mainloop.cuh"
#include "cuda/prefill/sm90/params.h"

namespace msa::cuda::prefill_sm90 {

// M tiles of an item; an item without rows still takes one (all-padding, writes nothing) step
// so that the load stream stays one group per step.
__device__ __forceinline__ int item_tiles(const ItemCoords& it, int tile_m) {
  return max(1, (it.rows + tile_m - 1) / tile_m);
}

// Issues the item's K and V block loads (the caller commits the cp.async group).
template <class Traits>
__device__ __forceinline__ void load_item_kv(const PrefillParams& p, const ItemCoords& it,
                                             typename Traits::SharedStorage& smem, int tid) {
  using Main = Mainloop<Traits>;
  Main::template load_kv<0>(p, it, smem.k, tid);
  Main::template load_kv<1>(p, it, smem.v, tid);
}

// The math of one step (its loads have landed): S, softmax, P V and the epilogue for the
// warpgroups' rows of M tile q_buf against the item's K/V. `prefetch()` issues the next
// step's loads while the S WGMMAs run, hiding its dependent plan reads (qsplit, work item);
// `after_pv()` runs once K and V are no longer read, before the epilogue's stores.
template <class Traits, class Prefetch, class AfterPv>
__device__ __forceinline__ void compute_tile(const PrefillParams& p, const PrefillTma& tma,
                                             typename Traits::SharedStorage& smem, int q_buf,
                                             int tid, Prefetch&& prefetch,
                                             AfterPv&& after_pv) {
  using namespace cute;
  using Main = Mainloop<Traits>;
  Tensor acc_s = partition_fragment_C(typename Traits::MmaQK{},
                                      Shape<Int<Traits::kTileM>, Int<Traits::kBlockN>>{});
  Main::gemm_qk(smem.q[q_buf], smem.k, tid, acc_s, prefetch);

  auto frag_p = Main::make_frag_p();
  float m_scaled[2], row_sum[2];
  Main::softmax(acc_s, frag_p, smem.rows[q_buf], p.scale_log2, tid, m_scaled, row_sum);

  Tensor acc_o = partition_fragment_C(typename Traits::MmaPV{},
                                      Shape<Int<Traits::kTileM>, Int<Traits::kHeadDim>>{});
  Main::gemm_pv(frag_p, smem.v, tid, acc_o);
  after_pv();

  Epilogue<Traits>::store(p, tma, acc_o, m_scaled, row_sum, smem.q[q_buf], smem.rows[q_buf], tid);
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kCtasPerSm)
    prefill_sm90_kernel(const __grid_constant__ PrefillParams p, const __grid_constant__ PrefillTma tma) {
  using Main = Mainloop<Traits>;
  extern __shared__ std::uint8_t smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(
      (reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t(1023));
  const int tid = threadIdx.x;
  if (tid == 0) {
    cutlass::arch::ClusterTransactionBarrier::init(&smem.q_full[0], 1);
    cutlass::arch::ClusterTransactionBarrier::init(&smem.q_full[1], 1);
    cutlass::arch::fence_barrier_init();  // the TMA unit sees initialised barriers
  }
  __syncthreads();

  // PDL: the plan (work list, qsplit) may come from the previous kernel in the stream.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int work_count = *p.work_count;

  int item = blockIdx.x;
  if (item < work_count) {
    ItemCoords it = load_item(p, item);
    int q_buf = 0;
    std::uint32_t phases = 0;  // bit b: parity of the next completion of q_full[b]
    load_item_kv<Traits>(p, it, smem, tid);
    cp_async_commit();
    Main::load_q_tile(p, tma, it, 0, smem.q[q_buf], smem.rows[q_buf], &smem.q_full[q_buf], tid);
    while (true) {
      const int tiles = item_tiles(it, Traits::kTileM);
      const int next_item = item + static_cast<int>(gridDim.x);
      ItemCoords next{};
      for (int tile = 0; tile < tiles; ++tile) {
        cp_async_wait<0>();
        fence_proxy_async_shared();
        cutlass::arch::ClusterTransactionBarrier::wait(&smem.q_full[q_buf], (phases >> q_buf) & 1u);
        phases ^= 1u << q_buf;
        __syncthreads();
        const bool last = tile + 1 == tiles;
        compute_tile<Traits>(
            p, tma, smem, q_buf, tid,
            [&] {
              if (!last) {
                Main::load_q_tile(p, tma, it, tile + 1, smem.q[q_buf ^ 1], smem.rows[q_buf ^ 1],
                                  &smem.q_full[q_buf ^ 1], tid);
              } else if (next_item < work_count) {
                next = load_item(p, next_item);
                // Its K/V follow once K and V are read (below).
                Main::load_q_tile(p, tma, next, 0, smem.q[q_buf ^ 1], smem.rows[q_buf ^ 1],
                                  &smem.q_full[q_buf ^ 1], tid);
              }
            },
            [&] {
              if (last && next_item < work_count) {
                // Every warp's S and P V WGMMAs have completed: K and V are free.
                __syncthreads();
                load_item_kv<Traits>(p, next, smem, tid);
                cp_async_commit();
              }
            });
        q_buf ^= 1;
      }
      if (next_item >= work_count) break;
      item = next_item;
      it = next;
    }
  }

  // The partials this thread stored with TMA are written before the combine may start.
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  // Let the combine kernel launch; it still waits for this grid's writes to be visible.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace msa::cuda::prefill_sm90
