"""The decode wrapper and msa.SparseDecode on the CUDA backend with PyTorch tensors (skipped without
PyTorch, a GPU or a CUDA build), against the PyTorch reference of test_prefill_cuda.py (a decode
step is the prefill of B requests of Q queries): paged (HND, NHD) and flat caches, Q = 1..16,
both top-k layouts, sinks, small batches (split over each union), and one captured run()
replayed step after step with new seq_lens, top-k and q in the same buffers."""

import pytest

import msa
from test_prefill_cuda import DEV, assert_close, make_problem, paged_cache, reference

torch = pytest.importorskip("torch")


def decode_problem(q_len, seq_lens, seed, **kw):
    p = make_problem(tuple((q_len, s) for s in seq_lens), seed=seed, **kw)
    p["q_len"] = q_len
    p["seq_lens"] = torch.tensor(seq_lens, dtype=torch.int32, device=DEV)
    p["topk_qm"] = p["topk_ids"].transpose(0, 1).contiguous()  # [B * Q, h_kv, K], the MSA decode layout
    return p


def plan(w, p, page_table=None, **kw):
    args = dict(q_len_per_request=p["q_len"], num_q_heads=p["h_q"], num_kv_heads=p["h_kv"], head_dim=p["d"],
                topk=p["topk"], max_seqlen_k=p["max_k"], q_data_type=p["dtype"])
    if page_table is None:
        args["cu_seqlens_k"] = p["cu_k"]
    args.update(kw)
    w.plan(p["seq_lens"], page_table, **args)


@pytest.mark.parametrize("q_len", [1, 8, 16])
@pytest.mark.parametrize("page_size,layout", [(128, "HND"), (64, "NHD"), (16, "HND")])
def test_paged_step(q_len, page_size, layout):
    p = decode_problem(q_len, [5000, 130, q_len, 2047, 129, 900], seed=q_len + page_size)
    k_cache, v_cache, table = paged_cache(p, page_size, layout)
    w = msa.BatchDecodeWithPagedKVCacheWrapper(kv_layout=layout)
    plan(w, p, table)
    out, lse = w.run(p["q"], (k_cache, v_cache), p["topk_qm"], return_lse=True)
    assert out.shape == p["q"].shape and out.dtype == torch.bfloat16
    assert_close(out, lse, *reference(p))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_flat_head_major_sinks_and_small_batches(dtype):
    for seq_lens in ([60000], [20000, 777], [100000, 5, 4096, 30000]):  # split over each union
        p = decode_problem(8, seq_lens, seed=len(seq_lens), dtype=dtype, gen="shared")
        sinks = torch.linspace(-1.0, 2.0, p["h_q"], device=DEV)
        w = msa.BatchDecodeWithPagedKVCacheWrapper()
        plan(w, p)
        out, lse = w.run(p["q"], (p["k"], p["v"]), p["topk_ids"], topk_head_major=True, return_lse=True,
                         sinks=sinks)
        assert_close(out, lse, *reference(p, sinks=sinks))
        again = w.run(p["q"], (p["k"], p["v"]), p["topk_qm"], out=torch.empty_like(out), sinks=sinks)
        assert torch.equal(again, out)  # the other layout, bitwise the same


def test_graph_replays_step_after_step():
    seq_lens = [3000, 700, 64, 10000]
    p = decode_problem(8, seq_lens, seed=21)
    k_cache, v_cache, table = paged_cache(p, 128)
    w = msa.BatchDecodeWithPagedKVCacheWrapper()
    plan(w, p, table, max_seqlen_k=16384)
    topk = p["topk_qm"].clone()
    q = p["q"].clone()
    w.run(q, (k_cache, v_cache), topk)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = w.run(q, (k_cache, v_cache), topk, return_lse=True)
    graph.replay()
    assert_close(out, lse, *reference(p))
    for step in range(3):
        # The next step: shorter requests over the same pages, new selections, new queries.
        shorter = [max(8, s - 97 * (step + 1)) for s in seq_lens]
        nxt = decode_problem(8, shorter, seed=30 + step)
        nxt.update(k=p["k"], v=p["v"], cu_k=p["cu_k"], cu_k_host=p["cu_k_host"])  # the flat view of the cache
        p["seq_lens"].copy_(nxt["seq_lens"])
        topk.copy_(nxt["topk_qm"])
        q.copy_(nxt["q"])
        graph.replay()
        replayed, replayed_lse = out.clone(), lse.clone()
        assert_close(replayed, replayed_lse, *reference(nxt))
        eager, eager_lse = w.run(q, (k_cache, v_cache), topk, out=torch.empty_like(out), lse=torch.empty_like(lse),
                                 return_lse=True)
        assert torch.equal(replayed, eager) and torch.equal(replayed_lse, eager_lse)


def test_pythonic_layer_with_a_caller_workspace_and_stream():
    p = decode_problem(4, [900, 37, 5000], seed=40, h_q=16, h_kv=2, topk=8)
    op = msa.SparseDecode(16, 2, 128, 8, backend="cuda")
    workspace = torch.empty(op.workspace_bytes(3, 4, p["max_k"]), dtype=torch.uint8, device=DEV)
    op.set_workspace(workspace)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    out = torch.empty_like(p["q"])
    lse = torch.empty(p["q"].shape[:2], device=DEV)
    op.plan(3, 4, p["max_k"], stream=s)
    op.run(p["q"], p["k"], p["v"], out, p["seq_lens"], p["topk_qm"], 4, cu_seqlens_k=p["cu_k"], lse=lse, stream=s)
    s.synchronize()
    assert_close(out, lse, *reference(p))


def test_errors():
    p = decode_problem(2, [300, 40], seed=50, h_q=8, h_kv=2, topk=4)
    w = msa.BatchDecodeWithPagedKVCacheWrapper()
    plan(w, p)
    kv = (p["k"], p["v"])
    for argument, call in (
        ("topk_indices.device", lambda: w.run(p["q"], kv, p["topk_qm"].cpu())),
        ("topk_indices.dtype", lambda: w.run(p["q"], kv, p["topk_qm"].long())),
        ("q.device", lambda: w.run(p["q"].cpu(), kv, p["topk_qm"])),
        ("workspace_buffer.bytes", lambda: plan(msa.BatchDecodeWithPagedKVCacheWrapper(
            torch.empty(256, dtype=torch.uint8, device=DEV)), p, max_seqlen_k=1 << 20)),
    ):
        with pytest.raises(msa.Error) as e:
            call()
        assert isinstance(e.value, ValueError) and e.value.argument == argument, str(e.value)
