// Compile-time traits of the sm_90a KV-block-major sparse prefill kernel: tile sizes, the
// WGMMA tiled MMAs, the swizzled shared-memory layouts, the shared-memory plan and the
// named-barrier ids. One instance per (element type, head dim); see launch.cu.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/arch/mma_sm90.hpp>

namespace msa::cuda::prefill_sm90 {

// Per M-row facts of one Q tile, computed once by the gather and read by softmax and epilogue.
struct RowInfo {
  std::int32_t qg;         // global query index; -1 for a padding row
  std::int32_t h;          // query head, 0..h_q-1
  std::int32_t slot;       // split slot of this (query, block) edge
  std::int32_t key_limit;  // visible keys are tokens [0, key_limit) of the block, 0..128
};

// kWarpgroups_: warpgroups per CTA, each computing 64 rows of the M tile. The KV-block-major
// kernel uses one (see kKvMajorWarpgroups); the query-major union kernel two.
template <class Element_, int kHeadDim_, int kWarpgroups_>
struct Traits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = 128;        // KV tokens per block (spec: block = 128)
  static constexpr int kWarpgroups = kWarpgroups_;
  static constexpr int kThreads = kWarpgroups * 128;
  static constexpr int kTileM = kWarpgroups * 64;  // packed (query, head) rows per M tile
  static constexpr int kChunkElems = 16 / sizeof(Element);       // one 16-byte cp.async
  static constexpr int kChunksPerRow = kHeadDim / kChunkElems;   // 16 for D = 128
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;  // rows one load pass covers
  static_assert(kHeadDim % 64 == 0, "128-byte swizzle atoms need D a multiple of 64 (bf16)");
  static_assert(kThreads % kChunksPerRow == 0 && kBlockN % kRowsPerPass == 0 &&
                kTileM % kRowsPerPass == 0);

  // S = Q K^T: A = Q [M, D] and B = K [N = token, D] both K-major in shared memory.
  using MmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kBlockN>, cute::_16>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>(),
      cute::Layout<cute::Shape<cute::Int<kWarpgroups>, cute::_1, cute::_1>>{}));
  // O = P V: A = P from registers (the S accumulator re-typed), B = V seen as [N = d, K = token]
  // with d contiguous, i.e. MN-major; WGMMA transposes it through the descriptor.
  using MmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kHeadDim>, cute::_16>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      cute::Layout<cute::Shape<cute::Int<kWarpgroups>, cute::_1, cute::_1>>{}));

  // Shared-memory layouts (element offsets, 128-byte swizzle): Q and K as [row, d] K-major;
  // V as [d, token] MN-major over the same [token][d] bytes a row-wise copy writes.
  using SmemLayoutQ = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                   cute::Shape<cute::Int<kTileM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                   cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>>{}));
  using SmemLayoutV = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<Element>{},
                                                   cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>>{}));

  // TMA boxes of Q and O are 64 columns (128 bytes, one swizzle row) wide and start at row r of
  // column half c, unswizzled element offset c * kTileM * 64 + r * 64 of the Q tile: the
  // 128-byte swizzle is a function of the shared-memory address, which the TMA unit and WGMMA
  // both apply on top of it.
  static constexpr int kBoxCols = 128 / sizeof(Element);
  static constexpr int kColHalves = kHeadDim / kBoxCols;
  static __host__ __device__ constexpr int q_box_offset(int r, int c) { return c * kTileM * kBoxCols + r * kBoxCols; }
  static_assert(SmemLayoutQ{}.layout_b()(8, 0) == q_box_offset(8, 0) &&
                    SmemLayoutQ{}.layout_b()(0, kBoxCols) == q_box_offset(0, 1),
                "the Q tile is not laid out as column halves of kTileM swizzled 128-byte rows");

  // The shared-memory plan (99 KB with alignment: two CTAs per SM). Loads run one step
  // ahead of the math, where a step is one M tile of one item: Q is double buffered; K and V
  // are single buffered (a second pair would not leave room for two CTAs), so the next
  // item's K/V is loaded once the current item's last tile has read them. The epilogue
  // stages each warpgroup's O rows in its own (already consumed) part of the current Q buffer.
  struct SharedStorage {
    alignas(1024) Element k[cute::cosize_v<SmemLayoutK>];  // [token, d] swizzled
    alignas(1024) Element v[cute::cosize_v<SmemLayoutV>];  // [token, d] swizzled
    alignas(1024) Element q[2][cute::cosize_v<SmemLayoutQ>];  // [row, d] swizzled, then O
    alignas(16) RowInfo rows[2][kTileM];                       // facts of each Q buffer's rows
    alignas(8) std::uint64_t q_full[2];  // mbarrier per Q buffer: its TMA gather has landed
  };
  // Dynamic shared memory is only promised 16-byte alignment; the kernel rounds its base up
  // to the 1024 bytes that 128-byte swizzle atoms need.
  static constexpr std::size_t kSmemBytes = sizeof(SharedStorage) + 1024;
  // CTAs the plan lets share an SM (228 KB of shared memory, 1 KB reserved per CTA); the
  // launch bounds ask ptxas to keep registers within that many CTAs' share.
  static constexpr int kCtasPerSm = 2 * (kSmemBytes + 1024) <= 228 * 1024 ? 2 : 1;
};

// Named barriers (id 0 is __syncthreads). Each warpgroup syncs its own epilogue alone.
enum class NamedBarrier : int {
  kEpilogueWg0 = 1,  // + warpgroup index
};

// One warpgroup of 64 rows per M tile keeps a KV-block-major CTA at half an SM's registers and
// shared memory, so two CTAs share each SM and one's loads and barriers overlap the other's
// math (measured on H100: 4% faster than one CTA of two warpgroups at S = 32k random top-16).
constexpr int kKvMajorWarpgroups = 1;
using TraitsBf16D128 = Traits<cute::bfloat16_t, 128, kKvMajorWarpgroups>;

}  // namespace msa::cuda::prefill_sm90
