"""msa.Indexer and msa.TopK on the CPU backend with NumPy arrays, against NumPy oracles of spec §5
written here: index scores (flat and paged index keys, a chunked batch with tail blocks), exact
top-k on scores full of ties and -inf, the n <= topk shortcut, and errors naming the argument."""

import numpy as np
import pytest

import msa
from expect import expect_error

BLOCK = 128


def batch(requests):
    q_lens = [q for q, _ in requests]
    k_lens = [k for _, k in requests]
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(k_lens)]).astype(np.int32)
    return cu_q, cu_k, np.array(k_lens, np.int32)


def positions(requests):
    """Each packed query's request and position (bottom-right causal)."""
    out = []
    for b, (ql, kl) in enumerate(requests):
        out += [(b, kl - ql + i) for i in range(ql)]
    return out


def reference_scores(index_q, index_k_flat, requests, cu_k, scale, cols):
    h_i = index_q.shape[1]
    want = np.full((h_i, index_q.shape[0], cols), -np.inf)
    q64 = index_q.astype(np.float64)
    k64 = index_k_flat.astype(np.float64)[:, 0, :]
    for r, (b, pos) in enumerate(positions(requests)):
        keys = k64[cu_k[b]: cu_k[b] + pos + 1]  # the visible tokens, 0..pos
        dots = q64[r] @ keys.T  # [h_i, visible]
        for p in range((pos // BLOCK) + 1):
            want[:, r, p] = scale * dots[:, p * BLOCK: (p + 1) * BLOCK].max(axis=1)
    return want


def reference_topk(scores, requests, topk):
    h, total_q, _ = scores.shape
    want = np.full((h, total_q, topk), -1, np.int32)
    for r, (_, pos) in enumerate(positions(requests)):
        local = pos // BLOCK
        for g in range(h):
            if local + 1 <= topk:
                want[g, r, : local + 1] = np.arange(local + 1)
                continue
            row = scores[g, r, :local]
            # Score descending, ties to the smaller id; NaN below every number.
            key = np.where(np.isnan(row), -np.inf, row)
            nan_rank = np.isnan(row).astype(np.int8)
            order = np.lexsort((np.arange(local), -key, nan_rank))
            want[g, r, : topk - 1] = order[: topk - 1]
            want[g, r, topk - 1] = local
    return want


REQUESTS = ((40, 300), (1, 129), (17, 17), (3, 1000))


def index_case(seed, h_i=4, d=128, dtype=np.float16):
    rng = np.random.default_rng(seed)
    cu_q, cu_k, k_len = batch(REQUESTS)
    index_q = (rng.standard_normal((cu_q[-1], h_i, d)) * 0.25).astype(dtype)
    index_k = (rng.standard_normal((cu_k[-1], 1, d)) * 0.25).astype(dtype)
    cols = (max(k_len) + BLOCK - 1) // BLOCK
    return index_q, index_k, cu_q, cu_k, k_len, cols


def test_indexer_flat_matches_reference():
    index_q, index_k, cu_q, cu_k, k_len, cols = index_case(1)
    op = msa.Indexer(index_q.shape[1], 128)
    op.plan(cu_q, k_len)
    scores = np.full((index_q.shape[1], index_q.shape[0], cols + 1), np.nan, np.float32)  # a spare column
    op.run(index_q, index_k, scores, cu_q, k_len, cu_seqlens_k=cu_k)
    want = reference_scores(index_q, index_k, REQUESTS, cu_k, 1 / np.sqrt(128), cols + 1)
    assert np.array_equal(np.isinf(scores), np.isinf(want)) and not np.isnan(scores).any()
    finite = np.isfinite(want)
    assert finite.sum() > 100
    assert np.all(np.abs(scores[finite] - want[finite]) <= 2e-4 * np.maximum(1, np.abs(want[finite])))


def test_indexer_paged_equals_flat_bitwise():
    index_q, index_k, cu_q, cu_k, k_len, cols = index_case(2)
    op = msa.Indexer(index_q.shape[1], 128, scale=0.5)
    flat = np.empty((index_q.shape[1], index_q.shape[0], cols), np.float32)
    op.run(index_q, index_k, flat, cu_q, k_len, cu_seqlens_k=cu_k)
    # The same keys in shuffled pages of 32 tokens: [num_pages, 1, 32, d].
    page = 32
    rng = np.random.default_rng(3)
    pages_of = [(kl + page - 1) // page for _, kl in REQUESTS]
    physical = rng.permutation(sum(pages_of) + 2)
    cache = np.zeros((len(physical), 1, page, 128), index_k.dtype)
    table = np.full((len(REQUESTS), max(pages_of)), -1, np.int32)
    used = 0
    for b, (_, kl) in enumerate(REQUESTS):
        for j in range(pages_of[b]):
            dst = physical[used]
            used += 1
            table[b, j] = dst
            rows = index_k[cu_k[b] + j * page: cu_k[b] + min((j + 1) * page, kl), 0]
            cache[dst, 0, : len(rows)] = rows
    paged = np.empty_like(flat)
    op.run(index_q, cache, paged, cu_q, k_len, page_table=table)
    assert np.array_equal(paged, flat)
    want = reference_scores(index_q, index_k, REQUESTS, cu_k, 0.5, cols)
    finite = np.isfinite(want)
    assert np.all(np.abs(flat[finite] - want[finite]) <= 2e-4 * np.maximum(1, np.abs(want[finite])))


@pytest.mark.parametrize("topk", [1, 4, 16])
def test_topk_exact_with_ties_and_shortcut(topk):
    rng = np.random.default_rng(topk)
    cu_q, _, k_len = batch(REQUESTS)
    h, cols = 3, 8
    # Scores on a coarse grid (many ties), some -inf and NaN.
    scores = rng.integers(0, 4, size=(h, cu_q[-1], cols)).astype(np.float32)
    scores[rng.random(scores.shape) < 0.1] = -np.inf
    scores[rng.random(scores.shape) < 0.05] = np.nan
    out = np.full((h, cu_q[-1], topk), 7777, np.int32)
    op = msa.TopK(topk)
    op.plan(cu_q, k_len)
    op.run(scores, out, cu_q, k_len)
    want = reference_topk(scores, REQUESTS, topk)
    assert np.array_equal(out, want)
    assert (want >= 0).sum() > 0 and (topk == 1 or (want == -1).any())


def msa_quantised_topk(scores, requests, topk):
    """MSA's quantised top-k as its kernel spells it (finite rows): levels over each row's own
    [min, max], key = level << 16 | (~id & 0xFFFF), the largest keys first."""
    h, total_q, _ = scores.shape
    want = np.full((h, total_q, topk), -1, np.int32)
    for r, (_, pos) in enumerate(positions(requests)):
        local = pos // BLOCK
        for g in range(h):
            if local + 1 <= topk:
                want[g, r, : local + 1] = np.arange(local + 1)
                continue
            row = scores[g, r, :local]
            lo, hi = row.min(), row.max()
            scale = np.float32(65534.0) / (hi - lo) if hi > lo else np.float32(0.0)
            bias = np.float32(np.float64(-lo) * np.float64(scale) + 1.5)  # fma: an exact product, one rounding
            x = (row.astype(np.float64) * np.float64(scale) + np.float64(bias)).astype(np.float32)
            level = np.minimum(np.clip(x, 0, None).astype(np.uint64), 65535)
            key = (level << 16) | (~np.arange(local, dtype=np.uint64) & 0xFFFF)
            want[g, r, : topk - 1] = (~key[np.argsort(-key.astype(np.int64), kind="stable")[: topk - 1]]) & 0xFFFF
            want[g, r, topk - 1] = local
    return want


@pytest.mark.parametrize("topk", [2, 4, 16])
def test_topk_quantised16_is_msa_selection(topk):
    rng = np.random.default_rng(40 + topk)
    cu_q, _, k_len = batch(REQUESTS)
    h, cols = 3, 8
    # Wide coarse levels plus small noise: values within one quantisation step tie on their level.
    scores = (1e4 * rng.integers(0, 5, size=(h, cu_q[-1], cols)) + 0.3 * rng.standard_normal((h, cu_q[-1], cols)))
    scores = scores.astype(np.float32)
    out = np.full((h, cu_q[-1], topk), 7777, np.int32)
    msa.TopK(topk, ranking="quantised16").run(scores, out, cu_q, k_len)
    assert np.array_equal(out, msa_quantised_topk(scores, REQUESTS, topk))
    exact = np.empty_like(out)
    msa.TopK(topk).run(scores, exact, cu_q, k_len)
    if topk < cols:  # rows longer than topk: the levels merge scores that the exact ranking splits
        assert not np.array_equal(out, exact)


def test_indexer_then_topk_feed_the_prefill():
    index_q, index_k, cu_q, cu_k, k_len, cols = index_case(4, h_i=2)
    scores = np.empty((2, index_q.shape[0], cols), np.float32)
    msa.Indexer(2).run(index_q, index_k, scores, cu_q, k_len, cu_seqlens_k=cu_k)
    ids = np.empty((2, index_q.shape[0], 4), np.int32)
    msa.TopK(4).run(scores, ids, cu_q, k_len)
    assert np.array_equal(ids, reference_topk(scores, REQUESTS, 4))
    # The selection is valid input of the sparse prefill (h_kv = h_i = 2).
    rng = np.random.default_rng(5)
    q = (rng.standard_normal((index_q.shape[0], 4, 128)) * 0.25).astype(np.float16)
    kv = (rng.standard_normal((cu_k[-1], 2, 128)) * 0.25).astype(np.float16)
    out = np.empty_like(q)
    op = msa.SparsePrefill(4, 2, 128, 4, strict=True)
    op.plan(cu_q, k_len, ids)
    op.run(q, kv, kv, out, cu_q, k_len, ids, cu_seqlens_k=cu_k)
    assert np.isfinite(out.astype(np.float32)).all() and np.abs(out).max() > 0.01


def test_errors_name_the_argument():
    index_q, index_k, cu_q, cu_k, k_len, cols = index_case(6)
    op = msa.Indexer(index_q.shape[1])
    scores = np.empty((index_q.shape[1], index_q.shape[0], cols - 1), np.float32)  # one column short
    expect_error("scores.shape[2]", op.run, index_q, index_k, scores, cu_q, k_len, cu_seqlens_k=cu_k)
    expect_error("topk", msa.TopK, 33)
    expect_error("ranking", msa.TopK, 4, ranking="approximate")
    expect_error("h_i", msa.Indexer, 0)
    ids = np.empty((2, index_q.shape[0], 4), np.int64)  # not int32
    good = np.zeros((2, index_q.shape[0], cols), np.float32)
    expect_error("topk.dtype", msa.TopK(4).run, good, ids, cu_q, k_len)
    if not msa.cuda_available():
        expect_error("options.backend", msa.Indexer, 4, backend="cuda")
        expect_error("options.backend", msa.TopK, 4, backend="cuda")


@pytest.mark.parametrize("topk", [1, 4, 16])
def test_indexer_topk_is_indexer_then_topk(topk):
    """msa.IndexerTopK (no scores written) picks what TopK picks from Indexer's scores."""
    index_q, index_k, cu_q, cu_k, k_len, cols = index_case(31 + topk)
    h_i = index_q.shape[1]
    scores = np.empty((h_i, index_q.shape[0], cols), np.float32)
    msa.Indexer(h_i, 128).run(index_q, index_k, scores, cu_q, k_len, cu_seqlens_k=cu_k)
    want = np.empty((h_i, index_q.shape[0], topk), np.int32)
    msa.TopK(topk).run(scores, want, cu_q, k_len)
    op = msa.IndexerTopK(h_i, topk)
    assert op.workspace_bytes(len(REQUESTS), index_q.shape[0], int(max(k_len))) == 0
    op.plan(len(REQUESTS), index_q.shape[0], int(max(k_len)))
    got = np.full_like(want, 7777)
    op.run(index_q, index_k, got, cu_q, k_len, cu_seqlens_k=cu_k)
    assert np.array_equal(got, want) and (topk == 1 or (want[..., : topk - 1] >= 0).sum() > 0)
    expect_error("k_len[3]", lambda: (op.plan(len(REQUESTS), index_q.shape[0], 999),
                                      op.run(index_q, index_k, got, cu_q, k_len, cu_seqlens_k=cu_k)))
    expect_error("topk", msa.IndexerTopK, h_i, 33)
