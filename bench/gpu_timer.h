// Kernel timing on the GPU the way targets.md asks: each input set's launches captured in a
// CUDA graph, warm-up replays, then timed replays cycling through the sets (so that the sets
// together exceed 2x L2 and no replay runs from a warm cache), CUDA events around each replay,
// median and coefficient of variation. Each timed replay starts on an idle stream, so its time
// includes the graph's submission; a second figure times the same number of replays enqueued
// back to back (the host ahead of the GPU, as in an engine's graph of many layers).
#pragma once

#include <cstddef>
#include <functional>

typedef struct CUstream_st* cudaStream_t;

namespace msa::bench {

struct Timing {
  double median_ms = 0.0;
  double mean_ms = 0.0;
  double min_ms = 0.0;
  double cv = 0.0;  // standard deviation / mean
  int reps = 0;
  double back_to_back_ms = 0.0;  // per replay, `reps` replays enqueued between one pair of events
  double host_median_us = 0.0;   // eager calls: median host time of call(stream) itself (its enqueue)
};

// launch(set, stream) enqueues the work of input set `set` (0..sets-1) on `stream`; it is
// captured once per set. Throws msa::Error on any CUDA failure. Without the CUDA backend it
// throws as well.
Timing time_graph_replays(const std::function<void(int set, cudaStream_t stream)>& launch,
                          int sets, int warmup, int reps);

// Eager calls, as an engine makes them: per repetition, `flush_bytes` of `flush` are written (L2
// holds none of the inputs), the stream is drained so the GPU is idle, then CUDA events around
// call(stream). The time therefore includes every gap in which the GPU waited for the host to
// enqueue the call's launches (its host cost, where that is the longer). back_to_back_ms is 0.
Timing time_eager_calls(const std::function<void(cudaStream_t stream)>& call, void* flush,
                        std::size_t flush_bytes, int warmup, int reps);

// The same eager calls, each behind a lead of GPU work: after the flush and the drain, a
// one-thread spin kernel is enqueued before the start event, long enough that the host has
// enqueued the whole call when the GPU reaches it. The time is the call's GPU time without the
// host's gaps (an engine's eager call while the GPU still runs earlier work), with the L2 as
// cold as in time_eager_calls. The lead starts at 1 ms and grows fourfold, the repetition run
// again, whenever the host's enqueue took more than half of it (msa::Error past 1 s).
Timing time_eager_calls_behind_work(const std::function<void(cudaStream_t stream)>& call, void* flush,
                                    std::size_t flush_bytes, int warmup, int reps);

// L2 size of the current device in bytes (0 without CUDA).
long long device_l2_bytes();

}  // namespace msa::bench
