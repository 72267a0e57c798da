// `msa run` options: parsing with one-line errors that name the option and the value.
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include "tools/cli.h"

namespace msa::tool {

namespace {

[[noreturn]] void bad(const std::string& option, const std::string& value, const std::string& why) {
  throw UsageError("msa run: " + option + " " + value + ": " + why);
}

template <class Int>
Int parse_number(const std::string& option, const std::string& text, Int lo, Int hi) {
  Int v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && ptr == end && (v < lo || v > hi)))
    bad(option, text, "out of range " + std::to_string(lo) + ".." + std::to_string(hi));
  if (ec != std::errc() || ptr != end || text.empty()) bad(option, "'" + text + "'", "not an integer");
  return v;
}

int parse_int(const std::string& option, const std::string& text, int lo, int hi) {
  return parse_number<int>(option, text, lo, hi);
}

// Keeps the CPU reference (and qsplit's 24-bit query index) far from overflow.
constexpr int kMaxTokens = 1 << 20;

// "q:k,q:k,...": q_len new tokens of a request whose final KV length is k.
std::vector<bench::Request> parse_requests(const std::string& option, const std::string& text) {
  std::vector<bench::Request> requests;
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string item(rest.substr(0, comma));
    const std::size_t colon = item.find(':');
    bench::Request r;
    try {
      if (colon == std::string::npos) throw UsageError("");
      r.q_len = parse_int(option, item.substr(0, colon), 0, kMaxTokens);
      r.k_len = parse_int(option, item.substr(colon + 1), 1, kMaxTokens);
    } catch (const UsageError&) {
      bad(option, "'" + text + "'",
          "item '" + item + "': expected q_len:k_len, integers with 0 <= q_len <= k_len, 1 <= k_len <= " +
              std::to_string(kMaxTokens));
    }
    if (r.k_len < r.q_len)
      bad(option, "'" + text + "'", "item '" + item + "': k_len must be >= q_len (k_len includes the new tokens)");
    requests.push_back(r);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return requests;
}

BackendChoice parse_backend(const std::string& option, const std::string& text) {
  if (text == "auto") return BackendChoice::kAuto;
  if (text == "cpu") return BackendChoice::kCpu;
  if (text == "cuda") return BackendChoice::kCuda;
  bad(option, "'" + text + "'", "expected auto, cpu or cuda");
}

}  // namespace

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
         "  --backend auto|cpu|cuda  per stage; auto: cuda where a GPU is visible, the CUDA\n"
         "                           backend implements the stage and msa run can stage its\n"
         "                           device buffers (no stage yet), else cpu [auto]\n"
         "  --seed N                 workload seed [" + std::to_string(d.seed) + "]\n"
         "  --h-q N                  query heads, a multiple of h_kv, group <= 16 [" + std::to_string(d.h_q) + "]\n"
         "  --h-kv N                 KV heads (= index heads) [" + std::to_string(d.h_kv) + "]\n"
         "  --topk N                 selected blocks per row, 1..32 [" + std::to_string(d.topk) + "]\n"
         "  --page-size N            16, 32, 64, 128, or 0 = flat varlen K/V [" + std::to_string(d.page_size) + "]\n"
         "  --selection NAME         random|tile-shared|clustered|all: top-k rows from this\n"
         "                           generator instead of the indexer [indexer + top-k]\n"
         "  --requests q:k,...       prefill batch: q_len new tokens, k_len final length\n"
         "                           [" + requests + "]\n"
         "  --decode-batch N         decode requests B, 1..1024 [" + std::to_string(d.decode_batch) + "]\n"
         "  --decode-q N             queries per decode request Q, 1..16 [" + std::to_string(d.decode_q) + "]\n"
         "  --decode-len N           longest decode seq_len; the others spread down to about\n"
         "                           half [" + std::to_string(d.decode_len) + "]\n"
         "  --threads N              OpenMP threads [OpenMP default]\n"
         "  --no-verify              time only, skip every check\n"
         "  -h, --help               this text\n";
}

RunOptions parse_run_options(const std::vector<std::string>& args) {
  RunOptions o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    bool has_value = false;
    if (const std::size_t eq = name.find('='); name.starts_with("--") && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    if (name == "-h" || name == "--help" || name == "--no-verify") {
      if (has_value) bad(name, "'" + value + "'", "takes no value");
      if (name == "--no-verify") o.verify = false;
      else o.help = true;
      continue;
    }
    const auto next = [&]() -> const std::string& {
      if (!has_value) {
        if (i + 1 >= args.size()) throw UsageError("msa run: " + name + " needs a value");
        value = args[++i];
      }
      return value;
    };
    if (name == "--backend") o.backend = parse_backend(name, next());
    else if (name == "--seed") o.seed = parse_number<std::uint64_t>(name, next(), 0, UINT64_MAX);
    else if (name == "--h-q") o.h_q = parse_int(name, next(), 1, 1024);
    else if (name == "--h-kv") o.h_kv = parse_int(name, next(), 1, 1024);
    else if (name == "--topk") o.topk = parse_int(name, next(), 1, 32);
    else if (name == "--page-size") {
      o.page_size = parse_int(name, next(), 0, 128);
      if (o.page_size != 0 && o.page_size != 16 && o.page_size != 32 && o.page_size != 64 && o.page_size != 128)
        bad(name, value, "expected 16, 32, 64, 128 or 0 (flat)");
    } else if (name == "--selection") {
      try {
        o.selection = bench::parse_selection(next());
      } catch (const Error&) {
        bad(name, "'" + value + "'", "expected random, tile-shared, clustered or all");
      }
    } else if (name == "--requests") o.requests = parse_requests(name, next());
    else if (name == "--decode-batch") o.decode_batch = parse_int(name, next(), 1, 1024);
    else if (name == "--decode-q") o.decode_q = parse_int(name, next(), 1, 16);
    else if (name == "--decode-len") o.decode_len = parse_int(name, next(), 1, kMaxTokens);
    else if (name == "--threads") o.threads = parse_int(name, next(), 1, 1024);
    else throw UsageError("msa run: unknown option '" + name + "' (see msa run --help)");
  }
  if (o.h_q % o.h_kv != 0)
    bad("--h-q", std::to_string(o.h_q), "must be a multiple of --h-kv " + std::to_string(o.h_kv));
  if (o.h_q / o.h_kv > 16)
    bad("--h-q", std::to_string(o.h_q), "group h_q / h_kv = " + std::to_string(o.h_q / o.h_kv) +
                                            " exceeds 16 (--h-kv " + std::to_string(o.h_kv) + ")");
  if (o.decode_len < o.decode_q)
    bad("--decode-len", std::to_string(o.decode_len),
        "must be >= --decode-q " + std::to_string(o.decode_q));
  return o;
}

}  // namespace msa::tool
