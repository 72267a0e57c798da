// `msa run` options: parsing with one-line errors that name the option and the value.
#include <algorithm>
#include <string>

#include "tools/args.h"
#include "tools/cli.h"

namespace msa::tool {

namespace {

// Keeps the CPU reference (and qsplit's 24-bit query index) far from overflow.
constexpr int kMaxTokens = 1 << 20;

}  // namespace

std::vector<bench::Request> decode_requests(const RunOptions& o) {
  std::vector<bench::Request> requests;
  for (int b = 0; b < o.decode_batch; ++b)
    requests.push_back({o.decode_q, std::max(o.decode_q, o.decode_len - b * o.decode_len / (2 * o.decode_batch))});
  return requests;
}

std::string run_usage() {
  const RunOptions d;
  std::string requests;
  for (const auto& r : d.requests) {
    if (!requests.empty()) requests += ',';
    requests += std::to_string(r.q_len) + ':' + std::to_string(r.k_len);
  }
  return "usage: msa run [options]\n"
         "\n"
         "Runs indexer -> top-k -> plan -> sparse prefill (+ combine) on a packed batch of\n"
         "chunked-prefill requests, then a decode step (indexer and top-k on the decode queries,\n"
         "then sparse decode), verifies every stage against the CPU reference and prints a table.\n"
         "d is 128, index heads = h_kv.\n"
         "\n"
         "options (default in brackets):\n"
         "  --backend auto|cpu|cuda  per stage; auto: cuda where a GPU is visible and the CUDA\n"
         "                           backend implements the stage, else cpu [auto]\n"
         "  --seed N                 workload seed [" + std::to_string(d.seed) + "]\n"
         "  --h-q N                  query heads, a multiple of h_kv, group <= 16 [" + std::to_string(d.h_q) + "]\n"
         "  --h-kv N                 KV heads (= index heads) [" + std::to_string(d.h_kv) + "]\n"
         "  --topk N                 selected blocks per row, 1..32 [" + std::to_string(d.topk) + "]\n"
         "  --page-size N            16, 32, 64, 128, or 0 = flat varlen K/V [" + std::to_string(d.page_size) + "]\n"
         "  --sinks                  attention sinks [h_q] in the prefill and the decode\n"
         "  --prefill-path NAME      auto|block-major|tile-union: the CUDA prefill's kernels\n"
         "                           (Options::prefill_path) [auto]\n"
         "  --selection NAME         random|tile-shared|clustered|all: top-k rows from this\n"
         "                           generator instead of the indexer [indexer + top-k]\n"
         "  --requests q:k,...       prefill batch: q_len new tokens, k_len final length\n"
         "                           [" + requests + "]\n"
         "  --decode-batch N         decode requests B, 1..1024 [" + std::to_string(d.decode_batch) + "]\n"
         "  --decode-q N             queries per decode request Q, 1..16 [" + std::to_string(d.decode_q) + "]\n"
         "  --decode-len N           longest decode seq_len; the others spread down to about\n"
         "                           half [" + std::to_string(d.decode_len) + "]\n"
         "  --decode-kv NAME         bf16|fp8: the decode step's K/V cache, fp8 = E4M3 codes\n"
         "                           with descale factors per KV head (K) and per tensor (V)\n"
         "                           [bf16]\n"
         "  --threads N              OpenMP threads [OpenMP default]\n"
         "  --no-verify              time only, skip every check\n"
         "  -h, --help               this text\n";
}

RunOptions parse_run_options(const std::vector<std::string>& args) {
  RunOptions o;
  ArgReader r("msa run", args);
  while (r.next_option()) {
    const std::string& name = r.name();
    if (name == "-h" || name == "--help") r.no_value(), o.help = true;
    else if (name == "--no-verify") r.no_value(), o.verify = false;
    else if (name == "--backend") {
      const std::string& v = r.value();
      if (v == "auto") o.backend = BackendChoice::kAuto;
      else if (v == "cpu") o.backend = BackendChoice::kCpu;
      else if (v == "cuda") o.backend = BackendChoice::kCuda;
      else r.bad(name, "'" + v + "'", "expected auto, cpu or cuda");
    } else if (name == "--seed") o.seed = r.u64();
    else if (name == "--h-q") o.h_q = r.integer(1, 1024);
    else if (name == "--h-kv") o.h_kv = r.integer(1, 1024);
    else if (name == "--topk") o.topk = r.integer(1, 32);
    else if (name == "--page-size") o.page_size = r.page_size();
    else if (name == "--selection") o.selection = r.selection();
    else if (name == "--sinks") r.no_value(), o.sinks = true;
    else if (name == "--prefill-path") o.prefill_path = r.prefill_path();
    else if (name == "--requests") o.requests = r.requests(kMaxTokens);
    else if (name == "--decode-batch") o.decode_batch = r.integer(1, 1024);
    else if (name == "--decode-q") o.decode_q = r.integer(1, 16);
    else if (name == "--decode-len") o.decode_len = r.integer(1, kMaxTokens);
    else if (name == "--decode-kv") {
      const std::string v = r.value();
      if (v == "bf16" || v == "fp8") o.decode_fp8 = v == "fp8";
      else r.bad(name, "'" + v + "'", "expected bf16 or fp8");
    } else if (name == "--threads") o.threads = r.integer(1, 1024);
    else r.unknown();
  }
  if (o.h_q % o.h_kv != 0)
    r.bad("--h-q", std::to_string(o.h_q), "must be a multiple of --h-kv " + std::to_string(o.h_kv));
  if (o.h_q / o.h_kv > 16)
    r.bad("--h-q", std::to_string(o.h_q), "group h_q / h_kv = " + std::to_string(o.h_q / o.h_kv) +
                                              " exceeds 16 (--h-kv " + std::to_string(o.h_kv) + ")");
  if (o.decode_len < o.decode_q)
    r.bad("--decode-len", std::to_string(o.decode_len),
          "must be >= --decode-q " + std::to_string(o.decode_q));
  return o;
}

}  // namespace msa::tool
