"""What the Python layers need to know about the caller's arrays without depending on any one
framework: which library made them (PyTorch, NumPy, CuPy), where they live, their dtype by name,
new buffers of the same kind, the stream to run on, and msa.Error raised from Python."""

from __future__ import annotations

import contextlib
import sys

from . import _msa

_DLPACK_CPU = 1
_DLPACK_CUDA = 2


def error(argument: str, value, message: str) -> _msa.Error:
    """An msa.Error built in Python, with the same fields and text as one raised by the C++ layer."""
    e = _msa.Error(f"msa: {argument} = {value}: {message}")
    e.argument, e.value, e.message = argument, str(value), message
    return e


def renamed(e: _msa.Error, names: dict) -> _msa.Error:
    """e with its argument's leading name replaced by names[name] (the caller's spelling of an
    argument the C++ layer knows by another name, e.g. 'topk' -> 'topk_indices'); e itself when
    no name matches."""
    for key in sorted(names, key=len, reverse=True):
        if e.argument == key or e.argument.startswith((key + ".", key + "[")):
            return error(names[key] + e.argument[len(key):], e.value, e.message)
    return e


def library_of(x, name: str):
    """The array library of x: the torch, numpy or cupy module."""
    top = type(x).__module__.split(".")[0]
    if top == "torch":
        import torch

        return torch
    if top == "numpy":
        import numpy

        return numpy
    if top == "cupy":
        import cupy

        return cupy
    raise error(f"{name}.type", type(x).__name__,
                "this layer takes PyTorch, NumPy or CuPy arrays (msa.SparsePrefill takes any DLPack array)")


def is_cuda(x) -> bool:
    """True for an array in CUDA device memory (DLPack device type kDLCUDA)."""
    flag = getattr(x, "is_cuda", None)  # a torch tensor's attribute: 0.1 us against 0.8 for the DLPack query
    if type(flag) is bool:
        return flag
    return x.__dlpack_device__()[0] == _DLPACK_CUDA


def _torch_device(x):
    """x.device for a torch tensor (torch already imported by the caller), else None."""
    torch = sys.modules.get("torch")
    return x.device if torch is not None and isinstance(x, torch.Tensor) else None


_DTYPE_NAMES: dict = {}  # dtype object -> name: str() of a dtype costs microseconds (NumPy's most)


def dtype_name(dtype) -> str:
    """'bfloat16', 'float16', 'int32', ... for a torch, NumPy or CuPy dtype or a string."""
    if isinstance(dtype, str):
        return dtype
    try:
        return _DTYPE_NAMES[dtype]
    except (KeyError, TypeError):  # not seen yet, or not hashable
        pass
    text = str(dtype)
    name = text[len("torch."):] if text.startswith("torch.") else getattr(dtype, "name", text)
    try:
        if len(_DTYPE_NAMES) < 256:
            _DTYPE_NAMES[dtype] = name
    except TypeError:
        pass
    return name


def empty(like, shape, dtype: str, name: str):
    """An uninitialised array of the library and device of `like`."""
    xp = library_of(like, name)
    if xp.__name__ == "torch":
        return xp.empty(shape, dtype=getattr(xp, dtype), device=like.device)
    try:
        return xp.empty(shape, dtype=dtype)
    except TypeError:
        raise error("q_data_type", dtype, f"{xp.__name__} has no such dtype (NumPy has no bfloat16: use float16 "
                    "or PyTorch tensors)") from None


def same_device(a, b) -> bool:
    """True when arrays a and b live on the same device (torch tensors compared by .device,
    0.2 us, where a DLPack query costs 0.8 us an array)."""
    device = _torch_device(a)
    if device is not None and _torch_device(b) is not None:
        return device == b.device
    return a.__dlpack_device__() == b.__dlpack_device__()


def same_kind(buf, like, shape, dtype: str) -> bool:
    """True when buf (None: False) is an array of like's library and device with this shape and
    dtype: a buffer a wrapper can keep from one plan() to the next."""
    if type(buf) is not type(like) or tuple(buf.shape) != tuple(shape) or dtype_name(buf.dtype) != dtype:
        return False
    return same_device(buf, like)


def stream_of(stream, *arrays) -> int:
    """The CUDA stream handle to run on: the given one (an int handle or an object with
    ``cuda_stream``), else PyTorch's current stream when an array is a CUDA torch tensor, else 0."""
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    for t in arrays:
        if t is not None and getattr(t, "is_cuda", False):
            import torch  # only reached with torch tensors

            # The raw handle, as Triton reads it: 0.2 us, where building the Stream object of
            # torch.cuda.current_stream() takes 3.7 (torch 2.11); the public call where it is absent.
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            if raw is not None:
                return int(raw(t.device.index))
            return int(torch.cuda.current_stream(t.device).cuda_stream)
    return 0


def on_device_of(x):
    """A context that makes x's CUDA device current while msa launches, for a torch tensor on
    another device than the current one (msa launches on the current device); else nothing."""
    if getattr(x, "is_cuda", False):
        import torch

        if x.device.index != torch.cuda.current_device():
            return torch.cuda.device(x.device)
    return contextlib.nullcontext()
