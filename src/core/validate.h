// Validation of every operator's arguments (spec §8): each check throws msa::Error naming
// the argument and the value, before any output is written. Functions return the host batch
// view they read so callers need not read it twice.
//
// `device` is the backend's device; every tensor of a call must live there. For
// Device::kCuda only metadata (presence, device, dtype, rank, shape, strides, alignment) can
// be checked from the host: values (batch lengths, page-table entries, cu_seqlens_k, strict
// top-k rows, split counts) are not read, and the returned BatchInfo holds only batch and
// total_q (from the tensors' shapes) with empty per-request vectors and max_k_len = 0.
#pragma once

#include <string>

#include "core/batch.h"
#include "msa/combine.h"
#include "msa/decode.h"
#include "msa/indexer.h"
#include "msa/options.h"
#include "msa/prefill.h"
#include "msa/topk.h"

namespace msa {

// h_q, h_kv in 1..kMaxHeads, h_q % h_kv == 0, group <= 16, d == 128 (until other instances
// exist), topk in 1..32, finite non-negative scale.
void validate_shape(const AttentionShape& shape);

// K/V storage against the shape and batch: dtype, ranks, h_kv, d, page size in
// {16, 32, 64, 128}, v with k's exact shape and strides, page table [B, >= max pages] with
// entries in [0, num_pages) for every page a request uses, flat cu_seqlens_k covering k_len and
// within total_k. require_v = false for the indexer's cache (one head, v absent). Argument
// names are prefixed with `prefix` ("index_k." for the indexer: "index_k.page_table[0, 3]").
void validate_kv(const KvCache& kv, const BatchInfo& batch, int h_kv, int d, DType dtype,
                 Device device, bool require_v, const std::string& prefix = "");

// topk rows [h_kv, total_q, topk] int32 (head_major) or [total_q, h_kv, topk]. strict: each row
// must keep the producer contract (check_row_contract of core/k2q_host.h); the first offender
// in memory order is named by its tensor index, topk[head, query, slot] (head-major) or
// topk[query, head, slot], with its value.
void validate_topk(const TensorView& topk, const BatchInfo& batch, int h_kv, int topk_width,
                   bool strict, Device device, bool head_major = true);

// Options: a known backend and prefill path, q_per_item in 1..2^20.
void validate_options(const Options& options);

BatchInfo validate_prefill(const AttentionShape& shape, const PrefillArgs& args,
                           const Options& options, Device device);
BatchInfo validate_decode(const AttentionShape& shape, const DecodeArgs& args,
                          const Options& options, Device device);
BatchInfo validate_indexer(int h_i, int d, const IndexerArgs& args, Device device);
BatchInfo validate_topk_args(int topk, const TopkArgs& args, Device device);
// IndexerTopK: the indexer's inputs, topk [h_i, total_q, topk] int32, and (values) every
// k_len <= the planned max_k_len.
BatchInfo validate_indexer_topk(int h_i, int d, int topk, const IndexerTopkArgs& args, std::int64_t max_k_len,
                                Device device);
// total_q is o_partial.shape[1]; on the CPU every split count must lie in [0, topk].
void validate_combine(const AttentionShape& shape, const CombineArgs& args, Device device,
                      bool strict = false);

// Host-known problem sizes (workspace sizing, plan capacities): batch in [0, 2^31 - 1),
// total_q in [0, 2^31), max_k_len in [0, kMaxKvLen].
void validate_problem(const ProblemSize& problem);

// A decode plan's host sizes (SparseDecode::plan, every backend): q_per_request in 1..16, the
// problem sizes above, and batch * q_per_request query rows in int32.
void validate_decode_plan(std::int64_t batch, int q_per_request, std::int64_t max_seq_len);

}  // namespace msa
