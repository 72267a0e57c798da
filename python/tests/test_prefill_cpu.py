"""msa.SparsePrefill on the CPU backend with NumPy tensors: a chunked flat-KV prefill against the
NumPy reference of numpy_cases.py (an oracle independent of the C++ one), and msa.Error's contract."""

import numpy as np
import pytest

import msa
from numpy_cases import make_case, reference


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
