#include "tools/args.h"

#include <charconv>
#include <algorithm>
#include <system_error>

namespace msa::tool {

namespace {

// from_chars into Int with a range check; nullopt-like failure reported through `fail`.
template <class Int, class Fail>
Int parse_number(const std::string& text, Int lo, Int hi, Fail fail) {
  Int v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && ptr == end && (v < lo || v > hi)))
    fail(text, "out of range " + std::to_string(lo) + ".." + std::to_string(hi));
  if (ec != std::errc() || ptr != end || text.empty()) fail("'" + text + "'", "not an integer");
  return v;
}

}  // namespace

bool ArgReader::next_option() {
  if (i_ >= args_.size()) return false;
  name_ = args_[i_++];
  value_.clear();
  has_value_ = false;
  if (const std::size_t eq = name_.find('='); name_.starts_with("--") && eq != std::string::npos) {
    value_ = name_.substr(eq + 1);
    name_.resize(eq);
    has_value_ = true;
  }
  return true;
}

const std::string& ArgReader::value() {
  if (!has_value_) {
    if (i_ >= args_.size()) throw UsageError(command_ + ": " + name_ + " needs a value");
    value_ = args_[i_++];
    has_value_ = true;
  }
  return value_;
}

void ArgReader::no_value() {
  if (has_value_) bad(name_, "'" + value_ + "'", "takes no value");
}

void ArgReader::bad(const std::string& option, const std::string& value, const std::string& why) const {
  throw UsageError(command_ + ": " + option + " " + value + ": " + why);
}

void ArgReader::unknown() const {
  throw UsageError(command_ + ": unknown option '" + name_ + "' (see " + command_ + " --help)");
}

int ArgReader::integer(int lo, int hi) {
  return parse_number<int>(value(), lo, hi,
                           [&](const std::string& v, const std::string& why) { bad(name_, v, why); });
}

std::uint64_t ArgReader::u64() {
  return parse_number<std::uint64_t>(value(), 0, UINT64_MAX,
                                     [&](const std::string& v, const std::string& why) { bad(name_, v, why); });
}

std::vector<std::string> ArgReader::items() {
  const std::string& text = value();
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

std::vector<int> ArgReader::integers(int lo, int hi) {
  std::vector<int> out;
  for (const std::string& item : items())
    out.push_back(parse_number<int>(item, lo, hi, [&](const std::string&, const std::string&) {
      bad(name_, value_, "expected integers in " + std::to_string(lo) + ".." + std::to_string(hi) + ", comma separated");
    }));
  return out;
}

std::vector<bench::Request> ArgReader::requests(int max_tokens) {
  const std::string text = value();
  std::vector<bench::Request> out;
  for (const std::string& item : items()) {
    const std::size_t colon = item.find(':');
    const auto fail = [&](const std::string&, const std::string&) {
      bad(name_, "'" + text + "'",
          "item '" + item + "': expected q_len:k_len, integers with 0 <= q_len <= k_len, 1 <= k_len <= " +
              std::to_string(max_tokens));
    };
    if (colon == std::string::npos) fail("", "");
    bench::Request r;
    r.q_len = parse_number<int>(item.substr(0, colon), 0, max_tokens, fail);
    r.k_len = parse_number<int>(item.substr(colon + 1), 1, max_tokens, fail);
    if (r.k_len < r.q_len)
      bad(name_, "'" + text + "'", "item '" + item + "': k_len must be >= q_len (k_len includes the new tokens)");
    out.push_back(r);
  }
  return out;
}

bench::Selection ArgReader::selection() {
  try {
    return bench::parse_selection(value());
  } catch (const Error&) {
    bad(name_, "'" + value_ + "'", "expected random, tile-shared, clustered or all");
  }
}

int ArgReader::page_size() {
  const int p = integer(0, 128);
  if (p != 0 && p != 16 && p != 32 && p != 64 && p != 128)
    bad(name_, value_, "expected 16, 32, 64, 128 or 0 (flat)");
  return p;
}

PrefillPath ArgReader::prefill_path() {
  const std::string v = value();
  if (v == "auto") return PrefillPath::kAuto;
  if (v == "block-major") return PrefillPath::kBlockMajor;
  if (v == "tile-union") return PrefillPath::kTileUnion;
  bad(name_, "'" + v + "'", "expected auto, block-major or tile-union");
}

bool read_bench_option(ArgReader& r, AttentionShape& shape, std::uint64_t& seed, int& warmup, int& reps,
                       int max_h_kv) {
  const std::string& name = r.name();
  if (name == "--h-q") shape.h_q = r.integer(1, 1024);
  else if (name == "--h-kv") shape.h_kv = r.integer(1, max_h_kv);
  else if (name == "--topk") shape.topk = r.integer(1, 32);
  else if (name == "--seed") seed = r.u64();
  else if (name == "--warmup") warmup = r.integer(0, 1000);
  else if (name == "--reps") reps = r.integer(1, 100000);
  else return false;
  return true;
}

void check_bench_group(const ArgReader& r, const AttentionShape& shape) {
  if (shape.h_q % shape.h_kv != 0 || shape.h_q / shape.h_kv > 16)
    r.bad("--h-q", std::to_string(shape.h_q),
          "must be a multiple of --h-kv " + std::to_string(shape.h_kv) + " with group <= 16");
}

}  // namespace msa::tool
