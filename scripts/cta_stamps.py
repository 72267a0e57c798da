#!/usr/bin/env python3
"""Reads the tile-union kernel's CTA stamps (src/cuda/prefill/sm90/tile_union/stamps.cuh;
MSA_CTA_STAMPS_FILE.<instance>) and prints where a CTA's time goes: the wait for its first list,
the later list waits, the tiles' own time, and the idle time after its last tile until the
kernel's last CTA ends (us); the wide builders' first build step by step; then build and tile
times by union size.

On the GPU machine (docs/performance.md steps 94-95):
  cmake --preset dev -DMSA_CUTLASS_WHEEL=... -DMSA_BUILD_TESTS=OFF -DMSA_BUILD_PYTHON=OFF \
    -DMSA_CUDA_DTYPES=bf16 -DCMAKE_CUDA_FLAGS=-DMSA_CTA_STAMPS -DCMAKE_CXX_FLAGS=-DMSA_CTA_STAMPS
  cmake --build build/dev -j 16 --target msa_cli
  MSA_CTA_STAMPS_FILE=/tmp/st ./build/dev/msa bench prefill --warmup 2 --reps 3 --h-kv 64 --seq 8192
  python3 scripts/cta_stamps.py /tmp/st.wide
"""
import statistics as st
import sys

H, PT, MAXT = 10, 8, 64  # stamps.cuh: kHeader, kPerTile, kMaxTiles
STEPS = ["cleared", "located", "scanned", "chosen", "listed", "chunked"]  # header fields 4-9
LW, LI, QI, TE, BB, BE, LL, EN = range(8)
for path in sys.argv[1:]:
    ctas = []
    for line in open(path):
        v = [int(x) for x in line.split()]
        if v and v[0] != 0:
            ctas.append(v)
    if not ctas:
        print(f"{path}: no stamps")
        continue
    t0 = min(c[0] for c in ctas)
    kend = max(c[1] for c in ctas)
    us = lambda a, b: (b - a) * 1e-3
    rows = []
    by_size = {}
    for c in ctas:
        n = min(c[3], MAXT)
        tiles = [c[H + i * PT:H + (i + 1) * PT] for i in range(n)]
        if not tiles:
            continue
        first_wait = us(c[0], tiles[0][LI])
        later_waits = sum(us(t[LW], t[LI]) for t in tiles[1:])
        last4_waits = sum(us(t[LW], t[LI]) for t in tiles[-4:][1 if len(tiles) <= 4 else 0:])
        tile_time = sum(us(t[LI], t[TE]) for t in tiles)
        idle_end = us(c[1], kend)
        start_late = us(t0, c[0])
        rows.append((start_late, first_wait, us(tiles[0][BB], tiles[0][BE]), later_waits, last4_waits, tile_time,
                     idle_end, n))
        for i, t in enumerate(tiles):
            d = by_size.setdefault(t[EN], [[], [], []])
            d[0].append(us(t[BB], t[BE]))
            d[1].append(us(t[LI], t[TE]))
            if i > 0:
                d[2].append(us(t[LW], t[LI]))
    med = lambda k: st.median(r[k] for r in rows)
    print(f"{path}: {len(ctas)} CTAs, kernel span {us(t0, kend):.1f} us (first CTA start to last CTA end)")
    print(f"  median a CTA: start after the first {med(0):.1f}, first list after {med(1):.1f} (its build {med(2):.1f}),"
          f" later list waits {med(3):.1f} (of them in the last 4 tiles {med(4):.1f}), tiles {med(5):.1f},"
          f" idle at the end {med(6):.1f}; tiles a CTA {med(7):.0f}")
    print(f"  CTA ends after t0: min {min(us(t0, c[1]) for c in ctas):.1f} median {st.median(us(t0, c[1]) for c in ctas):.1f}"
          f" max {us(t0, kend):.1f}")
    # The wide builders' first build, step by step (header fields 4-9, from its start; 0: not
    # stamped, e.g. a narrow instance), then its end.
    firsts = [c for c in ctas if c[3] > 0 and c[4] != 0]
    if firsts:
        marks = []
        for c in firsts:
            b0 = c[H + BB]
            marks.append([us(b0, c[4 + k]) if c[4 + k] else float("nan") for k in range(len(STEPS))] +
                         [us(b0, c[H + BE])])
        cells = [f"{name} {st.median(m[k] for m in marks):.2f}" for k, name in enumerate(STEPS + ["published"])]
        print("  first build, median us from its start to each step's end: " + ", ".join(cells))
    print("  by union entries: tiles, build us, tile us (list to O stored), list wait us (not first tiles)")
    for size in sorted(by_size):
        b, t, w = by_size[size]
        print(f"    {size:4d}: {len(b):5d}  {st.median(b):6.2f}  {st.median(t):6.2f}  {st.median(w) if w else 0:6.2f}")
