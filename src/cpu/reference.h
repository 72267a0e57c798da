// The CPU reference backend: one function per operator, plain loops, FP32 accumulation
// (FP64 where noted), OpenMP across rows. Arguments are validated by the caller (src/core);
// these functions trust shapes and ranges and never allocate outputs. Top-k rows are read as
// the set of their ids in [0, ceil(k_len / 128)), so no row can cause an out-of-bounds read.
// A row with no visible key gets out = 0 and lse = -inf, or lse = sink when a sink is given
// (the sink's own mass, with its zero value).
#pragma once

#include <cstdint>

#include "msa/combine.h"
#include "msa/decode.h"
#include "msa/indexer.h"
#include "msa/plan.h"
#include "msa/prefill.h"
#include "msa/topk.h"

namespace msa::cpu {

// Indexer scores, spec §5: score[h, q, p] = scale * max over visible tokens of block p of
// <index_q[q, h], index_k[t]>; blocks with no visible token (and columns past the request's
// blocks) hold -inf.
void indexer(const IndexerArgs& args, float scale);

// Top-k, spec §5 (n <= topk: ascending 0..n-1 then -1; else the topk-1 best by the ranking's
// key descending, ties to the smaller id, then the local block).
void topk_select(const TopkArgs& args, int topk, TopkRanking ranking = TopkRanking::kExact);

// Sparse prefill, formulation 1: per (query, head), gather the selected blocks' visible keys
// and take one masked softmax in FP64. Writes out and (if present) lse. Unlike the validated
// operators it accepts page-table entries out of range (or past page_table.shape[1]) and treats
// their tokens as invisible: the oracle of the CUDA backend's rule without strict mode.
void sparse_prefill_gather(const AttentionShape& shape, const PrefillArgs& args);

// Sparse prefill, formulation 2: for every work item of the plan, attention of each of its
// queries over that one block, written as a normalised partial at the query's slot:
//   o_partial [topk, total_q, h_q, d] fp32, lse_partial [topk, total_q, h_q] fp32 (natural log,
//   -inf when the block has no visible key). Slots >= split_counts are left untouched.
void sparse_prefill_partials(const AttentionShape& shape, const PrefillArgs& args,
                             const K2qCsr& plan, float* o_partial, float* lse_partial);

// Combine, spec §3: ascending-slot LSE merge of partials into out (and lse). A sink
// (args.sinks) joins the merge as one more term exp(sink) of value zero.
void combine(const AttentionShape& shape, const CombineArgs& args);

// Sparse decode, spec §4: per (query, head) the FlashAttention-2 online recurrence in base 2
// over the selected blocks in ascending order (lazy rescale, sinks seeded as m = sink*log2e,
// l = 1).
void sparse_decode(const AttentionShape& shape, const DecodeArgs& args);

// Dense causal attention over paged/flat KV (the oracle for the dense-equivalence identity):
// every query attends to keys 0..pos of its request, FP64 softmax. sinks/lse optional.
void dense_causal(const AttentionShape& shape, const TensorView& q, const KvCache& kv,
                  const VarlenBatch& batch, const TensorView& sinks, const TensorView& out,
                  const TensorView& lse);

}  // namespace msa::cpu
