"""msa.Indexer and msa.TopK on the CUDA backend with PyTorch tensors (skipped without PyTorch, a
GPU or a CUDA build), against the NumPy oracles of test_selection_cpu.py: index scores of flat
and paged keys (a chunked batch with tail blocks, a spare column); ties, -inf and NaN scores,
the n <= topk shortcut, rows of thousands of blocks, and the query-major output seen through a
transposed view."""

import numpy as np
import pytest

import msa
from test_selection_cpu import REQUESTS as INDEX_REQUESTS
from test_selection_cpu import batch, index_case, msa_quantised_topk, reference_scores, reference_topk

torch = pytest.importorskip("torch")
if not (torch.cuda.is_available() and msa.cuda_available()):
    pytest.skip("no CUDA device or no CUDA build", allow_module_level=True)

DEV = "cuda"
REQUESTS = [(40, 5000), (3, 3), (0, 90), (130, 1100), (2, 2049), (7, 600000)]


def scores_case(seed, h, total_q, cols):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 6, size=(h, total_q, cols)).astype(np.float32)
    scores[rng.random(scores.shape) < 0.05] = -np.inf
    scores[rng.random(scores.shape) < 0.03] = np.nan
    return scores


@pytest.mark.parametrize("topk", [1, 5, 16, 32])
def test_topk_matches_the_oracle(topk):
    cu_q, _, k_len = batch(REQUESTS)
    h, cols = 2, max(kl for _, kl in REQUESTS) // 128 + 1
    scores = scores_case(topk, h, int(cu_q[-1]), cols)
    out = torch.full((h, int(cu_q[-1]), topk), 7777, dtype=torch.int32, device=DEV)
    op = msa.TopK(topk, backend="cuda")
    cu_d, kl_d = torch.from_numpy(cu_q).to(DEV), torch.from_numpy(k_len).to(DEV)
    op.plan(cu_d, kl_d)
    op.run(torch.from_numpy(scores).to(DEV), out, cu_d, kl_d)
    torch.cuda.synchronize()
    assert np.array_equal(out.cpu().numpy(), reference_topk(scores, REQUESTS, topk))


@pytest.mark.parametrize("topk", [2, 16])
def test_topk_quantised16_matches_the_msa_oracle(topk):
    cu_q, _, k_len = batch(REQUESTS)
    h, cols = 2, max(kl for _, kl in REQUESTS) // 128 + 1
    rng = np.random.default_rng(90 + topk)
    scores = 1e4 * rng.integers(0, 9, size=(h, int(cu_q[-1]), cols)) + 0.3 * rng.standard_normal((h, int(cu_q[-1]), cols))
    scores = scores.astype(np.float32)
    out = torch.full((h, int(cu_q[-1]), topk), 7777, dtype=torch.int32, device=DEV)
    cu_d, kl_d = torch.from_numpy(cu_q).to(DEV), torch.from_numpy(k_len).to(DEV)
    msa.TopK(topk, backend="cuda", ranking="quantised16").run(torch.from_numpy(scores).to(DEV), out, cu_d, kl_d)
    torch.cuda.synchronize()
    assert np.array_equal(out.cpu().numpy(), msa_quantised_topk(scores, REQUESTS, topk))


def test_topk_query_major_output():
    cu_q, _, k_len = batch(REQUESTS)
    h, cols, topk = 4, max(kl for _, kl in REQUESTS) // 128 + 1, 16
    scores = scores_case(3, h, int(cu_q[-1]), cols)
    qm = torch.full((int(cu_q[-1]), h, topk), -5, dtype=torch.int32, device=DEV)  # [total_q, h, topk]
    cu_d, kl_d = torch.from_numpy(cu_q).to(DEV), torch.from_numpy(k_len).to(DEV)
    msa.TopK(topk, backend="cuda", strict=True).run(torch.from_numpy(scores).to(DEV), qm.transpose(0, 1), cu_d, kl_d)
    torch.cuda.synchronize()
    assert np.array_equal(qm.transpose(0, 1).cpu().numpy(), reference_topk(scores, REQUESTS, topk))


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_indexer_flat_and_paged_match_the_oracle(dtype):
    index_q, index_k, cu_q, cu_k, k_len, cols = index_case(11)
    tdtype = torch.float16 if dtype is np.float16 else torch.bfloat16
    q_d = torch.from_numpy(index_q.astype(np.float32)).to(DEV, tdtype)
    k_d = torch.from_numpy(index_k.astype(np.float32)).to(DEV, tdtype)
    # The oracle reads the values the device sees (rounded to the dtype).
    q_ref, k_ref = q_d.float().cpu().numpy(), k_d.float().cpu().numpy()
    want = reference_scores(q_ref, k_ref, INDEX_REQUESTS, cu_k, 1 / np.sqrt(128), cols + 1)
    cu_d, kl_d = torch.from_numpy(cu_q).to(DEV), torch.from_numpy(k_len).to(DEV)
    op = msa.Indexer(index_q.shape[1], 128, backend="cuda")
    op.plan(cu_d, kl_d)

    def check(scores):
        got = scores.cpu().numpy()
        assert np.array_equal(np.isinf(got), np.isinf(want)) and not np.isnan(got).any()
        finite = np.isfinite(want)
        assert finite.sum() > 100
        assert np.all(np.abs(got[finite] - want[finite]) <= 2e-4 * np.maximum(1, np.abs(want[finite])))

    flat = torch.full((index_q.shape[1], index_q.shape[0], cols + 1), float("nan"), device=DEV)
    op.run(q_d, k_d, flat, cu_d, kl_d, cu_seqlens_k=torch.from_numpy(cu_k).to(DEV))
    torch.cuda.synchronize()
    check(flat)
    # The same keys in shuffled pages of 16 tokens: [num_pages, 1, 16, d].
    page = 16
    rng = np.random.default_rng(5)
    pages_of = [(kl + page - 1) // page for _, kl in INDEX_REQUESTS]
    physical = rng.permutation(sum(pages_of))
    cache = torch.zeros((len(physical), 1, page, 128), dtype=tdtype, device=DEV)
    table = np.zeros((len(INDEX_REQUESTS), max(pages_of)), np.int32)
    used = 0
    for b, (_, kl) in enumerate(INDEX_REQUESTS):
        for j in range(pages_of[b]):
            table[b, j] = physical[used]
            rows = k_d[cu_k[b] + j * page: cu_k[b] + min(kl, (j + 1) * page)]
            cache[physical[used], 0, : rows.shape[0]] = rows[:, 0]
            used += 1
    paged = torch.full_like(flat, float("nan"))
    op.run(q_d, cache, paged, cu_d, kl_d, page_table=torch.from_numpy(table).to(DEV))
    torch.cuda.synchronize()
    check(paged)


@pytest.mark.parametrize("topk", [5, 16, 32])
def test_indexer_topk_equals_indexer_then_topk(topk):
    """msa.IndexerTopK on the GPU: the ids Indexer + TopK pick from the same device scores, id for
    id, in the prefill layout and through a transposed (query-major) view."""
    requests = [(40, 5000), (3, 300), (130, 4200), (8, 9000)]
    cu_q, cu_k, k_len = batch(requests)
    rng = np.random.default_rng(60 + topk)
    total_q, h_i = int(cu_q[-1]), 4
    q_d = torch.from_numpy(rng.standard_normal((total_q, h_i, 128)) * 0.25).to(DEV, torch.bfloat16)
    k_d = torch.from_numpy(rng.standard_normal((int(cu_k[-1]), 1, 128)) * 0.25).to(DEV, torch.bfloat16)
    cu_d, kl_d, ck_d = (torch.from_numpy(a).to(DEV) for a in (cu_q, k_len, cu_k))
    cols = (int(max(k_len)) + 127) // 128
    scores = torch.empty((h_i, total_q, cols), device=DEV)
    msa.Indexer(h_i, 128, backend="cuda").run(q_d, k_d, scores, cu_d, kl_d, cu_seqlens_k=ck_d)
    want = torch.empty((h_i, total_q, topk), dtype=torch.int32, device=DEV)
    msa.TopK(topk, backend="cuda").run(scores, want, cu_d, kl_d)
    op = msa.IndexerTopK(h_i, topk, backend="cuda")
    op.plan(len(requests), total_q, int(max(k_len)))
    got = torch.full_like(want, 7777)
    op.run(q_d, k_d, got, cu_d, kl_d, cu_seqlens_k=ck_d)
    query_major = torch.full((total_q, h_i, topk), 7777, dtype=torch.int32, device=DEV)
    op.run(q_d, k_d, query_major.transpose(0, 1), cu_d, kl_d, cu_seqlens_k=ck_d)
    torch.cuda.synchronize()
    assert torch.equal(got, want) and torch.equal(query_major.transpose(0, 1), want)
    assert int((want[..., topk - 1] >= topk).sum()) > 0  # rows that rank their candidates
