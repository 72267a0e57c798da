// TEMPORARY STUB (being written): replaced by the reference operators.
#include "cpu/reference.h"
#include "msa/error.h"
namespace msa::cpu {
void indexer(const IndexerArgs&, float) { throw Error("cpu", "stub", "not written yet"); }
void topk_select(const TopkArgs&, int) { throw Error("cpu", "stub", "not written yet"); }
void sparse_prefill_gather(const AttentionShape&, const PrefillArgs&) { throw Error("cpu", "stub", "not written yet"); }
void sparse_prefill_partials(const AttentionShape&, const PrefillArgs&, const K2qCsr&, float*, float*) { throw Error("cpu", "stub", "not written yet"); }
void combine(const AttentionShape&, const CombineArgs&) { throw Error("cpu", "stub", "not written yet"); }
void sparse_decode(const AttentionShape&, const DecodeArgs&) { throw Error("cpu", "stub", "not written yet"); }
void dense_causal(const AttentionShape&, const TensorView&, const KvCache&, const VarlenBatch&, const TensorView&, const TensorView&, const TensorView&) { throw Error("cpu", "stub", "not written yet"); }
}  // namespace msa::cpu
