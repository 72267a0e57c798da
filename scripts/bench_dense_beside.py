#!/usr/bin/env python3
"""msa's sparse prefill beside dense causal attention (cuDNN through PyTorch SDPA) in one
process, the two alternating call by call, so that both run in the same state of the GPU.

Why alternate: under sustained load an H200 lowers its SM clock to stay under its power cap
(docs/performance.md step 94). cuDNN's causal S = 8k call takes about 1.71 ms in its first
twenty calls after an idle GPU and 1.89-1.96 ms from then on. Two implementations timed one
after the other therefore compare different clocks; alternating calls share them.

Geometry: one request of S tokens, h_q 64, h_kv 64 / G, D 128, BF16, top-16 blocks of 128
drawn by `msa bench prefill`'s random rule (each query: its own block and 15 distinct earlier
blocks, uniform; every earlier block where it has fewer than 16). msa reads a paged K/V cache
(pages of 128 tokens at a random permutation of the slots) through msa.SparsePrefill on the
automatic path, plan + run per call; cuDNN reads Q/K/V as [1, 64, S, D] with K/V expanded to
the query heads, as scripts/bench_dense.py sets it up.

Modes, each --reps calls per implementation after --warmup, medians of CUDA-event times:
  graph: msa's run() and cuDNN's call each captured in a CUDA graph and replayed;
  eager: msa's plan() + run() and cuDNN's call on an idle GPU, each after an L2 flush and a
         synchronisation (`msa bench prefill`'s eager column);
  busy:  the same calls behind a GPU spin of about 1 ms (the host's enqueue hidden).
The last column of each mode is the median over calls of msa's time over the cuDNN call
beside it.

    PYTHONPATH=build/gpu/python python3 scripts/bench_dense_beside.py [--g 1 2] [S ...]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import msa
from bench_flex import graph_of, timed_calls  # this directory's (python3 scripts/...)

H_Q, D, TOPK, BLOCK = 64, 128, 16, 128


def random_topk(s: int, h_kv: int, gen: torch.Generator) -> torch.Tensor:
    """[h_kv, S, TOPK] int32, -1 padded: 15 distinct earlier blocks (all where fewer), then the
    query's own block."""
    blocks = (s + BLOCK - 1) // BLOCK
    local = (torch.arange(s) // BLOCK).view(1, s, 1)
    cols = torch.arange(blocks).view(1, 1, blocks)
    score = torch.rand(h_kv, s, blocks, generator=gen).masked_fill(cols >= local, -1.0)
    want = min(TOPK - 1, blocks)
    val, idx = score.topk(want, dim=-1)
    idx = torch.where(val >= 0, idx, torch.full_like(idx, -1)).to(torch.int32)
    ids = torch.full((h_kv, s, TOPK), -1, dtype=torch.int32)
    ids[..., :want] = idx
    # Rows with fewer than 15 earlier blocks: the valid picks first, then the local block.
    n = (local.squeeze(-1).clamp(max=want)).expand(h_kv, s)
    ids.scatter_(2, n.unsqueeze(-1).long(), local.expand(h_kv, s, 1).to(torch.int32))
    # The rule, checked: min(16, local + 1) ids, the last the local block, the others distinct
    # and earlier.
    count = (ids >= 0).sum(-1)
    pos = torch.arange(TOPK).view(1, 1, TOPK)
    loc = local.squeeze(-1).expand(h_kv, s)
    earlier = pos < (count - 1).unsqueeze(-1)
    srt = torch.where(earlier, ids, -1 - pos).sort(-1).values  # padding made distinct and negative
    ok = ((count == (loc + 1).clamp(max=TOPK)).all()
          and (ids.gather(2, (count - 1).unsqueeze(-1).long()).squeeze(-1) == loc).all()
          and (torch.where(earlier, ids < loc.unsqueeze(-1), True)).all()
          and (srt[..., 1:] != srt[..., :-1]).all())
    if not ok:
        raise SystemExit(f"random_topk: a row breaks the selection rule (S = {s}, h_kv = {h_kv})")
    return ids.contiguous()


class Case:
    """One (G, S) case's inputs on the GPU and its three calls: msa's run() (`msa_run`), msa's
    plan() + run() (`msa_call`) and cuDNN's (`dense_call`)."""

    def __init__(self, g: int, s: int, dev: str = "cuda"):
        if H_Q % g:
            raise SystemExit(f"G = {g} does not divide h_q {H_Q}")
        h_kv = H_Q // g
        gen = torch.Generator().manual_seed(s * 131 + g)
        dgen = torch.Generator(device=dev).manual_seed(s * 131 + g)
        q = torch.randn(s, H_Q, D, device=dev, dtype=torch.bfloat16, generator=dgen) * 0.25
        k = torch.randn(s, h_kv, D, device=dev, dtype=torch.bfloat16, generator=dgen) * 0.25
        v = torch.randn(s, h_kv, D, device=dev, dtype=torch.bfloat16, generator=dgen) * 0.25
        self.topk = random_topk(s, h_kv, gen).to(dev)
        # msa: paged K/V, pages of BLOCK tokens at a random permutation of the cache's slots.
        pages = (s + BLOCK - 1) // BLOCK
        perm = torch.randperm(pages, generator=gen).to(dev)
        self.k_cache = torch.zeros(pages, h_kv, BLOCK, D, device=dev, dtype=torch.bfloat16)
        self.v_cache = torch.zeros_like(self.k_cache)
        for src, cache in ((k, self.k_cache), (v, self.v_cache)):
            padded = torch.zeros(pages * BLOCK, h_kv, D, device=dev, dtype=torch.bfloat16)
            padded[:s] = src
            cache[perm] = padded.view(pages, BLOCK, h_kv, D).transpose(1, 2)
        self.page_table = perm.to(torch.int32).view(1, pages)
        self.q, self.s = q, s
        self.cu_q = torch.tensor([0, s], dtype=torch.int32, device=dev)
        self.k_len = torch.tensor([s], dtype=torch.int32, device=dev)
        self.out = torch.empty(s, H_Q, D, device=dev, dtype=torch.bfloat16)
        self.op = msa.SparsePrefill(H_Q, h_kv, D, TOPK, backend="cuda")
        # cuDNN: [1, H_Q, S, D], K/V expanded to the query heads.
        self.qd = q.permute(1, 0, 2).unsqueeze(0).contiguous()
        self.kd = k.repeat_interleave(g, dim=1).permute(1, 0, 2).unsqueeze(0).contiguous()
        self.vd = v.repeat_interleave(g, dim=1).permute(1, 0, 2).unsqueeze(0).contiguous()
        self.dense_out = None
        self.msa_call()
        self.dense_call()
        torch.cuda.synchronize()
        if not torch.isfinite(self.out.float()).all() or self.out.float().abs().max().item() == 0.0:
            raise SystemExit(f"G = {g} S = {s}: msa's output is not finite or all zero")
        if s <= TOPK * BLOCK:  # every query chose every block it sees: the sparse call is dense
            ref = self.dense_out.squeeze(0).permute(1, 0, 2).float()
            diff = (self.out.float() - ref).abs().max().item()
            if not diff <= 2e-2:
                raise SystemExit(f"G = {g} S = {s}: msa and cuDNN disagree: max |diff| {diff}")

    def msa_run(self):
        self.op.run(self.q, self.k_cache, self.v_cache, self.out, self.cu_q, self.k_len, self.topk,
                    page_table=self.page_table)

    def msa_call(self):
        self.op.plan(self.cu_q, self.k_len, self.topk, max_k_len=self.s)
        self.msa_run()

    def dense_call(self):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            self.dense_out = F.scaled_dot_product_attention(self.qd, self.kd, self.vd, is_causal=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("seq", type=int, nargs="*", default=[2048, 4096, 6000, 8192])
    ap.add_argument("--g", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args()
    print(f"msa (random top-{TOPK}) beside cuDNN dense causal, alternating calls, "
          f"{torch.cuda.get_device_name()}, h_q {H_Q}, d {D}, bf16; ms medians, ratio = median of msa / cuDNN per call")
    print(f"{'G':>2} {'S':>6}  {'graph msa':>9} {'cuDNN':>7} {'ratio':>5}  {'eager msa':>9} {'cuDNN':>7} {'ratio':>5}"
          f"  {'busy msa':>9} {'cuDNN':>7} {'ratio':>5}")
    spin = 2_000_000  # GPU cycles: about 1 ms
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    for g in args.g:
        for s in args.seq:
            c = Case(g, s)
            graphs = [graph_of(c.msa_run), graph_of(c.dense_call)]
            cells = []
            for calls, fl, spin_cycles in (([x.replay for x in graphs], None, 0), ([c.msa_call, c.dense_call], flush, 0),
                                           ([c.msa_call, c.dense_call], flush, spin)):
                ours, dense = timed_calls(calls, fl, args.warmup, args.reps, spin_cycles)
                ratio = statistics.median(a / b for a, b in zip(ours, dense))
                cells.append(f"{statistics.median(ours):9.3f} {statistics.median(dense):7.3f} {ratio:5.2f}")
            print(f"{g:2d} {s:6d}  " + "  ".join(cells), flush=True)
            del c, graphs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
