// Sparse prefill, formulation 1 (the oracle): per (query, head), one FP64 masked softmax over
// the visible keys of the row's selected blocks.
#include <algorithm>
#include <vector>

#include "core/batch.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/row_helpers.h"

namespace msa::cpu {

void sparse_prefill_gather(const AttentionShape& shape, const PrefillArgs& args) {
  const BatchInfo info = read_batch(args.batch);
  const int d = shape.d;
  const int group = shape.group();
  const double scale = shape.softmax_scale();
  const KvRows rows(args.kv);
  const TensorView& topk = args.topk;
  const auto* ids = topk.ptr<const std::int32_t>();
  const int width = static_cast<int>(topk.dim(2));

  ParallelErrors errors;
#pragma omp parallel
  {
    GatheredKv kv;
    Fp64Scratch scratch;
    std::vector<std::int32_t> blocks;
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
      for (int g = 0; g < shape.h_kv; ++g) {
        selected_blocks(ids + topk.offset(g, r, 0), topk.stride[2], width, info.blocks(b), blocks);
        // pos < k_len, so the causal bound is the only one needed.
        tokens.clear();
        for (const std::int32_t p : blocks) {
          const std::int64_t end = std::min<std::int64_t>((p + 1) * std::int64_t{kBlockSize}, pos + 1);
          for (std::int64_t t = std::int64_t{p} * kBlockSize; t < end; ++t)
            if (rows.valid(b, t)) tokens.push_back(t);
        }
        kv.gather(args.kv, rows, b, g, tokens, d);
        for (int h = g * group; h < (g + 1) * group; ++h) {
          load_row(args.q.data, args.q.dtype, args.q.offset(r, h, 0), d, q_row.data());
          const float lse = attend_fp64(q_row.data(), kv, d, scale, sink_of(args.sinks, h), scratch, o_row.data());
          store_row(args.out.data, args.out.dtype, args.out.offset(r, h, 0), d, o_row.data());
          if (args.lse.present()) args.lse.ptr<float>()[args.lse.offset(r, h)] = lse;
        }
      }
    });
  }
  errors.rethrow();
}

}  // namespace msa::cpu
