// The sm_90a prefill indexer kernel (spec §5): per (index head, query, block) the scaled
// maximum of <index_q, index_k> over the block's tokens visible to the query, as a GEMM whose
// epilogue reduces each 128-column block to one score per row. Persistent CTAs run the work
// units of schedule.cuh; the roles meet on the barriers of config.h's Storage:
//   loader (warp 0)       streams the units' K blocks through the TMA ring
//   builders (warps 1-3)  gather each unit's Q rows into the next Q buffer, then write the
//                         unit's columns that no row sees (-inf)
//   consumers (2 x 128)   S = Q K^T per block (WGMMA), masked row maxima, scores stored
// With kList > 0 (the fused indexer + top-k) no score is stored: each row's scores go into a
// list of its kList best candidates held in registers by the lane that owns the row (RowTop), and
// at the end of a unit the list becomes the row's top-k ids (a unit covering all of its row's
// columns) or a partial list that merge.cu combines with the row's other units' lists.
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/tensor.hpp>

#include "core/topk_key.h"
#include "cuda/common/ptx.cuh"
#include "cuda/indexer/config.h"
#include "cuda/indexer/params.h"
#include "cuda/indexer/schedule.cuh"

namespace msa::cuda::indexer_sm90 {

// Loader: every unit's computed blocks, in unit order, each into the next K stage with its
// valid-page chunk mask and its TMA boxes (prefill_sm90::box_page, the rule block_chunks and
// load_block apply). The page-table entries are read 32 at a time, one per lane, ahead of the blocks
// that use them: a block then waits on no global load before its TMA is issued (reading its
// entries block by block put two dependent loads in front of every TMA; removing them made the
// prefill form 3-4% faster, docs/performance.md step 18). One warp.
template <class T>
__device__ void loader(const IndexerParams& p, const IndexerTma& tma, Storage<T>& smem, std::int64_t total_tiles,
                       std::int64_t units) {
  const prefill_sm90::AttentionParams& c = p.cache;
  const int lane = opaque_tid() % 32;
  const bool paged = c.page_table != nullptr;
  const int box_rows = tma.box_rows;                  // tokens per TMA box: page_size, or 128 (flat)
  const int boxes = T::kBlockN / box_rows;            // boxes (pages) per block, 1..8
  const int blocks_per_read = 32 / boxes;             // blocks whose entries one warp read covers
  std::uint32_t use = 0;
  for (std::int64_t i = 0;; ++i) {
    const std::int64_t u = unit_of(i);
    if (u >= units) break;
    const Unit unit = find_unit(p, u, total_tiles, lane);
    const int flat_token0 = paged ? 0 : c.cu_seqlens_k[unit.b];
    for (int col0 = unit.col0; col0 < unit.compute_end; col0 += blocks_per_read) {
      // Lane l: box l % boxes of block col0 + l / boxes, its page and validity; only blocks
      // before compute_end are looked up (their tokens are below k_len's int32 limit).
      prefill_sm90::BoxPage box{0, true};
      if (paged && col0 + lane / boxes < unit.compute_end)
        box = prefill_sm90::box_page(c, unit.b, (col0 + lane / boxes) * kBlockSize + (lane % boxes) * box_rows, unit.k_len);
      const std::uint32_t valid_boxes = __ballot_sync(0xffffffffu, box.valid);
      const int n = min(blocks_per_read, unit.compute_end - col0);
      for (int j = 0; j < n; ++j, ++use) {
        const int s = prefill_sm90::stage_of(use, T::kStages);
        Barrier64::wait(&smem.k_empty[s], prefill_sm90::parity_of(use, T::kStages) ^ 1u);
        if (lane == 0) {
          // Bit b of the block's boxes -> its box_rows / 16 chunk bits.
          const std::uint32_t bits = (valid_boxes >> (j * boxes)) & ((1u << boxes) - 1u);
          const int per_box = box_rows / 16;
          std::uint32_t chunks = 0;
          for (int b = 0; b < boxes; ++b)
            if ((bits >> b) & 1u) chunks |= ((1u << per_box) - 1u) << (b * per_box);
          smem.chunks[s] = chunks;
          Barrier64::arrive_and_expect_tx(&smem.k_full[s], T::Kv::kBlockBytes);
        }
        __syncwarp();
        const int page = __shfl_sync(0xffffffffu, box.page, (j * boxes + lane) % 32);
        if (lane < boxes) {
          const int t0 = lane * box_rows;
          const int token = paged ? 0 : flat_token0 + (col0 + j) * kBlockSize;
          auto* bytes = reinterpret_cast<std::uint8_t*>(smem.k[s]);
#pragma unroll
          for (int b = 0; b < T::Kv::kKvLoadBoxes; ++b)
            cute::SM90_TMA_LOAD_4D::copy(&tma.k, &smem.k_full[s],
                                         static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_LAST),
                                         bytes + T::Kv::kv_load_offset(t0, b), b * T::Kv::kKvLoadCols, token, 0,
                                         paged ? page : 0);
        }
      }
    }
  }
}

// Builders: per unit, the tile's Q rows and the unit itself into Q buffer i % 2 (rows past the
// tile's are left as they are: their results are never stored); then -inf into the unit's
// columns past the computed ones. The rows come as 16-byte cp.async copies, all in flight
// together, swizzled as TMA would write them. 96 threads.
template <class T, int kList>
__device__ void builders(const IndexerParams& p, Storage<T>& smem, std::int64_t total_tiles, std::int64_t units) {
  using Element = typename T::Element;
  const int bt = opaque_tid() - 32;  // 0..95
  const int lane = bt % 32;
  constexpr int kChunkElements = 16 / static_cast<int>(sizeof(Element));
  constexpr int kChunks = T::kHeadDim / kChunkElements;  // 16-byte chunks per row
  for (std::int64_t i = 0;; ++i) {
    const std::int64_t u = unit_of(i);
    if (u >= units) break;
    const Unit unit = find_unit(p, u, total_tiles, lane);
    const int qb = static_cast<int>(i % T::kQBuffers);
    Barrier64::wait(&smem.q_empty[qb], static_cast<std::uint32_t>((i / T::kQBuffers) & 1) ^ 1u);
    if (bt == 0) smem.unit[qb] = unit;
    if (unit.compute_end > unit.col0) {
      const auto* q = static_cast<const Element*>(p.index_q);
      for (int c = bt; c < unit.rows * kChunks; c += kBuilderThreads) {
        const int r = c / kChunks, j = c % kChunks;
        const int qi = r / p.h_i, h = r - qi * p.h_i;
        const Element* src = q + std::int64_t{unit.q0 + qi} * p.stride_q_token + std::int64_t{h} * p.stride_q_head +
                             j * kChunkElements;
        // The buffer is 1024-byte aligned: the swizzle is a function of the address.
        const int byte =
            prefill_sm90::swizzled_byte<typename T::SmemLayoutQ, Element>(r % T::kWarpgroupRows, j * kChunkElements);
        const auto dst = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem.q[qb][r / T::kWarpgroupRows])) +
                         static_cast<std::uint32_t>(byte);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
      }
      asm volatile("cp.async.wait_all;\n" ::: "memory");
      cutlass::arch::fence_view_async_shared();  // the gathered rows, to WGMMA
    }
    Barrier64::arrive(&smem.q_full[qb]);
    if constexpr (kList > 0) continue;  // the fused top-k stores no score
    // Columns no row of the tile sees: (row, column) pairs in row-major order, so that
    // neighbouring threads write neighbouring columns.
    const int width = unit.col_end - unit.compute_end;
    for (int e = bt; e < unit.rows * width; e += kBuilderThreads) {
      const int r = e / width, c = unit.compute_end + (e - r * width);
      const int qi = r / p.h_i, h = r - qi * p.h_i;
      p.scores[std::int64_t{h} * p.stride_scores_head + std::int64_t{unit.q0 + qi} * p.stride_scores_token +
               std::int64_t{c} * p.stride_scores_col] = -INFINITY;
    }
  }
}

// The maximum of one accumulator row's 32 values in this thread (m tile, row half), in two
// interleaved chains (few live registers: the 128 accumulators stay live across the loop).
// kMasked: only columns c <= limit on valid 16-token chunks count (-inf if none does). Value
// (e, half, n) of a WGMMA accumulator row sits in column 8 n + c0 + e, where c0 = 2 (lane % 4)
// is the thread's first column (the PTX ISA's wgmma D fragment), so 16-token chunk n / 2.
template <bool kMasked, class Acc>
__device__ __forceinline__ float thread_row_max(const Acc& acc, int m, int half, int limit_from_c0,
                                                std::uint32_t chunks) {
  using namespace cute;
  constexpr int kGroups = decltype(size<0, 2>(acc))::value;  // 8-column groups, 2 values each
  float v[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kGroups; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float x = acc(make_coord(e, half, n), m, 0);
      if constexpr (kMasked) x = 8 * n + e <= limit_from_c0 && ((chunks >> (n / 2)) & 1u) ? x : -INFINITY;
      v[e] = fmaxf(v[e], x);
    }
  return fmaxf(v[0], v[1]);
}

// One lane's row of scores over a unit's computed columns, stored four columns per 16-byte
// store where the row allows it (contiguous columns, 16-byte aligned), else one by one. Up to
// three earlier values wait in registers (b2 the newest); a group never reaches before the
// unit's first column, which another unit may be writing. Few fields: the consumers' 128
// accumulators leave little room.
struct RowWriter {
  float* row = nullptr;  // the row's column 0, or null (a padding row)
  int pending = 0;       // values waiting (b0..b2, newest last)
  float b0 = 0.f, b1 = 0.f, b2 = 0.f;

  __device__ __forceinline__ void put(int col, float v, bool last, std::int64_t stride) {
    if (row == nullptr) return;
    if (stride != 1 || reinterpret_cast<std::uintptr_t>(row) % 16 != 0) {
      row[std::int64_t{col} * stride] = v;
      return;
    }
    if ((col & 3) != 3 && !last) {
      b0 = b1;
      b1 = b2;
      b2 = v;
      ++pending;
      return;
    }
    if (pending == 3) {
      *reinterpret_cast<float4*>(row + col - 3) = make_float4(b0, b1, b2, v);
    } else {
      row[col] = v;
      if (pending >= 1) row[col - 1] = b2;
      if (pending >= 2) row[col - 2] = b1;
    }
    pending = 0;
  }
};

// The fused top-k's row state (kList > 0): the best kList candidate blocks of the row seen so far
// in this unit, by rank descending (rank: core/topk_key.h's exact_rank, the key's upper half;
// NaN 1 and an empty slot 0, below every number). A unit offers its columns in
// increasing order, so a rank equal to a listed one goes behind it: ties to the smaller id, as
// TopK ranks. Registers only (fully unrolled): 2 kList of them.
template <int kList>
struct RowTop {
  std::uint32_t rank[kList];
  int id[kList];

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < kList; ++i) rank[i] = 0u, id[i] = -1;
  }
  // Column c of score v, when it beats the last entry: one pass down the list that puts it
  // before the first entry it beats, then moves every later entry down one slot (a displaced
  // entry goes before later equal ones, which came after it).
  __device__ __forceinline__ void offer(float v, int c) {
    std::uint32_t r = topk_key::exact_rank(v);
    if (r <= rank[kList - 1]) return;
    bool placed = false;
#pragma unroll
    for (int i = 0; i < kList; ++i) {
      const bool take = placed || r > rank[i];
      const std::uint32_t r_out = take ? rank[i] : r;
      const int c_out = take ? id[i] : c;
      rank[i] = take ? r : rank[i];
      id[i] = take ? c : id[i];
      r = r_out;
      c = c_out;
      placed = take;
    }
  }
  // Entry i as TopK's 64-bit key (0 when empty: rank 0, id -1).
  __device__ __forceinline__ std::uint64_t key(int i) const { return topk_key::with_id(rank[i], id[i]); }
};

// The row of the fused top-k a lane owns in a unit.
struct TopRow {
  std::int64_t index = -1;  // h * total_q + q, or -1 (no row: padding)
  int head = 0;
  int query = 0;            // q, the packed query row
  int local = 0;            // the query's local block (TopK's: pos / 128, 0 for pos <= 0)
  int ranked = 0;           // candidates: blocks [0, min(local, cols))
};

// The end of a unit for the fused top-k: the row's k ids when the unit covers every column
// (p.chunks == 1), else the unit's list as keys into the row's slot of p.partial when the unit
// holds a candidate of the row (merge.cu reads exactly those slots).
template <int kList>
__device__ __forceinline__ void finish_row(const IndexerParams& p, const TopRow& row, const RowTop<kList>& top,
                                           int col0) {
  if (row.index < 0) return;
  if (p.chunks == 1) {
    std::int32_t* out =
        p.topk + std::int64_t{row.head} * p.stride_topk_head + std::int64_t{row.query} * p.stride_topk_token;
    const std::int64_t ss = p.stride_topk_slot;
    if (row.local < p.k) {  // n = local + 1 <= k: every block, then -1
      for (int s = 0; s < p.k; ++s) out[s * ss] = s <= row.local ? s : -1;
      return;
    }
#pragma unroll
    for (int i = 0; i < kList; ++i)
      if (i < p.k - 1) out[i * ss] = top.id[i];  // -1: fewer candidates than k - 1 (cols < local)
    out[(p.k - 1) * ss] = row.local;
    return;
  }
  if (row.local < p.k || col0 >= row.ranked) return;
  std::uint64_t* slot = p.partial + (row.index * p.chunks + col0 / p.chunk_cols) * kList;
#pragma unroll
  for (int i = 0; i < kList; ++i) slot[i] = top.key(i);
}

// Consumers: per unit and computed block, S = Q K^T for this warpgroup's 128 rows, then each
// row's maximum over the tokens it sees (all of them left of the tile's first diagonal block on
// valid pages), scaled, into scores. wt: thread in the warpgroup (0..127), wg: warpgroup.
template <class T, int kList>
__device__ void consumers(const IndexerParams& p, Storage<T>& smem, std::int64_t units, int wg) {
  using namespace cute;
  const int wt = opaque_tid() % 128;
  typename T::Mma mma;
  auto thr = mma.get_slice(wt);
  auto acc = partition_fragment_C(mma, Shape<Int<T::kWarpgroupRows>, Int<T::kBlockN>>{});
  // (row, column) of each accumulator value; rows are the same for every column group.
  Tensor coord = thr.partition_C(make_identity_tensor(Shape<Int<T::kWarpgroupRows>, Int<T::kBlockN>>{}));
  static_assert(decltype(size<1>(acc))::value == 2 && decltype(size<2>(acc))::value == 1);
  std::uint32_t use = 0;
  for (std::int64_t i = 0;; ++i) {
    const std::int64_t u = unit_of(i);
    if (u >= units) break;
    const int qb = static_cast<int>(i % T::kQBuffers);
    Barrier64::wait(&smem.q_full[qb], static_cast<std::uint32_t>((i / T::kQBuffers) & 1));
    const Unit unit = smem.unit[qb];
    const bool active = wg * T::kWarpgroupRows < unit.rows;
    // This thread's four rows (m tile x row half): their positions; and the one whose scores
    // this lane stores (lane j of a quad stores row j of the four), or none.
    int pos[2][2];
    RowWriter out;
    TopRow row;
    RowTop<(kList > 0 ? kList : 1)> top;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = wg * T::kWarpgroupRows + get<0>(coord(make_coord(0, half, 0), m, 0));
        const int qi = r / p.h_i, h = r - qi * p.h_i;
        pos[m][half] = unit.pos0 + qi;
        if (wt % 4 == 2 * m + half && r < unit.rows) {
          if constexpr (kList > 0) {
            row.index = std::int64_t{h} * p.total_q + unit.q0 + qi;
            row.head = h;
            row.query = unit.q0 + qi;
            row.local = pos[m][half] <= 0 ? 0 : pos[m][half] / kBlockSize;
            row.ranked = min(row.local, p.cols);
          } else {
            out.row = p.scores + std::int64_t{h} * p.stride_scores_head +
                      std::int64_t{unit.q0 + qi} * p.stride_scores_token;
          }
        }
      }
    if constexpr (kList > 0) top.clear();
    // The fused top-k offers a block's row maximum while the next block's WGMMAs run (pending:
    // its column, -1 for none), so the list's insertion overlaps the tensor cores.
    [[maybe_unused]] float pending_v = 0.0f;
    [[maybe_unused]] int pending_c = -1;
    const int c0 = get<1>(coord(make_coord(0, 0, 0), 0, 0));  // this thread's first column
    // Blocks left of this one are wholly visible to every row of the tile (pos0 is its least).
    const int full_end = unit.pos0 >= 0 ? (unit.pos0 + 1) / kBlockSize : 0;
    Tensor sQ = make_tensor(make_smem_ptr(smem.q[qb][wg]), typename T::SmemLayoutQ{});
    Tensor tSrQ = thr.partition_fragment_A(sQ);
    for (int col = unit.col0; col < unit.compute_end; ++col, ++use) {
      const int s = prefill_sm90::stage_of(use, T::kStages);
      Barrier64::wait(&smem.k_full[s], prefill_sm90::parity_of(use, T::kStages));
      if (active) {
        Tensor sK = make_tensor(make_smem_ptr(smem.k[s]), typename T::SmemLayoutK{});
        Tensor tSrK = thr.partition_fragment_B(sK);
        warpgroup_fence_operand(acc);
        warpgroup_arrive();
        mma.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
        for (int k = 0; k < size<2>(tSrQ); ++k) {
          gemm(mma, tSrQ(_, _, k), tSrK(_, _, k), acc);
          mma.accumulate_ = GMMA::ScaleOut::One;
        }
        warpgroup_commit_batch();
        if constexpr (kList > 0) {
          if (pending_c >= 0) top.offer(pending_v, pending_c);
          pending_c = -1;
        }
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc);
      }
      const std::uint32_t chunks = smem.chunks[s];
      Barrier64::arrive(&smem.k_empty[s]);
      if (!active) continue;
      const int block_start = col * kBlockSize;
      // Both shapes as separate straight-line code: the diagonal and invalid-page blocks are few.
      float best[2][2];
      if (col < full_end && chunks == prefill_sm90::kAllChunks) {
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int half = 0; half < 2; ++half) best[m][half] = thread_row_max<false>(acc, m, half, 0, 0u);
      } else {
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int half = 0; half < 2; ++half)
            best[m][half] = thread_row_max<true>(acc, m, half, pos[m][half] - block_start - c0, chunks);
      }
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int half = 0; half < 2; ++half) best[m][half] = quad_max(best[m][half]);
      const int j = wt % 4;
      const float mine = j == 0 ? best[0][0] : j == 1 ? best[0][1] : j == 2 ? best[1][0] : best[1][1];
      if constexpr (kList > 0) {
        if (col < row.ranked) pending_v = mine * p.scale, pending_c = col;
      } else {
        out.put(col, mine * p.scale, col + 1 == unit.compute_end, p.stride_scores_col);
      }
    }
    Barrier64::arrive(&smem.q_empty[qb]);
    if constexpr (kList > 0) {
      if (pending_c >= 0) top.offer(pending_v, pending_c);
      finish_row<kList>(p, row, top, unit.col0);
    }
  }
}

template <class T, int kList>
__global__ void __launch_bounds__(kThreads, 1)
    indexer_kernel(const __grid_constant__ IndexerParams p, const __grid_constant__ IndexerTma tma) {
  extern __shared__ std::uint8_t smem_raw[];
  Storage<T>& smem = prefill_sm90::aligned_smem<Storage<T>>(smem_raw);
  const int tid = threadIdx.x;
  if (tid == 32) cute::prefetch_tma_descriptor(&tma.k);
  if (tid == 0) {
    smem.init();
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  wait_for_previous_grid();
  if (tid < 128) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    const std::int64_t total_tiles = count_tiles(p, tid % 32);
    const std::int64_t units = total_tiles * p.chunks;
    if (tid < 32)
      loader<T>(p, tma, smem, total_tiles, units);
    else
      builders<T, kList>(p, smem, total_tiles, units);
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    // The consumers learn each unit from the builders; they need only the count.
    const std::int64_t units = count_tiles(p, tid % 32) * p.chunks;
    consumers<T, kList>(p, smem, units, (tid - 128) / 128);
  }
  allow_next_grid();
}

}  // namespace msa::cuda::indexer_sm90
