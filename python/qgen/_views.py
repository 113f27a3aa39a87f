"""_views.py — qgen.View, a cache view over a KV pool the caller owns (qgen_view_open), with
layout helpers for vLLM (NHD, HND), SGLang and transformers' paged cache, and
qgen.DecodeWrapper, a plan() / run() pair in FlashInfer's manner: plan on the host, outside
graph capture; run graph-safe (no allocation, no host synchronisation).

A pool is given as two 4-D tensors k, v indexed [page, slot, KV head, element] with any
strides (the last dimension contiguous): torch CUDA tensors on the GPU backend, NumPy
arrays (or CPU tensors) on the CPU backend, in the spec's k_type / v_type (uint8 rows of
k_row_bytes for a quantized type; an fp8 type also as torch.float8_e4m3fn / float8_e5m2). block_table is int32 [max_seqs, max_blocks] (rows may be
strided), seq_lens int32 [max_seqs]; both are read when a step runs, so the engine updates
them in place between steps. The view keeps references to all four, so they live as long
as it does.
"""
import ctypes

from ._api import Cache, Context, Step
from ._args import NUMPY_DTYPES, TORCH_DTYPES, addr, as_int, fits, is_ndarray, is_torch, mem_of
from ._lib import ViewDesc, invalid, lib, wrong_type

# fp8 pools come as uint8 (vLLM's storage) or as torch's fp8 dtype of the same bytes
_FP8_TORCH = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def _desc_of(x, what, backend, device):
    """The _Mem of tensor or array x (address, shape, byte strides, dtype), on the right device."""
    m = mem_of(x, "View", what)
    if m.torch:
        if backend == "gpu" and (m.device != "cuda" or m.index != device):
            raise invalid(f"View: {what} is on {m.device}{'' if m.index is None else f':{m.index}'}; "
                          f"the context is on cuda:{device}")
        if backend == "cpu" and m.device != "cpu":
            raise invalid(f"View: {what} is on {m.device}; the CPU backend takes host arrays")
    elif backend == "gpu":
        raise wrong_type(f"View: {what} must be a torch CUDA tensor on the GPU backend, got {type(x).__name__}")
    return m


class View(Cache):
    """A qgen cache view over the caller's pool: attend(), selection() and read("bounds")
    as on a Cache; update(slot_mapping) after the engine's own cache write keeps a sparse
    spec's page bounds. append, append_decode and reset raise (the pool is the caller's).
    An attend's out must not overlap the pool, the block table or the lengths, which the
    step reads. Calls on one view are serialised by its lock, as on a Cache."""

    _kind = "view"

    def __init__(self, ctx, k, v, block_table, seq_lens):
        self._h = None
        if not isinstance(ctx, Context):
            raise wrong_type(f"View: ctx must be a qgen.Context, got {type(ctx).__name__}")
        self.ctx = ctx
        i = ctx.info
        hkv, hd = i["n_head_kv"], i["head_dim"]
        pools = []
        for name, x, tname, row in (("k", k, i["k_type"], i["k_row_bytes"]), ("v", v, i["v_type"], i["v_row_bytes"])):
            m = _desc_of(x, name, ctx.backend, ctx.device)
            shape, strides, dtype = m.shape, m.strides, m.dtype
            quant = tname not in TORCH_DTYPES
            want = "uint8" if quant else (TORCH_DTYPES if m.torch else NUMPY_DTYPES)[tname]
            also = _FP8_TORCH.get(tname) if m.torch else None  # an fp8 pool as its own dtype too
            last = row if quant else hd
            if len(shape) != 4 or shape[2] != hkv or shape[3] != last:
                raise invalid(f"View: {name} has shape {list(shape)}; expected [pages, page_size, {hkv}, {last}]")
            if dtype not in (want, also):
                raise wrong_type(f"View: {name} has dtype {dtype}; the spec's {name}_type {tname} needs {want}"
                                 + (f" or {also}" if also else ""))
            if shape[3] > 1 and strides[3] != row // last:
                raise invalid(f"View: {name}'s last dimension is not contiguous (stride {strides[3]} bytes)")
            pools.append(m)
        km, vm = pools
        (kp, ks, kst), (vp, vs, vst) = (km.ptr, km.shape, km.strides), (vm.ptr, vm.shape, vm.strides)
        if ks[:2] != vs[:2]:
            raise invalid(f"View: k has {ks[0]} pages of {ks[1]} slots, v {vs[0]} of {vs[1]}")
        bm = _desc_of(block_table, "block_table", ctx.backend, ctx.device)
        lm = _desc_of(seq_lens, "seq_lens", ctx.backend, ctx.device)
        bs, bst, bdt = bm.shape, bm.strides, bm.dtype
        ls, lst, ldt = lm.shape, lm.strides, lm.dtype
        if len(bs) != 2 or bdt != "int32" or (bs[1] > 1 and bst[1] != 4) or bst[0] % 4:
            raise invalid(f"View: block_table must be int32 [max_seqs, max_blocks] with contiguous rows, "
                          f"got {bdt} {list(bs)} strides {list(bst)} bytes")
        if len(ls) != 1 or ldt != "int32" or (ls[0] > 1 and lst[0] != 4) or ls[0] != bs[0]:
            raise invalid(f"View: seq_lens must be a contiguous int32 [{bs[0]}], got {ldt} {list(ls)}")
        # every field as its C type: a broadcast array can have sizes and strides ctypes would wrap
        ll = lambda x, what: fits(x, f"View: {what}", 64)  # noqa: E731
        d = ViewDesc(addr(kp, "View: k"), addr(vp, "View: v"), fits(ks[1], "View: page_size", 32),
                     ll(ks[0], "n_pages"),
                     ll(kst[0], "k page stride"), ll(kst[1], "k token stride"), ll(kst[2], "k head stride"),
                     ll(vst[0], "v page stride"), ll(vst[1], "v token stride"), ll(vst[2], "v head stride"),
                     addr(bm.ptr, "View: block_table"), ll(bst[0] // 4 if bs[0] > 1 else bs[1], "block_table stride"),
                     addr(lm.ptr, "View: seq_lens"), fits(bs[0], "View: max_seqs", 32), ll(bs[1], "max_blocks"))
        self.page_size = ks[1]
        self.max_seqs, self.max_tokens = bs[0], bs[1] * ks[1]
        self._keep = (k, v, block_table, seq_lens)  # before the view exists: it reads them
        self._open_handle(lambda c, out: lib().qgen_view_open(c, ctypes.byref(d), out))
        # what a step reads of the caller's memory, which an attend's out must not overlap
        self._reads = tuple((name, m.extent()) for name, m in (("the view's k pool", km), ("the view's v pool", vm),
                                                                ("the view's block_table", bm),
                                                                ("the view's seq_lens", lm)))

    def _describe(self):
        return f"{self.max_seqs} sequences of up to {self.max_tokens} tokens, {self.n_pages} pages of {self.page_size}"

    def update(self, slot_mapping, stream=None):
        """A sparse spec's page bounds after the engine wrote this step's K rows at
        slot_mapping (int32 or int64 [n], slot = page * page_size + offset; negative =
        padding, skipped). Capturable; nothing to do for a dense spec."""
        m = _desc_of(slot_mapping, "slot_mapping", self.ctx.backend, self.ctx.device)
        shape, dtype = m.shape, m.dtype
        if dtype not in ("int32", "int64") or len(shape) != 1 or (shape[0] > 1 and m.strides[0] != int(dtype[3:]) // 8):
            raise invalid(f"View.update: slot_mapping must be a contiguous int32 or int64 [n], got {dtype} {list(shape)}")
        n = fits(shape[0], "View.update: slots", 64)
        self._call("View.update", lib().qgen_view_update, m.ptr, n, int(dtype[3:]) // 8, self._stream(stream))

    def seq_len(self, seq):
        """Refused: a view's lengths are the caller's seq_lens."""
        raise invalid("View.seq_len: a view's lengths are the caller's seq_lens (read them there)")

    # ---- layouts ---------------------------------------------------------------------

    @classmethod
    def vllm(cls, ctx, kv_cache, block_table, seq_lens, layout="NHD"):
        """vLLM's per-layer cache: (2, num_blocks, block_size, H, D) for NHD, or (2,
        num_blocks, H, block_size, D) for HND (the HND tensor as allocated)."""
        if layout not in ("NHD", "HND"):
            raise invalid(f"View.vllm: layout = {layout!r}; allowed: 'NHD', 'HND'")
        k, v = kv_cache[0], kv_cache[1]
        if layout == "HND":
            k, v = k.swapaxes(1, 2), v.swapaxes(1, 2)  # both NumPy and torch spell it so
        return cls(ctx, k, v, block_table, seq_lens)

    @classmethod
    def sglang(cls, ctx, k_buffer, v_buffer, page_size, block_table, seq_lens):
        """SGLang's per-layer buffers [slots, H, D] in pages of page_size slots;
        block_table[s, i] is the page of sequence s's tokens [i*page_size, (i+1)*page_size)
        (sglang_block_table() makes it from req_to_token)."""
        return cls(ctx, as_pages(k_buffer, page_size), as_pages(v_buffer, page_size), block_table, seq_lens)

    @classmethod
    def transformers(cls, ctx, k_cache, v_cache, block_size, block_table, seq_lens):
        """transformers' paged cache of one layer, [num_blocks * block_size + 2, H, D] (the
        two extra rows, padding targets, are not pages)."""
        block_size = as_int(block_size, "block_size")
        if block_size <= 0:
            raise invalid(f"View.transformers: block_size = {block_size} must be > 0")
        n = (_shape(k_cache, "k_cache")[0] // block_size) * block_size
        return cls(ctx, as_pages(k_cache[:n], block_size), as_pages(v_cache[:n], block_size), block_table, seq_lens)


def _shape(buf, what):
    """The shape of a [slots, H, D] buffer, which must be an array or tensor."""
    if not (is_torch(buf) or is_ndarray(buf)):
        raise wrong_type(f"View: {what} must be a [slots, H, D] torch tensor or NumPy array, got {type(buf).__name__}")
    if len(buf.shape) != 3:
        raise invalid(f"View: {what} must be a [slots, H, D] torch tensor or NumPy array, got shape {list(buf.shape)}")
    return buf.shape


def as_pages(buf, page_size):
    """[slots, H, D] as [slots // page_size, page_size, H, D] (the same memory); also what
    transformers_paged views its cache's layers as."""
    page_size = as_int(page_size, "page_size")
    if page_size <= 0 or _shape(buf, "the buffer")[0] % page_size:
        raise invalid(f"View: {buf.shape[0]} slots are not whole pages of {page_size}")
    return buf.reshape((buf.shape[0] // page_size, page_size) + tuple(buf.shape[1:]))


def sglang_block_table(req_to_token, page_size):
    """SGLang's req_to_token [reqs, positions] (slot of each position) as page indices
    [reqs, positions // page_size] (int32): the page of every page_size-th position."""
    bt = req_to_token[:, ::page_size] // page_size
    return bt.int().contiguous() if is_torch(bt) else bt.astype("int32")


class DecodeWrapper:
    """plan() once per batch shape on the host (outside graph capture): the view, the
    sequences, the budget, and the output buffer; run(q) each step, graph-safe: a captured
    run() replays over whatever block table, lengths and pool contents the engine holds.

        w = qgen.DecodeWrapper(view)
        out = w.plan(seqs=range(8), coverage=0.25)    # or dense=True, budget=...; out reused
        w.run(q)                                      # q [8, n_head, head_dim], into out
    """

    def __init__(self, view):
        if not isinstance(view, Cache):
            raise wrong_type(f"DecodeWrapper: {type(view).__name__} is not a qgen View or Cache")
        self.view = view
        self._step = None  # the planned Step

    def plan(self, seqs, out=None, coverage=None, budget=None, dense=False, sink=None, recent=None, reuse=False):
        """Fix the batch (seqs: the view's sequence ids, one query row each), the budget (as
        attend's keywords, reuse included) and the output buffer out (allocated here when not
        given: a torch CUDA tensor on the GPU backend, a NumPy array on the CPU one; a given
        out must not overlap the view's pool, block table or lengths)."""
        self._step = Step(self.view, seqs, out, coverage, budget, dense, sink, recent, reuse, fn="plan")
        return self._step.out

    def run(self, q, stream=None):
        """One decode step of the planned batch (q [n, n_head, head_dim], not overlapping
        out) into the planned out, which it returns."""
        if self._step is None:
            raise invalid("DecodeWrapper.run: call plan() first")
        return self._step.run(q, stream, fn="run")
