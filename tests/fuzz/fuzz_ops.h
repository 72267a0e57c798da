// The operator harnesses, one per Op (fuzz_input.h); fuzz_api.cpp dispatches on Header::op.
#pragma once

#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_ctx.h"

namespace msa_fuzz {

void op_prefill(Ctx& c);      // fuzz_prefill.cpp
void op_decode(Ctx& c);       // fuzz_decode.cpp
void op_indexer(Ctx& c);      // fuzz_indexer_topk.cpp
void op_topk(Ctx& c);         // fuzz_indexer_topk.cpp
void op_combine(Ctx& c);      // fuzz_combine.cpp
void op_plan(Ctx& c);         // fuzz_plan.cpp
void op_sizes(Ctx& c);        // fuzz_sizes.cpp
void op_tensor_view(Ctx& c);  // fuzz_sizes.cpp

// Consistency of a plan (spec §2; invariant h), fuzz_plan.cpp.
void check_plan(const msa::K2qCsr& p, const msa::AttentionShape& s, const std::vector<std::int32_t>& q_len,
                const std::vector<std::int64_t>& k_len, int q_per_item, const char* what);

}  // namespace msa_fuzz
