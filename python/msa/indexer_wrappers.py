"""The MSA indexer wrappers: the class names, arguments and defaults of the MSA contract for the
selection half of a layer. Each run() scores every 128-token block for each query and index
head (msa::Indexer: the best raw dot product ``<index_q, index_k>`` over the block's visible
tokens, no scale, as MSA's indexer scores) and returns the query's top-16 blocks (msa::TopK:
15 ranked blocks before the local one, the local block last; a row of n <= 16 blocks takes
them all in order, then -1) as int32 ``[num_index_heads, rows, 16]``, the layout the attention
wrappers take (``topk_indices``).

Beyond the contract: ``backend`` (``"auto"`` follows the arrays' device, or ``"cpu"`` /
``"cuda"``), ``ranking`` (``"exact"``, the default: by score, ties to the smaller block id;
``"quantised16"``: MSA's own 16-bit quantised key, see :class:`msa.TopK`), ``topk`` (1..32) and
``keep_scores``. With the exact ranking and ``keep_scores=False`` (the defaults) run() is one
msa::IndexerTopK call: no score is written (at 128k tokens and four index heads the scores would
take 2 GB) and ``scores`` stays None. With ``keep_scores=True``, or the quantised ranking (which
needs each row's score range first), run() is msa::Indexer then msa::TopK and the scores stay
in a buffer of the wrapper (``scores``). The ids are the same either way.
"""

from __future__ import annotations

from . import _msa
from ._arrays import dtype_name, empty, error, is_cuda, library_of, on_device_of, renamed, same_kind, stream_of
from ._arrays import int_arg as _int_arg

_HEAD_DIM = 128
_BLOCK = 128

# The C++ layer's argument names, as each wrapper's caller spells them.
_PREFILL_NAMES = {"index_q": "q", "index_k.k": "paged_k_cache", "index_k.page_table": "page_table",
                  "index_k": "paged_k_cache", "k_len": "cu_seqlens_k (as lengths) k_len",
                  "offsets": "cu_seqlens_k", "topk": "out"}
# The decode's cache [num_pages, page_size, 128] goes in as the view [num_pages, 1, page_size, 128]:
# the view's dims 2 and 3 are the caller's 1 and 2.
_DECODE_NAMES = dict(_PREFILL_NAMES, k_len="seq_lens", cu_seqlens_q="query_length",
                     **{f"index_k{k}.{what}[{i}]": f"paged_k_cache.{what}[{i - 1}]"
                        for k in ("", ".k") for what in ("shape", "stride") for i in (2, 3)})


def _int32_array(name: str, a, ndim: int):
    if not hasattr(a, "__dlpack_device__"):
        raise error(name, type(a).__name__, "must be an array (PyTorch, NumPy or CuPy)")
    if len(a.shape) != ndim or dtype_name(a.dtype) != "int32":
        raise error(name, f"{dtype_name(a.dtype)} of shape {tuple(a.shape)}", f"must be a {ndim}-D int32 array")
    return a


def _copy_into(dst, src) -> None:
    xp = library_of(dst, "buffer")
    if xp.__name__ == "torch":
        dst.copy_(src, non_blocking=True)
    else:
        xp.copyto(dst, src)


class _IndexerWrapper:
    """What both indexer wrappers share: the operators, the scores and top-k buffers, run()."""

    _names: dict = {}

    def __init__(self, backend: str, ranking: str, topk: int, keep_scores: bool):
        if backend not in ("auto", "cpu", "cuda"):
            raise error("backend", backend, "expected 'auto', 'cpu' or 'cuda'")
        if ranking not in ("exact", "quantised16"):
            raise error("ranking", ranking, "expected 'exact' or 'quantised16'")
        self._backend = backend
        self._ranking = ranking
        self._topk = _int_arg("topk", topk, 1, 32)
        if not isinstance(keep_scores, bool):
            raise error("keep_scores", keep_scores, "must be a bool")
        self._fused = ranking == "exact" and not keep_scores  # msa::IndexerTopK: no scores
        self._ops = None
        self._ops_key = None
        self._planned = False
        self.scores = None  # [num_index_heads, rows, columns] fp32, written by run()
        self._topk_out = None
        self._cu_seqlens_q = None
        self._k_len = None
        self._page_table = None

    def _prepare(self, like, heads: int, batch: int, rows: int, cols: int) -> None:
        """The operators of (heads, backend) and the buffers of this geometry, made like `like`."""
        backend = self._backend if self._backend != "auto" else ("cuda" if is_cuda(like) else "cpu")
        key = (heads, backend)
        if key != self._ops_key:
            self._ops = None
            if self._fused:
                self._ops = (_msa.IndexerTopK(heads, _HEAD_DIM, self._topk, 1.0, backend, False),)
            else:
                self._ops = (_msa.Indexer(heads, _HEAD_DIM, 1.0, backend, False),
                             _msa.TopK(self._topk, backend, False, self._ranking))
            self._ops_key = key
        if self._fused:
            self._ops[0].plan(batch, rows, cols * _BLOCK, 0)  # host sizes only: nothing launched
        elif not same_kind(self.scores, like, (heads, rows, cols), "float32"):
            self.scores = empty(like, (heads, rows, cols), "float32", "scores")
        if not same_kind(self._topk_out, like, (heads, rows, self._topk), "int32"):
            self._topk_out = empty(like, (heads, rows, self._topk), "int32", "out")

    def _select(self, q, k_cache, page_table, out):
        """Indexer then top-k over the planned batch (one fused call by default); returns the
        top-k array."""
        if not self._planned:
            raise error("plan", "none", "call plan() before run()")
        if out is None:
            out = self._topk_out
        else:
            _int32_array("out", out, 3)
        if not self._fused and out is not self._topk_out:
            # The indexer writes self.scores before the top-k sees out: out's shape and device
            # are checked first, so that a rejected out leaves the scores as they were.
            if tuple(out.shape) != tuple(self._topk_out.shape):
                raise error("out.shape", tuple(out.shape), f"must be {tuple(self._topk_out.shape)}")
            if is_cuda(out) != is_cuda(self._topk_out):
                raise error("out.device", "cuda" if is_cuda(out) else "cpu",
                            "must be where the planned arrays are")
        try:
            with on_device_of(q):
                stream = stream_of(None, q, out)
                if self._fused:
                    self._ops[0].run(q, k_cache, out, self._cu_seqlens_q, self._k_len, page_table, None, stream)
                else:
                    indexer, topk = self._ops
                    indexer.run(q, k_cache, self.scores, self._cu_seqlens_q, self._k_len, page_table, None, stream)
                    topk.run(self.scores, out, self._cu_seqlens_q, self._k_len, stream)
        except _msa.Error as e:
            raise renamed(e, self._names) from None
        return out


class BatchPrefillIndexerWithPagedKVCacheWrapper(_IndexerWrapper):
    """MSA prefill selection: plan() once per batch, run() per layer.

    plan() keeps the batch arrays and makes the wrapper's buffers (top-k; the scores with
    ``keep_scores``) and the fused operator's scratch; run() is one msa::IndexerTopK call (or one
    indexer launch and one top-k launch) reading the batch on the device, no allocation, so it can
    be captured in a CUDA graph once plan() has run. After new lengths are written into the
    planned ``cu_seqlens_k`` in place, call :meth:`replan`.
    """

    _names = _PREFILL_NAMES

    def __init__(self, *, backend: str = "auto", ranking: str = "exact", topk: int = 16, keep_scores: bool = False):
        super().__init__(backend, ranking, topk, keep_scores)

    def plan(self, cu_seqlens_q, cu_seqlens_k, page_table, *, total_q: int, max_seqlen_q: int,
             max_seqlen_k: int, num_index_heads: int = 4) -> None:
        """``cu_seqlens_q``, ``cu_seqlens_k [B + 1]`` int32 (request ``b`` has ``k_len =
        cu_seqlens_k[b + 1] - cu_seqlens_k[b]`` keys including its new tokens), ``page_table
        [B, max_pages]`` int32 over the index-K cache's pages. Host sizes: ``total_q`` (query
        rows), ``max_seqlen_q``, ``max_seqlen_k`` (bounds; the scores have ``ceil(max_seqlen_k /
        128)`` columns). Host arrays are checked against them; device arrays are never read back."""
        self._planned = False
        cu_q = _int32_array("cu_seqlens_q", cu_seqlens_q, 1)
        cu_k = _int32_array("cu_seqlens_k", cu_seqlens_k, 1)
        table = _int32_array("page_table", page_table, 2)
        batch = int(cu_q.shape[0]) - 1
        if batch < 1:
            raise error("cu_seqlens_q.shape[0]", cu_q.shape[0], "must be B + 1 >= 2")
        if tuple(cu_k.shape) != tuple(cu_q.shape):
            raise error("cu_seqlens_k.shape[0]", cu_k.shape[0], f"must equal cu_seqlens_q.shape[0] = {batch + 1}")
        if int(table.shape[0]) != batch:
            raise error("page_table.shape[0]", table.shape[0], f"must equal B = {batch}")
        heads = _int_arg("num_index_heads", num_index_heads, 1, 256)
        rows = _int_arg("total_q", total_q, 0, 2**31 - 1)
        _int_arg("max_seqlen_q", max_seqlen_q, 0, 2**31 - 1)
        max_k = _int_arg("max_seqlen_k", max_seqlen_k, 1, 2**31 - 1)
        for name, a in (("cu_seqlens_k", cu_k), ("page_table", table)):
            if is_cuda(a) != is_cuda(cu_q):
                raise error(f"{name}.device", "cuda" if is_cuda(a) else "cpu", "must be where cu_seqlens_q is")
        if not is_cuda(cu_q):
            q_off, k_off = cu_q.tolist(), cu_k.tolist()
            if q_off[-1] != rows:
                raise error("total_q", rows, f"must equal cu_seqlens_q[B] = {q_off[-1]}")
            q_lens = [b - a for a, b in zip(q_off, q_off[1:])]
            k_lens = [b - a for a, b in zip(k_off, k_off[1:])]
            if max(q_lens) > max_seqlen_q:
                raise error("max_seqlen_q", max_seqlen_q, f"must be >= the longest query chunk {max(q_lens)}")
            if max(k_lens) > max_k:
                raise error("max_seqlen_k", max_k, f"must be >= the longest request {max(k_lens)}")
        self._cu_seqlens_q, self._cu_seqlens_k, self._page_table = cu_q, cu_k, table
        if not same_kind(self._k_len, cu_k, (batch,), "int32"):
            self._k_len = empty(cu_k, (batch,), "int32", "cu_seqlens_k")
        self._prepare(table, heads, batch, rows, (max_k + _BLOCK - 1) // _BLOCK)
        self._rows, self._heads = rows, heads
        self.replan()

    def replan(self) -> None:
        """Re-reads the planned ``cu_seqlens_k`` (new lengths written into it in place)."""
        if self._k_len is None:
            raise error("plan", "none", "call plan() before replan()")
        try:
            with on_device_of(self._cu_seqlens_k):
                _msa.lengths_from_offsets(self._cu_seqlens_k, self._k_len, stream_of(None, self._cu_seqlens_k))
        except _msa.Error as e:
            raise renamed(e, self._names) from None
        self._planned = True

    def run(self, q, paged_k_cache, *, out=None):
        """``q [total_q, num_index_heads, 128]`` (bf16, fp16 or float8_e4m3fn, MSA's q8kv8)
        against ``paged_k_cache [num_pages, 1, page_size, 128]`` (same dtype; pages of 16-128
        tokens). Returns the top-k
        block ids ``[num_index_heads, total_q, topk]`` int32: ``out`` when given, else the
        wrapper's buffer (rewritten by the next run())."""
        return self._select(q, paged_k_cache, self._page_table, out)


class BatchDecodeIndexerWithPagedKVCacheWrapper(_IndexerWrapper):
    """MSA decode selection (multi-token prediction): ``B`` requests of ``Q`` queries each, query
    ``t`` of request ``b`` at position ``seq_lens[b] - Q + t``. plan() reads host sizes only;
    run() reads ``seq_lens`` and the page table on the device, so a captured run() replays step
    after step with new contents in the planned buffers. With ``use_cuda_graph`` the wrapper
    owns them: ``page_table_buffer`` and ``seq_lens_buffer``, which plan() fills from its
    arguments. ``workspace_buffer`` is accepted and unused: plan() allocates the little scratch
    the fused selection needs (the per-unit candidate lists of a step, about
    ``B * Q * num_index_heads`` KB).
    """

    _names = _DECODE_NAMES

    def __init__(self, workspace_buffer=None, *, use_cuda_graph: bool = False, page_table_buffer=None,
                 seq_lens_buffer=None, backend: str = "auto", ranking: str = "exact", topk: int = 16,
                 keep_scores: bool = False):
        super().__init__(backend, ranking, topk, keep_scores)
        if use_cuda_graph and (page_table_buffer is None or seq_lens_buffer is None):
            raise error("use_cuda_graph", True, "needs page_table_buffer and seq_lens_buffer")
        if not use_cuda_graph and (page_table_buffer is not None or seq_lens_buffer is not None):
            raise error("page_table_buffer", "given", "goes with use_cuda_graph=True only")
        if use_cuda_graph:
            _int32_array("page_table_buffer", page_table_buffer, 2)
            _int32_array("seq_lens_buffer", seq_lens_buffer, 1)
        self._graph_buffers = (page_table_buffer, seq_lens_buffer) if use_cuda_graph else None
        self._batch = self._q_len = self._heads = None

    @staticmethod
    def workspace_size(batch_size: int) -> int:
        """Bytes of caller workspace a batch needs: none (plan() allocates the fused selection's
        scratch itself)."""
        _int_arg("batch_size", batch_size, 0, 2**31 - 1)
        return 0

    def plan(self, page_table, seq_lens, *, num_index_heads: int = 1, query_length: int = 8,
             shared_plan=None) -> None:
        """``page_table [B, max_pages]`` int32 and ``seq_lens [B]`` int32 (lengths including the
        ``query_length`` new queries, 1..16). The scores have ``max_pages`` columns (pages of 128
        tokens; caches of smaller pages need fewer)."""
        self._planned = False
        if shared_plan is not None:
            raise error("shared_plan", type(shared_plan).__name__,
                        "msa's decode indexer keeps no plan to share: pass None")
        table = _int32_array("page_table", page_table, 2)
        lens = _int32_array("seq_lens", seq_lens, 1)
        batch, max_pages = int(table.shape[0]), int(table.shape[1])
        if batch < 1 or int(lens.shape[0]) != batch:
            raise error("seq_lens.shape[0]", lens.shape[0], f"must equal page_table.shape[0] = {batch} (>= 1)")
        if max_pages < 1:
            raise error("page_table.shape[1]", max_pages, "must be >= 1")
        heads = _int_arg("num_index_heads", num_index_heads, 1, 256)
        q_len = _int_arg("query_length", query_length, 1, 16)
        if is_cuda(lens) != is_cuda(table):
            raise error("seq_lens.device", "cuda" if is_cuda(lens) else "cpu", "must be where page_table is")
        if self._graph_buffers is not None:
            table_buf, lens_buf = self._graph_buffers
            if tuple(table_buf.shape) != tuple(table.shape):
                raise error("page_table.shape", tuple(table.shape),
                            f"must equal page_table_buffer.shape {tuple(table_buf.shape)} with use_cuda_graph")
            if tuple(lens_buf.shape) != tuple(lens.shape):
                raise error("seq_lens.shape", tuple(lens.shape),
                            f"must equal seq_lens_buffer.shape {tuple(lens_buf.shape)} with use_cuda_graph")
            if table is not table_buf:
                _copy_into(table_buf, table)
            if lens is not lens_buf:
                _copy_into(lens_buf, lens)
            table, lens = table_buf, lens_buf
        # The step as a varlen batch: request b owns rows [b Q, (b + 1) Q) and k_len = seq_lens[b].
        if not same_kind(self._cu_seqlens_q, lens, (batch + 1,), "int32") or self._q_len != q_len:
            xp = library_of(lens, "seq_lens")
            on = {"device": lens.device} if xp.__name__ == "torch" else {}  # CuPy: the current device
            self._cu_seqlens_q = xp.arange(0, (batch + 1) * q_len, q_len, dtype=xp.int32, **on)
            self._q_len = q_len  # the step of _cu_seqlens_q
        self._k_len, self._page_table = lens, table
        self._prepare(table, heads, batch, batch * q_len, max_pages)
        self._batch, self._q_len, self._heads = batch, q_len, heads
        self._planned = True

    def run(self, q, paged_k_cache, *, out=None):
        """``q [B, Q, num_index_heads, 128]`` (bf16, fp16 or float8_e4m3fn, MSA's q8kv8) against
        ``paged_k_cache [num_pages, page_size, 128]`` (same dtype; pages of 16-128 tokens). Returns the top-k block ids
        ``[num_index_heads, B * Q, topk]`` int32: ``out`` when given, else the wrapper's buffer."""
        if not self._planned:
            raise error("plan", "none", "call plan() before run()")
        shape = (self._batch, self._q_len, self._heads, _HEAD_DIM)
        if not hasattr(q, "__dlpack_device__") or tuple(q.shape) != shape:
            raise error("q.shape", tuple(getattr(q, "shape", ())), f"must be {shape} = [B, Q, H, 128]")
        if not hasattr(paged_k_cache, "__dlpack_device__") or len(paged_k_cache.shape) != 3:
            raise error("paged_k_cache.shape", tuple(getattr(paged_k_cache, "shape", ())),
                        "must be [num_pages, page_size, 128]")
        rows = q.reshape(self._batch * self._q_len, self._heads, _HEAD_DIM)
        return self._select(rows, paged_k_cache[:, None], self._page_table, out)
