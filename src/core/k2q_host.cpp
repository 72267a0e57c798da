// TEMPORARY STUB (being written): replaced by the host k2q builder.
#include "msa/plan.h"
#include "msa/error.h"
namespace msa {
K2qSizes k2q_sizes(const AttentionShape&, const ProblemSize&, int) { throw Error("k2q", "stub", "not written yet"); }
K2qCsr build_k2q_csr(const AttentionShape&, const VarlenBatch&, const TensorView&, const Options&) { throw Error("k2q", "stub", "not written yet"); }
}  // namespace msa
