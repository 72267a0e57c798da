"""Times msa.Indexer and msa.TopK on the CUDA backend, each alone and back to back, and the fused
msa.IndexerTopK (plan + run per call), eagerly (as an engine calls them), mean of 10 runs after 3
warm-up runs (CUDA events); the fused ids must equal the back-to-back ones. Index queries and
keys are randn * 0.25 in bf16 (and, for three cases, FP8 E4M3: MSA's q8kv8), h_i = 4, d = 128, a paged index-K cache (pages of 128, shuffled),
top-16. Cases: one prefill request of S tokens; a chunked batch; the decode form (B requests of
Q = 8 queries at the ends of L-token sequences). Prints ms, the useful TFLOP/s of the indexer
(2 * d * h_i per visible (query, key) pair) and the GB/s of the index keys it must read.

    PYTHONPATH=build/gpu/python python3 scripts/bench_selection.py [--quick]
"""
import sys

import torch

import msa

H_I, D, TOPK, PAGE = 4, 128, 16, 128


def case(requests, dtype, seed=0):
    """Device tensors of one call: requests = [(q_len, k_len), ...]; index tensors in `dtype`."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q_lens = [q for q, _ in requests]
    k_lens = [k for _, k in requests]
    total_q = sum(q_lens)
    pages_of = [(k + PAGE - 1) // PAGE for k in k_lens]
    num_pages = sum(pages_of)
    perm = torch.randperm(num_pages, device="cuda", generator=g).to(torch.int32)
    table = torch.zeros(len(requests), max(pages_of), dtype=torch.int32, device="cuda")
    used = 0
    for b, n in enumerate(pages_of):
        table[b, :n] = perm[used:used + n]
        used += n
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32, device="cuda")
    kl = torch.tensor(k_lens, dtype=torch.int32, device="cuda")
    index_q = (torch.randn(total_q, H_I, D, device="cuda", generator=g) * 0.25).to(dtype)
    index_k = (torch.randn(num_pages, 1, PAGE, D, device="cuda", generator=g) * 0.25).to(dtype)
    cols = max(pages_of) * PAGE // 128
    scores = torch.empty(H_I, total_q, cols, device="cuda")
    ids = torch.empty(H_I, total_q, TOPK, dtype=torch.int32, device="cuda")
    pairs = sum(sum(k - q + i + 1 for i in range(q)) if q < 4096 else q * (2 * (k - q) + q + 1) // 2
                for q, k in requests)
    key_bytes = sum(k_lens) * D * index_k.element_size()
    return cu, kl, index_q, index_k, table, scores, ids, pairs, key_bytes


def timed(fn, n=10):
    for _ in range(3):
        fn()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    e0.record()
    for _ in range(n):
        fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / n


def main():
    quick = "--quick" in sys.argv
    bf16, fp8 = torch.bfloat16, torch.float8_e4m3fn
    cases = [
        ("prefill S=8k", [(8192, 8192)], bf16),
        ("prefill S=32k", [(32768, 32768)], bf16),
        ("chunked 4 x 2k on 16k-64k", [(2048, 16384), (2048, 32768), (2048, 49152), (2048, 65536)], bf16),
        ("chunk 171 on 55k", [(171, 55000)], bf16),
        ("decode B=32 L=100k Q=8", [(8, 100000)] * 32, bf16),
        ("fp8 prefill S=32k", [(32768, 32768)], fp8),
        ("fp8 decode B=32 L=100k Q=8", [(8, 100000)] * 32, fp8),
        ("fp8 decode B=128 L=10k Q=8", [(8, 10000)] * 128, fp8),
        ("decode B=128 L=10k Q=8", [(8, 10000)] * 128, bf16),
    ]
    if not quick:
        cases.insert(2, ("prefill S=128k", [(131072, 131072)], bf16))
        cases.insert(-3, ("fp8 prefill S=128k", [(131072, 131072)], fp8))
    indexer = msa.Indexer(H_I, D, backend="cuda")
    topk = msa.TopK(TOPK, backend="cuda")
    topk_q16 = msa.TopK(TOPK, backend="cuda", ranking="quantised16")
    fused = msa.IndexerTopK(H_I, TOPK, D, backend="cuda")
    print(f"{'case':28s} {'indexer ms':>10s} {'TFLOP/s':>8s} {'key GB/s':>9s} {'top-k ms':>9s} {'q16 ms':>8s} "
          f"{'both ms':>8s} {'fused ms':>8s} {'speed-up':>8s}")
    for name, requests, dtype in cases:
        cu, kl, index_q, index_k, table, scores, ids, pairs, key_bytes = case(requests, dtype)

        def run_indexer():
            indexer.run(index_q, index_k, scores, cu, kl, page_table=table)

        def run_topk():
            topk.run(scores, ids, cu, kl)

        def run_topk_q16():
            topk_q16.run(scores, ids, cu, kl)

        def run_both():
            run_indexer()
            run_topk()

        fused_ids = torch.empty_like(ids)
        max_k_len = max(k for _, k in requests)

        def run_fused():
            fused.plan(len(requests), index_q.shape[0], max_k_len)
            fused.run(index_q, index_k, fused_ids, cu, kl, page_table=table)

        t_i, t_k, t_q, t_b = timed(run_indexer), timed(run_topk), timed(run_topk_q16), timed(run_both)
        t_f = timed(run_fused)
        run_both()
        torch.cuda.synchronize()
        assert torch.equal(fused_ids, ids), f"{name}: the fused ids differ from Indexer + TopK"
        flops = 2.0 * D * H_I * pairs
        print(f"{name:28s} {t_i:10.3f} {flops / t_i / 1e9:8.1f} {key_bytes / t_i / 1e6:9.0f} {t_k:9.3f} {t_q:8.3f} "
              f"{t_b:8.3f} {t_f:8.3f} {t_b / t_f:7.2f}x")
        del scores, ids, fused_ids, index_q, index_k


if __name__ == "__main__":
    main()
