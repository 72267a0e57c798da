// Dense causal attention (the oracle of the dense-equivalence identity): every query attends
// to keys 0..pos of its request, FP64 softmax.
#include <vector>

#include "core/batch.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/row_helpers.h"

namespace msa::cpu {

void dense_causal(const AttentionShape& shape, const TensorView& q, const KvCache& kv,
                  const VarlenBatch& batch, const TensorView& sinks, const TensorView& out,
                  const TensorView& lse) {
  const BatchInfo info = read_batch(batch);
  const int d = shape.d;
  const int group = shape.group();
  const double scale = shape.softmax_scale();
  const KvRows rows(kv);

  ParallelErrors errors;
#pragma omp parallel
  {
    GatheredKv keys;
    Fp64Scratch scratch;
    std::vector<std::int64_t> tokens;
    std::vector<float> q_row, o_row;
    errors.run([&] {
      q_row.resize(static_cast<std::size_t>(d));
      o_row.resize(static_cast<std::size_t>(d));
    });
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t r = 0; r < info.total_q; ++r) errors.run([&] {
      const std::int64_t b = info.request_of(r);
      const std::int64_t pos = info.pos(b, r - info.cu_q[b]);
      tokens.resize(static_cast<std::size_t>(pos + 1));
      for (std::int64_t t = 0; t <= pos; ++t) tokens[t] = t;
      for (int g = 0; g < shape.h_kv; ++g) {
        keys.gather(kv, rows, b, g, tokens, d);
        for (int h = g * group; h < (g + 1) * group; ++h) {
          load_row(q.data, q.dtype, q.offset(r, h, 0), d, q_row.data());
          const float l = attend_fp64(q_row.data(), keys, d, scale, sink_of(sinks, h), scratch, o_row.data());
          store_row(out.data, out.dtype, out.offset(r, h, 0), d, o_row.data());
          if (lse.present()) lse.ptr<float>()[lse.offset(r, h)] = l;
        }
      }
    });
  }
  errors.rethrow();
}

}  // namespace msa::cpu
