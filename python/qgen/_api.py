"""_api.py — qgen.Context and qgen.Cache over libqgen, and the spec text made from
keyword fields.

Tensors are NumPy arrays (or CPU torch tensors) on the CPU backend and torch CUDA tensors
on the GPU backend, C-contiguous, in the spec's in_type (q, k, v) and out_type (out): f32,
f16, or bf16 (torch.bfloat16; NumPy has no bf16, so give its bits as uint16). Nothing else
is taken for a tensor: an object that only looks like an array (its own
__array_interface__, a shape attribute) is refused, since qgen would read and write
whatever address it named. Every argument that Python can check cheaply is checked before
the C call, which checks the rest; a call that raises leaves the cache as it was. Integers
are range-checked for the C type they are passed as (ctypes would silently wrap them), and
strings with a NUL byte are refused (C would read only the part before it).

Lifetime and threads: a Context and each Cache (or View) own a libqgen handle. The context
owns its caches' handles too: closing the context (or collecting it) destroys every cache
made from it first, in whichever order the collector finalises them, and a cache closed
first takes itself off its context. The objects cannot be copied or pickled (two Python
objects would close one handle twice). Calls on one cache are serialised by the cache's
lock, since libqgen forbids concurrent calls on one qgen_kv; different caches run in
parallel (ctypes releases the GIL during the call).
"""
import ctypes
import math
import numbers
import operator
import os
import re
import threading

from ._args import (NUMPY_DTYPES, TORCH_DTYPES, addr, as_int, cstr, disjoint, fits, is_ndarray, is_torch,
                    leading_rows, mem_of, new_out, real, token_count, torch_module)
from ._lib import (ATTEND_DENSE, ATTEND_REUSE, ATTEND_SPARSE, BACKENDS, CUDA, KV_ARRAYS, NO_DRIVER, SPEC,
                   AttendOpts, Info, OpenOpts, SpecNotFoundError, error, invalid, lib, wrong_type)

# KV cache types may also be named by their torch dtype or vLLM's kv_cache_dtype spelling;
# an fp8 cache's bytes are the codes a torch.float8_e4m3fn / float8_e5m2 tensor holds.
_KV_TYPE_NAMES = {"torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float8_e4m3fn": "e4m3",
                  "torch.float8_e5m2": "e5m2", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "fp8": "e4m3",
                  "fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2"}


# ---- the spec from keyword fields ------------------------------------------------------

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
                             for b in value.encode(errors="surrogateescape")) + '"'
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise wrong_type(f"{where}: key {k!r} is not a string")
            key = k if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) else "[" + _lua(k, where) + "]"
            parts.append(f"{key} = {_lua(v, f'{where}.{k}')}")
        return "{ " + ", ".join(parts) + " }"
    if isinstance(value, (list, tuple)):
        return "{ " + ", ".join(_lua(v, f"{where}[{i + 1}]") for i, v in enumerate(value)) + " }"
    if hasattr(value, "__index__") and getattr(value, "shape", ()) == ():
        try:  # a NumPy or torch integer scalar: its value
            return str(operator.index(value))
        except (TypeError, ValueError):
            pass
    if isinstance(value, numbers.Real) and getattr(value, "shape", ()) == ():
        return _lua(float(value), where)  # a NumPy float scalar
    raise wrong_type(f"{where}: {type(value).__name__} {value!r} has no Lua spelling (use bool, int, float, str, dict, list)")


def kv_type(t):
    """qgen's name of a KV cache type given by that name, a torch dtype (torch.float8_e4m3fn:
    "e4m3") or vLLM's kv_cache_dtype ("fp8", "fp8_e4m3", "fp8_e5m2"); other values as given."""
    return _KV_TYPE_NAMES.get(str(t), t)


def _shape_name(fields):
    """The name of a spec given as keywords without one, after its shape: d128-h32-kv8-f16
    (head_dim, n_head, n_head_kv, k_type, and v_type when it differs). Only plain values
    go into it, so that a bad field is reported as itself, never as a bad name."""
    parts = []
    for field, tag in (("head_dim", "d"), ("n_head", "h"), ("n_head_kv", "kv")):
        v = fields.get(field)
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        elif hasattr(v, "__index__") and not isinstance(v, bool) and getattr(v, "shape", ()) == ():
            v = operator.index(v)  # a NumPy integer
        if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 10**6:
            parts.append(f"{tag}{v}")
    k = kv_type(fields.get("k_type", "f16"))
    v = kv_type(fields.get("v_type", k))
    for t in (k,) if v == k else (k, v):
        if isinstance(t, str) and re.fullmatch(r"[A-Za-z0-9_]{1,8}", t):
            parts.append(t)
    return "-".join(parts) if parts and parts[0][0] == "d" else "spec-" + "-".join(parts) if parts else "spec"


def spec_text(**fields):
    """The Lua spec `return spec{ ... }` of these fields (name defaults to one after the
    spec's shape, e.g. "d128-h32-kv8-f16"; k_type and v_type may be spelt as kv_type()
    takes them)."""
    for f in ("k_type", "v_type"):
        if f in fields:
            fields[f] = kv_type(fields[f])
    fields = {"name": _shape_name(fields), **fields}
    return "return spec" + _lua(fields, "spec") + "\n"


# ---- objects that own a libqgen handle -------------------------------------------------

class _Owner:
    """A Python object owning a libqgen handle: closed by close(), at the end of a with
    block, or when collected; never copied or pickled, since the copy would close the same
    handle again (copy.copy(kv), then kv.close(), then the copy's append read freed memory)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _no_copy(self, how):
        kind = type(self).__name__
        return wrong_type(f"a qgen.{kind} cannot be {how}: it owns a libqgen handle, which the copy would close a "
                          f"second time; make another {kind} instead")

    def __copy__(self):
        raise self._no_copy("copied")

    def __deepcopy__(self, memo):
        raise self._no_copy("copied")

    def __reduce_ex__(self, protocol):
        raise self._no_copy("pickled")


class _KvHandle:
    """The qgen_kv of a Cache or View, shared by that object and its Context, so that
    whichever is closed or collected first destroys it (a context and its cache in a
    reference cycle are finalised in either order; the context used to close first, find
    its weak references already cleared, and leak the cache). lock serialises the calls
    on the qgen_kv; ctx is the context's pointer, valid while ptr is (the context destroys
    every handle before it closes), for qgen_error."""

    __slots__ = ("ptr", "ctx", "lock", "why", "kind")

    def __init__(self, ptr, ctx, kind):
        self.ptr, self.ctx, self.kind, self.why = ptr, ctx, kind, ""
        self.lock = threading.Lock()

    def live(self, fn):
        """The pointer (the caller holds lock), or the error of a closed cache."""
        if not self.ptr:
            raise invalid(f"{fn}: the {self.kind} is closed{self.why}")
        return self.ptr

    def check(self, st):
        """Raise the failure of the call just made on this thread (the caller holds lock)."""
        if st != 0:
            raise error(st, lib().qgen_error(self.ctx).decode(errors="replace"))

    def destroy(self, why=""):
        with self.lock:  # waits for a call in flight on another thread
            if self.ptr:
                lib().qgen_cache_destroy(self.ptr)
                self.ptr, self.why = None, why


class Context(_Owner):
    """An opened spec: a spec file or bundle path, Lua spec text (text=), or spec fields
    as keywords (head_dim=128, n_head=32, n_head_kv=8, k_type="q4_0", sparse={...}).

    May be shared by threads: caches can be made and used from several threads at once.
    close() (or collection) closes every cache and view made from it, first waiting for
    calls in flight on them."""

    def __init__(self, spec=None, *, text=None, variant=None, backend="gpu", device=0, cache_dir=None, **fields):
        self._ptr = None
        self._lock = threading.RLock()  # the set of handles, opening and closing
        self._kvs = set()  # the _KvHandle of every open cache and view
        self.info = {}
        given = [n for n, x in (("spec", spec), ("text", text), ("fields", fields or None)) if x is not None]
        if len(given) != 1:
            raise invalid("give exactly one of a spec path, text=, or spec fields as keywords"
                          + (f" (got {', '.join(given)})" if given else ""))
        if not isinstance(backend, str):
            raise wrong_type(f"backend = {backend!r} is not a string; allowed: 'gpu' or 'cpu'")
        if backend not in BACKENDS:
            raise invalid(f"backend = {backend!r}; allowed: 'gpu' or 'cpu'")
        self.backend, self.device = backend, fits(device, "device", 32, low=0)
        opts = OpenOpts(BACKENDS[backend], self.device, cstr(variant, "variant") if variant else None,
                        cstr(cache_dir, "cache_dir", path=True) if cache_dir is not None else None)
        path = cstr(spec, "the spec path", path=True) if spec is not None else None
        if text is not None:
            source = cstr(text, "text")
        elif fields:
            source = cstr(spec_text(**fields), "the spec fields")
        L = lib()
        ptr = ctypes.c_void_p()
        if path is not None:
            st = L.qgen_open(ctypes.byref(ptr), path, ctypes.byref(opts))
        else:
            st = L.qgen_open_text(ctypes.byref(ptr), source, b"text" if text is not None else b"fields",
                                  ctypes.byref(opts))
        if st != 0:
            message = L.qgen_error(ptr).decode(errors="replace") if ptr else L.qgen_status_str(st).decode()
            L.qgen_close(ptr)
            if text is None and path is None:
                # the chunk is one generated line: its "fields:1:" says nothing to the caller
                message = re.sub(r"^fields(:\d+)?: ", "", message)
            if st == NO_DRIVER and backend == "gpu":
                message += '; without a CUDA GPU use the CPU reference backend: qgen.Context(..., backend="cpu")'
            if st == SPEC and path is not None and not os.path.exists(path):
                e = SpecNotFoundError(st, message)
                e.filename = os.fsdecode(path)
                raise e
            raise error(st, message)
        self._ptr = ptr.value
        info = Info()
        L.qgen_get_info(ptr, ctypes.byref(info))
        i = {name: getattr(info, name) for name, _ in Info._fields_}
        for k, v in i.items():
            if isinstance(v, bytes):
                i[k] = v.decode()
        i["backend"] = "cpu" if info.backend == BACKENDS["cpu"] else "gpu"
        for k in ("sparse", "from_ptx", "cache_hit"):
            i[k] = bool(i[k])
        self.info = i
        self._defaults = AttendOpts.from_buffer_copy(L.qgen_attend_defaults(ptr))

    def _check(self, st):
        """Raise the failure of a call just made on this context (by this thread)."""
        if st != 0:
            raise error(st, lib().qgen_error(self._ptr).decode(errors="replace"))

    def _live(self):
        if not self._ptr:
            raise invalid("the context is closed")
        return self._ptr

    def _open_kv(self, open_call, kind):
        """A _KvHandle from open_call(ctx pointer, byref(out)), registered here; under the lock,
        so that close() never runs while a cache is being made."""
        ptr = ctypes.c_void_p()
        with self._lock:
            self._check(open_call(self._live(), ctypes.byref(ptr)))
            h = _KvHandle(ptr.value, self._ptr, kind)
            self._kvs.add(h)
        return h

    def _forget(self, h):
        with self._lock:
            self._kvs.discard(h)

    def cache(self, max_seqs, max_tokens, k_scale=1.0, v_scale=1.0):
        """A KV cache of max_seqs sequences of up to max_tokens tokens each (the scales: see
        Cache.set_scales)."""
        kv = Cache(self, max_seqs, max_tokens)
        if k_scale != 1.0 or v_scale != 1.0:
            try:
                kv.set_scales(k_scale, v_scale)
            except BaseException:
                kv.close()
                raise
        return kv

    def close(self):
        """Close the context and every cache and view made from it (waiting for calls in
        flight on them in other threads)."""
        with self._lock:  # no cache is being made now, and none will be
            ptr, self._ptr = self._ptr, None
            handles, self._kvs = list(self._kvs), set()
        for h in handles:  # without the context's lock: a call in flight may need it
            h.destroy(" (its context was closed)")
        if ptr:
            lib().qgen_close(ptr)

    def __del__(self):
        if getattr(self, "_ptr", None):
            self.close()

    def __repr__(self):
        i = self.info
        if not i:
            return "<qgen.Context, not opened>"
        where = "cpu" if i["backend"] == "cpu" else f"gpu:{self.device}"
        types = i["k_type"] if i["k_type"] == i["v_type"] else f"{i['k_type']}/{i['v_type']}"
        if i["sparse"]:
            budget = f"coverage {i['coverage']:g}" if i["coverage"] else f"budget {i['budget']} tokens"
            mode = f"sparse (block {i['block']}, {budget})"
        else:
            mode = "dense"
        state = f"open, {len(self._kvs)} caches" if self._ptr else "closed"
        return (f"<qgen.Context {i['name']!r} on {where}: head_dim {i['head_dim']}, {i['n_head']} heads, "
                f"{i['n_head_kv']} KV heads, KV {types}, in {i['in_type']}, out {i['out_type']}, {mode}; {state}>")


class Cache(_Owner):
    """One layer's paged KV cache (qgen_kv).

    Threads: calls on one cache from several threads are serialised by the cache's lock
    (libqgen forbids concurrent calls on one qgen_kv; unserialised, attends from two
    threads returned each other's rows), so they are safe but do not run in parallel: give
    each thread its own cache for that. Calls on different caches run in parallel. On the
    GPU the lock orders the launches, not the kernels: threads sharing a cache on different
    streams must also order those streams (one cache's steps share its scratch memory).

    A subclass over another kind of qgen_kv (View) makes its handle with _open_handle(),
    calls libqgen on it with _call(), and lists in _reads the caller's memory a step reads;
    Step is the planned step DecodeWrapper runs."""

    _kind = "cache"

    def __init__(self, ctx, max_seqs, max_tokens):
        self._h = None
        if not isinstance(ctx, Context):
            raise wrong_type(f"cache: ctx must be a qgen.Context, got {type(ctx).__name__}")
        self.ctx = ctx
        self.max_seqs = fits(max_seqs, "cache: max_seqs", 32)
        self.max_tokens = fits(max_tokens, "cache: max_tokens", 64)
        self._open_handle(lambda c, out: lib().qgen_cache_create(c, out, self.max_seqs, self.max_tokens))

    def _open_handle(self, open_call):
        """Make this object's qgen_kv with open_call(context pointer, byref(out)) on self.ctx,
        registered with the context, and set up what the calls need."""
        self._setup(self.ctx._open_kv(open_call, self._kind))

    def _call(self, fn, c_function, *args):
        """c_function(qgen_kv, *args) under the lock, raising its failure (fn names the caller)."""
        h = self._h
        with h.lock:
            h.check(c_function(h.live(fn), *args))

    def _setup(self, h):
        i = self.ctx.info
        self._h = h
        self._kv_shape = (i["n_head_kv"], i["head_dim"])
        self._q_shape = (i["n_head"], i["head_dim"])
        self._selected = set()  # sequences with a sparse selection since created or reset
        self._device_len = False  # append_decode was used: reading a length waits for the device
        self._reads = ()  # (name, extent) of the caller's memory a step reads (a view's pool)
        self.pages_per_seq = lib().qgen_kv_pages_per_seq(h.ptr)
        self.n_pages = lib().qgen_kv_n_pages(h.ptr)

    # ---- arguments -------------------------------------------------------------------

    def _live(self, fn="qgen"):
        """The qgen_kv pointer, or the error of a closed cache (a check, for calls that make no C call)."""
        with self._h.lock:
            return self._h.live(fn)

    def _seqs(self, seqs, default, fn, nonempty=False):
        """The list of sequence ids of seqs: an id, a list, tuple or range of ids, or an
        integer array or tensor; each in [0, max_seqs), none twice."""
        if seqs is None:
            seqs = default
        elif (is_ndarray(seqs) or is_torch(seqs)) and len(seqs.shape) > 0:
            seqs = seqs.tolist()
        elif isinstance(seqs, (list, tuple, range)):
            seqs = list(seqs)
        else:
            seqs = [seqs]
        if nonempty and not seqs:
            raise invalid(f"{fn}: no sequences given (an empty list); give a sequence id or a list of them")
        out = []
        for i, s in enumerate(seqs):
            s = as_int(s, f"{fn}: seqs[{i}]")
            if not 0 <= s < self.max_seqs:
                raise invalid(f"{fn}: seqs[{i}] = {s} is outside [0, {self.max_seqs})")
            if s in out:
                raise invalid(f"{fn}: sequence {s} is listed twice")
            out.append(s)
        return out

    def _tensor(self, x, fn, name, shape, type_name, writable=False):
        """The Mem of tensor x after checking its kind, device, dtype, shape and layout."""
        m = mem_of(x, fn, name)
        if self.ctx.backend == "gpu":
            if not m.torch:
                raise wrong_type(f"{fn}: {name} must be a torch CUDA tensor on the GPU backend, got {type(x).__name__}")
            if m.device != "cuda":
                raise invalid(f"{fn}: {name} must be a torch CUDA tensor on the GPU backend, got {type(x).__name__} "
                              f"on {m.device}")
            if m.index != self.ctx.device:
                raise invalid(f"{fn}: {name} is on cuda:{m.index}; the context is on cuda:{self.ctx.device}")
        elif m.device != "cpu":
            raise invalid(f"{fn}: {name} is on {m.device}; the CPU backend takes host arrays")
        want = (TORCH_DTYPES if m.torch else NUMPY_DTYPES)[type_name]
        if m.dtype != want:
            raise wrong_type(f"{fn}: {name} has dtype {m.dtype}; the spec's {'out' if writable else 'in'}_type "
                             f"{type_name} needs {want}")
        if m.shape != tuple(shape):
            raise invalid(f"{fn}: {name} has shape {list(m.shape)}, expected [{', '.join(map(str, shape))}]")
        if not m.contiguous:
            raise invalid(f"{fn}: {name} is not contiguous (C order)")
        if writable and not m.writable:
            raise invalid(f"{fn}: {name} is read-only")
        return m

    def _stream(self, stream):
        if self.ctx.backend == "cpu":
            return None
        if stream is None:
            torch = torch_module()
            return torch.cuda.current_stream(self.ctx.device).cuda_stream
        return addr(getattr(stream, "cuda_stream", stream), "stream")

    # ---- the decode path -------------------------------------------------------------

    def append(self, k, v, seqs=None, n_new=None, stream=None):
        """Append the rows of k, v ([tokens, n_head_kv, head_dim]): n_new[i] rows to seqs[i],
        in order. seqs defaults to [0]; n_new to the tokens split equally over seqs."""
        seqs = self._seqs(seqs, [0], "append")
        tokens = leading_rows(k, "append", "k", "tokens", self._kv_shape)
        if n_new is None:
            if not seqs or tokens % len(seqs):
                raise invalid(f"append: {tokens} tokens do not split equally over {len(seqs)} sequences; give n_new")
            n_new = [tokens // len(seqs)] * len(seqs)
        else:
            if is_ndarray(n_new) or is_torch(n_new):
                n_new = n_new.tolist()
            if not isinstance(n_new, (list, tuple, range)):
                raise wrong_type(f"append: n_new must be a list of token counts, got {type(n_new).__name__}")
            n_new = [fits(n, f"append: n_new[{i}]", 32) for i, n in enumerate(n_new)]
        if len(n_new) != len(seqs):
            raise invalid(f"append: n_new has {len(n_new)} entries for {len(seqs)} sequences")
        for i, n in enumerate(n_new):
            if n < 0:
                raise invalid(f"append: n_new[{i}] = {n} is negative")
        if sum(n_new) != tokens:
            raise invalid(f"append: n_new sums to {sum(n_new)} but k and v hold {tokens} tokens")
        shape = (tokens,) + self._kv_shape
        in_type = self.ctx.info["in_type"]
        kp = self._tensor(k, "append", "k", shape, in_type).ptr
        vp = self._tensor(v, "append", "v", shape, in_type).ptr
        n = len(seqs)
        self._call("append", lib().qgen_append, (ctypes.c_int * n)(*seqs), n, (ctypes.c_int * n)(*n_new), kp, vp,
                   self._stream(stream))

    def append_decode(self, k, v, seqs=None, stream=None):
        """One token per sequence (k, v: [n_seq, n_head_kv, head_dim], row i for seqs[i],
        default 0..n_seq-1), written at the length the device holds when it runs: a CUDA
        graph captured from append_decode + attend replays as consecutive decode steps
        (refill the captured k, v, q before each replay). A full sequence's token is
        dropped; sync() reports it. Once used, the lengths live on the device: seq_len(),
        append(), sync() wait for it (never call them while capturing)."""
        n = leading_rows(k, "append_decode", "k", "n_seq", self._kv_shape)
        seqs = self._seqs(seqs, list(range(n)), "append_decode")
        if len(seqs) != n:
            raise invalid(f"append_decode: k has {n} rows for {len(seqs)} sequences")
        shape = (n,) + self._kv_shape
        in_type = self.ctx.info["in_type"]
        kp = self._tensor(k, "append_decode", "k", shape, in_type).ptr
        vp = self._tensor(v, "append_decode", "v", shape, in_type).ptr
        stream = self._stream(stream)
        h = self._h
        with h.lock:
            self._device_len = True  # as the C side: set before the launches
            h.check(lib().qgen_append_decode(h.live("append_decode"), (ctypes.c_int * n)(*seqs), n, kp, vp, stream))

    def sync(self):
        """Wait for the device and read back the lengths after append_decode; raises
        QGEN_ERR_CAPACITY (once) if it dropped tokens of full sequences."""
        self._call("sync", lib().qgen_sync)

    def attend(self, q, seqs=None, out=None, coverage=None, budget=None, dense=False, sink=None, recent=None,
               stream=None, reuse=False, n_q=None, window=None, sinks=None):
        """One decode step: q [n_seq, n_head, head_dim], one row per sequence of seqs
        (default 0..n_seq-1); returns out (allocated when not given; a given out must not
        overlap q). Sparse with the spec's budget by default (a sparse spec), dense=True
        for dense, or coverage= / budget= (tokens) for another budget; sink= and recent=
        override the spec's. reuse=True attends each sequence over its last sparse
        selection extended to its current length, selecting nothing (QGEN_ATTEND_REUSE: a
        sparse attend since the sequence's last reset first).
        n_q (a list: query tokens per sequence, 1 .. 16 each; a speculative verify step):
        q then has sum(n_q) rows, seqs[0]'s first, each sequence's last n_q[i] tokens
        (appended first) attending causally, with one selection per sequence for the
        step (qgen.h, qgen_attend_multi; the CPU backend only, so far).
        window=W (a sliding-window layer; dense=True): each query attends only the last W
        tokens it sees, itself included (the CPU backend only, so far).
        sinks (gpt-oss's learned attention sinks: a float32 array or tensor of n_head
        logits): one more softmax term a head, weighing no value (the CPU backend only)."""
        n = leading_rows(q, "attend", "q", "n_seq", self._q_shape)
        if n_q is not None:
            if is_ndarray(n_q) or is_torch(n_q):
                n_q = n_q.tolist()
            if not isinstance(n_q, (list, tuple, range)):
                raise wrong_type(f"attend: n_q must be a list of query-token counts, one per sequence, got {type(n_q).__name__}")
            n_q = [fits(x, f"attend: n_q[{i}]", 32) for i, x in enumerate(n_q)]
            seqs = self._seqs(seqs, list(range(len(n_q))), "attend")
            if len(seqs) != len(n_q) or sum(n_q) != n:
                raise invalid(f"attend: n_q lists {len(n_q)} counts summing to {sum(n_q)} for {len(seqs)} sequences "
                              f"and q's {n} rows")
        else:
            seqs = self._seqs(seqs, list(range(n)), "attend")
            if len(seqs) != n:
                raise invalid(f"attend: q has {n} rows for {len(seqs)} sequences")
        opts = self._opts(coverage, budget, dense, sink, recent, reuse)
        if window is not None:
            opts.window = token_count(window, "attend: window", 1)
        if sinks is not None:
            sm = mem_of(sinks, "attend", "sinks")
            if sm.dtype != (TORCH_DTYPES if sm.torch else NUMPY_DTYPES)["f32"]:
                raise wrong_type(f"attend: sinks has dtype {sm.dtype}; it takes float32 logits, one a query head")
            opts.sinks = self._tensor(sinks, "attend", "sinks", (self._q_shape[0],), "f32").ptr
        shape = (n,) + self._q_shape
        qm = self._tensor(q, "attend", "q", shape, self.ctx.info["in_type"])
        out_type = self.ctx.info["out_type"]
        if out is None:
            out = new_out(shape, out_type, q.device if qm.torch else None)
        om = self._tensor(out, "attend", "out", shape, out_type, writable=True)
        disjoint("attend", ("out", om), [("q", qm), *self._reads])
        self._attend(seqs, qm.ptr, om.ptr, opts, self._stream(stream), "attend", n_q=n_q)
        return out

    def _attend(self, seqs, qp, op, opts, stream, fn, c_seqs=None, n_q=None):
        """qgen_attend (qgen_attend_multi with n_q) under the lock, keeping which sequences
        have a sparse selection."""
        n = len(seqs)
        if c_seqs is None:
            c_seqs = (ctypes.c_int * n)(*seqs)
        h = self._h
        with h.lock:
            if n_q is None:
                h.check(lib().qgen_attend(h.live(fn), c_seqs, n, qp, op, ctypes.byref(opts), stream))
            else:
                h.check(lib().qgen_attend_multi(h.live(fn), c_seqs, n, (ctypes.c_int * n)(*n_q), qp, op,
                                                ctypes.byref(opts), stream))
            if opts.mode == ATTEND_SPARSE:
                self._selected.update(seqs)

    def _opts(self, coverage, budget, dense, sink, recent, reuse=False):
        """The qgen_attend_opts of attend's keywords."""
        opts = AttendOpts.from_buffer_copy(self.ctx._defaults)
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
            cov = real(coverage, "attend: coverage") if coverage is not None else 0.0  # one of the two (qgen.h)
            if coverage is not None and not 0.0 < cov <= 1.0:
                raise invalid(f"attend: coverage = {cov:g} must be in (0, 1]")
            opts.coverage = cov
            opts.budget = token_count(budget, "attend: budget", 1) if budget is not None else 0
        if sink is not None:
            opts.sink = token_count(sink, "attend: sink", 0)
        if recent is not None:
            opts.recent = token_count(recent, "attend: recent", 0)
        return opts

    def set_scales(self, k_scale=1.0, v_scale=1.0):
        """The per-tensor scales of an fp8 cache (vLLM's per-layer k_scale / v_scale; floats or
        one-element tensors): appends store fp8(x / scale), attend reads fp8 * scale. Other
        cache types take only 1."""
        ks = real(k_scale, "set_scales: k_scale", c_float=True)
        vs = real(v_scale, "set_scales: v_scale", c_float=True)
        self._call("set_scales", lib().qgen_cache_set_scales, ks, vs)

    def reset(self, seqs):
        """Forget the tokens of sequence seqs: an id, or a list of ids (each is reset; an
        empty list is refused). All ids are checked before any is reset."""
        seqs = self._seqs(seqs, None, "reset", nonempty=True)
        h = self._h
        with h.lock:
            kv = h.live("reset")
            for s in seqs:
                h.check(lib().qgen_reset(kv, s))
                self._selected.discard(s)

    def rollback(self, seq, n):
        """Remove the last n tokens (an int, 0 .. its length) of sequence seq (one id), e.g.
        the draft tokens a verify step rejected: the cache then holds what it would had it
        been fed only the tokens kept (qgen.h, qgen_rollback, says when the bytes are the
        same and what the bounds are otherwise)."""
        if isinstance(seq, (list, tuple, range)) or ((is_ndarray(seq) or is_torch(seq)) and len(seq.shape) > 0):
            raise wrong_type(f"rollback: takes one sequence id, got a {type(seq).__name__}; call it once per sequence")
        s = self._seqs(seq, None, "rollback")[0]
        n = token_count(n, "rollback: n", 0)
        h = self._h
        with h.lock:
            h.check(lib().qgen_rollback(h.live("rollback"), s, n))

    def share_prefix(self, src, dst, n):
        """Give the empty sequence dst the first n tokens of sequence src (a shared prompt
        prefix) without copying their whole pages (qgen.h, qgen_share_prefix)."""
        for name, x in (("src", src), ("dst", dst)):
            if isinstance(x, (list, tuple, range)) or ((is_ndarray(x) or is_torch(x)) and len(x.shape) > 0):
                raise wrong_type(f"share_prefix: {name} is one sequence id, got a {type(x).__name__}")
        s, d = self._seqs([src, dst], None, "share_prefix")
        n = token_count(n, "share_prefix: n", 1)
        h = self._h
        with h.lock:
            h.check(lib().qgen_share_prefix(h.live("share_prefix"), s, d, n))

    def seq_len(self, seqs):
        """Tokens held by sequence seqs (an int), or by each of a list of them (a list)."""
        one = not isinstance(seqs, (list, tuple, range)) and not (
            (is_ndarray(seqs) or is_torch(seqs)) and len(seqs.shape) > 0)
        seqs = self._seqs(seqs, None, "seq_len", nonempty=True)
        h = self._h
        lens = []
        with h.lock:
            kv = h.live("seq_len")
            for s in seqs:
                n = lib().qgen_seq_len(kv, s)
                if n < 0:  # a valid id: the device lengths could not be read
                    raise error(CUDA, lib().qgen_error(h.ctx).decode(errors="replace"))
                lens.append(n)
        return lens[0] if one else lens

    # ---- introspection (synchronous) -------------------------------------------------

    def selection(self, seq):
        """The last sparse attend's pages of sequence seq (one id): (lists [n_head_kv,
        pages_per_seq], counts [n_head_kv]), int32 NumPy arrays; lists[h, :counts[h]] are
        the pages. A sequence with no sparse attend since it was created or reset raises."""
        import numpy as np

        if isinstance(seq, (list, tuple, range)) or ((is_ndarray(seq) or is_torch(seq)) and len(seq.shape) > 0):
            raise wrong_type(f"selection: takes one sequence id, got a {type(seq).__name__}; call it once per sequence")
        s = self._seqs(seq, None, "selection")[0]
        lists = np.zeros((self._kv_shape[0], self.pages_per_seq), dtype=np.int32)
        counts = np.zeros(self._kv_shape[0], dtype=np.int32)
        ip = ctypes.POINTER(ctypes.c_int)
        h = self._h
        with h.lock:
            kv = h.live("selection")
            if self.ctx.info["sparse"] and s not in self._selected:
                raise invalid(f"selection: sequence {s} has no sparse selection: no sparse attend since the "
                              f"{self._kind} was made or the sequence reset")
            h.check(lib().qgen_kv_selection(kv, s, lists.ctypes.data_as(ip), counts.ctypes.data_as(ip)))
        return lists, counts

    def read(self, which):
        """A copy of one of the cache's arrays as bytes (a uint8 NumPy array): "k", "v",
        "bounds", "page_table" or "seq_len" (qgen.h describes their layouts)."""
        import numpy as np

        if not isinstance(which, str) or which not in KV_ARRAYS:
            raise invalid(f"read: {which!r} is not one of {', '.join(KV_ARRAYS)}")
        h = self._h
        with h.lock:
            kv = h.live("read")
            n = lib().qgen_kv_size(kv, KV_ARRAYS[which])
            buf = np.zeros(n, dtype=np.uint8)
            h.check(lib().qgen_kv_read(kv, KV_ARRAYS[which], buf.ctypes.data if n else None, n))
        return buf

    def close(self):
        """Free the cache (waiting for a call in flight on another thread); idempotent."""
        h = getattr(self, "_h", None)
        if h is not None:
            h.destroy()
            self.ctx._forget(h)  # after destroy, not holding the cache's lock

    def __del__(self):
        if getattr(self, "_h", None) is not None and self._h.ptr:
            self.close()

    def _describe(self):
        return f"{self.max_seqs} sequences of up to {self.max_tokens} tokens"

    def __repr__(self):
        h = getattr(self, "_h", None)
        if h is None:
            return f"<qgen.{type(self).__name__}, not made>"
        i = self.ctx.info
        held = ""
        # the tokens held, when reading them is cheap: never wait for the device or a lock in a repr
        cheap = self._kind == "cache" and not (self._device_len and self.ctx.backend == "gpu")
        if h.ptr and cheap and h.lock.acquire(blocking=False):
            try:
                if h.ptr:
                    lens = [lib().qgen_seq_len(h.ptr, s) for s in range(min(self.max_seqs, 4096))]
                    if all(n >= 0 for n in lens):
                        held = f", {sum(lens)} tokens held in {sum(1 for n in lens if n)} sequences"
            finally:
                h.lock.release()
        where = "cpu" if self.ctx.backend == "cpu" else f"gpu:{self.ctx.device}"
        return (f"<qgen.{type(self).__name__} of {i.get('name', '?')!r} on {where}: {self._describe()}{held}, "
                f"{i.get('n_head_kv')} KV heads x {i.get('head_dim')}; {'open' if h.ptr else 'closed'}>")


class Step:
    """One decode step of a cache, planned ahead: the internal interface DecodeWrapper is
    built on (not part of qgen's public API). Making it does on the host what attend()
    checks before its launch: the sequences (seqs: ids of the cache), the budget (attend's
    keywords, reuse included) and the output buffer out (allocated when not given: a torch
    CUDA tensor on the GPU backend, a NumPy array on the CPU one; a given out must not
    overlap the memory the step reads). run(q) then checks q and launches into out,
    allocating nothing and never waiting for the device, so it can be captured in a CUDA
    graph. fn names the caller in error messages."""

    def __init__(self, cache, seqs, out=None, coverage=None, budget=None, dense=False, sink=None, recent=None,
                 reuse=False, fn="plan"):
        cache._live(fn)
        self.cache = cache
        self.seqs = cache._seqs(seqs, None, fn)
        self.opts = cache._opts(coverage, budget, dense, sink, recent, reuse)
        n = len(self.seqs)
        self.shape = (n,) + cache._q_shape
        ctx = cache.ctx
        out_type = ctx.info["out_type"]
        if out is None:
            out = new_out(self.shape, out_type, f"cuda:{ctx.device}" if ctx.backend == "gpu" else None)
        om = cache._tensor(out, fn, "out", self.shape, out_type, writable=True)
        disjoint(fn, ("out", om), cache._reads)
        self.c_seqs = (ctypes.c_int * n)(*self.seqs)
        self.out = out

    def run(self, q, stream=None, fn="run"):
        """The step over q ([n, n_head, head_dim], not overlapping out) into out, which it
        returns."""
        c = self.cache
        info = c.ctx.info
        qm = c._tensor(q, fn, "q", self.shape, info["in_type"])
        om = c._tensor(self.out, fn, "out", self.shape, info["out_type"], writable=True)
        disjoint(fn, ("out", om), [("q", qm)])
        c._attend(self.seqs, qm.ptr, om.ptr, self.opts, c._stream(stream), fn, self.c_seqs)
        return self.out
