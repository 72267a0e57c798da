// `msa bench prefill`: the sparse prefill on the GPU, timed as targets.md asks (CUDA events
// over graph replays, inputs rotated past 2x L2, warm-up, median of >= 20, CV), with plan()
// and run() reported separately against the FLOP/byte floor.
#include <algorithm>
#include <cmath>
#include <memory>
#include <cstdio>
#include <string>
#include <utility>
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
#include "bench/route_share.h"
#include "tools/bench_device.h"
#endif

namespace msa::tool {

namespace {

struct BenchCase {
  std::string name;
  bench::Selection selection;
  std::vector<bench::Request> requests;
  PrefillPath path = PrefillPath::kAuto;
};

struct BenchOptions {
  AttentionShape shape{.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
  int page_size = 128;
  int q_per_item = Options{}.q_per_item;
  PrefillPath path = PrefillPath::kAuto;  // for --seq / --requests cases
  double clustered_p = 0.25;
  std::uint64_t seed = 1;
  int warmup = 5;
  int reps = 20;
  std::vector<BenchCase> cases;  // empty: a suite
  bool chunk_suite = false;       // --suite chunks instead of the default suite
  bool help = false;
};

std::vector<bench::Request> single(int s) { return {{s, s}}; }

std::string bench_usage() {
  return "usage: msa bench prefill [options]\n"
         "\n"
         "Times the CUDA sparse prefill (plan and run separately) on generated selections.\n"
         "Without --seq/--requests it runs the default suite: random S = 8k, 32k, 128k;\n"
         "tile-shared S = 8k, 32k; clustered S = 32k; a chunked batch of 8 requests (all on the\n"
         "automatic path choice); then tile-shared S = 8k, 32k, clustered S = 32k and random\n"
         "S = 8k, 32k on each fixed path, block-major and tile-union. --suite chunks runs small\n"
         "chunks on long prefixes instead: 1, 16, 64, 171, 512 and 2048 new tokens on 16k, 64k\n"
         "and 128k cached tokens, batches of 1 and 4 such requests, random selections.\n"
         "Every case is timed as graph replays (plan and run separately) and eagerly (plan + run\n"
         "called on an idle GPU after an L2 flush, host gaps included: what an engine's eager\n"
         "call costs), and eagerly behind earlier GPU work (\"busy\": the same call with a spin\n"
         "kernel ahead of it, so that the host's enqueue is hidden and the time is the GPU's).\n"
         "\n"
         "options (default in brackets):\n"
         "  --suite NAME       default|chunks, when no --seq/--requests is given [default]\n"
         "  --selection NAME   random|tile-shared|clustered|all for --seq/--requests [random]\n"
         "  --seq N            one request of N new tokens, no prefix (repeatable)\n"
         "  --requests q:k,... a packed batch: q_len new tokens, k_len final length\n"
         "  --h-q N --h-kv N --topk N   geometry [64, 4, 16]; d is 128\n"
         "  --page-size N      16, 32, 64 or 128 [128]\n"
         "  --q-per-item N     planner chunk [automatic: msa::plan_q_per_item]\n"
         "  --path NAME        auto|block-major|tile-union for --seq/--requests [auto]\n"
         "  --seed N           [1]\n"
         "  --warmup N --reps N   graph replays [5, 20]\n";
}

BenchOptions parse_bench_options(const std::vector<std::string>& args) {
  BenchOptions o;
  ArgReader r("msa bench prefill", args);
  bench::Selection selection = bench::Selection::kRandom;
  std::vector<std::pair<std::string, std::vector<bench::Request>>> batches;
  while (r.next_option()) {
    const std::string& name = r.name();
    if (name == "-h" || name == "--help") r.no_value(), o.help = true;
    else if (read_bench_option(r, o.shape, o.seed, o.warmup, o.reps)) continue;
    else if (name == "--selection") selection = r.selection();
    else if (name == "--suite") {
      const std::string v = r.value();
      if (v == "chunks") o.chunk_suite = true;
      else if (v == "default") o.chunk_suite = false;
      else r.bad(name, v, "expected default or chunks");
    }
    else if (name == "--seq") {
      const int s = r.integer(1, 1 << 22);
      batches.push_back({"S=" + std::to_string(s), single(s)});
    } else if (name == "--requests") batches.push_back({"B=custom", r.requests(1 << 22)});
    else if (name == "--page-size") {
      o.page_size = r.page_size();
      if (o.page_size == 0) r.bad(name, "0", "the benchmark uses paged K/V");
    } else if (name == "--q-per-item") o.q_per_item = r.integer(1, 4096);
    else if (name == "--path") o.path = r.prefill_path();
    else r.unknown();
  }
  check_bench_group(r, o.shape);
  for (auto& [label, requests] : batches)
    o.cases.push_back({std::string(bench::selection_name(selection)) + " " + label +
                           (o.path == PrefillPath::kAuto ? "" : std::string(" [") + prefill_path_name(o.path) + "]"),
                       selection, requests, o.path});
  return o;
}

#if MSA_WITH_CUDA

// targets.md shapes: S = 8k / 32k / 128k batch 1 per generator, and a chunked batch with long
// prefixes and mixed chunk sizes.
std::vector<BenchCase> default_suite() {
  const std::vector<bench::Request> chunked = bench_chunked_batch();
  std::vector<BenchCase> suite = {{"random S=8k", bench::Selection::kRandom, single(8192)},
                                  {"random S=32k", bench::Selection::kRandom, single(32768)},
                                  {"random S=128k", bench::Selection::kRandom, single(131072)},
                                  {"tile-shared S=8k", bench::Selection::kTileShared, single(8192)},
                                  {"tile-shared S=32k", bench::Selection::kTileShared, single(32768)},
                                  {"clustered S=32k", bench::Selection::kClustered, single(32768)},
                                  {"random chunked B=8", bench::Selection::kRandom, chunked}};
  // The two fixed paths side by side on the cases that tell them apart.
  const std::vector<BenchCase> compare = {{"tile-shared S=8k", bench::Selection::kTileShared, single(8192)},
                                          {"tile-shared S=32k", bench::Selection::kTileShared, single(32768)},
                                          {"clustered S=32k", bench::Selection::kClustered, single(32768)},
                                          {"random S=8k", bench::Selection::kRandom, single(8192)},
                                          {"random S=32k", bench::Selection::kRandom, single(32768)}};
  for (const PrefillPath path : {PrefillPath::kBlockMajor, PrefillPath::kTileUnion})
    for (BenchCase c : compare) {
      c.name += std::string(" [") + prefill_path_name(path) + "]";
      c.path = path;
      suite.push_back(c);
    }
  return suite;
}

// Issue 14's small-chunk grid: chunk new tokens on a prefix of cached tokens, batch 1 and 4.
std::vector<BenchCase> chunk_suite() {
  std::vector<BenchCase> suite;
  for (const int batch : {1, 4})
    for (const int prefix : {16384, 65536, 131072})
      for (const int chunk : {1, 16, 64, 171, 512, 2048})
        suite.push_back({"random " + std::to_string(chunk) + " on " + std::to_string(prefix / 1024) + "k" +
                             (batch > 1 ? " B=" + std::to_string(batch) : std::string()),
                         bench::Selection::kRandom,
                         std::vector<bench::Request>(static_cast<std::size_t>(batch), {chunk, prefix + chunk})});
  return suite;
}

struct Row {
  std::vector<std::string> cells;
};

// Copies of Q/K/V/out that the timed replays rotate over: enough to exceed 2x L2, at most 8.
int rotation_sets(std::int64_t q_elems, std::int64_t kv_elems) {
  const double set_bytes = 2.0 * (2 * q_elems + 2 * kv_elems);
  return static_cast<int>(std::clamp<double>(
      std::ceil(2.0 * static_cast<double>(bench::device_l2_bytes()) / std::max(set_bytes, 1.0)), 1, 8));
}

Options case_options(const BenchOptions& o, const BenchCase& c) {
  Options options;
  options.backend = Backend::kCuda;
  options.q_per_item = o.q_per_item;
  options.prefill_path = c.path;
  return options;
}

// Every case's host and device memory, checked before the first case allocates anything.
void require_bench_memory(const BenchOptions& o) {
  for (const BenchCase& c : o.cases) {
    std::int64_t total_q = 0, pages = 0;
    for (const bench::Request& r : c.requests) {
      total_q += r.q_len;
      pages += (r.k_len + o.page_size - 1) / o.page_size;
    }
    const int sets = rotation_sets(total_q * o.shape.h_q * o.shape.d,
                                   std::max<std::int64_t>(pages, 1) * o.shape.h_kv * o.page_size * o.shape.d);
    MemoryEstimate e = estimate_bench_prefill_memory(o.shape, o.page_size, c.requests, case_options(o, c), sets);
    e.device.add("L2 flush (eager timing)", 2.0 * static_cast<double>(bench::device_l2_bytes()), "");
    require_memory("msa bench prefill", e, "case '" + c.name + "'");
  }
}

Row bench_case(const BenchOptions& o, const BenchCase& c, std::uint64_t seed) {
  const AttentionShape& s = o.shape;
  // Host metadata from the shared generator (batch, page table over a random permutation of
  // physical pages, top-k rows); Q/K/V are filled on the device below.
  bench::WorkloadSpec spec;
  spec.shape = s;
  spec.requests = c.requests;
  spec.page_size = o.page_size;
  spec.selection = c.selection;
  spec.clustered_p = o.clustered_p;
  spec.seed = seed;
  spec.host_values = false;
  const bench::Workload w = bench::make_workload(spec);
  const std::int64_t total_q = w.total_q, pages = w.num_pages;
  std::int64_t max_k = 0;
  for (const bench::Request& r : c.requests) max_k = std::max<std::int64_t>(max_k, r.k_len);
  const bench::HostTensor &cu_q = w.cu_seqlens_q, &k_len = w.k_len, &page_table = w.page_table, &topk = w.topk;
  const bench::SelectionStats stats = bench::count_selection(topk.view(), c.requests);
  const double flops = bench::attention_flops(s, stats);
  const double bytes = bench::prefill_bytes(s, stats, total_q).total();
  const double floor_ms = bench::floor_seconds(flops, bytes) * 1e3;
  // Tiles on the tile-union kernel: all, none, or those the path's route sends there.
  const double union_share = bench::union_tile_share(w, max_k, c.path);

  // Device tensors; Q/K/V/out rotate over `sets` copies whose total exceeds 2x L2.
  const std::int64_t q_elems = total_q * s.h_q * s.d;
  const std::int64_t kv_elems = pages * s.h_kv * o.page_size * s.d;
  const int sets = rotation_sets(q_elems, kv_elems);
  std::vector<std::unique_ptr<DeviceBuffer>> q, k, v, out;
  for (int i = 0; i < sets; ++i) {
    q.push_back(std::make_unique<DeviceBuffer>(q_elems * 2));
    k.push_back(std::make_unique<DeviceBuffer>(kv_elems * 2));
    v.push_back(std::make_unique<DeviceBuffer>(kv_elems * 2));
    out.push_back(std::make_unique<DeviceBuffer>(q_elems * 2));
    bench::device_fill_normal(q[i]->ptr, q_elems, false, 0.25f, seed * 131 + 4 * i, nullptr);
    bench::device_fill_normal(k[i]->ptr, kv_elems, false, 0.25f, seed * 131 + 4 * i + 1, nullptr);
    bench::device_fill_normal(v[i]->ptr, kv_elems, false, 0.25f, seed * 131 + 4 * i + 2, nullptr);
  }
  DeviceBuffer lse(static_cast<std::size_t>(total_q * s.h_q) * 4);
  DeviceBuffer d_cu = upload(cu_q), d_klen = upload(k_len), d_pt = upload(page_table), d_topk = upload(topk);

  VarlenBatch batch{on_device(cu_q.view(), d_cu.ptr), on_device(k_len.view(), d_klen.ptr)};
  const TensorView d_topk_view = on_device(topk.view(), d_topk.ptr);
  std::vector<PrefillArgs> args(static_cast<std::size_t>(sets));
  for (int i = 0; i < sets; ++i) {
    PrefillArgs& a = args[i];
    a.q = TensorView::contiguous(q[i]->ptr, DType::kBF16, {total_q, s.h_q, s.d}, Device::kCuda);
    a.kv.k = TensorView::contiguous(k[i]->ptr, DType::kBF16, {pages, s.h_kv, o.page_size, s.d}, Device::kCuda);
    a.kv.v = TensorView::contiguous(v[i]->ptr, DType::kBF16, {pages, s.h_kv, o.page_size, s.d}, Device::kCuda);
    a.kv.page_table = on_device(page_table.view(), d_pt.ptr);
    a.batch = batch;
    a.topk = d_topk_view;
    a.out = TensorView::contiguous(out[i]->ptr, DType::kBF16, {total_q, s.h_q, s.d}, Device::kCuda);
    a.lse = TensorView::contiguous(lse.ptr, DType::kFP32, {total_q, s.h_q}, Device::kCuda);
  }

  SparsePrefill op(s, case_options(o, c));
  op.plan(batch, d_topk_view, max_k, nullptr);  // sizes and allocates the workspace
  check(cudaDeviceSynchronize(), "plan");
  const bench::Timing plan = bench::time_graph_replays(
      [&](int, cudaStream_t st) { op.plan(batch, d_topk_view, max_k, st); }, 1, o.warmup, o.reps);
  const bench::Timing run = bench::time_graph_replays(
      [&](int set, cudaStream_t st) { op.run(args[set], st); }, sets, o.warmup, o.reps);
  check(cudaDeviceSynchronize(), "run");
  // Eagerly, as an engine calls it: plan + run on an idle GPU, L2 flushed before each call.
  const std::size_t flush_bytes = static_cast<std::size_t>(2 * bench::device_l2_bytes());
  DeviceBuffer flush(flush_bytes);
  const auto call = [&](cudaStream_t st) {
    op.plan(batch, d_topk_view, max_k, st);
    op.run(args[0], st);
  };
  const bench::Timing eager = bench::time_eager_calls(call, flush.ptr, flush_bytes, o.warmup, o.reps);
  // The same calls behind earlier GPU work: the host's enqueue hidden, the L2 as cold.
  const bench::Timing behind = bench::time_eager_calls_behind_work(call, flush.ptr, flush_bytes, o.warmup, o.reps);

  const double run_s = run.median_ms * 1e-3;
  Row row;
  row.cells = {c.name,
               std::to_string(total_q),
               std::to_string(stats.edges),
               format("%.3f", plan.median_ms),
               format("%.3f", run.median_ms),
               format("%.1f%%", 100.0 * run.cv),
               format("%.3f", plan.median_ms + run.median_ms),
               format("%.3f", eager.median_ms),
               format("%.1f%%", 100.0 * plan.median_ms / eager.median_ms),
               format("%.3f", behind.median_ms),
               format("%.1f", eager.host_median_us),
               format("%.1f", flops / run_s * 1e-12),
               format("%.0f", bytes / run_s * 1e-9),
               format("%.3f", floor_ms),
               format("%.2f", run.median_ms / floor_ms),
               format("%.0f%%", 100.0 * union_share),
               std::to_string(sets)};
  return row;
}

#endif  // MSA_WITH_CUDA

}  // namespace

std::vector<bench::Request> bench_chunked_batch() {
  return {{2048, 34000}, {8192, 8192}, {1024, 131072}, {16384, 40000},
          {512, 512},    {4096, 70000}, {1, 100000},   {3000, 12345}};
}

int bench_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs("usage: msa bench prefill|decode|layer [options]  (msa bench <name> --help)\n",
               args.empty() ? stderr : stdout);
    return args.empty() ? kExitUsage : kExitPass;
  }
  if (args[0] == "decode") return bench_decode_command({args.begin() + 1, args.end()});
  if (args[0] == "layer") return bench_layer_command({args.begin() + 1, args.end()});
  if (args[0] != "prefill")
    throw UsageError("msa bench: unknown benchmark '" + args[0] + "' (available: prefill, decode, layer)");
  BenchOptions o = parse_bench_options({args.begin() + 1, args.end()});
  if (o.help) {
    std::fputs(bench_usage().c_str(), stdout);
    return kExitPass;
  }
#if MSA_WITH_CUDA
  if (!cuda_available()) throw UsageError("msa bench prefill: no CUDA device is visible");
  if (o.cases.empty()) o.cases = o.chunk_suite ? chunk_suite() : default_suite();
  require_bench_memory(o);  // a case that cannot fit is a usage error before any case runs
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("msa bench prefill on %s (%d SMs, L2 %d MB): h_q %d, h_kv %d, d %d, topk %d, page %d, "
              "q_per_item %s; median of %d graph replays after %d warm-up\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, o.shape.h_q, o.shape.h_kv,
              o.shape.d, o.shape.topk, o.page_size,
              o.q_per_item > 0 ? std::to_string(o.q_per_item).c_str() : "auto", o.reps, o.warmup);
  Table table({{"case"},
               {"total_q", true},
               {"edges", true},
               {"plan ms", true},
               {"run ms", true},
               {"cv", true},
               {"plan+run", true},
               {"eager ms", true},
               {"plan/eager", true},
               {"busy ms", true},
               {"host us", true},
               {"eff TFLOP/s", true},
               {"GB/s", true},
               {"floor ms", true},
               {"run/floor", true},
               {"union", true},
               {"sets", true}});
  for (const BenchCase& c : o.cases) {
    table.add_row(bench_case(o, c, o.seed).cells);
    std::fprintf(stderr, "  done: %s\n", c.name.c_str());
  }
  table.print(stdout);
  std::printf(
      "plan, run: graph replays (median); eager: plan + run called eagerly on an idle GPU after an L2 "
      "flush (median of %d), host gaps included; plan/eager = the plan's replay time over the eager call's; "
      "busy: the same eager call behind earlier GPU work (a spin kernel), its host gaps hidden; host us: the "
      "eager call's host time (plan + run returning, median); ",
      o.reps);
  std::printf("effective TFLOP/s counts selected visible keys only (targets.md); floor = max(FLOPs / 600 "
              "TFLOP/s, bytes / 2.9 TB/s) of the KV-block-major byte model (bench/flops.h); union = share of "
              "(KV head, query tile) pairs run by the tile-union kernel\n");
  return kExitPass;
#else
  throw UsageError("msa bench prefill: this build has no CUDA backend");
#endif
}

}  // namespace msa::tool
