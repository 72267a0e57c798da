#include "bench/gpu_timer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "msa/error.h"

#if MSA_WITH_CUDA
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>

#include "bench/gpu_spin.h"
#endif

namespace msa::bench {

#if MSA_WITH_CUDA
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(what, cudaGetErrorName(e), cudaGetErrorString(e));
}
}  // namespace

long long device_l2_bytes() {
  int dev = 0, l2 = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev), "cudaDeviceGetAttribute");
  return l2;
}

namespace {
// Median, extremes, mean and CV of per-repetition times.
Timing summarise(const std::vector<double>& ms) {
  const int reps = static_cast<int>(ms.size());
  Timing t;
  t.reps = reps;
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  t.median_ms = reps % 2 ? sorted[reps / 2] : 0.5 * (sorted[reps / 2 - 1] + sorted[reps / 2]);
  t.min_ms = sorted.front();
  t.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / reps;
  double var = 0.0;
  for (double x : ms) var += (x - t.mean_ms) * (x - t.mean_ms);
  t.cv = t.mean_ms > 0.0 ? std::sqrt(var / reps) / t.mean_ms : 0.0;
  return t;
}
}  // namespace

Timing time_graph_replays(const std::function<void(int, cudaStream_t)>& launch, int sets,
                          int warmup, int reps) {
  if (sets < 1 || reps < 1 || warmup < 0)
    throw Error("time_graph_replays", std::to_string(sets) + "/" + std::to_string(reps),
                "need sets >= 1, reps >= 1, warmup >= 0");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<cudaGraphExec_t> execs(static_cast<std::size_t>(sets));
  for (int s = 0; s < sets; ++s) {
    cudaGraph_t graph;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    launch(s, stream);
    check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&execs[s], graph, 0), "cudaGraphInstantiate");
    check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  }
  for (int i = 0; i < warmup; ++i) check(cudaGraphLaunch(execs[i % sets], stream), "cudaGraphLaunch");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> ms(static_cast<std::size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    check(cudaGraphLaunch(execs[(warmup + i) % sets], stream), "cudaGraphLaunch");
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0.f;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms[i] = t;
  }
  check(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int i = 0; i < reps; ++i) check(cudaGraphLaunch(execs[(warmup + i) % sets], stream), "cudaGraphLaunch");
  check(cudaEventRecord(stop, stream), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float back_to_back = 0.f;
  check(cudaEventElapsedTime(&back_to_back, start, stop), "cudaEventElapsedTime");
  check(cudaEventDestroy(start), "cudaEventDestroy");
  check(cudaEventDestroy(stop), "cudaEventDestroy");
  for (auto e : execs) check(cudaGraphExecDestroy(e), "cudaGraphExecDestroy");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");

  Timing t = summarise(ms);
  t.back_to_back_ms = back_to_back / reps;
  return t;
}

namespace {
// time_eager_calls (lead_ns 0) and time_eager_calls_behind_work (lead_ns > 0).
Timing eager_loop(const std::function<void(cudaStream_t)>& call, void* flush, std::size_t flush_bytes, int warmup,
                  int reps, std::int64_t lead_ns, const char* what) {
  if (reps < 1 || warmup < 0) throw Error(what, std::to_string(reps), "need reps >= 1, warmup >= 0");
  constexpr std::int64_t kMaxLeadNs = 1'000'000'000;
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> ms(static_cast<std::size_t>(reps));
  std::vector<double> host_us(static_cast<std::size_t>(reps));
  for (int i = 0; i < warmup + reps; ++i) {
    if (flush_bytes > 0) check(cudaMemsetAsync(flush, i & 0xff, flush_bytes, stream), "cudaMemsetAsync");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (lead_ns > 0) check(gpu_spin(lead_ns, stream), "gpu_spin");
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    const auto host0 = std::chrono::steady_clock::now();
    call(stream);
    const auto host_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - host0).count();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    if (lead_ns > 0 && host_ns > lead_ns / 2) {  // the GPU may have waited for the host: again, longer
      lead_ns *= 4;
      if (lead_ns > kMaxLeadNs) throw Error(what, std::to_string(host_ns) + " ns", "the host's enqueue outlasts 1 s");
      --i;
      continue;
    }
    float t = 0.f;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    if (i >= warmup) {
      ms[i - warmup] = t;
      host_us[i - warmup] = 1e-3 * static_cast<double>(host_ns);
    }
  }
  check(cudaEventDestroy(start), "cudaEventDestroy");
  check(cudaEventDestroy(stop), "cudaEventDestroy");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  Timing t = summarise(ms);
  t.host_median_us = summarise(host_us).median_ms;  // the same median, of microseconds
  return t;
}
}  // namespace

Timing time_eager_calls(const std::function<void(cudaStream_t)>& call, void* flush, std::size_t flush_bytes, int warmup,
                        int reps) {
  return eager_loop(call, flush, flush_bytes, warmup, reps, 0, "time_eager_calls");
}

Timing time_eager_calls_behind_work(const std::function<void(cudaStream_t)>& call, void* flush, std::size_t flush_bytes,
                                    int warmup, int reps) {
  return eager_loop(call, flush, flush_bytes, warmup, reps, 1'000'000, "time_eager_calls_behind_work");
}
#else
long long device_l2_bytes() { return 0; }
Timing time_graph_replays(const std::function<void(int, cudaStream_t)>&, int, int, int) {
  throw Error("backend", "cpu", "GPU timing needs the CUDA backend");
}
Timing time_eager_calls(const std::function<void(cudaStream_t)>&, void*, std::size_t, int, int) {
  throw Error("backend", "cpu", "GPU timing needs the CUDA backend");
}
Timing time_eager_calls_behind_work(const std::function<void(cudaStream_t)>&, void*, std::size_t, int, int) {
  throw Error("backend", "cpu", "GPU timing needs the CUDA backend");
}
#endif

}  // namespace msa::bench
