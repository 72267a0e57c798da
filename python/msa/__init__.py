"""msa: MiniMax Sparse Attention for NVIDIA Hopper, with a CPU reference of every operator.

Tensors go in and out through DLPack (``__dlpack__``): PyTorch, CuPy, JAX, and NumPy for CPU
tensors, never copied (read-only arrays as inputs; the MSA wrappers take PyTorch, CuPy and
NumPy, whose libraries make their buffers). Errors are :class:`msa.Error`, a ``ValueError`` whose ``argument`` names
the rejected argument (e.g. ``"q.shape[2]"``) and whose ``value`` is what it held.

Two layers over the same C++ operators: the MSA wrapper classes (the MSA contract's names,
arguments and defaults, plan()-owned buffers: ``msa.BatchPrefillIndexerWithPagedKVCacheWrapper``
and ``msa.BatchDecodeIndexerWithPagedKVCacheWrapper`` select each query's blocks,
``msa.BatchPrefillWithPagedKVCacheWrapper`` and ``msa.BatchDecodeWithPagedKVCacheWrapper`` attend
over them) and a thin Pythonic layer (``msa.Indexer``, ``msa.TopK``, ``msa.IndexerTopK``, ``msa.SparsePrefill``,
``msa.SparseDecode``: the C++ objects' plan/run with every option). Every operator runs on the CPU
(NumPy arrays) and on the CUDA backend (device arrays).
"""

from ._msa import Error, cuda_available, version
from .decode import SparseDecode
from .indexer_wrappers import BatchDecodeIndexerWithPagedKVCacheWrapper, BatchPrefillIndexerWithPagedKVCacheWrapper
from .prefill import SparsePrefill
from .selection import Indexer, IndexerTopK, TopK
from .wrappers import BatchDecodeWithPagedKVCacheWrapper, BatchPrefillWithPagedKVCacheWrapper

__version__ = version()

__all__ = ["BatchDecodeIndexerWithPagedKVCacheWrapper", "BatchDecodeWithPagedKVCacheWrapper",
           "BatchPrefillIndexerWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper", "Error", "Indexer",
           "IndexerTopK", "SparseDecode", "SparsePrefill", "TopK", "cuda_available", "version", "__version__"]
