"""The sparse prefill operator: plan(), then run() (spec §1-3)."""

from __future__ import annotations

from . import _msa


def _stream_of(stream, *tensors) -> int:
    """The CUDA stream handle to run on: the given one (an int handle or an object with
    ``cuda_stream``), else PyTorch's current stream when a tensor is a CUDA torch tensor, else 0."""
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    for t in tensors:
        if t is not None and getattr(t, "is_cuda", False):
            import torch  # only reached with torch tensors

            return int(torch.cuda.current_stream(t.device).cuda_stream)
    return 0


class SparsePrefill:
    """msa::SparsePrefill over DLPack tensors.

    Geometry: ``h_q`` query heads, ``h_kv`` KV heads, head dim ``d``, ``topk`` blocks per
    (query, KV head), softmax ``scale`` (0: 1/sqrt(d)). ``backend`` is ``"cpu"`` or ``"cuda"``;
    ``strict`` checks the top-k producer contract; ``prefill_path`` is ``"auto"``,
    ``"block_major"`` or ``"tile_union"`` (CUDA).
    """

    def __init__(self, h_q: int, h_kv: int, d: int = 128, topk: int = 16, scale: float = 0.0, *,
                 backend: str = "cpu", strict: bool = False, q_per_item: int = 64,
                 prefill_path: str = "auto"):
        self._op = _msa.SparsePrefill(h_q, h_kv, d, topk, scale, backend, strict, q_per_item, prefill_path)

    def plan(self, cu_seqlens_q, k_len, topk, *, max_k_len: int | None = None, stream=None) -> None:
        """Plans the batch (``cu_seqlens_q [B + 1]``, ``k_len [B]`` int32) and selection
        (``topk [h_kv, total_q, topk]`` int32). Device-resident batch tensors need ``max_k_len``."""
        self._op.plan(cu_seqlens_q, k_len, topk, max_k_len, _stream_of(stream, cu_seqlens_q, k_len, topk))

    def run(self, q, k, v, out, cu_seqlens_q, k_len, topk, *, page_table=None, cu_seqlens_k=None,
            sinks=None, lse=None, stream=None) -> None:
        """Attention over the planned selection, written into ``out [total_q, h_q, d]`` (and
        ``lse [total_q, h_q]`` fp32 when given). Paged K/V ``[num_pages, h_kv, page_size, d]``
        with ``page_table [B, max_pages]``, or flat ``[total_k, h_kv, d]`` with ``cu_seqlens_k``."""
        self._op.run(q, k, v, out, cu_seqlens_q, k_len, topk, page_table, cu_seqlens_k, sinks, lse,
                     _stream_of(stream, q, out))

    def workspace_bytes(self, batch: int, total_q: int, max_k_len: int) -> int:
        """Scratch bytes of a problem of this size (needs no GPU)."""
        return self._op.workspace_bytes(batch, total_q, max_k_len)
