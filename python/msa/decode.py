"""The sparse decode operator, a thin layer over msa::SparseDecode: plan() from host sizes, then
run() every step (spec §4)."""

from __future__ import annotations

from . import _msa
from ._arrays import INT64_MAX, int_arg, on_device_of, raise_explained, stream_of


class SparseDecode:
    """msa::SparseDecode over DLPack arrays (PyTorch, CuPy, JAX; NumPy on the CPU), never copied.

    Geometry: ``h_q`` query heads, ``h_kv`` KV heads, head dim ``d``, ``topk`` blocks per
    (query, KV head), softmax ``scale`` (0: 1/sqrt(d)); ``backend`` ``"cpu"`` or ``"cuda"``;
    ``strict`` checks every value on the host (one synchronisation on CUDA).

    Without :meth:`set_workspace` the object allocates its scratch in :meth:`plan`; :meth:`run`
    never allocates and reads seq_len, top-k, the page table and sinks on the device only, so one
    captured run() replays step after step with new contents in the same buffers.
    """

    def __init__(self, h_q: int, h_kv: int, d: int = 128, topk: int = 16, scale: float = 0.0, *,
                 backend: str = "cpu", strict: bool = False):
        try:
            self._op = _msa.SparseDecode(h_q, h_kv, d, topk, scale, backend, strict)
        except TypeError:
            raise_explained(ints=dict(h_q=h_q, h_kv=h_kv, d=d, topk=topk), floats=dict(scale=scale))
            raise
        self._workspace = None

    def set_workspace(self, buffer) -> None:
        """Use ``buffer`` (one contiguous array on the backend's device, at least
        :meth:`workspace_bytes` bytes, 256-byte aligned) as the scratch; ``None``: the object's own."""
        try:
            self._op.set_workspace(buffer)
        except TypeError:
            raise_explained(arrays=dict(buffer=buffer))
            raise
        self._workspace = buffer

    def plan(self, batch: int, q_per_request: int, max_seq_len: int, *, stream=None) -> None:
        """Fixes the geometry: ``batch`` requests of ``q_per_request`` (1..16) queries, seq_len at
        most ``max_seq_len`` (0: no bound known)."""
        self._op.plan(int_arg("batch", batch, 0, INT64_MAX), int_arg("q_per_request", q_per_request, -2**31),
                      int_arg("max_seq_len", max_seq_len, -2**63, INT64_MAX), stream_of(stream))

    def run(self, q, k, v, out, seq_len, topk, q_per_request: int, *, topk_head_major: bool = False,
            page_table=None, cu_seqlens_k=None, sinks=None, lse=None, k_descale=None, v_descale=None,
            stream=None) -> None:
        """``q [B * Q, h_q, d]`` (row ``b * Q + t``: query t of request b, at position
        ``seq_len[b] - Q + t``) over ``topk [B * Q, h_kv, topk]`` (or ``[h_kv, B * Q, topk]`` with
        ``topk_head_major``), written into ``out [B * Q, h_q, d]`` (and ``lse [B * Q, h_q]`` fp32
        when given). Paged K/V ``[num_pages, h_kv, page_size, d]`` with ``page_table``, or flat
        ``[total_k, h_kv, d]`` with ``cu_seqlens_k``; ``sinks [h_q]`` fp32. FP8 E4M3 K/V
        (``float8_e4m3fn``, bf16 q; on the GPU head dim 128) take ``k_descale`` and ``v_descale``
        (``[1]`` or ``[h_kv]`` fp32: K = k_descale * stored)."""
        try:
            with on_device_of(q):
                self._op.run(q, k, v, out, seq_len, topk, q_per_request, topk_head_major, page_table, cu_seqlens_k,
                             sinks, lse, k_descale, v_descale, stream_of(stream, q, out))
        except TypeError:
            raise_explained(arrays=dict(q=q, k=k, v=v, out=out, seq_len=seq_len, topk=topk, page_table=page_table,
                                        cu_seqlens_k=cu_seqlens_k, sinks=sinks, lse=lse, k_descale=k_descale,
                                        v_descale=v_descale), ints=dict(q_per_request=q_per_request))
            raise

    def workspace_bytes(self, batch: int, q_per_request: int, max_seq_len: int) -> int:
        """Scratch bytes of a decode of this size (needs no GPU)."""
        return self._op.workspace_bytes(int_arg("batch", batch, 0, INT64_MAX),
                                        int_arg("q_per_request", q_per_request, -2**31),
                                        int_arg("max_seq_len", max_seq_len, -2**63, INT64_MAX))
