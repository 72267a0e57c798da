// Host-tensor helpers shared by the tests: a deep copy, a small int32 vector, and the "no
// element changed" check against the sentinel an output was filled with (poison.h builds on it).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "bench/workload.h"

namespace msa::test {

inline msa::bench::HostTensor copy_of(const msa::bench::HostTensor& t) {
  msa::bench::HostTensor c(t.dtype(), t.shape());
  std::memcpy(c.raw(), t.raw(), t.bytes());
  return c;
}

// An int32 [n] tensor holding `values` (batch vectors: cu_seqlens, k_len, seq_len).
inline msa::bench::HostTensor int_tensor(const std::vector<std::int32_t>& values) {
  msa::bench::HostTensor t(msa::DType::kInt32, {static_cast<std::int64_t>(values.size())});
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(std::int32_t));
  return t;
}

// True when every element still reads as `sentinel`.
inline bool all_equal(const msa::bench::HostTensor& t, float sentinel) {
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (t.get(i) != sentinel) return false;
  return true;
}

}  // namespace msa::test
