// Compile-time configuration of the sm_90a prefill indexer kernel: tile sizes, the WGMMA tiled
// MMA of one consumer warpgroup, the shared-memory plan and the work unit the roles share.
//
// A tile is `queries_per_tile` consecutive queries of one request with all their index heads:
// up to 256 (query, head) rows, row r = query (r / h_i), head (r % h_i). Consumer warpgroup w
// holds rows [128 w, 128 w + 128) and computes S = Q K^T for them against one 128-token block of
// the index-K cache at a time (two m64 WGMMA row tiles), then each row's maximum over the
// block's visible tokens. K blocks stream through a TMA ring shared by both warpgroups; Q is
// double-buffered so that the builders gather the next unit's rows while the consumers work.
// Index dtypes: bf16, fp16, and FP8 E4M3 (queries and keys both, as MSA's q8kv8 indexers take
// them), each computed in WGMMAs of its own type with FP32 accumulators.
#pragma once

#include <cstdint>

#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>

#include "cuda/prefill/sm90/common/kv_ring.cuh"
#include "cuda/indexer/params.h"
#include "cuda/prefill/sm90/common/traits.h"

namespace msa::cuda::indexer_sm90 {

using prefill_sm90::Barrier64;

// The CuTe element the indexer computes in: the index dtype itself (FP8 E4M3 index queries and
// keys meet in e4m3 WGMMAs, as MSA's q8kv8 indexers do; no widening).
template <DType kDtype>
struct IndexElement;
template <>
struct IndexElement<DType::kBF16> {
  using type = cute::bfloat16_t;
};
template <>
struct IndexElement<DType::kFP16> {
  using type = cute::half_t;
};
template <>
struct IndexElement<DType::kFP8E4M3> {
  using type = cute::float_e4m3_t;
};

template <DType kDtype>
struct Traits {
  using Element = typename IndexElement<kDtype>::type;
  // How TMA lands a K block (the prefill's loader facts: 128-byte boxes, one per 64 16-bit or
  // 128 FP8 columns, 128-byte swizzle), read by prefill_sm90::load_block.
  using Kv = prefill_sm90::Traits<kDtype, 128>;
  static constexpr int kHeadDim = 128;
  static constexpr int kBlockN = Kv::kBlockN;
  static constexpr int kWarpgroupRows = 128;
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kTileRows = kConsumerWarpgroups * kWarpgroupRows;
  static_assert(kTileRows == kIndexerTileRows);
  // K ring depth: 3 blocks of 32 KB (16-bit); FP8 blocks are 16 KB, so twice as many fit, which
  // the memory-bound decode form uses to keep more bytes in flight.
  static constexpr int kStages = sizeof(Element) == 1 ? 6 : 3;
  static constexpr int kQBuffers = 2;  // Q tiles in flight (current unit, next unit)
  static constexpr int kMmaK = 32 / static_cast<int>(sizeof(Element));  // WGMMA K: 16 (16-bit), 32 (FP8)

  // S = Q K^T for one warpgroup's 128 rows: A = Q [row, d] and B = K [token, d], both K-major
  // (the only major FP8 WGMMAs take).
  using Mma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kBlockN>, cute::Int<kMmaK>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>()));
  using SmemLayoutQ = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                   cute::Shape<cute::Int<kWarpgroupRows>, cute::Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                   cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>>{}));
  static constexpr int kQElements = cute::cosize_v<SmemLayoutQ>;
  static constexpr int kKElements = cute::cosize_v<SmemLayoutK>;
  // The loader's boxes land where this layout reads: token t, box c at byte kv_load_offset(t, c).
  static_assert(kKElements * sizeof(Element) == Kv::kBlockBytes);
  static_assert(SmemLayoutK{}.layout_b()(8, 0) * sizeof(Element) == Kv::kv_load_offset(8, 0));
  static_assert(Kv::kKvLoadBoxes == 1 ||
                SmemLayoutK{}.layout_b()(0, Kv::kKvLoadCols) * sizeof(Element) == Kv::kv_load_offset(0, 1));
};

// One work unit: a tile and a range of score columns. Columns [col0, compute_end) are blocks
// with a token visible to some row of the tile (computed); [compute_end, col_end) get -inf.
struct Unit {
  int b;            // request
  int q0;           // the tile's first query row (index into total_q)
  int rows;         // valid (query, head) rows: queries in the tile * h_i, 0..256
  int pos0;         // position of the tile's first query (bottom-right causal; may be < 0 on bad input)
  int k_len;        // the request's k_len as read
  int col0;         // the unit's first column
  int compute_end;  // end of the computed columns
  int col_end;      // end of the unit's columns
};

// Threads as in the prefill kernels: warpgroup 0 is the producer (warp 0 loads K blocks with
// TMA, warps 1-3 gather Q and write the -inf columns), warpgroups 1 and 2 are the consumers.
using prefill_sm90::kBuilderThreads;
using prefill_sm90::kConsumerThreads;
using prefill_sm90::kThreads;
// Registers after setmaxnreg, 2 x 128 x 216 + 128 x 72 = 64,512 of the SM's 65,536: the
// consumers' 128 accumulators fit in 216 without spilling, and the loader keeps a warp's read
// of page-table entries live across the blocks it covers (it spilled at 40 and at 56).
constexpr int kConsumerRegs = 216;
constexpr int kProducerRegs = 72;

template <class T>
struct Storage {
  using Element = typename T::Element;
  alignas(1024) Element q[T::kQBuffers][T::kConsumerWarpgroups][T::kQElements];  // [row, d] swizzled
  alignas(1024) Element k[T::kStages][T::kKElements];                             // [token, d] swizzled
  Unit unit[T::kQBuffers];             // the unit of each Q buffer (written by the builders)
  std::uint32_t chunks[T::kStages];    // per K stage: block_chunks() of its block (valid pages)
  // k_full: TMA bytes landed   k_empty: 256 consumer arrivals
  // q_full: 96 builder arrivals (rows gathered, unit written)   q_empty: 256 consumer arrivals
  alignas(8) std::uint64_t k_full[T::kStages], k_empty[T::kStages];
  std::uint64_t q_full[T::kQBuffers], q_empty[T::kQBuffers];

  __device__ void init() {
    for (int i = 0; i < T::kStages; ++i) {
      Barrier64::init(&k_full[i], 1);
      Barrier64::init(&k_empty[i], kConsumerThreads);
    }
    for (int i = 0; i < T::kQBuffers; ++i) {
      Barrier64::init(&q_full[i], kBuilderThreads);
      Barrier64::init(&q_empty[i], kConsumerThreads);
    }
  }
};

}  // namespace msa::cuda::indexer_sm90
