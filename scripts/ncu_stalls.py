#!/usr/bin/env python3
"""Warp-stall samples of one kernel, summed per SASS opcode, from Nsight Compute's source page.

    ncu --set full --import-source yes -k regex:prefill_kernel --launch-skip 2 --launch-count 1 \\
        -o rep build/gpu/msa bench decode --batch 32 --len 100000 --q 8 --kv fp8 --warmup 2 --reps 2
    ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 scripts/ncu_stalls.py sass.csv [--top 45] [--by line]

Prints the total samples, then per opcode (predicates dropped; --by line: per row of the export,
--print-source cuda or sass, named by its first column) its samples, their share and its three
largest stall reasons. docs/performance.md step 51 read an FP8 decode step with it.
"""
import argparse
import collections
import csv
import re


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--by", choices=["opcode", "line"], default="opcode")
    args = parser.parse_args()
    with open(args.csv, newline="", errors="replace") as f:
        rows = list(csv.reader(f))
    header_at = next(i for i, r in enumerate(rows) if "Source" in [c.strip() for c in r])
    head = [c.strip() for c in rows[header_at]]
    source = head.index("Source")
    samples = head.index("Warp Stall Sampling (All Samples)")
    reasons = [i for i, h in enumerate(head) if h.startswith("stall_")]
    per_op = collections.defaultdict(lambda: [0.0] * (1 + len(reasons)))
    total = 0.0
    for n, r in enumerate(rows[header_at + 1:]):
        if len(r) <= max([source, samples] + reasons):
            continue
        if args.by == "line":
            where = r[0].strip() if source != 0 else str(n + 1)  # the export's first column (line or address)
            op = f"{where:>8s} {r[source].strip()[:68]}"
        else:
            op = re.sub(r"^@!?U?P\w+\s+", "", r[source].strip()).split(" ")[0] or "?"
        acc = per_op[op]
        acc[0] += number(r[samples])
        for j, c in enumerate(reasons):
            acc[j + 1] += number(r[c])
        total += number(r[samples])
    print(f"total samples {total:.0f}")
    for op, acc in sorted(per_op.items(), key=lambda kv: -kv[1][0])[: args.top]:
        top = sorted(((acc[j + 1], head[c][len("stall_"):]) for j, c in enumerate(reasons)), reverse=True)[:3]
        why = ", ".join(f"{name} {v:.0f}" for v, name in top if v > 0)
        width = 78 if args.by == "line" else 32
        print(f"{acc[0]:8.0f} {100 * acc[0] / max(total, 1):5.1f}%  {op:{width}s} [{why}]")


if __name__ == "__main__":
    main()
