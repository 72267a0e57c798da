// Which backend each stage of `msa run` uses: the one place that maps --backend to stages.
#pragma once

#include <string>

#include "msa/msa.h"
#include "tools/cli.h"

namespace msa::tool {

enum class Stage { kIndexer, kTopk, kPlan, kPrefill, kDecode };
const char* stage_name(Stage stage);

struct StageBackend {
  Backend backend = Backend::kCpu;
  std::string why_not_cuda;  // empty when the stage runs on CUDA
};

// auto: CUDA when this build sees a GPU, the CUDA backend implements the stage's operator
// (its constructor does not throw) and the tool can feed that stage device memory; otherwise
// the CPU. cuda: the same conditions, the first unmet one a UsageError. The plan stage is
// SparsePrefill::plan(), so it follows the prefill.
StageBackend stage_backend(Stage stage, BackendChoice choice, const AttentionShape& shape);

}  // namespace msa::tool
