"""The sparse prefill operator, a thin layer over msa::SparsePrefill: plan(), then run() (spec §1-3)."""

from __future__ import annotations

from . import _msa
from ._arrays import INT64_MAX, int_arg, on_device_of, raise_explained, stream_of


class SparsePrefill:
    """msa::SparsePrefill over DLPack arrays (PyTorch, CuPy, JAX; NumPy on the CPU), never copied.

    Geometry: ``h_q`` query heads, ``h_kv`` KV heads, head dim ``d``, ``topk`` blocks per
    (query, KV head), softmax ``scale`` (0: 1/sqrt(d)). ``backend`` is ``"cpu"`` or ``"cuda"``;
    ``strict`` checks the top-k producer contract and reports the first offending id;
    ``prefill_path`` is ``"auto"``, ``"block_major"`` or ``"tile_union"`` (CUDA); a work item
    covers at most ``q_per_item`` queries of a block (0, the default: chosen per plan from the
    problem's size).

    Without :meth:`set_workspace` the object allocates its scratch in :meth:`plan` (with headroom,
    msa::grown_workspace_bytes; growing it when a larger problem comes); :meth:`run` never
    allocates.
    """

    def __init__(self, h_q: int, h_kv: int, d: int = 128, topk: int = 16, scale: float = 0.0, *,
                 backend: str = "cpu", strict: bool = False, q_per_item: int = 0,
                 prefill_path: str = "auto"):
        try:
            self._op = _msa.SparsePrefill(h_q, h_kv, d, topk, scale, backend, strict, q_per_item, prefill_path)
        except TypeError:
            raise_explained(ints=dict(h_q=h_q, h_kv=h_kv, d=d, topk=topk, q_per_item=q_per_item),
                            floats=dict(scale=scale))
            raise
        self._workspace = None

    def set_workspace(self, buffer) -> None:
        """Use ``buffer`` (one contiguous array of any dtype on the backend's device, at least
        :meth:`workspace_bytes` bytes, 256-byte aligned) as the scratch; ``None`` goes back to
        memory the object owns. The object keeps a reference to it."""
        try:
            self._op.set_workspace(buffer)
        except TypeError:
            raise_explained(arrays=dict(buffer=buffer))
            raise
        self._workspace = buffer

    def plan(self, cu_seqlens_q, k_len, topk, *, max_k_len: int | None = None, stream=None) -> None:
        """Plans the batch (``cu_seqlens_q [B + 1]``, ``k_len [B]`` int32) and selection
        (``topk [h_kv, total_q, topk]`` int32). Device-resident batch tensors need ``max_k_len``
        (an upper bound of every ``k_len[b]``); with them the CUDA plan never synchronises."""
        if max_k_len is not None:
            max_k_len = int_arg("max_k_len", max_k_len, 0, INT64_MAX)
        try:
            with on_device_of(topk):
                self._op.plan(cu_seqlens_q, k_len, topk, max_k_len, stream_of(stream, cu_seqlens_q, k_len, topk))
        except TypeError:
            raise_explained(arrays=dict(cu_seqlens_q=cu_seqlens_q, k_len=k_len, topk=topk))
            raise

    def run(self, q, k, v, out, cu_seqlens_q, k_len, topk, *, page_table=None, cu_seqlens_k=None,
            sinks=None, lse=None, stream=None) -> None:
        """Attention over the planned selection, written into ``out [total_q, h_q, d]`` (and
        ``lse [total_q, h_q]`` fp32, natural log, when given). Paged K/V
        ``[num_pages, h_kv, page_size, d]`` with ``page_table [B, max_pages]``, or flat
        ``[total_k, h_kv, d]`` with ``cu_seqlens_k [B + 1]``; ``sinks [h_q]`` fp32 logits.
        ``cu_seqlens_q``, ``k_len`` and ``topk`` must be the arrays planned."""
        try:
            with on_device_of(q):
                self._op.run(q, k, v, out, cu_seqlens_q, k_len, topk, page_table, cu_seqlens_k, sinks, lse,
                             stream_of(stream, q, out))
        except TypeError:
            raise_explained(arrays=dict(q=q, k=k, v=v, out=out, cu_seqlens_q=cu_seqlens_q, k_len=k_len, topk=topk,
                                        page_table=page_table, cu_seqlens_k=cu_seqlens_k, sinks=sinks, lse=lse))
            raise

    def workspace_bytes(self, batch: int, total_q: int, max_k_len: int) -> int:
        """Scratch bytes of a problem of this size (needs no GPU)."""
        return self._op.workspace_bytes(int_arg("batch", batch, 0, INT64_MAX),
                                        int_arg("total_q", total_q, 0, INT64_MAX),
                                        int_arg("max_k_len", max_k_len, 0, INT64_MAX))
