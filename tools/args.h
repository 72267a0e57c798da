// Command-line reading shared by the msa commands: one-line UsageErrors that name the command,
// the option and the value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "tools/cli.h"

namespace msa::tool {

// Walks `--name value` / `--name=value` arguments of one command.
class ArgReader {
 public:
  ArgReader(std::string command, std::vector<std::string> args)
      : command_(std::move(command)), args_(std::move(args)) {}

  // Advances to the next option; false at the end. name() is then e.g. "--seed".
  bool next_option();
  const std::string& name() const { return name_; }
  // The option's value (the `=` part or the next argument); a UsageError when missing.
  const std::string& value();
  // For options without a value: a UsageError when one was given with `=`.
  void no_value();

  [[noreturn]] void bad(const std::string& option, const std::string& value,
                        const std::string& why) const;
  [[noreturn]] void unknown() const;

  int integer(int lo, int hi);  // value() as an int in [lo, hi]
  // value() split at its commas (empty items kept: the caller rejects them).
  std::vector<std::string> items();
  // "a,b,...": each an int in [lo, hi].
  std::vector<int> integers(int lo, int hi);
  std::uint64_t u64();
  // "q:k,q:k,...": q_len new tokens of a request whose final KV length is k.
  std::vector<bench::Request> requests(int max_tokens);
  bench::Selection selection();
  int page_size();  // 16, 32, 64, 128 or 0 (flat)
  PrefillPath prefill_path();  // auto, block-major or tile-union

 private:
  std::string command_;
  std::vector<std::string> args_;
  std::size_t i_ = 0;
  std::string name_, value_;
  bool has_value_ = false;
};

// The options every msa bench command shares: --h-q, --h-kv (at most max_h_kv), --topk, --seed,
// --warmup, --reps. Takes the reader's current option into the fields when it is one of them and
// returns true; false otherwise.
bool read_bench_option(ArgReader& r, AttentionShape& shape, std::uint64_t& seed, int& warmup, int& reps,
                       int max_h_kv = 1024);
// The GQA group the kernels take: h_q a multiple of h_kv, h_q / h_kv <= 16 (a UsageError naming
// --h-q otherwise).
void check_bench_group(const ArgReader& r, const AttentionShape& shape);

}  // namespace msa::tool
