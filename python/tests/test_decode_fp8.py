"""FP8 E4M3 K/V caches through the decode wrapper (PyTorch float8_e4m3fn tensors; skipped without
PyTorch): the CPU and CUDA backends against the NumPy reference on the dequantised values, and a
captured CUDA run replayed with new descales."""

import numpy as np
import pytest

import msa
from expect import expect_error
from numpy_cases import assert_close, make_case, reference

torch = pytest.importorskip("torch")

Q = 2


def fp8_case(seed, k_factors, v_factors):
    """A decode step whose K/V are stored in FP8 with per-head (or per-tensor) factors; the case's
    own q / k / v hold the values the reference reads (bf16 q, dequantised K/V)."""
    c = make_case(seed=seed, h_q=8, h_kv=2, topk=4, requests=((Q, 700), (Q, 2), (Q, 300)), dtype=np.float32)
    q = torch.from_numpy(c["q"]).to(torch.bfloat16)
    c["q"] = q.float().numpy()
    stored = {}
    for name, factors in (("k", k_factors), ("v", v_factors)):
        f = torch.tensor(factors, dtype=torch.float32)
        per = f.view(1, -1, 1) if len(factors) > 1 else f.view(1, 1, 1)
        s = (torch.from_numpy(c[name]) / per).to(torch.float8_e4m3fn)
        stored[name] = s
        c[name] = (s.float() * per).numpy()
    c["q_t"], c["k_t"], c["v_t"] = q, stored["k"], stored["v"]
    c["k_descale"] = torch.tensor(k_factors, dtype=torch.float32)
    c["v_descale"] = torch.tensor(v_factors, dtype=torch.float32)
    c["topk_qm"] = torch.from_numpy(np.ascontiguousarray(c["topk"].transpose(1, 0, 2)))
    c["seq_lens"] = torch.tensor([700, 2, 300], dtype=torch.int32)
    return c


def plan(w, c):
    w.plan(c["seq_lens"], None, q_len_per_request=Q, num_q_heads=8, num_kv_heads=2, topk=4, max_seqlen_k=700,
           cu_seqlens_k=torch.from_numpy(c["cu_k"]))


@pytest.mark.parametrize("k_factors,v_factors", [([0.5, 2.0], [0.25, 1.0]), ([0.03], [0.7])])
def test_fp8_cache_on_the_cpu_matches_the_dequantised_reference(k_factors, v_factors):
    c = fp8_case(3, k_factors, v_factors)
    w = msa.BatchDecodeWithPagedKVCacheWrapper(backend="cpu")
    plan(w, c)
    out, lse = w.run(c["q_t"], (c["k_t"], c["v_t"]), c["topk_qm"], return_lse=True, k_descale=c["k_descale"],
                     v_descale=c["v_descale"])
    assert out.dtype == torch.bfloat16
    assert_close(out.float().numpy(), lse.numpy(), *reference(c))
    expect_error("k_descale", w.run, c["q_t"], (c["k_t"], c["v_t"]), c["topk_qm"], v_descale=c["v_descale"])


@pytest.mark.skipif(not (torch.cuda.is_available() and msa.cuda_available()), reason="needs a GPU")
@pytest.mark.parametrize("k_factors,v_factors", [([0.02, 0.3], [0.01, 0.5]), ([0.013], [0.021])])
def test_fp8_cache_on_the_gpu_matches_the_dequantised_reference(k_factors, v_factors):
    c = fp8_case(4, k_factors, v_factors)
    dev = {k: c[k].cuda() for k in ("q_t", "k_t", "v_t", "topk_qm", "seq_lens", "k_descale", "v_descale")}
    w = msa.BatchDecodeWithPagedKVCacheWrapper()
    w.plan(dev["seq_lens"], None, q_len_per_request=Q, num_q_heads=8, num_kv_heads=2, topk=4, max_seqlen_k=700,
           cu_seqlens_k=torch.from_numpy(c["cu_k"]).cuda())
    run = lambda: w.run(dev["q_t"], (dev["k_t"], dev["v_t"]), dev["topk_qm"], return_lse=True,
                        k_descale=dev["k_descale"], v_descale=dev["v_descale"])
    out, lse = run()
    assert out.dtype == torch.bfloat16
    assert_close(out.float().cpu().numpy(), lse.cpu().numpy(), *reference(c))
    # Captured, then replayed with other descales in the same buffers: the factors are read on
    # the device at every step.
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out, g_lse = run()
    dev["k_descale"].mul_(2.0)
    dev["v_descale"].mul_(0.5)
    graph.replay()
    torch.cuda.synchronize()
    c2 = dict(c)
    c2["k"], c2["v"] = c["k"] * 2.0, c["v"] * 0.5
    assert_close(g_out.float().cpu().numpy(), g_lse.cpu().numpy(), *reference(c2))
    expect_error("k_descale", w.run, dev["q_t"], (dev["k_t"], dev["v_t"]), dev["topk_qm"],
                 v_descale=dev["v_descale"])
