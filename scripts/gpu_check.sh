#!/usr/bin/env bash
# The GPU machine's check: configure, build with all cores, run every test (CUDA ones
# included), run the main job, and print a summary table. Results go to the folder argument
# (default: $OUT or ./gpu_results).
#   --bench      also run `msa bench prefill` (default suite) and dense attention beside it
#   --sanitize   also run the CUDA prefill, decode, planner and top-k tests under compute-sanitizer
#                memcheck and racecheck
# When the Python package is built it also runs python/tests (pytest) and examples/, and with
# --bench scripts/bench_python_overhead.py, scripts/bench_flex.py (msa beside FlexAttention) and
# scripts/bench_growing_prefix.py (a chunked prefill over a growing prefix, eager).
#
# The GPU machine has no network: it needs the pinned CUTLASS wheel and (if GoogleTest is not
# installed there) GoogleTest sources in .cache/, which scripts/prepare_offline.sh fills on a
# machine with network.
set -u -o pipefail
cd "$(dirname "$0")/.."
bench=0 sanitize=0 results=
for arg in "$@"; do
  case "$arg" in
    --bench) bench=1 ;;
    --sanitize) sanitize=1 ;;
    *) results=$arg ;;
  esac
done
results=${results:-${OUT:-gpu_results}}
mkdir -p "$results"
build=build/gpu
jobs=$(nproc)

cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
wheel=$(ls .cache/cutlass/nvidia_cutlass-*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] && cfg+=("-DMSA_CUTLASS_WHEEL=$PWD/$wheel")
[ -d .cache/googletest ] && cfg+=("-DMSA_GTEST_SOURCE_DIR=$PWD/.cache/googletest")

status() { printf '%-28s %s\n' "$1" "$2" | tee -a "$results/summary.txt"; }
: > "$results/summary.txt"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$results/gpu.txt" 2>&1
status "gpu" "$(head -n 1 "$results/gpu.txt")"

t0=$(date +%s)
if cmake -S . -B "$build" "${cfg[@]}" > "$results/configure.log" 2>&1 &&
   cmake --build "$build" -j "$jobs" > "$results/build.log" 2>&1; then
  status "build" "ok ($(( $(date +%s) - t0 )) s, -j$jobs)"
else
  status "build" "FAILED (see build.log)"
  tail -n 40 "$results/build.log" "$results/configure.log"
  exit 1
fi
grep -E "spill|lmem|Used [0-9]+ registers" "$results/build.log" > "$results/ptxas.txt" || true

# The GPU tests' time is mostly their CPU references (OpenMP): half as many ctest jobs as
# cores, two threads each (at -j 4 with a thread per core each, 919 of the 1132 tests took 325 s
# on 16 cores).
ctest_jobs=$(( jobs >= 4 ? jobs / 2 : 1 ))
omp_threads=$(( jobs / ctest_jobs ))
OMP_NUM_THREADS=$omp_threads ctest --test-dir "$build" -j "$ctest_jobs" --output-on-failure > "$results/ctest.log" 2>&1
ctest_rc=$?
status "ctest" "$(grep -E 'tests passed|tests failed' "$results/ctest.log" | tail -n 1) (rc $ctest_rc, -j$ctest_jobs x $omp_threads threads)"
# Tests that skipped themselves (a GPU test without a GPU), from ctest's list: rerunning the
# GoogleTest binary for the count would double the device time.
skipped=$(grep -c '(Skipped)' "$results/ctest.log" || true)
status "ctest skipped" "$skipped"

"$build/msa" run > "$results/msa_run.txt" 2>&1
run_rc=$?
status "msa run" "rc $run_rc: $(tail -n 1 "$results/msa_run.txt")"

# The Python package (staged in $build/python when nanobind was found): its tests with counts
# (the CUDA ones need PyTorch), and the example.
py_rc=0
if [ -d "$build/python/msa" ]; then
  PYTHONPATH="$build/python" python3 -m pytest -q -rs -p no:cacheprovider python/tests > "$results/pytest.log" 2>&1
  py_rc=$?
  status "pytest python/tests" "rc $py_rc: $(tail -n 1 "$results/pytest.log")"
  PYTHONPATH="$build/python" python3 examples/prefill_paged.py > "$results/example.txt" 2>&1
  ex_rc=$?
  [ $ex_rc -ne 0 ] && py_rc=$ex_rc
  status "examples/prefill_paged.py" "rc $ex_rc: $(tail -n 1 "$results/example.txt")"
else
  status "python package" "not built (pip install nanobind)"
fi

if [ $bench -eq 1 ]; then
  [ -d "$build/python/msa" ] && PYTHONPATH="$build/python" python3 scripts/bench_python_overhead.py \
    > "$results/bench_python.txt" 2>&1
  "$build/msa" bench prefill > "$results/bench_prefill.txt" 2>&1
  status "msa bench prefill" "rc $?"
  python3 scripts/bench_dense.py 8192 32768 > "$results/bench_dense.txt" 2>&1
  status "dense (PyTorch SDPA)" "rc $?"
  if [ -d "$build/python/msa" ]; then
    PYTHONPATH="$build/python" python3 scripts/bench_flex.py 8192 32768 > "$results/bench_flex.txt" 2>&1
    status "msa beside FlexAttention" "rc $?"
    PYTHONPATH="$build/python" python3 scripts/bench_growing_prefix.py > "$results/bench_growing_prefix.txt" 2>&1
    status "chunks on a growing prefix" "rc $?"
  fi
fi

if [ $sanitize -eq 1 ]; then
  for tool in memcheck racecheck; do
    timeout 420 compute-sanitizer --tool $tool --error-exitcode 99 "$build/tests/msa_tests" \
      --gtest_filter='*HostileCuda*:*TopkCuda*:*PrefillCuda*page64*:*PrefillCuda*adversarial*:*PrefillKernel*page16*:*PrefillKernel*g6*:*PrefillKernel*g2*:*CombineCuda*:*K2qDeviceBackend*:*K2qDevice.RoutesByTheRule*:*TileRouteCuda*:*PrefillCuda*mixed*auto*:*DecodeCuda*q3_g5_topk1:*DecodeCuda*b2_q16_g2_split:*DecodeCuda*adversarial:*DecodeCuda*fp8_q16_g16_page16_head_major:*DecodeCuda*/q8_g16_page128_random:*DecodeCuda*fp8_b4_q1_split_sinks:*DecodeCuda*b160_q1_unsplit_sinks-*fp16*' \
      > "$results/sanitize_$tool.txt" 2>&1
    status "compute-sanitizer $tool" "rc $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$results/sanitize_$tool.txt" | tail -n 1))"
  done
fi

echo
cat "$results/msa_run.txt"
[ $bench -eq 1 ] && cat "$results/bench_prefill.txt" "$results/bench_dense.txt" "$results/bench_python.txt" \
  "$results/bench_flex.txt" "$results/bench_growing_prefix.txt" 2>/dev/null
echo
grep -E "FAILED|Failure" "$results/ctest.log" | head -n 20
echo "== summary"
cat "$results/summary.txt"
[ $ctest_rc -eq 0 ] && [ $run_rc -eq 0 ] && [ $py_rc -eq 0 ]
