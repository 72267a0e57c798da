// Uses only the installed public headers: one sparse prefill on the CPU backend where every
// query selects every visible block (so it equals dense causal attention, computed here), and
// one bad argument that must come back as an msa::Error naming it. Exit 0 and "PASS" on success.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "msa/msa.h"

namespace {

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

int main() {
  msa::AttentionShape shape;
  shape.h_q = 4;
  shape.h_kv = 2;
  shape.d = 128;
  shape.topk = 4;
  const int q_len = 40, k_len = 300, d = shape.d;  // one request, a 260-token prefix
  const int blocks = (k_len + msa::kBlockSize - 1) / msa::kBlockSize;

  std::vector<std::uint16_t> q(std::size_t(q_len) * shape.h_q * d), k(std::size_t(k_len) * shape.h_kv * d),
      v(k.size()), out(q.size());
  std::uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return (static_cast<float>(state >> 8) / 16777216.f - 0.5f) * 0.5f;
  };
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = to_bf16(next());
  // Every query selects all blocks up to its own (the producer contract: local block last).
  std::vector<std::int32_t> topk(std::size_t(shape.h_kv) * q_len * shape.topk, -1);
  for (int h = 0; h < shape.h_kv; ++h)
    for (int i = 0; i < q_len; ++i) {
      const int local = (k_len - q_len + i) / msa::kBlockSize;
      for (int b = 0; b <= local && b < blocks; ++b)
        topk[(std::size_t(h) * q_len + i) * shape.topk + b] = b;
    }
  std::vector<std::int32_t> cu_q = {0, q_len}, cu_k = {0, k_len}, lens = {k_len};
  std::vector<float> lse(std::size_t(q_len) * shape.h_q);

  const auto view = [](void* data, msa::DType t, std::initializer_list<std::int64_t> shape) {
    return msa::TensorView::contiguous(data, t, shape);
  };
  msa::PrefillArgs args;
  args.q = view(q.data(), msa::DType::kBF16, {q_len, shape.h_q, d});
  args.kv.k = view(k.data(), msa::DType::kBF16, {k_len, shape.h_kv, d});
  args.kv.v = view(v.data(), msa::DType::kBF16, {k_len, shape.h_kv, d});
  args.kv.cu_seqlens_k = view(cu_k.data(), msa::DType::kInt32, {2});
  args.batch.cu_seqlens_q = view(cu_q.data(), msa::DType::kInt32, {2});
  args.batch.k_len = view(lens.data(), msa::DType::kInt32, {1});
  args.topk = view(topk.data(), msa::DType::kInt32, {shape.h_kv, q_len, shape.topk});
  args.out = view(out.data(), msa::DType::kBF16, {q_len, shape.h_q, d});
  args.lse = view(lse.data(), msa::DType::kFP32, {q_len, shape.h_q});

  msa::SparsePrefill prefill(shape);
  prefill.plan(args.batch, args.topk);
  prefill.run(args);

  // Dense causal attention of the same inputs.
  const double scale = 1.0 / std::sqrt(double(d));
  double max_err = 0;
  for (int i = 0; i < q_len; ++i)
    for (int h = 0; h < shape.h_q; ++h) {
      const int g = h / (shape.h_q / shape.h_kv), pos = k_len - q_len + i;
      std::vector<double> s(pos + 1);
      double m = -INFINITY;
      for (int t = 0; t <= pos; ++t) {
        double acc = 0;
        for (int c = 0; c < d; ++c)
          acc += double(from_bf16(q[(std::size_t(i) * shape.h_q + h) * d + c])) *
                 from_bf16(k[(std::size_t(t) * shape.h_kv + g) * d + c]);
        s[t] = acc * scale;
        m = std::max(m, s[t]);
      }
      double z = 0;
      for (double x : s) z += std::exp(x - m);
      for (int c = 0; c < d; ++c) {
        double o = 0;
        for (int t = 0; t <= pos; ++t) o += std::exp(s[t] - m) / z * from_bf16(v[(std::size_t(t) * shape.h_kv + g) * d + c]);
        max_err = std::max(max_err, std::abs(o - from_bf16(out[(std::size_t(i) * shape.h_q + h) * d + c])));
      }
      max_err = std::max(max_err, std::abs(m + std::log(z) - lse[std::size_t(i) * shape.h_q + h]));
    }
  if (!(max_err < 1e-2)) {
    std::printf("msa_consumer: FAIL (max |err| %.3g against dense attention)\n", max_err);
    return 1;
  }

  // A bad argument is an msa::Error naming it.
  args.q.shape[2] = 64;
  try {
    prefill.run(args);
    std::printf("msa_consumer: FAIL (q with d = 64 accepted)\n");
    return 1;
  } catch (const msa::Error& e) {
    if (std::string(e.argument()) != "q.shape[2]") {
      std::printf("msa_consumer: FAIL (error names %s)\n", e.argument().c_str());
      return 1;
    }
  }
  std::printf("msa_consumer: PASS (msa %s, max |err| %.2g against dense attention)\n", msa::version_string(), max_err);
  return 0;
}
