"""The selection operators, thin layers over msa::Indexer, msa::TopK and msa::IndexerTopK (spec
§5): index scores per (index head, query, 128-token block), then each row's top-k blocks in the
prefill layout that msa.SparsePrefill takes; or both at once, with no score written. All run on
the CPU and on the CUDA backend (device tensors; graph-capturable)."""

from __future__ import annotations

from . import _msa
from ._arrays import INT64_MAX, int_arg, on_device_of, raise_explained, stream_of


def _batch_plan(op, cu_seqlens_q, k_len, stream) -> None:
    """op.plan() of Indexer and TopK: the batch alone."""
    try:
        with on_device_of(cu_seqlens_q):
            op.plan(cu_seqlens_q, k_len, stream_of(stream))
    except TypeError:
        raise_explained(arrays=dict(cu_seqlens_q=cu_seqlens_q, k_len=k_len))
        raise


def _index_run(op, index_q, index_k, output, cu_seqlens_q, k_len, page_table, cu_seqlens_k, stream) -> None:
    """op.run() of Indexer and IndexerTopK, which read the same arrays; output = (name, array) of
    what the call writes."""
    name, out = output
    try:
        with on_device_of(index_q):
            op.run(index_q, index_k, out, cu_seqlens_q, k_len, page_table, cu_seqlens_k,
                   stream_of(stream, index_q, out))
    except TypeError:
        raise_explained(arrays={"index_q": index_q, "index_k": index_k, name: out, "cu_seqlens_q": cu_seqlens_q,
                                "k_len": k_len, "page_table": page_table, "cu_seqlens_k": cu_seqlens_k})
        raise


class Indexer:
    """msa::Indexer over DLPack arrays (NumPy on the CPU), never copied.

    ``h_i`` index heads of dim ``d``; ``scale`` 0 means 1/sqrt(d); ``backend`` ``"cpu"`` or
    ``"cuda"`` (h_i up to 256); ``strict`` checks every value on the host.
    """

    def __init__(self, h_i: int, d: int = 128, scale: float = 0.0, *, backend: str = "cpu", strict: bool = False):
        try:
            self._op = _msa.Indexer(h_i, d, scale, backend, strict)
        except TypeError:
            raise_explained(ints=dict(h_i=h_i, d=d), floats=dict(scale=scale))
            raise

    def plan(self, cu_seqlens_q, k_len, *, stream=None) -> None:
        """The batch the next runs score: ``cu_seqlens_q [B + 1]`` and ``k_len [B]`` int32."""
        _batch_plan(self._op, cu_seqlens_q, k_len, stream)

    def run(self, index_q, index_k, scores, cu_seqlens_q, k_len, *, page_table=None, cu_seqlens_k=None,
            stream=None) -> None:
        """Writes ``scores [h_i, total_q, max_cols]`` fp32 (``max_cols >= ceil(max k_len / 128)``):
        ``scale`` times the best dot product of ``index_q [total_q, h_i, d]`` with the block's
        index keys visible to the query (bottom-right causal), ``-inf`` where none is. The index
        keys are one head shared by every index head: paged ``[num_pages, 1, page_size, d]`` with
        ``page_table``, or flat ``[total_k, 1, d]`` with ``cu_seqlens_k``. Queries and keys share a
        dtype: bf16, fp16 or ``float8_e4m3fn`` (MSA's q8kv8: the E4M3 values as they are, no
        descale; on the GPU e4m3 tensor-core products, docs/numerics.md)."""
        _index_run(self._op, index_q, index_k, ("scores", scores), cu_seqlens_q, k_len, page_table, cu_seqlens_k,
                   stream)


class TopK:
    """msa::TopK over DLPack arrays: the ``topk - 1`` best candidate blocks of each row in rank
    order, then the query's local block; a row of ``n <= topk`` candidate blocks takes them all in
    order, then -1. ``ranking`` ``"exact"`` ranks by score (ties to the smaller block id; NaN below
    every number); ``"quantised16"`` by MSA's 16-bit key (each row's finite scores mapped onto
    levels 1..65535 over their own min and max, ties to the smaller block id; -inf and NaN level
    0, +inf 65535): the selection of MSA's own top-k. ``topk`` 1..32; ``backend`` ``"cpu"`` or
    ``"cuda"`` (arrays in device memory, run() one graph-capturable launch reading the batch on
    the device); ``strict`` checks the batch's values on the host first (on CUDA one
    synchronisation)."""

    def __init__(self, topk: int = 16, *, backend: str = "cpu", strict: bool = False, ranking: str = "exact"):
        try:
            self._op = _msa.TopK(topk, backend, strict, ranking)
        except TypeError:
            raise_explained(ints=dict(topk=topk))
            raise

    def plan(self, cu_seqlens_q, k_len, *, stream=None) -> None:
        """The batch the next runs select for: ``cu_seqlens_q [B + 1]`` and ``k_len [B]`` int32."""
        _batch_plan(self._op, cu_seqlens_q, k_len, stream)

    def run(self, scores, topk, cu_seqlens_q, k_len, *, stream=None) -> None:
        """From ``scores [h, total_q, cols]`` fp32 writes ``topk [h, total_q, topk]`` int32 (the
        prefill layout; any non-overlapping strides, so ``out.transpose(0, 1)`` of a
        ``[total_q, h, topk]`` tensor writes the query-major layout). A NaN score ranks below
        every number."""
        try:
            with on_device_of(scores):
                self._op.run(scores, topk, cu_seqlens_q, k_len, stream_of(stream, scores, topk))
        except TypeError:
            raise_explained(arrays=dict(scores=scores, topk=topk, cu_seqlens_q=cu_seqlens_q, k_len=k_len))
            raise


def _sizes(batch, total_q, max_k_len) -> tuple:
    return (int_arg("batch", batch, 0, INT64_MAX), int_arg("total_q", total_q, 0, INT64_MAX),
            int_arg("max_k_len", max_k_len, 0, INT64_MAX))


class IndexerTopK:
    """msa::IndexerTopK over DLPack arrays: :class:`Indexer` then :class:`TopK` (exact ranking) in
    one operator that never writes the scores (on the GPU each row's scores stay on chip while its
    top-k is chosen; at 128k tokens and four index heads the scores would take 2 GB). The ids are
    those TopK picks from the scores Indexer writes with ``ceil(max_k_len / 128)`` columns.

    ``h_i`` index heads of dim ``d``, ``topk`` 1..32, ``scale`` 0 means 1/sqrt(d); ``backend``
    ``"cpu"`` or ``"cuda"``; ``strict`` checks every value on the host (on CUDA one
    synchronisation), including ``k_len <= max_k_len``.
    """

    def __init__(self, h_i: int, topk: int = 16, d: int = 128, scale: float = 0.0, *, backend: str = "cpu",
                 strict: bool = False):
        try:
            self._op = _msa.IndexerTopK(h_i, d, topk, scale, backend, strict)
        except TypeError:
            raise_explained(ints=dict(h_i=h_i, topk=topk, d=d), floats=dict(scale=scale))
            raise

    def plan(self, batch: int, total_q: int, max_k_len: int, *, stream=None) -> None:
        """Host sizes only: ``batch`` requests, ``total_q`` query rows, ``max_k_len`` a bound on
        every ``k_len``. Allocates the operator's scratch when the batch needs one (few query
        tiles: decode steps, short chunks); launches nothing."""
        self._op.plan(*_sizes(batch, total_q, max_k_len), stream_of(stream))

    def workspace_bytes(self, batch: int, total_q: int, max_k_len: int) -> int:
        """The scratch plan() allocates for these sizes (0 on the CPU)."""
        return self._op.workspace_bytes(*_sizes(batch, total_q, max_k_len))

    def run(self, index_q, index_k, topk, cu_seqlens_q, k_len, *, page_table=None, cu_seqlens_k=None,
            stream=None) -> None:
        """Writes ``topk [h_i, total_q, topk]`` int32 (any non-overlapping strides: a transposed
        ``[total_q, h_i, topk]`` tensor takes the query-major layout) from ``index_q [total_q, h_i,
        d]`` and the index-K cache, as :meth:`Indexer.run` reads them; the planned batch and
        ``total_q``."""
        _index_run(self._op, index_q, index_k, ("topk", topk), cu_seqlens_q, k_len, page_table, cu_seqlens_k, stream)
