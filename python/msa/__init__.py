"""msa: MiniMax Sparse Attention for NVIDIA Hopper, with a CPU reference of every operator.

Tensors go in and out through DLPack (``__dlpack__``): PyTorch, CuPy, JAX, and NumPy for CPU
tensors, never copied. Errors are :class:`msa.Error`, a ``ValueError`` whose ``argument`` names
the rejected argument (e.g. ``"q.shape[2]"``) and whose ``value`` is what it held.

Two layers over the same C++ operators: the MSA wrapper classes (``msa.BatchPrefillWithPagedKVCacheWrapper``:
the MSA contract's names, arguments and defaults, plan()-owned buffers) and a thin Pythonic layer
(``msa.SparsePrefill``: the C++ object's plan/run with every option).
"""

from ._msa import Error, cuda_available, version
from .prefill import SparsePrefill
from .wrappers import BatchPrefillWithPagedKVCacheWrapper

__version__ = version()

__all__ = ["BatchPrefillWithPagedKVCacheWrapper", "Error", "SparsePrefill", "cuda_available", "version",
           "__version__"]
