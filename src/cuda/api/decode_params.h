// The CUDA sparse decode's geometry, workspace and kernel parameters. The decode runs on the
// query-major tile-union kernel (src/cuda/prefill/sm90/tile_union/): a uniform batch of B
// requests of Q queries (request b holds queries [b Q, (b + 1) Q), found by the kernel as q / Q
// through TileUnionParams::q_per_request; k_len = seq_len), so each (KV head, query tile) pair
// loads the union of its queries' blocks once for all their Q x G rows. When the pairs alone
// would leave SMs idle, each pair runs as `splits` tiles over parts of its union (split-KV), and
// the combine merges the splits' partials; with one split the kernel writes out and lse itself
// (no partials, no combine).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/combine/params.h"
#include "cuda/prefill/sm90/tile_union/params.h"
#include "msa/decode.h"

#include <cuda_runtime.h>

namespace msa::cuda {

// A split is worth its fixed cost (union build, Q load, a partial per row) only with this many
// union entries on average. Measured on the H100 over B 1-4, L 1k-200k, Q 1 and 8 at h_kv 4
// (docs/performance.md steps 14e and 39): one entry per split, against two, took 1-2.2 us off
// the smallest steps (B <= 2, L = 1000) and added 0.8 us at B = 4, L = 1000, Q = 8 in BF16.
inline constexpr int kDecodeMinEntriesPerSplit = 1;
// Splits of a pair: at most kDecodePairSplits; kDecodeMaxSplits (the combine's most slots) where
// so few pairs (1 or 2) would leave most of kDecodeFewCtas CTAs idle and each split keeps
// kDecodeFewPairsMinEntries of the union. 16 splits were faster than 32 on most small steps of 4
// pairs (steps 14e and 39, by up to 4 us; step 70: 8-11% at B = 1-4, Q = 8, h_kv 1-4) and for one
// pair of 48 entries (step 70: B = 1, Q = 3 at h_kv 1, 4-5%), 32 faster for one or two pairs of 64
// entries and more (step 70: 4-22% at B = 1, Q = 4-16, h_kv 1 and 2, which tensor-parallel
// engines run: a 64 / 4-head layer over 4 GPUs is h_q 16, h_kv 1 on each). decode_geometry then
// gives one or two pairs of at most kDecodeMaxSplits entries a split per entry (step 71: Q = 2
// and 3, 2-12% faster).
inline constexpr int kDecodePairSplits = 16;
inline constexpr int kDecodeMaxSplits = 32;
inline constexpr int kDecodeFewCtas = 64;
inline constexpr int kDecodeFewPairsMinEntries = 2;
// The CTAs a split decode aims for: one wave on an H100 / H200 (132 SMs). A constant, not the
// device's count, so that the split (and so the summation order) is the same on every device:
// results are bitwise identical across GPUs, and workspace_bytes() needs no GPU.
inline constexpr int kDecodeCtaTarget = 132;

// The blocks a CTA of the decode or of the prefill's split small calls asks L2 for while its
// first tile's union list is built (TileUnionParams::prefetch_blocks). Measured on the H200
// against 0, 2 and 4 (docs/performance.md step 71, 100 decode steps and 7 split calls): one
// block 2-6% faster on 18 steps (B = 32 Q = 1 4-6%) and 1-3 us on the split calls, none slower;
// two or four blocks slower in BF16 (up to 9% and 22%), their prefetches reaching past a
// CTA's share.
inline constexpr int kTileUnionPrefetchBlocks = 1;

// Splits per (KV head, query tile) pair: about one wave of kDecodeCtaTarget CTAs over `pairs`,
// at least kDecodeMinEntriesPerSplit of a pair's `entries` (its union's bound) each, 1..
// kDecodePairSplits, or up to kDecodeMaxSplits for one or two pairs of kDecodeFewPairsMinEntries
// x kDecodeMaxSplits entries or more. The decode's rule (decode_geometry), also the prefill's
// for its split small calls (prefill.cpp, within kDecodePairSplits).
int decode_splits(std::int64_t pairs, std::int64_t entries);
// The prefill's split small calls (prefill.cpp, prefill_split_union / prefill_split_wide): the
// decode's rule over the (KV head, tile) pairs of total_q queries in tiles of q_per_tile, a
// pair's entries taken at the bound's blocks (max_k_len), within the partials' topk slots and
// kDecodePairSplits (more splits for one or two pairs measured on decode steps only).
int prefill_union_splits(int h_kv, std::int64_t total_q, int q_per_tile, std::int64_t max_k_len, int topk);

struct DecodeGeometry {
  std::int64_t batch = 0;    // B
  int q_per_request = 0;     // Q
  std::int64_t total_q = 0;  // B * Q
  int q_per_tile = 0;        // queries of a tile: tile_union_decode_queries(G), or m x Q where
                             // such tiles split less (decode_geometry)
  std::int64_t pairs = 0;    // h_kv * ceil(total_q / q_per_tile)
  int splits = 1;            // tiles per pair, 1..kDecodeMaxSplits
  std::int64_t entries = 0;  // a pair's union bound: its queries' choices within its requests' blocks
  bool ways = false;         // FP8 K/V: the kernel with ways (tile_union_decode_ways: tiles of
                             // at most kDecodeWayRows rows whose splits can hold two ways' entries)
  bool q_in_ring = false;    // FP8 K/V, no ways: the kernel that brings Q through the ring
                             // (tile_union_decode_q_in_ring: unions expected to repeat blocks)
};

// From host-known sizes only (plan()): B, Q and a bound on seq_len. msa::Error on sizes the CUDA
// decode cannot number in 32 bits.
DecodeGeometry decode_geometry(const AttentionShape& shape, std::int64_t batch, int q_per_request,
                               std::int64_t max_seq_len);

// The workspace, carved from an Arena in this order (docs/layouts.md).
struct DecodeWorkspace {
  void* o_partial = nullptr;             // [splits, total_q, h_q, d] 16-bit (the q dtype); null
                                         // with one split (the kernel writes out)
  float* lse_partial = nullptr;          // [splits, total_q, h_q]; null with one split
  std::size_t bytes = 0;
};
DecodeWorkspace decode_workspace(const AttentionShape& shape, const DecodeGeometry& g, void* base);

// The CUDA decode's own limits on validated arguments (validate_decode), named by argument.
void check_cuda_decode(const DecodeArgs& a);

prefill_sm90::AttentionParams decode_attention_params(const AttentionShape& shape, const DecodeArgs& a,
                                                      const DecodeGeometry& g, const DecodeWorkspace& w);
prefill_sm90::TileUnionParams decode_tile_union_params(const prefill_sm90::AttentionParams& attn,
                                                       const DecodeArgs& a, const DecodeGeometry& g);
// The merge of every row's `splits` partials (null split counts: all rows have all slots).
CombineParams decode_combine_params(const AttentionShape& shape, const DecodeArgs& a, const DecodeGeometry& g,
                                    const DecodeWorkspace& w);

// The decode step's launches (the one dispatch point of the decode; decode.cpp): the tile-union
// kernel over the pairs and, when they split, the combine. Validated arguments; builds the TMA
// descriptors (the last thing that may throw) before launching anything. Also run by the
// prefill for a batch of one request of at most 16 queries (prefill.cpp).
void launch_decode(const AttentionShape& shape, const DecodeArgs& a, const DecodeGeometry& g, const DecodeWorkspace& w,
                   int sm_count, cudaStream_t stream);

}  // namespace msa::cuda
