"""Times msa.TopK on the CUDA backend for one prefill request of S tokens (scores [h, S, S/128]
fp32, standard normal), eagerly, mean of 10 runs after 3 warm-up (CUDA events), in each ranking
the build has (exact; quantised16). Prints the time and the bytes of candidate scores a row must
read (blocks before its local block).

    PYTHONPATH=build/gpu/python python3 scripts/bench_topk.py
"""
import torch

import msa


def rankings(k):
    ops = [("exact", msa.TopK(k, backend="cuda"))]
    try:
        ops.append(("quantised16", msa.TopK(k, backend="cuda", ranking="quantised16")))
    except TypeError:  # a build from before the quantised ranking
        pass
    return ops


for S, h, k in [(32768, 4, 16), (131072, 4, 16), (131072, 1, 32)]:
    cols = (S + 127) // 128
    cu = torch.tensor([0, S], dtype=torch.int32, device="cuda")
    kl = torch.tensor([S], dtype=torch.int32, device="cuda")
    scores = torch.randn(h, S, cols, device="cuda")
    out = torch.empty(h, S, k, dtype=torch.int32, device="cuda")
    candidates = h * sum(p // 128 for p in range(S)) * 4
    for name, op in rankings(k):
        op.plan(cu, kl)
        for _ in range(3):
            op.run(scores, out, cu, kl)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n = 10
        torch.cuda.synchronize()
        e0.record()
        for _ in range(n):
            op.run(scores, out, cu, kl)
        e1.record()
        torch.cuda.synchronize()
        ms = e0.elapsed_time(e1) / n
        print(f"topk {name} S={S} h={h} k={k}: {ms:.3f} ms, candidate scores {candidates / 1e9:.2f} GB "
              f"-> {candidates / ms / 1e6:.0f} GB/s")
    del scores, out
