// The sm_90a query-major tile-union sparse prefill kernel: a persistent loop over (KV head,
// query tile) pairs (all of them, or the list PrefillPath::kAuto routed here), warp specialised.
//
// Producer warpgroup (40 registers):
//   - builders (warps 1-3) build each tile's union list and gather its Q with TMA into the
//     tile's list / Q buffer (double buffered: tile i + 1 is built while tile i computes);
//   - the loader (warp 0) streams every union block's K and V with TMA into 2-stage rings.
//     A block that ends past k_len has its V rows there zeroed by the loader before it is
//     published (P is 0 there, but 0 * NaN from stale cache memory is not).
// Consumer warpgroups 1 and 2 (232 registers), 64 rows each: per union block u they issue
// S(u) = Q K(u)^T together with O += P(u-1) V(u-1), then mask and fold S(u) into the online
// softmax. A named-barrier turn makes the two warpgroups alternate their WGMMA issue, so one's
// softmax runs while the other's GEMMs occupy the tensor cores.
//
// Synchronisation (mbarriers, phase = use count / buffers & 1):
//   list_full[2] (96 builder arrivals)   list_empty[2] (256 consumer arrivals)
//   q_full[2]    (TMA bytes)             q_empty[2]    (256, after the O stores read it)
//   k_full[2], v_full[2] (TMA bytes)     k_empty[2], v_empty[2] (256, after the WGMMA read)
//   v_tail (loader only: the V load of a block it zero-fills)
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "cuda/prefill/union_sm90/epilogue.cuh"
#include "cuda/prefill/union_sm90/mainloop.cuh"

namespace msa::cuda::union_sm90 {

// The persistent schedule: CTA c runs the tiles at positions c, c + gridDim.x, ... of the
// list (every tile when there is none). Every role walks the same positions.
__device__ __forceinline__ int tiles_to_run(const UnionParams& p) {
  return p.tile_list != nullptr ? min(max(*p.tile_count, 0), static_cast<int>(p.tiles)) : static_cast<int>(p.tiles);
}
__device__ __forceinline__ int tile_at(const UnionParams& p, int i) {
  return p.tile_list != nullptr ? p.tile_list[i] : i;
}

__device__ __forceinline__ void run_builders(const UnionParams& p, const PrefillTma& tma, SharedStorage& smem) {
  int iter = 0;
  for (int i = blockIdx.x; i < tiles_to_run(p); i += gridDim.x, ++iter) {
    const int buf = iter & 1;
    const Tile t = make_tile(p, tile_at(p, i));
    Barrier64::wait(&smem.list_empty[buf], phase_of(iter) ^ 1u);
    const int bt = opaque_tid() - 32;
    build_list(p, t, smem, smem.list[buf], bt);
    Barrier64::wait(&smem.q_empty[buf], phase_of(iter) ^ 1u);
    load_q(p, tma, t, smem.q[buf], &smem.q_full[buf], bt);
    Barrier64::arrive(&smem.list_full[buf]);
  }
}

__device__ __forceinline__ void run_loader(const UnionParams& p, const PrefillTma& tma, SharedStorage& smem) {
  int iter = 0;
  std::uint32_t use = 0;
  std::uint32_t tail_phase = 0;
  for (int i = blockIdx.x; i < tiles_to_run(p); i += gridDim.x, ++iter) {
    const int buf = iter & 1;
    const Tile t = make_tile(p, tile_at(p, i));
    Barrier64::wait(&smem.list_full[buf], phase_of(iter));
    const UnionList& list = smem.list[buf];
    const int n = list.size;
    for (int u = 0; u < n; ++u, ++use) {
      const int lane = opaque_tid();
      const UnionEntry e = union_entry(list, u);
      load_kv_stage(p.attn, tma, smem, use, t.kv_head, e.b, e.block_start, e.k_len, tail_phase, lane);
    }
  }
}

__device__ __forceinline__ void run_consumers(const UnionParams& p, const PrefillTma& tma, SharedStorage& smem, int ct) {
  using namespace cute;
  const int group = p.attn.group;
  const Turn turn{ct / 128};
  turn.start();

  typename Traits::MmaQK mma_qk;
  Tensor tScS = mma_qk.get_slice(ct).partition_C(make_identity_tensor(Shape<Int<Traits::kTileM>, Int<Traits::kBlockN>>{}));
  int row[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) row[half] = get<0>(tScS(2 * half));

  int iter = 0;
  std::uint32_t use = 0;
  for (int i = blockIdx.x; i < tiles_to_run(p); i += gridDim.x, ++iter) {
    const int buf = iter & 1;
    const Tile t = make_tile(p, tile_at(p, i));
    Barrier64::wait(&smem.list_full[buf], phase_of(iter));
    const UnionList& list = smem.list[buf];
    const int n = list.size;
    // This thread's rows: tile query (31 for padding: no membership bit) and its position.
    int row_query[2], row_pos[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int qi = row[half] / group;
      row_query[half] = qi < t.nq ? qi : 31;
      row_pos[half] = qi < t.nq ? list.q_pos[qi] : 0;
    }
    auto key_limits = [&](int u, int (&limit)[2]) {
      const UnionEntry e = union_entry(list, u);
      const std::uint32_t members = list.members[u];
#pragma unroll
      for (int half = 0; half < 2; ++half)
        limit[half] =
            (members >> row_query[half]) & 1u ? max(0, min(e.tokens, row_pos[half] - e.block_start + 1)) : 0;
    };

    Tensor acc_o = partition_fragment_C(Traits::MmaPV{}, Shape<Int<Traits::kTileM>, Int<Traits::kHeadDim>>{});
    clear(acc_o);
    SoftmaxState st{{-INFINITY, -INFINITY}, {0.f, 0.f}};
    Barrier64::wait(&smem.q_full[buf], phase_of(iter));
    const Element* sq = smem.q[buf];

    if (n > 0) {
      Tensor acc_s = partition_fragment_C(Traits::MmaQK{}, Shape<Int<Traits::kTileM>, Int<Traits::kBlockN>>{});
      auto frag_p = make_frag_p();
      // Phase u: S(u) (u < n) and P(u-1) V(u-1) (u > 0) in one WGMMA batch, then the softmax
      // of S(u). The three shapes are separate straight-line code (no WGMMA under a branch).
      auto phase = [&](auto with_qk, auto with_pv, int u) {
        constexpr bool kQk = decltype(with_qk)::value;
        constexpr bool kPv = decltype(with_pv)::value;
        const int s = static_cast<int>((use + u) & 1u);
        const int sp = s ^ 1;  // stage of block u - 1
        if constexpr (kQk) Barrier64::wait(&smem.k_full[s], phase_of(use + u));
        if constexpr (kPv) Barrier64::wait(&smem.v_full[sp], phase_of(use + u - 1));
        turn.sync();
        warpgroup_fence_operand(acc_s);
        warpgroup_fence_operand(acc_o);
        warpgroup_fence_operand(frag_p);
        warpgroup_arrive();
        if constexpr (kQk) issue_qk(sq, smem.k[s], ct, acc_s);
        if constexpr (kPv) issue_pv<true>(frag_p, smem.v[sp], ct, acc_o);
        warpgroup_commit_batch();
        turn.pass();
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_s);
        warpgroup_fence_operand(acc_o);
        if constexpr (kQk) {
          Barrier64::arrive(&smem.k_empty[s]);
          int limit[2];
          key_limits(u, limit);
          softmax_online(acc_s, frag_p, acc_o, limit, list.chunks[u], p.attn.scale_log2, st, ct);
        }
        if constexpr (kPv) Barrier64::arrive(&smem.v_empty[sp]);
      };
      phase(cute::true_type{}, cute::false_type{}, 0);
      for (int u = 1; u < n; ++u) phase(cute::true_type{}, cute::true_type{}, u);
      phase(cute::false_type{}, cute::true_type{}, n);
    }
    use += n;
    Barrier64::arrive(&smem.list_empty[buf]);
    store_tile(p, tma, t, acc_o, st, smem.q[buf], opaque_tid() - 128);
    Barrier64::arrive(&smem.q_empty[buf]);
  }
  turn.finish();
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");  // O stores complete
}

__global__ void __launch_bounds__(kThreads, 1)
    union_sm90_kernel(const __grid_constant__ UnionParams p, const __grid_constant__ PrefillTma tma) {
  extern __shared__ std::uint8_t smem_raw[];
  auto& smem = *reinterpret_cast<SharedStorage*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) &
                                                 ~std::uintptr_t(1023));
  const int tid = threadIdx.x;
  if (tid == 0) {
    init_kv_ring(smem);
    for (int i = 0; i < 2; ++i) {
      Barrier64::init(&smem.q_full[i], 1);
      Barrier64::init(&smem.q_empty[i], kConsumerThreads);
      Barrier64::init(&smem.list_full[i], kBuilderThreads);
      Barrier64::init(&smem.list_empty[i], kConsumerThreads);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  // PDL: top-k ids and the batch may come from the previous kernel in the stream.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");

  if (tid < 128) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (tid < 32) run_loader(p, tma, smem);
    else run_builders(p, tma, smem);
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    run_consumers(p, tma, smem, tid - 128);
  }
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace msa::cuda::union_sm90
