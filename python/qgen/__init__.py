"""qgen — Quest sparse-attention decode kernels generated from a model's spec, from Python.

    import qgen, numpy as np
    ctx = qgen.Context(head_dim=128, n_head=32, n_head_kv=8, sparse={"block": 64, "coverage": 0.25},
                       backend="cpu")
    kv = ctx.cache(max_seqs=1, max_tokens=4096)
    kv.append(k, v)             # [tokens, n_head_kv, head_dim] in the spec's in_type
    out = kv.attend(q)          # [n_seq, n_head, head_dim]

A ctypes binding of libqgen.so (runtime/qgen.h); _lib.py says where the library is found.
Failures raise qgen.Error subclasses that are also the standard exceptions (ValueError,
TypeError, FileNotFoundError, MemoryError, RuntimeError): see qgen.Error.
"""
from ._api import Cache, Context, kv_type, spec_text
from ._lib import (ERROR_CLASSES, STATUS_NAMES, ArgumentTypeError, BundleError, CapacityError, CompileError, CudaError,
                   Error, FileError, InternalError, InvalidArgumentError, NoDeviceError, NoDriverError, OutOfMemoryError,
                   SpecError, SpecNotFoundError, UnsupportedError, library_path)
from ._views import DecodeWrapper, View, sglang_block_table

__all__ = ["ArgumentTypeError", "BundleError", "Cache", "CapacityError", "CompileError", "Context", "CudaError",
           "DecodeWrapper", "ERROR_CLASSES", "Error", "FileError", "InternalError", "InvalidArgumentError",
           "NoDeviceError", "NoDriverError", "OutOfMemoryError", "STATUS_NAMES", "SpecError", "SpecNotFoundError",
           "UnsupportedError", "View", "kv_type", "library_path", "sglang_block_table", "spec_text"]
__version__ = "0.1.0"
