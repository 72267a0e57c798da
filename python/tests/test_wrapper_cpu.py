"""The MSA wrapper (msa.BatchPrefillWithPagedKVCacheWrapper) on the CPU backend with NumPy arrays,
against the NumPy reference of numpy_cases.py: flat and paged (HND and NHD) caches, chunked
batches, sinks, adversarial top-k rows, the dense identity, plan-owned buffers, and the errors."""

import numpy as np
import pytest

import msa
from expect import expect_error
from numpy_cases import assert_close, make_case, paged, reference


def plan(w, c, page_table=None, topk=None, **kw):
    """w.plan() of case c; keywords override the contract's arguments."""
    args = dict(num_q_heads=c["h_q"], num_kv_heads=c["h_kv"], total_k=c["total_k"], total_rows=c["total_rows"],
                max_seqlen_q=c["max_q"], max_seqlen_k=c["max_k"], head_dim=c["d"], q_data_type="float16")
    args.update(kw)
    w.plan(c["topk"] if topk is None else topk, c["cu_q"], c["cu_k"], page_table, **args)


def test_grown_workspace_bytes():
    """msa::grown_workspace_bytes, which the operators and the wrappers size their own workspace
    with: the need and an eighth more (at most 256 MiB), in whole 2 MiB units, at least one."""
    mib = 1 << 20
    grown = msa._msa.grown_workspace_bytes
    assert grown(0) == 2 * mib and grown(1) == 2 * mib
    assert grown(16 * mib) == 18 * mib  # 16 + 2
    assert grown(550 * mib) == 620 * mib  # 550 + 68.75, rounded up to 2 MiB
    assert grown(4096 * mib) == 4352 * mib  # the headroom capped at 256 MiB


def test_lengths_from_offsets_and_strided_cu_seqlens_k():
    """The extension's lengths_from_offsets (what plan() turns cu_seqlens_k into), and a plan()
    of paged caches with a strided cu_seqlens_k, as an engine's slice of a larger array would be
    (flat caches, which address K/V by cu_seqlens_k, need it contiguous)."""
    off = np.array([0, 5, 5, 300, 2**31 - 1, -(2**31)], np.int32)
    lengths = np.full(5, -7, np.int32)
    msa._msa.lengths_from_offsets(off, lengths)
    assert lengths.tolist() == [5, 0, 295, 2**31 - 1 - 300, 1]
    every_other = np.full(4, -7, np.int32)
    msa._msa.lengths_from_offsets(off[::2], every_other[::2])
    assert every_other.tolist() == [5, -7, 2**31 - 1 - 5, -7]
    expect_error("lengths.shape[0]", msa._msa.lengths_from_offsets, off, lengths[:4])
    expect_error("offsets.dtype", msa._msa.lengths_from_offsets, off.astype(np.float32), lengths)
    expect_error("lengths.data", msa._msa.lengths_from_offsets, off, off[1:])

    c = make_case()
    k_cache, v_cache, table = paged(c, 64)
    wide = np.zeros(2 * len(c["cu_k"]), np.int32)
    wide[::2] = c["cu_k"]
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, c, page_table=table)
    want = w.run(c["q"], (k_cache, v_cache)).copy()
    assert_close(want, None, *reference(c))
    w.plan(c["topk"], c["cu_q"], wide[::2], table, num_q_heads=c["h_q"], num_kv_heads=c["h_kv"],
           total_k=c["total_k"], total_rows=c["total_rows"], max_seqlen_q=c["max_q"], max_seqlen_k=c["max_k"],
           q_data_type="float16")
    assert np.array_equal(w.run(c["q"], (k_cache, v_cache)), want)


def test_flat_chunked_batch_matches_reference():
    c = make_case()
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, c)
    out, lse = w.run(c["q"], (c["k"], c["v"]), return_lse=True)
    assert out.shape == c["q"].shape and out.dtype == np.float16 and lse.dtype == np.float32
    assert_close(out, lse, *reference(c))
    assert np.abs(out).max() > 0.01  # a real result, not zeros


@pytest.mark.parametrize("page_size", [16, 64, 128])
@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_paged_caches_give_the_flat_result_bitwise(page_size, layout):
    c = make_case(seed=2, requests=((33, 400), (0, 50), (1, 1), (70, 270)))
    flat = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(flat, c)
    want = flat.run(c["q"], (c["k"], c["v"])).copy()
    k_cache, v_cache, table = paged(c, page_size, layout=layout)
    w = msa.BatchPrefillWithPagedKVCacheWrapper(kv_layout=layout)
    plan(w, c, page_table=table)
    got = w.run(c["q"], (k_cache, v_cache))
    assert np.array_equal(got, want)
    assert_close(got, None, *reference(c))


def test_sinks_match_reference():
    c = make_case(seed=4)
    sinks = np.linspace(-1.0, 2.0, c["h_q"]).astype(np.float32)
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, c)
    out, lse = w.run(c["q"], (c["k"], c["v"]), return_lse=True, sinks=sinks)
    assert_close(out, lse, *reference(c, sinks=sinks))


def test_adversarial_rows_count_each_in_range_block_once():
    c = make_case(seed=5, topk=6)
    ids = c["topk"].copy()
    ids[0, 0] = [-1, -1, -1, -1, -1, -1]     # nothing selected: out 0, lse -inf
    ids[1, 3] = [0, 0, 0, 2, 2, -7]          # duplicates and a negative id
    ids[0, 5] = [99, 1 << 30, 0, -1, 2, 1]   # out of range ids
    ids[1, 40] = [0, -1, 1, -1, 0, 1]        # holes and duplicates
    c["topk"] = ids
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, c)
    out, lse = w.run(c["q"], (c["k"], c["v"]), return_lse=True)
    ref_out, ref_lse = reference(c)
    assert_close(out, lse, ref_out, ref_lse)
    assert np.all(out[0, : c["h_q"] // c["h_kv"]] == 0) and np.all(np.isneginf(lse[0, : c["h_q"] // c["h_kv"]]))
    assert not np.isnan(lse).any()
    # Strict mode names the first offending id, in the wrapper's spelling.
    strict = msa.BatchPrefillWithPagedKVCacheWrapper(strict=True)
    with pytest.raises(msa.Error) as e:
        plan(strict, c)
    assert e.value.argument.startswith("topk_indices[")


def test_selecting_every_block_is_dense_causal_attention():
    c = make_case(seed=6, topk=4, requests=((50, 300), (64, 64)))
    ids = np.full_like(c["topk"], -1)
    for b, (ql, kl) in enumerate(c["requests"]):
        for i in range(ql):
            local = (kl - ql + i) // 128
            ids[:, c["cu_q"][b] + i, : local + 1] = np.arange(local + 1)
    c["topk"] = ids
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, c)
    out, lse = w.run(c["q"], (c["k"], c["v"]), return_lse=True)
    # Dense causal attention, written directly (no block selection at all).
    q, k, v = (c[n].astype(np.float64) for n in ("q", "k", "v"))
    g = c["h_q"] // c["h_kv"]
    for b, (ql, kl) in enumerate(c["requests"]):
        kb, qb = c["cu_k"][b], c["cu_q"][b]
        for h in range(c["h_q"]):
            s = q[qb : qb + ql, h] @ k[kb : kb + kl, h // g].T / np.sqrt(c["d"])
            s[np.arange(kl)[None, :] > (kl - ql + np.arange(ql))[:, None]] = -np.inf
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m)
            dense_out = p @ v[kb : kb + kl, h // g] / p.sum(axis=1, keepdims=True)
            np.testing.assert_allclose(out[qb : qb + ql, h].astype(np.float64), dense_out, atol=1e-2, rtol=1e-2)
            np.testing.assert_allclose(lse[qb : qb + ql, h], (m + np.log(p.sum(axis=1, keepdims=True)))[:, 0],
                                       atol=1e-3)


def test_plan_owned_outputs_and_caller_outputs():
    c = make_case(seed=7)
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, c)
    a = w.run(c["q"], (c["k"], c["v"]))
    b = w.run(c["q"], (c["k"], c["v"]))
    assert a is b  # the wrapper's buffer, the same every run of the plan
    plan(w, c)
    assert w.run(c["q"], (c["k"], c["v"])) is a  # and reused by a plan of the same sizes
    out = np.full(c["q"].shape, np.nan, np.float16)
    lse = np.full(c["q"].shape[:2], np.nan, np.float32)
    got_out, got_lse = w.run(c["q"], (c["k"], c["v"]), out=out, lse=lse, return_lse=True)
    assert got_out is out and got_lse is lse
    assert np.array_equal(out, a)  # bitwise the same result, run to run


def test_a_new_plan_is_seen_by_run():
    c = make_case(seed=8, topk=2)  # fewer than the 3 blocks: selections differ between seeds
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, c)
    first = w.run(c["q"], (c["k"], c["v"])).copy()
    c2 = dict(c, topk=make_case(seed=9, topk=2)["topk"])
    plan(w, c2)
    second = w.run(c["q"], (c["k"], c["v"]))
    assert not np.array_equal(first, second)
    assert_close(second, None, *reference(c2))


def test_errors_name_the_callers_argument():
    c = make_case()
    W = msa.BatchPrefillWithPagedKVCacheWrapper
    expect_error("kv_layout", W, kv_layout="NCHW")
    expect_error("backend", W, backend="tpu")
    w = W()
    expect_error("plan", w.run, c["q"], (c["k"], c["v"]))
    expect_error("causal", plan, w, c, causal=False)
    e = expect_error("total_k", plan, w, c, total_k=c["total_k"] + 1)
    assert e.value == str(c["total_k"] + 1)
    expect_error("total_rows", plan, w, c, total_rows=c["total_rows"] - 1)
    expect_error("max_seqlen_q", plan, w, c, max_seqlen_q=c["max_q"] - 1)
    expect_error("max_seqlen_k", plan, w, c, max_seqlen_k=c["max_k"] - 1)
    expect_error("max_seqlen_k", plan, w, c, max_seqlen_k=-1)
    expect_error("num_q_heads", plan, w, c, num_q_heads=3)
    expect_error("topk_indices.shape[0]", plan, w, c, num_kv_heads=c["h_kv"] + 1)
    expect_error("sm_scale", plan, w, c, sm_scale=float("nan"))
    expect_error("head_dim", plan, w, c, head_dim=96)
    expect_error("q_data_type", plan, w, c, q_data_type="bfloat16")  # NumPy has no bfloat16
    expect_error("topk_indices.ndim", plan, w, c, topk=c["topk"][0])
    expect_error("topk_indices.dtype", plan, w, c, topk=c["topk"].astype(np.int64))
    expect_error("cu_seqlens_k.shape[0]", w.plan, c["topk"], c["cu_q"], c["cu_k"][:-1], None, total_k=1,
                 total_rows=1, max_seqlen_q=1, max_seqlen_k=1)

    plan(w, c)
    expect_error("paged_kv_cache", w.run, c["q"], c["k"])
    expect_error("q.dtype", w.run, c["q"].astype(np.float32), (c["k"], c["v"]))
    expect_error("q.shape[2]", w.run, c["q"][:, :, :64], (c["k"], c["v"]))
    expect_error("paged_kv_cache[0].shape[0]", w.run, c["q"], (c["k"][:-1], c["v"]))
    expect_error("paged_kv_cache[1].dtype", w.run, c["q"], (c["k"], c["v"].astype(np.float32)))
    expect_error("sinks.shape[0]", w.run, c["q"], (c["k"], c["v"]), sinks=np.zeros(3, np.float32))
    expect_error("out.shape[1]", w.run, c["q"], (c["k"], c["v"]), out=np.zeros((c["q"].shape[0], 1, 128), np.float16))

    k_cache, v_cache, table = paged(c, 64, layout="NHD")
    wn = W(kv_layout="NHD")
    plan(wn, c, page_table=table)
    expect_error("paged_kv_cache[0].ndim", wn.run, c["q"], (c["k"], c["v"]))
    bad = table.copy()
    bad[0, 0] = 10_000
    ws = W(kv_layout="NHD", strict=True)
    plan(ws, c, page_table=bad)
    expect_error("page_table[0, 0]", ws.run, c["q"], (k_cache, v_cache))
