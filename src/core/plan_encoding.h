// The contract between the planners (core/k2q_host.cpp, cuda/plan/) and the kernels that read
// their output: the constants both sides use and the packed words they exchange, each with its
// encoder and decoders. Host and device code include it; docs/layouts.md draws the words.
#pragma once

#include <cstdint>

#include "msa/plan.h"    // WorkItem: the kernels read the work list as WorkItem[work_count]
#include "core/host_device.h"
#include "msa/shapes.h"  // kBlockSize

namespace msa {

inline constexpr float kLog2e = 1.4426950408889634f;  // log2(e): exp(x) = exp2(x * kLog2e)
inline constexpr float kLn2 = 0.6931471805599453f;    // ln(2): ln(x) = log2(x) * kLn2

// One qsplit word per edge of the k2q CSR: the request-local query (q_len < 2^24, checked by
// read_batch) in the low 24 bits and the edge's slot (0..topk-1 < 32) above; -1 marks the unused
// tail of a head's list.
namespace qsplit {
inline constexpr int kQueryBits = 24;
inline constexpr std::uint32_t kQueryMask = (1u << kQueryBits) - 1u;
inline constexpr std::int32_t kUnused = -1;

MSA_HOST_DEVICE constexpr std::int32_t encode(std::int32_t q_local, std::int32_t slot) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(q_local) |
                                   (static_cast<std::uint32_t>(slot) << kQueryBits));
}
MSA_HOST_DEVICE constexpr std::int32_t query(std::int32_t word) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(word) & kQueryMask);
}
MSA_HOST_DEVICE constexpr std::int32_t slot(std::int32_t word) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(word) >> kQueryBits);
}
}  // namespace qsplit

// A (request, block) pair inside one query tile of the tile-union kernel and of the tile
// routing: the tile segment of the request (0..15: its first query's offset in the tile, so
// distinct requests of a tile get distinct segments) in the high bits and the request-local
// block id (< kMaxKvLen / kBlockSize = 2^23) in the low 24; -1 for an id that names no block.
namespace union_key {
inline constexpr int kBlockBits = 24;
inline constexpr std::int32_t kBlockMask = (1 << kBlockBits) - 1;
inline constexpr std::int32_t kNone = -1;

MSA_HOST_DEVICE constexpr std::int32_t encode(int segment, std::int32_t block) {
  return (segment << kBlockBits) | block;
}
MSA_HOST_DEVICE constexpr int segment(std::int32_t key) { return key >> kBlockBits; }
MSA_HOST_DEVICE constexpr std::int32_t block(std::int32_t key) { return key & kBlockMask; }
// The key of top-k id `id` of a query whose request (segment `segment`) has `blocks` blocks.
MSA_HOST_DEVICE constexpr std::int32_t of_id(int segment, std::int32_t id, std::int32_t blocks) {
  return id >= 0 && id < blocks ? encode(segment, id) : kNone;
}
}  // namespace union_key

static_assert(qsplit::slot(qsplit::encode(12345, 31)) == 31 && qsplit::query(qsplit::encode(12345, 31)) == 12345);
static_assert(union_key::segment(union_key::encode(15, (1 << 23) - 1)) == 15);

}  // namespace msa
