"""attention.py — QgenAttention: the decode attention of a model's full-attention layers
through qgen caches (one qgen.Context for the spec, one qgen.Cache per full-attention layer,
sequence i of every cache holding state i of the batch being decoded).

The spec is the model's attention shape (head_dim, n_head, n_head_kv, the softmax scale,
which for Gemma is query_pre_attn_scalar^-1/2 rather than head_dim^-1/2) plus the fields
given here: the cache types, the sparse selection, and in/out types matching the arrays the
model computes in (f32 under NumPy; f32, f16 or bf16 under torch).
"""
import re

from .. import Context

DEFAULT_SPARSE = {"block": 64, "coverage": 0.25}
_IO_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


class QgenAttention:
    """Decode attention through qgen for every full-attention (global) layer.

    Spec fields as keywords: k_type / v_type ("f16", "bf16", "q8_0", "q4_0", "q5_0", ...),
    sparse (a dict such as {"block": 64, "coverage": 0.25, "rescore": {"candidates": 8}};
    block defaults to 64; False for a dense cache), and any other qgen spec field (bounds
    through sparse, v_tau, ...). backend: "cpu" (the reference executor, over NumPy or CPU
    torch arrays) or "gpu" (CUDA tensors); by default the model's device decides.
    attend: keywords for every Cache.attend call (dense=True, coverage=, budget=, sink=,
    recent=); mutable as .attend_opts between decodes. record=True keeps every step's page
    selection per layer in .trace (see selection()).

    Made once and reused: generate() calls bind() (which resets the sequences and appends
    each state's prompt K and V to every full-attention layer's cache) and step()."""

    def __init__(self, model=None, *, backend=None, sparse=None, attend=None, record=False, **fields):
        if sparse is None:
            sparse = dict(DEFAULT_SPARSE)
        elif isinstance(sparse, dict):
            sparse = dict(sparse)
            sparse.setdefault("block", 64)
        elif sparse is not False:
            raise ValueError(f"sparse = {sparse!r}: give a dict of sparse fields, or False for dense")
        for f in ("head_dim", "n_head", "n_head_kv", "scale", "in_type", "out_type"):
            if f in fields:
                raise ValueError(f"{f} comes from the model; it cannot be given to QgenAttention")
        self.fields = dict(fields, sparse=sparse)
        self.backend = backend
        self.attend_opts = dict(attend or {})
        self.record = record
        self.ctx = None
        self.caches = {}
        self.trace = {}
        self._key = None
        self._seqs = 0
        self._capacity = (0, 0)
        if model is not None:
            self._open(model)

    # ---- setup -------------------------------------------------------------------------

    def _open(self, model):
        c, ops = model.config, model.ops
        backend = self.backend
        on_gpu = ops.name == "torch" and ops.device.type == "cuda"
        if backend is None:
            backend = "gpu" if on_gpu else "cpu"
        if backend == "gpu" and not on_gpu:
            raise ValueError("backend='gpu' takes CUDA tensors: load the model with device='cuda'")
        if backend == "cpu" and on_gpu:
            raise ValueError("backend='cpu' takes host arrays: the model is on a GPU (use backend='gpu')")
        io = _IO_TYPES[ops.dtype_name]
        name = re.sub(r"[^A-Za-z0-9._-]", "-", f"{c.arch}-{c.n_layer}l-{c.head_dim}")[:64]
        key = (c.head_dim, c.n_head, c.n_head_kv, c.attn_scale, io, backend,
               str(ops.device.index if on_gpu else ""))
        if self.ctx is not None and key == self._key:
            return
        self.close()
        device = ops.device.index or 0 if on_gpu else 0
        self.ctx = Context(backend=backend, device=device, name=name, head_dim=c.head_dim, n_head=c.n_head,
                           n_head_kv=c.n_head_kv, scale=c.attn_scale, in_type=io, out_type=io, **self.fields)
        self._key = key
        self._layers = list(c.global_layers)
        self.info = self.ctx.info

    def bind(self, model, states, max_new):
        """Make sequence i of every full-attention layer's cache hold states[i]'s prompt K and
        V, with room for max_new more tokens (caches are made, or remade larger, as needed)."""
        self._open(model)
        B = len(states)
        need = max(s.n for s in states) + max(1, max_new)
        seqs, tokens = self._capacity
        if B > seqs or need > tokens:
            for kv in self.caches.values():
                kv.close()
            # headroom so that the next, slightly longer decode reuses the caches
            tokens = max(need, tokens, -(-need * 5 // 4 // 1024) * 1024)
            seqs = max(B, seqs)
            self.caches = {layer: self.ctx.cache(seqs, tokens) for layer in self._layers}
            self._capacity = (seqs, tokens)
            self._seqs = seqs
        for layer, kv in self.caches.items():
            for i in range(self._seqs):
                kv.reset(i)
            for i, s in enumerate(states):
                kv.append(s.k[layer], s.v[layer], seqs=[i])
        self._bound = B
        self.trace = {layer: [] for layer in self._layers} if self.record else {}

    def step(self, layer, q, k, v):
        """One decode step of one layer: append k, v [B, n_head_kv, D] (token i to sequence
        i) and attend q [B, n_head, D]; returns [B, n_head, D]."""
        kv = self.caches[layer]
        B = q.shape[0]
        seqs = list(range(B))
        kv.append(k, v, seqs=seqs, n_new=[1] * B)
        out = kv.attend(q, seqs=seqs, **self.attend_opts)
        if self.record and self.ctx.info["sparse"] and not self.attend_opts.get("dense"):
            self.trace[layer].append([kv.selection(i) for i in seqs])
        return out

    # ---- introspection -----------------------------------------------------------------

    @property
    def layers(self):
        """The full-attention layers that go through qgen."""
        return list(self.caches) if self.caches else list(getattr(self, "_layers", []))

    def selection(self, layer, seq=0, step=None):
        """The pages layer `layer` attended for sequence seq: a list per KV head of page
        indices (pages of the spec's block, counted from the prompt's first token). step=None
        is the last sparse step; other steps need record=True."""
        if step is None:
            if layer not in self.caches:
                raise KeyError(f"layer {layer} is not a full-attention layer bound to qgen (those: {self.layers})")
            lists, counts = self.caches[layer].selection(seq)
        else:
            if not self.record:
                raise ValueError("selection(step=...) needs QgenAttention(record=True)")
            lists, counts = self.trace[layer][step][seq]
        return [lists[h, :counts[h]].tolist() for h in range(len(counts))]

    def close(self):
        for kv in self.caches.values():
            kv.close()
        self.caches = {}
        self._capacity = (0, 0)
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"QgenAttention({self.fields!r}, attend={self.attend_opts!r})"
