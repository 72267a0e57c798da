"""How both Python layers take their arguments (CPU backend, NumPy): read-only input arrays are
read like any other, a read-only output is an msa.Error naming it; sizes may be any integer type
(NumPy scalars, one-element arrays) and one too large for the C++ parameter is named; things that
are no array, no int or no float where one is needed are named, not left to nanobind's TypeError;
a scale fp32 cannot hold is refused rather than taken as the default; a dtype msa does not take is
named as the array libraries name it."""

import numpy as np
import pytest

import msa
from expect import expect_error
from numpy_cases import assert_close, make_case, reference
from test_indexer_wrappers import prefill_case, prefill_plan
from test_wrapper_cpu import plan


def read_only(a):
    a = a.copy()
    a.setflags(write=False)
    return a


def test_read_only_inputs_are_read_and_read_only_outputs_named():
    c = make_case()
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, c, topk=read_only(c["topk"]))
    out, lse = w.run(read_only(c["q"]), (read_only(c["k"]), read_only(c["v"])), return_lse=True)
    assert_close(out, lse, *reference(c))
    assert np.abs(out).max() > 0.01
    expect_error("out", w.run, c["q"], (c["k"], c["v"]), out=read_only(out))
    expect_error("lse", w.run, c["q"], (c["k"], c["v"]), lse=read_only(lse), return_lse=True)

    # The Pythonic layer: the same inputs read-only, outputs named.
    op = msa.SparsePrefill(c["h_q"], c["h_kv"], c["d"], c["topk"].shape[2])
    k_len = np.diff(c["cu_k"]).astype(np.int32)
    op.plan(read_only(c["cu_q"]), read_only(k_len), read_only(c["topk"]))
    got = np.zeros_like(out)
    op.run(read_only(c["q"]), read_only(c["k"]), read_only(c["v"]), got, read_only(c["cu_q"]), read_only(k_len),
           read_only(c["topk"]), cu_seqlens_k=read_only(c["cu_k"]))
    assert np.array_equal(got, out)
    expect_error("out", op.run, c["q"], c["k"], c["v"], read_only(got), c["cu_q"], k_len, c["topk"],
                 cu_seqlens_k=c["cu_k"])
    expect_error("lengths", msa._msa.lengths_from_offsets, c["cu_k"], read_only(k_len))


def test_sizes_take_any_integer_and_name_what_does_not_fit():
    c = make_case()
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, c, num_q_heads=np.int64(c["h_q"]), total_k=np.int32(c["total_k"]), max_seqlen_k=np.int64(c["max_k"]),
         max_seqlen_q=np.array(c["max_q"]), head_dim=np.uint16(c["d"]))
    assert_close(*w.run(c["q"], (c["k"], c["v"]), return_lse=True), *reference(c))
    expect_error("num_q_heads", plan, w, c, num_q_heads=2**31)
    expect_error("max_seqlen_k", plan, w, c, max_seqlen_k=2**63)
    expect_error("max_seqlen_k", plan, w, c, max_seqlen_k=float(c["max_k"]))
    expect_error("head_dim", plan, w, c, head_dim=True)
    expect_error("q_per_item", msa.BatchPrefillWithPagedKVCacheWrapper, q_per_item=2**31)
    # Beyond what the operator can size: the C++ layer's name, as the caller spells it.
    expect_error("max_seqlen_k", plan, w, c, max_seqlen_k=2**40)

    d = msa.BatchDecodeWithPagedKVCacheWrapper()
    lens = np.array([300, 40], np.int32)
    d.plan(lens, None, q_len_per_request=np.int32(2), num_q_heads=4, num_kv_heads=2, topk=np.int64(4),
           max_seqlen_k=lens.max(), q_data_type=np.float16, cu_seqlens_k=np.array([0, 300, 340], np.int32))
    expect_error("max_seqlen_k", d.plan, lens, None, max_seqlen_k=2**40, cu_seqlens_k=np.array([0, 1, 2], np.int32))

    # The Pythonic layer.
    assert msa.SparsePrefill(np.int64(4), np.int32(2)).workspace_bytes(np.int64(2), 10, np.int32(300)) >= 0
    expect_error("h_q", msa.SparsePrefill, 4.0, 2)
    expect_error("h_kv", msa.SparseDecode, 4, 2**31)
    expect_error("scale", msa.SparsePrefill, 4, 2, scale="large")
    expect_error("batch", msa.SparseDecode(4, 2).plan, 2**63, 1, 100)
    expect_error("max_k_len", msa.IndexerTopK(1).plan, 1, 1, 1.5)


def test_what_is_no_array_is_named():
    c = make_case()
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, c)
    for name in ("sinks", "out", "lse"):
        expect_error(name, w.run, c["q"], (c["k"], c["v"]), **{name: [0.0] * 4})
    expect_error("sinks", w.run, c["q"], (c["k"], c["v"]), sinks=0.5)
    op = msa.SparsePrefill(c["h_q"], c["h_kv"], c["d"], c["topk"].shape[2])
    k_len = np.diff(c["cu_k"]).astype(np.int32)
    op.plan(c["cu_q"], k_len, c["topk"])
    out = np.zeros_like(c["q"])
    expect_error("sinks", op.run, c["q"], c["k"], c["v"], out, c["cu_q"], k_len, c["topk"], cu_seqlens_k=c["cu_k"],
                 sinks=[0.0] * c["h_q"])
    expect_error("k_len", op.plan, c["cu_q"], list(k_len), c["topk"])
    expect_error("stream", op.plan, c["cu_q"], k_len, c["topk"], stream="default")
    expect_error("buffer", op.set_workspace, "none")

    q, _, cache, table, cu_q, cu_k = prefill_case(11)
    s = msa.BatchPrefillIndexerWithPagedKVCacheWrapper()
    prefill_plan(s, cu_q, cu_k, table, 4)
    expect_error("out", s.run, q, cache, out=[[0] * 16])


def test_a_rejected_out_leaves_the_kept_scores_alone():
    q, _, cache, table, cu_q, cu_k = prefill_case(11)
    w = msa.BatchPrefillIndexerWithPagedKVCacheWrapper(keep_scores=True)
    prefill_plan(w, cu_q, cu_k, table, 4)
    w.run(q, cache)
    kept = w.scores.copy()
    assert np.isfinite(kept).any()
    bad = np.zeros(w.run(q, cache).shape[:2] + (w.run(q, cache).shape[2] + 1,), np.int32)
    expect_error("out.shape", w.run, q * 2, cache, out=bad)
    assert np.array_equal(w.scores, kept, equal_nan=True)
    expect_error("out", w.run, q * 2, cache, out=bad.astype(np.int64)[..., :-1])
    assert np.array_equal(w.scores, kept, equal_nan=True)


@pytest.mark.parametrize("scale", [1e-50, 1e39, float("nan"), -1.0, 0.0, "0.1"])
def test_a_scale_fp32_cannot_hold_is_refused(scale):
    c = make_case()
    expect_error("sm_scale", plan, msa.BatchPrefillWithPagedKVCacheWrapper(), c, sm_scale=scale)


def test_q_data_type_takes_numpy_types_and_dtypes():
    c = make_case()
    for q_type in (np.float16, np.dtype("float16"), "float16"):
        w = msa.BatchPrefillWithPagedKVCacheWrapper()
        plan(w, c, q_data_type=q_type)
        assert w.run(c["q"], (c["k"], c["v"])).dtype == np.float16
    expect_error("q_data_type", plan, msa.BatchPrefillWithPagedKVCacheWrapper(), c, q_data_type=np.float32)


def test_a_dtype_msa_does_not_take_is_named_as_libraries_name_it():
    c = make_case()
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    plan(w, c)
    e = expect_error("q.dtype", w.run, c["q"].astype(np.float64), (c["k"], c["v"]))
    assert e.value == "float64", str(e)
    e = expect_error("q.dtype", w.run, np.zeros(c["q"].shape, bool), (c["k"], c["v"]))
    assert e.value == "bool", str(e)
    e = expect_error("topk_indices.dtype", plan, w, c, topk=c["topk"].astype(np.int64))
    assert e.value == "int64", str(e)


def test_indexer_wrappers_name_the_callers_dims_and_lengths():
    q, _, cache, table, cu_q, cu_k = prefill_case(11)
    d = msa.BatchDecodeIndexerWithPagedKVCacheWrapper()
    lens = np.array([300, 200], np.int32)
    d.plan(table[:2], lens, num_index_heads=4, query_length=2)
    rows = q[:4].reshape(2, 2, 4, 128)
    flat = cache[:, 0]  # [num_pages, page_size, 128]
    assert d.run(rows, flat).shape == (4, 4, 16)
    expect_error("paged_k_cache.shape[1]", d.run, rows, flat[:, :48])  # 48-token pages
    expect_error("paged_k_cache.shape[2]", d.run, rows, np.ascontiguousarray(flat[:, :, :64]))
    # A length from cu_seqlens_k is named as one, not as the offset of the same index.
    w = msa.BatchPrefillIndexerWithPagedKVCacheWrapper()
    prefill_plan(w, cu_q, cu_k, table, 4)
    bad = cu_k.copy()
    bad[1] = bad[0] - 5
    w._cu_seqlens_k[:] = bad  # lengths changed in place, as replan() allows
    w.replan()
    e = expect_error("cu_seqlens_k (as lengths) k_len[0]", w.run, q, cache)
    assert e.value == "-5", str(e)


def test_index_arrays_kept_for_run_are_checked_at_plan():
    c = make_case()
    w = msa.BatchPrefillWithPagedKVCacheWrapper()
    table = np.zeros((3, 4), np.int64)
    expect_error("page_table.dtype", plan, w, c, page_table=table)
    d = msa.BatchDecodeWithPagedKVCacheWrapper()
    expect_error("seq_lens.dtype", d.plan, np.array([300], np.int64), np.zeros((1, 3), np.int32), max_seqlen_k=300)
    expect_error("page_table.dtype", d.plan, np.array([300], np.int32), np.zeros((1, 3), np.int64), max_seqlen_k=300)

