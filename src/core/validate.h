// Validation of every operator's arguments (spec §8): each check throws msa::Error naming
// the argument and the value, before any output is written. Functions return the host batch
// view they read so callers need not read it twice.
#pragma once

#include "core/batch.h"
#include "msa/combine.h"
#include "msa/decode.h"
#include "msa/indexer.h"
#include "msa/options.h"
#include "msa/prefill.h"
#include "msa/topk.h"

namespace msa {

// h_q, h_kv >= 1, h_q % h_kv == 0, group <= 16, d == 128 (until other instances exist),
// topk in 1..32, finite non-negative scale.
void validate_shape(const AttentionShape& shape);

// K/V storage against the shape and batch: dtype, ranks, h_kv, d, page size in
// {16, 32, 64, 128}, page table [B, >= max pages] with entries in [0, num_pages) for every page
// a request uses, flat cu_seqlens_k covering k_len and within total_k. require_v = false for
// the indexer's cache (one head, v absent).
void validate_kv(const KvCache& kv, const BatchInfo& batch, int h_kv, int d, DType dtype,
                 Device device, bool require_v);

// topk rows [h_kv, total_q, topk] int32. strict: ids a -1-padded prefix, unique, in
// [0, local], the last valid id == local, and min(topk, local + 1) valid ids; the first
// offender is named as topk[head, query, slot] = value.
void validate_topk(const TensorView& topk, const BatchInfo& batch, int h_kv, int topk_width,
                   bool strict, Device device, bool head_major = true);

BatchInfo validate_prefill(const AttentionShape& shape, const PrefillArgs& args,
                           const Options& options, Device device);
BatchInfo validate_decode(const AttentionShape& shape, const DecodeArgs& args,
                          const Options& options, Device device);
BatchInfo validate_indexer(int h_i, int d, const IndexerArgs& args, Device device);
BatchInfo validate_topk_args(int topk, const TopkArgs& args, Device device);
void validate_combine(const AttentionShape& shape, const CombineArgs& args, Device device);

}  // namespace msa
