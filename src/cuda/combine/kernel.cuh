// Combine kernel (spec §3). A group of d / 8 lanes owns one (query, head) row: each lane holds
// 8 consecutive channels (one 16-byte load per slot) and the LSEs of slots sub, sub + d/8, ...
// (topk <= 32 fits in 32 / (d/8) registers). The slot sums run in ascending order in every
// lane, so the result is bitwise reproducible and independent of the launch shape.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include <cutlass/arch/barrier.h>

#include "cuda/combine/params.h"
#include "cuda/common/ptx.cuh"
#include "msa/tensor.h"

namespace msa::cuda::combine {

constexpr int kThreads = 256;
constexpr int kSlotsInFlight = 8;  // partial loads issued before their FMAs
constexpr unsigned kFullMask = 0xffffffffu;

// Register i of a lane-distributed array, with i a runtime value (selects, no local memory).
template <int kN>
__device__ __forceinline__ float pick(const float (&v)[kN], int i) {
  float r = 0.f;
#pragma unroll
  for (int k = 0; k < kN; ++k) r = (i == k) ? v[k] : r;
  return r;
}

// acc += c * (8 partial values of the instance's dtype in v).
template <DType kDtype>
__device__ __forceinline__ void accumulate_x8(float (&acc)[8], const uint4& v, float c) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float lo, hi;
    if constexpr (kDtype == DType::kBF16) {
      lo = __uint_as_float(w[k] << 16);
      hi = __uint_as_float(w[k] & 0xffff0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[k]));
      lo = f.x;
      hi = f.y;
    }
    acc[2 * k] = fmaf(c, lo, acc[2 * k]);
    acc[2 * k + 1] = fmaf(c, hi, acc[2 * k + 1]);
  }
}

__device__ __forceinline__ unsigned pack2(float lo, float hi, bool fp16) {
  if (fp16) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
  }
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}

// Writes a merged row's 8 channels of this lane (sub) to out, and its LSE (lane 0 of the group).
__device__ __forceinline__ void store_row(const CombineParams& p, std::int64_t q, int h, std::int64_t row, int sub,
                                          const float (&acc)[8], float lse_out) {
  uint4 packed;
  packed.x = pack2(acc[0], acc[1], p.out_fp16);
  packed.y = pack2(acc[2], acc[3], p.out_fp16);
  packed.z = pack2(acc[4], acc[5], p.out_fp16);
  packed.w = pack2(acc[6], acc[7], p.out_fp16);
  auto* g_out = static_cast<std::uint16_t*>(p.out) + q * p.stride_out_token + h * p.stride_out_head + sub * 8;
  *reinterpret_cast<uint4*>(g_out) = packed;
  if (p.lse != nullptr && sub == 0) p.lse[row] = lse_out;
}

// The sink of head h: a sink that is not finite is ignored (docs/numerics.md), as on the CPU.
struct RowSink {
  float value;  // -inf when absent
  bool present;
};
__device__ __forceinline__ RowSink row_sink(const CombineParams& p, int h) {
  const float neg_inf = -__int_as_float(0x7f800000);
  const float in = p.sinks != nullptr ? p.sinks[h] : neg_inf;
  const bool present = isfinite(in);
  return RowSink{present ? in : neg_inf, present};
}

// m = max(lse_s, sink) over the row's kLanes lanes: exact, so the butterfly order does not
// matter; NaN LSEs are skipped by fmaxf and poison Z in row_weights instead.
template <int kLanes, int kRegs>
__device__ __forceinline__ float row_max(const float (&lse_s)[kRegs], RowSink sink, unsigned group_mask) {
  float m = sink.value;
#pragma unroll
  for (int i = 0; i < kRegs; ++i) m = fmaxf(m, lse_s[i]);
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(group_mask, m, offset, kLanes));
  return m;
}

// The merge's coefficients c (slot sub + i * kLanes in c[i]) and the row's LSE, from the row's
// max m and its n slots: Z sums the sink term first, then the slots in ascending order (the CPU
// reference's order). False where the row has no mass (m or Z not finite, or Z = 0): the row
// is then 0 with LSE -inf, and c is not set.
template <int kLanes, int kRegs>
__device__ __forceinline__ bool row_weights(const float (&lse_s)[kRegs], float m, RowSink sink, int n,
                                            unsigned group_mask, float (&c)[kRegs], float& lse_out) {
  if (!isfinite(m)) return false;
  float w[kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i) w[i] = expf(lse_s[i] - m);  // -inf slots give 0
  float z = sink.present ? expf(sink.value - m) : 0.f;
  for (int s = 0; s < n; ++s) z += __shfl_sync(group_mask, pick(w, s / kLanes), s & (kLanes - 1), kLanes);
  if (!(z > 0.f && isfinite(z))) return false;
  lse_out = m + logf(z);
#pragma unroll
  for (int i = 0; i < kRegs; ++i) c[i] = w[i] / z;
  return true;
}

template <int kD>
struct Lanes {
  static constexpr int kPerRow = kD / 8;      // lanes per row
  static constexpr int kRegs = 32 / kPerRow;  // LSE registers per lane (covers 32 slots)
  static constexpr int kRowsPerCta = kThreads / kPerRow;
  static_assert(kD % 8 == 0 && kPerRow >= 1 && kPerRow <= 32 && (kPerRow & (kPerRow - 1)) == 0);
};

// Merges row (q, h), row = q * h_q + h; called by its whole lane group (lane sub of it).
template <DType kDtype, int kD>
__device__ __forceinline__ void merge_row(const CombineParams& p, std::int64_t q, int h, int sub, unsigned group_mask) {
  constexpr int kLanes = Lanes<kD>::kPerRow;
  constexpr int kRegs = Lanes<kD>::kRegs;
  const std::int64_t rows = p.total_q * p.h_q;
  const std::int64_t row = q * p.h_q + h;
  const int h_kv = p.h_q / p.group;
  // The slot count is read beside the first loads, not before them: with split_counts those
  // take every slot below min(topk, kSlotsInFlight) and the LSEs of every slot below topk (all
  // inside the partials), and the slots past the count are dropped once it is known (a round
  // trip fewer: docs/performance.md, step 77).
  const int n_read = p.split_counts == nullptr ? p.uniform_count : p.split_counts[q * h_kv + h / p.group];
  const int n_first = p.split_counts == nullptr ? p.uniform_count : p.topk;  // slots the first loads take
  const float neg_inf = -__int_as_float(0x7f800000);
  const RowSink sink = row_sink(p, h);

  // The slots' LSEs and the first kSlotsInFlight partials are loaded together (the partials do
  // not depend on the weights), so a merge of up to kSlotsInFlight slots waits for one memory
  // round trip, not two. Each partial is read once: its loads stream (ld.global.cs, evict
  // first), so that the partials not yet merged keep their place in L2 (step 77: 171-512 new
  // tokens 2-6 us shorter).
  float lse_s[kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int s = sub + i * kLanes;
    lse_s[i] = s < n_first ? __ldcs(p.lse_partial + s * rows + row) : neg_inf;
  }
  const std::int64_t slot_stride = rows * kD;  // elements between slots
  const auto* g_o = static_cast<const std::uint16_t*>(p.o_partial) + row * kD + sub * 8;
  uint4 v[kSlotsInFlight];
  const auto load_slots = [&](int s0, int count) {
#pragma unroll
    for (int k = 0; k < kSlotsInFlight; ++k)
      v[k] = s0 + k < count ? __ldcs(reinterpret_cast<const uint4*>(g_o + (s0 + k) * slot_stride))
                            : make_uint4(0, 0, 0, 0);
  };
  load_slots(0, n_first);
  const int n = min(max(n_read, 0), p.topk);
#pragma unroll
  for (int i = 0; i < kRegs; ++i)
    if (sub + i * kLanes >= n) lse_s[i] = neg_inf;  // past the count: no weight, never summed

  const float m = row_max<kLanes>(lse_s, sink, group_mask);
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  float lse_out = neg_inf;
  float c[kRegs];
  if (row_weights<kLanes>(lse_s, m, sink, n, group_mask, c, lse_out)) {
    for (int s0 = 0; s0 < n; s0 += kSlotsInFlight) {
      if (s0 > 0) load_slots(s0, n);
      float cs[kSlotsInFlight];
#pragma unroll
      for (int k = 0; k < kSlotsInFlight; ++k) {
        const int s = s0 + k;
        cs[k] = __shfl_sync(group_mask, pick(c, s / kLanes), s & (kLanes - 1), kLanes);
      }
      // A slot with no mass is skipped: whatever its partial holds stays out of the sum.
#pragma unroll
      for (int k = 0; k < kSlotsInFlight; ++k)
        if (cs[k] != 0.f) accumulate_x8<kDtype>(acc, v[k], cs[k]);
    }
  }

  store_row(p, q, h, row, sub, acc, lse_out);
}

// Three CTAs per SM (80 registers): without the bound ptxas takes 97-115 and fits two.
template <DType kDtype, int kD>
__global__ void __launch_bounds__(kThreads, 3) combine_kernel(const CombineParams p) {
  constexpr int kLanes = Lanes<kD>::kPerRow;
  constexpr int kRowsPerCta = Lanes<kD>::kRowsPerCta;
  const int lane = threadIdx.x & 31;
  const int sub = lane & (kLanes - 1);
  const int group_in_cta = static_cast<int>(threadIdx.x) / kLanes;
  const unsigned group_mask = kLanes == 32 ? kFullMask : ((1u << kLanes) - 1u) << (lane & ~(kLanes - 1));

  // Partials come from the previous kernel on the stream (programmatic dependent launch).
  wait_for_previous_grid();
  if (p.tile_list == nullptr) {  // a lane group per row, every row
    const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerCta + group_in_cta;
    if (row >= p.total_q * p.h_q) return;  // whole lane groups leave together
    const std::int64_t q = row / p.h_q;
    merge_row<kDtype, kD>(p, q, static_cast<int>(row - q * p.h_q), sub, group_mask);
    return;
  }
  // The listed pairs' rows: CTAs i * pair_ctas + j (j < pair_ctas) take the pair at position i
  // of the list (past the count they leave at once), CTA j its rounds j, j + pair_ctas, ... of
  // kRowsPerCta rows r (query r / group of its tile, head r % group of its KV head's group).
  // Whole lane groups leave together. (Pairs are fewer than 2^30: 32-bit indices; the launch
  // keeps pairs x pair_ctas below 2^31.)
  const int pairs = (p.h_q / p.group) * static_cast<int>(p.tiles_per_head);
  const int i = static_cast<int>(blockIdx.x) / p.pair_ctas;
  const int j = static_cast<int>(blockIdx.x) - i * p.pair_ctas;
  if (i >= min(*p.tile_count, pairs)) return;
  const int pair = p.tile_list[i];
  if (pair < 0 || pair >= pairs) return;
  const int kv_head = pair / static_cast<int>(p.tiles_per_head);
  const int q0 = (pair - kv_head * static_cast<int>(p.tiles_per_head)) * p.q_per_tile;  // < total_q
  const int pair_rows = p.q_per_tile * p.group;
#pragma unroll 1
  for (int r = j * kRowsPerCta + group_in_cta; r < pair_rows; r += p.pair_ctas * kRowsPerCta) {
    const int lq = r / p.group;
    if (lq >= p.total_q - q0) return;  // rows go up with r
    merge_row<kDtype, kD>(p, std::int64_t(q0) + lq, kv_head * p.group + r % p.group, sub, group_mask);
  }
}

// The bulk combine (docs/performance.md, step 80). The loads kernel above keeps at most
// kSlotsInFlight partials of a row in flight and waits for two round trips per row, which left
// a random block-major call's combine at 73-75% of the DRAM bandwidth (H200, 2048 new tokens).
// Here a CTA of kBulkThreads merges a unit of BulkShape::kRows rows that lie next to each other
// in o_partial (rows row0 .. row0 + kRows - 1 of one slot are one span of kRows * d * 2 bytes):
// one thread copies the span of every slot a row may hold (topk with split counts, without
// waiting for them) into shared memory with cp.async.bulk (evict-first in L2, one mbarrier),
// while each lane loads its row's LSEs, and the merge then reads the partials from shared
// memory in the loads kernel's order: both kernels give the same bits. It pays from about 2048
// queries of 64 heads on (kCombineBulkMinRows); at 300-512 it measured 2-4 us longer.
inline constexpr int kBulkThreads = kCombineBulkThreads;
inline constexpr int kBulkDataOffset = 128;  // shared memory: the mbarrier, then the slots' spans

template <int kD>
struct BulkShape {
  static constexpr int kLanes = kD / 8;                 // lanes per row, 16 bytes each
  static constexpr int kRows = kBulkThreads / kLanes;   // rows of a unit
  static constexpr int kRowBytes = kD * 2;              // 16-bit partials
  static constexpr int kSpanBytes = kRows * kRowBytes;  // a slot's span of a full unit
};

// Dynamic shared memory of a bulk CTA for up to `topk` slots.
__host__ __device__ constexpr std::size_t bulk_smem_bytes(int topk, int d) {
  return kBulkDataOffset + static_cast<std::size_t>(topk) * (kBulkThreads / (d / 8)) * d * 2;
}

__device__ __forceinline__ std::uint32_t smem_u32(const void* ptr) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(ptr));
}

// The row's count of valid slots (clamped to 0..topk), as merge_row reads it.
__device__ __forceinline__ int row_count(const CombineParams& p, std::int64_t row) {
  if (p.split_counts == nullptr) return p.uniform_count;
  const std::int64_t q = row / p.h_q;
  const int h = static_cast<int>(row - q * p.h_q);
  return min(max(p.split_counts[q * (p.h_q / p.group) + h / p.group], 0), p.topk);
}

// Merges the unit of n_rows (1..kRows) rows from row0 on; every thread of the CTA calls it, and
// the unit's use of the CTA's mbarrier has parity `phase`. Thread t merges row row0 + t / kLanes
// with the lanes of its group.
template <DType kDtype, int kD>
__device__ __forceinline__ void merge_unit(const CombineParams& p, std::int64_t row0, int n_rows, std::uint64_t* bar,
                                           std::uint8_t* data, std::uint32_t phase) {
  using Shape = BulkShape<kD>;
  constexpr int kLanes = Shape::kLanes;
  constexpr int kRegs = Lanes<kD>::kRegs;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int sub = lane & (kLanes - 1);
  const int r = tid / kLanes;
  const unsigned group_mask = kLanes == 32 ? kFullMask : ((1u << kLanes) - 1u) << (lane & ~(kLanes - 1));
  const std::int64_t rows = p.total_q * p.h_q;
  const std::uint32_t span = static_cast<std::uint32_t>(n_rows) * Shape::kRowBytes;

  // One thread: every slot a row may hold (topk with split counts: the spans go out without
  // waiting for the counts; the slots past a row's count are never read), then the spans.
  if (tid == 0) {
    const int n_max = p.split_counts == nullptr ? p.uniform_count : p.topk;
    if (n_max > 0) {
      std::uint64_t policy;
      asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(bar, static_cast<std::uint32_t>(n_max) * span);
      const auto* src = static_cast<const std::uint8_t*>(p.o_partial);
      for (int s = 0; s < n_max; ++s)
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
            "%4;\n" ::"r"(smem_u32(data + s * Shape::kSpanBytes)),
            "l"(src + (s * rows + row0) * Shape::kRowBytes), "r"(span), "r"(smem_u32(bar)), "l"(policy)
            : "memory");
    } else {
      cutlass::arch::ClusterTransactionBarrier::arrive(bar);
    }
  }
  if (r >= n_rows) {  // past a short last unit: only the barrier's phase
    cutlass::arch::ClusterTransactionBarrier::wait(bar, phase);
    return;
  }
  const std::int64_t row = row0 + r;
  const std::int64_t q = row / p.h_q;
  const int h = static_cast<int>(row - q * p.h_q);
  const int n = row_count(p, row);
  const float neg_inf = -__int_as_float(0x7f800000);
  const RowSink sink = row_sink(p, h);
  float lse_s[kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int s = sub + i * kLanes;
    lse_s[i] = s < n ? __ldcs(p.lse_partial + s * rows + row) : neg_inf;
  }

  // From here as merge_row: m, the weights, Z in ascending s, then the slots in ascending s.
  const float m = row_max<kLanes>(lse_s, sink, group_mask);
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  float lse_out = neg_inf;
  float c[kRegs];
  cutlass::arch::ClusterTransactionBarrier::wait(bar, phase);
  if (row_weights<kLanes>(lse_s, m, sink, n, group_mask, c, lse_out)) {
    const std::uint8_t* mine = data + r * Shape::kRowBytes + sub * 16;
    for (int s = 0; s < n; ++s) {
      const float cs = __shfl_sync(group_mask, pick(c, s / kLanes), s & (kLanes - 1), kLanes);
      if (cs != 0.f) accumulate_x8<kDtype>(acc, *reinterpret_cast<const uint4*>(mine + s * Shape::kSpanBytes), cs);
    }
  }

  store_row(p, q, h, row, sub, acc, lse_out);
}

// Every row: CTA i merges unit i (rows i * kRows on). Listed pairs: CTAs i * pair_ctas + j take
// the pair at position i of the list (past the count they leave at once), CTA j its units j,
// j + pair_ctas, ... of the pair's q_per_tile * group / kRows (a unit: kRows of one query's
// group of heads; combine_bulk_applies asks kRows to divide the group).
template <DType kDtype, int kD>
__global__ void __launch_bounds__(kBulkThreads) combine_bulk_kernel(const CombineParams p) {
  using Shape = BulkShape<kD>;
  extern __shared__ __align__(128) std::uint8_t smem[];
  auto* bar = reinterpret_cast<std::uint64_t*>(smem);
  std::uint8_t* data = smem + kBulkDataOffset;
  if (threadIdx.x == 0) {
    cutlass::arch::ClusterTransactionBarrier::init(bar, 1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  // Partials come from the previous kernel on the stream (programmatic dependent launch).
  wait_for_previous_grid();
  const std::int64_t rows = p.total_q * p.h_q;
  if (p.tile_list == nullptr) {
    const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.x) * Shape::kRows;
    if (row0 >= rows) return;
    merge_unit<kDtype, kD>(p, row0, static_cast<int>(rows - row0 < Shape::kRows ? rows - row0 : Shape::kRows), bar,
                           data, 0);
    return;
  }
  const int pairs = (p.h_q / p.group) * static_cast<int>(p.tiles_per_head);
  const int i = static_cast<int>(blockIdx.x) / p.pair_ctas;
  const int j = static_cast<int>(blockIdx.x) - i * p.pair_ctas;
  if (i >= min(*p.tile_count, pairs)) return;
  const int pair = p.tile_list[i];
  if (pair < 0 || pair >= pairs) return;
  const int kv_head = pair / static_cast<int>(p.tiles_per_head);
  const int q0 = (pair - kv_head * static_cast<int>(p.tiles_per_head)) * p.q_per_tile;  // < total_q
  const int parts = p.group / Shape::kRows;                                             // units of a query's heads
  std::uint32_t phase = 0;
#pragma unroll 1
  for (int u = j; u < p.q_per_tile * parts; u += p.pair_ctas) {
    const int lq = u / parts;
    if (lq >= p.total_q - q0) return;  // units go up with u
    const std::int64_t row0 = (std::int64_t(q0) + lq) * p.h_q + kv_head * p.group + (u - lq * parts) * Shape::kRows;
    merge_unit<kDtype, kD>(p, row0, Shape::kRows, bar, data, phase);
    phase ^= 1u;
    __syncthreads();  // every lane has read the spans before the next unit's copies land
  }
}

}  // namespace msa::cuda::combine
