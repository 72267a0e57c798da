// Memory that `msa run` and `msa bench prefill` will allocate, estimated from their options
// alone before anything big is allocated, and the up-front check against what is available:
// a workload that cannot fit is a usage error naming its size, not a std::bad_alloc (or the
// OOM killer) minutes later.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "msa/msa.h"
#include "tools/cli.h"

namespace msa::tool {

// One group of buffers live at the peak; knobs: the options that shrink it ("--requests / --h-q").
struct MemoryItem {
  std::string name;
  double bytes = 0;
  std::string knobs;
};

// Buffers live together at the peak of one memory (host or device), in bytes (double: sizes
// from the largest options overflow nothing).
struct MemoryNeed {
  std::vector<MemoryItem> items;
  double total() const;
  void add(std::string name, double bytes, std::string knobs);
};

struct MemoryEstimate {
  MemoryNeed host;
  MemoryNeed device;  // empty when no stage runs on CUDA
};

// `msa run` with the prefill (and plan) on `prefill_backend`: the host peak is the prefill
// workload, the indexer scores, the prefill's CPU scratch and plan, then the largest of the
// plan check, the prefill outputs with their references and the decode step; the device peak
// is SparsePrefill::workspace_bytes plus the device copies of the workload.
MemoryEstimate estimate_run_memory(const RunOptions& options, Backend prefill_backend);

// One case of `msa bench prefill`: host metadata (no Q/K/V on the host), device Q/K/V/out in
// `sets` rotated copies, the staged batch and top-k, and the workspace.
MemoryEstimate estimate_bench_prefill_memory(const AttentionShape& shape, int page_size,
                                             const std::vector<bench::Request>& requests,
                                             const Options& options, int sets);

// Bytes the process can still allocate: MemAvailable of /proc/meminfo (else the free physical
// pages), capped by a cgroup memory limit when one is set.
std::optional<double> host_available_bytes();
// Free memory of the current CUDA device (cudaMemGetInfo); nullopt without a CUDA build or device.
std::optional<double> device_available_bytes();

// A UsageError "<command>: this workload needs about 61.2 GB of host memory (q 16.0 GB, ...),
// this machine has 23.4 GB available; use smaller --requests / --h-q" when either estimate
// exceeds 90% of what is available. `what` replaces "this workload" (e.g. "case 'random S=8k'").
void require_memory(const std::string& command, const MemoryEstimate& estimate,
                    const std::string& what = "this workload");

// "61.2 GB", "450 MB": decimal units, as the message prints them.
std::string format_bytes(double bytes);

}  // namespace msa::tool
