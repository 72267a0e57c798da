"""Test problems and a NumPy reference of MSA sparse prefill (spec §1), written here: an oracle
independent of the C++ one, in float64."""

import numpy as np

BLOCK = 128


def make_case(seed=0, h_q=4, h_kv=2, d=128, topk=4, requests=((40, 300), (1, 129), (17, 17)), dtype=np.float16):
    """A chunked batch (requests = (q_len, k_len) pairs), flat K/V, and a random selection per
    (KV head, query) by the MSA rule: the local block last, the others distinct and earlier."""
    rng = np.random.default_rng(seed)
    q_lens = [q for q, _ in requests]
    k_lens = [k for _, k in requests]
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(k_lens)]).astype(np.int32)
    total_q, total_k = int(cu_q[-1]), int(cu_k[-1])
    q = (rng.standard_normal((total_q, h_q, d)) * 0.25).astype(dtype)
    k = (rng.standard_normal((total_k, h_kv, d)) * 0.25).astype(dtype)
    v = (rng.standard_normal((total_k, h_kv, d)) * 0.25).astype(dtype)
    ids = np.full((h_kv, total_q, topk), -1, dtype=np.int32)
    for b, (ql, kl) in enumerate(requests):
        for i in range(ql):
            local = (kl - ql + i) // BLOCK
            for g in range(h_kv):
                row = list(rng.permutation(local)[: topk - 1]) + [local]
                ids[g, cu_q[b] + i, : len(row)] = row
    return dict(q=q, k=k, v=v, cu_q=cu_q, cu_k=cu_k, k_len=np.array(k_lens, np.int32), topk=ids,
                h_q=h_q, h_kv=h_kv, d=d, K=topk, requests=tuple(requests),
                total_k=total_k, total_rows=sum((k + BLOCK - 1) // BLOCK for k in k_lens),
                max_q=max(q_lens), max_k=max(k_lens))


def paged(c, page_size, seed=1, layout="HND"):
    """The flat K/V of c scattered into shuffled physical pages: (k_cache, v_cache, page_table).
    HND caches are [pages, h_kv, page_size, d], NHD [pages, page_size, h_kv, d]."""
    rng = np.random.default_rng(seed)
    pages_of = [(kl + page_size - 1) // page_size for _, kl in c["requests"]]
    num_pages = sum(pages_of) + 3  # a few pages nobody uses
    physical = rng.permutation(num_pages)
    table = np.zeros((len(pages_of), max(pages_of)), np.int32)
    shape = (num_pages, c["h_kv"], page_size, c["d"])
    caches = [np.zeros(shape, c["k"].dtype) for _ in range(2)]
    used = 0
    for b, (_, kl) in enumerate(c["requests"]):
        for p in range(pages_of[b]):
            table[b, p] = physical[used]
            used += 1
        for t in range(kl):
            for cache, flat in zip(caches, (c["k"], c["v"])):
                cache[table[b, t // page_size], :, t % page_size] = flat[c["cu_k"][b] + t]
    if layout == "NHD":
        caches = [np.ascontiguousarray(x.swapaxes(1, 2)) for x in caches]
    return caches[0], caches[1], table


def reference(c, topk=None, sinks=None):
    """out [total_q, h_q, d] and lse [total_q, h_q] (natural log) in float64: softmax over the
    visible tokens of each row's selected blocks (the set of its in-range ids), plus a sink."""
    topk = c["topk"] if topk is None else topk
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
                blocks = sorted({int(x) for x in topk[g, row] if 0 <= x <= (kl - 1) // BLOCK})
                toks = np.array([t for blk in blocks for t in range(blk * BLOCK, min((blk + 1) * BLOCK, pos + 1))],
                                dtype=np.int64)
                s = k[c["cu_k"][b] + toks, g] @ q[row, h] / np.sqrt(c["d"]) if len(toks) else np.zeros(0)
                if sinks is not None:
                    s = np.append(s, float(sinks[h]))
                if len(s) == 0:
                    continue
                m = s.max()
                p = np.exp(s - m)
                vals = v[c["cu_k"][b] + toks, g]
                if sinks is not None:
                    vals = np.vstack([vals, np.zeros((1, c["d"]))])  # the sink's value is zero
                out[row, h] = p @ vals / p.sum()
                lse[row, h] = m + np.log(p.sum())
    return out, lse


def assert_close(out, lse, ref_out, ref_lse):
    """The spec's tolerances for 16-bit outputs: elementwise, cosine, and LSE."""
    o = np.asarray(out, dtype=np.float64)
    np.testing.assert_allclose(o, ref_out, atol=1e-2, rtol=1e-2)
    den = np.sqrt((o**2).sum() * (ref_out**2).sum())
    assert den == 0 or (o * ref_out).sum() / den >= 0.9999
    if lse is not None:
        finite = np.isfinite(ref_lse)
        assert np.array_equal(np.isfinite(lse), finite)
        np.testing.assert_allclose(np.asarray(lse)[finite], ref_lse[finite], atol=1e-3)
