// Top-k block selection, spec §5, in both rankings (msa::TopkRanking): every candidate of a row
// gets its key (core/topk_key.h, the same bits as the CUDA kernel's) and the topk - 1 largest
// keys win. Exact: a NaN score ranks below every number (-inf included), so a NaN block is
// chosen only when fewer than topk - 1 non-NaN candidates exist; equal scores (and NaNs among
// themselves) go to the smaller block id. Quantised: MSA's 16-bit levels over the row's range.
#include <algorithm>
#include <cfloat>
#include <functional>
#include <vector>

#include "core/batch.h"
#include "core/topk_key.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"

namespace msa::cpu {

void topk_select(const TopkArgs& args, int topk, TopkRanking ranking) {
  const BatchInfo info = read_batch(args.batch);
  const TensorView& scores = args.scores;
  const TensorView& out = args.topk;
  const int h = static_cast<int>(out.dim(0));
  const std::int64_t rows = static_cast<std::int64_t>(h) * info.total_q;

  ParallelErrors errors;
#pragma omp parallel
  {
    std::vector<std::uint64_t> keys;
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t hr = 0; hr < rows; ++hr) errors.run([&] {
      const std::int64_t head = hr / info.total_q;
      const std::int64_t r = hr % info.total_q;
      const std::int64_t b = info.request_of(r);
      const auto local = static_cast<std::int32_t>(info.pos(b, r - info.cu_q[b]) / kBlockSize);
      std::int32_t* row = out.ptr<std::int32_t>() + out.offset(head, r, 0);
      auto put = [&](int slot, std::int32_t v) { row[slot * out.stride[2]] = v; };
      if (local + 1 <= topk) {
        for (int s = 0; s < topk; ++s) put(s, s <= local ? s : -1);
        return;
      }
      const float* sc = scores.ptr<const float>() + scores.offset(head, r, 0);
      const std::int64_t col_stride = scores.stride[2];
      const auto score = [&](std::int32_t c) { return sc[c * col_stride]; };
      keys.resize(static_cast<std::size_t>(local));
      if (ranking == TopkRanking::kQuantised16) {
        float lo = FLT_MAX, hi = -FLT_MAX;  // lo > hi while no finite score is seen
        for (std::int32_t c = 0; c < local; ++c) {
          const float v = score(c);
          if (!topk_key::finite(v)) continue;
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
        const topk_key::Quantiser z = topk_key::quantiser(lo, hi);
        for (std::int32_t c = 0; c < local; ++c) keys[c] = topk_key::quantised(score(c), c, z);
      } else {
        for (std::int32_t c = 0; c < local; ++c) keys[c] = topk_key::exact(score(c), c);
      }
      std::partial_sort(keys.begin(), keys.begin() + (topk - 1), keys.end(), std::greater<>());
      for (int s = 0; s < topk - 1; ++s) put(s, topk_key::id_of(keys[s]));
      put(topk - 1, local);
    });
  }
  errors.rethrow();
}

}  // namespace msa::cpu
