#!/usr/bin/env bash
# msa beside dense causal attention (cuDNN through PyTorch SDPA) over GQA group sizes and
# lengths, in one run on the GPU machine: the target "at no length slower than dense cuDNN"
# (issue 14) checked beyond the cases the A/B scripts time. Random selections, one request of
# S new tokens, h_q 64 and h_kv 64 / G, the automatic path; cuDNN as scripts/bench_dense.py times
# it (h_q 64, K/V expanded, warm, CUDA events). Rounds alternate msa and cuDNN; the last lines are
# our time over cuDNN's per round, for the graph-replayed run and for the eager call behind
# earlier GPU work ("busy" in `msa bench prefill`). The processes run one after the other, at the
# clocks the GPU's power cap leaves them (docs/performance.md step 94): for a ratio at one clock use
# scripts/bench_dense_beside.py, which alternates msa and cuDNN call by call.
#
#   scripts/sweep_dense.sh [--msa PATH] [--g "1 2 4 8 16"] [--seq "1024 ... 16384"] [--rounds N] [OUT]
#
# --msa is a built `msa` (default build/dev/msa); OUT keeps the raw outputs (default $OUT or
# /tmp/sweep_dense).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
msa=build/dev/msa
groups="1 2 4 8 16"
seqs="1024 1536 2048 3000 4096 6000 8192 12288 16384"
rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --msa) msa=$2; shift 2 ;;
    --g) groups=$2; shift 2 ;;
    --seq) seqs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    -*) echo "sweep_dense: unknown option '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
out=${1:-${OUT:-/tmp/sweep_dense}}
mkdir -p "$out"
[ -x "$msa" ] || { echo "sweep_dense: no msa binary at '$msa' (cmake --build build/dev --target msa_cli)" >&2; exit 1; }
args=""
for s in $seqs; do args="$args --seq $s"; done
for g in $groups; do
  [ $((64 % g)) -eq 0 ] || { echo "sweep_dense: G = $g does not divide h_q 64" >&2; exit 2; }
done
for round in $(seq 1 "$rounds"); do
  for g in $groups; do
    # shellcheck disable=SC2086
    "$msa" bench prefill --warmup 3 --reps 10 --h-q 64 --h-kv $((64 / g)) $args > "$out/g$g.r$round.txt" 2>&1 ||
      { echo "sweep_dense: msa bench failed (G = $g), see $out/g$g.r$round.txt" >&2; exit 1; }
  done
  # shellcheck disable=SC2086
  python3 scripts/bench_dense.py $seqs | grep cudnn > "$out/dense.r$round.txt" ||
    { echo "sweep_dense: scripts/bench_dense.py failed" >&2; exit 1; }
done
# shellcheck disable=SC2086  # one argument a group
python3 - "$out" "$rounds" $groups <<'PY'
import re, sys
out, rounds, groups = sys.argv[1], int(sys.argv[2]), [int(g) for g in sys.argv[3:]]

def dense(r):
    d = {}
    for line in open(f"{out}/dense.r{r}.txt"):
        m = re.search(r"S=\s*(\d+)\s+([\d.]+) ms", line)
        if m:
            d[int(m.group(1))] = float(m.group(2))
    return d

def ours(g, r):  # S -> (run ms, busy ms), from the bench's columns counted from the right
    d = {}
    for line in open(f"{out}/g{g}.r{r}.txt"):
        f = line.split()
        if len(f) > 15 and f[0] == "random" and f[1].startswith("S="):
            n = len(f) - 1
            d[int(f[1][2:])] = (float(f[n - 12]), float(f[n - 7]))
    return d

R = range(1, rounds + 1)
D = {r: dense(r) for r in R}
O = {(g, r): ours(g, r) for g in groups for r in R}
print("our time / cuDNN's per round (r1/r2/...): run = graph replays, busy = eager behind earlier work")
print(f"{'S':>6}  {'cuDNN ms':<18}" + "".join(f"  {'G = ' + str(g) + ' run | busy':<24}" for g in groups))
for s in sorted(set.intersection(*(set(D[r]) for r in R))):  # lengths cuDNN ran in every round
    cells = []
    for g in groups:
        run = "/".join(f"{O[g, r][s][0] / D[r][s]:.2f}" if s in O[g, r] else "-" for r in R)
        busy = "/".join(f"{O[g, r][s][1] / D[r][s]:.2f}" if s in O[g, r] else "-" for r in R)
        cells.append(f"{run} | {busy}")
    print(f"{s:>6}  {'/'.join(f'{D[r][s]:.3f}' for r in R):<18}" + "".join(f"  {c:<24}" for c in cells))
PY
