// The inputs a plan was built from, kept so that run() can prove it is given the same ones: a
// plan applied to another batch or selection would address partials out of bounds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "msa/shapes.h"
#include "msa/tensor.h"

namespace msa {

class PlanInputs {
 public:
  // Remembers batch.cu_seqlens_q, batch.k_len and topk (rank 1, 1 and 3 int32, validated):
  // the values of host tensors, the identity (pointer, shape, strides) of device tensors,
  // whose contents cannot be read without a synchronisation.
  void keep(const VarlenBatch& batch, const TensorView& topk);
  // Throws msa::Error naming the first argument (or element) of run()'s inputs that differs
  // from the kept ones. Host values cost one pass over top-k, small beside the attention.
  void expect_same(const VarlenBatch& batch, const TensorView& topk) const;

 private:
  struct Kept {
    TensorView view;                    // metadata as given to plan() (data unused for host)
    std::vector<std::int32_t> values;   // host tensors: every element in index order
  };
  static Kept keep_one(const TensorView& t);
  static void expect_one(const Kept& kept, const TensorView& t, const std::string& name);

  Kept cu_seqlens_q_, k_len_, topk_;
};

}  // namespace msa
