// Indexer scores, spec §5: per (index head, query, block) the scaled best dot product over the
// block's tokens visible to the query.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/batch.h"
#include "cpu/parallel.h"
#include "cpu/reference.h"
#include "cpu/row_helpers.h"

namespace msa::cpu {

void indexer(const IndexerArgs& args, float scale) {
  const BatchInfo info = read_batch(args.batch);
  const TensorView& iq = args.index_q;
  const TensorView& scores = args.scores;
  const int h_i = static_cast<int>(iq.dim(1));
  const int d = static_cast<int>(iq.dim(2));
  const std::int64_t cols = scores.dim(2);
  const KvRows rows(args.index_k);

  ParallelErrors errors;
#pragma omp parallel
  {
    std::vector<float> q_rows, k_row;
    std::vector<double> best;
    errors.run([&] {
      q_rows.resize(static_cast<std::size_t>(h_i) * static_cast<std::size_t>(d));
      k_row.resize(static_cast<std::size_t>(d));
      best.resize(static_cast<std::size_t>(h_i));
    });
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t r = 0; r < info.total_q; ++r) errors.run([&] {
      const std::int64_t b = info.request_of(r);
      const std::int64_t pos = info.pos(b, r - info.cu_q[b]);
      for (int h = 0; h < h_i; ++h)
        load_row(iq.data, iq.dtype, iq.offset(r, h, 0), d, q_rows.data() + std::int64_t{h} * d);
      for (std::int64_t p = 0; p < cols; ++p) {
        // Blocks past the local one (and columns past the request's blocks) see no token.
        const std::int64_t first = p * kBlockSize;
        const std::int64_t end = std::min(first + kBlockSize, pos + 1);
        std::fill(best.begin(), best.end(), -std::numeric_limits<double>::infinity());
        for (std::int64_t t = first; t < end; ++t) {
          load_row(args.index_k.k.data, args.index_k.k.dtype, rows.offset(b, t, 0), d, k_row.data());
          for (int h = 0; h < h_i; ++h) {
            best[h] = std::max(best[h], dot_f64(q_rows.data() + std::int64_t{h} * d, k_row.data(), d));
          }
        }
        for (int h = 0; h < h_i; ++h)
          scores.ptr<float>()[scores.offset(h, r, p)] = static_cast<float>(scale * best[h]);
      }
    });
  }
  errors.rethrow();
}

}  // namespace msa::cpu
