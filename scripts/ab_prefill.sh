#!/usr/bin/env bash
# Kernel variants side by side on the GPU machine, in one call: the trees are packed here (the
# GPU machine's copy of the checkout has no git history), built there in parallel, tested, and
# timed with `msa bench prefill` in alternating rounds; a table of run ms comes last.
#
#   scripts/ab_prefill.sh pack DIR REF...    here: `git archive` of each ref to DIR/<n>_<ref>.tar
#                                            (n orders the columns; the first is the reference)
#   scripts/ab_prefill.sh run DIR [--tests FILTER] [--rounds N] [--cases FILE] [--dense "S ..."]
#                                            on the GPU machine, with DIR and .cache carried
#
# --tests runs `msa_tests --gtest_filter=FILTER` on every tree but the first (the CPU-reference
# prefill suites take about 30 s: '*Prefill*:*Hostile*'; the decode ones take minutes). --cases
# names a file of `msa bench prefill` argument lines (after --warmup 2 --reps 5 --h-q 64); the
# default is the set that moves with the prefill kernels' consumers. --dense runs
# scripts/bench_dense.py (cuDNN) at those lengths after the rounds: a reference only, timed at
# another clock than the rounds (the power cap, docs/performance.md step 94; a ratio against
# cuDNN at one clock is scripts/bench_dense_beside.py's). Builds are BF16-only, no Python.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
mode=${1:-}
dir=${2:-}
if [ -z "$mode" ] || [ -z "$dir" ]; then sed -n 2,17p "$0"; exit 2; fi
shift 2

if [ "$mode" = pack ]; then
  mkdir -p "$dir"
  n=0
  for ref in "$@"; do
    name="${n}_$(echo "$ref" | tr '/:' '__')"
    git archive --format=tar "$ref" > "$dir/$name.tar" || exit 1
    echo "$dir/$name.tar <- $(git rev-parse --short "$ref")"
    n=$((n + 1))
  done
  exit 0
fi
[ "$mode" = run ] || { echo "ab_prefill: mode is pack or run, not '$mode'" >&2; exit 2; }

tests='' rounds=2 cases='' dense=''
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) tests=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --dense) dense=$2; shift 2 ;;
    *) echo "ab_prefill: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
default_cases="--h-kv 64 --seq 2048 --seq 4096 --seq 8192
--h-kv 32 --seq 2048 --seq 4096 --seq 8192
--h-kv 4 --seq 8192 --path tile-union
--h-kv 4 --seq 8192 --seq 32768
--h-kv 4 --seq 8192 --selection tile-shared"
if [ -n "$cases" ]; then case_lines=$(cat "$cases"); else case_lines=$default_cases; fi

root=$PWD
wheel=$(find "$root/.cache/cutlass" -name 'nvidia_cutlass-*.whl' 2>/dev/null | head -n 1)
[ -n "$wheel" ] || { echo "ab_prefill: no CUTLASS wheel in .cache/cutlass (scripts/prepare_offline.sh)" >&2; exit 1; }
trees=()
while IFS= read -r tar; do trees+=("$(basename "$tar" .tar)"); done < <(find "$dir" -maxdepth 1 -name '*.tar' | sort)
[ ${#trees[@]} -gt 0 ] || { echo "ab_prefill: no trees in $dir" >&2; exit 1; }
work=/tmp/ab_prefill
jobs=$(( $(nproc) / ${#trees[@]} ))
[ $jobs -lt 2 ] && jobs=2

t0=$(date +%s)
build() {
  local name=$1 with_tests=OFF
  local targets=(msa_cli)
  if [ -n "$tests" ] && [ "$name" != "${trees[0]}" ]; then with_tests=ON; targets+=(msa_tests); fi
  rm -rf "${work:?}/$name" && mkdir -p "$work/$name" && tar -xf "$dir/$name.tar" -C "$work/$name" &&
    (cd "$work/$name" &&
       cmake --preset dev -DMSA_CUTLASS_WHEEL="$wheel" -DMSA_BUILD_TESTS=$with_tests \
         -DMSA_GTEST_SOURCE_DIR="$root/.cache/googletest" -DMSA_BUILD_PYTHON=OFF -DMSA_CUDA_DTYPES=bf16 \
         > "$work/$name.configure.log" 2>&1 &&
       cmake --build build/dev -j "$jobs" --target "${targets[@]}" > "$work/$name.build.log" 2>&1)
  echo "build $name rc $?"
}
for name in "${trees[@]}"; do build "$name" & done
wait
echo "builds $(( $(date +%s) - t0 )) s"

if [ -n "$tests" ]; then
  for name in "${trees[@]:1}"; do
    "$work/$name/build/dev/tests/msa_tests" --gtest_filter="$tests" > "$work/$name.tests.log" 2>&1
    echo "tests $name rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$work/$name.tests.log" | tr '\n' ' ')"
    grep -B2 -A8 "Failure" "$work/$name.tests.log" | head -n 30
  done
fi

# One line per (round, tree, case, selection row): the bench's own row label and its run ms.
results=$work/results.txt
: > "$results"
for round in $(seq 1 "$rounds"); do
  for name in "${trees[@]}"; do
    c=0
    while IFS= read -r line; do
      [ -z "$line" ] && continue
      # shellcheck disable=SC2086
      "$work/$name/build/dev/msa" bench prefill --warmup 2 --reps 5 --h-q 64 $line < /dev/null 2>&1 |
        awk -v r="$round" -v t="$name" -v c="$c" -v a="$line" \
          '/^(random|tile-shared|clustered) /{n=NF; print r "\t" t "\t" c "\t" a "\t" $1 " " $2 " " $3 "\t" $(n-12)}' >> "$results"
      c=$((c + 1))
    done <<< "$case_lines"
  done
done
# shellcheck disable=SC2086
[ -n "$dense" ] && python3 scripts/bench_dense.py $dense | grep cudnn

python3 - "$results" "${trees[@]}" <<'EOF'
import collections, sys
path, trees = sys.argv[1], sys.argv[2:]
runs = collections.defaultdict(list)
order = []
for line in open(path):
    r, t, c, args, row, ms = line.rstrip("\n").split("\t")
    key = (int(c), args, row)
    if key not in order:
        order.append(key)
    runs[key, t].append(ms)
print("run ms, rounds separated by /; columns: " + ", ".join(trees))
for key in order:  # first seen in round 1, tree 1: case by case, rows as the bench printed them
    cells = [" / ".join(runs[key, t]) or "-" for t in trees]
    print(f"{key[1]:<46} {key[2]:<28} " + " | ".join(cells))
EOF
