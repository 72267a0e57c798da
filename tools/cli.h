// The msa command: options of `msa run`, the parser and the commands.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "msa/options.h"

namespace msa::tool {

// Exit codes: verification passed, a check failed, bad usage or an msa::Error.
inline constexpr int kExitPass = 0;
inline constexpr int kExitFail = 1;
inline constexpr int kExitUsage = 2;

// A bad command line; what() is the one line printed on stderr.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class BackendChoice { kAuto, kCpu, kCuda };

// `msa run` defaults: chunked prefill with prefixes that are not multiples of 128 and a
// single-token request, sized so that the CPU pipeline plus its verification takes a few
// seconds on two cores.
struct RunOptions {
  BackendChoice backend = BackendChoice::kAuto;
  std::uint64_t seed = 1;
  int h_q = 16;
  int h_kv = 2;
  int topk = 8;
  int page_size = 64;                          // 0 = flat varlen K/V
  bool sinks = false;                          // sinks [h_q] (spec §6) in prefill and decode
  PrefillPath prefill_path = PrefillPath::kAuto;
  std::optional<bench::Selection> selection;  // set: top-k rows come from this generator
  std::vector<bench::Request> requests{{640, 2000}, {384, 384}, {1, 1500}, {900, 1100}};
  int decode_batch = 4;
  int decode_q = 8;
  int decode_len = 2500;  // longest seq_len of the decode batch
  bool decode_fp8 = false;  // FP8 E4M3 K/V (with descale factors) in the decode step
  int threads = 0;        // 0: the OpenMP default
  bool verify = true;
  bool help = false;
};

// Parses the arguments after `run`; throws UsageError naming the option and the value.
RunOptions parse_run_options(const std::vector<std::string>& args);
std::string run_usage();  // `msa run --help`, with the defaults
// The decode step's requests: seq_len from --decode-len (the first) down to about half.
std::vector<bench::Request> decode_requests(const RunOptions& options);

// The whole pipeline on the workload; returns the exit code.
int run_command(const RunOptions& options);

// `msa bench <benchmark> [options]` (tools/bench.cpp); returns the exit code.
int bench_command(const std::vector<std::string>& args);
// `msa bench decode` (tools/bench_decode.cpp) and `msa bench layer` (tools/bench_layer.cpp),
// reached through bench_command.
int bench_decode_command(const std::vector<std::string>& args);
int bench_layer_command(const std::vector<std::string>& args);
// The chunked batch of targets.md (8 requests of mixed chunks on long prefixes) that msa bench
// prefill and msa bench layer both time.
std::vector<bench::Request> bench_chunked_batch();

}  // namespace msa::tool
