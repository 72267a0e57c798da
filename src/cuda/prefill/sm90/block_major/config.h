// Shared-memory plan of the KV-block-major kernel: the K/V ring (one stage per work item, so
// the next item's block loads while this one computes) and, per step (one 128-row M tile of an
// item), a Q buffer (later the staged O) with its rows' facts, double buffered.
#pragma once

#include <cstdint>

#include "cuda/prefill/sm90/common/kv_ring.cuh"
#include "cuda/prefill/sm90/common/traits.h"

namespace msa::cuda::prefill_sm90 {

// Per M-row facts of one step, written by the builders and read by softmax and epilogue.
struct RowInfo {
  std::int32_t qg;         // global query index; -1 for a padding row
  std::int32_t h;          // query head, 0..h_q-1
  std::int32_t slot;       // split slot of this (query, block) edge
  std::int32_t key_limit;  // visible keys are tokens [0, key_limit) of the block, 0..128
};

template <class Traits>
struct BlockMajorStorage {
  using Element = typename Traits::Element;
  KvRing<Traits> kv;
  alignas(1024) Element q[2][Traits::kQElements];  // [row, d] swizzled, then O
  RowInfo rows[2][Traits::kTileM];
  // RowCopies only: each row's Q source (nullptr: a padding row or a query outside
  // [0, total_q), which gets zeros), written with its facts.
  const void* q_src[2][Traits::kRowCopies ? Traits::kTileM : 1];
  std::uint32_t chunks[2];             // per Q buffer: the item's block_chunks()
  alignas(8) std::uint64_t q_full[2];  // 96 builder arrivals + the Q TMA bytes (RowCopies: + the
                                       // builders' cp.async completions)
  std::uint64_t q_empty[2];            // 256 consumer arrivals, after the O stores read it

  // One thread, before the CTA barrier.
  __device__ void init() {
    kv.init();
    for (int i = 0; i < 2; ++i) {
      Barrier64::init(&q_full[i], kBuilderThreads);
      Barrier64::init(&q_empty[i], kConsumerThreads);
    }
  }
};

}  // namespace msa::cuda::prefill_sm90
