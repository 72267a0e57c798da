"""The Python package on the CUDA backend with PyTorch tensors (skipped without PyTorch, a GPU, or
a CUDA build): the MSA wrapper and msa.SparsePrefill against a PyTorch reference written here (an
oracle independent of the C++ one) on paged (HND, NHD) and flat caches, chunked batches, sinks,
adversarial top-k rows, every prefill path and dtype; CUDA graph replays bitwise equal to eager
runs; streams; and the errors of the DLPack boundary."""

import math

import pytest

import msa
from expect import expect_error

torch = pytest.importorskip("torch")
if not (torch.cuda.is_available() and msa.cuda_available()):
    pytest.skip("needs a CUDA GPU and a CUDA build of msa", allow_module_level=True)

BLOCK = 128
DEV = "cuda"


# ------------------------------------------------------------------------------- problems

def msa_selection(h_kv, cu_q, k_lens, topk, gen, shared_tile=64):
    """top-k [h_kv, total_q, topk] int32 by the MSA rule: up to topk - 1 distinct earlier blocks,
    then the query's local block, then -1. "random": each (head, query) picks its own;
    "shared": the queries of a tile of shared_tile rank blocks with the same random scores."""
    total_q = int(cu_q[-1])
    ids = torch.full((h_kv, total_q, topk), -1, dtype=torch.int32, device=DEV)
    for b, kl in enumerate(k_lens):
        q0, ql = int(cu_q[b]), int(cu_q[b + 1] - cu_q[b])
        if ql == 0:
            continue
        nblk = (kl + BLOCK - 1) // BLOCK
        local = (kl - ql + torch.arange(ql, device=DEV)) // BLOCK  # [ql]
        if gen == "random":
            r = torch.rand(h_kv, ql, nblk, device=DEV)
        else:
            tiles = torch.rand(h_kv, (ql + shared_tile - 1) // shared_tile, nblk, device=DEV)
            r = tiles[:, torch.arange(ql, device=DEV) // shared_tile]
        r = r.masked_fill(torch.arange(nblk, device=DEV)[None, None, :] >= local[None, :, None], -1.0)
        take = min(topk - 1, nblk)
        row = torch.full((h_kv, ql, topk), -1, dtype=torch.int64, device=DEV)
        if take > 0:
            vals, idx = r.topk(take, dim=-1)
            row[..., :take] = torch.where(vals >= 0, idx, -1)
        count = (row >= 0).sum(-1, keepdim=True)
        row.scatter_(-1, count, local.expand(h_kv, ql).unsqueeze(-1))
        ids[:, q0 : q0 + ql] = row.to(torch.int32)
    return ids


def make_problem(requests, h_q=64, h_kv=4, topk=16, dtype=torch.bfloat16, gen="random", seed=0, d=128):
    """A chunked batch of (q_len, k_len) requests with flat K/V [total_k, h_kv, d]."""
    torch.manual_seed(seed)
    q_lens = [q for q, _ in requests]
    k_lens = [k for _, k in requests]
    cu_q = torch.tensor([0] + q_lens, dtype=torch.int64).cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + k_lens, dtype=torch.int64).cumsum(0).to(torch.int32)
    total_q, total_k = int(cu_q[-1]), int(cu_k[-1])
    p = dict(h_q=h_q, h_kv=h_kv, d=d, topk=topk, k_lens=k_lens, q_lens=q_lens, dtype=dtype,
             cu_q=cu_q.to(DEV), cu_k=cu_k.to(DEV), cu_q_host=cu_q, cu_k_host=cu_k,
             q=(torch.randn(total_q, h_q, d, device=DEV) * 0.25).to(dtype),
             k=(torch.randn(total_k, h_kv, d, device=DEV) * 0.25).to(dtype),
             v=(torch.randn(total_k, h_kv, d, device=DEV) * 0.25).to(dtype),
             total_k=total_k, total_rows=sum((k + BLOCK - 1) // BLOCK for k in k_lens),
             max_q=max(q_lens), max_k=max(k_lens))
    p["topk_ids"] = msa_selection(h_kv, cu_q, k_lens, topk, gen)
    return p


def paged_cache(p, page_size, layout="HND", seed=1):
    """p's flat K/V scattered into shuffled physical pages (+ spare ones): (k, v, page_table)."""
    g = torch.Generator().manual_seed(seed)
    pages_of = [(kl + page_size - 1) // page_size for kl in p["k_lens"]]
    num_pages = sum(pages_of) + 5
    physical = torch.randperm(num_pages, generator=g)
    table = torch.zeros(len(pages_of), max(pages_of), dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages_of):
        table[b, :n] = physical[used : used + n].to(torch.int32)
        used += n
    table = table.to(DEV)
    caches = []
    for flat in (p["k"], p["v"]):
        cache = torch.randn(num_pages, p["h_kv"], page_size, p["d"], device=DEV).to(p["dtype"])  # junk in spare slots
        for b, kl in enumerate(p["k_lens"]):
            t = torch.arange(kl, device=DEV)
            cache[table[b, t // page_size].long(), :, t % page_size] = flat[int(p["cu_k_host"][b]) + t]
        if layout == "NHD":
            cache = cache.transpose(1, 2).contiguous()
        caches.append(cache)
    return caches[0], caches[1], table


def reference(p, topk_ids=None, sinks=None):
    """out, lse (float32) of MSA sparse prefill: the set of each row's in-range ids, bottom-right
    causal, the sink a virtual key of zero value; a row with no visible key gives 0 and -inf."""
    topk_ids = p["topk_ids"] if topk_ids is None else topk_ids
    h_q, h_kv, d = p["h_q"], p["h_kv"], p["d"]
    group = h_q // h_kv
    scale = 1.0 / math.sqrt(d)
    out = torch.zeros(p["q"].shape, dtype=torch.float32, device=DEV)
    lse = torch.full(p["q"].shape[:2], -math.inf, dtype=torch.float32, device=DEV)
    for b, kl in enumerate(p["k_lens"]):
        q0, ql, k0 = int(p["cu_q_host"][b]), p["q_lens"][b], int(p["cu_k_host"][b])
        if ql == 0:
            continue
        nblk = (kl + BLOCK - 1) // BLOCK
        t = torch.arange(kl, device=DEV)
        pos = kl - ql + torch.arange(ql, device=DEV)
        for g in range(h_kv):
            ids = topk_ids[g, q0 : q0 + ql].long()
            ids = torch.where((ids >= 0) & (ids < nblk), ids, nblk)
            sel = torch.zeros(ql, nblk + 1, dtype=torch.bool, device=DEV).scatter_(1, ids, True)[:, :nblk]
            mask = sel[:, t // BLOCK] & (t[None, :] <= pos[:, None])  # [ql, kl]
            heads = slice(g * group, (g + 1) * group)
            qg = p["q"][q0 : q0 + ql, heads].float().transpose(0, 1)  # [G, ql, d]
            s = qg @ p["k"][k0 : k0 + kl, g].float().T * scale  # [G, ql, kl]
            s = s.masked_fill(~mask, -math.inf)
            vg = p["v"][k0 : k0 + kl, g].float()
            if sinks is not None:
                s = torch.cat([s, sinks[heads].float().view(group, 1, 1).expand(group, ql, 1)], dim=-1)
                vg = torch.cat([vg, torch.zeros(1, d, device=DEV)])
            m = s.amax(-1, keepdim=True)
            m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            e = torch.exp(s - m)
            z = e.sum(-1, keepdim=True)
            o = torch.where(z > 0, (e @ vg) / z.clamp_min(1e-30), torch.zeros_like(qg))
            out[q0 : q0 + ql, heads] = o.transpose(0, 1)
            lse[q0 : q0 + ql, heads] = torch.where(z > 0, m + torch.log(z), -math.inf).squeeze(-1).T
    return out, lse


def assert_close(out, lse, ref_out, ref_lse):
    """Spec §7: |err| <= 1e-2 + 1e-2 |ref|, cosine >= 0.9999, lse within 1e-3, -inf where the
    reference has it and NaN nowhere."""
    o = out.float()
    assert not torch.isnan(o).any()
    torch.testing.assert_close(o, ref_out, atol=1e-2, rtol=1e-2)
    cos = (o.double() * ref_out.double()).sum() / (o.double().norm() * ref_out.double().norm())
    assert cos >= 0.9999, float(cos)
    if lse is not None:
        assert not torch.isnan(lse).any()
        assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
        finite = torch.isfinite(ref_lse)
        torch.testing.assert_close(lse[finite], ref_lse[finite], atol=1e-3, rtol=0)


def plan(w, p, page_table=None, topk_ids=None, **kw):
    args = dict(num_q_heads=p["h_q"], num_kv_heads=p["h_kv"], total_k=p["total_k"], total_rows=p["total_rows"],
                max_seqlen_q=p["max_q"], max_seqlen_k=p["max_k"], head_dim=p["d"], q_data_type=p["dtype"])
    args.update(kw)
    w.plan(p["topk_ids"] if topk_ids is None else topk_ids, p["cu_q"], p["cu_k"], page_table, **args)


CHUNKED = ((300, 2000), (1, 4100), (0, 700), (129, 129), (513, 3000))


# ------------------------------------------------------------------------------- results

@pytest.mark.parametrize("page_size", [16, 64, 128])
@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_paged_chunked_batch(page_size, layout):
    p = make_problem(CHUNKED, seed=page_size)
    k_cache, v_cache, table = paged_cache(p, page_size, layout)
    w = msa.BatchPrefillWithPagedKVCacheWrapper(kv_layout=layout)
    plan(w, p, table)
    out, lse = w.run(p["q"], (k_cache, v_cache), return_lse=True)
    assert out.dtype == torch.bfloat16 and out.shape == p["q"].shape and out.is_cuda
    assert_close(out, lse, *reference(p))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("gen", ["random", "shared"])
@pytest.mark.parametrize("path", ["auto", "block_major", "tile_union"])
def test_flat_every_path_and_dtype(dtype, gen, path):
    p = make_problem(CHUNKED, dtype=dtype, gen=gen, seed=3)
    w = msa.BatchPrefillWithPagedKVCacheWrapper(prefill_path=path)
    plan(w, p)
    out, lse = w.run(p["q"], (p["k"], p["v"]), return_lse=True)
    assert out.dtype == dtype
    assert_close(out, lse, *reference(p))
    again = w.run(p["q"], (p["k"], p["v"]), out=torch.empty_like(out))
    assert torch.equal(again, out)  # bitwise reproducible


@pytest.mark.parametrize("h_q,h_kv,topk", [(4, 4, 1), (16, 2, 32), (64, 4, 16), (32, 2, 7)])
def test_group_and_topk_sizes(h_q, h_kv, topk):
    p = make_problem(((200, 5000), (64, 64), (1, 1)), h_q=h_q, h_kv=h_kv, topk=topk, seed=5)
    k_cache, v_cache, table = paged_cache(p, 32)
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, p, table)
    out, lse = w.run(p["q"], (k_cache, v_cache), return_lse=True)
    assert_close(out, lse, *reference(p))


def test_sinks():
    p = make_problem(CHUNKED, seed=6)
    sinks = torch.linspace(-2.0, 3.0, p["h_q"], device=DEV)
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, p)
    out, lse = w.run(p["q"], (p["k"], p["v"]), return_lse=True, sinks=sinks)
    assert_close(out, lse, *reference(p, sinks=sinks))


def test_adversarial_topk_rows():
    p = make_problem(CHUNKED, seed=7)
    ids = p["topk_ids"].clone()
    ids[0, 0] = -1                                  # nothing selected
    ids[1, 1, :6] = torch.tensor([0, 0, 0, 1, 1, -5], dtype=torch.int32)  # duplicates, a negative
    ids[2, 2, :4] = torch.tensor([10**6, 2**31 - 1, 0, 3], dtype=torch.int32)  # beyond the request
    ids[3, 300] = 0                                 # one block, sixteen times
    ids[:, 400:420] = torch.randint(-3, 40, (p["h_kv"], 20, p["topk"]), dtype=torch.int32, device=DEV)
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, p, topk_ids=ids)
    out, lse = w.run(p["q"], (p["k"], p["v"]), return_lse=True)
    ref_out, ref_lse = reference(p, topk_ids=ids)
    assert_close(out, lse, ref_out, ref_lse)
    group = p["h_q"] // p["h_kv"]
    assert torch.all(out[0, :group] == 0) and torch.all(torch.isneginf(lse[0, :group]))
    with pytest.raises(msa.Error) as e:
        plan(msa.BatchPrefillWithPagedKVCacheWrapper(strict=True), p, topk_ids=ids)
    assert e.value.argument.startswith("topk_indices[")


def test_every_block_selected_is_dense_causal_sdpa():
    p = make_problem(((700, 1500), (256, 256)), h_q=8, h_kv=2, topk=16, seed=8)
    ids = torch.full_like(p["topk_ids"], -1)
    for b, kl in enumerate(p["k_lens"]):
        q0, ql = int(p["cu_q_host"][b]), p["q_lens"][b]
        local = (kl - ql + torch.arange(ql, device=DEV)) // BLOCK
        blocks = torch.arange(p["topk"], device=DEV)
        ids[:, q0 : q0 + ql] = torch.where(blocks[None, :] <= local[:, None], blocks[None, :], -1).to(torch.int32)
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, p, topk_ids=ids)
    out = w.run(p["q"], (p["k"], p["v"]))
    for b, kl in enumerate(p["k_lens"]):
        q0, ql, k0 = int(p["cu_q_host"][b]), p["q_lens"][b], int(p["cu_k_host"][b])
        pos = kl - ql + torch.arange(ql, device=DEV)
        mask = torch.arange(kl, device=DEV)[None, :] <= pos[:, None]  # bottom-right causal
        q = p["q"][q0 : q0 + ql].transpose(0, 1).float()
        k = p["k"][k0 : k0 + kl].transpose(0, 1).float().repeat_interleave(p["h_q"] // p["h_kv"], 0)
        v = p["v"][k0 : k0 + kl].transpose(0, 1).float().repeat_interleave(p["h_q"] // p["h_kv"], 0)
        dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(out[q0 : q0 + ql].float(), dense.transpose(0, 1), atol=1e-2, rtol=1e-2)


def test_pythonic_layer_matches_cpu_backend_and_takes_a_stream():
    p = make_problem(((100, 900), (37, 37)), h_q=8, h_kv=2, topk=4, seed=9)
    k_len = torch.tensor(p["k_lens"], dtype=torch.int32)
    gpu = msa.SparsePrefill(8, 2, 128, 4, backend="cuda")
    out = torch.empty_like(p["q"])
    lse = torch.empty(p["q"].shape[:2], device=DEV)
    k_len_dev = k_len.to(DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # the inputs were made on the current stream
    gpu.plan(p["cu_q"], k_len_dev, p["topk_ids"], max_k_len=p["max_k"], stream=s)
    gpu.run(p["q"], p["k"], p["v"], out, p["cu_q"], k_len_dev, p["topk_ids"], cu_seqlens_k=p["cu_k"], lse=lse,
            stream=s.cuda_stream)  # an int handle
    s.synchronize()
    cpu = msa.SparsePrefill(8, 2, 128, 4, backend="cpu")
    ids_h, cu_q_h = p["topk_ids"].cpu(), p["cu_q_host"]
    out_h = torch.empty(p["q"].shape, dtype=torch.bfloat16)
    lse_h = torch.empty(p["q"].shape[:2])
    cpu.plan(cu_q_h, k_len, ids_h)
    cpu.run(p["q"].cpu(), p["k"].cpu(), p["v"].cpu(), out_h, cu_q_h, k_len, ids_h, cu_seqlens_k=p["cu_k_host"],
            lse=lse_h)
    torch.testing.assert_close(out.cpu().float(), out_h.float(), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(lse.cpu(), lse_h, atol=1e-3, rtol=0)
    assert_close(out, lse, *reference(p))


def test_non_default_stream_and_second_wrapper_agree():
    p = make_problem(CHUNKED, seed=10)
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, p)
    want = w.run(p["q"], (p["k"], p["v"])).clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        w2 = msa.BatchPrefillWithPagedKVCacheWrapper()
        plan(w2, p)
        got = w2.run(p["q"], (p["k"], p["v"]))
    torch.cuda.current_stream().wait_stream(s)
    assert torch.equal(got, want)


# ------------------------------------------------------------------------------- CUDA graphs

def test_graph_replay_sees_new_contents_and_new_plans():
    p = make_problem(CHUNKED, seed=11)
    k_cache, v_cache, table = paged_cache(p, 64)
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, p, table)
    topk_buf = p["topk_ids"].clone()
    plan(w, p, table, topk_ids=topk_buf)
    w.run(p["q"], (k_cache, v_cache), return_lse=True)  # warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = w.run(p["q"], (k_cache, v_cache), return_lse=True)
    graph.replay()
    first = out.clone()
    assert_close(out, lse, *reference(p))

    # New contents in the same buffers: q, the caches.
    q2 = make_problem(CHUNKED, seed=12)["q"]
    p["q"].copy_(q2)
    k_cache.mul_(-1.5)
    graph.replay()
    replayed, replayed_lse = out.clone(), lse.clone()
    eager, eager_lse = w.run(p["q"], (k_cache, v_cache), out=torch.empty_like(out),
                             lse=torch.empty_like(lse), return_lse=True)
    assert not torch.equal(replayed, first)
    assert torch.equal(replayed, eager) and torch.equal(replayed_lse, eager_lse)

    # A new selection of the same sizes, planned eagerly into the same workspace.
    topk_buf.copy_(make_problem(CHUNKED, seed=13)["topk_ids"])
    plan(w, p, table, topk_ids=topk_buf)
    graph.replay()
    eager = w.run(p["q"], (k_cache, v_cache), out=torch.empty_like(out))
    assert torch.equal(out, eager)
    # The reference reads flat K: the paged cache's tokens were scaled by -1.5 (exact in bf16).
    ref_out, _ = reference(dict(p, k=p["k"] * -1.5), topk_ids=topk_buf)
    torch.testing.assert_close(out.float(), ref_out, atol=1e-2, rtol=1e-2)


def test_graph_of_plan_and_run_with_a_caller_workspace():
    requests = ((300, 2000), (50, 4000), (200, 900))
    p = make_problem(requests, seed=14)
    sizer = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(sizer, p, max_seqlen_k=8192)
    workspace = torch.empty(sizer.workspace_bytes(), dtype=torch.uint8, device=DEV)
    w = msa.BatchPrefillWithPagedKVCacheWrapper(workspace)
    bufs = {n: p[n].clone() for n in ("topk_ids", "cu_q", "cu_k")}

    def step():
        w.plan(bufs["topk_ids"], bufs["cu_q"], bufs["cu_k"], None, num_q_heads=p["h_q"], num_kv_heads=p["h_kv"],
               total_k=p["total_k"], total_rows=p["total_rows"], max_seqlen_q=p["max_q"], max_seqlen_k=8192)
        return w.run(p["q"], (p["k"], p["v"]), return_lse=True)

    step()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = step()
    # Other lengths and selections, same batch size and total_q: (100, 3000), (200, 2900), (250, 1000).
    p2 = make_problem(((100, 3000), (200, 2900), (250, 1000)), seed=15)
    p2.update(q=p["q"], k=p["k"][: p2["total_k"]], v=p["v"][: p2["total_k"]])
    for n in bufs:
        bufs[n].copy_(p2[n])
    graph.replay()
    assert_close(out, lse, *reference(p2))
    eager_out, eager_lse = out.clone(), lse.clone()
    step()
    assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse)


def test_a_prefix_growing_by_chunks_keeps_one_workspace():
    """Chunks of 2048 new tokens on a prefix that grows by each (6k to 40k tokens): the plan's
    need grows with every chunk (by about 1.2 MB in all), and the wrapper's own workspace, sized
    with headroom (msa::grown_workspace_bytes), is allocated once. The last call's result is
    bitwise that of a wrapper given a workspace of exactly the need."""
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    buffers, needs = [], []
    for i, k_len in enumerate(range(6144, 40961, 2048)):
        p = make_problem(((2048, k_len),), seed=100 + i)
        k_cache, v_cache, table = paged_cache(p, 128)
        plan(w, p, table)
        out = w.run(p["q"], (k_cache, v_cache))
        needs.append(w.workspace_bytes())
        if not buffers or buffers[-1] is not w._workspace:
            buffers.append(w._workspace)
    assert needs == sorted(needs) and needs[-1] > needs[0] + (1 << 20)
    assert len(buffers) == 1, [b.numel() for b in buffers]
    assert buffers[0].numel() == msa._msa.grown_workspace_bytes(needs[0])
    exact = msa.BatchPrefillWithPagedKVCacheWrapper(torch.empty(needs[-1], dtype=torch.uint8, device=DEV))
    plan(exact, p, table)
    assert torch.equal(out, exact.run(p["q"], (k_cache, v_cache)))


def test_plain_tensors_skip_tensor_dlpack_and_others_take_it(monkeypatch):
    """The extension imports a plain torch.Tensor through torch.utils.dlpack.to_dlpack, not
    Tensor.__dlpack__ (about 3 us a tensor of Python-level checks): plan() and run() call
    __dlpack__ on none of them. A tensor that requires grad takes the usual path (__dlpack__,
    which nanobind falls back from), and the results are the same bits either way."""
    p = make_problem(CHUNKED, seed=21)
    k_cache, v_cache, table = paged_cache(p, 64, "NHD")
    calls = []
    original = torch.Tensor.__dlpack__

    def counting(self, *args, **kwargs):
        calls.append(tuple(self.shape))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "__dlpack__", counting)
    w = msa.BatchPrefillWithPagedKVCacheWrapper(kv_layout="NHD")
    plan(w, p, table)
    out, lse = w.run(p["q"], (k_cache, v_cache), return_lse=True)
    assert calls == []
    assert_close(out, lse, *reference(p))
    q_grad = p["q"].clone().requires_grad_()
    again = w.run(q_grad, (k_cache, v_cache), out=torch.empty_like(out))
    assert calls and calls[0] == tuple(p["q"].shape)
    assert torch.equal(again, out)


def dlpack_capsule_claiming_device(t, device_id):
    """A DLPack capsule of int32 tensor t's memory that names CUDA device `device_id` (made with
    ctypes: one GPU suffices to see what an array of another device meets). The returned tuple
    keeps the structures alive while the capsule is in use."""
    import ctypes

    class Device(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]

    class DataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class Tensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device", Device), ("ndim", ctypes.c_int), ("dtype", DataType),
                    ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                    ("byte_offset", ctypes.c_uint64)]

    deleter_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

    class Managed(ctypes.Structure):
        _fields_ = [("dl_tensor", Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", deleter_type)]

    shape = (ctypes.c_int64 * 1)(t.numel())
    strides = (ctypes.c_int64 * 1)(1)
    deleter = deleter_type(lambda _: None)
    managed = Managed(Tensor(t.data_ptr(), Device(2, device_id), 1, DataType(0, 32, 1), shape, strides, 0), None,
                      deleter)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(managed), b"dltensor", None), (managed, shape, strides, deleter, t)


def test_an_array_of_another_device_is_refused():
    """msa launches on the current device: an array that names another one is an msa.Error
    naming it, and nothing is written."""
    offsets = torch.tensor([0, 5, 9], dtype=torch.int32, device=DEV)
    lengths = torch.full((2,), -7, dtype=torch.int32, device=DEV)
    current = torch.cuda.current_device()
    capsule, keep = dlpack_capsule_claiming_device(offsets, current + 1)
    e = expect_error("offsets.device", msa._msa.lengths_from_offsets, capsule, lengths)
    assert e.value == f"cuda:{current + 1}"
    assert lengths.tolist() == [-7, -7]
    capsule, keep = dlpack_capsule_claiming_device(offsets, current)  # the same memory, named right
    msa._msa.lengths_from_offsets(capsule, lengths)
    assert lengths.tolist() == [5, 4]
    del keep


# ------------------------------------------------------------------------------- errors

def test_errors_at_the_dlpack_boundary():
    p = make_problem(((40, 300), (8, 8)), h_q=8, h_kv=2, topk=4, seed=16)
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, p)
    kv = (p["k"], p["v"])
    e = expect_error("q.device", w.run, p["q"].cpu(), kv)
    assert e.value == "cpu"
    expect_error("q.dtype", w.run, p["q"].float(), kv)
    expect_error("q.dtype", w.run, p["q"].to(torch.uint8), kv, out=torch.empty_like(p["q"]))
    expect_error("q.ndim", w.run, p["q"].view(*p["q"].shape[:2], 2, 2, 32), kv)
    strided = torch.zeros(*p["q"].shape[:2], 2 * p["d"], dtype=p["dtype"], device=DEV)[:, :, ::2]
    expect_error("q.stride[2]", w.run, strided, kv)
    expect_error("paged_kv_cache[0].device", w.run, p["q"], (p["k"].cpu(), p["v"]))
    expect_error("out.dtype", w.run, p["q"], kv, out=torch.empty(p["q"].shape, device=DEV))
    expect_error("lse.device", w.run, p["q"], kv, lse=torch.empty(p["q"].shape[:2]), return_lse=True)
    expect_error("sinks.dtype", w.run, p["q"], kv, sinks=torch.zeros(p["h_q"], dtype=torch.bfloat16, device=DEV))
    # plan(): the device of the batch arrays, a CPU workspace for CUDA, a workspace too small.
    expect_error("cu_seqlens_k.device", w.plan, p["topk_ids"], p["cu_q"], p["cu_k"].cpu(), None, num_q_heads=8,
                 total_k=p["total_k"], total_rows=p["total_rows"], max_seqlen_q=40, max_seqlen_k=300)
    expect_error("workspace_buffer.device", plan, msa.BatchPrefillWithPagedKVCacheWrapper(torch.empty(1 << 20,
                 dtype=torch.uint8)), p)
    expect_error("workspace_buffer.bytes", plan, msa.BatchPrefillWithPagedKVCacheWrapper(
        torch.empty(256, dtype=torch.uint8, device=DEV)), p)
    expect_error("topk_indices.dtype", plan, w, p, topk_ids=p["topk_ids"].long())
    wide = torch.zeros(2 * len(p["k_lens"]) + 2, dtype=torch.int32, device=DEV)
    expect_error("cu_seqlens_q.stride[0]", w.plan, p["topk_ids"], wide[::2][: len(p["k_lens"]) + 1].copy_(p["cu_q"]),
                 p["cu_k"], None, num_q_heads=8, total_k=p["total_k"], total_rows=p["total_rows"], max_seqlen_q=40,
                 max_seqlen_k=300)
    # A rejected plan() leaves no plan behind; with a new one, a rejected run writes nothing.
    expect_error("plan", w.run, p["q"], kv)
    plan(w, p)
    out = torch.full_like(p["q"], 7.0)
    expect_error("sinks.shape[0]", w.run, p["q"], kv, out=out, sinks=torch.zeros(3, device=DEV))
    assert torch.all(out == 7.0)
