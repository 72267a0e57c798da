// Scratch bytes for CUB's device-wide scan and select, computed on the host without a GPU.
//
// CUB sizes its scratch from the tuning policy of the device it finds, so asking it needs a
// visible device; workspace_bytes() must not (a serving engine sizes memory before it has one).
// CUB's scratch is one tile-status word and its partial values per tile of items, plus a few
// aligned allocations: 64 bytes per 64 items (no sm_90 policy has tiles that small or status
// entries that large) plus 4 KiB covers it. Each launch asks CUB for the real figure and checks
// it against this bound (cub_temp_check), so a CUB that ever needs more fails by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/check.h"

namespace msa::cuda {

inline std::size_t cub_temp_bound(std::int64_t items) {
  const auto tiles = static_cast<std::size_t>((items + 63) / 64) + 64;
  return tiles * 64 + 4096;
}

inline void cub_temp_check(std::size_t needed, std::size_t have, const char* what) {
  MSA_REQUIRE(needed <= have, what, std::to_string(needed) + " bytes",
              "internal: CUB needs more scratch than cub_temp_bound() reserves (" + std::to_string(have) + ")");
}

}  // namespace msa::cuda
