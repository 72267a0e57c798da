#include "tools/memory_estimate.h"

#include <unistd.h>

#if MSA_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/table.h"

namespace msa::tool {

namespace {

constexpr double kUsableShare = 0.9;  // refuse above this share of what is available
constexpr double kD = 128;            // head dim of every workload the tools build
// Host memory of the CUDA runtime and the loaded kernels: the peak RSS of `msa run` and
// `msa bench prefill` on an H100 exceeds their buffers by 110 to 150 MB.
constexpr double kCudaRuntimeHostBytes = 128e6;

double ceil_div(double a, double b) { return std::ceil(a / b); }

// What bench::make_workload builds for a request list, from the sizes alone.
struct Geometry {
  double batch = 0, total_q = 0, total_k = 0, max_k = 0;
  double num_pages = 1, max_pages = 1;  // paged: pages of all requests / of the longest
  double rows = 0;                      // plan rows: sum of ceil(k_len / 128)
  double kv_rows = 1;                   // K/V token slots: num_pages * page_size, or total_k
  double cols = 1;                      // indexer score columns: ceil(max k_len / 128)
};

Geometry geometry(const std::vector<bench::Request>& requests, int page_size) {
  Geometry g;
  g.batch = static_cast<double>(requests.size());
  double pages = 0;
  for (const auto& r : requests) {
    g.total_q += r.q_len;
    g.total_k += r.k_len;
    g.max_k = std::max<double>(g.max_k, r.k_len);
    g.rows += ceil_div(r.k_len, kBlockSize);
    if (page_size > 0) {
      pages += ceil_div(r.k_len, page_size);
      g.max_pages = std::max(g.max_pages, ceil_div(r.k_len, page_size));
    }
  }
  g.num_pages = std::max(pages, 1.0);
  g.kv_rows = page_size > 0 ? g.num_pages * page_size : std::max(g.total_k, 1.0);
  g.cols = std::max(ceil_div(g.max_k, kBlockSize), 1.0);
  return g;
}

// Host tensors of one bench::make_workload (values: q, K/V and the index branch too).
struct WorkloadBytes {
  double q = 0, kv = 0, index = 0, meta = 0, topk = 0;
  double total() const { return q + kv + index + meta + topk; }
};

WorkloadBytes workload_bytes(const Geometry& g, const AttentionShape& s, int page_size, int h_i,
                             bool values) {
  WorkloadBytes w;
  if (values) {
    w.q = g.total_q * s.h_q * kD * 2;
    w.kv = 2 * g.kv_rows * s.h_kv * kD * 2;
    if (h_i > 0) w.index = g.total_q * h_i * kD * 2 + g.kv_rows * kD * 2;
  }
  // cu_seqlens_q, k_len, then the page table or cu_seqlens_k
  w.meta = (2 * g.batch + 1) * 4 + (page_size > 0 ? g.batch * g.max_pages * 4 : (g.batch + 1) * 4);
  w.topk = s.h_kv * g.total_q * s.topk * 4;
  return w;
}

double scores_bytes(const Geometry& g, int h_i) { return h_i * g.total_q * g.cols * 4; }

// Work items of a plan: the k2q capacity bound (a push_back-grown vector may hold up to that).
double work_items(const Geometry& g, const AttentionShape& s, int q_per_item) {
  const int chunk = plan_q_per_item(s, static_cast<std::int64_t>(g.total_q), q_per_item);
  return g.batch * g.cols * s.h_kv + ceil_div(g.total_q * s.topk * s.h_kv, chunk);
}

// One host K2qCsr (spec §2 arrays and the work list).
double plan_bytes(const Geometry& g, const AttentionShape& s, int q_per_item) {
  const double edges = g.total_q * s.topk;
  return g.rows * 2 * 4 + s.h_kv * (g.rows + 1) * 4 + 2 * s.h_kv * edges * 4 + g.total_q * s.h_kv * 4 +
         work_items(g, s, q_per_item) * sizeof(WorkItem);
}

// check_plan's temporaries: a selected-block vector per (head, query) (24 bytes plus a malloc
// chunk for a push_back-grown capacity), the coverage counts and two sorted work lists.
double plan_check_bytes(const Geometry& g, const AttentionShape& s, int q_per_item) {
  double capacity = 1;
  while (capacity < s.topk) capacity *= 2;
  const double chunk = std::max(32.0, std::ceil((capacity * 4 + 8) / 16) * 16);
  return s.h_kv * g.total_q * (24 + chunk) + s.h_kv * g.total_q * s.topk * 4 +
         2 * work_items(g, s, q_per_item) * sizeof(WorkItem);
}

// Output [total_q, h_q, d] in `elem` bytes plus the fp32 lse [total_q, h_q].
double out_bytes(double total_q, const AttentionShape& s, double elem) {
  return total_q * s.h_q * (kD * elem + 4);
}

// check_attention after an attention stage: the fp32 reference out/lse, then either
// bench::compare's two fp32 copies of out (got and ref) or the rerun's second out/lse.
double verify_bytes(double total_q, const AttentionShape& s, double outputs) {
  const double compare = 2 * total_q * s.h_q * kD * 4;
  return out_bytes(total_q, s, 4) + std::max(compare, outputs);
}

double prefill_workspace(const AttentionShape& s, const Geometry& g, const Options& options) {
  const ProblemSize problem{static_cast<std::int64_t>(g.batch), static_cast<std::int64_t>(g.total_q),
                            static_cast<std::int64_t>(g.max_k)};
  return static_cast<double>(SparsePrefill::workspace_bytes(s, problem, options));
}

// The first number of a file, or nullopt (missing, or "max" of cgroup v2).
std::optional<double> read_number(const char* path) {
  std::ifstream in(path);
  double v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

// Reclaimable page cache of the cgroup whose limit file is `limit_path` (its memory.stat).
double inactive_file(const std::string& limit_path) {
  std::ifstream stat(limit_path.substr(0, limit_path.rfind('/')) + "/memory.stat");
  std::string key;
  double v = 0;
  while (stat >> key >> v)
    if (key == "inactive_file" || key == "total_inactive_file") return v;
  return 0;
}

// The options that shrink the items making up at least half of the total, largest first.
std::string hint(std::vector<MemoryItem> items, double total) {
  std::vector<std::string> knobs;
  double covered = 0;
  for (const auto& item : items) {
    if (covered >= 0.5 * total) break;
    covered += item.bytes;
    std::istringstream in(item.knobs);
    for (std::string k; in >> k;)
      if (k != "/" && std::find(knobs.begin(), knobs.end(), k) == knobs.end()) knobs.push_back(k);
  }
  std::string s;
  for (const auto& k : knobs) s += (s.empty() ? "" : " / ") + k;
  return s;
}

std::string breakdown(const std::vector<MemoryItem>& items, double total) {
  std::string s;
  int shown = 0;
  double rest = 0;
  for (const auto& item : items) {
    if (shown < 5 && item.bytes >= 0.01 * total) {
      s += (s.empty() ? "" : ", ") + item.name + " " + format_bytes(item.bytes);
      ++shown;
    } else {
      rest += item.bytes;
    }
  }
  if (rest > 0) s += ", other " + format_bytes(rest);
  return s;
}

void require(const std::string& command, const std::string& what, MemoryNeed need, const char* memory,
             std::optional<double> available, const char* where) {
  if (!available || need.total() <= kUsableShare * *available) return;
  std::stable_sort(need.items.begin(), need.items.end(),
                   [](const MemoryItem& a, const MemoryItem& b) { return a.bytes > b.bytes; });
  const double total = need.total();
  throw UsageError(format("%s: %s needs about %.1f GB of %s memory (%s), %s %.1f GB available; use smaller %s",
                          command.c_str(), what.c_str(), total * 1e-9, memory,
                          breakdown(need.items, total).c_str(), where, *available * 1e-9,
                          hint(need.items, total).c_str()));
}

}  // namespace

double MemoryNeed::total() const {
  double t = 0;
  for (const auto& item : items) t += item.bytes;
  return t;
}

void MemoryNeed::add(std::string name, double bytes, std::string knobs) {
  if (bytes <= 0) return;
  for (auto& item : items)
    if (item.name == name) {
      item.bytes += bytes;
      return;
    }
  items.push_back({std::move(name), bytes, std::move(knobs)});
}

std::string format_bytes(double bytes) {
  if (bytes >= 0.95e9) return format("%.1f GB", bytes * 1e-9);
  if (bytes >= 0.95e6) return format("%.0f MB", bytes * 1e-6);
  return format("%.0f kB", bytes * 1e-3);
}

MemoryEstimate estimate_run_memory(const RunOptions& o, Backend prefill_backend) {
  AttentionShape s;
  s.h_q = o.h_q;
  s.h_kv = o.h_kv;
  s.d = static_cast<int>(kD);
  s.topk = o.topk;
  const Options defaults;  // the Pipeline's operators use the default planner options
  const bool cuda = prefill_backend == Backend::kCuda;
  const Geometry g = geometry(o.requests, o.page_size);
  const WorkloadBytes w = workload_bytes(g, s, o.page_size, o.h_kv, true);

  // Live from the workload on: its tensors and the indexer scores; after plan() also the CPU
  // prefill's scratch (the block-major partials) and its plan.
  MemoryNeed base;
  base.add("q", w.q, "--requests / --h-q");
  base.add("K/V", w.kv, "--requests / --h-kv");
  base.add("indexer scores", scores_bytes(g, o.h_kv), "--requests / --h-kv");
  base.add("index q/k", w.index, "--requests / --h-kv");
  base.add("top-k", w.topk + w.meta, "--requests / --h-kv / --topk");
  if (!cuda) {
    Options cpu = defaults;
    cpu.backend = Backend::kCpu;
    base.add("prefill partials", prefill_workspace(s, g, cpu), "--requests / --h-q / --topk");
    base.add("plan", plan_bytes(g, s, defaults.q_per_item), "--requests / --h-kv / --topk");
  }

  // Then the largest of the stages' own buffers.
  MemoryNeed plan_stage;  // the plan snapshot, the host oracle and check_plan's temporaries
  plan_stage.add("plan", plan_bytes(g, s, defaults.q_per_item) * (o.verify ? 2 : 1),
                 "--requests / --h-kv / --topk");
  if (o.verify) plan_stage.add("plan", plan_check_bytes(g, s, defaults.q_per_item), "");

  const double outputs = out_bytes(g.total_q, s, 2);
  // out/lse, then the larger of the host zeros that DeviceWorkload uploads as the device
  // out/lse (CUDA) and the reference outputs with check_attention's copies (verify).
  MemoryNeed prefill_stage;
  prefill_stage.add("out/lse", outputs, "--requests / --h-q");
  const double upload = cuda ? outputs : 0, verify = o.verify ? verify_bytes(g.total_q, s, outputs) : 0;
  if (upload > verify) prefill_stage.add("out/lse", upload, "--requests / --h-q");
  else prefill_stage.add("reference outputs + check", verify, "--requests / --h-q / --no-verify");

  MemoryNeed decode_stage;  // out/lse stay; the decode workload and its buffers come
  decode_stage.add("out/lse", outputs, "--requests / --h-q");
  {
    const std::vector<bench::Request> requests = decode_requests(o);
    const Geometry dg = geometry(requests, o.page_size);
    const WorkloadBytes dw = workload_bytes(dg, s, o.page_size, o.h_kv, true);
    // Indexer scores and the re-made top-k first; then the query-major top-k, the outputs and
    // their references.
    const double select = o.selection ? 0 : scores_bytes(dg, o.h_kv) + dw.topk;
    const double d_out = out_bytes(dg.total_q, s, 2);
    const double attend = dw.topk + d_out + (o.verify ? verify_bytes(dg.total_q, s, d_out) : 0);
    decode_stage.add("decode", dw.total() + std::max(select, attend), "--decode-batch / --decode-len / --decode-q");
  }

  const MemoryNeed* peak = &plan_stage;
  for (const MemoryNeed* stage : {&prefill_stage, &decode_stage})
    if (stage->total() > peak->total()) peak = stage;
  MemoryEstimate e;
  e.host = base;
  for (const auto& item : peak->items) e.host.add(item.name, item.bytes, item.knobs);

  if (cuda) {  // the whole workload is uploaded up front; plan() sizes the workspace
    e.host.add("CUDA runtime", kCudaRuntimeHostBytes, "");
    Options opt = defaults;
    opt.backend = Backend::kCuda;
    e.device.add("prefill workspace", prefill_workspace(s, g, opt), "--requests / --h-q / --topk");
    e.device.add("q", w.q, "--requests / --h-q");
    e.device.add("K/V", w.kv, "--requests / --h-kv");
    e.device.add("index q/k", w.index, "--requests / --h-kv");
    e.device.add("indexer scores", scores_bytes(g, o.h_kv), "--requests / --h-kv");
    e.device.add("top-k", w.topk + w.meta, "--requests / --h-kv / --topk");
    e.device.add("out/lse", outputs, "--requests / --h-q");
    // The decode step's own device copy, made while the prefill's is still held.
    const Geometry dg = geometry(decode_requests(o), o.page_size);
    const WorkloadBytes dw = workload_bytes(dg, s, o.page_size, o.h_kv, true);
    e.device.add("decode", dw.total() + scores_bytes(dg, o.h_kv) + out_bytes(dg.total_q, s, 2),
                 "--decode-batch / --decode-len / --decode-q");
  }
  return e;
}

MemoryEstimate estimate_bench_prefill_memory(const AttentionShape& shape, int page_size,
                                             const std::vector<bench::Request>& requests,
                                             const Options& options, int sets) {
  const Geometry g = geometry(requests, page_size);
  const WorkloadBytes w = workload_bytes(g, shape, page_size, 0, /*values=*/false);
  MemoryEstimate e;
  e.host.add("top-k", w.topk + w.meta, "--seq / --requests / --h-kv / --topk");
  e.host.add("CUDA runtime", kCudaRuntimeHostBytes, "");
  const double q = g.total_q * shape.h_q * kD * 2;
  const double kv = 2 * g.kv_rows * shape.h_kv * kD * 2;
  e.device.add("prefill workspace", prefill_workspace(shape, g, options), "--seq / --requests / --h-q / --topk");
  e.device.add("q", sets * q, "--seq / --requests / --h-q");
  e.device.add("K/V", sets * kv, "--seq / --requests / --h-kv");
  e.device.add("out/lse", sets * q + g.total_q * shape.h_q * 4, "--seq / --requests / --h-q");
  e.device.add("top-k", w.topk + w.meta, "--seq / --requests / --h-kv / --topk");
  return e;
}

std::optional<double> host_available_bytes() {
  std::optional<double> available;
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    double kb = 0;
    std::string unit;
    while (meminfo >> key >> kb >> unit)
      if (key == "MemAvailable:") {
        available = kb * 1024;
        break;
      }
  }
  if (!available) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) available = static_cast<double>(pages) * static_cast<double>(page);
  }
  // A container's memory limit (cgroup v2, then v1) bounds what the process may use.
  for (const auto& [limit_path, usage_path] :
       {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        std::pair{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const std::optional<double> limit = read_number(limit_path), usage = read_number(usage_path);
    if (!limit || !usage || *limit >= 1e18) continue;  // unlimited v1 reads 2^63 - page
    // The usage counts page cache; its inactive part is reclaimed before the OOM killer acts.
    const double left = std::max(*limit - *usage + inactive_file(limit_path), 0.0);
    available = available ? std::min(*available, left) : left;
    break;
  }
  return available;
}

std::optional<double> device_available_bytes() {
#if MSA_WITH_CUDA
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return static_cast<double>(free_bytes);
#else
  return std::nullopt;
#endif
}

void require_memory(const std::string& command, const MemoryEstimate& estimate, const std::string& what) {
  require(command, what, estimate.host, "host", host_available_bytes(), "this machine has");
  if (!estimate.device.items.empty())
    require(command, what, estimate.device, "device", device_available_bytes(), "the GPU has");
}

}  // namespace msa::tool
