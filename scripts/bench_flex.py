#!/usr/bin/env python3
"""msa's sparse prefill beside PyTorch's FlexAttention on identical inputs: the tile-shared
selection of perf/targets.md (every 128-query tile of a KV head attends its own block, causally,
and the same 15 earlier blocks drawn at random; the first 16 tiles attend every earlier block),
the target ">= 1.5x FlexAttention" measured side by side in one process.

Geometry: one request of S tokens, Hq = 64, Hkv = 4, D = 128, BF16, top-16 blocks of 128.
msa reads a paged K/V cache (pages of 128 tokens in a random permutation) through
msa.SparsePrefill (plan + run per call, as an engine calls it); FlexAttention reads the same
keys and values contiguous ([1, Hkv, S, D], enable_gqa) under a BlockMask built from the same
selection with BlockMask.from_kv_blocks: the 15 earlier blocks as full blocks, the tile's own
block as a partial one under a causal mask_mod. flex_attention is compiled once (torch.compile,
default kernel options) before timing. The two outputs must agree (max |diff| printed and
checked).

Timing, CUDA events, median of --reps calls after --warmup, the implementations alternating
call by call:
  graph: msa's run() and FlexAttention's kernel each captured in a CUDA graph and replayed (the
         method of perf/targets.md; msa's plan() in a graph of its own, reported beside), one
         input set, which the L2 holds at S = 8k for both;
  eager: each call on an idle GPU after an L2 flush and a synchronisation, host gaps included
         (`msa bench prefill`'s eager column);
  busy:  the same call behind a GPU spin of about 1 ms, so the host's enqueue is hidden.
FlexAttention's eager and busy calls are timed with its BlockMask built ahead (kernel only) and
with the BlockMask built in the call (from the selection tensor, as an engine with a fresh
selection would).

    PYTHONPATH=build/gpu/python python3 scripts/bench_flex.py [S ...]   (default 8192 32768)
"""
import argparse
import statistics

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

import msa

H_Q, H_KV, D, TOPK, BLOCK = 64, 4, 128, 16, 128


def tile_shared_topk(s: int, gen: torch.Generator) -> torch.Tensor:
    """[H_KV, S, TOPK] int32, -1 padded: the tile-shared selection (bench/workload.cpp's form)."""
    tiles = s // BLOCK
    ids = torch.full((H_KV, tiles, TOPK), -1, dtype=torch.int32)
    for h in range(H_KV):
        for t in range(tiles):
            if t + 1 <= TOPK:
                picks = list(range(t))
            else:
                picks = torch.randperm(t, generator=gen)[:TOPK - 1].tolist()
            row = picks + [t]
            ids[h, t, :len(row)] = torch.tensor(row, dtype=torch.int32)
    return ids.repeat_interleave(BLOCK, dim=1).contiguous()  # every query of a tile: the tile's row


def causal(b, h, q_idx, kv_idx):
    """The diagonal block's mask (one function object, so the compiled kernel is reused)."""
    return q_idx >= kv_idx


def block_mask_of(topk: torch.Tensor, s: int) -> BlockMask:
    """FlexAttention's BlockMask of a tile-shared selection on the query heads (GQA: a KV head's
    selection on each of its query heads): earlier blocks full, the diagonal block causal."""
    tiles = s // BLOCK
    rows = topk[:, ::BLOCK, :]  # [H_KV, tiles, TOPK], one row a tile
    diag = torch.arange(tiles, device=topk.device, dtype=torch.int32).view(1, tiles, 1)
    full = (rows >= 0) & (rows != diag)
    full_num = full.sum(-1, dtype=torch.int32)
    # Full blocks first (their order is free), then padding: sort the kept ids ahead of -1s.
    big = torch.iinfo(torch.int32).max
    full_ids = torch.where(full, rows, torch.full_like(rows, big)).sort(-1).values
    full_ids = torch.where(full_ids == big, torch.zeros_like(full_ids), full_ids)
    full_idx = torch.zeros(H_KV, tiles, tiles, dtype=torch.int32, device=topk.device)  # KV blocks = query tiles
    n = min(TOPK, tiles)
    full_idx[..., :n] = full_ids[..., :n]
    part_num = torch.ones(H_KV, tiles, dtype=torch.int32, device=topk.device)
    part_idx = torch.zeros(H_KV, tiles, tiles, dtype=torch.int32, device=topk.device)
    part_idx[..., 0] = diag.view(1, tiles)
    g = H_Q // H_KV

    def heads(x):  # [H_KV, ...] -> [1, H_Q, ...]
        return x.repeat_interleave(g, dim=0).unsqueeze(0).contiguous()

    return BlockMask.from_kv_blocks(heads(part_num), heads(part_idx), heads(full_num), heads(full_idx),
                                    BLOCK_SIZE=BLOCK, mask_mod=causal)


def timed_calls(calls, flush, warmup, reps, spin_cycles):
    """Each call's ms in `calls` (alternating), rep by rep, each after a synchronisation: behind
    an L2 flush (flush set) and a GPU spin of spin_cycles (0: none)."""
    times = [[] for _ in calls]
    for i in range(warmup + reps):
        for j, fn in enumerate(calls):
            if flush is not None:
                flush.fill_(i & 0xff)
            torch.cuda.synchronize()
            if spin_cycles:
                torch.cuda._sleep(spin_cycles)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            if i >= warmup:
                times[j].append(start.elapsed_time(stop))
    return times


def timed(calls, flush, warmup, reps, spin_cycles):
    """Median ms of each call in `calls`, timed as timed_calls does."""
    return [statistics.median(t) for t in timed_calls(calls, flush, warmup, reps, spin_cycles)]


def graph_of(fn):
    """fn captured in a CUDA graph (after a warm-up call on a side stream, as capture wants)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def replayed(graphs, warmup, reps):
    """Median ms of each graph's replays, the graphs alternating."""
    return timed([g.replay for g in graphs], None, warmup, reps, 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("seq", type=int, nargs="*", default=[8192, 32768])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    dev = "cuda"
    props = torch.cuda.get_device_properties(0)
    print(f"msa vs FlexAttention, tile-shared, {props.name}, torch {torch.__version__}: "
          f"h_q {H_Q}, h_kv {H_KV}, d {D}, bf16, top-{TOPK} blocks of {BLOCK}")
    flush = torch.empty(2 * props.L2_cache_size, dtype=torch.uint8, device=dev)
    spin = 2_000_000  # GPU cycles: about 1 ms
    flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    for s in args.seq:
        if s % BLOCK:
            raise SystemExit(f"S = {s}: a multiple of {BLOCK} is needed here")
        gen = torch.Generator().manual_seed(s)
        dgen = torch.Generator(device=dev).manual_seed(s)
        q = torch.randn(s, H_Q, D, device=dev, dtype=torch.bfloat16, generator=dgen)
        k = torch.randn(s, H_KV, D, device=dev, dtype=torch.bfloat16, generator=dgen)
        v = torch.randn(s, H_KV, D, device=dev, dtype=torch.bfloat16, generator=dgen)
        topk_cpu = tile_shared_topk(s, gen)
        topk = topk_cpu.to(dev)
        # msa: paged K/V, pages of BLOCK tokens at a random permutation of the cache's slots.
        pages = s // BLOCK
        perm = torch.randperm(pages, generator=gen).to(torch.int32)
        k_cache = torch.empty(pages, H_KV, BLOCK, D, device=dev, dtype=torch.bfloat16)
        v_cache = torch.empty_like(k_cache)
        k_cache[perm.to(dev).long()] = k.view(pages, BLOCK, H_KV, D).transpose(1, 2)
        v_cache[perm.to(dev).long()] = v.view(pages, BLOCK, H_KV, D).transpose(1, 2)
        page_table = perm.view(1, pages).to(dev)
        cu_q = torch.tensor([0, s], dtype=torch.int32, device=dev)
        k_len = torch.tensor([s], dtype=torch.int32, device=dev)
        out = torch.empty(s, H_Q, D, device=dev, dtype=torch.bfloat16)
        op = msa.SparsePrefill(H_Q, H_KV, D, TOPK, backend="cuda")

        def msa_call():
            op.plan(cu_q, k_len, topk, max_k_len=s)
            op.run(q, k_cache, v_cache, out, cu_q, k_len, topk, page_table=page_table)

        # FlexAttention: [1, H, S, D] tensors, the same values.
        qf = q.permute(1, 0, 2).unsqueeze(0).contiguous()
        kf = k.permute(1, 0, 2).unsqueeze(0).contiguous()
        vf = v.permute(1, 0, 2).unsqueeze(0).contiguous()
        mask = block_mask_of(topk, s)
        holder = {}

        def flex_call():
            holder["o"] = flex(qf, kf, vf, block_mask=mask, enable_gqa=True)

        def flex_mask_call():
            holder["o"] = flex(qf, kf, vf, block_mask=block_mask_of(topk, s), enable_gqa=True)

        msa_call()
        flex_call()
        torch.cuda.synchronize()
        ref = holder["o"].squeeze(0).permute(1, 0, 2).float()
        diff = (out.float() - ref).abs().max().item()
        scale = ref.abs().max().item()
        if not diff <= 2e-2 or scale == 0.0:
            raise SystemExit(f"S = {s}: msa and FlexAttention disagree: max |diff| {diff} (max |ref| {scale})")
        op.plan(cu_q, k_len, topk, max_k_len=s)
        graphs = [graph_of(lambda: op.plan(cu_q, k_len, topk, max_k_len=s)),
                  graph_of(lambda: op.run(q, k_cache, v_cache, out, cu_q, k_len, topk, page_table=page_table)),
                  graph_of(flex_call)]
        graph = replayed(graphs, args.warmup, args.reps)
        diff_graph = (out.float() - holder["o"].squeeze(0).permute(1, 0, 2).float()).abs().max().item()
        if not diff_graph <= 2e-2:
            raise SystemExit(f"S = {s}: the graphs' outputs disagree: max |diff| {diff_graph}")
        calls = [msa_call, flex_call, flex_mask_call]
        eager = timed(calls, flush, args.warmup, args.reps, 0)
        busy = timed(calls, flush, args.warmup, args.reps, spin)
        rows.append((s, graph, eager, busy))
        print(f"S = {s}: max |msa - flex| {diff:.2e} (max |out| {scale:.2f}); graph ms msa plan {graph[0]:.3f} "
              f"run {graph[1]:.3f} flex {graph[2]:.3f}; eager ms msa {eager[0]:.3f} flex {eager[1]:.3f} "
              f"flex+mask {eager[2]:.3f}; busy ms msa {busy[0]:.3f} flex {busy[1]:.3f} flex+mask {busy[2]:.3f}",
              flush=True)
        del q, k, v, k_cache, v_cache, out, qf, kf, vf, mask, holder, op, graphs
        torch.cuda.empty_cache()
    print("| S | graph: msa run (plan) ms | flex ms | flex / msa run | flex / msa plan + run | eager: msa ms | flex ms "
          "| flex / msa | flex + mask / msa | busy: msa ms | flex ms | flex / msa |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s, g, e, b in rows:
        print(f"| {s} | {g[1]:.3f} ({g[0]:.3f}) | {g[2]:.3f} | {g[2] / g[1]:.2f}x | {g[2] / (g[0] + g[1]):.2f}x "
              f"| {e[0]:.3f} | {e[1]:.3f} | {e[1] / e[0]:.2f}x | {e[2] / e[0]:.2f}x | {b[0]:.3f} | {b[1]:.3f} "
              f"| {b[1] / b[0]:.2f}x |")


if __name__ == "__main__":
    main()
