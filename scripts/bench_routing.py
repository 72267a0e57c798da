#!/usr/bin/env python3
"""The automatic prefill path's routing, timed on the calls of docs/performance.md steps 74-76.

Runs `msa bench prefill` on each call (chunks of 171-2048 new tokens on 16k-128k prefixes, a
batch of chunks, whole sequences, G = 2-16) with random, clustered and tile-shared selections,
for one or more msa binaries taking turns (binary A, B, ... then again, --rounds times: the GPU
warms over a run, so that a change is judged beside its base in one run). Prints a markdown
table: plan + run (graph replays), eager and plan ms of every round, and the share of (KV head,
query tile) pairs the tile-union kernel ran.

    python3 scripts/bench_routing.py build/gpu/msa
    python3 scripts/bench_routing.py base/msa build/gpu/msa --selections clustered --calls "257 on 16k;S = 8k"

Needs a CUDA device. About one second a call and round (the whole sequences longer).
"""
import argparse
import subprocess
import sys

# (label, msa bench prefill arguments); tiles = h_kv * ceil(queries / queries per union tile)
CALLS = [
    ("171 on 16k", ["--requests", "171:16555"]),
    ("171 on 128k", ["--requests", "171:131243"]),
    ("257 on 16k", ["--requests", "257:16641"]),
    ("512 on 16k", ["--requests", "512:16896"]),
    ("512 on 128k", ["--requests", "512:131584"]),
    ("1024 on 16k", ["--requests", "1024:17408"]),
    ("2048 on 16k", ["--requests", "2048:18432"]),
    ("2048 on 128k", ["--requests", "2048:133120"]),
    ("3 x 256 on 64k", ["--requests", "256:65792,256:65792,256:65792"]),
    ("4 x 2048 on 64k", ["--requests", "2048:65600,2048:65600,2048:65600,2048:65600"]),
    ("512 on 16k, G = 8", ["--requests", "512:16896", "--h-q", "64", "--h-kv", "8"]),
    ("S = 8k", ["--seq", "8192"]),
    ("S = 16k, G = 4", ["--seq", "16384", "--h-q", "16", "--h-kv", "4"]),
    ("S = 16k, G = 2", ["--seq", "16384", "--h-q", "32", "--h-kv", "16"]),
]
SELECTIONS = ["random", "clustered", "tile-shared"]


def bench_row(msa, args, selection):
    """The case's row of `msa bench prefill`: {plan, plan_run, eager, union} (ms, share)."""
    out = subprocess.run([msa, "bench", "prefill", *args, "--selection", selection], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{msa} bench prefill {' '.join(args)} --selection {selection}: rc {out.returncode}\n"
                           f"{out.stderr[-2000:]}")
    for line in out.stdout.splitlines():
        if line.startswith(selection):
            # The case name may hold spaces: the 16 columns after it, read from the right
            # (sets, union, run/floor, floor, GB/s, TFLOP/s, host us, busy, plan/eager, eager,
            # plan+run, cv, run, plan, edges, total_q).
            f = line.split()[::-1]
            return {"plan": float(f[13]), "plan_run": float(f[10]), "eager": float(f[9]), "union": f[1]}
    raise RuntimeError(f"no {selection} row in the output of {msa} bench prefill {' '.join(args)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("msa", nargs="+", help="msa binaries, each timed on every call in turn")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--selections", default=",".join(SELECTIONS))
    ap.add_argument("--calls", default="", help="labels to keep, separated by ';' (default: all)")
    o = ap.parse_args()
    selections = [s for s in o.selections.split(",") if s]
    for s in selections:
        if s not in SELECTIONS:
            ap.error(f"--selections: unknown selection '{s}' (expected {', '.join(SELECTIONS)})")
    keep = {c.strip() for c in o.calls.split(";") if c.strip()}
    calls = [c for c in CALLS if not keep or c[0] in keep]
    if keep and len(calls) != len(keep):
        ap.error(f"--calls: unknown label among {sorted(keep)} (labels: {', '.join(c[0] for c in CALLS)})")
    rows = {}
    for r in range(o.rounds):
        for i, msa in enumerate(o.msa):
            for sel in selections:
                for label, args in calls:
                    rows.setdefault((sel, label), {}).setdefault(i, []).append(bench_row(msa, args, sel))
                    print(f"  round {r + 1}: {msa} {sel} {label}", file=sys.stderr)
    print("| selection | call | " + " | ".join(f"{m}: plan + run / eager (plan) ms, union" for m in o.msa) + " |")
    print("|---|---|" + "---|" * len(o.msa))
    for (sel, label), per in rows.items():
        cells = []
        for i in range(len(o.msa)):
            v = per[i]
            cells.append(" ".join(f"{x['plan_run']:.3f}" for x in v) + " / " + " ".join(f"{x['eager']:.3f}" for x in v) +
                         " (" + " ".join(f"{x['plan']:.3f}" for x in v) + "), " + v[0]["union"])
        print(f"| {sel} | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
