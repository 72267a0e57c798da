#!/usr/bin/env python3
"""The split small calls' cost model (split_union_batch, src/core/tile_route.cpp) against the
eager calls measured both ways, and the grid search its constants came from.

Each row is one call of `B` requests of `q` queries on `k_len` tokens (a device batch, as
`msa bench prefill --requests` makes it), at h_q / h_kv, top-16, d = 128, with its eager time
(ms, the smaller of two rounds) planned (block-major run after the device plan) and split
(the union kernel's tiles split over their unions, then the combine), on the H200:
docs/performance.md steps 69-71 (out/s169.sh-out/s173.sh, out/s184.sh, out/s192.sh, out/s194.sh).

    python3 scripts/split_route_fit.py           # the landed constants, then the calls they miss
    python3 scripts/split_route_fit.py --search  # the grid search (a minute)

The loss of a rule is the sum over the calls of (the time of the route it takes) / (the better
route's time) - 1; "missed" counts the calls more than 3% off.
"""
import itertools
import math
import sys

# (h_q, h_kv, B, q, k_len, planned ms, split ms)
CALLS = [
    # step 69, h_kv 4 (G 16)
    (64, 4, 1, 24, 16384, .0475, .045), (64, 4, 1, 32, 16384, .053, .0485), (64, 4, 1, 32, 65536, .067, .057),
    (64, 4, 1, 32, 131072, .071, .0595), (64, 4, 1, 64, 16384, .054, .066), (64, 4, 1, 64, 65536, .0805, .0815),
    (64, 4, 1, 64, 131072, .092, .088), (64, 4, 1, 48, 16384, .0545, .058), (64, 4, 1, 48, 65536, .0735, .0715),
    (64, 4, 2, 16, 65536, .072, .0595), (64, 4, 2, 32, 65536, .092, .0865), (64, 4, 4, 8, 65536, .079, .062),
    (64, 4, 4, 16, 65536, .1045, .0885), (64, 4, 4, 32, 65536, .164, .1425), (64, 4, 4, 64, 65536, .214, .2495),
    (64, 4, 4, 16, 16384, .0785, .073), (64, 4, 4, 16, 131072, .125, .090), (64, 4, 4, 64, 131072, .2685, .266),
    (64, 4, 8, 8, 65536, .125, .0895), (64, 4, 8, 16, 65536, .183, .1435), (64, 4, 8, 32, 65536, .2695, .2535),
    (64, 4, 16, 8, 65536, .199, .147), (64, 4, 32, 4, 65536, .238, .1545), (64, 4, 16, 16, 65536, .3155, .256),
    (64, 4, 32, 8, 65536, .371, .261), (64, 4, 64, 8, 65536, .719, .488), (64, 4, 32, 16, 65536, .6045, .4875),
    (64, 4, 16, 32, 65536, .4975, .477), (64, 4, 128, 4, 32768, .774, .504), (64, 4, 64, 16, 32768, .983, .87),
    (64, 4, 128, 8, 16384, .96, .746), (64, 4, 32, 32, 16384, .512, .71), (64, 4, 10, 24, 8192, .138, .147),
    (64, 4, 8, 32, 131072, .3115, .267),
    # step 69, G 1 and 8
    (64, 64, 1, 32, 65536, .449, .3625), (64, 64, 1, 64, 65536, .600, .681), (64, 64, 4, 16, 65536, 1.0195, .8375),
    (64, 64, 4, 32, 65536, 1.6035, 1.32), (64, 64, 16, 16, 65536, 3.94, 3.1985), (32, 4, 4, 16, 65536, .1035, .085),
    (32, 4, 4, 32, 65536, .256, .229), (64, 8, 32, 16, 65536, 1.092, .846),
    # step 70, tensor-parallel shapes (out/s184.sh)
    (16, 1, 1, 171, 16384, .061, .054), (16, 1, 1, 512, 16384, .090, .120), (16, 1, 1, 171, 65536, .068, .0635),
    (16, 1, 1, 512, 131072, .101, .139), (16, 1, 1, 1024, 65536, .137, .238), (16, 1, 4, 64, 16384, .0715, .069),
    (16, 1, 4, 171, 16384, .107, .206), (16, 1, 16, 32, 65536, .177, .145), (16, 1, 2, 128, 131072, .095, .086),
    (8, 1, 1, 171, 16384, .0585, .049), (8, 1, 1, 512, 16384, .0755, .080), (8, 1, 1, 171, 65536, .0665, .0595),
    (8, 1, 1, 512, 131072, .088, .129), (8, 1, 1, 1024, 65536, .102, .212), (8, 1, 4, 64, 16384, .067, .0575),
    (8, 1, 4, 171, 16384, .085, .1205), (8, 1, 16, 32, 65536, .1725, .1335), (8, 1, 2, 128, 131072, .093, .083),
    (32, 2, 1, 171, 16384, .0735, .0795), (32, 2, 1, 512, 16384, .127, .1995), (32, 2, 1, 171, 65536, .0825, .101),
    (32, 2, 1, 512, 131072, .145, .25), (32, 2, 1, 1024, 65536, .2055, .4445), (32, 2, 4, 64, 16384, .0965, .1095),
    (32, 2, 4, 171, 16384, .1595, .3685), (32, 2, 16, 32, 65536, .2875, .2525), (32, 2, 2, 128, 131072, .1355, .143),
    # step 70, the first refit's check (out/s192.sh, first form)
    (64, 4, 1, 64, 32768, .064, .078), (64, 4, 1, 64, 65536, .079, .0855), (64, 4, 1, 96, 131072, .1225, .132),
    (64, 4, 8, 24, 16384, .154, .1855), (64, 4, 6, 40, 65536, .2445, .2495), (64, 4, 4, 32, 32768, .133, .134),
    (16, 1, 1, 171, 131072, .075, .0635), (16, 1, 4, 64, 65536, .093, .0865), (16, 1, 3, 100, 131072, .1115, .1035),
    (16, 1, 6, 40, 16384, .074, .067), (16, 1, 1, 128, 32768, .060, .049), (8, 1, 1, 171, 131072, .075, .066),
    (8, 1, 1, 256, 16384, .063, .054), (8, 1, 3, 100, 16384, .071, .0745), (32, 2, 1, 96, 32768, .072, .068),
    (32, 2, 3, 100, 131072, .164, .2375), (32, 2, 4, 32, 16384, .0785, .0665), (32, 2, 1, 128, 131072, .092, .0895),
    # step 71, short prefixes (out/s194.sh; measured after the landed fit): 4k-16k, the K/V in L2
    (8, 1, 2, 100, 12288, .063, .053), (8, 1, 1, 300, 8192, .066, .044), (8, 1, 5, 50, 8192, .065, .054),
    (16, 1, 3, 100, 8192, .072, .077), (16, 1, 2, 200, 16384, .079, .113), (16, 1, 8, 24, 8192, .067, .050),
    (16, 1, 1, 300, 8192, .069, .063), (16, 1, 5, 50, 8192, .069, .063), (32, 2, 2, 100, 16384, .078, .120),
    (32, 2, 4, 32, 8192, .070, .053), (32, 2, 5, 50, 8192, .089, .101), (64, 4, 4, 16, 8192, .061, .059),
    (64, 4, 3, 40, 12288, .092, .099), (64, 4, 2, 50, 8192, .076, .100),
]
# step 70, the landed model's check (out/s192.sh, second form): not in its fit
HELD_OUT = [
    (64, 4, 1, 64, 8192, .048, .050), (64, 4, 1, 80, 98304, .104, .0995), (64, 4, 2, 60, 98304, .1455, .141),
    (64, 4, 3, 30, 65536, .1295, .132), (64, 4, 4, 24, 16384, .0985, .1015), (64, 4, 8, 24, 32768, .1935, .2195),
    (64, 4, 8, 40, 131072, .369, .474), (64, 4, 12, 20, 24576, .220, .240), (64, 4, 32, 12, 16384, .347, .4335),
    (64, 4, 16, 32, 49152, .4545, .468), (16, 1, 1, 128, 49152, .063, .050), (16, 1, 1, 200, 131072, .0745, .0735),
    (16, 1, 4, 48, 16384, .0675, .0565), (16, 1, 5, 50, 8192, .066, .0605), (8, 1, 1, 200, 131072, .0745, .072),
    (8, 1, 3, 100, 8192, .062, .0595), (8, 1, 5, 50, 24576, .077, .072), (32, 2, 1, 80, 24576, .064, .0575),
    (32, 2, 8, 40, 131072, .216, .236), (32, 2, 32, 12, 16384, .211, .223), (32, 2, 16, 32, 49152, .2625, .250),
    (32, 4, 8, 24, 24576, .164, .202), (32, 4, 1, 96, 131072, .119, .1175), (32, 4, 16, 32, 24576, .3145, .325),
]

LANDED = dict(split_ns=14, cta_ns=1600, plan_ns=20000, block_ns=18, entry_ns=0.12)
STEP69 = dict(split_ns=16, cta_ns=0, plan_ns=15000, block_ns=18, entry_ns=0.15)


def expected_union(q, k, n):
    return n * (1 - (1 - k / n) ** q) if q > 0 and n > 0 else 0.0


def split_count(h_kv, total_q, q_per_tile, blocks):  # prefill_union_splits at top-16
    pairs = h_kv * math.ceil(total_q / q_per_tile)
    return max(1, min(132 // pairs, blocks, 16))


def estimate(p, h_q, h_kv, batch, q, k_len, topk=16):
    """split_union_batch's two estimates (ns) for `batch` requests of q queries at k_len."""
    group = h_q // h_kv
    q_per_tile = 128 // group if group >= 8 else 32  # tile_union_queries_per_tile at top-16
    n = (k_len + 127) // 128
    k = min(topk, n)
    tile_blocks = request_blocks = entries = 0.0
    open_, widest, q0 = 0.0, 0.0, 0
    for _ in range(batch):
        head = min(q, (q_per_tile - q0 % q_per_tile) % q_per_tile)
        whole = (q - head) // q_per_tile
        tail = q - head - whole * q_per_tile
        request_blocks += expected_union(q, k, n)
        entries += q * k
        tile_blocks += expected_union(head, k, n) + whole * expected_union(q_per_tile, k, n) + expected_union(tail, k, n)
        open_ += expected_union(head, k, n)
        if head > 0 and (q0 + head) % q_per_tile == 0:
            widest, open_ = max(widest, open_), 0.0
        if whole:
            widest = max(widest, expected_union(q_per_tile, k, n))
        open_ += expected_union(tail, k, n)
        q0 += q
    widest = max(widest, open_)
    splits = split_count(h_kv, batch * q, q_per_tile, n)
    waves = math.ceil(h_kv * math.ceil(batch * q / q_per_tile) * splits / 132)
    split = max(p["split_ns"] * tile_blocks * h_kv, p["cta_ns"] * math.ceil(widest / splits) * waves)
    block_major = p["plan_ns"] + p["block_ns"] * request_blocks * h_kv + p["entry_ns"] * entries * h_q
    return split, block_major


def score(p, calls, show=False):
    loss, missed = 0.0, 0
    for c in calls:
        split, block_major = estimate(p, *c[:5])
        takes_split = split <= block_major
        better = min(c[5], c[6])
        got = c[6] if takes_split else c[5]
        loss += got / better - 1
        missed += got / better - 1 > 0.03
        if show and got / better - 1 > 0.03:
            print(f"  {c[:5]}: {'split' if takes_split else 'plan'} {100 * (got / better - 1):+.0f}%"
                  f" (estimates: split {split / 1000:.0f} us, block-major {block_major / 1000:.0f} us)")
    return round(loss, 3), missed


def main():
    print(f"step 69's model on the {len(CALLS)} calls (the landed model's fit, then step 71's 14): "
          f"loss, missed = {score(STEP69, CALLS)}")
    print(f"the landed model on them: {score(LANDED, CALLS, show=True)}")
    print(f"the landed model on the {len(HELD_OUT)} held-out calls: {score(LANDED, HELD_OUT, show=True)}")
    if "--search" in sys.argv:
        best = None
        for split_ns, cta_ns, plan_ns, block_ns, entry_ns in itertools.product(
                (12, 14, 16, 18), (1200, 1400, 1600, 1800, 2000), range(10000, 36001, 2000), (14, 18, 22, 26),
                (0.1, 0.12, 0.15, 0.2)):
            p = dict(split_ns=split_ns, cta_ns=cta_ns, plan_ns=plan_ns, block_ns=block_ns, entry_ns=entry_ns)
            r = score(p, CALLS)
            if best is None or r < best[0]:
                best = (r, p)
        print("best of the grid:", best)


if __name__ == "__main__":
    main()
