#!/usr/bin/env python3
"""An event model of one CTA of the FP8 decode (the tile-union kernel's warp consumers): where a
step's time goes between the K/V ring, the eight consumer warps and the tile boundaries.

    python3 scripts/decode_ring_model.py                  # the calibration cases, base kernel
    python3 scripts/decode_ring_model.py --lazy 0.93      # warp steps 7% shorter
    python3 scripts/decode_ring_model.py --stages 8       # a deeper ring
    python3 scripts/decode_ring_model.py --list-first     # a tile's list built before its Q

What it models (every figure a parameter; the defaults are the H200's, docs/performance.md
steps 52-53):
- the loader streams each union block's K then V (16 KB each) into a ring of --stages stages,
  a stage's K (V) refilled only once all eight warps released it; landings are paced by the
  SM's share of copy bandwidth (--bw GB/s over 132 SMs) after --lat us of latency;
- warp w (16 rows: one query at G = 16) computes the blocks its query chose, in list order,
  Q K^T then P V (half a step each), and passes the others; two warps share a scheduler
  (w % 4): one warp alone takes --step us a block, two computing at once 2 x --sched each.
  The bf16 mma.sync probe (scripts/mma_sync_rate.cu: 1.24 us alone, 2.95 steps / us / SM
  with eight warps) gives the FP8 steps at L = 10k 90% of copy bandwidth, against 61-66%
  measured; the defaults (3.5 and 1.8 us: the FP8 step, with its conversions, about three
  times the probe's, latency-bound so that two warps overlap) reproduce step 53's figures but
  B = 8 L = 200k, whose combine and launch the model leaves out. A measured bound on --step:
  before the ways, one warp computing a CTA's 16 blocks (Q = 1 B = 32 L = 100k) took 49.4 us,
  at most 2.6 us a block; with --step 2.6 and any --sched up to 2.6 (two warps no slower than
  one after the other) L = 10k stays at 70% or more, so the model misses part of what those
  steps lose;
- at a tile's end the warps store (--epi us) and free the one Q buffer; the builders then load
  the next Q (--lat) and, before the change --list-first models, only then build the next list
  (--build us), which the loader needs before it issues that tile's blocks;
- random selections by the MSA rule of bench/workload.cpp: each of Q = 8 queries picks its local
  block (slot 15) and 15 distinct earlier ones; the union is slot-major (first-seen order of
  each query's first pick, then each one's second, ...), as build_narrow_list makes it.
It prints, per case, the modelled time of a CTA and its % of the time its bytes take at the SM's
share of copy bandwidth, beside the measured % of the step (step 53). It is a model: it knows
nothing of the combine, of DRAM contention between SMs or of instruction latencies inside a step.
"""
import argparse
import random


def union_of_tile(blocks, q, topk, rng):
    """Slot-major union of q queries' random picks: a list of (block, member bitmask)."""
    picks = []
    for _ in range(q):
        earlier = rng.sample(range(blocks - 1), min(topk - 1, blocks - 1))
        picks.append(earlier + [blocks - 1])
    order, members = [], {}
    for slot in range(topk):
        for i in range(q):
            if slot >= len(picks[i]):
                continue
            b = picks[i][slot]
            if b not in members:
                members[b] = 0
                order.append(b)
            members[b] |= 1 << i
    return [(b, members[b]) for b in order]


class Scheduler:
    """Processor sharing of one SM sub-partition between its computing warps."""

    def __init__(self, alone, shared):
        self.alone, self.shared = alone, shared

    def rate(self, busy):  # steps per us for each of `busy` computing warps
        return 1.0 / self.alone if busy <= 1 else 1.0 / (self.shared * busy)


def simulate_cta(tiles, a):
    """Event simulation of one CTA over its tiles; returns (time in us, blocks loaded)."""
    stages, warps = a.stages, 8
    half = 16 * 1024 / (a.bw * 1e3 / 132)  # us to stream 16 KB at the SM's share (bw in GB/s)
    blocks = [(t, u, m) for t, tile in enumerate(tiles) for u, (_, m) in enumerate(tile)]
    n = len(blocks)
    k_free = [0.0] * stages  # when stage s's K (V) may be refilled
    v_free = [0.0] * stages
    k_rel = [[None] * warps for _ in range(n)]  # release times per block and warp
    v_rel = [[None] * warps for _ in range(n)]
    k_land, v_land = [None] * n, [None] * n
    # Tile readiness: when the list is built (the loader may issue its blocks) and Q has landed.
    list_ready = [None] * len(tiles)
    q_ready = [None] * len(tiles)
    tile_done = [None] * len(tiles)  # every warp stored the tile (the Q buffer is free)
    list_ready[0] = a.build
    q_ready[0] = a.lat
    # Warps: a cursor over the blocks, the time each is free, its pending work.
    scheds = [Scheduler(a.step, a.sched) for _ in range(4)]
    warp_t = [0.0] * warps
    last_issue = 0.0
    # The loader and the warps advance in block order; the ring couples them. Process blocks in
    # order, computing the loader's issue of block j from releases of block j - stages, which
    # are known once block j - stages has been processed by every warp.
    pipe = 0.0  # the SM's DRAM pipe: when the last landing finished streaming
    busy_until = [[] for _ in range(4)]  # per scheduler: (start, end) of compute intervals
    for j, (t, u, members) in enumerate(blocks):
        if u == 0 and t > 0:
            # The tile boundary: every warp stores tile t - 1, then Q and (before --list-first)
            # the list of tile t.
            done = max(warp_t) + a.epi
            tile_done[t - 1] = done
            for w in range(warps):
                warp_t[w] = done
            if a.list_first:
                list_ready[t] = (tile_done[t - 2] if t >= 2 else 0.0) + a.build
                q_ready[t] = max(list_ready[t], done) + a.lat
            else:
                q_ready[t] = done + a.lat
                list_ready[t] = done + a.build
        s = j % stages
        issue = max(k_free[s], list_ready[t], last_issue)
        k_land[j] = max(issue + a.lat, pipe + half)
        pipe = k_land[j]
        issue_v = max(v_free[s], issue)
        v_land[j] = max(issue_v + a.lat, pipe + half)
        pipe = v_land[j]
        last_issue = issue_v
        kr, vr = [], []
        for w in range(warps):
            start = max(warp_t[w], q_ready[t], k_land[j])
            if not (members >> w) & 1:
                kr.append(start)
                end = max(start, v_land[j])
                vr.append(end)
                warp_t[w] = end
                continue
            # Compute: half a step for Q K^T, then half for P V once V landed; the scheduler's
            # other warp slows it while their intervals overlap (estimated from the intervals
            # already placed on that scheduler).
            sc = w % 4
            dur = 0.5 * a.step
            overlap = sum(1 for (s0, e0) in busy_until[sc] if s0 < start + dur and e0 > start)
            qk = 0.5 * (a.sched * 2 if overlap else a.step)
            k_end = start + qk
            kr.append(k_end)
            pv_start = max(k_end, v_land[j])
            overlap = sum(1 for (s0, e0) in busy_until[sc] if s0 < pv_start + dur and e0 > pv_start)
            pv = 0.5 * (a.sched * 2 if overlap else a.step)
            end = pv_start + pv
            busy_until[sc].append((start, end))
            if len(busy_until[sc]) > 16:
                busy_until[sc] = busy_until[sc][-16:]
            vr.append(end)
            warp_t[w] = end
        k_free[s] = max(kr)
        v_free[s] = max(vr)
    return max(warp_t) + a.epi, n


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stages", type=int, default=5)
    p.add_argument("--bw", type=float, default=4213.0, help="copy bandwidth, GB/s (all SMs)")
    p.add_argument("--lat", type=float, default=1.5, help="DRAM / TMA latency, us")
    p.add_argument("--step", type=float, default=3.5, help="a 16-row block step of one warp alone, us")
    p.add_argument("--sched", type=float, default=1.8, help="half a step's time with two warps computing, us")
    p.add_argument("--epi", type=float, default=1.5, help="a tile's epilogue, us")
    p.add_argument("--build", type=float, default=3.0, help="a tile's list build, us")
    p.add_argument("--lazy", type=float, default=1.0, help="factor on --step and --sched")
    p.add_argument("--list-first", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ctas", type=int, default=8, help="CTAs simulated per case (the slowest counts)")
    a = p.parse_args()
    a.step *= a.lazy
    a.sched *= a.lazy
    rng = random.Random(a.seed)
    # (B, L, tiles per CTA at Q = 8, G = 16, measured % of copy bandwidth, step 53)
    cases = [(8, 200000, 1, 55), (32, 10000, 1, 61), (32, 200000, 1, 87), (128, 10000, 4, 66), (128, 200000, 4, 90)]
    print("B      L      tiles/CTA  model us  model % (bytes at the SM's share)  measured % (step)")
    for b, length, tiles, measured in cases:
        blocks = (length + 127) // 128
        worst, nblk = 0.0, 0
        for _ in range(a.ctas):
            tl = [union_of_tile(blocks, 8, 16, rng) for _ in range(tiles)]
            if b == 8:  # 32 pairs, 4 splits: a CTA holds a quarter of one union
                u = tl[0]
                tl = [u[: (len(u) + 3) // 4]]
            t, n = simulate_cta(tl, a)
            worst, nblk = max(worst, t), max(nblk, n)
        floor = nblk * 32 * 1024 / (a.bw * 1e3 / 132)
        print(f"{b:<6} {length:<6} {tiles:<10} {worst:8.1f}  {100 * floor / worst:5.0f}%"
              f"                              {measured}%")


if __name__ == "__main__":
    main()
