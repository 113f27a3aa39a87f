"""_api.py — qgen.Context and qgen.Cache over libqgen, and the spec text made from
keyword fields.

Tensors are NumPy arrays (or CPU torch tensors) on the CPU backend and torch CUDA tensors
on the GPU backend, C-contiguous, in the spec's in_type (q, k, v) and out_type (out): f32,
f16, or bf16 (torch.bfloat16; NumPy has no bf16, so give its bits as uint16). Every
argument that Python can check cheaply is checked before the C call, which checks the rest;
a call that raises leaves the cache as it was.
"""
import ctypes
import math
import re
import weakref

from ._lib import ATTEND_DENSE, ATTEND_REUSE, ATTEND_SPARSE, BACKENDS, CUDA, KV_ARRAYS, AttendOpts, Error, Info, OpenOpts, invalid, lib

# KV cache types may also be named by their torch dtype or vLLM's kv_cache_dtype spelling;
# an fp8 cache's bytes are the codes a torch.float8_e4m3fn / float8_e5m2 tensor holds.
_KV_TYPE_NAMES = {"torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float8_e4m3fn": "e4m3",
                  "torch.float8_e5m2": "e5m2", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "fp8": "e4m3",
                  "fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2"}
_NUMPY_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "uint16"}
_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def _torch():
    import torch  # optional: only tensors that are torch tensors bring it in

    return torch


def _is_torch(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def _lua(value, where):
    """Lua source for a Python value of a spec field."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "(0/0)"
        if math.isinf(value):
            return "math.huge" if value > 0 else "-math.huge"
        return repr(value)
    if isinstance(value, str):  # printable ASCII as is, every other byte (UTF-8) as \ddd
        return '"' + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else "\\%03d" % b
                             for b in value.encode()) + '"'
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise invalid(f"{where}: key {k!r} is not a string")
            key = k if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) else "[" + _lua(k, where) + "]"
            parts.append(f"{key} = {_lua(v, f'{where}.{k}')}")
        return "{ " + ", ".join(parts) + " }"
    if isinstance(value, (list, tuple)):
        return "{ " + ", ".join(_lua(v, f"{where}[{i + 1}]") for i, v in enumerate(value)) + " }"
    raise invalid(f"{where}: {type(value).__name__} {value!r} has no Lua spelling (use bool, int, float, str, dict, list)")


def kv_type(t):
    """qgen's name of a KV cache type given by that name, a torch dtype (torch.float8_e4m3fn:
    "e4m3") or vLLM's kv_cache_dtype ("fp8", "fp8_e4m3", "fp8_e5m2"); other values as given."""
    return _KV_TYPE_NAMES.get(str(t), t)


def spec_text(**fields):
    """The Lua spec `return spec{ ... }` of these fields (name defaults to "python"; k_type
    and v_type may be spelt as kv_type() takes them)."""
    fields.setdefault("name", "python")
    for f in ("k_type", "v_type"):
        if f in fields:
            fields[f] = kv_type(fields[f])
    return "return spec" + _lua(fields, "spec") + "\n"


def _int(x, what):
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise invalid(f"{what} = {x!r} is not an integer")
    return x.__index__()


def _tokens(x, what, low):
    """A token count for a long long field: ctypes would wrap a value past 2^63 silently."""
    n = _int(x, what)
    if not low <= n < 2**63:
        raise invalid(f"{what} = {n} must be {'> 0' if low else '>= 0'} tokens and below 2^63")
    return n


def _rows(x, fn, name, rows, dims):
    """The leading size of x, which must be a 3-d array or tensor [rows, *dims] (the rest of
    its checks are Cache._tensor's, once the row count is known)."""
    if not hasattr(x, "shape"):
        raise invalid(f"{fn}: {name} must be a NumPy array or a torch tensor, got {type(x).__name__}")
    if len(x.shape) != 3:
        raise invalid(f"{fn}: {name} must be [{rows}, {dims[0]}, {dims[1]}], got shape {list(x.shape)}")
    return x.shape[0]


class _Handle:
    """A libqgen object: closed by close(), at the end of a with block, or when collected."""

    def _owner_alive(self):
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_ptr", None) and self._owner_alive():
            self.close()


class Context(_Handle):
    """An opened spec: a spec file or bundle path, Lua spec text (text=), or spec fields
    as keywords (head_dim=128, n_head=32, n_head_kv=8, k_type="q4_0", sparse={...})."""

    def __init__(self, spec=None, *, text=None, variant=None, backend="gpu", device=0, cache_dir=None, **fields):
        self._ptr = None
        self._caches = weakref.WeakSet()
        given = [n for n, x in (("spec", spec), ("text", text), ("fields", fields or None)) if x is not None]
        if len(given) != 1:
            raise invalid("give exactly one of a spec path, text=, or spec fields as keywords"
                          + (f" (got {', '.join(given)})" if given else ""))
        if backend not in BACKENDS:
            raise invalid(f"backend = {backend!r}; allowed: 'gpu' or 'cpu'")
        self.backend, self.device = backend, _int(device, "device")
        L = lib()
        opts = OpenOpts(BACKENDS[backend], self.device, variant.encode() if variant else None,
                        str(cache_dir).encode() if cache_dir is not None else None)
        ptr = ctypes.c_void_p()
        if spec is not None:
            st = L.qgen_open(ctypes.byref(ptr), str(spec).encode(), ctypes.byref(opts))
        else:
            source = text if text is not None else spec_text(**fields)
            st = L.qgen_open_text(ctypes.byref(ptr), source.encode(), b"text" if text is not None else b"fields",
                                  ctypes.byref(opts))
        if st != 0:
            message = L.qgen_error(ptr).decode(errors="replace") if ptr else L.qgen_status_str(st).decode()
            L.qgen_close(ptr)
            raise Error(st, message)
        self._ptr = ptr
        info = Info()
        L.qgen_get_info(ptr, ctypes.byref(info))
        self.info = {name: getattr(info, name) for name, _ in Info._fields_}
        for k, v in self.info.items():
            if isinstance(v, bytes):
                self.info[k] = v.decode()
        self.info["backend"] = "cpu" if info.backend == BACKENDS["cpu"] else "gpu"

    def _check(self, st):
        if st != 0:
            raise Error(st, lib().qgen_error(self._ptr).decode(errors="replace"))

    def _live(self):
        if not self._ptr:
            raise invalid("the context is closed")
        return self._ptr

    def cache(self, max_seqs, max_tokens, k_scale=1.0, v_scale=1.0):
        """A KV cache of max_seqs sequences of up to max_tokens tokens each (the scales: see
        Cache.set_scales)."""
        kv = Cache(self, max_seqs, max_tokens)
        if k_scale != 1.0 or v_scale != 1.0:
            kv.set_scales(k_scale, v_scale)
        return kv

    def close(self):
        """Close the context and every cache made from it."""
        for c in list(self._caches):
            c.close()
        if self._ptr:
            lib().qgen_close(self._ptr)
            self._ptr = None

    def __repr__(self):
        i = self.info if self._ptr else {}
        return f"qgen.Context({i.get('name', 'closed')!r}, backend={self.backend!r})"


class Cache(_Handle):
    """One layer's paged KV cache (qgen_kv)."""

    def __init__(self, ctx, max_seqs, max_tokens):
        self._ptr = None
        self.ctx = ctx
        self.max_seqs = _int(max_seqs, "max_seqs")
        self.max_tokens = _int(max_tokens, "max_tokens")
        ptr = ctypes.c_void_p()
        ctx._check(lib().qgen_cache_create(ctx._live(), ctypes.byref(ptr), self.max_seqs, self.max_tokens))
        self._ptr = ptr
        ctx._caches.add(self)
        i = ctx.info
        self._kv_shape = (i["n_head_kv"], i["head_dim"])
        self._q_shape = (i["n_head"], i["head_dim"])
        self.pages_per_seq = lib().qgen_kv_pages_per_seq(ptr)
        self.n_pages = lib().qgen_kv_n_pages(ptr)

    # ---- arguments -------------------------------------------------------------------

    def _live(self):
        if not self._ptr:
            raise invalid("the cache is closed")
        return self._ptr

    def _seqs(self, seqs, default, fn):
        if seqs is None:
            seqs = default
        elif hasattr(seqs, "tolist"):
            seqs = seqs.tolist()
        elif not isinstance(seqs, (list, tuple)):
            seqs = [seqs]
        out = []
        for i, s in enumerate(seqs):
            s = _int(s, f"{fn}: seqs[{i}]")
            if not 0 <= s < self.max_seqs:
                raise invalid(f"{fn}: seqs[{i}] = {s} is outside [0, {self.max_seqs})")
            if s in out:
                raise invalid(f"{fn}: sequence {s} is listed twice")
            out.append(s)
        return out

    def _tensor(self, x, fn, name, shape, type_name, writable=False):
        """The address of tensor x after checking its kind, device, dtype, shape and layout."""
        want_shape = "[" + ", ".join(map(str, shape)) + "]"
        if self.ctx.backend == "gpu":
            if not _is_torch(x) or not x.is_cuda:
                raise invalid(f"{fn}: {name} must be a torch CUDA tensor on the GPU backend, got {type(x).__name__}"
                              + (f" on {x.device}" if _is_torch(x) else ""))
            if x.device.index != self.ctx.device:
                raise invalid(f"{fn}: {name} is on {x.device}; the context is on cuda:{self.ctx.device}")
        if _is_torch(x):
            if self.ctx.backend == "cpu" and x.device.type != "cpu":
                raise invalid(f"{fn}: {name} is on {x.device}; the CPU backend takes host arrays")
            dtype, want = str(x.dtype).replace("torch.", ""), _TORCH_DTYPES[type_name]
            contiguous, ptr, ok_write = x.is_contiguous(), x.data_ptr(), True
        elif hasattr(x, "__array_interface__") and hasattr(x, "dtype"):
            dtype, want = str(x.dtype), _NUMPY_DTYPES[type_name]
            contiguous, ptr = x.flags["C_CONTIGUOUS"], x.__array_interface__["data"][0]
            ok_write = x.flags["WRITEABLE"]
        else:
            raise invalid(f"{fn}: {name} must be a NumPy array or a torch tensor, got {type(x).__name__}")
        if dtype != want:
            raise invalid(f"{fn}: {name} has dtype {dtype}; the spec's {'out' if writable else 'in'}_type "
                          f"{type_name} needs {want}")
        if tuple(x.shape) != tuple(shape):
            raise invalid(f"{fn}: {name} has shape {list(x.shape)}, expected {want_shape}")
        if not contiguous:
            raise invalid(f"{fn}: {name} is not contiguous (C order)")
        if writable and not ok_write:
            raise invalid(f"{fn}: {name} is read-only")
        return ptr

    def _stream(self, stream):
        if self.ctx.backend == "cpu":
            return None
        if stream is None:
            torch = _torch()
            return torch.cuda.current_stream(self.ctx.device).cuda_stream
        return getattr(stream, "cuda_stream", stream)

    # ---- the decode path -------------------------------------------------------------

    def append(self, k, v, seqs=None, n_new=None, stream=None):
        """Append the rows of k, v ([tokens, n_head_kv, head_dim]): n_new[i] rows to seqs[i],
        in order. seqs defaults to [0]; n_new to the tokens split equally over seqs."""
        kv = self._live()
        seqs = self._seqs(seqs, [0], "append")
        tokens = _rows(k, "append", "k", "tokens", self._kv_shape)
        if n_new is None:
            if not seqs or tokens % len(seqs):
                raise invalid(f"append: {tokens} tokens do not split equally over {len(seqs)} sequences; give n_new")
            n_new = [tokens // len(seqs)] * len(seqs)
        else:
            n_new = [_int(n, f"append: n_new[{i}]") for i, n in enumerate(n_new.tolist() if hasattr(n_new, "tolist") else n_new)]
        if len(n_new) != len(seqs):
            raise invalid(f"append: n_new has {len(n_new)} entries for {len(seqs)} sequences")
        for i, n in enumerate(n_new):
            if n < 0:
                raise invalid(f"append: n_new[{i}] = {n} is negative")
        if sum(n_new) != tokens:
            raise invalid(f"append: n_new sums to {sum(n_new)} but k and v hold {tokens} tokens")
        shape = (tokens,) + self._kv_shape
        in_type = self.ctx.info["in_type"]
        kp = self._tensor(k, "append", "k", shape, in_type)
        vp = self._tensor(v, "append", "v", shape, in_type)
        n = len(seqs)
        self.ctx._check(lib().qgen_append(kv, (ctypes.c_int * n)(*seqs), n, (ctypes.c_int * n)(*n_new), kp, vp,
                                          self._stream(stream)))

    def append_decode(self, k, v, seqs=None, stream=None):
        """One token per sequence (k, v: [n_seq, n_head_kv, head_dim], row i for seqs[i],
        default 0..n_seq-1), written at the length the device holds when it runs: a CUDA
        graph captured from append_decode + attend replays as consecutive decode steps
        (refill the captured k, v, q before each replay). A full sequence's token is
        dropped; sync() reports it. Once used, the lengths live on the device: seq_len(),
        append(), sync() wait for it (never call them while capturing)."""
        kv = self._live()
        n = _rows(k, "append_decode", "k", "n_seq", self._kv_shape)
        seqs = self._seqs(seqs, list(range(n)), "append_decode")
        if len(seqs) != n:
            raise invalid(f"append_decode: k has {n} rows for {len(seqs)} sequences")
        shape = (n,) + self._kv_shape
        in_type = self.ctx.info["in_type"]
        kp = self._tensor(k, "append_decode", "k", shape, in_type)
        vp = self._tensor(v, "append_decode", "v", shape, in_type)
        self.ctx._check(lib().qgen_append_decode(kv, (ctypes.c_int * n)(*seqs), n, kp, vp, self._stream(stream)))

    def sync(self):
        """Wait for the device and read back the lengths after append_decode; raises
        QGEN_ERR_CAPACITY (once) if it dropped tokens of full sequences."""
        self.ctx._check(lib().qgen_sync(self._live()))

    def attend(self, q, seqs=None, out=None, coverage=None, budget=None, dense=False, sink=None, recent=None,
               stream=None, reuse=False):
        """One decode step: q [n_seq, n_head, head_dim], one row per sequence of seqs
        (default 0..n_seq-1); returns out (allocated when not given). Sparse with the spec's
        budget by default (a sparse spec), dense=True for dense, or coverage= / budget= (tokens)
        for another budget; sink= and recent= override the spec's. reuse=True attends each
        sequence over its last sparse selection extended to its current length, selecting
        nothing (QGEN_ATTEND_REUSE: a sparse attend since the sequence's last reset first)."""
        kv = self._live()
        n = _rows(q, "attend", "q", "n_seq", self._q_shape)
        seqs = self._seqs(seqs, list(range(n)), "attend")
        if len(seqs) != n:
            raise invalid(f"attend: q has {n} rows for {len(seqs)} sequences")
        opts = self._opts(coverage, budget, dense, sink, recent, reuse)
        shape = (n,) + self._q_shape
        qp = self._tensor(q, "attend", "q", shape, self.ctx.info["in_type"])
        out_type = self.ctx.info["out_type"]
        if out is None:
            if _is_torch(q):
                torch = _torch()
                out = torch.empty(shape, dtype=getattr(torch, _TORCH_DTYPES[out_type]), device=q.device)
            else:
                import numpy as np

                out = np.empty(shape, dtype=_NUMPY_DTYPES[out_type])
        op = self._tensor(out, "attend", "out", shape, out_type, writable=True)
        self.ctx._check(lib().qgen_attend(kv, (ctypes.c_int * n)(*seqs), n, qp, op, ctypes.byref(opts),
                                          self._stream(stream)))
        return out

    def _opts(self, coverage, budget, dense, sink, recent, reuse=False):
        """The qgen_attend_opts of attend's keywords."""
        opts = lib().qgen_attend_defaults(self.ctx._ptr)
        if reuse:
            if dense or any(x is not None for x in (coverage, budget, sink, recent)):
                raise invalid("attend: reuse=True takes no dense, coverage, budget, sink or recent (it selects nothing)")
            opts.mode = ATTEND_REUSE
            return opts
        if coverage is not None and budget is not None:
            raise invalid("attend: give coverage or budget, not both")
        if dense and (coverage is not None or budget is not None):
            raise invalid("attend: dense=True takes no coverage or budget")
        if dense:
            opts.mode = ATTEND_DENSE
        elif coverage is not None or budget is not None:
            opts.mode = ATTEND_SPARSE
            cov = float(coverage) if coverage is not None else 0.0  # one of the two (qgen.h)
            if coverage is not None and not 0.0 < cov <= 1.0:
                raise invalid(f"attend: coverage = {cov:g} must be in (0, 1]")
            opts.coverage = cov
            opts.budget = _tokens(budget, "attend: budget", 1) if budget is not None else 0
        if sink is not None:
            opts.sink = _tokens(sink, "attend: sink", 0)
        if recent is not None:
            opts.recent = _tokens(recent, "attend: recent", 0)
        return opts

    def set_scales(self, k_scale=1.0, v_scale=1.0):
        """The per-tensor scales of an fp8 cache (vLLM's per-layer k_scale / v_scale; floats or
        one-element tensors): appends store fp8(x / scale), attend reads fp8 * scale. Other
        cache types take only 1."""
        self.ctx._check(lib().qgen_cache_set_scales(self._live(), float(k_scale), float(v_scale)))

    def reset(self, seq):
        """Forget sequence seq's tokens."""
        self.ctx._check(lib().qgen_reset(self._live(), self._seqs(seq, None, "reset")[0]))

    def seq_len(self, seq):
        """Tokens held by sequence seq."""
        n = lib().qgen_seq_len(self._live(), self._seqs(seq, None, "seq_len")[0])
        if n < 0:  # a valid id: the device lengths could not be read
            raise Error(CUDA, lib().qgen_error(self.ctx._ptr).decode(errors="replace"))
        return n

    # ---- introspection (synchronous) -------------------------------------------------

    def selection(self, seq):
        """The last sparse attend's pages of sequence seq: (lists [n_head_kv, pages_per_seq],
        counts [n_head_kv]), int32 NumPy arrays; lists[h, :counts[h]] are the pages."""
        import numpy as np

        s = self._seqs(seq, None, "selection")[0]
        lists = np.zeros((self._kv_shape[0], self.pages_per_seq), dtype=np.int32)
        counts = np.zeros(self._kv_shape[0], dtype=np.int32)
        ip = ctypes.POINTER(ctypes.c_int)
        self.ctx._check(lib().qgen_kv_selection(self._live(), s, lists.ctypes.data_as(ip), counts.ctypes.data_as(ip)))
        return lists, counts

    def read(self, which):
        """A copy of one of the cache's arrays as bytes (a uint8 NumPy array): "k", "v",
        "bounds", "page_table" or "seq_len" (qgen.h describes their layouts)."""
        import numpy as np

        if which not in KV_ARRAYS:
            raise invalid(f"read: {which!r} is not one of {', '.join(KV_ARRAYS)}")
        kv = self._live()
        n = lib().qgen_kv_size(kv, KV_ARRAYS[which])
        buf = np.zeros(n, dtype=np.uint8)
        self.ctx._check(lib().qgen_kv_read(kv, KV_ARRAYS[which], buf.ctypes.data if n else None, n))
        return buf

    def close(self):
        if self._ptr:
            lib().qgen_cache_destroy(self._ptr)
            self._ptr = None

    def _owner_alive(self):
        return bool(self.ctx._ptr)  # a closed context has destroyed its caches already
