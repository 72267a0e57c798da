"""What the Python layers need to know about the caller's arrays without depending on any one
framework: which library made them (PyTorch, NumPy, CuPy), where they live, their dtype by name,
new buffers of the same kind, the stream to run on, and msa.Error raised from Python."""

from __future__ import annotations

import contextlib
import operator
import struct
import sys

from . import _msa

_DLPACK_CPU = 1
_DLPACK_CUDA = 2


def error(argument: str, value, message: str) -> _msa.Error:
    """An msa.Error built in Python, with the same fields and text as one raised by the C++ layer."""
    e = _msa.Error(f"msa: {argument} = {value}: {message}")
    e.argument, e.value, e.message = argument, str(value), message
    return e


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def int_arg(name: str, value, minimum: int = 0, maximum: int = INT32_MAX) -> int:
    """value as a Python int: any integer (int, a NumPy integer, a one-element integer tensor),
    not a bool, in [minimum, maximum] (the C++ parameter's range: int32 unless said)."""
    if not isinstance(value, bool):
        try:
            number = operator.index(value)
        except TypeError:
            number = None
        if number is not None and minimum <= number <= maximum:
            return number
    raise error(name, value, f"must be an int in [{minimum}, {maximum}]")


def scale_arg(name: str, value) -> float:
    """A softmax scale as the C++ layer takes it (fp32, where 0 would mean 1 / sqrt(d)): a
    number > 0 that stays finite and > 0 once rounded to fp32."""
    try:
        number = float(value) if not isinstance(value, (bool, str, bytes)) else None
        single = struct.unpack("f", struct.pack("f", number))[0] if number is not None else None
    except (TypeError, ValueError, OverflowError):
        single = None
    if single is not None and 0 < single < float("inf"):
        return number
    raise error(name, value, "must be a float > 0 that fp32 holds (about 1.2e-38 to 3.4e38)")


def raise_explained(arrays: dict | None = None, ints: dict | None = None, floats: dict | None = None) -> None:
    """Called when the extension refused an argument's type (nanobind's TypeError names none):
    raises an msa.Error naming the first of `arrays` (name -> value, None allowed) that is no
    DLPack array, of `ints` (name -> value: int32 ranges) that is no int of its C++ type, or of
    `floats` (name -> value) that is no float; returns when all look right (the caller then
    re-raises the TypeError). Costs nothing on calls that succeed."""
    for name, a in (arrays or {}).items():
        if a is not None and not hasattr(a, "__dlpack__"):
            raise error(name, type(a).__name__, "must be an array with __dlpack__ (PyTorch, NumPy, CuPy, JAX)")
    for name, value in (ints or {}).items():
        int_arg(name, value, -2**31, INT32_MAX)
    for name, value in (floats or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
            raise error(name, value, "must be a float")


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
    if isinstance(dtype, type):  # a scalar type such as numpy.float16
        return getattr(dtype, "__name__", str(dtype))
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
        try:
            return int_arg("stream", getattr(stream, "cuda_stream", stream), 0, 2**64 - 1)
        except _msa.Error:
            raise error("stream", stream, "must be a CUDA stream handle (an int) or an object with .cuda_stream") \
                from None
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
