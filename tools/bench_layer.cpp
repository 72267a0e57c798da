// `msa bench layer`: one MSA layer on the GPU end to end, stage by stage, as a serving engine
// calls it. Prefill: indexer -> top-k -> plan (on the device, from device batch and top-k) ->
// sparse prefill (+ combine). Decode step: indexer (decode form) -> top-k (written in the MSA
// decode layout) -> plan -> sparse decode. Each repetition flushes L2 and drains the stream (so
// the host's enqueue is timed), then enqueues the stages eagerly with CUDA events between them;
// the table gives each stage's median, the median of the whole layer (first event to last:
// launch gaps included) and the layer captured once in a CUDA graph and replayed. Beside it, the fused selection (IndexerTopK: plan + run, timed the same
// way), whose ids must equal the indexer + top-k's.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/flops.h"
#include "bench/gpu_timer.h"
#include "bench/workload.h"
#include "msa/msa.h"
#include "tools/args.h"
#include "tools/cli.h"
#include "tools/memory_estimate.h"
#include "tools/table.h"

#if MSA_WITH_CUDA
#include <cuda_runtime.h>

#include "bench/device_fill.h"
#include "tools/bench_device.h"
#endif

namespace msa::tool {

namespace {

struct LayerCase {
  std::string name;
  std::vector<bench::Request> requests;  // prefill: the packed batch; decode: B x {Q, L}
  bool decode = false;
  int q_per_request = 0;  // decode only
};

struct LayerOptions {
  AttentionShape shape{.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
  int page_size = 128;
  std::uint64_t seed = 1;
  int warmup = 3;
  int reps = 10;
  std::vector<LayerCase> cases;  // empty: the default suite
  bool help = false;
};

LayerCase decode_case(int batch, int len, int q) {
  return {"decode B=" + std::to_string(batch) + " L=" + std::to_string(len) + " Q=" + std::to_string(q),
          std::vector<bench::Request>(static_cast<std::size_t>(batch), {q, len}), true, q};
}

// Issue 13's shapes: prefill S = 32k and 128k, the chunked batch of msa bench prefill, a small
// chunk on a long prefix, and the production decode step.
std::vector<LayerCase> default_suite() {
  return {{"prefill S=32k", {{32768, 32768}}},
          {"prefill S=128k", {{131072, 131072}}},
          {"prefill chunked B=8", bench_chunked_batch()},
          {"prefill 171 on 55k", {{171, 55000}}},
          decode_case(32, 100000, 8)};
}

std::string usage() {
  return "usage: msa bench layer [options]\n"
         "\n"
         "Times one MSA layer on the GPU, stage by stage, eagerly (as an engine calls it, L2\n"
         "flushed before each repetition) and as one replayed CUDA graph. Prefill: indexer, top-k,\n"
         "plan, sparse prefill. Decode: indexer, top-k, plan, sparse decode. Without --seq,\n"
         "--requests or --decode it runs prefill S = 32k and 128k, the chunked batch of msa bench\n"
         "prefill, 171 new tokens on a 55k prefix, and decode B = 32, L = 100k, Q = 8.\n"
         "\n"
         "options (default in brackets):\n"
         "  --seq N            prefill of one request of N new tokens, no prefix (repeatable)\n"
         "  --requests q:k,... prefill of a packed batch: q_len new tokens, k_len final length\n"
         "  --decode B,L,Q     decode step of B requests of seq_len L, Q queries each (repeatable)\n"
         "  --h-q N --h-kv N --topk N   geometry [64, 4, 16]; d is 128; index heads = h_kv\n"
         "  --page-size N      16, 32, 64 or 128 [128]\n"
         "  --seed N           [1]\n"
         "  --warmup N --reps N   eager repetitions [3, 10]; graph replays [3, max(reps, 10)]\n";
}

LayerOptions parse(const std::vector<std::string>& args) {
  LayerOptions o;
  ArgReader r("msa bench layer", args);
  while (r.next_option()) {
    const std::string& name = r.name();
    if (name == "-h" || name == "--help") r.no_value(), o.help = true;
    else if (read_bench_option(r, o.shape, o.seed, o.warmup, o.reps, 256)) continue;
    else if (name == "--seq") {
      const int s = r.integer(1, 1 << 22);
      o.cases.push_back({"prefill S=" + std::to_string(s), {{s, s}}});
    } else if (name == "--requests") o.cases.push_back({"prefill B=custom", r.requests(1 << 22)});
    else if (name == "--decode") {
      const std::vector<int> v = r.integers(1, 1 << 22);
      if (v.size() != 3) r.bad(name, std::to_string(v.size()) + " numbers", "expected B,L,Q");
      if (v[2] > 16 || v[2] > v[1]) r.bad(name, std::to_string(v[2]), "Q must be 1..16 and <= L");
      o.cases.push_back(decode_case(v[0], v[1], v[2]));
    } else if (name == "--page-size") {
      o.page_size = r.page_size();
      if (o.page_size == 0) r.bad(name, "0", "the benchmark uses paged K/V");
    } else r.unknown();
  }
  check_bench_group(r, o.shape);
  return o;
}

#if MSA_WITH_CUDA

constexpr int kStages = 4;  // indexer, top-k, plan, attention

struct CaseResult {
  double stage_ms[kStages] = {};
  double layer_ms = 0, graph_ms = 0;
  double fused_ms = 0;  // IndexerTopK, plan + run
  double indexer_flops = 0, attention_flops = 0;
  std::int64_t rows = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::int64_t max_k_len(const std::vector<bench::Request>& requests) {
  std::int64_t m = 1;
  for (const auto& r : requests) m = std::max<std::int64_t>(m, r.k_len);
  return m;
}

// Device memory of one case, checked before it allocates: the prefill bench's estimate (one
// set) plus the index branch, the scores and the top-k.
void require_case_memory(const LayerOptions& o, const LayerCase& c) {
  Options cuda;
  cuda.backend = Backend::kCuda;
  MemoryEstimate e = estimate_bench_prefill_memory(o.shape, o.page_size, c.requests, cuda, 1);
  std::int64_t total_q = 0, kv_rows = 0;
  for (const auto& r : c.requests) {
    total_q += r.q_len;
    kv_rows += (r.k_len + o.page_size - 1) / o.page_size * o.page_size;
  }
  const double cols = static_cast<double>((max_k_len(c.requests) + kBlockSize - 1) / kBlockSize);
  e.device.add("index q/k", (static_cast<double>(total_q) * o.shape.h_kv + kv_rows) * o.shape.d * 2,
               "--seq / --requests / --decode / --h-kv");
  e.device.add("indexer scores", static_cast<double>(total_q) * o.shape.h_kv * cols * 4,
               "--seq / --requests / --decode / --h-kv");
  e.device.add("fused selection (ids, scratch)",
               static_cast<double>(total_q) * o.shape.h_kv * o.shape.topk * 4 +
                   static_cast<double>(IndexerTopK::workspace_bytes(
                       o.shape.h_kv, o.shape.topk,
                       {static_cast<std::int64_t>(c.requests.size()), total_q, max_k_len(c.requests)}, cuda)),
               "--seq / --requests / --decode / --h-kv");
  e.device.add("L2 flush", 2.0 * static_cast<double>(bench::device_l2_bytes()), "");
  require_memory("msa bench layer", e, "case '" + c.name + "'");
}

CaseResult bench_case(const LayerOptions& o, const LayerCase& c) {
  const AttentionShape& s = o.shape;
  bench::WorkloadSpec spec;
  spec.shape = s;
  spec.requests = c.requests;
  spec.page_size = o.page_size;
  spec.h_i = s.h_kv;
  spec.seed = o.seed;
  spec.host_values = false;  // batch and page table only; values are filled on the device
  const bench::Workload w = bench::make_workload(spec);
  const std::int64_t total_q = w.total_q, pages = w.num_pages;
  const std::int64_t max_k = max_k_len(c.requests);
  const std::int64_t cols = (max_k + kBlockSize - 1) / kBlockSize;
  const int h_i = s.h_kv;

  const std::int64_t q_elems = total_q * s.h_q * s.d, kv_elems = pages * s.h_kv * o.page_size * s.d;
  const auto bytes = [](std::int64_t elems, int size) { return static_cast<std::size_t>(elems) * size; };
  DeviceBuffer q(bytes(q_elems, 2)), k(bytes(kv_elems, 2)), v(bytes(kv_elems, 2)), out(bytes(q_elems, 2));
  DeviceBuffer lse(bytes(total_q * s.h_q, 4));
  DeviceBuffer index_q(bytes(total_q * h_i * s.d, 2)), index_k(bytes(pages * o.page_size * s.d, 2));
  DeviceBuffer scores(bytes(total_q * h_i * cols, 4)), topk(bytes(total_q * s.h_kv * s.topk, 4));
  DeviceBuffer topk_fused(bytes(total_q * s.h_kv * s.topk, 4));
  const std::uint64_t seed = o.seed * 131;
  bench::device_fill_normal(q.ptr, q_elems, false, 0.25f, seed, nullptr);
  bench::device_fill_normal(k.ptr, kv_elems, false, 0.25f, seed + 1, nullptr);
  bench::device_fill_normal(v.ptr, kv_elems, false, 0.25f, seed + 2, nullptr);
  bench::device_fill_normal(index_q.ptr, total_q * h_i * s.d, false, 0.25f, seed + 3, nullptr);
  bench::device_fill_normal(index_k.ptr, pages * o.page_size * s.d, false, 0.25f, seed + 4, nullptr);
  DeviceBuffer d_cu = upload(w.cu_seqlens_q), d_klen = upload(w.k_len), d_pt = upload(w.page_table);
  const std::size_t flush_bytes = static_cast<std::size_t>(2 * bench::device_l2_bytes());
  DeviceBuffer flush(flush_bytes);

  const VarlenBatch batch{on_device(w.cu_seqlens_q.view(), d_cu.ptr), on_device(w.k_len.view(), d_klen.ptr)};
  const TensorView page_table = on_device(w.page_table.view(), d_pt.ptr);
  KvCache kv;
  kv.k = TensorView::contiguous(k.ptr, DType::kBF16, {pages, s.h_kv, o.page_size, s.d}, Device::kCuda);
  kv.v = TensorView::contiguous(v.ptr, DType::kBF16, {pages, s.h_kv, o.page_size, s.d}, Device::kCuda);
  kv.page_table = page_table;

  IndexerArgs ia;
  ia.index_q = TensorView::contiguous(index_q.ptr, DType::kBF16, {total_q, h_i, s.d}, Device::kCuda);
  ia.index_k.k = TensorView::contiguous(index_k.ptr, DType::kBF16, {pages, 1, o.page_size, s.d}, Device::kCuda);
  ia.index_k.page_table = page_table;
  ia.batch = batch;
  ia.scores = TensorView::contiguous(scores.ptr, DType::kFP32, {h_i, total_q, cols}, Device::kCuda);

  // Top-k rows: the prefill layout [h_kv, total_q, K]; for decode, the memory is the MSA decode
  // layout [total_q, h_kv, K] and the top-k writes it through the transposed view.
  TopkArgs ta;
  ta.scores = ia.scores;
  ta.batch = batch;
  const TensorView topk_qm = TensorView::contiguous(topk.ptr, DType::kInt32, {total_q, s.h_kv, s.topk}, Device::kCuda);
  ta.topk = c.decode ? TensorView::strided(topk.ptr, DType::kInt32, {s.h_kv, total_q, s.topk},
                                           {s.topk, s.h_kv * s.topk, 1}, Device::kCuda)
                     : TensorView::contiguous(topk.ptr, DType::kInt32, {s.h_kv, total_q, s.topk}, Device::kCuda);

  Options cuda;
  cuda.backend = Backend::kCuda;
  Indexer indexer(h_i, s.d, 0.f, cuda);
  TopK selector(s.topk, cuda);
  indexer.plan(batch);
  selector.plan(batch);
  SparsePrefill prefill(s, cuda);
  SparseDecode decode(s, cuda);
  const std::int64_t batch_size = static_cast<std::int64_t>(c.requests.size());

  // The attention's arguments, the same for every call.
  const TensorView q_view = TensorView::contiguous(q.ptr, DType::kBF16, {total_q, s.h_q, s.d}, Device::kCuda);
  const TensorView out_view = TensorView::contiguous(out.ptr, DType::kBF16, {total_q, s.h_q, s.d}, Device::kCuda);
  const TensorView lse_view = TensorView::contiguous(lse.ptr, DType::kFP32, {total_q, s.h_q}, Device::kCuda);
  DecodeArgs da;
  da.q = q_view;
  da.kv = kv;
  da.seq_len = batch.k_len;
  da.topk = topk_qm;
  da.q_per_request = c.q_per_request;
  da.out = out_view;
  da.lse = lse_view;
  PrefillArgs pa;
  pa.q = q_view;
  pa.kv = kv;
  pa.batch = batch;
  pa.topk = ta.topk;
  pa.out = out_view;
  pa.lse = lse_view;

  // One layer call on `stream`, with events[i] recorded before stage i (and after the last).
  const auto layer = [&](cudaStream_t stream, cudaEvent_t* events) {
    const auto mark = [&](int i) {
      if (events) check(cudaEventRecord(events[i], stream), "cudaEventRecord");
    };
    mark(0);
    indexer.run(ia, stream);
    mark(1);
    selector.run(ta, stream);
    mark(2);
    if (c.decode) {
      decode.plan(batch_size, c.q_per_request, max_k, stream);
      mark(3);
      decode.run(da, stream);
    } else {
      prefill.plan(batch, ta.topk, max_k, stream);
      mark(3);
      prefill.run(pa, stream);
    }
    mark(kStages);
  };

  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t events[kStages + 1];
  for (auto& e : events) check(cudaEventCreate(&e), "cudaEventCreate");
  // A first call outside the count: plan() sizes and allocates the workspaces there.
  layer(stream, nullptr);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::vector<std::vector<double>> stage(kStages + 1);
  for (int i = 0; i < o.warmup + o.reps; ++i) {
    check(cudaMemsetAsync(flush.ptr, i & 0xff, flush_bytes, stream), "cudaMemsetAsync");
    // Drained, so the host's enqueue of the layer is timed, not hidden behind the flush.
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    layer(stream, events);
    check(cudaEventSynchronize(events[kStages]), "cudaEventSynchronize");
    if (i < o.warmup) continue;
    for (int j = 0; j <= kStages; ++j) {
      float t = 0.f;
      check(cudaEventElapsedTime(&t, events[j == kStages ? 0 : j], events[j == kStages ? kStages : j + 1]),
            "cudaEventElapsedTime");
      stage[j].push_back(t);
    }
  }
  CaseResult r;
  for (int j = 0; j < kStages; ++j) r.stage_ms[j] = median(stage[j]);
  r.layer_ms = median(stage[kStages]);
  // Every workspace is sized by now: the whole layer captures into one graph.
  r.graph_ms = bench::time_graph_replays([&](int, cudaStream_t st) { layer(st, nullptr); }, 1, 3,
                                         std::max(o.reps, 10)).median_ms;

  // The fused selection, timed as the stages are, into its own buffer in the same layout.
  IndexerTopK fused(h_i, s.d, s.topk, 0.f, cuda);
  IndexerTopkArgs fa{ia.index_q, ia.index_k, batch, ta.topk};
  fa.topk.data = topk_fused.ptr;
  const ProblemSize problem{batch_size, total_q, max_k};
  fused.plan(problem, stream);  // first call: sizes and allocates its scratch
  fused.run(fa, stream);
  std::vector<double> fused_times;
  for (int i = 0; i < o.warmup + o.reps; ++i) {
    check(cudaMemsetAsync(flush.ptr, i & 0xff, flush_bytes, stream), "cudaMemsetAsync");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    check(cudaEventRecord(events[0], stream), "cudaEventRecord");
    fused.plan(problem, stream);
    fused.run(fa, stream);
    check(cudaEventRecord(events[1], stream), "cudaEventRecord");
    check(cudaEventSynchronize(events[1]), "cudaEventSynchronize");
    float t = 0.f;
    check(cudaEventElapsedTime(&t, events[0], events[1]), "cudaEventElapsedTime");
    if (i >= o.warmup) fused_times.push_back(t);
  }
  r.fused_ms = median(fused_times);
  for (auto& e : events) check(cudaEventDestroy(e), "cudaEventDestroy");

  // The selection the layer made, for the attention's effective FLOPs; the fused one must match.
  bench::HostTensor rows(DType::kInt32, c.decode ? std::vector<std::int64_t>{total_q, s.h_kv, s.topk}
                                                  : std::vector<std::int64_t>{s.h_kv, total_q, s.topk});
  bench::HostTensor fused_rows(rows.dtype(), rows.shape());
  check(cudaMemcpy(rows.raw(), topk.ptr, rows.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(fused_rows.raw(), topk_fused.ptr, rows.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (std::memcmp(rows.raw(), fused_rows.raw(), rows.bytes()) != 0)
    throw std::runtime_error("msa bench layer: case '" + c.name + "': the fused selection's ids differ from the "
                             "indexer + top-k's");
  r.attention_flops = bench::attention_flops(s, bench::count_selection(rows.view(), c.requests, c.decode));
  r.indexer_flops = bench::indexer_flops(h_i, s.d, c.requests);
  r.rows = total_q;
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return r;
}

#endif  // MSA_WITH_CUDA

}  // namespace

int bench_layer_command(const std::vector<std::string>& args) {
  LayerOptions o = parse(args);
  if (o.help) {
    std::fputs(usage().c_str(), stdout);
    return kExitPass;
  }
#if MSA_WITH_CUDA
  if (!cuda_available()) throw UsageError("msa bench layer: no CUDA device is visible");
  if (o.cases.empty()) o.cases = default_suite();
  for (const LayerCase& c : o.cases) require_case_memory(o, c);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("msa bench layer on %s (%d SMs): h_q %d, h_kv %d (= index heads), d %d, topk %d, page %d, bf16; "
              "eager: median of %d after %d warm-up, L2 flushed before each\n",
              prop.name, prop.multiProcessorCount, o.shape.h_q, o.shape.h_kv, o.shape.d, o.shape.topk,
              o.page_size, o.reps, o.warmup);
  Table table({{"case"}, {"rows", true}, {"indexer ms", true}, {"top-k ms", true}, {"plan ms", true},
               {"attention ms", true}, {"layer ms", true}, {"graph ms", true}, {"indexer TFLOP/s", true},
               {"attention TFLOP/s", true}, {"fused sel ms", true}, {"fused speed-up", true}});
  for (const LayerCase& c : o.cases) {
    const CaseResult r = bench_case(o, c);
    table.add_row({c.name, std::to_string(r.rows), format("%.3f", r.stage_ms[0]), format("%.3f", r.stage_ms[1]),
                   format("%.3f", r.stage_ms[2]), format("%.3f", r.stage_ms[3]), format("%.3f", r.layer_ms),
                   format("%.3f", r.graph_ms), format("%.0f", r.indexer_flops / (r.stage_ms[0] * 1e-3) * 1e-12),
                   format("%.0f", r.attention_flops / (r.stage_ms[3] * 1e-3) * 1e-12), format("%.3f", r.fused_ms),
                   format("%.2fx", (r.stage_ms[0] + r.stage_ms[1]) / r.fused_ms)});
    std::fprintf(stderr, "  done: %s\n", c.name.c_str());
  }
  table.print(stdout);
  std::printf("stages eager on one stream, each from the event before its launch to the next event (launch gaps "
              "included); layer = first event to last; graph = the four stages captured once and replayed. "
              "indexer TFLOP/s: 2 d h_i per visible (query, key); attention TFLOP/s: selected visible keys "
              "only (targets.md); fused sel: IndexerTopK (plan + run, its ids checked equal to the top-k's), "
              "speed-up against indexer + top-k\n");
  return kExitPass;
#else
  throw UsageError("msa bench layer: this build has no CUDA backend");
#endif
}

}  // namespace msa::tool
