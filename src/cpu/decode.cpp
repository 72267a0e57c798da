// Sparse decode, spec §4: per (query, head) the FlashAttention-2 online recurrence in base 2,
// one selected block per tile in ascending id order, with the lazy rescale of the GPU kernels.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/batch.h"
#include "cpu/online_softmax.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/row_helpers.h"

namespace msa::cpu {

namespace {
// The factor of KV head g: per tensor [1] or per KV head [h_kv].
float descale_of(const TensorView& t, int g) {
  return t.ptr<const float>()[(t.dim(0) == 1 ? 0 : g) * t.stride[0]];
}

// Log2 units: the output is rescaled only once the max has grown by more than 8, which keeps
// every weight <= 2^8 (no FP32 overflow) while skipping most rescales.
constexpr float kLazyThreshold = 8.f;
}  // namespace

void sparse_decode(const AttentionShape& shape, const DecodeArgs& args) {
  const BatchInfo info = read_decode_batch(args.seq_len, args.q_per_request);
  const int d = shape.d;
  const int group = shape.group();
  const int q_per_request = args.q_per_request;
  const float scale = shape.softmax_scale();
  const KvRows rows(args.kv);
  const TensorView& topk = args.topk;
  const auto* ids = topk.ptr<const std::int32_t>();
  const int width = static_cast<int>(topk.dim(2));

  ParallelErrors errors;
#pragma omp parallel
  {
    GatheredKv kv;
    std::vector<std::int32_t> blocks;
    std::vector<std::int64_t> tokens, tile_end;
    // The output accumulates in FP64: with the lazy rescale a weight reaches 2^8, and 2^8 times
    // a finite bf16 value overflows FP32 (then a rescale by 0 would make inf * 0 = NaN).
    std::vector<float> q_row, scores, out_row;
    std::vector<double> acc;
    errors.run([&] {
      q_row.resize(static_cast<std::size_t>(d));
      acc.resize(static_cast<std::size_t>(d));
      out_row.resize(static_cast<std::size_t>(d));
    });
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t r = 0; r < info.total_q; ++r) errors.run([&] {
      const std::int64_t b = r / q_per_request;
      const std::int64_t pos = info.pos(b, r % q_per_request);
      for (int g = 0; g < shape.h_kv; ++g) {
        const std::int64_t row_off = args.topk_head_major ? topk.offset(g, r, 0) : topk.offset(r, g, 0);
        selected_blocks(ids + row_off, topk.stride[2], width, info.blocks(b), blocks);
        // One tile per selected block: its visible keys (none for a block past the query).
        tokens.clear();
        tile_end.clear();
        for (const std::int32_t p : blocks) {
          const std::int64_t end = std::min<std::int64_t>((p + 1) * std::int64_t{kBlockSize}, pos + 1);
          for (std::int64_t t = std::int64_t{p} * kBlockSize; t < end; ++t) tokens.push_back(t);
          tile_end.push_back(static_cast<std::int64_t>(tokens.size()));
        }
        kv.gather(args.kv, rows, b, g, tokens, d);
        if (args.k_descale.present()) {  // FP8 K/V: the stored values times their factors
          const float kd = descale_of(args.k_descale, g);
          const float vd = descale_of(args.v_descale, g);
          for (float& x : kv.k) x *= kd;
          for (float& x : kv.v) x *= vd;
        }
        scores.resize(tokens.size());
        for (int h = g * group; h < (g + 1) * group; ++h) {
          load_row(args.q.data, args.q.dtype, args.q.offset(r, h, 0), d, q_row.data());
          OnlineSoftmax state;
          if (const float* sink = sink_of(args.sinks, h)) state.seed_sink(*sink);
          std::fill(acc.begin(), acc.end(), 0.0);
          std::int64_t begin = 0;
          for (const std::int64_t end : tile_end) {
            if (end == begin) continue;
            float tile_max = -std::numeric_limits<float>::infinity();
            for (std::int64_t i = begin; i < end; ++i) {
              scores[i] = saturate_score(scale * dot_f32(q_row.data(), kv.k.data() + i * d, d)) * kLog2e;
              tile_max = std::max(tile_max, scores[i]);
            }
            if (state.update_max(tile_max, kLazyThreshold))
              for (double& a : acc) a *= state.scale;
            for (std::int64_t i = begin; i < end; ++i) {
              const float p = state.weight(scores[i]);
              state.l += p;
              const float* v = kv.v.data() + i * d;
              for (int j = 0; j < d; ++j) acc[j] += static_cast<double>(p) * v[j];
            }
            begin = end;
          }
          const float inv_l = state.l > 0.f ? 1.f / state.l : 0.f;
          for (int j = 0; j < d; ++j) out_row[j] = static_cast<float>(acc[j] * inv_l);
          store_row(args.out.data, args.out.dtype, args.out.offset(r, h, 0), d, out_row.data());
          if (args.lse.present()) args.lse.ptr<float>()[args.lse.offset(r, h)] = state.lse();
        }
      }
    });
  }
  errors.rethrow();
}

}  // namespace msa::cpu
