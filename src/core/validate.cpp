#include "core/validate.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "core/k2q_host.h"

namespace msa {

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

std::string element(const std::string& name, std::int64_t i, std::int64_t j) {
  return name + "[" + str(i) + ", " + str(j) + "]";
}

// Host values can be read only from CPU tensors (see validate.h).
bool reads_values(Device device) { return device == Device::kCpu; }

// A bf16 | fp16 tensor of the given rank: everything but its extents and layout, which the
// caller checks once the extents are known (check_half_shape).
void check_half_tensor(const TensorView& t, const std::string& name, Device device, int rank) {
  check_present(t, name);
  check_device(t, name, device);
  MSA_REQUIRE(t.dtype == DType::kBF16 || t.dtype == DType::kFP16, name + ".dtype",
              to_string(t.dtype), "expected bf16 or fp16");
  check_rank(t, name, rank);
}

void check_half_shape(const TensorView& t, const std::string& name,
                      std::initializer_list<std::int64_t> extents) {
  check_shape(t, name, extents);
  check_layout(t, name);
}

// The batch of a prefill-like call: read on the CPU, metadata only on a device, where
// total_q comes from the query rows (`rows`).
BatchInfo batch_on(const VarlenBatch& batch, Device device, std::int64_t rows) {
  if (reads_values(device)) return read_batch(batch);
  check_int32_vector(batch.k_len, "k_len", device);
  check_int32_vector(batch.cu_seqlens_q, "cu_seqlens_q", device, batch.k_len.dim(0) + 1);
  BatchInfo info;
  info.batch = batch.k_len.dim(0);
  info.total_q = rows;
  return info;
}

void check_optional_fp32(const TensorView& t, const std::string& name, Device device,
                         std::initializer_list<std::int64_t> extents) {
  if (t.rank == 0) return;  // absent; a negative rank is named by check_tensor
  check_tensor(t, name, device, DType::kFP32, extents);
}

// sinks [h_q] fp32 (optional); in strict mode on the host every sink must be finite (without
// strict a non-finite sink is ignored, spec §6 as widened in docs/numerics.md).
void check_sinks(const TensorView& sinks, int h_q, Device device, bool strict) {
  check_optional_fp32(sinks, "sinks", device, {h_q});
  if (!sinks.present() || !strict || !reads_values(device)) return;
  for (std::int64_t h = 0; h < h_q; ++h) {
    const float v = sinks.ptr<const float>()[h * sinks.stride[0]];
    MSA_REQUIRE(std::isfinite(v), "sinks[" + str(h) + "]", std::to_string(v),
                "must be finite (strict mode; otherwise a non-finite sink is ignored)");
  }
}

// A descale factor of FP8 K/V: [1] (per tensor) or [h_kv] (per KV head) fp32; read on the host,
// every factor must be finite and > 0.
void check_descale(const TensorView& t, const std::string& name, int h_kv, Device device) {
  check_present(t, name);
  check_device(t, name, device);
  check_dtype(t, name, DType::kFP32);
  check_rank(t, name, 1);
  MSA_REQUIRE(t.dim(0) == 1 || t.dim(0) == h_kv, name + ".shape[0]", str(t.dim(0)),
              "must be 1 (per tensor) or h_kv = " + str(h_kv) + " (per KV head)");
  check_layout(t, name);
  if (!reads_values(device)) return;
  for (std::int64_t i = 0; i < t.dim(0); ++i) {
    const float v = t.ptr<const float>()[i * t.stride[0]];
    MSA_REQUIRE(std::isfinite(v) && v > 0.f, name + "[" + str(i) + "]", std::to_string(v), "must be finite and > 0");
  }
}

// sinks [h_q] fp32 (optional), out [rows, h_q, d] in the inputs' dtype, lse [rows, h_q] fp32
// (optional).
void check_attention_outputs(const AttentionShape& shape, const TensorView& sinks,
                             const TensorView& out, const TensorView& lse, DType dtype,
                             std::int64_t rows, Device device, bool strict) {
  check_sinks(sinks, shape.h_q, device, strict);
  check_output(out, "out", device, dtype, {rows, shape.h_q, shape.d});
  if (lse.rank != 0) check_output(lse, "lse", device, DType::kFP32, {rows, shape.h_q});
}

void check_page_table(const KvCache& kv, const BatchInfo& batch, Device device,
                      const std::string& prefix) {
  const std::string name = prefix + "page_table";
  check_present(kv.page_table, name);
  check_device(kv.page_table, name, device);
  check_dtype(kv.page_table, name, DType::kInt32);
  check_rank(kv.page_table, name, 2);
  check_dim(kv.page_table, name, 0, batch.batch);
  check_layout(kv.page_table, name);
  if (!reads_values(device)) return;
  const std::int64_t page_size = kv.k.dim(2);
  const std::int64_t num_pages = kv.k.dim(0);
  for (std::int64_t b = 0; b < batch.batch; ++b) {
    const std::int64_t used = (std::int64_t{batch.k_len[b]} + page_size - 1) / page_size;
    MSA_REQUIRE(kv.page_table.dim(1) >= used, name + ".shape[1]", str(kv.page_table.dim(1)),
                "too narrow: request " + str(b) + " (k_len " + str(batch.k_len[b]) + ") uses " +
                    str(used) + " pages of " + str(page_size) + " tokens");
  }
  // Only the pages a request uses are read; the rest of a row may hold anything.
  const auto* pt = kv.page_table.ptr<const std::int32_t>();
  for (std::int64_t b = 0; b < batch.batch; ++b) {
    const std::int64_t used = (std::int64_t{batch.k_len[b]} + page_size - 1) / page_size;
    for (std::int64_t p = 0; p < used; ++p) {
      const std::int32_t page = pt[kv.page_table.offset(b, p)];
      MSA_REQUIRE(page >= 0 && page < num_pages, element(name, b, p), str(page),
                  "page id out of range [0, num_pages = " + str(num_pages) + ")");
    }
  }
}

void check_cu_seqlens_k(const KvCache& kv, const BatchInfo& batch, Device device,
                        const std::string& prefix) {
  const std::string name = prefix + "cu_seqlens_k";
  check_int32_vector(kv.cu_seqlens_k, name, device, batch.batch + 1);
  if (!reads_values(device)) return;
  const auto* cu = kv.cu_seqlens_k.ptr<const std::int32_t>();
  const auto at = [&](std::int64_t b) -> std::int64_t { return cu[b * kv.cu_seqlens_k.stride[0]]; };
  const std::int64_t total_k = kv.k.dim(0);
  MSA_REQUIRE(at(0) >= 0, name + "[0]", str(at(0)), "must be >= 0");
  for (std::int64_t b = 0; b < batch.batch; ++b) {
    MSA_REQUIRE(at(b + 1) - at(b) >= batch.k_len[b], name + "[" + str(b + 1) + "]", str(at(b + 1)),
                "request " + str(b) + " spans " + str(at(b + 1) - at(b)) +
                    " rows, fewer than its k_len = " + str(batch.k_len[b]));
  }
  MSA_REQUIRE(at(batch.batch) <= total_k, name + "[" + str(batch.batch) + "]", str(at(batch.batch)),
              "beyond total_k = " + prefix + "k.shape[0] = " + str(total_k));
}

}  // namespace

void validate_shape(const AttentionShape& shape) {
  MSA_REQUIRE(shape.h_q >= 1 && shape.h_q <= kMaxHeads, "shape.h_q", str(shape.h_q),
              "must be in 1.." + str(kMaxHeads));
  MSA_REQUIRE(shape.h_kv >= 1 && shape.h_kv <= kMaxHeads, "shape.h_kv", str(shape.h_kv),
              "must be in 1.." + str(kMaxHeads));
  MSA_REQUIRE(shape.h_q % shape.h_kv == 0, "shape.h_q", str(shape.h_q),
              "must be a multiple of h_kv = " + str(shape.h_kv));
  MSA_REQUIRE(shape.group() <= 16, "shape.h_q / shape.h_kv", str(shape.group()),
              "group size must be in 1..16");
  MSA_REQUIRE(shape.d == 128, "shape.d", str(shape.d), "unsupported head dim (supported: 128)");
  MSA_REQUIRE(shape.topk >= 1 && shape.topk <= 32, "shape.topk", str(shape.topk),
              "must be in 1..32");
  MSA_REQUIRE(std::isfinite(shape.scale) && shape.scale >= 0.f, "shape.scale",
              std::to_string(shape.scale), "must be finite and >= 0 (0 = 1/sqrt(d))");
}

void validate_options(const Options& options) {
  MSA_REQUIRE(options.backend == Backend::kCpu || options.backend == Backend::kCuda, "options.backend",
              str(static_cast<int>(options.backend)), "must be Backend::kCpu or Backend::kCuda");
  MSA_REQUIRE(options.q_per_item >= 0 && options.q_per_item <= (1 << 20), "options.q_per_item",
              str(options.q_per_item), "must be 0 (automatic) or in 1..2^20");
  MSA_REQUIRE(options.prefill_path == PrefillPath::kBlockMajor || options.prefill_path == PrefillPath::kTileUnion ||
                  options.prefill_path == PrefillPath::kAuto,
              "options.prefill_path", str(static_cast<int>(options.prefill_path)),
              "must be PrefillPath::kBlockMajor, kTileUnion or kAuto");
  MSA_REQUIRE(options.topk_ranking == TopkRanking::kExact || options.topk_ranking == TopkRanking::kQuantised16,
              "options.topk_ranking", str(static_cast<int>(options.topk_ranking)),
              "must be TopkRanking::kExact or kQuantised16");
}

void validate_problem(const ProblemSize& problem) {
  constexpr std::int64_t kInt32Max = 2147483647;
  MSA_REQUIRE(problem.batch >= 0 && problem.batch < kInt32Max, "problem.batch", str(problem.batch),
              "must be in [0, 2^31 - 1)");
  MSA_REQUIRE(problem.total_q >= 0 && problem.total_q <= kInt32Max, "problem.total_q", str(problem.total_q),
              "must be in [0, 2^31)");
  MSA_REQUIRE(problem.max_k_len >= 0 && problem.max_k_len <= kMaxKvLen, "problem.max_k_len",
              str(problem.max_k_len), "must be in [0, kMaxKvLen = " + str(kMaxKvLen) + "]");
}

void validate_decode_plan(std::int64_t batch, int q_per_request, std::int64_t max_seq_len) {
  MSA_REQUIRE(q_per_request >= 1 && q_per_request <= 16, "q_per_request", str(q_per_request), "must be in 1..16");
  validate_problem(ProblemSize{batch, 0, max_seq_len});
  MSA_REQUIRE(batch * q_per_request <= 2147483647, "batch", str(batch),
              "batch * q_per_request query rows must fit in int32");
}

void validate_kv(const KvCache& kv, const BatchInfo& batch, int h_kv, int d, DType dtype,
                 Device device, bool require_v, const std::string& prefix) {
  const std::string k_name = prefix + "k";
  const std::string v_name = prefix + "v";
  const bool paged = kv.paged();
  MSA_REQUIRE(!(paged && kv.cu_seqlens_k.present()), prefix + "cu_seqlens_k", "present",
              "give page_table (paged) or cu_seqlens_k (flat), not both");
  check_present(kv.k, k_name);
  // Which storage the caller meant, before the rank is held against the other one.
  if (!paged && !kv.cu_seqlens_k.present()) {
    MSA_REQUIRE(kv.k.rank != 4, prefix + "page_table", "absent",
                k_name + " has rank 4 (paged [num_pages, h_kv, page_size, d]): a paged cache needs a page_table");
    throw Error(prefix + "cu_seqlens_k", "absent",
                "flat K/V ([total_k, h_kv, d]) needs cu_seqlens_k; a paged cache needs page_table");
  }
  check_device(kv.k, k_name, device);
  check_dtype(kv.k, k_name, dtype);
  check_rank(kv.k, k_name, paged ? 4 : 3);
  check_dim(kv.k, k_name, 1, h_kv);
  if (paged) {
    const std::int64_t page_size = kv.k.dim(2);
    MSA_REQUIRE(page_size == 16 || page_size == 32 || page_size == 64 || page_size == 128,
                k_name + ".shape[2]", str(page_size), "page size must be 16, 32, 64 or 128");
  }
  check_dim(kv.k, k_name, kv.k.rank - 1, d);
  check_layout(kv.k, k_name);
  if (require_v) {
    // The reference addresses v with k's offsets, and kernels share one descriptor shape.
    check_present(kv.v, v_name);
    check_device(kv.v, v_name, device);
    check_dtype(kv.v, v_name, dtype);
    check_rank(kv.v, v_name, kv.k.rank);
    for (int i = 0; i < kv.k.rank; ++i) {
      std::string at = "[";  // appended piecewise: GCC 12 warns falsely on "[" + string&&
      at += str(i);
      at += ']';
      MSA_REQUIRE(kv.v.dim(i) == kv.k.dim(i), v_name + ".shape" + at, str(kv.v.dim(i)),
                  "must equal " + k_name + ".shape" + at + " = " + str(kv.k.dim(i)));
      MSA_REQUIRE(kv.v.stride[i] == kv.k.stride[i], v_name + ".stride" + at, str(kv.v.stride[i]),
                  "must equal " + k_name + ".stride" + at + " = " + str(kv.k.stride[i]));
    }
    check_layout(kv.v, v_name);
  } else {
    MSA_REQUIRE(kv.v.rank == 0, v_name, "present", "this cache has keys only");
  }
  if (paged) {
    check_page_table(kv, batch, device, prefix);
  } else {
    check_cu_seqlens_k(kv, batch, device, prefix);
  }
}

void validate_topk(const TensorView& topk, const BatchInfo& batch, int h_kv, int topk_width,
                   bool strict, Device device, bool head_major) {
  if (head_major) {
    check_tensor(topk, "topk", device, DType::kInt32, {h_kv, batch.total_q, topk_width});
  } else {
    check_tensor(topk, "topk", device, DType::kInt32, {batch.total_q, h_kv, topk_width});
  }
  if (!strict || !reads_values(device)) return;
  const auto* ids = topk.ptr<const std::int32_t>();
  // Memory order, so the first offender is the first one a reader of the tensor meets.
  for (std::int64_t i = 0; i < topk.dim(0); ++i) {
    for (std::int64_t j = 0; j < topk.dim(1); ++j) {
      const std::int64_t q = head_major ? j : i;
      const std::int32_t b = batch.request_of(q);
      const std::int64_t local = batch.pos(b, q - batch.cu_q[b]) / kBlockSize;
      const auto bad =
          check_row_contract(ids + topk.offset(i, j, 0), topk.stride[2], topk_width, local);
      if (bad) {
        throw Error("topk[" + str(i) + ", " + str(j) + ", " + str(bad->slot) + "]", str(bad->value),
                    bad->rule + " (strict mode)");
      }
    }
  }
}

BatchInfo validate_prefill(const AttentionShape& shape, const PrefillArgs& args,
                           const Options& options, Device device) {
  validate_shape(shape);
  check_half_tensor(args.q, "q", device, 3);
  const BatchInfo info = batch_on(args.batch, device, args.q.dim(0));
  check_half_shape(args.q, "q", {info.total_q, shape.h_q, shape.d});
  MSA_REQUIRE(!args.kv.k.present() || args.kv.k.dtype != DType::kFP8E4M3, "k.dtype", "fp8_e4m3",
              "FP8 K/V caches are taken by the sparse decode only (for now)");
  validate_kv(args.kv, info, shape.h_kv, shape.d, args.q.dtype, device, true);
  validate_topk(args.topk, info, shape.h_kv, shape.topk, options.strict, device);
  check_attention_outputs(shape, args.sinks, args.out, args.lse, args.q.dtype, info.total_q,
                          device, options.strict);
  return info;
}

BatchInfo validate_decode(const AttentionShape& shape, const DecodeArgs& args,
                          const Options& options, Device device) {
  validate_shape(shape);
  MSA_REQUIRE(args.q_per_request >= 1 && args.q_per_request <= 16, "q_per_request",
              str(args.q_per_request), "must be in 1..16");
  check_half_tensor(args.q, "q", device, 3);
  BatchInfo info;
  if (reads_values(device)) {
    info = read_decode_batch(args.seq_len, args.q_per_request);
  } else {
    check_int32_vector(args.seq_len, "seq_len", device);
    info.batch = args.seq_len.dim(0);
    MSA_REQUIRE(info.batch <= (std::int64_t{1} << 31) / args.q_per_request - 1, "seq_len.shape[0]",
                str(info.batch), "B * q_per_request query rows must fit in int32");
    info.total_q = info.batch * args.q_per_request;
  }
  check_half_shape(args.q, "q", {info.total_q, shape.h_q, shape.d});
  // FP8 E4M3 caches: bf16 queries and a descale factor per tensor or per KV head for each.
  const bool fp8 = args.kv.k.present() && args.kv.k.dtype == DType::kFP8E4M3;
  MSA_REQUIRE(!fp8 || args.q.dtype == DType::kBF16, "q.dtype", to_string(args.q.dtype),
              "FP8 E4M3 K/V caches take bf16 queries");
  validate_kv(args.kv, info, shape.h_kv, shape.d, fp8 ? DType::kFP8E4M3 : args.q.dtype, device, true);
  if (fp8) {
    check_descale(args.k_descale, "k_descale", shape.h_kv, device);
    check_descale(args.v_descale, "v_descale", shape.h_kv, device);
  } else {
    MSA_REQUIRE(!args.k_descale.present(), "k_descale", "present", "descale factors go with FP8 K/V caches only");
    MSA_REQUIRE(!args.v_descale.present(), "v_descale", "present", "descale factors go with FP8 K/V caches only");
  }
  validate_topk(args.topk, info, shape.h_kv, shape.topk, options.strict, device,
                args.topk_head_major);
  check_attention_outputs(shape, args.sinks, args.out, args.lse, args.q.dtype, info.total_q,
                          device, options.strict);
  return info;
}

namespace {

// The index queries, the index-K cache and the batch of an indexer call (Indexer, IndexerTopK).
BatchInfo validate_index_inputs(int h_i, int d, const TensorView& iq, const KvCache& index_k, const VarlenBatch& batch,
                                Device device) {
  // Index queries and keys in one dtype: bf16, fp16, or FP8 E4M3 (MSA's q8kv8 indexers; scores
  // are the raw FP32 dot products of the E4M3 values, no descale factors).
  check_present(iq, "index_q");
  check_device(iq, "index_q", device);
  MSA_REQUIRE(iq.dtype == DType::kBF16 || iq.dtype == DType::kFP16 || iq.dtype == DType::kFP8E4M3, "index_q.dtype",
              to_string(iq.dtype), "expected bf16, fp16 or fp8_e4m3");
  check_rank(iq, "index_q", 3);
  const BatchInfo info = batch_on(batch, device, iq.dim(0));
  check_half_shape(iq, "index_q", {info.total_q, h_i, d});
  validate_kv(index_k, info, 1, d, iq.dtype, device, false, "index_k.");
  return info;
}

}  // namespace

BatchInfo validate_indexer(int h_i, int d, const IndexerArgs& args, Device device) {
  const BatchInfo info = validate_index_inputs(h_i, d, args.index_q, args.index_k, args.batch, device);
  check_output(args.scores, "scores", device, DType::kFP32, {h_i, info.total_q, args.scores.dim(2)});
  MSA_REQUIRE(!reads_values(device) || args.scores.dim(2) >= info.max_blocks(), "scores.shape[2]",
              str(args.scores.dim(2)),
              "too narrow: needs ceil(max k_len / 128) = " + str(info.max_blocks()) + " columns");
  return info;
}

BatchInfo validate_indexer_topk(int h_i, int d, int topk, const IndexerTopkArgs& args, std::int64_t max_k_len,
                                Device device) {
  const BatchInfo info = validate_index_inputs(h_i, d, args.index_q, args.index_k, args.batch, device);
  check_output(args.topk, "topk", device, DType::kInt32, {h_i, info.total_q, topk});
  if (reads_values(device))
    for (std::int64_t b = 0; b < info.batch; ++b)
      MSA_REQUIRE(info.k_len[b] <= max_k_len, "k_len[" + str(b) + "]", str(info.k_len[b]),
                  "exceeds the planned max_k_len = " + str(max_k_len));
  return info;
}

BatchInfo validate_topk_args(int topk, const TopkArgs& args, Device device) {
  check_present(args.scores, "scores");
  check_rank(args.scores, "scores", 3);
  const BatchInfo info = batch_on(args.batch, device, args.scores.dim(1));
  check_tensor(args.scores, "scores", device, DType::kFP32,
               {args.scores.dim(0), info.total_q, args.scores.dim(2)});
  MSA_REQUIRE(!reads_values(device) || args.scores.dim(2) >= info.max_blocks(), "scores.shape[2]",
              str(args.scores.dim(2)),
              "too narrow: needs ceil(max k_len / 128) = " + str(info.max_blocks()) + " columns");
  check_output(args.topk, "topk", device, DType::kInt32, {args.scores.dim(0), info.total_q, topk});
  return info;
}

void validate_combine(const AttentionShape& shape, const CombineArgs& args, Device device, bool strict) {
  const TensorView& op = args.o_partial;
  check_present(op, "o_partial");
  check_device(op, "o_partial", device);
  MSA_REQUIRE(op.dtype == DType::kFP32 || op.dtype == DType::kBF16 || op.dtype == DType::kFP16, "o_partial.dtype",
              to_string(op.dtype), "expected fp32, bf16 or fp16");
  check_rank(op, "o_partial", 4);
  const std::int64_t total_q = op.dim(1);
  check_shape(op, "o_partial", {shape.topk, total_q, shape.h_q, shape.d});
  check_layout(op, "o_partial");
  check_tensor(args.lse_partial, "lse_partial", device, DType::kFP32, {shape.topk, total_q, shape.h_q});
  check_tensor(args.split_counts, "split_counts", device, DType::kInt32, {total_q, shape.h_kv});
  check_sinks(args.sinks, shape.h_q, device, strict);
  check_half_tensor(args.out, "out", device, 3);
  check_output(args.out, "out", device, args.out.dtype, {total_q, shape.h_q, shape.d});
  if (args.lse.rank != 0) check_output(args.lse, "lse", device, DType::kFP32, {total_q, shape.h_q});
  if (!reads_values(device)) return;
  // Counts index the partial slots: beyond topk would read past o_partial.
  const auto* counts = args.split_counts.ptr<const std::int32_t>();
  for (std::int64_t q = 0; q < total_q; ++q) {
    for (std::int64_t h = 0; h < shape.h_kv; ++h) {
      const std::int32_t n = counts[args.split_counts.offset(q, h)];
      MSA_REQUIRE(n >= 0 && n <= shape.topk, element("split_counts", q, h), str(n),
                  "must be in [0, topk = " + str(shape.topk) + "]");
    }
  }
}

}  // namespace msa
