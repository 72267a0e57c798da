#!/usr/bin/env bash
# `msa bench prefill` (default suite) of another commit and of this tree, built side by side on
# this GPU machine and run in the order other, this, this, other (the GPU warms over a run), so
# that a change's speed is judged in one run. Results to the folder argument (default: $OUT or
# ./bench_results); the last lines are the mean run and plan+run ms of each case and their ratio.
#   scripts/bench_side_by_side.sh <commit> [results]
# Needs .cache/ as scripts/gpu_check.sh does (scripts/prepare_offline.sh) and git history.
set -eu -o pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: scripts/bench_side_by_side.sh <commit> [results]}
results=${2:-${OUT:-bench_results}}
mkdir -p "$results"
cfg=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DMSA_BUILD_TESTS=OFF)
wheel=$(ls .cache/cutlass/nvidia_cutlass-*.whl 2>/dev/null | head -n 1 || true)
[ -n "$wheel" ] && cfg+=("-DMSA_CUTLASS_WHEEL=$PWD/$wheel")
worktree=build/side_by_side/base
rm -rf "$worktree" && git worktree prune
git worktree add -f "$worktree" "$base" > /dev/null
jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
( cmake -S "$worktree" -B "$worktree/build" "${cfg[@]}" > "$results/base_build.log" 2>&1 &&
  cmake --build "$worktree/build" -j "$jobs" --target msa_cli >> "$results/base_build.log" 2>&1 ) &
cmake -S . -B build/side_by_side/this "${cfg[@]}" > "$results/this_build.log" 2>&1
cmake --build build/side_by_side/this -j "$jobs" --target msa_cli >> "$results/this_build.log" 2>&1
wait
"$worktree/build/msa" bench prefill > "$results/bench_base_1.txt"
build/side_by_side/this/msa bench prefill > "$results/bench_this_1.txt"
build/side_by_side/this/msa bench prefill > "$results/bench_this_2.txt"
"$worktree/build/msa" bench prefill > "$results/bench_base_2.txt"
git worktree remove --force "$worktree"
python3 - "$results" <<'PY'
import re, sys
folder = sys.argv[1]
def parse(name):
    rows = {}
    for line in open(f"{folder}/{name}"):
        m = re.match(r"^(\S.*?)\s{2,}\d+\s+\d+\s+[\d.]+\s+([\d.]+)\s+[\d.]+%\s+([\d.]+)", line)
        if m: rows[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return rows
base = [parse(f"bench_base_{i}.txt") for i in (1, 2)]
this = [parse(f"bench_this_{i}.txt") for i in (1, 2)]
print("| case | run before | run after | ratio | plan+run before | plan+run after | ratio |")
print("|---|---|---|---|---|---|---|")
for case in base[0]:
    b = [sum(r[case][j] for r in base) / 2 for j in (0, 1)]
    t = [sum(r[case][j] for r in this) / 2 for j in (0, 1)]
    print(f"| {case} | {b[0]:.3f} | {t[0]:.3f} | {t[0] / b[0]:.3f} | {b[1]:.3f} | {t[1]:.3f} | {t[1] / b[1]:.3f} |")
PY
