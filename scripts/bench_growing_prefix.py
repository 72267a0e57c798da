#!/usr/bin/env python3
"""A chunked prefill as a serving engine runs it: one prompt in chunks of --chunk new tokens, each
chunk attending its prefix, which grows by a chunk with every call; random top-16 selections by
the MSA rule; plan() + run() called eagerly with no synchronisation between calls. Each call's
workspace need grows a little with its prefix (the plan's rows), so this times what a benchmark
of one fixed shape never sees: the operators' own workspace growing over the sequence.

Three ways, each over the whole sequence on a fresh object, rounds alternating:
  owned:   msa.SparsePrefill with its own workspace (allocated in plan() as needed);
  caller:  msa.SparsePrefill with one caller workspace sized for the last call (no allocation);
  wrapper: msa.BatchPrefillWithPagedKVCacheWrapper with its own workspace.
Per call: the sequence's wall time over its calls (one synchronisation at the end), the lowest
of --rounds rounds. h_q 64, h_kv 4, d 128, bf16, pages of 128 tokens in a random order.

    PYTHONPATH=build/gpu/python python3 scripts/bench_growing_prefix.py [--chunk 2048] [--start 16384] [--calls 32]
"""
import argparse
import time

import torch

import msa

H_Q, H_KV, D, TOPK, BLOCK = 64, 4, 128, 16, 128


def selection(prefix: int, chunk: int, gen: torch.Generator) -> torch.Tensor:
    """[H_KV, chunk, TOPK] int32: per (head, query) up to 15 distinct random earlier blocks, then
    the query's own block, -1 after."""
    pos = prefix + torch.arange(chunk, device="cuda")
    local = pos // BLOCK
    blocks = int(local[-1]) + 1
    r = torch.rand(H_KV, chunk, blocks, device="cuda", generator=gen)
    r = r.masked_fill(torch.arange(blocks, device="cuda")[None, None, :] >= local[None, :, None], -1.0)
    take = min(TOPK - 1, blocks)
    vals, idx = r.topk(take, dim=-1)
    ids = torch.full((H_KV, chunk, TOPK), -1, dtype=torch.int64, device="cuda")
    ids[..., :take] = torch.where(vals >= 0, idx, -1)
    count = (ids >= 0).sum(-1, keepdim=True)
    ids.scatter_(-1, count, local.expand(H_KV, chunk).unsqueeze(-1))
    return ids.to(torch.int32).contiguous()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunk", type=int, default=2048)
    ap.add_argument("--start", type=int, default=16384, help="the first chunk's prefix")
    ap.add_argument("--calls", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    chunk, start, calls = args.chunk, args.start, args.calls
    total = start + chunk * calls
    pages = (total + BLOCK - 1) // BLOCK
    gen = torch.Generator(device="cuda").manual_seed(0)
    k_cache = torch.randn(pages, H_KV, BLOCK, D, device="cuda", generator=gen).to(torch.bfloat16)
    v_cache = torch.randn(pages, H_KV, BLOCK, D, device="cuda", generator=gen).to(torch.bfloat16)
    table = torch.randperm(pages, device="cuda", generator=gen).to(torch.int32).view(1, pages)
    q = (torch.randn(chunk, H_Q, D, device="cuda", generator=gen) * 0.25).to(torch.bfloat16)
    out = torch.empty_like(q)
    steps = []  # (cu_q, k_len, cu_k, k, topk) per call, made before any timing
    for i in range(calls):
        prefix = start + i * chunk
        k = prefix + chunk
        steps.append((torch.tensor([0, chunk], dtype=torch.int32, device="cuda"),
                       torch.tensor([k], dtype=torch.int32, device="cuda"),
                       torch.tensor([0, k], dtype=torch.int32, device="cuda"), k, selection(prefix, chunk, gen)))
    torch.cuda.synchronize()
    need = msa.SparsePrefill(H_Q, H_KV, D, TOPK, backend="cuda").workspace_bytes(1, chunk, total)
    workspace = torch.empty(need, dtype=torch.uint8, device="cuda")

    def sequence(way: str) -> float:
        if way == "wrapper":
            w = msa.BatchPrefillWithPagedKVCacheWrapper()
        else:
            op = msa.SparsePrefill(H_Q, H_KV, D, TOPK, backend="cuda")
            if way == "caller":
                op.set_workspace(workspace)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for cu_q, k_len, cu_k, k, topk in steps:
            if way == "wrapper":
                w.plan(topk, cu_q, cu_k, table, num_q_heads=H_Q, num_kv_heads=H_KV, total_k=k,
                       total_rows=(k + BLOCK - 1) // BLOCK, max_seqlen_q=chunk, max_seqlen_k=k, head_dim=D,
                       q_data_type=torch.bfloat16)
                w.run(q, (k_cache, v_cache), out=out)
            else:
                op.plan(cu_q, k_len, topk, max_k_len=k)
                op.run(q, k_cache, v_cache, out, cu_q, k_len, topk, page_table=table)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3 / len(steps)

    ways = ("owned", "caller", "wrapper")
    for way in ways:  # warm-up: kernels loaded, PyTorch's allocator primed
        sequence(way)
    best = {way: float("inf") for way in ways}
    for _ in range(args.rounds):
        for way in ways:
            best[way] = min(best[way], sequence(way))
    print(f"chunked prefill on {torch.cuda.get_device_name()}: {calls} chunks of {chunk} new tokens, prefixes "
          f"{start} to {start + chunk * (calls - 1)}; workspace need {need / 2**20:.1f} MiB at the last call")
    print("| way | ms per call | / caller |")
    print("|---|---|---|")
    for way in ways:
        print(f"| {way} | {best[way]:.3f} | {best[way] / best['caller']:.3f} |")


if __name__ == "__main__":
    main()
