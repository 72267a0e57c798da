// The K/V ring of both sm_90a prefill kernels: one 128-token block of one KV head loaded with
// TMA into a 2-stage ring (one box per page and column half), the V rows past k_len zeroed, and
// the valid-page mask of a block. The loader warp of each kernel calls KvLoader::load once per
// block it streams; the consumers release a stage through k_empty / v_empty.
//
// FP8 E4M3 K/V (Traits::kFp8Kv, the tile-union kernel of the decode): TMA lands a block's FP8
// rows in the back half of its 16-bit stage (Traits::kFp8CodesOffset), and they are widened
// there, in place (widen_fp8_block, rows past k_len as zeros), to fp16: K by the builder warps,
// published on k_full with their 96 arrivals; V by the two consumer warpgroups, a phase
// before their P V needs it, published on v_full with their 256. Both stages of K and of V can so
// hold codes in flight while the previous block is widened or used.
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/tensor.hpp>

#include "cuda/common/ptx.cuh"
#include "cuda/prefill/sm90/common/params.h"
#include "cuda/prefill/sm90/common/traits.h"

namespace msa::cuda::prefill_sm90 {

using Barrier64 = cutlass::arch::ClusterTransactionBarrier;

// Stage and parity of the use-th fill of a ring of `stages`.
__device__ __forceinline__ int stage_of(std::uint32_t use, int stages) { return static_cast<int>(use % stages); }
__device__ __forceinline__ std::uint32_t parity_of(std::uint32_t use, int stages) { return (use / stages) & 1u; }

// FP8 only (otherwise empty): k_landed[s], v_landed[s], the TMA bytes of stage s's codes
// landed (the stage's k_full / v_full then wait for the widening).
template <class Traits, bool = Traits::kFp8Kv>
struct Fp8Landed {
  __device__ void init() {}
};
template <class Traits>
struct Fp8Landed<Traits, true> {
  alignas(8) std::uint64_t k_landed[kStages], v_landed[kStages];
  __device__ void init() {
    for (int i = 0; i < kStages; ++i) {
      Barrier64::init(&k_landed[i], 1);
      Barrier64::init(&v_landed[i], 1);
    }
  }
};

// The ring's shared memory and barriers; each kernel's SharedStorage holds one.
//   k_full[s], v_full[s]: TMA bytes landed (FP8: the block widened in place, K by the 96
//                         builders, V by the 256 consumers)
//   k_empty[s], v_empty[s]: 256 consumer arrivals
//   v_tail: the loader's own barrier for a V block it must zero-fill past k_len
template <class Traits>
struct KvRing {
  using Element = typename Traits::Element;
  alignas(1024) Element k[kStages][Traits::kKvElements];  // [token, d] swizzled
  alignas(1024) Element v[kStages][Traits::kKvElements];  // [token, d] swizzled
  alignas(8) std::uint64_t k_full[kStages], k_empty[kStages];
  std::uint64_t v_full[kStages], v_empty[kStages];
  std::uint64_t v_tail;
  Fp8Landed<Traits> fp8;

  // One thread, before the CTA barrier.
  __device__ void init() {
    for (int i = 0; i < kStages; ++i) {
      Barrier64::init(&k_full[i], Traits::kFp8Kv ? kBuilderThreads : 1);
      Barrier64::init(&v_full[i], Traits::kFp8Kv ? kConsumerThreads : 1);
      Barrier64::init(&k_empty[i], kConsumerThreads);
      Barrier64::init(&v_empty[i], kConsumerThreads);
    }
    Barrier64::init(&v_tail, 1);
    fp8.init();
  }
};

// Tokens of a block are visible only on valid pages (docs/numerics.md): bit c of the result
// says that tokens [16c, 16c + 16) lie on a page-table entry inside the table and in
// [0, num_pages). Tokens past k_len count as valid (the key limits hide them). Flat K/V: all.
constexpr std::uint32_t kAllChunks = (1u << (kBlockSize / 16)) - 1u;

// The page of a paged K/V box (logical token `logical` of request b, at a page start) and
// whether its tokens are valid: before k_len, the page-table entry, valid when inside the table
// and in [0, num_pages); past k_len (valid: the key limits hide them) or past the table
// (invalid), num_pages, which TMA addresses out of bounds and fills with zeros.
struct BoxPage {
  int page;
  bool valid;
};
__device__ __forceinline__ BoxPage box_page(const AttentionParams& p, int b, int logical, int k_len) {
  const int oob = static_cast<int>(min(p.num_pages, std::int64_t(INT32_MAX)));
  if (logical >= k_len) return {oob, true};
  const int col = logical / p.page_size;  // 32-bit: logical < k_len
  if (col >= p.page_table_cols) return {oob, false};
  const int page = p.page_table[std::int64_t(b) * p.stride_page_table + col];
  return {page, page >= 0 && page < p.num_pages};
}

__device__ __forceinline__ std::uint32_t block_chunks(const AttentionParams& p, int b, int block_start, int k_len) {
  if (p.page_table == nullptr) return kAllChunks;
  std::uint32_t mask = 0;
  const int per_page = p.page_size / 16;
  for (int t0 = 0; t0 < kBlockSize; t0 += p.page_size)
    if (box_page(p, b, block_start + t0, k_len).valid) mask |= ((1u << per_page) - 1u) << (t0 / 16);
  return mask;
}

// Issues the TMA boxes of one K or V block (tokens [block_start, block_start + 128) of request
// b) into the block at `dst` (at Traits::kv_load_offset), completing on `bar`: lane j issues
// page j (paged) or lane 0 the whole block (flat). Pages wholly past k_len, and ids outside
// [0, num_pages), are addressed out of bounds, which TMA fills with zeros without reading. The
// caller armed `bar` with kBlockBytes.
template <class Traits>
__device__ __forceinline__ void load_block(const AttentionParams& p, const CUtensorMap* map, int box_rows, int kv_head,
                                           int b, int block_start, int k_len, void* dst, std::uint64_t* bar,
                                           int lane) {
  const int pages = Traits::kBlockN / box_rows;
  if (lane >= pages) return;
  const int t0 = lane * box_rows;
  int token, page;
  if (p.page_table != nullptr) {
    token = 0;
    page = box_page(p, b, block_start + t0, k_len).page;
  } else {
    token = p.cu_seqlens_k[b] + block_start;
    page = 0;
  }
  auto* bytes = reinterpret_cast<std::uint8_t*>(dst);
#pragma unroll
  for (int c = 0; c < Traits::kKvLoadBoxes; ++c)
    cute::SM90_TMA_LOAD_4D::copy(map, bar, static_cast<std::uint64_t>(cute::TMA::CacheHintSm90::EVICT_LAST),
                                 bytes + Traits::kv_load_offset(t0, c), c * Traits::kKvLoadCols, token, kv_head, page);
}

// Zeroes token rows [tokens, 128) of a K-layout block (whole 128-byte rows, so the swizzle
// does not matter) and makes the writes visible to the async proxy. One warp.
template <class Traits>
__device__ __forceinline__ void zero_tail(typename Traits::Element* dst, int tokens, int lane) {
  using Element = typename Traits::Element;
  constexpr int kChunks = 128 / 16;  // 16-byte chunks per 128-byte row
  const int count = (Traits::kBlockN - tokens) * Traits::kColHalves * kChunks;
  for (int i = lane; i < count; i += 32) {
    const int row = tokens + i / (Traits::kColHalves * kChunks);
    const int c = (i / kChunks) % Traits::kColHalves;
    const int chunk = i % kChunks;
    *reinterpret_cast<uint4*>(dst + Traits::kv_box_offset(row, c) + chunk * (16 / sizeof(Element))) =
        make_uint4(0u, 0u, 0u, 0u);
  }
  cutlass::arch::fence_view_async_shared();
}

// Four E4M3 codes (byte i = column i) -> two fp16 pairs, exactly (the hardware conversion; the
// NaN codes stay NaN).
__device__ __forceinline__ uint2 widen_e4m3x4_f16(std::uint32_t codes) {
  uint2 out;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n cvt.rn.f16x2.e4m3x2 %1, hi;\n}"
      : "=r"(out.x), "=r"(out.y)
      : "r"(codes));
  return out;
}

// Widens the FP8 block whose codes TMA landed in the back half of the 16-bit block `dst` (row
// t's 128 codes at kFp8CodesOffset + kv_load_offset(t, 0), 128-byte swizzled) into `dst` itself
// ([token, d] in column halves, swizzled, fp16), in place: row
// t's codes lie where row t's columns 64-127 go, so the 8 lanes of a row (one warp's) read all
// of its codes before any of them writes. Rows [zero_from, 128) are written as zeros without
// being read (V past k_len: stale cache bytes may hold NaN codes). kCount threads (whole warps),
// this one `i`: 8 per row, each 16 codes, kCount / 8 rows per pass, two passes' loads in flight
// together. Afterwards each thread's writes are made visible to WGMMA (the async proxy); the
// caller publishes `dst`.
//
// The passes advance by kCount / 8 rows, a multiple of 4, so a row's swizzle (its index mod 8)
// is this thread's first row's, or that XOR 4: every address is one of two per-thread bases
// plus the pass's offset (docs/performance.md step 24).
template <class Traits, int kCount>
__device__ __forceinline__ void widen_fp8_block(typename Traits::Element* dst, int zero_from, int i) {
  static_assert(Traits::kFp8Kv);
  constexpr int kRows = kCount / 8;  // rows per pass
  constexpr int kPasses = (Traits::kBlockN + kRows - 1) / kRows;
  static_assert(kCount % 32 == 0 && kRows % 4 == 0);
  const auto u = static_cast<std::uint32_t>(i);
  const std::uint32_t j = u % 8;   // 16-byte chunk of the row's codes: columns [16 j, 16 j + 16)
  const std::uint32_t r0 = u / 8;  // first row
  const std::uint32_t out = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst)) + r0 * 128u;
  // Row r0 + p kRows, swizzle x = (r0 % 8) ^ (p kRows % 8): codes chunk j at 16 (j ^ x); its
  // 16-bit columns in column half j / 4, chunks c0 = 2 (j % 4) and c0 + 1, at 16 (c ^ x).
  std::uint32_t in_at[2], out_at[2][2];
#pragma unroll
  for (int f = 0; f < 2; ++f) {
    const std::uint32_t x = (r0 % 8) ^ (4u * f);
    in_at[f] = out + Traits::kFp8CodesOffset + 16u * (j ^ x);
    out_at[f][0] = out + (j / 4) * (Traits::kBlockN * 128u) + 16u * ((2 * (j % 4)) ^ x);
    out_at[f][1] = out + (j / 4) * (Traits::kBlockN * 128u) + 16u * ((2 * (j % 4) + 1) ^ x);
  }
  const unsigned row_lanes = 0xffu << (u & 24u);  // the 8 lanes of this thread's rows
  // Passes p0 and p0 + 1 per iteration (p0 even): the second's swizzle is the first's XOR 4 when
  // kRows / 4 is odd, and the first's is this thread's first row's.
  constexpr int kF1 = (kRows / 4) % 2;
  int row = static_cast<int>(r0);
  std::uint32_t off = 0;
#pragma unroll 1
  for (int p0 = 0; p0 < kPasses; p0 += 2, row += 2 * kRows, off += 2 * kRows * 128) {
    uint4 codes[2];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      codes[q] = make_uint4(0u, 0u, 0u, 0u);
      if (row + q * kRows < zero_from)  // zero_from <= 128 (the block's tokens): no row past it
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(codes[q].x), "=r"(codes[q].y), "=r"(codes[q].z), "=r"(codes[q].w)
                     : "r"(in_at[q * kF1] + off + q * kRows * 128)
                     : "memory");
    }
    __syncwarp(row_lanes);  // both rows read before their lanes overwrite them
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      if (Traits::kBlockN % (2 * kRows) != 0 && row + q * kRows >= Traits::kBlockN) continue;
      const std::uint32_t at = off + q * kRows * 128;
      const uint2 w0 = widen_e4m3x4_f16(codes[q].x), w1 = widen_e4m3x4_f16(codes[q].y);  // zero codes widen to zeros
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(out_at[q * kF1][0] + at), "r"(w0.x), "r"(w0.y),
                   "r"(w1.x), "r"(w1.y)
                   : "memory");
      const uint2 w2 = widen_e4m3x4_f16(codes[q].z), w3 = widen_e4m3x4_f16(codes[q].w);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(out_at[q * kF1][1] + at), "r"(w2.x), "r"(w2.y),
                   "r"(w3.x), "r"(w3.y)
                   : "memory");
    }
  }
  cutlass::arch::fence_view_async_shared();
}

// FP8: widens ring block `use`'s K (kV false) or V in its stage once the codes landed, and
// publishes the stage; kCount threads take part, this one `i`. The builders widen K (96
// threads), the consumers V (256); the barrier counts say so (KvRing::init). The loader waited
// for the stage to be free before it issued the codes.
template <class Traits, bool kV, int kCount>
__device__ __forceinline__ void widen_landed(KvRing<Traits>& ring, std::uint32_t use, int tokens, int i) {
  const int s = static_cast<int>(use & 1u);
  Barrier64::wait(kV ? &ring.fp8.v_landed[s] : &ring.fp8.k_landed[s], phase_of(use));
  widen_fp8_block<Traits, kCount>(kV ? ring.v[s] : ring.k[s], tokens, i);
  Barrier64::arrive(kV ? &ring.v_full[s] : &ring.k_full[s]);
}

// The loader warp's side of the ring: the blocks it streams, in order, each into the next stage.
template <class Traits>
struct KvLoader {
  const AttentionParams& p;
  const PrefillTma& tma;
  KvRing<Traits>& ring;
  std::uint32_t use = 0;         // blocks loaded so far
  std::uint32_t tail_phase = 0;  // v_tail's parity

  // Loads one block's K and V (tokens [block_start, block_start + 128) of request b, KV head
  // kv_head) into stage use & 1, after waiting for the stage to be free. A block that ends past
  // k_len has its V rows there zeroed before v_full completes (stale cache memory may hold NaN,
  // and P = 0 times NaN is NaN): its V goes through the loader's v_tail barrier first. One warp.
  __device__ __forceinline__ void load(int kv_head, int b, int block_start, int k_len) {
    const int lane = opaque_tid();
    const int s = static_cast<int>(use & 1u);
    // One block's K or V boxes into `dst`, completing on `bar` (armed with its bytes first).
    const auto issue = [&](const CUtensorMap* map, void* dst, std::uint64_t* bar) {
      if (lane == 0) Barrier64::arrive_and_expect_tx(bar, Traits::kBlockBytes);
      __syncwarp();
      load_block<Traits>(p, map, tma.kv_box_rows, kv_head, b, block_start, k_len, dst, bar, lane);
    };
    Barrier64::wait(&ring.k_empty[s], phase_of(use) ^ 1u);
    if constexpr (Traits::kFp8Kv) {  // codes into the stage's back half; widened there, then published
      issue(&tma.k, reinterpret_cast<std::uint8_t*>(ring.k[s]) + Traits::kFp8CodesOffset, &ring.fp8.k_landed[s]);
      Barrier64::wait(&ring.v_empty[s], phase_of(use) ^ 1u);
      issue(&tma.v, reinterpret_cast<std::uint8_t*>(ring.v[s]) + Traits::kFp8CodesOffset, &ring.fp8.v_landed[s]);
      ++use;
      return;
    }
    issue(&tma.k, ring.k[s], &ring.k_full[s]);
    Barrier64::wait(&ring.v_empty[s], phase_of(use) ^ 1u);
    // Tested on the unclamped distance: a whole block below k_len.
    if (k_len - block_start >= Traits::kBlockN) {
      issue(&tma.v, ring.v[s], &ring.v_full[s]);
    } else {
      issue(&tma.v, ring.v[s], &ring.v_tail);
      Barrier64::wait(&ring.v_tail, tail_phase);
      tail_phase ^= 1u;
      zero_tail<Traits>(ring.v[s], max(0, k_len - block_start), lane);
      __syncwarp();
      if (lane == 0) Barrier64::arrive(&ring.v_full[s]);
    }
    ++use;
  }
};

}  // namespace msa::cuda::prefill_sm90
