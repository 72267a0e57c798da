"""The MSA inference wrappers: the class names, arguments and defaults of the MSA contract, so
that an engine switches to msa by changing an import. Each keeps what plan() decided (the C++
operator, its workspace, the batch and selection arrays, the output buffers) for run().

The selection wrappers, which produce the ``topk_indices`` these take, are in indexer_wrappers.py.
"""

from __future__ import annotations

from . import _msa
from ._arrays import (INT64_MAX, dtype_name, empty, error, is_cuda, on_device_of, renamed, same_device,
                      same_kind, scale_arg, stream_of)
from ._arrays import int_arg as _int_arg

# The C++ layer's argument names, as the wrapper's caller spells them.
_PREFILL_NAMES = {
    "offsets": "cu_seqlens_k",
    "topk": "topk_indices",
    "k_len": "cu_seqlens_k (as lengths) k_len",
    "k": "paged_kv_cache[0]",
    "v": "paged_kv_cache[1]",
    "shape.h_q": "num_q_heads",
    "shape.h_kv": "num_kv_heads",
    "shape.topk": "topk_indices.shape[2]",
    "shape.d": "head_dim",
    "shape.scale": "sm_scale",
    "problem.max_k_len": "max_seqlen_k",
    "workspace": "workspace_buffer",
}


_DECODE_NAMES = {
    "topk": "topk_indices",
    "seq_len": "seq_lens",
    "k": "paged_kv_cache[0]",
    "v": "paged_kv_cache[1]",
    "shape.h_q": "num_q_heads",
    "shape.h_kv": "num_kv_heads",
    "shape.topk": "topk",
    "shape.d": "head_dim",
    "shape.scale": "sm_scale",
    "q_per_request": "q_len_per_request",
    "batch": "seq_lens.shape[0]",
    "max_seq_len": "max_seqlen_k",
    "problem.max_k_len": "max_seqlen_k",
    "workspace": "workspace_buffer",
}


def _dlpack_arg(name: str, value):
    if not hasattr(value, "__dlpack_device__"):
        raise error(name, type(value).__name__, "must be an array (PyTorch, NumPy or CuPy)")
    return value


def _optional_arrays(**arrays) -> None:
    for name, value in arrays.items():
        if value is not None:
            _dlpack_arg(name, value)


def _int32_arg(**arrays) -> None:
    """Index arrays plan() keeps for run() are int32: said at plan(), from their metadata."""
    for name, a in arrays.items():
        if a is not None and dtype_name(a.dtype) != "int32":
            raise error(f"{name}.dtype", dtype_name(a.dtype), "must be int32")


def _scale_arg(sm_scale) -> float:
    return 0.0 if sm_scale is None else scale_arg("sm_scale", sm_scale)


def _q_type_arg(q_data_type) -> str:
    q_type = dtype_name(q_data_type)
    if q_type not in ("bfloat16", "float16"):
        raise error("q_data_type", q_type, "expected bfloat16 or float16")
    return q_type


class _Wrapper:
    """What the wrappers share: the operator of the current geometry, its workspace (the caller's
    or one the wrapper grows), the output buffers it owns, and the K/V pair of run()."""

    def __init__(self, workspace_buffer, kv_layout: str, backend: str):
        if kv_layout not in ("HND", "NHD"):
            raise error("kv_layout", kv_layout, "expected 'HND' or 'NHD'")
        if backend not in ("auto", "cpu", "cuda"):
            raise error("backend", backend, "expected 'auto', 'cpu' or 'cuda'")
        if workspace_buffer is not None:
            _dlpack_arg("workspace_buffer", workspace_buffer)
        self._user_workspace = workspace_buffer
        self._kv_layout = kv_layout
        self._backend = backend
        self._op = None
        self._op_key = None
        self._workspace = None  # the array set as the operator's scratch
        self._workspace_needed = 0
        self._planned = False
        self._out = None
        self._lse = None

    def _backend_for(self, like) -> str:
        if self._backend != "auto":
            return self._backend
        return "cuda" if is_cuda(like) else "cpu"

    def _operator(self, key, make):
        """The operator for `key` (the geometry and options), made anew only when it changes."""
        if key != self._op_key:
            self._op = self._op_key = None
            self._op = make()
            self._op_key = key
            self._workspace = None
        return self._op

    def _set_workspace(self, backend: str, like, needed: int) -> None:
        self._workspace_needed = needed
        if self._user_workspace is not None:
            if self._workspace is not self._user_workspace:
                self._op.set_workspace(self._user_workspace)
                self._workspace = self._user_workspace
            return
        if backend != "cuda" or like is None:
            return  # the operator keeps its own scratch
        if self._workspace is None or self._workspace.shape[0] < needed or not same_device(self._workspace, like):
            self._op.set_workspace(None)
            self._workspace = None
            # With headroom, as the operators size their own (msa::grown_workspace_bytes): a chunked
            # prefill's need grows a little with every chunk, and each new buffer is a new block
            # of the caller's allocator.
            buf = empty(like, (_msa.grown_workspace_bytes(needed),), "uint8", "workspace_buffer")
            self._op.set_workspace(buf)
            self._workspace = buf

    def _own_outputs(self, like, rows: int, h_q: int, d: int, q_type: str) -> None:
        """Output buffers of the wrapper, reused by later plans of the same sizes."""
        self._q_type = q_type
        if like is None:
            self._out = self._lse = None
            return
        if not same_kind(self._out, like, (rows, h_q, d), q_type):
            self._out = empty(like, (rows, h_q, d), q_type, "out")
        if not same_kind(self._lse, like, (rows, h_q), "float32"):
            self._lse = empty(like, (rows, h_q), "float32", "lse")

    def _kv_pair(self, paged_kv_cache, paged: bool):
        """k, v and whether they are paged NHD caches, which the extension views as HND."""
        if not isinstance(paged_kv_cache, (tuple, list)) or len(paged_kv_cache) != 2:
            raise error("paged_kv_cache", type(paged_kv_cache).__name__, "must be a (k_cache, v_cache) pair")
        k, v = paged_kv_cache
        _dlpack_arg("paged_kv_cache[0]", k)
        _dlpack_arg("paged_kv_cache[1]", v)
        return k, v, paged and self._kv_layout == "NHD"

    def _outputs(self, q, out, lse, return_lse: bool):
        if not self._planned:
            raise error("plan", "none", "call plan() before run()")
        _dlpack_arg("q", q)
        if out is None:
            if dtype_name(q.dtype) != self._q_type:
                raise error("q.dtype", dtype_name(q.dtype), f"differs from plan(q_data_type={self._q_type!r}), "
                            "the dtype of the wrapper's output buffer")
            if self._out is None:
                raise error("out", "None", "plan() saw no array on the backend's device to make the output like; "
                            "pass out= (and lse=)")
            out = self._out
        if lse is None and return_lse:
            if self._lse is None:
                raise error("lse", "None", "plan() saw no array on the backend's device to make lse like; pass lse=")
            lse = self._lse
        return out, lse

    def workspace_bytes(self) -> int:
        """The scratch bytes for the last plan()'s sizes: what a ``workspace_buffer`` must hold
        for a problem of that size or any smaller one (plan the largest problem once to size one
        for graph capture)."""
        if self._op is None:
            raise error("plan", "none", "call plan() first")
        return self._workspace_needed


class BatchPrefillWithPagedKVCacheWrapper(_Wrapper):
    """MSA sparse prefill (spec §1): plan() once per batch and selection, then run() per call.

    ``workspace_buffer``: optional caller memory for the plan and the partial outputs (one
    contiguous CUDA array, any dtype, at least :meth:`workspace_bytes` bytes); without it the
    wrapper allocates its own in plan(), of the inputs' library and device, growing it only
    when a larger problem needs more. run() never allocates, so it can be captured in a CUDA
    graph (``torch.cuda.graph``) once plan() has run; replays read the same buffers, so new
    contents of q and the caches (and a new plan() of the same sizes) are seen by the replay.

    ``kv_layout``: ``"HND"`` for caches ``[num_pages, num_kv_heads, page_size, head_dim]`` (the
    MSA layout) or ``"NHD"`` for ``[num_pages, page_size, num_kv_heads, head_dim]`` (token-major;
    viewed, never copied). Beyond the MSA contract: ``backend`` (``"auto"`` follows
    ``topk_indices``' device, or ``"cpu"`` / ``"cuda"``), ``strict`` (reject top-k rows that
    break the producer contract, naming the first offending id), ``prefill_path`` (``"auto"``,
    ``"block_major"``, ``"tile_union"``) and ``q_per_item``, as in :class:`msa.SparsePrefill`.
    """

    def __init__(self, workspace_buffer=None, kv_layout: str = "HND", *, backend: str = "auto",
                 strict: bool = False, prefill_path: str = "auto", q_per_item: int = 0):
        super().__init__(workspace_buffer, kv_layout, backend)
        self._options = (bool(strict), _int_arg("q_per_item", q_per_item, 0), prefill_path)
        self._k_len = None

    # ---------------------------------------------------------------- plan

    def plan(self, topk_indices, cu_seqlens_q, cu_seqlens_k, page_table, *, num_q_heads: int = 64,
             num_kv_heads: int | None = None, total_k: int, total_rows: int, max_seqlen_q: int,
             max_seqlen_k: int, causal: bool = True, sm_scale: float | None = None,
             head_dim: int = 128, q_data_type="bfloat16") -> None:
        """Plans a packed batch and its selection.

        ``topk_indices [num_kv_heads, total_q, K]`` int32: batch-local block ids, ``-1``
        padded. ``cu_seqlens_q [B + 1]`` and ``cu_seqlens_k [B + 1]`` int32: query and KV
        offsets (request ``b`` has ``k_len = cu_seqlens_k[b + 1] - cu_seqlens_k[b]`` keys
        including its new tokens). ``page_table [B, max_pages]`` int32, or ``None`` for flat
        caches ``[total_k, num_kv_heads, head_dim]`` addressed by ``cu_seqlens_k``. Host sizes:
        ``total_k = cu_seqlens_k[B]``, ``total_rows = sum_b ceil(k_len[b] / 128)``,
        ``max_seqlen_q``, ``max_seqlen_k`` (bounds of the lengths; the plan is sized from
        ``max_seqlen_k``). They are checked against the arrays when those are in host memory;
        device-resident arrays are never read back (plan() does not synchronise).
        ``causal`` must be True (MSA is bottom-right causal); ``sm_scale`` defaults to
        ``1 / sqrt(head_dim)``. Beyond the contract: ``head_dim`` and ``q_data_type`` size the
        output buffers the wrapper owns (used when run() gets no ``out``).
        """
        self._planned = False
        _dlpack_arg("topk_indices", topk_indices)
        _dlpack_arg("cu_seqlens_q", cu_seqlens_q)
        _dlpack_arg("cu_seqlens_k", cu_seqlens_k)
        if page_table is not None:
            _dlpack_arg("page_table", page_table)
        _int32_arg(topk_indices=topk_indices, page_table=page_table)
        if causal is not True:
            raise error("causal", causal, "MSA sparse attention is bottom-right causal; only causal=True exists")
        if len(topk_indices.shape) != 3:
            raise error("topk_indices.ndim", len(topk_indices.shape), "must be 3: [num_kv_heads, total_q, K]")
        h_kv, total_q, topk = (int(n) for n in topk_indices.shape)
        if num_kv_heads is not None and _int_arg("num_kv_heads", num_kv_heads, 1) != h_kv:
            raise error("topk_indices.shape[0]", h_kv, f"must equal num_kv_heads = {num_kv_heads}")
        h_q = _int_arg("num_q_heads", num_q_heads, 1)
        d = _int_arg("head_dim", head_dim, 1)
        sizes = dict(total_k=_int_arg("total_k", total_k, 0, INT64_MAX),
                     total_rows=_int_arg("total_rows", total_rows, 0, INT64_MAX),
                     max_seqlen_q=_int_arg("max_seqlen_q", max_seqlen_q, 0, INT64_MAX),
                     max_seqlen_k=_int_arg("max_seqlen_k", max_seqlen_k, 0, INT64_MAX))
        scale = _scale_arg(sm_scale)
        q_type = _q_type_arg(q_data_type)
        for name, a in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if len(a.shape) != 1 or dtype_name(a.dtype) != "int32":
                raise error(name, f"{dtype_name(a.dtype)} of shape {tuple(a.shape)}",
                            "must be a 1-D int32 array [B + 1]")
        if cu_seqlens_k.shape[0] != cu_seqlens_q.shape[0]:
            raise error("cu_seqlens_k.shape[0]", cu_seqlens_k.shape[0],
                        f"must equal cu_seqlens_q.shape[0] = {cu_seqlens_q.shape[0]}")
        if is_cuda(cu_seqlens_k) != is_cuda(cu_seqlens_q):
            raise error("cu_seqlens_k.device", "cuda" if is_cuda(cu_seqlens_k) else "cpu",
                        "must be where cu_seqlens_q is")
        if not is_cuda(cu_seqlens_k):
            self._check_host_sizes(cu_seqlens_q, cu_seqlens_k, sizes)
        batch = int(cu_seqlens_q.shape[0]) - 1
        if batch < 0:
            raise error("cu_seqlens_q.shape[0]", 0, "must be B + 1 >= 1")
        backend = self._backend_for(topk_indices)

        # New buffers (workspace, outputs) are made like this array: the first one on the
        # backend's device; none on CUDA for backend="cuda" with host inputs leaves the scratch
        # to the operator and asks run() for out.
        like = next((a for a in (topk_indices, cu_seqlens_q, page_table)
                     if a is not None and is_cuda(a) == (backend == "cuda")), None)
        try:
            op = self._operator((h_q, h_kv, d, topk, scale, backend) + self._options,
                                lambda: _msa.SparsePrefill(h_q, h_kv, d, topk, scale, backend, *self._options))
            self._set_workspace(backend, like, op.workspace_bytes(batch, total_q, sizes["max_seqlen_k"]))
            # k_len lives in a buffer of the wrapper, rewritten in place by each plan(): a run()
            # captured in a graph keeps reading the current lengths.
            if not same_kind(self._k_len, cu_seqlens_k, (batch,), "int32"):
                self._k_len = empty(cu_seqlens_k, (batch,), "int32", "cu_seqlens_k")
            with on_device_of(topk_indices):
                op.plan(cu_seqlens_q, self._k_len, topk_indices, sizes["max_seqlen_k"],
                        stream_of(None, cu_seqlens_q, topk_indices), cu_seqlens_k)
        except _msa.Error as e:
            raise renamed(e, _PREFILL_NAMES) from None
        self._own_outputs(like, total_q, h_q, d, q_type)

        self._cu_seqlens_q = cu_seqlens_q
        self._cu_seqlens_k = cu_seqlens_k
        self._topk = topk_indices
        self._page_table = page_table
        self._total_k = sizes["total_k"]
        self._planned = True

    @staticmethod
    def _check_host_sizes(cu_seqlens_q, cu_seqlens_k, sizes) -> None:
        cu_q, cu_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        q_lens = [b - a for a, b in zip(cu_q, cu_q[1:])]
        k_lens = [b - a for a, b in zip(cu_k, cu_k[1:])]
        if cu_k and cu_k[0] != 0:
            raise error("cu_seqlens_k[0]", cu_k[0], "must be 0")
        for b, k in enumerate(k_lens):
            if k < 0:
                raise error(f"cu_seqlens_k[{b + 1}]", cu_k[b + 1], f"must be >= cu_seqlens_k[{b}] = {cu_k[b]}")
        facts = {
            "total_k": (cu_k[-1] if cu_k else 0, "must equal cu_seqlens_k[B] = {}", lambda v, f: v == f),
            "total_rows": (sum((k + 127) // 128 for k in k_lens), "must equal sum_b ceil(k_len[b] / 128) = {}",
                           lambda v, f: v == f),
            "max_seqlen_q": (max(q_lens, default=0), "must be >= the longest query length {}", lambda v, f: v >= f),
            "max_seqlen_k": (max(k_lens, default=0), "must be >= the longest KV length {}", lambda v, f: v >= f),
        }
        for name, (fact, message, ok) in facts.items():
            if not ok(sizes[name], fact):
                raise error(name, sizes[name], message.format(fact))

    # ---------------------------------------------------------------- run

    def run(self, q, paged_kv_cache, *, out=None, lse=None, return_lse: bool = False, sinks=None):
        """Sparse attention of ``q [total_q, num_q_heads, head_dim]`` over the planned selection
        of ``paged_kv_cache = (k_cache, v_cache)``. Returns ``out`` (``[total_q, num_q_heads,
        head_dim]``, q's dtype), or ``(out, lse)`` with ``return_lse`` (``lse [total_q,
        num_q_heads]`` fp32, natural log). Given ``out`` / ``lse`` are written; otherwise the
        wrapper's buffers are, and returned: the same arrays every run of this plan (clone to
        keep one). Beyond the contract: ``sinks [num_q_heads]`` fp32 attention-sink logits."""
        _optional_arrays(out=out, lse=lse, sinks=sinks)
        out, lse = self._outputs(q, out, lse, return_lse)
        paged = self._page_table is not None
        k, v, nhd = self._kv_pair(paged_kv_cache, paged)
        if not paged and len(k.shape) == 3 and k.shape[0] < self._total_k:
            raise error("paged_kv_cache[0].shape[0]", k.shape[0], f"must be >= total_k = {self._total_k} (flat cache)")
        try:
            with on_device_of(q):
                self._op.run(q, k, v, out, self._cu_seqlens_q, self._k_len, self._topk,
                             self._page_table, None if paged else self._cu_seqlens_k, sinks, lse,
                             stream_of(None, q, out), nhd)
        except _msa.Error as e:
            raise renamed(e, _PREFILL_NAMES) from None
        return (out, lse) if return_lse else out


class BatchDecodeWithPagedKVCacheWrapper(_Wrapper):
    """MSA sparse decode and multi-token prediction (spec §4): plan() once per batch geometry,
    then run() every step, with each step's top-k.

    A step has ``B`` requests of ``Q`` queries (one token plus drafts): query ``t`` of request
    ``b`` is row ``b * Q + t`` and sits at position ``seq_lens[b] - Q + t``. plan() uses host
    sizes only (B, Q, a bound on the lengths); run() reads ``seq_lens``, the page table and the
    top-k on the device, so a run() captured in a CUDA graph replays step after step with new
    contents in the same buffers (seq_lens and page_table are the arrays given to plan(), top-k
    and q those given to the captured run()).

    ``workspace_buffer``, ``kv_layout`` (``"HND"`` / ``"NHD"``), ``backend`` and ``strict`` as in
    :class:`BatchPrefillWithPagedKVCacheWrapper`.
    """

    def __init__(self, workspace_buffer=None, kv_layout: str = "HND", *, backend: str = "auto",
                 strict: bool = False):
        super().__init__(workspace_buffer, kv_layout, backend)
        self._strict = bool(strict)

    def plan(self, seq_lens, page_table, *, q_len_per_request: int = 1, num_q_heads: int = 64,
             num_kv_heads: int = 4, head_dim: int = 128, topk: int = 16, max_seqlen_k: int,
             sm_scale: float | None = None, q_data_type="bfloat16", cu_seqlens_k=None) -> None:
        """Plans a step of ``B = seq_lens.shape[0]`` requests.

        ``seq_lens [B]`` int32: each request's length including its ``q_len_per_request`` (1..16)
        new queries. ``page_table [B, max_pages]`` int32, or ``None`` for flat caches
        ``[total_k, num_kv_heads, head_dim]`` addressed by ``cu_seqlens_k [B + 1]``.
        ``max_seqlen_k`` bounds the lengths (it sizes the split of the work, never a capacity).
        ``topk`` is the width of the top-k rows run() will get; ``sm_scale`` defaults to
        ``1 / sqrt(head_dim)``; ``q_data_type`` is the dtype of the wrapper's output buffers.
        """
        self._planned = False
        _dlpack_arg("seq_lens", seq_lens)
        if page_table is not None:
            _dlpack_arg("page_table", page_table)
        elif cu_seqlens_k is None:
            raise error("cu_seqlens_k", "None", "flat caches (page_table=None) need cu_seqlens_k")
        if cu_seqlens_k is not None:
            _dlpack_arg("cu_seqlens_k", cu_seqlens_k)
        if len(seq_lens.shape) != 1:
            raise error("seq_lens.ndim", len(seq_lens.shape), "must be 1: [B]")
        _int32_arg(seq_lens=seq_lens, page_table=page_table, cu_seqlens_k=cu_seqlens_k)
        batch = int(seq_lens.shape[0])
        q_len = _int_arg("q_len_per_request", q_len_per_request, 1)
        h_q = _int_arg("num_q_heads", num_q_heads, 1)
        h_kv = _int_arg("num_kv_heads", num_kv_heads, 1)
        d = _int_arg("head_dim", head_dim, 1)
        width = _int_arg("topk", topk, 1)
        max_len = _int_arg("max_seqlen_k", max_seqlen_k, 0, INT64_MAX)
        scale = _scale_arg(sm_scale)
        q_type = _q_type_arg(q_data_type)
        if not is_cuda(seq_lens) and dtype_name(seq_lens.dtype) == "int32":
            lengths = seq_lens.tolist()
            if lengths and max(lengths) > max_len:
                raise error("max_seqlen_k", max_len, f"must be >= the longest seq_lens entry {max(lengths)}")
        backend = self._backend_for(seq_lens)
        like = next((a for a in (seq_lens, page_table, cu_seqlens_k)
                     if a is not None and is_cuda(a) == (backend == "cuda")), None)
        try:
            op = self._operator((h_q, h_kv, d, width, scale, backend, self._strict),
                                lambda: _msa.SparseDecode(h_q, h_kv, d, width, scale, backend, self._strict))
            self._set_workspace(backend, like, op.workspace_bytes(batch, q_len, max_len))
            with on_device_of(seq_lens):
                op.plan(batch, q_len, max_len, stream_of(None, seq_lens))
        except _msa.Error as e:
            raise renamed(e, _DECODE_NAMES) from None
        self._own_outputs(like, batch * q_len, h_q, d, q_type)
        self._seq_lens = seq_lens
        self._page_table = page_table
        self._cu_seqlens_k = cu_seqlens_k
        self._q_len = q_len
        self._planned = True

    def run(self, q, paged_kv_cache, topk_indices, *, topk_head_major: bool = False, out=None, lse=None,
            return_lse: bool = False, sinks=None, k_descale=None, v_descale=None):
        """One decode step of ``q [B * Q, num_q_heads, head_dim]`` over ``topk_indices
        [B * Q, num_kv_heads, topk]`` int32 (the MSA decode layout; ``[num_kv_heads, B * Q, topk]``
        with ``topk_head_major``) and ``paged_kv_cache = (k_cache, v_cache)``. Returns ``out``, or
        ``(out, lse)`` with ``return_lse``, as the prefill wrapper does; ``sinks [num_q_heads]``
        fp32 attention-sink logits. FP8 E4M3 caches (``float8_e4m3fn``, bf16 q, head_dim 128) take
        ``k_descale`` / ``v_descale``, ``[1]`` or ``[num_kv_heads]`` fp32."""
        _optional_arrays(out=out, lse=lse, sinks=sinks, k_descale=k_descale, v_descale=v_descale)
        out, lse = self._outputs(q, out, lse, return_lse)
        _dlpack_arg("topk_indices", topk_indices)
        k, v, nhd = self._kv_pair(paged_kv_cache, self._page_table is not None)
        try:
            with on_device_of(q):
                self._op.run(q, k, v, out, self._seq_lens, topk_indices, self._q_len, bool(topk_head_major),
                             self._page_table, None if self._page_table is not None else self._cu_seqlens_k,
                             sinks, lse, k_descale, v_descale, stream_of(None, q, out), nhd)
        except _msa.Error as e:
            raise renamed(e, _DECODE_NAMES) from None
        return (out, lse) if return_lse else out
