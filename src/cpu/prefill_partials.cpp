// Sparse prefill, formulation 2 (what the GPU computes): KV-block-major over the plan's work
// items; each (query, block) edge yields a normalised FP32 partial and its LSE at the query's
// slot, merged later by combine.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/batch.h"
#include "core/plan_encoding.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/row_helpers.h"

namespace msa::cpu {

void sparse_prefill_partials(const AttentionShape& shape, const PrefillArgs& args,
                             const K2qCsr& plan, float* o_partial, float* lse_partial) {
  const BatchInfo info = read_batch(args.batch);
  const int d = shape.d;
  const int group = shape.group();
  const int h_q = shape.h_q;
  const float scale = shape.softmax_scale();
  const std::int64_t edges_per_head = plan.total_q * plan.topk;
  const KvRows rows(args.kv);
  const auto work_count = static_cast<std::int64_t>(plan.work.size());

  ParallelErrors errors;
#pragma omp parallel
  {
    GatheredKv kv;
    std::vector<std::int64_t> tokens;
    // FP64 output sums: 128 finite bf16 values of one sign can overflow FP32, and such a partial
    // (inf) merged with one of the other sign would be NaN; the true result is a convex
    // combination of V rows, always finite.
    std::vector<float> q_row, scores;
    std::vector<double> acc;
    errors.run([&] {
      q_row.resize(static_cast<std::size_t>(d));
      acc.resize(static_cast<std::size_t>(d));
    });
    // Edges of different items are distinct (kv head, query, slot) triples, so the writes of
    // the threads never overlap.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t w = 0; w < work_count; ++w) errors.run([&] {
      const WorkItem& item = plan.work[w];
      const std::int64_t b = item.b;
      const std::int64_t first = std::int64_t{item.block} * kBlockSize;
      const std::int64_t last = std::min<std::int64_t>(first + kBlockSize, info.k_len[b]);
      tokens.clear();
      for (std::int64_t t = first; t < last; ++t) tokens.push_back(t);
      kv.gather(args.kv, rows, b, item.kv_head, tokens, d);
      const std::int32_t* head_qsplit = plan.qsplit.data() + item.kv_head * edges_per_head;
      for (std::int64_t e = item.q_begin; e < item.q_begin + item.q_count; ++e) {
        const std::int64_t q_local = qsplit::query(head_qsplit[e]);
        const std::int64_t slot = qsplit::slot(head_qsplit[e]);
        const std::int64_t r = info.cu_q[b] + q_local;
        // Keys first..pos of this block are visible to the query.
        const std::int64_t n_vis = std::clamp<std::int64_t>(info.pos(b, q_local) + 1 - first, 0, kv.n);
        for (int h = item.kv_head * group; h < (item.kv_head + 1) * group; ++h) {
          const std::int64_t row = (slot * plan.total_q + r) * h_q + h;
          float* out = o_partial + row * d;
          std::fill(out, out + d, 0.f);
          if (n_vis == 0) {
            lse_partial[row] = -std::numeric_limits<float>::infinity();
            continue;
          }
          load_row(args.q.data, args.q.dtype, args.q.offset(r, h, 0), d, q_row.data());
          scores.resize(static_cast<std::size_t>(n_vis));
          float m = -std::numeric_limits<float>::infinity();
          for (std::int64_t i = 0; i < n_vis; ++i) {
            scores[i] = saturate_score(scale * dot_f32(q_row.data(), kv.k.data() + i * d, d));
            m = std::max(m, scores[i]);
          }
          float l = 0.f;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (std::int64_t i = 0; i < n_vis; ++i) {
            const float p = std::exp(scores[i] - m);
            l += p;
            const float* v = kv.v.data() + i * d;
            for (int j = 0; j < d; ++j) acc[j] += static_cast<double>(p) * v[j];
          }
          for (int j = 0; j < d; ++j) out[j] = static_cast<float>(acc[j] / l);
          lse_partial[row] = m + std::log(l);
        }
      }
    });
  }
  errors.rethrow();
}

}  // namespace msa::cpu
