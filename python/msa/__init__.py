"""msa: MiniMax Sparse Attention for NVIDIA Hopper, with a CPU reference of every operator.

Tensors go in and out through DLPack (``__dlpack__``): PyTorch, CuPy, JAX, and NumPy for CPU
tensors, never copied. Errors are :class:`msa.Error`, a ``ValueError`` whose ``argument`` names
the rejected argument (e.g. ``"q.shape[2]"``) and whose ``value`` is what it held.
"""

from ._msa import Error, cuda_available, version
from .prefill import SparsePrefill

__version__ = version()

__all__ = ["Error", "SparsePrefill", "cuda_available", "version", "__version__"]
