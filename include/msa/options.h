// Backend choice and the knobs shared by the operator objects.
#pragma once

#include <cstdint>

// The one CUDA type of the public API, declared as the toolkit declares it so that this
// header needs no CUDA include. nullptr is the default stream.
typedef struct CUstream_st* cudaStream_t;

namespace msa {

enum class Backend : std::uint8_t { kCpu, kCuda };
const char* backend_name(Backend b);
// True when this build has the CUDA backend and a CUDA device is visible.
bool cuda_available();

struct Options {
  Backend backend = Backend::kCpu;
  // Check the top-k producer contract (ids unique, a -1-padded prefix, <= the local block,
  // the local block last) and report the first offending (head, query, slot, value). Off, the
  // operators still never read out of bounds: a row's selection is the set of its in-range ids.
  bool strict = false;
  // Planner: a work item covers at most this many of a block's queries (spec §2).
  int q_per_item = 64;
};

}  // namespace msa
