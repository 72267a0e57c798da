// msa: command line entry point. Commands: run (the whole pipeline, verified), bench (GPU timings).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "msa/msa.h"
#include "tools/cli.h"

namespace {

constexpr const char* kUsage =
    "usage: msa <command> [options]\n"
    "\n"
    "commands:\n"
    "  run     indexer -> top-k -> plan -> sparse prefill (+ combine) and a decode step on a\n"
    "          built-in workload, each stage verified against the CPU reference\n"
    "  bench   timed kernels on the GPU: msa bench prefill|decode|layer [--help]\n"
    "\n"
    "options:\n"
    "  -h, --help     this text (msa run --help: the options of run)\n"
    "  --version      library version\n"
    "\n"
    "exit codes: 0 pass, 1 a verification failed, 2 bad usage or a library error\n";

int dispatch(const std::vector<std::string>& args) {
  using namespace msa::tool;
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  const std::string& command = args[0];
  if (command == "-h" || command == "--help" || command == "help") {
    std::fputs(kUsage, stdout);
    return kExitPass;
  }
  if (command == "--version") {
    std::printf("msa %s\n", msa::version_string());
    return kExitPass;
  }
  if (command == "run") {
    const RunOptions options = parse_run_options({args.begin() + 1, args.end()});
    if (options.help) {
      std::fputs(run_usage().c_str(), stdout);
      return kExitPass;
    }
    return run_command(options);
  }
  if (command == "bench") return bench_command({args.begin() + 1, args.end()});
  throw UsageError("msa: unknown command '" + command + "' (see msa --help)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch({argv + 1, argv + argc});
  } catch (const msa::tool::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
  } catch (const msa::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "msa: unexpected error: %s\n", e.what());
  }
  return msa::tool::kExitUsage;
}
