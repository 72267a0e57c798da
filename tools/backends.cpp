#include "tools/backends.h"

namespace msa::tool {

namespace {

// Constructing the operator with Backend::kCuda is how the library says whether it has it.
bool cuda_implements(Stage stage, const AttentionShape& shape) {
  Options cuda;
  cuda.backend = Backend::kCuda;
  try {
    switch (stage) {
      case Stage::kIndexer: (void)Indexer(shape.h_kv, shape.d, 0.f, cuda); break;
      case Stage::kTopk: (void)TopK(shape.topk, cuda); break;
      case Stage::kPlan:
      case Stage::kPrefill: (void)SparsePrefill(shape, cuda); break;
      case Stage::kDecode: (void)SparseDecode(shape, cuda); break;
    }
  } catch (const Error&) {
    return false;
  }
  return true;
}

}  // namespace

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::kIndexer: return "indexer";
    case Stage::kTopk: return "top-k";
    case Stage::kPlan: return "plan";
    case Stage::kPrefill: return "prefill";
    case Stage::kDecode: return "decode";
  }
  return "?";
}

StageBackend stage_backend(Stage stage, BackendChoice choice, const AttentionShape& shape) {
  if (choice == BackendChoice::kCpu) return {};
  std::string why;
  if (!cuda_available())
    why = "no CUDA backend in this build or no visible GPU";
  else if (!cuda_implements(stage, shape))
    why = std::string("the CUDA backend does not implement the ") + stage_name(stage) + " yet";
  if (why.empty()) return {Backend::kCuda, ""};
  if (choice == BackendChoice::kCuda) throw UsageError("msa run: --backend cuda: " + why);
  return {Backend::kCpu, why};
}

}  // namespace msa::tool
