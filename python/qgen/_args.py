"""_args.py — the arguments that cross from Python into libqgen, checked: integers, numbers
and strings for their C types, and arrays and tensors read through NumPy's and torch's own
accessors.

This is the internal interface the package's modules share (_api's Context and Cache,
_views' View and DecodeWrapper); its names are not part of qgen's public API. Recognising
an array or tensor imports neither torch nor NumPy: it is one only when its library is
already loaded, since whoever made one has imported it.
"""
import math
import os
import sys

from ._lib import invalid, wrong_type

NUMPY_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "uint16"}
TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
FLT_MAX = 3.4028234663852886e38


def torch_module():
    import torch  # optional: only tensors that are torch tensors bring it in

    return torch


def is_torch(x):
    """Whether x is a torch tensor. Whoever made one has imported torch, so torch is
    looked up, never imported, here; a class that only calls itself torch is not one."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_ndarray(x):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


# ---- integers, numbers and strings that cross into C -------------------------------------

def as_int(x, what):
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise wrong_type(f"{what} = {x!r} is not an integer")
    try:
        return x.__index__()
    except (TypeError, ValueError) as e:  # a tensor or array of more than one element
        raise wrong_type(f"{what} = {x!r} is not an integer ({e})") from None


def fits(x, what, bits, low=None):
    """An integer for a signed C field of the given bits: ctypes would wrap a value outside
    its range (2^32 + 2 arrives as 2), so it is refused here. low narrows the range where a
    smaller value means nothing (a device ordinal below 0)."""
    n = as_int(x, what)
    lo, hi = -(2 ** (bits - 1)) if low is None else low, 2 ** (bits - 1) - 1
    if not lo <= n <= hi:
        raise invalid(f"{what} = {n} is out of range: it is passed to C as a {bits}-bit integer, "
                      f"which holds {lo if low is not None else f'-2^{bits - 1}'} .. 2^{bits - 1} - 1")
    return n


def addr(x, what):
    """An address or handle for a 64-bit unsigned C field."""
    n = as_int(x, what)
    if not 0 <= n < 2**64:
        raise invalid(f"{what} = {n:#x} is not an address (0 .. 2^64 - 1)")
    return n


def token_count(x, what, low):
    """A token count for a long long field: ctypes would wrap a value past 2^63 silently."""
    n = as_int(x, what)
    if not low <= n < 2**63:
        raise invalid(f"{what} = {n} must be {'> 0' if low else '>= 0'} tokens and below 2^63")
    return n


def real(x, what, c_float=False):
    """A float for a C double (or float): an int too large for either is refused, not
    turned into an infinity or an OverflowError."""
    if isinstance(x, (str, bytes, bool)):
        raise wrong_type(f"{what} = {x!r} is not a number")
    try:
        v = float(x)
    except OverflowError:
        raise invalid(f"{what} = {x!r} does not fit a C double") from None
    except (TypeError, ValueError):
        raise wrong_type(f"{what} = {x!r} is not a number") from None
    if c_float and math.isfinite(v) and abs(v) > FLT_MAX:
        raise invalid(f"{what} = {v:g} does not fit a C float (at most {FLT_MAX:g})")
    return v


def cstr(x, what, path=False):
    """x as bytes for a C string: a str or bytes (a path-like object too, for a path),
    without a NUL byte, which would end the C string early ("small.lua\\0/etc/passwd"
    would open small.lua)."""
    if path:
        try:
            x = os.fspath(x)
        except TypeError:
            raise wrong_type(f"{what} must be a path (str, bytes or os.PathLike), got {type(x).__name__}") from None
    if isinstance(x, str):
        try:
            b = os.fsencode(x) if path else x.encode()
        except UnicodeError as e:
            raise invalid(f"{what} cannot be encoded: {e}") from None
    elif isinstance(x, bytes):
        b = x
    else:
        raise wrong_type(f"{what} must be a string, got {type(x).__name__}")
    nul = b.find(b"\0")
    if nul >= 0:
        raise invalid(f"{what} contains a NUL byte (at position {nul}); C would read only what comes before it: "
                      f"{b[:nul].decode(errors='replace')!r}")
    return b



# ---- arrays and tensors ----------------------------------------------------------------

class Mem:
    """What qgen is told about an array or tensor, read through NumPy's and torch's own
    accessors (a subclass cannot change them): address, shape, byte strides, dtype name,
    element size, device ("cpu" or "cuda"), device index, C-contiguity, writability."""

    __slots__ = ("ptr", "shape", "strides", "dtype", "itemsize", "device", "index", "contiguous", "writable", "torch")

    def extent(self):
        """The bytes [lo, hi) the array spans (None when it has no elements)."""
        if any(n == 0 for n in self.shape):
            return None
        lo = hi = self.ptr
        for n, s in zip(self.shape, self.strides):
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
        return lo, hi + self.itemsize


def mem_of(x, fn, name):
    """The Mem of x, which must be a NumPy array or a torch tensor (a TypeError otherwise)."""
    m = Mem()
    if is_torch(x):
        torch = sys.modules["torch"]
        T = torch.Tensor
        layout, dev = T.layout.__get__(x), T.device.__get__(x)
        if layout is not torch.strided:
            raise invalid(f"{fn}: {name} is a {layout} tensor; qgen takes dense (strided) tensors")
        if dev.type not in ("cpu", "cuda"):
            raise invalid(f"{fn}: {name} is on {dev}; qgen takes CUDA tensors (GPU backend) or host memory "
                          "(CPU backend)")
        try:
            m.ptr = T.data_ptr(x)
        except RuntimeError as e:  # a tensor without storage (fake, meta, functional)
            raise invalid(f"{fn}: {name} has no memory qgen could use: {e}") from None
        m.itemsize = T.element_size(x)
        m.shape = tuple(T.size(x))
        m.strides = tuple(s * m.itemsize for s in T.stride(x))
        m.dtype = str(T.dtype.__get__(x)).replace("torch.", "")
        m.device, m.index = dev.type, dev.index
        m.contiguous, m.writable, m.torch = T.is_contiguous(x), True, True
        return m
    if is_ndarray(x):
        nd = sys.modules["numpy"].ndarray
        flags, dt = nd.flags.__get__(x), nd.dtype.__get__(x)
        m.ptr = nd.__array_interface__.__get__(x)["data"][0]
        m.shape, m.strides = tuple(nd.shape.__get__(x)), tuple(nd.strides.__get__(x))
        m.dtype, m.itemsize = str(dt), dt.itemsize
        m.device, m.index = "cpu", None
        m.contiguous, m.writable, m.torch = flags["C_CONTIGUOUS"], flags["WRITEABLE"], False
        return m
    raise wrong_type(f"{fn}: {name} must be a NumPy array or a torch tensor, got {type(x).__name__}")


def disjoint(fn, out, others):
    """Refuse an output whose bytes overlap those of an input or of memory the step reads
    (out = (name, Mem), others = [(name, Mem or extent)]): the step would read rows it has
    already written (q = buf[:3], out = buf[1:4] gave wrong rows and no error)."""
    o = out[1].extent()
    if o is None:
        return
    for name, m in others:
        e = m.extent() if isinstance(m, Mem) else m
        if e is not None and o[0] < e[1] and e[0] < o[1]:
            raise invalid(f"{fn}: {out[0]} overlaps {name} (bytes {o[0]:#x}..{o[1]:#x} and {e[0]:#x}..{e[1]:#x}); "
                          f"the step would read what it has already written: give {out[0]} its own memory")


def leading_rows(x, fn, name, rows, dims):
    """The leading size of x, which must be a 3-d array or tensor [rows, *dims] (the rest of
    its checks are Cache._tensor's, once the row count is known)."""
    if not (is_torch(x) or is_ndarray(x)):
        raise wrong_type(f"{fn}: {name} must be a NumPy array or a torch tensor, got {type(x).__name__}")
    if len(x.shape) != 3:
        raise invalid(f"{fn}: {name} must be [{rows}, {dims[0]}, {dims[1]}], got shape {list(x.shape)}")
    return x.shape[0]


def new_out(shape, type_name, torch_device=None):
    """An uninitialised output of shape in the spec's type type_name: a torch tensor on
    torch_device (a device or its name), or a NumPy array when torch_device is None."""
    if torch_device is not None:
        torch = torch_module()
        return torch.empty(shape, dtype=getattr(torch, TORCH_DTYPES[type_name]), device=torch_device)
    import numpy as np

    return np.empty(shape, dtype=NUMPY_DTYPES[type_name])
