// `msa bench decode`: the CUDA sparse decode timed as targets.md asks (CUDA events over graph
// replays of run(), warm-up, median of >= 20, CV; and the same replays enqueued back to back),
// on the grid of batch x length x queries per request, with the bytes a decode step must
// read (the union of its queries' blocks per request and KV head, Q and out) and the share of the
// device's copy bandwidth that makes.
//
// K/V live in one pool of physical pages (8 GiB by default, filled once) that every case's page
// tables map into at random, so a 200k-token batch of 128 requests needs no 50 GB cache; each
// timed replay uses the next of `sets` page tables (and Q / out buffers), enough sets that the
// pages one replay reads exceed 2x L2 before they are read again. With --shared-prefix, every
// request's first pages are request 0's, as a prefix cache maps a common prompt.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench/gpu_timer.h"
#include "bench/workload.h"
#include "msa/msa.h"
#include "tools/args.h"
#include "tools/cli.h"
#include "tools/table.h"

#if MSA_WITH_CUDA
#include <cuda_runtime.h>

#include "bench/device_fill.h"
#include "tools/bench_device.h"
#endif

namespace msa::tool {

namespace {

struct Generator {
  std::string name;
  bench::Selection selection;
  double replace_p;  // kClustered: fraction of a request's shared picks each query replaces
};

// "random": the MSA rule per query. "mtp-shared": the Q queries of a request share their picks
// (the generator's per-tile core, one tile per request) and each replaces about 2 of 15.
const std::vector<Generator>& generators() {
  static const std::vector<Generator> g = {{"random", bench::Selection::kRandom, 0.0},
                                           {"mtp-shared", bench::Selection::kClustered, 0.15}};
  return g;
}

struct DecodeBenchOptions {
  AttentionShape shape{.h_q = 64, .h_kv = 4, .d = 128, .topk = 16};
  std::vector<int> batches = {1, 2, 4, 8, 32, 64, 128};
  std::vector<int> lengths = {1000, 4000, 10000, 50000, 100000, 200000};
  std::vector<int> qs = {1, 8, 16};
  std::vector<Generator> gens = generators();
  std::vector<bool> fp8 = {false};  // K/V caches: bf16, FP8 E4M3 (true)
  double pool_gib = 8.0;
  int shared_prefix = 0;  // tokens (whole pages) every request maps to request 0's pages
  std::uint64_t seed = 1;
  int warmup = 5;
  int reps = 20;
  bool help = false;
};

std::string usage() {
  return "usage: msa bench decode [options]\n"
         "\n"
         "Times one CUDA sparse decode step (run(), replayed in a CUDA graph) per case of the grid\n"
         "batch x length x queries per request x generator x K/V dtype, paged K/V (page 128), and\n"
         "reports the bytes it must read (per request and KV head the union of its selected blocks, a\n"
         "shared prefix's blocks once per KV head; plus Q and out) against the copy bandwidth measured\n"
         "at the start.\n"
         "\n"
         "options (default in brackets):\n"
         "  --batch N,...     requests per step [1,2,4,8,32,64,128]\n"
         "  --len N,...       tokens per request (seq_len) [1000,4000,10000,50000,100000,200000]\n"
         "  --q N,...         queries per request, 1..16 [1,8,16]\n"
         "  --gen NAME        random|mtp-shared (repeatable) [both]\n"
         "  --kv LIST         K/V cache dtypes: bf16, fp8 (E4M3, descale per KV head), comma separated [bf16]\n"
         "  --h-q N --h-kv N --topk N   geometry [64, 4, 16]; d is 128\n"
         "  --pool-gib X      K/V page pool [8]\n"
         "  --shared-prefix N the first N tokens (whole pages of 128) of every request on the same\n"
         "                    physical pages, as a prefix cache maps a common prompt [0]\n"
         "  --seed N          [1]\n"
         "  --warmup N --reps N   graph replays [5, 20]\n";
}

DecodeBenchOptions parse(const std::vector<std::string>& args) {
  DecodeBenchOptions o;
  ArgReader r("msa bench decode", args);
  std::vector<Generator> gens;
  while (r.next_option()) {
    const std::string& name = r.name();
    if (name == "-h" || name == "--help") r.no_value(), o.help = true;
    else if (read_bench_option(r, o.shape, o.seed, o.warmup, o.reps)) continue;
    else if (name == "--batch") o.batches = r.integers(1, 4096);
    else if (name == "--len") o.lengths = r.integers(1, 1 << 22);
    else if (name == "--q") o.qs = r.integers(1, 16);
    else if (name == "--gen") {
      const std::string v = r.value();
      const auto it = std::find_if(generators().begin(), generators().end(), [&](const Generator& g) { return g.name == v; });
      if (it == generators().end()) r.bad(name, v, "expected random or mtp-shared");
      gens.push_back(*it);
    } else if (name == "--kv") {
      o.fp8.clear();
      for (const std::string& item : r.items()) {
        if (item != "bf16" && item != "fp8") r.bad(name, r.value(), "expected bf16 and / or fp8, comma separated");
        o.fp8.push_back(item == "fp8");
      }
    } else if (name == "--pool-gib") o.pool_gib = r.integer(1, 64);
    else if (name == "--shared-prefix")
      o.shared_prefix = r.integer(0, 1 << 22);
    else r.unknown();
  }
  if (!gens.empty()) o.gens = gens;
  check_bench_group(r, o.shape);
  return o;
}

#if MSA_WITH_CUDA

constexpr int kPage = 128;

// Bytes one step must read and write: per (request, KV head) the union of its queries' valid
// selected blocks, the first `shared_blocks` (the same pages in every request) once per KV head,
// each block's tokens below seq_len (K and V, kv_bytes each); plus Q and out (2 bytes each).
struct StepBytes {
  double kv = 0, q = 0, out = 0;
  double union_blocks = 0;  // mean union size per (request, KV head)
  double total() const { return kv + q + out; }
};

StepBytes step_bytes(const AttentionShape& s, const bench::Workload& w, int q_per_request, int kv_bytes,
                     std::int64_t shared_blocks) {
  StepBytes r;
  const auto* ids = w.topk.data<std::int32_t>();  // [h_kv, B * Q, K]
  const auto batch = static_cast<std::int64_t>(w.spec.requests.size());
  std::int64_t unions = 0;
  for (int g = 0; g < s.h_kv; ++g) {
    std::set<std::int32_t> shared;  // the shared prefix's blocks read by any request
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t len = w.spec.requests[b].k_len;
      const std::int64_t blocks = (len + kBlockSize - 1) / kBlockSize;
      std::set<std::int32_t> u;
      for (int t = 0; t < q_per_request; ++t)
        for (int k = 0; k < s.topk; ++k) {
          const std::int32_t id = ids[(std::int64_t(g) * w.total_q + b * q_per_request + t) * s.topk + k];
          if (id >= 0 && id < blocks) u.insert(id);
        }
      for (const std::int32_t id : u) {
        // Every request is as long as request 0 here, so a shared block holds the same tokens.
        if (id < shared_blocks && !shared.insert(id).second) continue;
        r.kv += 2.0 * kv_bytes * s.d * static_cast<double>(std::min<std::int64_t>(kBlockSize, len - std::int64_t(id) * kBlockSize));
      }
      unions += static_cast<std::int64_t>(u.size());
    }
  }
  r.union_blocks = static_cast<double>(unions) / static_cast<double>(std::max<std::int64_t>(batch * s.h_kv, 1));
  r.q = 2.0 * static_cast<double>(w.total_q) * s.h_q * s.d;
  r.out = r.q;
  return r;
}

// Copy bandwidth of this device: a 1 GiB device-to-device cudaMemcpy, read + write bytes over
// the median of 10 timed copies.
double copy_bandwidth(void* a, void* b, std::size_t bytes) {
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    check(cudaEventRecord(e0), "cudaEventRecord");
    check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
    check(cudaEventRecord(e1), "cudaEventRecord");
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float t = 0.f;
    check(cudaEventElapsedTime(&t, e0, e1), "cudaEventElapsedTime");
    if (i >= 2) ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3);
}

// The K/V page pools: bf16, and FP8 (descales per KV head) when a case asks for it.
struct Pool {
  std::unique_ptr<DeviceBuffer> k, v, k8, v8, descale;
  std::int64_t pages = 0;
};

std::vector<std::string> bench_case(const DecodeBenchOptions& o, const Pool& pool, int batch, int len, int q,
                                    const Generator& gen, bool fp8, double copy_bw) {
  const AttentionShape& s = o.shape;
  bench::WorkloadSpec spec;
  spec.shape = s;
  spec.requests.assign(static_cast<std::size_t>(batch), bench::Request{q, std::max(len, q)});
  spec.page_size = kPage;
  spec.selection = gen.selection;
  spec.clustered_p = gen.replace_p;
  spec.seed = o.seed + static_cast<std::uint64_t>(batch) * 1000003u + static_cast<std::uint64_t>(len) * 31u + q;
  spec.host_values = false;
  const bench::Workload w = bench::make_workload(spec);
  const std::int64_t shared_blocks = std::min<std::int64_t>(o.shared_prefix, std::max(len, q)) / kPage;
  const StepBytes bytes = step_bytes(s, w, q, fp8 ? 1 : 2, shared_blocks);
  const std::int64_t total_q = w.total_q;

  // Rotation: enough sets that one replay's pages are evicted before the set comes back.
  const double l2 = static_cast<double>(bench::device_l2_bytes());
  const int sets = static_cast<int>(std::clamp<double>(std::ceil(2.0 * l2 / std::max(bytes.kv, 1.0)), 1, 64));
  const std::int64_t max_pages = w.page_table.shape()[1];
  std::mt19937_64 rng(spec.seed ^ 0x5bd1e995u);
  std::uniform_int_distribution<std::int64_t> physical(0, pool.pages - 1);
  std::vector<DeviceBuffer> tables, qs, outs;
  const std::size_t q_bytes = static_cast<std::size_t>(total_q) * s.h_q * s.d * 2;
  bench::HostTensor table(DType::kInt32, {batch, max_pages});
  for (int i = 0; i < sets; ++i) {
    auto* t = table.data<std::int32_t>();
    for (std::int64_t j = 0; j < table.numel(); ++j) t[j] = static_cast<std::int32_t>(physical(rng));
    for (std::int64_t b = 1; b < batch; ++b)  // the shared prefix: request 0's pages
      std::copy(t, t + std::min(shared_blocks, max_pages), t + b * max_pages);
    tables.push_back(upload(table));
    qs.emplace_back(q_bytes);
    outs.emplace_back(q_bytes);
    bench::device_fill_normal(qs.back().ptr, q_bytes / 2, false, 0.25f, spec.seed * 7 + i, nullptr);
  }
  const bench::HostTensor topk = bench::query_major_topk(w.topk);  // the MSA decode layout
  const DeviceBuffer d_topk = upload(topk), d_len = upload(w.k_len);
  DeviceBuffer lse(static_cast<std::size_t>(total_q) * s.h_q * 4);

  std::vector<DecodeArgs> args(static_cast<std::size_t>(sets));
  for (int i = 0; i < sets; ++i) {
    DecodeArgs& a = args[i];
    a.q = TensorView::contiguous(qs[i].ptr, DType::kBF16, {total_q, s.h_q, s.d}, Device::kCuda);
    const DType kv = fp8 ? DType::kFP8E4M3 : DType::kBF16;
    a.kv.k = TensorView::contiguous((fp8 ? pool.k8 : pool.k)->ptr, kv, {pool.pages, s.h_kv, kPage, s.d}, Device::kCuda);
    a.kv.v = TensorView::contiguous((fp8 ? pool.v8 : pool.v)->ptr, kv, {pool.pages, s.h_kv, kPage, s.d}, Device::kCuda);
    if (fp8) {
      a.k_descale = TensorView::contiguous(pool.descale->ptr, DType::kFP32, {s.h_kv}, Device::kCuda);
      a.v_descale = a.k_descale;
    }
    a.kv.page_table = on_device(table.view(), tables[i].ptr);
    a.seq_len = on_device(w.k_len.view(), d_len.ptr);
    a.topk = on_device(topk.view(), d_topk.ptr);
    a.q_per_request = q;
    a.out = TensorView::contiguous(outs[i].ptr, DType::kBF16, {total_q, s.h_q, s.d}, Device::kCuda);
    a.lse = TensorView::contiguous(lse.ptr, DType::kFP32, {total_q, s.h_q}, Device::kCuda);
  }
  Options options;
  options.backend = Backend::kCuda;
  SparseDecode op(s, options);
  op.plan(batch, q, std::max(len, q), nullptr);
  check(cudaDeviceSynchronize(), "plan");
  const bench::Timing run = bench::time_graph_replays(
      [&](int set, cudaStream_t st) { op.run(args[set], st); }, sets, o.warmup, o.reps);
  check(cudaDeviceSynchronize(), "run");

  const double sec = run.median_ms * 1e-3;
  const double gbs = bytes.total() / sec;
  return {std::to_string(batch),
          std::to_string(len),
          std::to_string(q),
          gen.name,
          fp8 ? "fp8" : "bf16",
          format("%.1f", bytes.union_blocks),
          format("%.1f", bytes.total() * 1e-6),
          format("%.1f", run.median_ms * 1e3),
          format("%.1f%%", 100.0 * run.cv),
          format("%.1f", run.back_to_back_ms * 1e3),
          format("%.0f", gbs * 1e-9),
          format("%.0f%%", 100.0 * gbs / copy_bw),
          std::to_string(sets)};
}

#endif  // MSA_WITH_CUDA

}  // namespace

int bench_decode_command(const std::vector<std::string>& args) {
  DecodeBenchOptions o = parse(args);
  if (o.help) {
    std::fputs(usage().c_str(), stdout);
    return kExitPass;
  }
#if MSA_WITH_CUDA
  if (!cuda_available()) throw UsageError("msa bench decode: no CUDA device is visible");
  const AttentionShape& s = o.shape;
  const double page_bytes = 2.0 * s.h_kv * kPage * s.d;  // one page of K (or V), bf16
  Pool pool;
  pool.pages = static_cast<std::int64_t>(o.pool_gib * (1 << 30) / (2.0 * page_bytes));
  std::size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  if (2.0 * page_bytes * pool.pages > 0.7 * static_cast<double>(free_bytes))
    throw UsageError("msa bench decode: --pool-gib " + format("%.0f", o.pool_gib) + " needs more than 70% of the " +
                     format("%.1f", free_bytes / double(1 << 30)) + " GiB free on the device");
  const auto pool_elems = static_cast<std::int64_t>(pool.pages * page_bytes / 2);
  pool.k = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(pool_elems) * 2);
  pool.v = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(pool_elems) * 2);
  bench::device_fill_normal(pool.k->ptr, pool_elems, false, 0.25f, o.seed * 3 + 1, nullptr);
  bench::device_fill_normal(pool.v->ptr, pool_elems, false, 0.25f, o.seed * 3 + 2, nullptr);
  if (std::find(o.fp8.begin(), o.fp8.end(), true) != o.fp8.end()) {
    // FP8 codes of N(0, 4^2) values with descale 1/16: K and V of the same spread as bf16's.
    pool.k8 = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(pool_elems));
    pool.v8 = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(pool_elems));
    bench::device_fill_normal_fp8(pool.k8->ptr, pool_elems, 4.f, o.seed * 3 + 3, nullptr);
    bench::device_fill_normal_fp8(pool.v8->ptr, pool_elems, 4.f, o.seed * 3 + 4, nullptr);
    const std::vector<float> factors(static_cast<std::size_t>(s.h_kv), 1.f / 16.f);
    pool.descale = std::make_unique<DeviceBuffer>(factors.size() * sizeof(float));
    check(cudaMemcpy(pool.descale->ptr, factors.data(), factors.size() * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy");
  }
  check(cudaDeviceSynchronize(), "fill");
  const std::size_t copy_bytes = std::min<std::size_t>(std::size_t{1} << 30, static_cast<std::size_t>(pool_elems) * 2);
  const double copy_bw = copy_bandwidth(pool.k->ptr, pool.v->ptr, copy_bytes);
  bench::device_fill_normal(pool.v->ptr, pool_elems, false, 0.25f, o.seed * 3 + 2, nullptr);  // refill V

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("msa bench decode on %s (%d SMs, L2 %d MB): h_q %d, h_kv %d, d %d, topk %d, page %d, bf16 q; "
              "copy bandwidth %.0f GB/s (1 GiB cudaMemcpy, read + write); K/V pool %.1f GiB; median of %d "
              "graph replays after %d warm-up\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, s.h_q, s.h_kv, s.d, s.topk, kPage,
              copy_bw * 1e-9, 2.0 * page_bytes * pool.pages / double(1 << 30), o.reps, o.warmup);
  if (o.shared_prefix >= kPage)
    std::printf("shared prefix: the first %d tokens of every request on request 0's pages\n",
                o.shared_prefix / kPage * kPage);
  Table table({{"B", true}, {"L", true}, {"Q", true}, {"gen"}, {"kv"}, {"union", true}, {"MB", true}, {"us", true},
               {"cv", true}, {"b2b us", true}, {"GB/s", true}, {"% copy", true}, {"sets", true}});
  for (const Generator& gen : o.gens)
    for (const int q : o.qs)
      for (const int batch : o.batches)
        for (const int len : o.lengths)
          for (const bool fp8 : o.fp8) {
            table.add_row(bench_case(o, pool, batch, len, q, gen, fp8, copy_bw));
            std::fprintf(stderr, "  done: B %d L %d Q %d %s %s\n", batch, len, q, gen.name.c_str(), fp8 ? "fp8" : "bf16");
          }
  table.print(stdout);
  std::printf(
      "union = mean blocks per (request, KV head) in the union of its queries' selections; MB = the bytes "
      "a step must read (those blocks' K and V below seq_len, in the kv dtype, a shared prefix's pages once; Q) and "
      "write (out); %% copy = (MB / us) / copy "
      "bandwidth; b2b us = per step when the replays are enqueued back to back (the host ahead, as in an engine's "
      "graph of many layers): us less b2b us is about the graph's submission\n");
  return kExitPass;
#else
  throw UsageError("msa bench decode: this build has no CUDA backend");
#endif
}

}  // namespace msa::tool
