// Coverage-guided fuzz target (libFuzzer) of the public msa API on the CPU backend.
//
// One input is one call (or one short sequence of calls) of the API: a fixed 20-byte header
// (struct Header below; tests/fuzz/make_corpus.py writes the seeds with the same layout), then
// per-request lengths, then up to kMaxMutations "mutations" that make the arguments hostile
// (a tensor's shape, stride, rank, dtype, device, alignment, presence or one element; the
// attention shape; the options). Tensor values come from an RNG seeded by the header, so inputs
// stay small.
//
// Memory truth: every TensorView the harness builds points into a buffer the harness owns that
// spans exactly the elements the view can reach from its shape and strides (negative and zero
// strides included), so AddressSanitizer sees any read or write outside a view. Inputs whose
// reachable span is too large are skipped (return -1).
//
// Invariants (a violation aborts with "==msa_fuzz== INVARIANT ..." on stderr):
//   a. no exception other than msa::Error escapes the API;
//   b. an msa::Error names a non-empty argument and value, and no output byte has changed;
//   c. on success with finite inputs (no NaN/inf in data the call can see; sinks not NaN unless
//      MSA_FUZZ_ALLOW_NAN_SINKS=1), no output holds a NaN;
//   d. on success with ordinary inputs (|values| < 0.5, default scale, finite moderate sinks, no
//      mutation): SparsePrefill and SparseDecode match the FP64 oracle
//      msa::cpu::sparse_prefill_gather (out: 1e-2 + 1e-2 |ref|, lse: 1e-3, same -inf
//      positions); the indexer, top-k and combine match the harness's own FP64 oracles;
//   e. (libFuzzer flags) no allocation beyond -malloc_limit_mb from these small inputs;
//   f. a call that succeeds was given no view with a negative stride, a non-unit last-dim stride
//      or a misaligned pointer (the layout rules of every tensor argument);
//   g. on success nothing outside the output views' elements changed (padding, gaps);
//   h. plan arrays (build_k2q_csr, plan_snapshot) are consistent; workspace_bytes never wraps.
//
// Environment: MSA_FUZZ_VERBOSE=1 prints every API call and its outcome (triage);
// MSA_FUZZ_ALLOW_NAN_SINKS=1 exempts NaN sinks from invariant c; MSA_FUZZ_SKIP_OPS=a,b leaves
// operators out (prefill, decode, indexer, topk, combine, plan, sizes, tensor_view), e.g. to
// keep a long run off a known, still-open finding.
//
// Build: cmake --preset fuzz && cmake --build --preset fuzz; run: see README.md "Fuzzing".
//
// Files: fuzz_input.h (header, reader, values), fuzz_tensor.h (tensors, index walks),
// fuzz_ctx.{h,cpp} (mutations, materialisation, invariant checks, call wrappers),
// fuzz_build.{h,cpp} (problem builders, the FP64 attention oracle) and one harness file per
// operator group (fuzz_ops.h lists them).
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/fuzz/fuzz_ctx.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_ops.h"

using namespace msa_fuzz;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  omp_set_num_threads(1);
  const char* env = std::getenv("MSA_FUZZ_ALLOW_NAN_SINKS");
  g_allow_nan_sinks = env != nullptr && env[0] == '1';
  env = std::getenv("MSA_FUZZ_VERBOSE");
  g_verbose = env != nullptr && env[0] == '1';
  if ((env = std::getenv("MSA_FUZZ_SKIP_OPS")) != nullptr) {
    static const char* const kNames[kOps] = {"prefill", "decode", "indexer", "topk", "combine", "plan", "sizes", "tensor_view"};
    const std::string list = std::string(",") + env + ",";
    for (int op = 0; op < kOps; ++op)
      if (list.find(std::string(",") + kNames[op] + ",") != std::string::npos) g_skip_ops |= 1u << op;
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Header h{};
  std::memcpy(&h, data, std::min(size, sizeof(Header)));
  Reader r(data + std::min(size, sizeof(Header)), size - std::min(size, sizeof(Header)));
  if (g_skip_ops & (1u << (h.op % kOps))) return -1;
  Ctx c(h, r);
  switch (h.op % kOps) {
    case kOpPrefill: op_prefill(c); break;
    case kOpDecode: op_decode(c); break;
    case kOpIndexer: op_indexer(c); break;
    case kOpTopk: op_topk(c); break;
    case kOpCombine: op_combine(c); break;
    case kOpPlan: op_plan(c); break;
    case kOpSizes: op_sizes(c); break;
    case kOpTensorView: op_tensor_view(c); break;
  }
  return 0;
}
