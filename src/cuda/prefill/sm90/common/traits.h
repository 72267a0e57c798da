// Compile-time traits shared by the two sm_90a sparse prefill kernels (block_major/ and
// tile_union/): the element type of an instance, tile sizes, the WGMMA tiled MMAs, the swizzled
// shared-memory layouts, the warp roles, the register split, the K/V ring depth and the
// named-barrier ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>

#include "core/plan_encoding.h"
#include "msa/tensor.h"

namespace msa::cuda::prefill_sm90 {

// The CuTe element an instance computes in (the instantiation list names DTypes): its 16-bit
// dtype, or bf16 for FP8 E4M3 K/V (the decode's FP8 caches take bf16 queries and write bf16
// out; its consumers widen K and V to fp16 in registers, tile_union/warp_mma.cuh).
template <DType kDtype>
struct ElementOf;
template <>
struct ElementOf<DType::kBF16> {
  using type = cute::bfloat16_t;
};
template <>
struct ElementOf<DType::kFP16> {
  using type = cute::half_t;
};
template <>
struct ElementOf<DType::kFP8E4M3> {
  using type = cute::bfloat16_t;
};

// One (dtype, head dim) instance. Two consumer warpgroups compute 64 rows each of a 128-row M
// tile against 128-token K/V blocks; K and V are both written by TMA as [token, d] 128-byte-
// swizzled rows (column halves of 128 rows each), and P V reads V through a transposed (d, token)
// view, MN-major for WGMMA.
//
// kDtype kFP8E4M3 (the decode's FP8 caches, D = 128; WarpMma below): q and O are bf16; TMA lands
// a block's FP8 rows (128 bytes each, 128-byte swizzle) in a ring stage of their own size.
// The 16-bit K/V ring's depth (Traits::kRingStages): the WGMMA consumers of both kernels take
// stage use & 1 and parity phase_of(use).
constexpr int kStages = 2;

template <DType kDtype_, int kHeadDim_>
struct Traits {
  static constexpr DType kDtype = kDtype_;
  static constexpr bool kFp8Kv = kDtype == DType::kFP8E4M3;
  // Tile-union consumers skip the union blocks that no query of their warpgroup's rows chose
  // (the decode's instances, SkipBlocks below).
  static constexpr bool kSkipBlocks = false;
  // Tile-union tiles of up to 128 queries (the prefill's wide instance, WideTiles below).
  static constexpr bool kWideTiles = false;
  // Tile-union consumers as eight independent warps of 16 rows on mma.sync, reading FP8 K/V
  // codes straight from the ring (the decode's FP8 instance, WarpMma below).
  static constexpr bool kWarpMma = false;
  // Block-major steps take their Q rows and put their O rows by 16-byte thread copies, not TMA
  // boxes (the instance for boxes of one and two rows, RowCopies below).
  static constexpr bool kRowCopies = false;
  static constexpr bool kWays = false;  // WarpMma<Base, true> only
  static constexpr bool kQInRing = false;  // WarpMma<Base, false, true> only: Q comes through the K/V ring
  using Element = typename ElementOf<kDtype>::type;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = kBlockSize;  // KV tokens per block
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kTileM = kConsumerWarpgroups * 64;  // packed (query, head) rows per M tile
  static_assert(sizeof(Element) == 2, "16-bit elements: 128-byte swizzle rows of 64 elements");
  static_assert(kHeadDim % 64 == 0, "128-byte swizzle atoms need D a multiple of 64");

  // S = Q K^T: A = Q [M, D] and B = K [N = token, D] both K-major in shared memory.
  using MmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kBlockN>, cute::_16>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>(),
      cute::Layout<cute::Shape<cute::Int<kConsumerWarpgroups>, cute::_1, cute::_1>>{}));
  // O = P V: A = P from registers (the S accumulator re-typed), B = V seen as [N = d, K = token]
  // with d contiguous, i.e. MN-major; WGMMA transposes it through the descriptor.
  using MmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kHeadDim>, cute::_16>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      cute::Layout<cute::Shape<cute::Int<kConsumerWarpgroups>, cute::_1, cute::_1>>{}));

  // Shared-memory layouts (element offsets, 128-byte swizzle): Q and K as [row, d] K-major;
  // V has K's bytes, read as (d, token).
  using SmemLayoutQ = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                   cute::Shape<cute::Int<kTileM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                   cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>>{}));
  using SmemLayoutV =
      decltype(cute::composition(SmemLayoutK{}, cute::Layout<cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>>,
                                                             cute::Stride<cute::Int<kBlockN>, cute::_1>>{}));

  // TMA boxes are 64 columns (128 bytes, one swizzle row) wide. A Q or O box starting at row r
  // of column half c lands at unswizzled element offset c * kTileM * 64 + r * 64 of the tile, a
  // K or V box of token t at c * kBlockN * 64 + t * 64: the 128-byte swizzle is a function of
  // the shared-memory address, which the TMA unit and WGMMA both apply on top of it.
  static constexpr int kBoxCols = 128 / sizeof(Element);
  static constexpr int kColHalves = kHeadDim / kBoxCols;
  static __host__ __device__ constexpr int q_box_offset(int r, int c) { return c * kTileM * kBoxCols + r * kBoxCols; }
  static __host__ __device__ constexpr int kv_box_offset(int t, int c) { return c * kBlockN * kBoxCols + t * kBoxCols; }
  static_assert(SmemLayoutQ{}.layout_b()(8, 0) == q_box_offset(8, 0) &&
                    SmemLayoutQ{}.layout_b()(0, kBoxCols) == q_box_offset(0, 1),
                "the Q tile is not laid out as column halves of kTileM swizzled 128-byte rows");
  static_assert(SmemLayoutK{}.layout_b()(8, 0) == kv_box_offset(8, 0) &&
                    SmemLayoutK{}.layout_b()(0, kBoxCols) == kv_box_offset(0, 1),
                "the K tile is not laid out as column halves of 128 swizzled 128-byte rows");

  // TMA boxes of K/V as stored: 64 16-bit or 128 FP8 columns (one 128-byte swizzle row) per
  // box, landing at kv_load_offset bytes into the block (FP8: row t's 128 codes at 128 t).
  static_assert(!kFp8Kv || kHeadDim == 128, "FP8 K/V rows must be one 128-byte swizzle row");
  static constexpr int kKvLoadCols = kFp8Kv ? 128 : kBoxCols;
  static constexpr int kKvLoadBoxes = kHeadDim / kKvLoadCols;
  static __host__ __device__ constexpr int kv_load_offset(int t, int c) {
    return kFp8Kv ? t * 128 : kv_box_offset(t, c) * static_cast<int>(sizeof(Element));
  }
  // Bytes TMA writes per K or V block.
  static constexpr std::uint32_t kBlockBytes = kBlockN * kHeadDim * (kFp8Kv ? 1 : sizeof(Element));
  static constexpr int kQElements = cute::cosize_v<SmemLayoutQ>;
  static constexpr int kKvElements = cute::cosize_v<SmemLayoutK>;
  // The K/V ring: stages, and elements per K or V stage (the 16-bit block).
  static constexpr int kRingStages = kStages;
  static constexpr int kStageElements = kKvElements;
};

// Threads of both kernels: warpgroup 0 is the producer (warp 0 loads K/V with TMA, warps 1-3
// "builders" prepare each tile's Q and row facts), warpgroups 1 and 2 are the consumers.
constexpr int kThreads = 3 * 128;
constexpr int kConsumerThreads = 2 * 128;
constexpr int kBuilderThreads = 96;
// Registers after setmaxnreg: 2 x 128 x 232 + 128 x 40 = 64,512 of the SM's 65,536.
constexpr int kConsumerRegs = 232;
constexpr int kProducerRegs = 40;

// Named barriers (0 is __syncthreads, unused after the prologue).
enum Barrier : int {
  kBuilders = 1,   // the 96 builder threads
  kEpilogue0 = 4,  // kEpilogue0 + w: warpgroup w's staged O rows are complete (128 threads)
  kWayMerge = 6,   // the warp consumers' ways have published their states (256 threads)
};

// Dynamic shared memory is only promised 16-byte alignment; kernels round the base up to the
// 1024 bytes that 128-byte swizzle atoms need (smem_bytes<Storage>() reserves the slack).
template <class Storage>
constexpr std::size_t smem_bytes() {
  return sizeof(Storage) + 1024;
}
// The base is advanced by a byte offset from `raw` itself, not rebuilt from an integer: the
// compiler then still knows every access through the Storage is to shared memory and emits
// LDS / STS / ATOMS instead of generic loads, stores and GPU-scope atomics.
template <class Storage>
__device__ __forceinline__ Storage& aligned_smem(std::uint8_t* raw) {
  const auto base = static_cast<std::uint32_t>(__cvta_generic_to_shared(raw));
  return *reinterpret_cast<Storage*>(raw + ((1024u - (base & 1023u)) & 1023u));
}

// Byte offset of element (r, c) in a tile of Layout (GMMA::Layout_K_SW128_Atom<Element>
// tiled: 128-byte swizzled, K-major): the layout's own swizzle (layout_a, on bytes) of the
// unswizzled element's byte offset (layout_b). On a 1024-byte aligned tile that is the swizzle
// of the address, which TMA and WGMMA apply. Indexing a tile's own pointer with it keeps its
// accesses to shared memory as such: a swizzled CuTe pointer goes through an integer.
template <class Layout, class Element>
__device__ __forceinline__ int swizzled_byte(int r, int c) {
  constexpr Layout layout{};
  return layout.layout_a()(static_cast<int>(sizeof(Element)) * layout.layout_b()(r, c));
}

// Byte offset of 16-byte chunk c (row bytes 16c .. 16c + 15) of row r in a Q tile: the
// 128-byte column slab c / 8, row r's 128 bytes within it, the chunk's place XOR-ed with r % 8
// (the 128-byte swizzle; the tile is 1024-byte aligned). swizzled_byte's value in a few integer
// operations (RowCopies checks at compile time that the two agree over the whole tile).
template <class Traits>
__host__ __device__ constexpr unsigned q_chunk_byte(unsigned r, unsigned c) {
  return (c / 8) * Traits::kTileM * 128u + r * 128u + (((c % 8) ^ (r % 8)) << 4);
}

template <class Traits>
constexpr bool q_chunk_byte_matches_layout() {
  constexpr typename Traits::SmemLayoutQ layout{};
  constexpr int kElementBytes = static_cast<int>(sizeof(typename Traits::Element));
  for (int r = 0; r < Traits::kTileM; ++r)
    for (int c = 0; c < Traits::kHeadDim * kElementBytes / 16; ++c)
      if (static_cast<int>(q_chunk_byte<Traits>(r, c)) !=
          layout.layout_a()(kElementBytes * layout.layout_b()(r, c * 16 / kElementBytes)))
        return false;
  return true;
}

// The decode's tile-union instances: the same kernel, its consumer warpgroups skipping blocks
// none of their rows chose. The decode's queries pick their blocks independently (a Q = 8 tile
// leaves most union blocks to one warpgroup); the prefill's tile-union tiles are those whose
// queries share their blocks, where there is nothing to skip and the straight pipeline is
// measurably faster (docs/performance.md step 14e).
template <class Base>
struct SkipBlocks : Base {
  static constexpr bool kSkipBlocks = true;
};

// The block-major instance for Q and O boxes of one and two rows (G = 1 and 2, and every G not
// dividing 64): a box costs the TMA unit about the same whatever its size, and 256 one-row
// boxes each way a step set the step's time; the builders gather the rows with cp.async and the
// consumers store them with st.global instead (docs/performance.md steps 83-85). Boxes of four
// rows and more keep TMA: there the thread copies measured 8-19% slower (step 85). The wide
// tile-union instance (G <= 3) stores its O rows this way too but keeps TMA for its Q, whose
// thread copies would load its builders (docs/performance.md step 88).
template <class Base>
struct RowCopies : Base {
  static constexpr bool kRowCopies = true;
  static_assert(q_chunk_byte_matches_layout<Base>(), "q_chunk_byte does not follow SmemLayoutQ");
};

// The prefill's wide tile-union instance: tiles of up to 128 queries (tile_union/geometry.h),
// for the plan-free calls at G <= 3 whose tiles of 32 queries would fill 32 or 64 of the 128
// rows. Its lists carry 4 membership words per entry and its builders keep no scratch per
// entry; the narrow instances keep one word and the per-entry scratch, which measured faster
// where their tiles suffice (docs/performance.md, step 48).
template <class Base>
struct WideTiles : Base {
  static constexpr bool kWideTiles = true;
};

// The decode's FP8 instance: its consumers are eight warps of 16 tile rows each (one query's
// heads at G = 16), each on mma.sync over the blocks its own queries chose, with K and V
// widened from the ring's FP8 codes in registers (tile_union/warp_mma.cuh). A decode block is
// mostly one query's: a 64-row WGMMA spent three quarters of its work (and of its softmax) on
// rows that chose nothing. The ring holds codes only (16 KB a stage), so it is deeper.
// kWaysArg: the kernel whose tiles of at most kDecodeWayRows rows share each row group's blocks among the
// spare warps (ways, warp_mma.cuh); the launcher takes it where the plan says so
// (TileUnionParams::ways). kQInRingArg: the kernel without ways that brings each tile's Q
// through the ring as a stage of its own (column half 0 in the stage's K, half 1 in its V; the
// warps hold Q in registers and store O from them), so the 32 KB of a Q buffer make a sixth
// stage; the launcher takes it where the plan says so (TileUnionParams::q_in_ring). The others
// keep a Q buffer: the ways merge and stage O there, and the plain kernel stages O there.
template <class Base, bool kWaysArg = false, bool kQInRingArg = false>
struct WarpMma : Base {
  static_assert(Base::kFp8Kv && Base::kSkipBlocks && Base::kHeadDim == 128);
  static_assert(!(kWaysArg && kQInRingArg), "the ways kernel keeps its Q buffer");
  static constexpr bool kWarpMma = true;
  static constexpr bool kWays = kWaysArg;
  static constexpr bool kQInRing = kQInRingArg;
  static constexpr int kRingStages = kQInRing ? 6 : 5;
  static constexpr int kStageElements = static_cast<int>(Base::kBlockBytes / sizeof(typename Base::Element));
  static_assert(!kQInRing || Base::kTileM * Base::kBoxCols == kStageElements, "a Q column half fills a K or V stage");
};

}  // namespace msa::cuda::prefill_sm90
