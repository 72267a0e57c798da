// Compile-time traits of the sm_90a sparse prefill kernels (KV-block-major here, the tile-union
// kernel in ../union_sm90 shares them): tile sizes, the WGMMA tiled MMAs, the swizzled
// shared-memory layouts, the thread roles, the block-major shared-memory plan and the
// named-barrier ids.
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

// kWarpgroups_: warpgroups per CTA, each computing 64 rows of the M tile (both kernels use
// two: TmaTraits below).
template <class Element_, int kHeadDim_, int kWarpgroups_>
struct Traits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = 128;        // KV tokens per block (spec: block = 128)
  static constexpr int kWarpgroups = kWarpgroups_;
  static constexpr int kThreads = kWarpgroups * 128;
  static constexpr int kTileM = kWarpgroups * 64;  // packed (query, head) rows per M tile
  static_assert(kHeadDim % 64 == 0, "128-byte swizzle atoms need D a multiple of 64 (bf16)");

  // S = Q K^T: A = Q [M, D] and B = K [N = token, D] both K-major in shared memory.
  using MmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kBlockN>, cute::_16>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>(),
      cute::Layout<cute::Shape<cute::Int<kWarpgroups>, cute::_1, cute::_1>>{}));
  // O = P V: A = P from registers (the S accumulator re-typed), B = V seen as [N = d, K = token]
  // with d contiguous, i.e. MN-major; WGMMA transposes it through the descriptor (the layout:
  // TmaTraits::SmemLayoutV).
  using MmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kHeadDim>, cute::_16>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      cute::Layout<cute::Shape<cute::Int<kWarpgroups>, cute::_1, cute::_1>>{}));

  // Shared-memory layouts (element offsets, 128-byte swizzle): Q and K as [row, d] K-major.
  using SmemLayoutQ = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                   cute::Shape<cute::Int<kTileM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                   cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>>{}));

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

};

// The two-warpgroup instance with K and V both written by TMA as [token, d] 128-byte-swizzled
// rows (column halves of 128 rows each); P V reads V's bytes through a transposed (d, token)
// view, MN-major for WGMMA. Both sm_90a prefill kernels use it.
struct TmaTraits : Traits<cute::bfloat16_t, 128, 2> {
  using Base = Traits<cute::bfloat16_t, 128, 2>;
  using SmemLayoutV = decltype(cute::composition(
      Base::SmemLayoutK{},
      cute::Layout<cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>>, cute::Stride<cute::Int<kBlockN>, cute::_1>>{}));
  // Element offset of token row t of column half c in a K or V buffer (where a TMA box of
  // rows starting at t lands; t a multiple of 8 keeps the swizzle phase).
  static __host__ __device__ constexpr int kv_box_offset(int t, int c) { return c * kBlockN * kBoxCols + t * kBoxCols; }
};
static_assert(TmaTraits::SmemLayoutK{}.layout_b()(8, 0) == TmaTraits::kv_box_offset(8, 0) &&
                  TmaTraits::SmemLayoutK{}.layout_b()(0, TmaTraits::kBoxCols) == TmaTraits::kv_box_offset(0, 1),
              "the K tile is not laid out as column halves of 128 swizzled 128-byte rows");

// Threads of both kernels: warpgroup 0 is the producer (warp 0 loads K/V with TMA, warps 1-3
// prepare and gather Q tiles), warpgroups 1 and 2 are the consumers, 64 rows of the M tile each.
constexpr int kThreads = 3 * 128;
constexpr int kConsumerThreads = 2 * 128;
constexpr int kBuilderThreads = 96;
// Registers after setmaxnreg: 2 x 128 x 232 + 128 x 40 = 64,512 of the SM's 65,536.
constexpr int kConsumerRegs = 232;
constexpr int kProducerRegs = 40;
constexpr int kStages = 2;  // K and V ring depth

// Named barriers (0 is __syncthreads, unused after the prologue).
enum Barrier : int {
  kBuilders = 1,     // the 96 builder threads
  kTurn0 = 2,        // + consumer warpgroup: its turn to issue WGMMAs (256 threads)
  kEpilogue0 = 4,    // + consumer warpgroup: its staged O rows are complete (128 threads)
};

// The KV-block-major kernel's shared memory: a 2-stage K and V ring (one stage per work
// item), and per M tile (a step) a Q buffer (later the staged O) with its rows' facts,
// double buffered.
struct SharedStorage {
  using Element = TmaTraits::Element;
  alignas(1024) Element k[kStages][cute::cosize_v<TmaTraits::SmemLayoutK>];  // [token, d] swizzled
  alignas(1024) Element v[kStages][cute::cosize_v<TmaTraits::SmemLayoutK>];  // [token, d] swizzled
  alignas(1024) Element q[2][cute::cosize_v<TmaTraits::SmemLayoutQ>];        // [row, d], then O
  RowInfo rows[2][TmaTraits::kTileM];
  std::uint32_t chunks[2];  // per Q buffer: the item's block_chunks() (16-token chunks on valid pages)
  alignas(8) std::uint64_t k_full[kStages], k_empty[kStages];
  std::uint64_t v_full[kStages], v_empty[kStages];
  std::uint64_t q_full[2], q_empty[2];
  std::uint64_t v_tail;  // the loader's own barrier for V blocks it must zero-fill past k_len
};
// Dynamic shared memory is only promised 16-byte alignment; the kernel rounds its base up to
// the 1024 bytes that 128-byte swizzle atoms need.
constexpr std::size_t kSmemBytes = sizeof(SharedStorage) + 1024;
static_assert(kSmemBytes <= 227 * 1024, "shared memory plan exceeds the sm_90 limit");

}  // namespace msa::cuda::prefill_sm90
