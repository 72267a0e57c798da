// Exact top-k block selection, spec §5. A NaN score ranks below every number (-inf included),
// so a NaN block is chosen only when fewer than topk - 1 non-NaN candidates exist; equal
// scores (and NaNs among themselves) go to the smaller block id.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/batch.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"

namespace msa::cpu {

void topk_select(const TopkArgs& args, int topk) {
  const BatchInfo info = read_batch(args.batch);
  const TensorView& scores = args.scores;
  const TensorView& out = args.topk;
  const int h = static_cast<int>(out.dim(0));
  const std::int64_t rows = static_cast<std::int64_t>(h) * info.total_q;

  ParallelErrors errors;
#pragma omp parallel
  {
    std::vector<std::int32_t> ids;
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
      auto before = [&](std::int32_t a, std::int32_t c) {
        const float sa = sc[a * col_stride], sb = sc[c * col_stride];
        const bool na = std::isnan(sa), nb = std::isnan(sb);
        if (na != nb) return nb;
        if (!na && sa != sb) return sa > sb;
        return a < c;
      };
      ids.resize(static_cast<std::size_t>(local));
      std::iota(ids.begin(), ids.end(), 0);
      std::partial_sort(ids.begin(), ids.begin() + (topk - 1), ids.end(), before);
      for (int s = 0; s < topk - 1; ++s) put(s, ids[s]);
      put(topk - 1, local);
    });
  }
  errors.rethrow();
}

}  // namespace msa::cpu
