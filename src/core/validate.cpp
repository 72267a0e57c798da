// TEMPORARY STUB (being written): replaced by the full validation.
#include "core/validate.h"
#include "core/check.h"
namespace msa {
void validate_shape(const AttentionShape&) {}
void validate_kv(const KvCache&, const BatchInfo&, int, int, DType, Device, bool) {}
void validate_topk(const TensorView&, const BatchInfo&, int, int, bool, Device, bool) {}
BatchInfo validate_prefill(const AttentionShape&, const PrefillArgs& a, const Options&, Device) { return read_batch(a.batch); }
BatchInfo validate_decode(const AttentionShape&, const DecodeArgs& a, const Options&, Device) { return read_decode_batch(a.seq_len, a.q_per_request); }
BatchInfo validate_indexer(int, int, const IndexerArgs& a, Device) { return read_batch(a.batch); }
BatchInfo validate_topk_args(int, const TopkArgs& a, Device) { return read_batch(a.batch); }
void validate_combine(const AttentionShape&, const CombineArgs&, Device) {}
}  // namespace msa
