// Resolves (request, token, head) to element offsets in paged or flat K/V storage.
#pragma once

#include <cstdint>

#include "msa/shapes.h"

namespace msa::cpu {

// Arguments must be validated first (page table entries in range, lengths within storage).
class KvRows {
 public:
  explicit KvRows(const KvCache& kv)
      : k_(kv.k), paged_(kv.paged()), page_table_(kv.page_table), cu_k_(kv.cu_seqlens_k) {}

  // False when token t of request b lies on a page-table entry past the table's columns or
  // outside [0, num_pages): the CUDA kernels' rule for such pages without strict mode (their
  // tokens are invisible). Validated inputs never have one; the oracle skips them.
  bool valid(std::int64_t b, std::int64_t t) const {
    if (!paged_) return true;
    const std::int64_t col = t / k_.dim(2);
    if (col >= page_table_.dim(1)) return false;
    const std::int64_t page =
        page_table_.ptr<const std::int32_t>()[b * page_table_.stride[0] + col * page_table_.stride[1]];
    return page >= 0 && page < k_.dim(0);
  }

  // Element offset of the first element of token t, head h of request b in a tensor shaped
  // like k (v must share k's strides; validation checks it).
  std::int64_t offset(std::int64_t b, std::int64_t t, std::int64_t h) const {
    if (paged_) {
      const std::int64_t page_size = k_.dim(2);
      const auto* pt = page_table_.ptr<const std::int32_t>();
      const std::int64_t page = pt[b * page_table_.stride[0] + (t / page_size) * page_table_.stride[1]];
      return page * k_.stride[0] + h * k_.stride[1] + (t % page_size) * k_.stride[2];
    }
    const std::int64_t row = cu_k_.ptr<const std::int32_t>()[b * cu_k_.stride[0]] + t;
    return row * k_.stride[0] + h * k_.stride[1];
  }

 private:
  TensorView k_;
  bool paged_;
  TensorView page_table_;
  TensorView cu_k_;
};

}  // namespace msa::cpu
