// The FLOP/byte model of perf/targets.md, counted from the actual top-k rows: effective FLOPs
// of sparse attention (selected, visible keys only) and of the indexer, the HBM bytes of the
// KV-block-major prefill, and the H100 floor max(FLOPs / peak, bytes / bandwidth).
#pragma once

#include <cstdint>
#include <vector>

#include "bench/workload.h"

namespace msa::bench {

// What a selection amounts to. A row's selection is the SET of its ids in
// [0, ceil(k_len / 128)) (spec §1): -1, other out-of-range ids and duplicates count nothing.
struct SelectionStats {
  std::int64_t rows = 0;            // (query, kv head) rows
  std::int64_t edges = 0;           // selected (query, kv head, block) triples: the plan's edges
  std::int64_t visible_tokens = 0;  // over all edges, keys t of the block with t < k_len, t <= pos
  std::int64_t kv_blocks = 0;       // distinct (request, kv head, block) selected at least once
};

// Visible keys of one row: the union over its selected blocks p of tokens
// [128 p, 128 (p + 1)) with t < k_len and t <= pos.
std::int64_t row_visible_tokens(const std::int32_t* ids, int topk, std::int64_t pos,
                                std::int64_t k_len);

// topk: int32 [h_kv, total_q, topk] (prefill, head-major) or, with query_major,
// [total_q, h_kv, topk] (the decode layout); last dim contiguous. requests give q_len and
// k_len of each packed request (decode: q_len = Q, k_len = seq_len).
SelectionStats count_selection(const TensorView& topk, const std::vector<Request>& requests,
                               bool query_major = false);

// QK^T and PV, one multiply-add (2 FLOPs) per element of d each, for every (query head,
// visible selected key): 4 * d * G * visible_tokens. visible_tokens sums over KV heads, so
// with equal rows across heads this is targets.md's 4 * d * h_q * sum_q selected_tokens(q).
double attention_flops(const AttentionShape& shape, const SelectionStats& selection);

// One d-long dot product per (index head, query, visible key): 2 * d * h_i * sum_q (pos + 1).
double indexer_flops(int h_i, int d, const std::vector<Request>& requests);

// HBM bytes of the KV-block-major prefill with 16-bit Q/K/V/O (targets.md "physics"): every
// edge gathers its query's G head rows, writes a normalised partial O and its LSE, which the
// combine reads back; every selected (request, kv head, block) loads its full 128-token K and
// V once; the combine writes out and lse once.
struct PrefillBytes {
  double q_gather = 0;       // edges * G * d * 2
  double partial_write = 0;  // edges * G * (d * 2 + 4): partial O (16-bit) + partial LSE (fp32)
  double partial_read = 0;   // the same, read back by the combine
  double kv = 0;             // kv_blocks * 2 * 128 * d * 2
  double out = 0;            // total_q * h_q * (d * 2 + 4): out + lse
  double total() const { return q_gather + partial_write + partial_read + kv + out; }
};
PrefillBytes prefill_bytes(const AttentionShape& shape, const SelectionStats& selection,
                           std::int64_t total_q);

// H100 80GB SXM figures of targets.md: dense causal attention reaches ~615 TFLOP/s (cuDNN),
// a device-to-device copy ~2.95 TB/s; the model rounds them to 600e12 and 2.9e12.
inline constexpr double kH100FlopsPerSecond = 600e12;
inline constexpr double kH100BytesPerSecond = 2.9e12;

// The time no H100 kernel can beat: max(flops / 600 TFLOP/s, bytes / 2.9 TB/s), in seconds.
double floor_seconds(double flops, double bytes);

}  // namespace msa::bench
