"""The Python package on the CPU backend with NumPy tensors: a chunked flat-KV prefill against a
NumPy reference written here (an oracle independent of the C++ one), and msa.Error's contract."""

import numpy as np
import pytest

import msa

BLOCK = 128


def make_case(seed=0, h_q=4, h_kv=2, d=128, topk=4, requests=((40, 300), (1, 129), (17, 17))):
    rng = np.random.default_rng(seed)
    q_lens = [q for q, _ in requests]
    k_lens = [k for _, k in requests]
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(k_lens)]).astype(np.int32)
    total_q, total_k = int(cu_q[-1]), int(cu_k[-1])
    q = (rng.standard_normal((total_q, h_q, d)) * 0.25).astype(np.float16)
    k = (rng.standard_normal((total_k, h_kv, d)) * 0.25).astype(np.float16)
    v = (rng.standard_normal((total_k, h_kv, d)) * 0.25).astype(np.float16)
    # A random selection per (KV head, query) by the MSA rule: local block last, others distinct.
    ids = np.full((h_kv, total_q, topk), -1, dtype=np.int32)
    for b, (ql, kl) in enumerate(requests):
        for i in range(ql):
            local = (kl - ql + i) // BLOCK
            for g in range(h_kv):
                others = rng.permutation(local)[: topk - 1]
                row = list(others) + [local]
                ids[g, cu_q[b] + i, : len(row)] = row
    return dict(q=q, k=k, v=v, cu_q=cu_q, cu_k=cu_k, k_len=np.array(k_lens, np.int32), topk=ids,
                h_q=h_q, h_kv=h_kv, d=d, K=topk, requests=requests)


def reference(c):
    """Softmax over the visible tokens of each row's selected blocks, in float64."""
    q, k, v = (c[n].astype(np.float64) for n in ("q", "k", "v"))
    total_q = q.shape[0]
    out = np.zeros_like(q)
    lse = np.full((total_q, c["h_q"]), -np.inf)
    group = c["h_q"] // c["h_kv"]
    for b, (ql, kl) in enumerate(c["requests"]):
        for i in range(ql):
            row, pos = c["cu_q"][b] + i, kl - ql + i
            for h in range(c["h_q"]):
                g = h // group
                blocks = sorted({int(x) for x in c["topk"][g, row] if 0 <= x <= (kl - 1) // BLOCK})
                toks = [t for blk in blocks for t in range(blk * BLOCK, min((blk + 1) * BLOCK, pos + 1))]
                if not toks:
                    continue
                kk = k[c["cu_k"][b] + np.array(toks), g]
                s = kk @ q[row, h] / np.sqrt(c["d"])
                m = s.max()
                p = np.exp(s - m)
                out[row, h] = p @ v[c["cu_k"][b] + np.array(toks), g] / p.sum()
                lse[row, h] = m + np.log(p.sum())
    return out, lse


def run_prefill(c, **options):
    op = msa.SparsePrefill(c["h_q"], c["h_kv"], c["d"], c["K"], **options)
    out = np.full(c["q"].shape, np.nan, dtype=np.float16)
    lse = np.full(c["q"].shape[:2], np.nan, dtype=np.float32)
    op.plan(c["cu_q"], c["k_len"], c["topk"])
    op.run(c["q"], c["k"], c["v"], out, c["cu_q"], c["k_len"], c["topk"], cu_seqlens_k=c["cu_k"], lse=lse)
    return out, lse


def test_flat_chunked_prefill_matches_numpy():
    c = make_case()
    out, lse = run_prefill(c)
    ref_out, ref_lse = reference(c)
    np.testing.assert_allclose(out.astype(np.float64), ref_out, atol=1e-2, rtol=1e-2)
    cos = (out.astype(np.float64) * ref_out).sum() / np.sqrt((out.astype(np.float64) ** 2).sum() * (ref_out**2).sum())
    assert cos >= 0.9999
    np.testing.assert_allclose(lse, ref_lse, atol=1e-3)


def test_strided_inputs_are_not_copied_and_still_match():
    c = make_case(seed=3)
    # q as a strided view of a wider buffer: the same values, other strides.
    wide = np.zeros((c["q"].shape[0], c["h_q"], 2 * c["d"]), np.float16)
    wide[:, :, : c["d"]] = c["q"]
    c_strided = dict(c, q=wide[:, :, : c["d"]])
    out_a, _ = run_prefill(c)
    out_b, _ = run_prefill(c_strided)
    assert np.array_equal(out_a, out_b)


def test_errors_name_the_argument_and_value():
    c = make_case()
    op = msa.SparsePrefill(c["h_q"], c["h_kv"], c["d"], c["K"])
    op.plan(c["cu_q"], c["k_len"], c["topk"])
    out = np.zeros(c["q"].shape, np.float16)
    with pytest.raises(msa.Error) as e:
        op.run(c["q"][:, :, :64], c["k"], c["v"], out, c["cu_q"], c["k_len"], c["topk"], cu_seqlens_k=c["cu_k"])
    assert isinstance(e.value, ValueError)
    assert e.value.argument == "q.shape[2]" and e.value.value == "64"
    with pytest.raises(msa.Error) as e:
        op.run(c["q"].astype(np.float64), c["k"], c["v"], out, c["cu_q"], c["k_len"], c["topk"],
               cu_seqlens_k=c["cu_k"])
    assert e.value.argument == "q.dtype"
    with pytest.raises(msa.Error) as e:
        msa.SparsePrefill(4, 2, backend="tpu")
    assert e.value.argument == "backend" and e.value.value == "tpu"


def test_version():
    assert msa.__version__.count(".") == 2
