#!/usr/bin/env python3
"""Random-shape sweep of the whole MSA layer on the GPU against the CPU reference.

Each case is one `msa run --backend cuda` (indexer -> top-k -> plan -> prefill -> decode, every
stage verified as `msa run` verifies it) on a configuration drawn from the seed: G 1..16,
h_kv 1..8, top-k 1..32, page sizes 16..128 and flat K/V, the four selection generators or the
indexer's own top-k, sinks, the three prefill paths, batches of 1-40 requests with q_len 0..k_len
and lengths that are not multiples of 128, small chunks on prefixes of up to 256k tokens, and decode batches of 1-64 requests of 1-16 queries
on BF16 or FP8 E4M3 K/V.
Sizes are capped so that the CPU reference of a case takes a few seconds on the GPU machine.

A case passes when `msa run` exits 0. Anything else (a failed check, an msa::Error on valid
input, a crash, a time-out) is a failure, reported with the command that reproduces it.

    python3 scripts/gpu_sweep.py --msa build/gpu/msa --cases 200 --seed 1 --jobs 4 [--budget S] [--out DIR]

Prints one line per failure, then a summary table; with --out, writes each failure's output
to DIR/sweep_<case>.txt and the table to DIR/sweep.txt. --budget S starts no case after S
seconds (the table counts the cases run). Exit status 1 when any case failed.
"""
import argparse
import collections
import concurrent.futures
import math
import os
import random
import subprocess
import sys
import time

GROUPS = [1, 1, 2, 2, 3, 4, 4, 5, 6, 7, 8, 8, 11, 12, 16, 16, 16]
TOPKS = [1, 2, 3, 4, 5, 7, 8, 8, 12, 15, 16, 16, 16, 16, 17, 24, 31, 32]
PAGES = [0, 16, 32, 64, 128, 128]
SELECTIONS = [None, None, None, "random", "random", "tile-shared", "clustered", "all"]
PATHS = ["auto", "auto", "auto", "block-major", "tile-union"]

# Reference work per case: (query, head, visible key) triples the FP64 gather visits.
MAX_PREFILL_TRIPLES = 6e7
MAX_DECODE_TRIPLES = 3e7
# Host K/V, index-K and page generation per case: (token, KV head) pairs of all requests
# (a decode batch of 64 x 130k tokens on 4 KV heads took over 2 minutes to generate).
MAX_TOKEN_HEADS = 6e6


def log_uniform(rng, lo, hi):
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def draw_requests(rng):
    shape = rng.random()
    if shape < 0.2:  # small chunks on long cached prefixes (the planner's large-prefix paths)
        return [(rng.randint(0, 600), log_uniform(rng, 20000, 262144)) for _ in range(rng.choice([1, 1, 2, 4]))]
    if shape < 0.35:  # many tiny requests: tiles that span requests
        count = rng.randint(10, 40)
        out = []
        for _ in range(count):
            k = rng.randint(1, 900)
            out.append((rng.randint(0, min(k, 12)), k))
        return out
    count = rng.choice([1, 1, 1, 2, 2, 3, 4, 6])
    out = []
    for _ in range(count):
        k = log_uniform(rng, 1, 20000)
        r = rng.random()
        if r < 0.15:
            q = k  # a fresh prompt
        elif r < 0.25:
            q = 1
        elif r < 0.3:
            q = 0
        else:
            q = rng.randint(1, max(1, min(k, 2500)))
        out.append((min(q, k), k))
    return out


def prefill_triples(requests, h_q, topk, selection):
    total = 0
    for q, k in requests:
        keys = k if selection == "all" else min(k, topk * 128)
        total += q * h_q * keys
    return total


def draw_case(seed, index, backend):
    rng = random.Random(seed * 1_000_003 + index)
    group = rng.choice(GROUPS)
    h_kv = rng.choice([1, 1, 2, 2, 3, 4, 4, 8])
    while h_kv * group > 64:
        h_kv //= 2
    h_q = h_kv * group
    topk = rng.choice(TOPKS)
    selection = rng.choice(SELECTIONS)
    requests = draw_requests(rng)
    while (prefill_triples(requests, h_q, topk, selection) > MAX_PREFILL_TRIPLES
           or sum(k for _, k in requests) * h_kv > MAX_TOKEN_HEADS):
        requests = [(q // 2, max(k // 2, q // 2, 1)) for q, k in requests]
    decode_batch = rng.choice([1, 1, 2, 3, 4, 8, 16, 33, 64])
    decode_q = rng.choice([1, 1, 2, 3, 4, 7, 8, 8, 12, 16])
    decode_len = max(decode_q, log_uniform(rng, 1, 30000 if rng.random() < 0.85 else 200000))
    while decode_len > decode_q and (decode_batch * decode_q * h_q * min(decode_len, topk * 128) > MAX_DECODE_TRIPLES
                                     or decode_batch * decode_len * h_kv > MAX_TOKEN_HEADS):
        decode_len = max(decode_q, decode_len // 2)
    args = [
        "run", "--backend", backend,
        "--seed", str(rng.randint(1, 1 << 30)),
        "--h-q", str(h_q), "--h-kv", str(h_kv), "--topk", str(topk),
        "--page-size", str(rng.choice(PAGES)),
        "--prefill-path", rng.choice(PATHS),
        "--requests", ",".join(f"{q}:{k}" for q, k in requests),
        "--decode-batch", str(decode_batch), "--decode-q", str(decode_q), "--decode-len", str(decode_len),
    ]
    if selection is not None:
        args += ["--selection", selection]
    if rng.random() < 0.3:
        args.append("--sinks")
    if rng.random() < 0.3:
        args += ["--decode-kv", "fp8"]
    return args


def run_case(msa, index, args, threads, timeout, deadline):
    if deadline and time.time() > deadline:
        return index, args, None, "", 0.0
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    t0 = time.time()
    try:
        p = subprocess.run([msa] + args, capture_output=True, text=True, timeout=timeout, env=env)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        text = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
    return index, args, rc, text, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--msa", default="build/gpu/msa")
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--backend", default="cuda", help="cuda (default), or cpu to try the script without a GPU")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--budget", type=float, default=0, help="seconds after which no new case starts (0: none)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--print-only", action="store_true", help="print the cases' commands, run nothing")
    o = ap.parse_args()

    cases = [(i, draw_case(o.seed, i, o.backend)) for i in range(o.cases)]
    if o.print_only:
        for i, args in cases:
            print(i, o.msa, " ".join(args))
        return 0
    threads = max(1, (os.cpu_count() or 2) // max(1, o.jobs))
    if o.out:
        os.makedirs(o.out, exist_ok=True)
    results = {}
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=o.jobs) as pool:
        deadline = t0 + o.budget if o.budget > 0 else 0
        futures = [pool.submit(run_case, o.msa, i, args, threads, o.timeout, deadline) for i, args in cases]
        for f in concurrent.futures.as_completed(futures):
            i, args, rc, text, secs = f.result()
            if rc is None:
                continue  # not started: past the budget
            results[i] = (args, rc, text, secs)
            if rc != 0:
                last = [l for l in text.strip().splitlines() if l.strip()][-1:] or ["(no output)"]
                print(f"FAIL case {i} (rc {rc}, {secs:.1f} s): {o.msa} {' '.join(args)}\n    {last[0]}", flush=True)
                if o.out:
                    with open(os.path.join(o.out, f"sweep_{i}.txt"), "w") as fh:
                        fh.write(f"{o.msa} {' '.join(args)}\nrc {rc}\n\n{text}")

    counts = collections.Counter("pass" if r[1] == 0 else "fail" for r in results.values())
    by_path = collections.Counter()
    for args, rc, _, _ in results.values():
        by_path[(args[args.index("--prefill-path") + 1], rc == 0)] += 1
    lines = [
        f"gpu sweep: seed {o.seed}, {len(results)} of {o.cases} cases run, {o.jobs} jobs x {threads} threads, {time.time() - t0:.0f} s",
        f"{'prefill path':<14}{'pass':>6}{'fail':>6}",
    ]
    for path in ["auto", "block-major", "tile-union"]:
        lines.append(f"{path:<14}{by_path[(path, True)]:>6}{by_path[(path, False)]:>6}")
    lines.append(f"{'all':<14}{counts['pass']:>6}{counts['fail']:>6}")
    if results:
        lines.append(f"slowest case {max(r[3] for r in results.values()):.1f} s")
    print("\n".join(lines))
    if o.out:
        with open(os.path.join(o.out, "sweep.txt"), "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
