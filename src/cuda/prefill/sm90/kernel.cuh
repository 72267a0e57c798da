// The sm_90a KV-block-major sparse prefill kernel: a persistent loop over work items; per
// item the block's K/V is loaded once and stays resident while the item's M tiles of packed
// (query, head) rows stream through a double-buffered Q gather.
//
// Roles: two warpgroups, both loading (cp.async, all 256 threads) and both computing (each
// owns 64 rows of the 128-row M tile). No producer warpgroup: loads are issued between math
// phases and run one step ahead, a step being one M tile of one item.
//
// Pipeline: the CTA's steps form one stream across its items. Each step's loads are one
// cp.async group issued during the previous step (Q of the next tile, or K + V + Q tile 0
// of the next item into the other K/V buffer), so every step starts with wait_group 0, the
// proxy fence (WGMMA reads what cp.async wrote) and a barrier. That barrier also retires the
// previous step, whose buffers (the other Q buffer; at an item's last tile the other K/V
// buffer, last used by the item before) the new prefetch then overwrites.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

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

// Loads of the first step of an item: K, V into K/V buffer kv_buf and Q tile 0 into q_buf.
template <class Traits>
__device__ __forceinline__ void load_item_start(const PrefillParams& p, const ItemCoords& it,
                                                typename Traits::SharedStorage& smem, int kv_buf,
                                                int q_buf, int tid) {
  using Main = Mainloop<Traits>;
  Main::template load_kv<0>(p, it, smem.k[kv_buf], tid);
  Main::template load_kv<1>(p, it, smem.v[kv_buf], tid);
  Main::load_q_tile(p, it, 0, smem.q[q_buf], smem.rows[q_buf], tid);
  cp_async_commit();
}

// The math of one step (its loads have landed): S, softmax, P V and the epilogue for the two
// warpgroups' rows of M tile q_buf against K/V buffer kv_buf. `prefetch()` issues the next
// step's loads while the S WGMMAs run, hiding its dependent plan reads (qsplit, work item).
template <class Traits, class Prefetch>
__device__ __forceinline__ void compute_tile(const PrefillParams& p,
                                             typename Traits::SharedStorage& smem, int kv_buf,
                                             int q_buf, int tid, Prefetch&& prefetch) {
  using namespace cute;
  using Main = Mainloop<Traits>;
  Tensor acc_s = partition_fragment_C(typename Traits::MmaQK{},
                                      Shape<Int<Traits::kTileM>, Int<Traits::kBlockN>>{});
  Main::gemm_qk(smem.q[q_buf], smem.k[kv_buf], tid, acc_s, prefetch);

  auto frag_p = Main::make_frag_p();
  float m_scaled[2], row_sum[2];
  Main::softmax(acc_s, frag_p, smem.rows[q_buf], p.scale_log2, tid, m_scaled, row_sum);

  Tensor acc_o = partition_fragment_C(typename Traits::MmaPV{},
                                      Shape<Int<Traits::kTileM>, Int<Traits::kHeadDim>>{});
  Main::gemm_pv(frag_p, smem.v[kv_buf], tid, acc_o);

  Epilogue<Traits>::store(p, acc_o, m_scaled, row_sum, smem.q[q_buf], smem.rows[q_buf], tid);
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    prefill_sm90_kernel(const __grid_constant__ PrefillParams p) {
  using Main = Mainloop<Traits>;
  extern __shared__ std::uint8_t smem_raw[];
  auto& smem = *reinterpret_cast<typename Traits::SharedStorage*>(
      (reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t(1023));
  const int tid = threadIdx.x;

  // PDL: the plan (work list, qsplit) may come from the previous kernel in the stream.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int work_count = *p.work_count;

  int item = blockIdx.x;
  if (item < work_count) {
    ItemCoords it = load_item(p, item);
    int kv_buf = 0, q_buf = 0;
    load_item_start<Traits>(p, it, smem, kv_buf, q_buf, tid);
    while (true) {
      const int tiles = item_tiles(it, Traits::kTileM);
      const int next_item = item + static_cast<int>(gridDim.x);
      ItemCoords next{};
      for (int tile = 0; tile < tiles; ++tile) {
        cp_async_wait<0>();
        fence_proxy_async_shared();
        __syncthreads();
        compute_tile<Traits>(p, smem, kv_buf, q_buf, tid, [&] {
          if (tile + 1 < tiles) {
            Main::load_q_tile(p, it, tile + 1, smem.q[q_buf ^ 1], smem.rows[q_buf ^ 1], tid);
            cp_async_commit();
          } else if (next_item < work_count) {
            next = load_item(p, next_item);
            load_item_start<Traits>(p, next, smem, kv_buf ^ 1, q_buf ^ 1, tid);
          }
        });
        q_buf ^= 1;
      }
      if (next_item >= work_count) break;
      item = next_item;
      it = next;
      kv_buf ^= 1;
    }
  }

  // Let the combine kernel launch; it still waits for this grid's writes to be visible.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace msa::cuda::prefill_sm90
