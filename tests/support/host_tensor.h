// Host-tensor helpers shared by the tests: a deep copy, and the "no element changed" check
// against the sentinel an output was filled with.
#pragma once

#include <cstdint>
#include <cstring>

#include "bench/workload.h"

namespace msa::test {

inline msa::bench::HostTensor copy_of(const msa::bench::HostTensor& t) {
  msa::bench::HostTensor c(t.dtype(), t.shape());
  std::memcpy(c.raw(), t.raw(), t.bytes());
  return c;
}

// True when every element still reads as `sentinel`.
inline bool all_equal(const msa::bench::HostTensor& t, float sentinel) {
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (t.get(i) != sentinel) return false;
  return true;
}

}  // namespace msa::test
