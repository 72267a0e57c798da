// The online-softmax row state (FlashAttention-2 recurrence, base 2), spec §6.
// Scores enter pre-scaled by scale * log2(e). A lazy variant skips the output rescale while
// the running max grows by less than a threshold; `scale` then resets to 1 so that applying
// it is an identity.
#pragma once

#include <cmath>
#include <limits>

#include "core/plan_encoding.h"  // kLog2e, kLn2

namespace msa::cpu {

struct OnlineSoftmax {
  float m = -std::numeric_limits<float>::infinity();  // running max (log2 units)
  float l = 0.f;                                     // running sum of exp2(s - m)
  float scale = 1.f;                                 // pending output rescale exp2(m_old - m_new)

  // A virtual key with logit sink (natural units) and zero value.
  void seed_sink(float sink) {
    m = sink * kLog2e;
    l = 1.f;
    scale = 1.f;
  }

  // Folds in the maximum of a new tile of scores (log2 units). With lazy_threshold > 0 the max
  // is only raised once it grows by more than the threshold (values stay <= 2^threshold, no
  // overflow in FP32 for thresholds <= 8); returns true when the caller must rescale its
  // output by `scale` (and then scale resets to 1).
  bool update_max(float tile_max, float lazy_threshold = 0.f) {
    if (!(tile_max > m)) {
      scale = 1.f;
      return false;
    }
    if (lazy_threshold > 0.f && m != -std::numeric_limits<float>::infinity() &&
        tile_max - m <= lazy_threshold) {
      scale = 1.f;
      return false;
    }
    const float m_new = tile_max;
    scale = m == -std::numeric_limits<float>::infinity() ? 0.f : std::exp2(m - m_new);
    l *= scale;
    m = m_new;
    return true;
  }

  // Probability weight of one score under the current max; the caller adds it to l.
  float weight(float s) const {
    return m == -std::numeric_limits<float>::infinity() ? 0.f : std::exp2(s - m);
  }

  // Natural-log LSE of everything folded in; -inf when empty.
  float lse() const {
    if (!(l > 0.f)) return -std::numeric_limits<float>::infinity();
    return (m + std::log2(l)) * kLn2;
  }
};

}  // namespace msa::cpu
