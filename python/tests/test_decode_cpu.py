"""The MSA decode wrapper (msa.BatchDecodeWithPagedKVCacheWrapper) and msa.SparseDecode on the CPU
backend with NumPy arrays, against the NumPy reference of numpy_cases.py (a decode step is the
prefill of B requests of Q queries): paged and flat caches, both top-k layouts, sinks, errors."""

import numpy as np
import pytest

import msa
from expect import expect_error
from numpy_cases import assert_close, make_case, paged, reference

Q = 3


def decode_case(seed=0, h_q=8, h_kv=2, topk=4, seq_lens=(300, 3, 129, 700)):
    c = make_case(seed=seed, h_q=h_q, h_kv=h_kv, topk=topk, requests=tuple((Q, s) for s in seq_lens))
    c["seq_lens"] = np.array(seq_lens, np.int32)
    c["topk_qm"] = np.ascontiguousarray(c["topk"].transpose(1, 0, 2))  # [B * Q, h_kv, K]
    return c


def plan(w, c, page_table=None, **kw):
    args = dict(q_len_per_request=Q, num_q_heads=c["h_q"], num_kv_heads=c["h_kv"], head_dim=c["d"], topk=c["K"],
                max_seqlen_k=c["max_k"], q_data_type="float16")
    if page_table is None:
        args["cu_seqlens_k"] = c["cu_k"]
    args.update(kw)
    w.plan(c["seq_lens"], page_table, **args)


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_paged_step_matches_reference(layout):
    c = decode_case(seed=1)
    k_cache, v_cache, table = paged(c, 32, layout=layout)
    w = msa.BatchDecodeWithPagedKVCacheWrapper(kv_layout=layout)
    plan(w, c, page_table=table)
    out, lse = w.run(c["q"], (k_cache, v_cache), c["topk_qm"], return_lse=True)
    assert out.shape == c["q"].shape and out.dtype == np.float16
    assert_close(out, lse, *reference(c))
    assert np.abs(out).max() > 0.01


def test_flat_head_major_and_pythonic_layer_agree_bitwise():
    c = decode_case(seed=2)
    w = msa.BatchDecodeWithPagedKVCacheWrapper()
    plan(w, c)
    want, want_lse = w.run(c["q"], (c["k"], c["v"]), c["topk_qm"], return_lse=True)
    want, want_lse = want.copy(), want_lse.copy()
    assert_close(want, want_lse, *reference(c))
    got = w.run(c["q"], (c["k"], c["v"]), c["topk"], topk_head_major=True)
    assert np.array_equal(got, want)
    op = msa.SparseDecode(c["h_q"], c["h_kv"], c["d"], c["K"])
    op.plan(len(c["seq_lens"]), Q, c["max_k"])
    out = np.full(c["q"].shape, np.nan, np.float16)
    lse = np.full(c["q"].shape[:2], np.nan, np.float32)
    op.run(c["q"], c["k"], c["v"], out, c["seq_lens"], c["topk_qm"], Q, cu_seqlens_k=c["cu_k"], lse=lse)
    assert np.array_equal(out, want) and np.array_equal(lse, want_lse)


def test_sinks():
    c = decode_case(seed=3)
    sinks = np.linspace(-1.0, 1.5, c["h_q"]).astype(np.float32)
    w = msa.BatchDecodeWithPagedKVCacheWrapper()
    plan(w, c)
    out, lse = w.run(c["q"], (c["k"], c["v"]), c["topk_qm"], return_lse=True, sinks=sinks)
    assert_close(out, lse, *reference(c, sinks=sinks))


def test_errors_name_the_callers_argument():
    c = decode_case(seed=4)
    w = msa.BatchDecodeWithPagedKVCacheWrapper()
    expect_error("plan", w.run, c["q"], (c["k"], c["v"]), c["topk_qm"])
    expect_error("cu_seqlens_k", w.plan, c["seq_lens"], None, max_seqlen_k=c["max_k"])
    expect_error("q_len_per_request", plan, w, c, q_len_per_request=17)
    expect_error("max_seqlen_k", plan, w, c, max_seqlen_k=c["max_k"] - 1)
    expect_error("num_q_heads", plan, w, c, num_q_heads=3)
    expect_error("sm_scale", plan, w, c, sm_scale=-1.0)
    plan(w, c)
    expect_error("topk_indices.shape[0]", w.run, c["q"], (c["k"], c["v"]), c["topk"])  # head-major, not said
    expect_error("topk_indices.shape[2]", w.run, c["q"], (c["k"], c["v"]), c["topk_qm"][:, :, :2])
    expect_error("q.shape[0]", w.run, c["q"][:-1], (c["k"], c["v"]), c["topk_qm"])
    expect_error("paged_kv_cache[1].dtype", w.run, c["q"], (c["k"], c["v"].astype(np.float32)), c["topk_qm"])
    bad = c["seq_lens"].copy()
    w2 = msa.BatchDecodeWithPagedKVCacheWrapper()
    plan(w2, dict(c, seq_lens=bad))
    bad[1] = Q - 1  # a request shorter than its queries
    expect_error("seq_lens[1]", w2.run, c["q"], (c["k"], c["v"]), c["topk_qm"])
