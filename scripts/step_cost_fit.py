#!/usr/bin/env python3
"""Per-step costs of the two prefill paths from forced-path runs (docs/performance.md step 85).

A union step is one 128-key block for a tile's whole M tile; the tiles' union bounds are those
the routing takes (core/tile_route.cpp, walk_tile_bounds, one request at the bound: a tile's
union is min(blocks its last query sees, queries x topk)). A block-major step is 128 rows of
edges (G rows an edge; the combine's share included). Dense attention's step is one causal
128 x 128 tile of one head. The times are `msa bench prefill --seq S --path P` run ms and
`scripts/bench_dense.py` cuDNN ms from out/s298.sh (H200; block-major at G = 1 with
--q-per-item 256, at G = 2 with 128, elsewhere the automatic size).
Usage: python3 scripts/step_cost_fit.py
"""

TOPK = 16
# G: (h_kv, plan-free union tile queries, {S: (union ms, block-major ms)}), h_q 64 / 64 / 48 / 40
MEASURED = {
    1: (64, 128, {2048: (0.208, 0.401), 4096: (0.632, 1.029), 8192: (2.118, 2.354),
                  16384: (7.384, 5.067), 32768: (30.686, 10.462)}),
    2: (32, 64, {2048: (0.164, 0.386), 4096: (0.529, 1.003), 8192: (1.982, 2.259),
                 16384: (7.251, 4.772), 32768: (30.015, 9.945)}),
    3: (16, 42, {2048: (0.139, 0.403), 4096: (0.440, 1.054), 8192: (1.477, 1.797),
                 16384: (5.833, 3.839), 32768: (24.075, 7.933)}),
    5: (8, 25, {2048: (0.117, 0.337), 4096: (0.351, 0.878), 8192: (1.227, 1.436),
                16384: (4.531, 3.039), 32768: (19.277, 6.272)}),
}
DENSE_MS = {2048: 0.179, 4096: 0.520, 8192: 1.725, 16384: 7.533, 32768: 29.702}  # h_q 64


def tile_bounds(s, q_per_tile, topk=TOPK):
    """Union blocks and edges per KV head of one causal request of s queries on s keys."""
    unions = edges = 0
    for q0 in range(0, s, q_per_tile):
        q1 = min(s, q0 + q_per_tile)
        unions += min((q1 - 1) // 128 + 1, (q1 - q0) * topk)
        edges += sum(min(topk, q // 128 + 1) for q in range(q0, q1))
    return unions, edges


def main():
    for g, (h_kv, q_per_tile, runs) in MEASURED.items():
        print(f"G = {g} (h_kv {h_kv}, union tiles of {q_per_tile} queries)")
        for s, (union_ms, bm_ms) in runs.items():
            unions, edges = tile_bounds(s, q_per_tile)
            union_steps = h_kv * unions
            bm_steps = h_kv * edges * g / 128
            h_q = h_kv * g
            blocks = s // 128
            dense_steps = h_q * blocks * (blocks + 1) // 2
            dense_ns = DENSE_MS[s] * (h_q / 64) * 1e6 / dense_steps
            print(f"  S {s:6d}: union step {union_ms * 1e6 / union_steps:5.1f} ns, block-major step "
                  f"{bm_ms * 1e6 / bm_steps:5.1f} ns ({bm_steps / dense_steps:4.0%} of the dense tiles), "
                  f"dense step {dense_ns:5.1f} ns")


if __name__ == "__main__":
    main()
