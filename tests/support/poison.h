// Poisoning, so that a test sees what a call must not read or write:
//  - outputs filled with a sentinel before a call that must fail (or must leave some entries
//    alone), then checked for it (host tensors here; device buffers: device_tensor.h poison(),
//    which writes all-ones bytes, NaN in bf16 / fp16 / fp32, checked with is_poison_bits);
//  - NaN in every K/V cache slot no request may read (past each request's k_len, and pages
//    no request's used page-table entries name), which no result may depend on: P is 0 there,
//    but 0 * NaN is not.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "bench/workload.h"
#include "tests/support/host_tensor.h"

namespace msa::test {

// What outputs are filled with before a call that must not write them.
inline constexpr float kSentinel = 7.f;

inline msa::bench::HostTensor sentinel_tensor(msa::DType dtype, std::vector<std::int64_t> shape,
                                              float sentinel = kSentinel) {
  msa::bench::HostTensor t(dtype, std::move(shape));
  t.fill(sentinel);
  return t;
}

// True when no element of t changed from the sentinel.
inline bool untouched(const msa::bench::HostTensor& t, float sentinel = kSentinel) {
  return all_equal(t, sentinel);
}

inline bool any_nan(const msa::bench::HostTensor& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (std::isnan(t.get(i))) return true;
  return false;
}

// The byte a poisoned device buffer holds: all-ones elements are NaN in bf16, fp16 and fp32.
inline constexpr unsigned char kPoisonByte = 0xFF;

// True when all `bytes` bytes at p still hold kPoisonByte (an entry nothing wrote).
inline bool is_poison_bits(const void* p, std::size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; ++i)
    if (b[i] != kPoisonByte) return false;
  return true;
}

// Writes NaN into every K and V slot (token, all heads, all of d) that no request reads: paged,
// the slots past k_len in a request's last page and every page no request's used page-table
// entries name; flat, the tokens between one request's k_len and the next one's start and past
// the last. Returns the number of poisoned token slots (per head). Workloads with host values.
inline std::int64_t poison_unread_cache(msa::bench::Workload& w) {
  if (!w.spec.host_values || w.k.empty()) return 0;
  const msa::KvCache kv = w.kv();
  const auto& req = w.spec.requests;
  const bool paged = w.spec.page_size > 0;
  const std::int64_t h_kv = kv.k.shape[1];
  const std::int64_t d = kv.k.shape[kv.k.rank - 1];
  const std::int64_t ps = paged ? w.spec.page_size : 1;
  const std::int64_t slots = paged ? kv.k.shape[0] * ps : kv.k.shape[0];  // (page, offset) or token
  std::vector<char> read(static_cast<std::size_t>(slots), 0);
  for (std::size_t b = 0; b < req.size(); ++b)
    for (std::int64_t t = 0; t < req[b].k_len; ++t) {
      std::int64_t slot = t;
      if (paged) {
        const std::int64_t cols = w.page_table.shape()[1];
        slot = std::int64_t{w.page_table.data<std::int32_t>()[std::int64_t(b) * cols + t / ps]} * ps + t % ps;
      } else {
        slot += w.cu_seqlens_k.data<std::int32_t>()[b];
      }
      read[static_cast<std::size_t>(slot)] = 1;
    }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::int64_t poisoned = 0;
  for (std::int64_t s = 0; s < slots; ++s) {
    if (read[static_cast<std::size_t>(s)]) continue;
    ++poisoned;
    for (std::int64_t h = 0; h < h_kv; ++h) {
      const std::int64_t base = paged ? (s / ps) * kv.k.stride[0] + h * kv.k.stride[1] + (s % ps) * kv.k.stride[2]
                                      : s * kv.k.stride[0] + h * kv.k.stride[1];
      for (std::int64_t i = 0; i < d; ++i) {
        w.k.set(base + i, nan);
        w.v.set(base + i, nan);
      }
    }
  }
  return poisoned;
}

}  // namespace msa::test
