"""The MSA indexer wrappers (BatchPrefillIndexerWithPagedKVCacheWrapper,
BatchDecodeIndexerWithPagedKVCacheWrapper) on NumPy arrays (CPU backend) and, when PyTorch and a
GPU are there, on CUDA tensors, including a captured CUDA graph replayed after new lengths and
FP8 E4M3 queries and keys (MSA's q8kv8) on both backends:
their scores against the NumPy oracle of spec §5 (raw dot products, no scale), their top-k ids
against the exact oracle on those scores, the quantised ranking against MSA's formula, the
selection feeding the attention wrapper, and errors naming the caller's argument. The default
wrappers select with msa::IndexerTopK (no scores): their ids must equal, id for id, those of a
``keep_scores=True`` wrapper (msa::Indexer then msa::TopK) on the same backend."""

import numpy as np
import pytest

import msa
from expect import expect_error
from test_selection_cpu import BLOCK, batch, msa_quantised_topk, reference_scores, reference_topk

REQUESTS = ((40, 3000), (1, 129), (17, 17), (3, 1000), (0, 50), (200, 2200))


def paged(index_k_flat, requests, page, seed):
    """The flat keys [total_k, 1, d] in shuffled pages [num_pages, 1, page, d] and the page table."""
    rng = np.random.default_rng(seed)
    _, cu_k, _ = batch(requests)
    pages_of = [(kl + page - 1) // page for _, kl in requests]
    physical = rng.permutation(sum(pages_of) + 3)
    cache = np.zeros((len(physical), 1, page, index_k_flat.shape[2]), index_k_flat.dtype)
    table = np.zeros((len(requests), max(pages_of) + 1), np.int32)
    used = 0
    for b, (_, kl) in enumerate(requests):
        for j in range(pages_of[b]):
            table[b, j] = physical[used]
            rows = index_k_flat[cu_k[b] + j * page: cu_k[b] + min((j + 1) * page, kl), 0]
            cache[physical[used], 0, : len(rows)] = rows
            used += 1
    return cache, table


def prefill_case(seed, heads=4, page=64):
    rng = np.random.default_rng(seed)
    cu_q, cu_k, _ = batch(REQUESTS)
    q = (rng.standard_normal((int(cu_q[-1]), heads, 128)) * 0.25).astype(np.float16)
    k_flat = (rng.standard_normal((int(cu_k[-1]), 1, 128)) * 0.25).astype(np.float16)
    cache, table = paged(k_flat, REQUESTS, page, seed + 1)
    return q, k_flat, cache, table, cu_q, cu_k


def check_scores(got, want, tol=2e-4):
    assert np.array_equal(np.isinf(got), np.isinf(want)) and not np.isnan(got).any()
    finite = np.isfinite(want)
    assert finite.sum() > 100
    assert np.all(np.abs(got[finite] - want[finite]) <= tol * np.maximum(1, np.abs(want[finite])))


def prefill_plan(wrapper, cu_q, cu_k, table, heads):
    wrapper.plan(cu_q, cu_k, table, total_q=int(cu_q[-1]), max_seqlen_q=max(q for q, _ in REQUESTS),
                 max_seqlen_k=max(k for _, k in REQUESTS), num_index_heads=heads)


@pytest.mark.parametrize("heads", [1, 4])
def test_prefill_wrapper_selects_the_oracle_blocks(heads):
    q, k_flat, cache, table, cu_q, cu_k = prefill_case(heads, heads)
    w = msa.BatchPrefillIndexerWithPagedKVCacheWrapper(keep_scores=True)
    prefill_plan(w, cu_q, cu_k, table, heads)
    ids = w.run(q, cache)
    fused = msa.BatchPrefillIndexerWithPagedKVCacheWrapper()
    prefill_plan(fused, cu_q, cu_k, table, heads)
    assert np.array_equal(fused.run(q, cache), ids) and fused.scores is None
    cols = (max(k for _, k in REQUESTS) + BLOCK - 1) // BLOCK
    assert ids.shape == (heads, int(cu_q[-1]), 16) and ids.dtype == np.int32
    check_scores(w.scores, reference_scores(q, k_flat, REQUESTS, cu_k, 1.0, cols))
    assert np.array_equal(ids, reference_topk(w.scores, REQUESTS, 16))
    # out= takes the ids instead of the wrapper's buffer.
    out = np.full_like(ids, 99)
    assert w.run(q, cache, out=out) is out and np.array_equal(out, ids)


def test_prefill_wrapper_quantised_ranking_is_msa_selection():
    q, _, cache, table, cu_q, cu_k = prefill_case(7)
    w = msa.BatchPrefillIndexerWithPagedKVCacheWrapper(ranking="quantised16")
    prefill_plan(w, cu_q, cu_k, table, 4)
    ids = w.run(q, cache)
    assert np.array_equal(ids, msa_quantised_topk(w.scores, REQUESTS, 16))


def test_prefill_wrapper_replan_reads_new_lengths():
    q, k_flat, cache, table, cu_q, cu_k = prefill_case(9)
    w = msa.BatchPrefillIndexerWithPagedKVCacheWrapper(keep_scores=True)
    prefill_plan(w, cu_q, cu_k, table, 4)
    w.run(q, cache)
    # Request 0 becomes 2000 keys long (its queries move back), written in place.
    shorter = list(REQUESTS)
    shorter[0] = (40, 2000)
    cu_k[1:] = np.cumsum([k for _, k in shorter])
    w.replan()
    ids = w.run(q, cache)
    assert np.array_equal(ids, reference_topk(w.scores, shorter, 16))
    assert ids[:, :40].max() <= 2000 // BLOCK


def test_decode_wrapper_selects_the_oracle_blocks():
    rng = np.random.default_rng(3)
    seq_lens, q_len, heads, page = [5000, 300, 4, 129], 4, 2, 32
    requests = [(q_len, L) for L in seq_lens]
    k_flat = (rng.standard_normal((sum(seq_lens), 1, 128)) * 0.25).astype(np.float16)
    cache, table = paged(k_flat, requests, page, 4)
    q = (rng.standard_normal((len(seq_lens), q_len, heads, 128)) * 0.25).astype(np.float16)
    w = msa.BatchDecodeIndexerWithPagedKVCacheWrapper(keep_scores=True)
    assert w.workspace_size(len(seq_lens)) == 0
    w.plan(table, np.array(seq_lens, np.int32), num_index_heads=heads, query_length=q_len)
    ids = w.run(q, cache[:, 0])  # the decode cache is [num_pages, page_size, 128]
    fused = msa.BatchDecodeIndexerWithPagedKVCacheWrapper()
    fused.plan(table, np.array(seq_lens, np.int32), num_index_heads=heads, query_length=q_len)
    assert np.array_equal(fused.run(q, cache[:, 0]), ids)
    _, cu_k, _ = batch(requests)
    rows = q.reshape(-1, heads, 128)
    check_scores(w.scores[:, :, : (max(seq_lens) + BLOCK - 1) // BLOCK],
                 reference_scores(rows, k_flat, requests, cu_k, 1.0, (max(seq_lens) + BLOCK - 1) // BLOCK))
    assert ids.shape == (heads, len(seq_lens) * q_len, 16)
    assert np.array_equal(ids, reference_topk(w.scores, requests, 16))


def test_decode_wrapper_graph_buffers_take_each_plan():
    rng = np.random.default_rng(5)
    heads, q_len, page = 1, 2, 128
    table_buf, lens_buf = np.zeros((2, 40), np.int32), np.zeros(2, np.int32)
    w = msa.BatchDecodeIndexerWithPagedKVCacheWrapper(use_cuda_graph=True, page_table_buffer=table_buf,
                                                      seq_lens_buffer=lens_buf, keep_scores=True)
    for seq_lens in ([4000, 2500], [4100, 700]):
        requests = [(q_len, L) for L in seq_lens]
        k_flat = (rng.standard_normal((sum(seq_lens), 1, 128)) * 0.25).astype(np.float16)
        cache, table = paged(k_flat, requests, page, 6)
        table = np.pad(table, ((0, 0), (0, 40 - table.shape[1])))
        w.plan(table, np.array(seq_lens, np.int32), num_index_heads=heads, query_length=q_len)
        assert np.array_equal(lens_buf, seq_lens) and np.array_equal(table_buf, table)
        q = (rng.standard_normal((2, q_len, heads, 128)) * 0.25).astype(np.float16)
        ids = w.run(q, cache[:, 0])
        assert np.array_equal(ids, reference_topk(w.scores, requests, 16))


def test_indexer_wrappers_name_the_callers_arguments():
    q, _, cache, table, cu_q, cu_k = prefill_case(11)
    w = msa.BatchPrefillIndexerWithPagedKVCacheWrapper()
    expect_error("plan", w.run, q, cache)
    expect_error("ranking", msa.BatchPrefillIndexerWithPagedKVCacheWrapper, ranking="fast")
    expect_error("keep_scores", msa.BatchPrefillIndexerWithPagedKVCacheWrapper, keep_scores=1)
    expect_error("num_index_heads", w.plan, cu_q, cu_k, table, total_q=int(cu_q[-1]), max_seqlen_q=200,
                 max_seqlen_k=3000, num_index_heads=0)
    expect_error("total_q", w.plan, cu_q, cu_k, table, total_q=5, max_seqlen_q=200, max_seqlen_k=3000)
    expect_error("max_seqlen_k", w.plan, cu_q, cu_k, table, total_q=int(cu_q[-1]), max_seqlen_q=200,
                 max_seqlen_k=2999)
    prefill_plan(w, cu_q, cu_k, table, 4)
    expect_error("q.shape[1]", w.run, q[:, :2], cache)
    expect_error("paged_k_cache.dtype", w.run, q, cache.astype(np.float32))
    d = msa.BatchDecodeIndexerWithPagedKVCacheWrapper()
    lens = np.array([300, 200], np.int32)
    expect_error("shared_plan", d.plan, table[:2], lens, shared_plan=object())
    expect_error("query_length", d.plan, table[:2], lens, query_length=17)
    expect_error("use_cuda_graph", msa.BatchDecodeIndexerWithPagedKVCacheWrapper, use_cuda_graph=True)
    d.plan(table[:2], lens, num_index_heads=4, query_length=2)
    expect_error("q.shape", d.run, q[:8].reshape(2, 4, 4, 128), cache[:, 0])


# ------------------------------------------------------------------ CUDA

try:
    import torch
except ImportError:
    torch = None
needs_gpu = pytest.mark.skipif(torch is None or not (torch.cuda.is_available() and msa.cuda_available()),
                               reason="no PyTorch, CUDA device or CUDA build")


@needs_gpu
@pytest.mark.parametrize("ranking", ["exact", "quantised16"])
def test_prefill_wrapper_on_cuda_matches_the_cpu_backend_and_feeds_attention(ranking):
    q, _, cache, table, cu_q, cu_k = prefill_case(21)
    host = msa.BatchPrefillIndexerWithPagedKVCacheWrapper(ranking=ranking, keep_scores=True)
    prefill_plan(host, cu_q, cu_k, table, 4)
    want_ids = host.run(q, cache)
    dev = [torch.from_numpy(a).cuda() for a in (q, cache, table, cu_q, cu_k)]
    w = msa.BatchPrefillIndexerWithPagedKVCacheWrapper(ranking=ranking, keep_scores=True)
    prefill_plan(w, dev[3], dev[4], dev[2], 4)
    ids = w.run(dev[0], dev[1])
    if ranking == "exact":  # the fused selection: the same ids from the same device scores
        fused = msa.BatchPrefillIndexerWithPagedKVCacheWrapper()
        prefill_plan(fused, dev[3], dev[4], dev[2], 4)
        assert torch.equal(fused.run(dev[0], dev[1]), ids)
    torch.cuda.synchronize()
    check_scores(w.scores.cpu().numpy(), host.scores.astype(np.float64))
    oracle = reference_topk if ranking == "exact" else msa_quantised_topk
    assert np.array_equal(ids.cpu().numpy(), oracle(w.scores.cpu().numpy(), REQUESTS, 16))
    if ranking == "exact":  # two backends' scores within tolerance: only rare near-ties may swap
        assert (ids.cpu().numpy() == want_ids).mean() > 0.99
    # The ids are the attention wrapper's topk_indices (num_kv_heads = num_index_heads = 4).
    rng = np.random.default_rng(22)
    pages = int(table.max()) + 1
    kv = [torch.from_numpy((rng.standard_normal((pages, 4, 64, 128)) * 0.25).astype(np.float16)).cuda()
          for _ in range(2)]
    attn = msa.BatchPrefillWithPagedKVCacheWrapper()
    attn.plan(ids, dev[3], dev[4], dev[2], num_q_heads=16, num_kv_heads=4, total_k=int(cu_k[-1]),
              total_rows=sum((k + 127) // 128 for _, k in REQUESTS), max_seqlen_q=200, max_seqlen_k=3000,
              q_data_type="float16")
    out = attn.run(torch.from_numpy(np.repeat(q, 4, axis=1)).cuda(), tuple(kv))
    torch.cuda.synchronize()
    assert torch.isfinite(out.float()).all() and out.abs().max() > 0.01


@needs_gpu
@pytest.mark.parametrize("keep_scores", [True, False])
def test_decode_wrapper_graph_replays_new_lengths(keep_scores):
    rng = np.random.default_rng(31)
    heads, q_len, page, batch_size = 4, 8, 128, 3
    table_buf = torch.zeros((batch_size, 80), dtype=torch.int32, device="cuda")
    lens_buf = torch.zeros(batch_size, dtype=torch.int32, device="cuda")
    w = msa.BatchDecodeIndexerWithPagedKVCacheWrapper(use_cuda_graph=True, page_table_buffer=table_buf,
                                                      seq_lens_buffer=lens_buf, keep_scores=keep_scores)
    # The scores of each step, from a second wrapper reading the same buffers eagerly.
    scorer = msa.BatchDecodeIndexerWithPagedKVCacheWrapper(keep_scores=True)
    lens = [9000, 300, 4000]
    requests = [(q_len, L) for L in lens]
    k_flat = (rng.standard_normal((sum(lens) + 2000, 1, 128)) * 0.25).astype(np.float16)
    cache, table = paged(k_flat, [(q_len, L + 600) for L in lens], page, 32)  # room to grow
    table = np.pad(table, ((0, 0), (0, 80 - table.shape[1])))
    q = torch.from_numpy((rng.standard_normal((batch_size, q_len, heads, 128)) * 0.25).astype(np.float16)).cuda()
    cache_d = torch.from_numpy(cache[:, 0]).cuda()
    w.plan(torch.from_numpy(table).cuda(), torch.tensor(lens, dtype=torch.int32, device="cuda"),
           num_index_heads=heads, query_length=q_len)
    scorer.plan(table_buf, lens_buf, num_index_heads=heads, query_length=q_len)
    out = torch.empty((heads, batch_size * q_len, 16), dtype=torch.int32, device="cuda")
    w.run(q, cache_d, out=out)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        w.run(q, cache_d, out=out)
    for step in range(3):
        step_lens = [L + 200 * step for L in lens]
        lens_buf.copy_(torch.tensor(step_lens, dtype=torch.int32))
        out.fill_(-7)
        graph.replay()
        scorer.run(q, cache_d)
        torch.cuda.synchronize()
        scores = scorer.scores.cpu().numpy()
        assert np.array_equal(out.cpu().numpy(), reference_topk(scores, [(q_len, L) for L in step_lens], 16))
        assert int((out.cpu().numpy()[:, :q_len] >= 0).sum()) > 0


@needs_gpu
def test_decode_wrapper_fp8_e4m3_on_both_backends():
    """MSA's q8kv8 decode selection: E4M3 queries and keys, scores the raw dot products of the E4M3
    values (the oracle reads the same values widened to float64; the GPU's e4m3 tensor cores
    accumulate with fewer bits, docs/numerics.md), ids exact on each backend's own scores."""
    rng = np.random.default_rng(41)
    seq_lens, q_len, heads, page = [7000, 300, 2100, 9], 8, 4, 64
    requests = [(q_len, L) for L in seq_lens]
    e4m3 = torch.float8_e4m3fn
    k_flat = torch.from_numpy(rng.standard_normal((sum(seq_lens), 1, 128)) * 0.25).to(e4m3)
    cache, table = paged(k_flat.float().numpy(), requests, page, 42)
    cache = torch.from_numpy(cache[:, 0]).to(e4m3)  # exact: the values are E4M3 already
    q = torch.from_numpy(rng.standard_normal((len(seq_lens), q_len, heads, 128)) * 0.25).to(e4m3)
    lens = np.array(seq_lens, np.int32)
    _, cu_k, _ = batch(requests)
    cols = (max(seq_lens) + BLOCK - 1) // BLOCK
    want = reference_scores(q.float().numpy().reshape(-1, heads, 128), k_flat.float().numpy(), requests, cu_k, 1.0,
                            cols)
    for device, tol in (("cpu", 2e-4), ("cuda", 2e-3)):
        w, fused = (msa.BatchDecodeIndexerWithPagedKVCacheWrapper(keep_scores=keep) for keep in (True, False))
        for wrapper in (w, fused):
            wrapper.plan(torch.from_numpy(table).to(device), torch.from_numpy(lens).to(device),
                         num_index_heads=heads, query_length=q_len)
        ids = w.run(q.to(device), cache.to(device))
        assert torch.equal(fused.run(q.to(device), cache.to(device)), ids)
        torch.cuda.synchronize()
        scores = w.scores.cpu().numpy()
        check_scores(scores[:, :, :cols], want, tol)
        assert np.array_equal(ids.cpu().numpy(), reference_topk(scores, requests, 16))
