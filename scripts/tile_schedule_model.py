#!/usr/bin/env python3
"""A model of the plan-free tile-union launch's end: when its last CTA finishes, for a causal
prefill of one request, under the static snake and under a dynamic schedule (each CTA takes the
next tile when it is free), over tile_of_rank_grouped's order with the remainder group last
(main, step 95) or with groups of equal size.

Tile time: a + b x its union entries (us), from step 95's CTA timeline at G = 1 (a = 5,
b = 1.45); every CTA starts after its first build (7 us). Prints, per case, the last CTA's end
and the mean of the CTAs' ends (the balance's bound).

    python3 scripts/tile_schedule_model.py --seq 4096 8192 16384 --groups 15 7 3
"""
import argparse
import heapq


def tile_of_rank(r, per_head, h_kv):
    return (r % h_kv) * per_head + (per_head - 1 - r // h_kv)


def grouped_remainder_last(r, per_head, h_kv, gh):
    if gh <= 0 or gh >= h_kv:
        return tile_of_rank(r, per_head, h_kv)
    g = r // (per_head * gh)
    first = g * gh
    heads = min(gh, h_kv - first)
    rr = r - g * per_head * gh
    return (first + rr % heads) * per_head + (per_head - 1 - rr // heads)


def grouped_equal(r, per_head, h_kv, gh):
    if gh <= 0 or gh >= h_kv:
        return tile_of_rank(r, per_head, h_kv)
    groups = h_kv // gh
    base, larger = h_kv // groups, h_kv % groups
    larger_tiles = per_head * (base + 1) * larger
    if r < larger_tiles:
        heads = base + 1
        g = r // (per_head * heads)
        first, rr = g * heads, r - g * per_head * heads
    else:
        heads = base
        rs = r - larger_tiles
        g = rs // (per_head * heads)
        first, rr = larger * (base + 1) + g * heads, rs - g * per_head * heads
    return (first + rr % heads) * per_head + (per_head - 1 - rr // heads)


def ends(order, per_head, h_kv, ctas, dynamic, a, b, first_build):
    n = per_head * h_kv
    cost = [a + b * (order(r) % per_head + 1) for r in range(n)]  # tile i of a head: i + 1 entries
    if dynamic:  # ticket order: the CTA free first takes the next position
        heap = [(first_build, c) for c in range(ctas)]
        for pos in range(n):
            t, c = heapq.heappop(heap)
            heapq.heappush(heap, (t + cost[pos], c))
        return [t for t, _ in heap]
    out = []
    for c in range(ctas):
        t, i = first_build, 0
        while True:
            pos = i * ctas + (ctas - 1 - c if i % 2 else c)
            if pos >= n:
                break
            t += cost[pos]
            i += 1
        out.append(t)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--groups", type=int, nargs="+", default=[15, 7, 3],
                    help="union_group_heads per --seq (H200, G = 1, h_kv 64)")
    ap.add_argument("--h-kv", type=int, default=64)
    ap.add_argument("--ctas", type=int, default=132)
    ap.add_argument("--a", type=float, default=5.0)
    ap.add_argument("--b", type=float, default=1.45)
    ap.add_argument("--first-build", type=float, default=7.0)
    args = ap.parse_args()
    print(f"{'S':>6} {'groups':>6} {'order':>15} {'schedule':>8} {'last end':>9} {'mean end':>9}")
    for s, gh in zip(args.seq, args.groups):
        per_head = (s + 127) // 128
        for name, fn in (("remainder last", grouped_remainder_last), ("equal", grouped_equal)):
            for dynamic in (False, True):
                e = ends(lambda r: fn(r, per_head, args.h_kv, gh), per_head, args.h_kv, args.ctas, dynamic,
                         args.a, args.b, args.first_build)
                print(f"{s:>6} {gh:>6} {name:>15} {'dynamic' if dynamic else 'snake':>8} {max(e):9.1f} "
                      f"{sum(e) / len(e):9.1f}")


if __name__ == "__main__":
    main()
