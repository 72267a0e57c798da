// `msa run`: the whole pipeline on one workload, every stage timed and verified.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/compare.h"
#include "bench/flops.h"
#include "bench/workload.h"
#include "core/k2q_host.h"
#include "core/tile_route.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"
#if MSA_WITH_CUDA
#include "cuda/api/prefill_route.h"
#endif
#include "cpu/reference.h"
#include "msa/msa.h"
#include "tools/backends.h"
#include "tools/checks.h"
#include "tools/device_workload.h"
#include "tools/memory_estimate.h"
#include "tools/cli.h"
#include "tools/table.h"

namespace msa::tool {

namespace {

using bench::HostTensor;

// Query rows per request that the brute-force indexer and top-k checks recompute.
constexpr int kSampledRowsPerRequest = 8;

template <class F>
double time_ms(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct StageRow {
  Stage stage;
  std::string backend;
  std::optional<double> ms;
  std::optional<double> flops;
  bool verified = false;  // false: --no-verify, status "-"
  CheckResult check;
  bool exact = false;     // max err column reads "exact" rather than a number
  bool error = false;     // the stage threw msa::Error
  std::string detail;
};

// Spec §7: out |err| <= 1e-2 + 1e-2 |ref| and cosine >= 0.9999; lse |err| <= 1e-3 with
// identical -inf positions (cosine not part of the lse criterion).
CheckResult check_attention(const HostTensor& out, const HostTensor& lse, const HostTensor& out_ref,
                            const HostTensor& lse_ref) {
  const bench::CompareResult o = bench::compare(out, out_ref, bench::Tolerance{});
  const bench::CompareResult l = bench::compare(lse, lse_ref, bench::Tolerance{1e-3, 0.0, -1.0});
  CheckResult r;
  r.ok = o.ok && l.ok;
  r.max_err = o.max_abs_err;
  r.detail = format("out cos %.7f, lse err %.2g", o.cosine, l.max_abs_err);
  if (!o.ok) r.detail += "; out " + o.summary();
  if (!l.ok) r.detail += "; lse " + l.summary();
  return r;
}

std::string requests_string(const std::vector<bench::Request>& requests, bool q_too) {
  std::string s;
  for (const auto& r : requests) {
    if (!s.empty()) s += ' ';
    if (q_too) s += std::to_string(r.q_len) + ':';
    s += std::to_string(r.k_len);
  }
  return s;
}

class Pipeline {
 public:
  explicit Pipeline(const RunOptions& o) : o_(o) {
    shape_.h_q = o.h_q;
    shape_.h_kv = o.h_kv;
    shape_.d = 128;
    shape_.topk = o.topk;
    for (Stage s : {Stage::kIndexer, Stage::kTopk, Stage::kPlan, Stage::kPrefill, Stage::kDecode})
      if (s != Stage::kTopk || !o.selection) backends_[static_cast<int>(s)] = stage_backend(s, o.backend, shape_);
  }

  int run() {
    // Before anything big is allocated: a workload that cannot fit is a usage error.
    require_memory("msa run", estimate_run_memory(o_, backend(Stage::kPrefill).backend));
    print_header();
    prefill_ = bench::make_workload(spec(o_.requests, o_.seed));
    if (any_cuda()) device_.emplace(prefill_, score_cols(prefill_));
    const std::vector<void (Pipeline::*)()> stages = {&Pipeline::indexer_stage, &Pipeline::topk_stage,
                                                      &Pipeline::plan_stage, &Pipeline::prefill_stage,
                                                      &Pipeline::decode_stage};
    for (auto stage : stages) {
      try {
        (this->*stage)();
      } catch (const Error& e) {
        rows_.back().error = true;
        print_table();
        std::fflush(stdout);
        std::fprintf(stderr, "msa run: %s stage: %s\n", stage_name(rows_.back().stage), e.what());
        // An error downstream of a failed check is that failure's consequence.
        return passed() ? kExitUsage : kExitFail;
      }
    }
    print_table();
    print_model();
    const auto n = static_cast<int>(rows_.size());
    std::string failed;
    for (const auto& row : rows_)
      if (!row.check.ok) failed += std::string(failed.empty() ? "" : ", ") + stage_name(row.stage);
    if (!o_.verify) std::printf("msa run: done (%d stages, not verified)\n", n);
    else if (failed.empty()) std::printf("msa run: PASS (%d stages)\n", n);
    else std::printf("msa run: FAIL (%s; %d stages)\n", failed.c_str(), n);
    return failed.empty() ? kExitPass : kExitFail;
  }

 private:
  bool passed() const {
    for (const auto& row : rows_)
      if (!row.check.ok) return false;
    return true;
  }
  bench::WorkloadSpec spec(const std::vector<bench::Request>& requests, std::uint64_t seed) const {
    bench::WorkloadSpec s;
    s.shape = shape_;
    s.requests = requests;
    s.page_size = o_.page_size;
    s.selection = o_.selection.value_or(bench::Selection::kRandom);
    s.sinks = o_.sinks;
    s.h_i = o_.h_kv;
    s.seed = seed;
    return s;
  }
  const StageBackend& backend(Stage s) const { return backends_[static_cast<int>(s)]; }
  bool any_cuda() const {
    for (const auto& b : backends_)
      if (b.backend == Backend::kCuda) return true;
    return false;
  }
  Options options(Stage s) const {
    Options opt;
    opt.backend = backend(s).backend;
    opt.strict = true;
    opt.prefill_path = o_.prefill_path;
    return opt;
  }
  StageRow& begin(Stage s) {
    StageRow row;
    row.stage = s;
    row.backend = backend_name(backend(s).backend);
    row.verified = o_.verify;
    rows_.push_back(std::move(row));
    return rows_.back();
  }

  // The wall time of f on the stage's backend. On CUDA a first call takes the one-time costs
  // (kernel attributes, workspace) and the timed call includes the wait for the device (msa
  // bench times kernels properly).
  template <class F>
  double timed(Stage s, F&& f) const {
    if (backend(s).backend != Backend::kCuda) return time_ms(f);
    f();
    device_sync();
    return time_ms([&] {
      f();
      device_sync();
    });
  }
  void device_sync() const {
    if (device_) device_->synchronize();
  }
  static std::int64_t score_cols(const bench::Workload& w) {
    std::int64_t max_k_len = 0;
    for (const auto& r : w.spec.requests) max_k_len = std::max<std::int64_t>(max_k_len, r.k_len);
    return std::max<std::int64_t>((max_k_len + kBlockSize - 1) / kBlockSize, 1);
  }

  // Indexer scores [h_i, total_q, cols] of a workload (on the device: dev's, copied back), and
  // the time of run().
  double run_indexer(const bench::Workload& w, DeviceWorkload* dev, HostTensor& scores) const {
    scores = HostTensor(DType::kFP32, {w.spec.h_i, w.total_q, score_cols(w)});
    Indexer op(w.spec.h_i, w.spec.shape.d, 0.f, options(Stage::kIndexer));
    if (backend(Stage::kIndexer).backend == Backend::kCuda) {
      const IndexerArgs args = dev->indexer_args();
      op.plan(args.batch);
      const double ms = timed(Stage::kIndexer, [&] { op.run(args); });
      dev->get_scores(scores);
      return ms;
    }
    IndexerArgs args;
    args.index_q = w.index_q.view();
    args.index_k = w.index_kv();
    args.batch = w.batch();
    args.scores = scores.view();
    op.plan(args.batch);
    const double ms = time_ms([&] { op.run(args); });
    if (dev != nullptr) dev->set_scores(scores);
    return ms;
  }

  // Exact top-k of the scores into w.topk [h_kv, total_q, topk] (on the device: from dev's
  // scores into dev's top-k, copied back), and the time of run().
  double run_topk(bench::Workload& w, DeviceWorkload* dev, const HostTensor& scores) const {
    w.topk = HostTensor(DType::kInt32, {shape_.h_kv, w.total_q, shape_.topk});
    TopK op(shape_.topk, options(Stage::kTopk));
    if (backend(Stage::kTopk).backend == Backend::kCuda) {
      const TopkArgs args = dev->topk_args();
      op.plan(args.batch);
      const double ms = timed(Stage::kTopk, [&] { op.run(args); });
      dev->get_topk(w.topk);
      return ms;
    }
    TopkArgs args;
    args.scores = scores.view();
    args.batch = w.batch();
    args.topk = w.topk.view();
    op.plan(args.batch);
    const double ms = time_ms([&] { op.run(args); });
    if (dev != nullptr) dev->set_topk(w.topk);
    return ms;
  }

  void indexer_stage() {
    StageRow& row = begin(Stage::kIndexer);
    row.ms = run_indexer(prefill_, device_ ? &*device_ : nullptr, scores_);
    row.flops = bench::indexer_flops(o_.h_kv, shape_.d, o_.requests);
    if (!o_.verify) return;
    const auto rows = sample_rows(o_.requests, kSampledRowsPerRequest);
    row.check = check_indexer(prefill_, scores_, rows, shape_.softmax_scale());
    row.detail = format("%zu rows x %d heads vs FP64 brute force", rows.size(), o_.h_kv);
  }

  void topk_stage() {
    StageRow& row = begin(Stage::kTopk);
    row.exact = true;
    if (o_.selection) {  // make_workload already filled prefill_.topk from the generator
      row.backend = "generator";
      row.detail = std::string("rows from the ") + bench::selection_name(*o_.selection) +
                   " generator (--selection)";
    } else {
      row.ms = run_topk(prefill_, device_ ? &*device_ : nullptr, scores_);
    }
    if (!o_.verify) return;
    row.check = check_topk_contract(prefill_.topk, prefill_);
    if (o_.selection) {
      row.detail += "; strict contract";
      return;
    }
    const auto rows = sample_rows(o_.requests, kSampledRowsPerRequest);
    if (row.check.ok) row.check = check_topk_rows(prefill_.topk, scores_, o_.requests, rows);
    row.detail = format("strict contract; %zu rows x %d heads vs brute-force sort", rows.size(), o_.h_kv);
  }

  void plan_stage() {
    StageRow& row = begin(Stage::kPlan);
    row.exact = true;
    const Options opt = options(Stage::kPlan);
    prefill_op_.emplace(shape_, opt);
    if (opt.backend == Backend::kCuda) {  // device batch and top-k: planned on the device alone
      const VarlenBatch batch = device_->batch();
      const TensorView topk = device_->topk();
      const std::int64_t max_k_len = score_cols(prefill_) * kBlockSize;
      row.ms = timed(Stage::kPlan, [&] { prefill_op_->plan(batch, topk, max_k_len, nullptr); });
    } else {
      row.ms = time_ms([&] { prefill_op_->plan(prefill_.batch(), prefill_.topk.view()); });
    }
    const K2qCsr plan = prefill_op_->plan_snapshot();
    row.detail = format("SparsePrefill::plan()%s: %lld rows, %zu work items",
                        opt.backend == Backend::kCuda ? " from device batch and top-k" : "",
                        static_cast<long long>(plan.total_rows), plan.work.size());
    if (!o_.verify) return;
    Options host = opt;
    host.backend = Backend::kCpu;
    // The CUDA planner under PrefillPath::kAuto routes tiles to the tile-union kernel first:
    // their rows are left out of the plan (the rule's CPU twin says which), or all of them
    // where plan() plans nothing (the route the library takes, from the device batch's bound:
    // cuda::choose_prefill_route). Under PrefillPath::kTileUnion every tile goes there.
    std::vector<std::uint8_t> flags;
    TileRoute route;
#if MSA_WITH_CUDA
    if (opt.backend == Backend::kCuda && opt.prefill_path != PrefillPath::kBlockMajor && prefill_.total_q > 0) {
      const auto b_count = static_cast<int>(o_.requests.size());
      const std::int64_t bound = score_cols(prefill_) * kBlockSize;
      const cuda::PrefillRouteChoice choice = cuda::choose_prefill_route(
          shape_, opt.prefill_path, /*union_readable=*/true, nullptr, nullptr, b_count, prefill_.total_q, bound);
      route.q_per_tile = cuda::tile_union_queries_per_tile(shape_.group(), shape_.topk);
      flags = cuda::union_tile_flags(choice, shape_, prefill_.topk.data<std::int32_t>(),
                                     prefill_.cu_seqlens_q.data<std::int32_t>(), prefill_.k_len.data<std::int32_t>(),
                                     b_count, prefill_.total_q);
      if (!flags.empty()) route.union_tile = flags.data();
    }
#endif
    const K2qCsr oracle = build_k2q_csr_routed(shape_, prefill_.batch(), prefill_.topk.view(), host, route);
    row.check = check_plan(plan, oracle, prefill_.topk, o_.requests, oracle.q_per_item, route);
    row.detail += "; spec invariants; = host builder";
    if (route.union_tile != nullptr)
      row.detail += format("; %lld of %zu tiles routed to the tile-union kernel",
                           static_cast<long long>(std::count(flags.begin(), flags.end(), 1)), flags.size());
  }

  // One run() of the planned prefill into out/lse, on the plan's backend; returns wall ms
  // (on CUDA including the wait for the device; msa bench times kernels properly).
  double run_prefill(HostTensor& out, HostTensor& lse) {
    if (backend(Stage::kPrefill).backend != Backend::kCuda)
      return time_ms([&] { prefill_op_->run(prefill_.prefill_args(out, lse)); });
    const PrefillArgs args = device_->prefill_args();
    const double ms = time_ms([&] {
      prefill_op_->run(args);
      device_->synchronize();
    });
    device_->get_outputs(out, lse);
    return ms;
  }

  void prefill_stage() {
    StageRow& row = begin(Stage::kPrefill);
    out_ = HostTensor(DType::kBF16, {prefill_.total_q, shape_.h_q, shape_.d});
    lse_ = HostTensor(DType::kFP32, {prefill_.total_q, shape_.h_q});
    run_prefill(out_, lse_);  // first call: one-time costs (kernel attributes) stay out of the row
    row.ms = run_prefill(out_, lse_);
    const auto selection = bench::count_selection(prefill_.topk.view(), o_.requests);
    row.flops = bench::attention_flops(shape_, selection);
    bytes_ = bench::prefill_bytes(shape_, selection, prefill_.total_q).total();
    row.detail = "run() (plan() in the plan row)";
    if (!o_.verify) return;
    HostTensor out_ref(DType::kFP32, {prefill_.total_q, shape_.h_q, shape_.d});
    HostTensor lse_ref(DType::kFP32, {prefill_.total_q, shape_.h_q});
    cpu::sparse_prefill_gather(shape_, prefill_.prefill_args(out_ref, lse_ref));
    row.check = check_attention(out_, lse_, out_ref, lse_ref);
    row.detail = "run() vs FP64 gather: " + row.check.detail;

    // Spec §3: the same inputs give bitwise-identical outputs.
    HostTensor out2(out_.dtype(), out_.shape()), lse2(lse_.dtype(), lse_.shape());
    run_prefill(out2, lse2);
    const bool same = std::memcmp(out2.raw(), out_.raw(), out_.bytes()) == 0 &&
                      std::memcmp(lse2.raw(), lse_.raw(), lse_.bytes()) == 0;
    row.detail += same ? "; rerun bitwise equal" : "; rerun NOT bitwise equal";
    row.check.ok = row.check.ok && same;
  }

  void decode_stage() {
    StageRow& row = begin(Stage::kDecode);
    const std::vector<bench::Request> requests = decode_requests(o_);
    bench::Workload w = bench::make_workload(spec(requests, o_.seed + 1));
    // FP8 K/V: w's K/V become the dequantised codes (what the reference reads), the codes and
    // their factors (not powers of two) go to the decode.
    std::optional<bench::Fp8Kv> fp8;
    if (o_.decode_fp8) {
      std::vector<float> k_factors;
      for (int h = 0; h < shape_.h_kv; ++h) k_factors.push_back(0.0117f * (1.f + 0.37f * static_cast<float>(h)));
      fp8 = bench::quantise_kv_fp8(w, k_factors, {0.0093f});
    }
    // On the device the top-k rows live in the MSA decode layout [B * Q, h_kv, K]: the top-k
    // writes them there through a transposed view and the decode reads them as they are.
    std::optional<DeviceWorkload> dev;
    if (any_cuda()) dev.emplace(w, score_cols(w), /*query_major_topk=*/true);
    if (dev && fp8) dev->set_fp8_kv(w, *fp8);
    HostTensor scores;
    if (!o_.selection) {
      // Decode queries are varlen rows with q_len = Q and k_len = seq_len.
      run_indexer(w, dev ? &*dev : nullptr, scores);
      run_topk(w, dev ? &*dev : nullptr, scores);
    }
    const std::int64_t rows = w.total_q;
    HostTensor out(DType::kBF16, {rows, shape_.h_q, shape_.d}), lse(DType::kFP32, {rows, shape_.h_q});
    SparseDecode op(shape_, options(Stage::kDecode));
    op.plan(o_.decode_batch, o_.decode_q, o_.decode_len);
    if (backend(Stage::kDecode).backend == Backend::kCuda) {
      const DecodeArgs args = dev->decode_args(o_.decode_q);
      row.ms = timed(Stage::kDecode, [&] { op.run(args); });
      dev->get_outputs(out, lse);
    } else {
      const HostTensor topk_qm = bench::query_major_topk(w.topk);  // the serving layout
      DecodeArgs args;
      args.q = w.q.view();
      args.kv = w.kv();
      if (fp8) {
        args.kv.k = bench::retyped(args.kv.k, fp8->k);
        args.kv.v = bench::retyped(args.kv.v, fp8->v);
        args.k_descale = fp8->k_descale.view();
        args.v_descale = fp8->v_descale.view();
      }
      args.seq_len = w.k_len.view();
      args.topk = topk_qm.view();
      args.q_per_request = o_.decode_q;
      args.sinks = w.sinks.view();
      args.out = out.view();
      args.lse = lse.view();
      row.ms = time_ms([&] { op.run(args); });
    }
    row.flops = bench::attention_flops(shape_, bench::count_selection(w.topk.view(), requests));
    row.detail = format("B %d x Q %d, %s top-k%s", o_.decode_batch, o_.decode_q,
                        o_.selection ? bench::selection_name(*o_.selection) : "indexer", fp8 ? ", FP8 E4M3 K/V" : "");
    if (!o_.verify) return;
    // The step's own selection first (its indexer and top-k ran on the decode batch).
    if (!o_.selection) {
      row.check = check_topk_contract(w.topk, w);
      const auto sampled = sample_rows(requests, kSampledRowsPerRequest);
      if (row.check.ok) row.check = check_indexer(w, scores, sampled, shape_.softmax_scale());
      if (row.check.ok) row.check = check_topk_rows(w.topk, scores, requests, sampled);
      if (!row.check.ok) {
        row.detail += "; its selection: " + row.check.detail;
        return;
      }
      row.detail += "; selection checked";
    }
    HostTensor out_ref(DType::kFP32, {rows, shape_.h_q, shape_.d}), lse_ref(DType::kFP32, {rows, shape_.h_q});
    cpu::sparse_prefill_gather(shape_, w.prefill_args(out_ref, lse_ref));
    row.check = check_attention(out, lse, out_ref, lse_ref);
    row.detail += "; vs FP64 gather on the varlen batch: " + row.check.detail;
  }

  void print_header() const {
    std::int64_t total_q = 0;
    for (const auto& r : o_.requests) total_q += r.q_len;
    std::printf("msa run: prefill %zu request%s (q:k %s), total_q %lld\n", o_.requests.size(),
                o_.requests.size() == 1 ? "" : "s", requests_string(o_.requests, true).c_str(),
                static_cast<long long>(total_q));
    std::printf("  h_q %d, h_kv %d, d %d, topk %d, index heads %d, %s, seed %llu, %d OpenMP threads\n",
                shape_.h_q, shape_.h_kv, shape_.d, shape_.topk, shape_.h_kv,
                o_.page_size ? format("page_size %d (random page permutation)", o_.page_size).c_str() : "flat K/V",
                static_cast<unsigned long long>(o_.seed), omp_get_max_threads());
    if (o_.sinks || o_.prefill_path != PrefillPath::kAuto)
      std::printf("  %sprefill path %s\n", o_.sinks ? "sinks, " : "", prefill_path_name(o_.prefill_path));
    std::printf("  decode B %d x Q %d, seq_len %s\n", o_.decode_batch, o_.decode_q,
                requests_string(decode_requests(o_), false).c_str());
    if (o_.backend == BackendChoice::kAuto && cuda_available())
      for (const auto& b : backends_)
        if (!b.why_not_cuda.empty()) std::printf("  backend auto -> cpu: %s\n", b.why_not_cuda.c_str());
    std::printf("\n");
  }

  void print_table() const {
    Table table({{"stage"}, {"backend"}, {"time ms", true}, {"TFLOP/s", true}, {"max err", true}, {"status"}, {"check"}});
    for (const auto& r : rows_) {
      const std::string status = r.error ? "ERROR" : !r.verified ? "-" : r.check.ok ? "PASS" : "FAIL";
      const std::string err = !r.verified || r.error ? "-"
                              : r.exact             ? (r.check.ok ? "exact" : "-")
                                                    : format("%.2e", r.check.max_err);
      std::string detail = r.detail;
      if (!r.check.ok && !r.check.detail.empty() && detail.find(r.check.detail) == std::string::npos)
        detail += (detail.empty() ? "" : "; ") + r.check.detail;
      table.add_row({stage_name(r.stage), r.backend, r.ms ? format("%.2f", *r.ms) : "-",
                     r.flops && r.ms && *r.ms > 0 ? format("%.3g", *r.flops / (*r.ms * 1e-3) / 1e12) : "-", err,
                     status, detail});
    }
    table.print(stdout);
    std::printf("\n");
  }

  // The H100 floor of this prefill under the targets.md model, for comparison with GPU runs.
  void print_model() const {
    for (const auto& r : rows_)
      if (r.stage == Stage::kPrefill && r.flops) {
        const double floor = bench::floor_seconds(*r.flops, bytes_);
        std::printf("model (H100, perf/targets.md): prefill %.3g GFLOP, %.3g MB of HBM traffic -> floor %.3g us (%s-bound)\n",
                    *r.flops * 1e-9, bytes_ * 1e-6, floor * 1e6,
                    *r.flops / bench::kH100FlopsPerSecond >= bytes_ / bench::kH100BytesPerSecond ? "compute" : "memory");
      }
  }

  const RunOptions& o_;
  AttentionShape shape_;
  StageBackend backends_[5];
  bench::Workload prefill_;
  HostTensor scores_;
  std::optional<SparsePrefill> prefill_op_;
  std::optional<DeviceWorkload> device_;  // device copies when the prefill runs on CUDA
  HostTensor out_, lse_;
  double bytes_ = 0;
  std::vector<StageRow> rows_;
};

}  // namespace

int run_command(const RunOptions& options) {
  if (options.threads > 0) omp_set_num_threads(options.threads);
  return Pipeline(options).run();
}

}  // namespace msa::tool
