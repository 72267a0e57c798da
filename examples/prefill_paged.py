"""Chunked sparse prefill on a paged KV cache with msa, checked against PyTorch's
scaled_dot_product_attention restricted to the selected blocks.

    pip install .            # from the repository root (builds the CUDA kernels when nvcc is found)
    python examples/prefill_paged.py

Three requests append new tokens to cached prefixes; every query picks, per KV head, its top-16
blocks of 128 tokens (random here, by the MSA rule: earlier blocks, then its own block). msa plans
the selection once and runs the attention; the check runs SDPA with a mask that keeps the
selected blocks' visible tokens.
"""

import math

import torch

import msa

H_Q, H_KV, D, TOPK, PAGE = 64, 4, 128, 16, 64
REQUESTS = [(1000, 5000), (200, 3000), (37, 9000)]  # (new tokens, tokens in the cache after them)
dev, dtype = "cuda", torch.bfloat16
torch.manual_seed(0)

# A paged cache in the token-major (NHD) layout: [num_pages, PAGE, H_KV, D], pages shuffled.
pages = [math.ceil(k / PAGE) for _, k in REQUESTS]
perm = torch.randperm(sum(pages), device=dev).to(torch.int32)
page_table = torch.zeros(len(REQUESTS), max(pages), dtype=torch.int32, device=dev)
for b, start in enumerate([0] + list(torch.tensor(pages).cumsum(0)[:-1])):
    page_table[b, : pages[b]] = perm[int(start) : int(start) + pages[b]]
k_cache = torch.randn(sum(pages), PAGE, H_KV, D, device=dev, dtype=dtype) * 0.25
v_cache = torch.randn(sum(pages), PAGE, H_KV, D, device=dev, dtype=dtype) * 0.25

cu_q = torch.tensor([0] + [q for q, _ in REQUESTS], device=dev).cumsum(0).to(torch.int32)
cu_k = torch.tensor([0] + [k for _, k in REQUESTS], device=dev).cumsum(0).to(torch.int32)
q = torch.randn(int(cu_q[-1]), H_Q, D, device=dev, dtype=dtype) * 0.25

# Top-k [H_KV, total_q, TOPK]: up to 15 random earlier blocks, then the local block, then -1.
topk = torch.full((H_KV, int(cu_q[-1]), TOPK), -1, dtype=torch.int32, device=dev)
for b, (ql, kl) in enumerate(REQUESTS):
    local = (kl - ql + torch.arange(ql, device=dev)) // 128
    score = torch.rand(H_KV, ql, math.ceil(kl / 128), device=dev)
    score[..., torch.arange(score.shape[-1], device=dev)[None, :] >= local[:, None]] = -1
    best, ids = score.topk(TOPK - 1, dim=-1)
    ids = torch.where(best >= 0, ids, -1)
    row = torch.cat([ids, torch.full_like(ids[..., :1], -1)], dim=-1)
    row.scatter_(-1, (ids >= 0).sum(-1, keepdim=True), local.expand(H_KV, ql)[..., None])
    topk[:, int(cu_q[b]) : int(cu_q[b + 1])] = row.to(torch.int32)

wrapper = msa.BatchPrefillWithPagedKVCacheWrapper(kv_layout="NHD")
wrapper.plan(topk, cu_q, cu_k, page_table, num_q_heads=H_Q, num_kv_heads=H_KV, total_k=int(cu_k[-1]),
             total_rows=sum(math.ceil(k / 128) for _, k in REQUESTS), max_seqlen_q=max(q for q, _ in REQUESTS),
             max_seqlen_k=max(k for _, k in REQUESTS))
out, lse = wrapper.run(q, (k_cache, v_cache), return_lse=True)

# The check: SDPA over each request's tokens, masked to the selected blocks' visible tokens.
worst = 0.0
for b, (ql, kl) in enumerate(REQUESTS):
    slots = torch.arange(kl, device=dev)
    k = k_cache[page_table[b, slots // PAGE].long(), slots % PAGE].transpose(0, 1)  # [H_KV, kl, D]
    v = v_cache[page_table[b, slots // PAGE].long(), slots % PAGE].transpose(0, 1)
    pos = kl - ql + torch.arange(ql, device=dev)
    ids = topk[:, int(cu_q[b]) : int(cu_q[b + 1])].long()  # [H_KV, ql, TOPK]
    chosen = torch.zeros(H_KV, ql, math.ceil(kl / 128) + 1, dtype=torch.bool, device=dev)
    chosen.scatter_(-1, torch.where(ids >= 0, ids, chosen.shape[-1] - 1), True)
    mask = chosen[..., slots // 128] & (slots[None, None, :] <= pos[None, :, None])  # [H_KV, ql, kl]
    g = H_Q // H_KV
    ref = torch.nn.functional.scaled_dot_product_attention(
        q[int(cu_q[b]) : int(cu_q[b + 1])].transpose(0, 1).float(),
        k.float().repeat_interleave(g, 0), v.float().repeat_interleave(g, 0),
        attn_mask=mask.repeat_interleave(g, 0))
    worst = max(worst, (out[int(cu_q[b]) : int(cu_q[b + 1])].float() - ref.transpose(0, 1)).abs().max().item())

print(f"msa sparse prefill: {int(cu_q[-1])} queries, {H_Q} heads, top-{TOPK} of 128-token blocks, "
      f"page {PAGE}; max |msa - SDPA on the selected blocks| = {worst:.2e}")
assert worst < 2e-2, "msa and SDPA disagree"
print("OK")
