"""msa: MiniMax Sparse Attention for NVIDIA Hopper, with a CPU reference of every operator.

Tensors go in and out through DLPack (``__dlpack__``): PyTorch, CuPy, JAX, and NumPy for CPU
tensors, never copied. Errors are :class:`msa.Error`, a ``ValueError`` whose ``argument`` names
the rejected argument (e.g. ``"q.shape[2]"``) and whose ``value`` is what it held.

Two layers over the same C++ operators: the MSA wrapper classes
(``msa.BatchPrefillWithPagedKVCacheWrapper``, ``msa.BatchDecodeWithPagedKVCacheWrapper``: the MSA
contract's names, arguments and defaults, plan()-owned buffers) and a thin Pythonic layer
(``msa.SparsePrefill``, ``msa.SparseDecode``: the C++ objects' plan/run with every option). The
selection that feeds them, ``msa.Indexer`` and ``msa.TopK``, has the Pythonic layer only, on the
CPU backend for now.
"""

from ._msa import Error, cuda_available, version
from .decode import SparseDecode
from .prefill import SparsePrefill
from .selection import Indexer, TopK
from .wrappers import BatchDecodeWithPagedKVCacheWrapper, BatchPrefillWithPagedKVCacheWrapper

__version__ = version()

__all__ = ["BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper", "Error", "Indexer",
           "SparseDecode", "SparsePrefill", "TopK", "cuda_available", "version", "__version__"]
