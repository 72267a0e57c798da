"""Host cost of the Python layer: how long the MSA prefill wrapper's plan() and run() take on the
calling thread per call, the extension's own calls beside them, and an eager loop of plan() +
run() with the GPU in it, against the GPU time of run() replayed in a CUDA graph. Small chunks
(where a serving engine feels fixed costs most) and a larger one.

    PYTHONPATH=build/gpu/python python3 scripts/bench_python_overhead.py

Host times are the best of three means of 200 back-to-back calls that only enqueue work,
measured after the GPU has caught up: what the calling thread spends per call (argument
checks, DLPack imports, stream lookup, the C++ launch path). "eager us" is the wall time per
plan() + run() of 500 in a row, synchronised at the end: the host or the GPU, whichever is
slower, as an engine that calls prefill eagerly sees it.
"""

import math
import time

import torch

import msa

DEV = "cuda"


def problem(q_len, k_len, h_q=64, h_kv=4, topk=16, page=128):
    torch.manual_seed(0)
    pages = math.ceil(k_len / page)
    k_cache = torch.randn(pages, page, h_kv, 128, device=DEV, dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    table = torch.arange(pages, dtype=torch.int32, device=DEV)[None]
    cu_q = torch.tensor([0, q_len], dtype=torch.int32, device=DEV)
    cu_k = torch.tensor([0, k_len], dtype=torch.int32, device=DEV)
    local = (k_len - q_len + torch.arange(q_len, device=DEV)) // 128
    r = torch.rand(h_kv, q_len, pages, device=DEV)
    r[..., torch.arange(pages, device=DEV)[None, :] >= local[:, None]] = -1
    best, ids = r.topk(min(topk - 1, pages), dim=-1)
    ids = torch.where(best >= 0, ids, -1)
    row = torch.full((h_kv, q_len, topk), -1, dtype=torch.int64, device=DEV)
    row[..., : ids.shape[-1]] = ids
    row.scatter_(-1, (ids >= 0).sum(-1, keepdim=True), local.expand(h_kv, q_len)[..., None])
    q = torch.randn(q_len, h_q, 128, device=DEV, dtype=torch.bfloat16)
    plan_args = dict(num_q_heads=h_q, num_kv_heads=h_kv, total_k=k_len, total_rows=pages, max_seqlen_q=q_len,
                     max_seqlen_k=k_len)
    return row.to(torch.int32), cu_q, cu_k, table, q, (k_cache, v_cache), plan_args


def host_us(fn, calls=200, rounds=3):
    """The best of `rounds` means of `calls` back-to-back calls, each round after the GPU caught up."""
    fn()
    best = math.inf
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    torch.cuda.synchronize()
    return best


def eager_us(fn, calls=500):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def graph_us(fn, replays=200):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        g.replay()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / replays * 1e3


if __name__ == "__main__":
    print(f"{'case':<20} {'plan host us':>13} {'(extension)':>12} {'run host us':>12} {'(extension)':>12} "
          f"{'plan+run host':>14} {'eager us':>9} {'run GPU us (graph)':>19}")
    for q_len, k_len in ((16, 16_384), (171, 55_000), (2048, 65_536), (8192, 8192)):
        topk, cu_q, cu_k, table, q, kv, args = problem(q_len, k_len)
        w = msa.BatchPrefillWithPagedKVCacheWrapper(kv_layout="NHD")
        w.plan(topk, cu_q, cu_k, table, **args)

        def plan():
            w.plan(topk, cu_q, cu_k, table, **args)

        def run():
            w.run(q, kv)

        def both():
            plan()
            run()

        plan_host, run_host, both_host = host_us(plan), host_us(run), host_us(both)
        # The extension object alone, with the arrays the wrapper passes: the C++ host path plus
        # the DLPack imports, without the wrapper's Python.
        op, lengths, stream = w._op, w._k_len, torch.cuda.current_stream().cuda_stream
        k_hnd, v_hnd = (c.swapaxes(1, 2) for c in kv)
        ext_plan = host_us(lambda: op.plan(cu_q, lengths, topk, args["max_seqlen_k"], stream))
        ext_run = host_us(lambda: op.run(q, k_hnd, v_hnd, w._out, cu_q, lengths, topk, table, None, None, None, stream))
        eager = eager_us(both)
        run_gpu = graph_us(run)
        print(f"{f'q {q_len} on k {k_len}':<20} {plan_host:>13.1f} {ext_plan:>12.1f} {run_host:>12.1f} "
              f"{ext_run:>12.1f} {both_host:>14.1f} {eager:>9.1f} {run_gpu:>19.1f}")
