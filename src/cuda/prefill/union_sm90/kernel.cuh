// The sm_90a query-major tile-union sparse prefill kernel: a persistent loop over (KV head,
// query tile) pairs. Per tile, Q stays in shared memory; per segment (one request's part of
// the tile) the union of its queries' selected blocks is built, and every union block's K/V
// is loaded once (double buffered, one block ahead) for both warpgroups' 64 rows each, which
// fold it into their online softmax. No partials per block and no plan: the tile writes one
// final slot per row.
//
// Roles: two warpgroups, all threads loading (cp.async), each warpgroup computing its 64 rows.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

#include "cuda/prefill/union_sm90/epilogue.cuh"
#include "cuda/prefill/union_sm90/mainloop.cuh"

namespace msa::cuda::union_sm90 {

__device__ __forceinline__ void load_block(const UnionParams& p, const Tile& t, const Segment& s, int block,
                                           SharedStorage& smem, int buf, int tid) {
  prefill_sm90::ItemCoords it{};
  it.kv_head = t.kv_head;
  it.b = s.b;
  it.block_start = block * Traits::kBlockN;
  it.tokens = max(0, min(Traits::kBlockN, s.k_len - it.block_start));
  Main::load_kv<0, false>(p.attn, it, smem.k[buf], tid);
  Main::load_kv<1, false>(p.attn, it, smem.v[buf], tid);
  prefill_sm90::cp_async_commit();
}

__global__ void __launch_bounds__(Traits::kThreads, 1) union_sm90_kernel(const __grid_constant__ UnionParams p) {
  using namespace cute;
  extern __shared__ std::uint8_t smem_raw[];
  auto& smem = *reinterpret_cast<SharedStorage*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) &
                                                 ~std::uintptr_t(1023));
  __shared__ BlockScan::TempStorage scan_temp;
  const int tid = threadIdx.x;
  const std::int64_t tiles_per_head = p.tiles / p.attn.h_kv;

  // PDL: top-k ids and the batch may come from the previous kernel in the stream.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");

  for (std::int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    Tile t;
    t.kv_head = static_cast<int>(tile / tiles_per_head);
    t.q0 = static_cast<int>((tile - t.kv_head * tiles_per_head) * p.q_per_tile);
    t.nq = static_cast<int>(min(std::int64_t(p.q_per_tile), p.attn.total_q - t.q0));
    load_q(p, t, smem.q, tid);
    prefill_sm90::cp_async_commit();

    Tensor acc_o = partition_fragment_C(Traits::MmaPV{}, Shape<Int<Traits::kTileM>, Int<Traits::kHeadDim>>{});
    clear(acc_o);
    SoftmaxState st{{-INFINITY, -INFINITY}, {0.f, 0.f}};

    for (int begin = t.q0; begin < t.q0 + t.nq;) {
      const Segment s = make_segment(p, begin, t.q0 + t.nq);
      build_union(p, t, s, smem, scan_temp, tid);
      const int n = smem.union_size;
      if (n > 0) load_block(p, t, s, smem.blocks[0], smem, 0, tid);
      for (int u = 0; u < n; ++u) {
        const int buf = u & 1;
        if (u + 1 < n) {
          load_block(p, t, s, smem.blocks[u + 1], smem, buf ^ 1, tid);
          prefill_sm90::cp_async_wait<1>();
        } else {
          prefill_sm90::cp_async_wait<0>();
        }
        prefill_sm90::fence_proxy_async_shared();
        __syncthreads();
        const int block_start = smem.blocks[u] * Traits::kBlockN;
        Tensor acc_s = partition_fragment_C(Traits::MmaQK{}, Shape<Int<Traits::kTileM>, Int<Traits::kBlockN>>{});
        Main::gemm_qk(smem.q, smem.k[buf], tid, acc_s, [] {});
        auto frag_p = Main::make_frag_p();
        softmax_online(acc_s, frag_p, acc_o, smem, block_start, max(0, min(Traits::kBlockN, s.k_len - block_start)),
                       smem.members[u], p.attn.scale_log2, st, tid);
        Main::gemm_pv(frag_p, smem.v[buf], tid, acc_o, /*accumulate=*/true);
        // Both warpgroups are done with this buffer before the next iteration refills it.
        __syncthreads();
      }
      begin = s.end;
    }
    // A tile without blocks never waited for its Q gather; the epilogue overwrites that buffer.
    prefill_sm90::cp_async_wait<0>();
    __syncthreads();
    store_tile(p, t, acc_o, st, smem.q, tid);
    __syncthreads();  // the stores have read the staged O before the next tile's Q lands there
  }
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace msa::cuda::union_sm90
