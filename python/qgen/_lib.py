"""_lib.py — finding and binding libqgen.so with ctypes: the C structs and prototypes of
runtime/qgen.h, and qgen.Error.

The library is looked up, on first use, in this order:
  1. $QGEN_LIBRARY, a path (an error if nothing is there);
  2. a copy inside the package (libqgen.so.0 next to this file, put there by `pip install`
     when $QGEN_LIBRARY or a build at ../build was found; see setup.py);
  3. the system loader: ctypes.util.find_library("qgen"), then "libqgen.so.0".
"""
import ctypes
import ctypes.util
import glob
import os

# qgen_status, in the enum's order.
STATUS_NAMES = (
    "QGEN_OK", "QGEN_ERR_INVALID_ARG", "QGEN_ERR_CAPACITY", "QGEN_ERR_SPEC", "QGEN_ERR_COMPILE",
    "QGEN_ERR_NO_DRIVER", "QGEN_ERR_NO_DEVICE", "QGEN_ERR_UNSUPPORTED", "QGEN_ERR_OUT_OF_MEMORY",
    "QGEN_ERR_CUDA", "QGEN_ERR_BUNDLE", "QGEN_ERR_IO",
)
INVALID_ARG = 1
CUDA = STATUS_NAMES.index("QGEN_ERR_CUDA")
SPEC = STATUS_NAMES.index("QGEN_ERR_SPEC")
NO_DRIVER = STATUS_NAMES.index("QGEN_ERR_NO_DRIVER")
BACKENDS = {"gpu": 0, "cpu": 1}
ATTEND_DENSE, ATTEND_SPARSE, ATTEND_REUSE = 0, 1, 2
KV_ARRAYS = {"k": 0, "v": 1, "bounds": 2, "page_table": 3, "seq_len": 4}


class Error(Exception):
    """A qgen failure: .status (the qgen_status number), .name (e.g. "QGEN_ERR_CAPACITY")
    and .message (qgen_error's text, or what the Python check found).

    Every error qgen raises is an instance of a subclass chosen by its status, which also
    derives from the standard exception a Python caller expects (see ERROR_CLASSES):
    ValueError for a bad argument, TypeError for an argument of the wrong type,
    FileNotFoundError for a spec file that is not there, MemoryError when memory ran out,
    RuntimeError for the driver, the device and CUDA. `except qgen.Error` catches them all."""

    def __init__(self, status, message):
        self.status = int(status)
        self.name = STATUS_NAMES[self.status] if 0 <= self.status < len(STATUS_NAMES) else f"status {status}"
        self.message = message
        super().__init__(self.status, message)
        if isinstance(self, OSError):  # OSError took the status for an errno; it is none
            self.errno = self.strerror = None

    def __str__(self):
        return f"{self.name}: {self.message}"


class InvalidArgumentError(Error, ValueError):
    """QGEN_ERR_INVALID_ARG: an argument with a bad value (out of range, wrong shape ...)."""


class ArgumentTypeError(Error, TypeError):
    """QGEN_ERR_INVALID_ARG for an argument of the wrong type (a list for an array, a float
    for an integer, an object that is neither a NumPy array nor a torch tensor)."""


class CapacityError(Error, ValueError):
    """QGEN_ERR_CAPACITY: tokens past a sequence's max_tokens."""


class SpecError(Error, ValueError):
    """QGEN_ERR_SPEC: the spec did not load or validate."""


class SpecNotFoundError(SpecError, FileNotFoundError):
    """QGEN_ERR_SPEC for a spec path where there is no file (.filename is the path)."""


class CompileError(Error, RuntimeError):
    """QGEN_ERR_COMPILE: NVRTC is missing or failed."""


class NoDriverError(Error, RuntimeError):
    """QGEN_ERR_NO_DRIVER: the CUDA driver (libcuda.so.1) could not be loaded."""


class NoDeviceError(Error, RuntimeError):
    """QGEN_ERR_NO_DEVICE: no such CUDA device."""


class UnsupportedError(Error, NotImplementedError):
    """QGEN_ERR_UNSUPPORTED: the device, the bundle or the request is not supported (a
    NotImplementedError, hence a RuntimeError)."""


class OutOfMemoryError(Error, MemoryError):
    """QGEN_ERR_OUT_OF_MEMORY: host or device memory ran out."""


class CudaError(Error, RuntimeError):
    """QGEN_ERR_CUDA: a CUDA driver call failed."""


class BundleError(Error, ValueError):
    """QGEN_ERR_BUNDLE: a malformed bundle file."""


class FileError(Error, OSError):
    """QGEN_ERR_IO: reading or writing a file failed."""


class InternalError(Error, RuntimeError):
    """A status this binding does not know (a newer library)."""


for _cls in (Error, InvalidArgumentError, ArgumentTypeError, CapacityError, SpecError, SpecNotFoundError, CompileError,
             NoDriverError, NoDeviceError, UnsupportedError, OutOfMemoryError, CudaError, BundleError, FileError,
             InternalError):
    _cls.__module__ = "qgen"  # tracebacks and pickles name them as the package exports them

ERROR_CLASSES = dict(zip(STATUS_NAMES[1:], (
    InvalidArgumentError, CapacityError, SpecError, CompileError, NoDriverError, NoDeviceError, UnsupportedError,
    OutOfMemoryError, CudaError, BundleError, FileError)))


def error(status, message):
    """The qgen.Error subclass of status, with message."""
    status = int(status)
    name = STATUS_NAMES[status] if 0 < status < len(STATUS_NAMES) else None
    return ERROR_CLASSES.get(name, InternalError)(status, message)


def invalid(message):
    """A bad argument value (a ValueError)."""
    return InvalidArgumentError(INVALID_ARG, message)


def wrong_type(message):
    """An argument of the wrong type (a TypeError)."""
    return ArgumentTypeError(INVALID_ARG, message)


class OpenOpts(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("device", ctypes.c_int),
                ("variant", ctypes.c_char_p), ("cache_dir", ctypes.c_char_p)]


class Info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("k_type", ctypes.c_char_p), ("v_type", ctypes.c_char_p),
                ("in_type", ctypes.c_char_p), ("out_type", ctypes.c_char_p),
                ("head_dim", ctypes.c_int), ("n_head", ctypes.c_int), ("n_head_kv", ctypes.c_int),
                ("group", ctypes.c_int), ("block", ctypes.c_int), ("sparse", ctypes.c_int),
                ("scale", ctypes.c_double), ("coverage", ctypes.c_double),
                ("budget", ctypes.c_longlong), ("sink", ctypes.c_longlong), ("recent", ctypes.c_longlong),
                ("k_row_bytes", ctypes.c_size_t), ("v_row_bytes", ctypes.c_size_t),
                ("backend", ctypes.c_int), ("arch", ctypes.c_int), ("sm_count", ctypes.c_int),
                ("device_name", ctypes.c_char * 128), ("from_ptx", ctypes.c_int),
                ("open_ms", ctypes.c_double), ("cache_hit", ctypes.c_int), ("plan_arch", ctypes.c_int),
                ("max_step_tokens", ctypes.c_int)]


class AttendOpts(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("coverage", ctypes.c_double), ("budget", ctypes.c_longlong),
                ("sink", ctypes.c_longlong), ("recent", ctypes.c_longlong), ("window", ctypes.c_longlong),
                ("sinks", ctypes.c_ulonglong)]


class ViewDesc(ctypes.Structure):
    _fields_ = [("k", ctypes.c_ulonglong), ("v", ctypes.c_ulonglong), ("page_size", ctypes.c_int),
                ("n_pages", ctypes.c_longlong),
                ("k_page_stride", ctypes.c_longlong), ("k_token_stride", ctypes.c_longlong),
                ("k_head_stride", ctypes.c_longlong),
                ("v_page_stride", ctypes.c_longlong), ("v_token_stride", ctypes.c_longlong),
                ("v_head_stride", ctypes.c_longlong),
                ("block_table", ctypes.c_ulonglong), ("block_table_stride", ctypes.c_longlong),
                ("seq_lens", ctypes.c_ulonglong), ("max_seqs", ctypes.c_int), ("max_blocks", ctypes.c_longlong)]


_P, _I, _LL, _SZ, _U64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_size_t, ctypes.c_ulonglong
_IP = ctypes.POINTER(ctypes.c_int)
_PROTOTYPES = {
    "qgen_open": (_I, [ctypes.POINTER(_P), ctypes.c_char_p, ctypes.POINTER(OpenOpts)]),
    "qgen_open_text": (_I, [ctypes.POINTER(_P), ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(OpenOpts)]),
    "qgen_close": (None, [_P]),
    "qgen_error": (ctypes.c_char_p, [_P]),
    "qgen_status_str": (ctypes.c_char_p, [_I]),
    "qgen_get_info": (None, [_P, ctypes.POINTER(Info)]),
    "qgen_cache_create": (_I, [_P, ctypes.POINTER(_P), _I, _LL]),
    "qgen_cache_destroy": (None, [_P]),
    "qgen_cache_set_scales": (_I, [_P, ctypes.c_float, ctypes.c_float]),
    "qgen_append": (_I, [_P, _IP, _I, _IP, _U64, _U64, _P]),
    "qgen_append_decode": (_I, [_P, _IP, _I, _U64, _U64, _P]),
    "qgen_sync": (_I, [_P]),
    "qgen_reset": (_I, [_P, _I]),
    "qgen_rollback": (_I, [_P, _I, _LL]),
    "qgen_share_prefix": (_I, [_P, _I, _I, _LL]),
    "qgen_seq_len": (_LL, [_P, _I]),
    "qgen_attend_defaults": (AttendOpts, [_P]),
    "qgen_attend": (_I, [_P, _IP, _I, _U64, _U64, ctypes.POINTER(AttendOpts), _P]),
    "qgen_attend_multi": (_I, [_P, _IP, _I, _IP, _U64, _U64, ctypes.POINTER(AttendOpts), _P]),
    "qgen_view_open": (_I, [_P, ctypes.POINTER(ViewDesc), ctypes.POINTER(_P)]),
    "qgen_view_update": (_I, [_P, _U64, _LL, _I, _P]),
    "qgen_kv_size": (_SZ, [_P, _I]),
    "qgen_kv_read": (_I, [_P, _I, _P, _SZ]),
    "qgen_kv_selection": (_I, [_P, _I, _IP, _IP]),
    "qgen_kv_pages_per_seq": (_LL, [_P]),
    "qgen_kv_n_pages": (_LL, [_P]),
}

_lib = None


def library_path():
    """The file libqgen would be loaded from (a name for the system loader as the last resort)."""
    env = os.environ.get("QGEN_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise OSError(f"QGEN_LIBRARY={env}: no such file")
        return env
    here = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libqgen.so*")))
    if here:
        return here[0]
    return ctypes.util.find_library("qgen") or "libqgen.so.0"


def lib():
    """The loaded library (loaded and bound on the first call)."""
    global _lib
    if _lib is None:
        path = library_path()
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            raise OSError(f"cannot load libqgen ({path}): {e}; build it (cmake --build build) and set "
                          "QGEN_LIBRARY=build/libqgen.so, or install it") from None
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(handle, name)
            fn.restype, fn.argtypes = restype, argtypes
        _lib = handle
    return _lib
