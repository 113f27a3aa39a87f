"""model.py — the forward pass of a Llama or Gemma 3 model over NumPy or torch arrays:
prefill (exact causal attention, chunked over queries so that long prompts fit in memory),
and greedy decoding from a prefilled State in which every full-attention layer may attend
through qgen caches (QgenAttention) instead of the runner's own exact attention.

A State is never written to: decoding keeps the K and V of its new tokens in arrays of its
own and attends over the State's prefix and those, so one prefill serves any number of
decodes (different budgets, teacher-forced runs, batches of trials).
"""
import math
import time
from dataclasses import dataclass, field

import numpy as np

from ._ops import SQRT_2_OVER_PI

# Prefill's attention goes in chunks of queries: at most QUERY_CHUNK queries, and at most
# SCORE_BLOCK scores (16 Mi floats = 64 MiB) in one chunk's block, which keeps a 32K-token
# prefill's attention within a few hundred MiB.
QUERY_CHUNK = 256
SCORE_BLOCK = 1 << 24


@dataclass
class State:
    """A prefilled prompt: per layer the post-norm, post-RoPE K and V of every prompt token
    ([n, n_head_kv, head_dim], read-only), the logits after its last token (float32 NumPy
    [vocab]), its token ids and length n."""

    ids: list
    k: list
    v: list
    logits: np.ndarray
    n: int
    seconds: float = 0.0


@dataclass
class Result:
    """One decode: the chosen (or forced) token ids, the text of those up to the stop token,
    whether a stop token ended it, the logits each token was chosen from (float32 NumPy
    [len(ids), vocab], with return_logits=True), the decode's seconds (the whole batch's,
    binding included), forward steps, and extra["bind_seconds"] (setting up the caches)."""

    ids: list
    text: str
    stopped: bool
    logits: np.ndarray = None
    seconds: float = 0.0
    steps: int = 0
    extra: dict = field(default_factory=dict)


class Model:
    """A loaded model: config, tokenizer, and prefill / generate / nll over its weights."""

    def __init__(self, path, config, tokenizer, weights, ops):
        self.path, self.config, self.tokenizer, self.ops = path, config, tokenizer, ops
        self.w = weights
        c = config
        self.group = c.n_head // c.n_head_kv
        self._rope_inv = {}
        self.freq_factors = weights.get("rope_freqs")

    def __repr__(self):
        return f"<qgen.models.Model {self.config.summary()}; arrays {self.ops.name} {self.ops.dtype_name}>"

    # ---- pieces ------------------------------------------------------------------------

    def _norm(self, x, w):
        """RMSNorm over the last axis in float32, times the weight (the file's weights already
        hold Gemma's 1 + w)."""
        o = self.ops
        x32 = o.f32(x)
        r = x32 / o.sqrt(o.mean(x32 * x32, -1) + self.config.eps)
        return o.cast(r * w)

    def _rope_tables(self, positions, layer):
        """cos and sin [n, 1, rope_dim/2] for the positions (angles in float64, then float32)."""
        c = self.config
        glob = c.is_global(layer)
        base = c.rope_base if glob else c.rope_base_local
        scale = c.rope_scale if glob else 1.0
        key = (base, scale)
        inv = self._rope_inv.get(key)
        if inv is None:
            inv = base ** (-np.arange(0, c.rope_dim, 2, dtype=np.float64) / c.rope_dim)
            if self.freq_factors is not None:
                inv = inv / self.freq_factors.astype(np.float64)
            inv = inv / scale
            self._rope_inv[key] = inv
        ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
        o = self.ops
        return (o.f32(o.from_numpy(np.cos(ang)[:, None, :])), o.f32(o.from_numpy(np.sin(ang)[:, None, :])))

    def _rope(self, x, cs):
        """Rotate x [n, heads, head_dim] by the tables cs (rotation in float32)."""
        cos, sin = cs
        o = self.ops
        r = self.config.rope_dim
        y = o.f32(o.copy(x))
        if self.config.rope_neox:
            a, b = y[..., :r // 2], y[..., r // 2:r]
        else:
            a, b = y[..., 0:r:2], y[..., 1:r:2]
        a2 = a * cos - b * sin
        b2 = a * sin + b * cos
        if self.config.rope_neox:
            y[..., :r // 2], y[..., r // 2:r] = a2, b2
        else:
            y[..., 0:r:2], y[..., 1:r:2] = a2, b2
        return o.contiguous(o.cast(y))

    def _qkv(self, layer, h, cs):
        """q [n, n_head, D], k and v [n, n_head_kv, D] of the normed input h [n, hidden], with
        Gemma's per-head norms and the rotation applied to q and k."""
        c, w, o = self.config, self.w["layers"][layer], self.ops
        n = h.shape[0]
        q = (h @ w["wq"].T).reshape(n, c.n_head, c.head_dim)
        k = (h @ w["wk"].T).reshape(n, c.n_head_kv, c.head_dim)
        v = o.contiguous((h @ w["wv"].T).reshape(n, c.n_head_kv, c.head_dim))
        if "q_norm" in w:
            q = self._norm(q, w["q_norm"])
            k = self._norm(k, w["k_norm"])
        return self._rope(q, cs), self._rope(k, cs), v

    def _softmax_rows(self, s):
        o = self.ops
        s = s - o.amax(s, -1)
        p = o.exp(s)
        return p / o.sum(p, -1)

    def _after_attention(self, layer, x, a):
        """The residual stream after the attention output a [n, n_head*D] and the MLP."""
        c, w, o = self.config, self.w["layers"][layer], self.ops
        y = a @ w["wo"].T
        if "post_attn_norm" in w:
            y = self._norm(y, w["post_attn_norm"])
        x = x + y
        h = self._norm(x, w["ffn_norm"])
        g = h @ w["w_gate"].T
        u = h @ w["w_up"].T
        if c.arch == "gemma3":  # GeGLU with the tanh approximation of GELU
            g32 = o.f32(g)
            act = o.cast(0.5 * g32 * (1.0 + o.tanh(SQRT_2_OVER_PI * (g32 + 0.044715 * g32 * g32 * g32))))
        else:  # SwiGLU
            g32 = o.f32(g)
            act = o.cast(g32 * o.sigmoid(g32))
        y = (act * u) @ w["w_down"].T
        if "post_ffn_norm" in w:
            y = self._norm(y, w["post_ffn_norm"])
        return x + y

    def _logits(self, x):
        """float32 logits [n, vocab] of the final hidden states x [n, hidden]."""
        c, o = self.config, self.ops
        h = o.f32(self._norm(x, self.w["output_norm"]))
        logits = h @ self.w["output"].T
        if c.final_softcap:
            logits = c.final_softcap * o.tanh(logits / c.final_softcap)
        return logits

    def _embed(self, ids):
        o = self.ops
        x = self.w["embed"][o.ids(ids)]
        if self.config.embed_scale != 1.0:
            x = o.cast(o.f32(x) * self.config.embed_scale)
        return x

    def _window(self, layer):
        c = self.config
        return 0 if c.is_global(layer) else c.sliding_window

    # ---- prefill -----------------------------------------------------------------------

    def _attend_prefill(self, q, k, v, window):
        """Exact causal attention of q [n, H, D] over k, v [n, Hkv, D]: query i sees keys
        j <= i, and with a window W only j > i - W (itself and the W - 1 before it). Queries go
        in chunks of at most QUERY_CHUNK, each against only the keys it can see, so the score
        block stays small and little of the causal triangle's masked half is computed."""
        c, o = self.config, self.ops
        n, H, D = q.shape
        Hkv, G = c.n_head_kv, self.group
        # the scale goes into q once instead of over every score
        qh = o.contiguous(o.permute(o.f32(q).reshape(n, Hkv, G, D), (1, 2, 0, 3))) * c.attn_scale  # [Hkv, G, n, D]
        kh = o.contiguous(o.permute(o.f32(k), (1, 2, 0)))[:, None]  # [Hkv, 1, D, n]
        vh = o.contiguous(o.permute(o.f32(v), (1, 0, 2)))[:, None]  # [Hkv, 1, n, D]
        span = min(n, window) if window else n
        chunk = max(1, min(n, QUERY_CHUNK, SCORE_BLOCK // (H * (span + QUERY_CHUNK))))
        ar = np.arange(chunk)
        causal = o.from_numpy(np.where(ar[None, :] > ar[:, None], -np.inf, 0.0).astype(np.float32))
        pos = np.arange(n)
        out = []
        for c0 in range(0, n, chunk):
            c1 = min(n, c0 + chunk)
            C = c1 - c0
            k0 = max(0, c0 - window + 1) if window else 0
            s = qh[:, :, c0:c1] @ kh[..., k0:c1]  # [Hkv, G, C, keys k0..c1)
            if c.attn_softcap:
                s = c.attn_softcap * o.tanh(s / c.attn_softcap)
            if window and k0 < c1 - window:  # keys that left some query's window
                qi, kj = pos[c0:c1, None], pos[None, k0:c1]
                s += o.from_numpy(np.where((kj > qi) | (kj <= qi - window), -np.inf, 0.0).astype(np.float32))
            else:
                s[..., c0 - k0:] += causal[:C, :C]
            s -= o.amax(s, -1)
            s = o.exp_(s)
            oc = (s @ vh[:, :, k0:c1]) / o.sum(s, -1)  # [Hkv, G, C, D]
            out.append(o.permute(oc, (2, 0, 1, 3)).reshape(C, H * D))
        return o.cast(o.cat(out, 0))

    def prefill(self, ids, nll=False):
        """Run the prompt ids; returns a State (and with nll=True also the negative log-
        likelihood of each ids[t+1] given ids[:t+1], float64 NumPy [n-1])."""
        ids = self._check_ids(ids)
        t0 = time.perf_counter()
        c, o = self.config, self.ops
        n = len(ids)
        x = self._embed(ids)
        tables = {}
        ks, vs = [], []
        for layer in range(c.n_layer):
            w = self.w["layers"][layer]
            key = (c.is_global(layer),)
            if key not in tables:
                tables[key] = self._rope_tables(np.arange(n), layer)
            h = self._norm(x, w["attn_norm"])
            q, k, v = self._qkv(layer, h, tables[key])
            ks.append(o.freeze(k))
            vs.append(o.freeze(v))
            a = self._attend_prefill(q, k, v, self._window(layer))
            x = self._after_attention(layer, x, a)
        last = o.numpy(self._logits(x[n - 1:n]))[0]
        state = State(ids=list(ids), k=ks, v=vs, logits=last, n=n)
        if not nll:
            o.sync()
            state.seconds = time.perf_counter() - t0
            return state
        out = np.zeros(n - 1)
        step = max(1, (1 << 24) // c.vocab)
        for s0 in range(0, n - 1, step):
            s1 = min(n - 1, s0 + step)
            lg = o.numpy(self._logits(x[s0:s1])).astype(np.float64)
            m = lg.max(-1, keepdims=True)
            lse = (m + np.log(np.exp(lg - m).sum(-1, keepdims=True)))[:, 0]
            out[s0:s1] = lse - lg[np.arange(s1 - s0), np.asarray(ids[s0 + 1:s1 + 1])]
        state.seconds = time.perf_counter() - t0
        return state, out

    def nll(self, ids):
        """Per-token negative log-likelihood (nats) of ids[1:] under the model."""
        return self.prefill(ids, nll=True)[1]

    def perplexity(self, ids):
        return float(math.exp(self.nll(ids).mean()))

    def _check_ids(self, ids):
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("the prompt is empty (no token ids)")
        bad = [i for i in ids if not 0 <= i < self.config.vocab]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary [0, {self.config.vocab})")
        return ids

    # ---- decode ------------------------------------------------------------------------

    def generate(self, state, max_new=None, attention=None, force=None, return_logits=False, stop=True,
                 on_token=None):
        """Greedy decoding from a prefilled State (or a list of States: a batch, decoded
        together; returns a list of Results then).

        max_new: tokens to produce (default: len(force), else 64). force: token ids fed
        instead of the argmax (one list, or one per state; teacher forcing), token i is
        force[i] while i < len(force). attention: None for the runner's exact attention in
        every layer, or a QgenAttention through which every full-attention layer attends
        (sliding-window layers stay exact). stop: end a sequence at a stop token (the
        tokenizer's eos_ids) that was chosen, not forced. return_logits: keep the float32
        logits each token was chosen from (the first are the State's). on_token(i, token) is
        called as sequence i's next token is chosen (for streaming)."""
        batch = isinstance(state, (list, tuple))
        states = list(state) if batch else [state]
        if not states:
            raise ValueError("generate: no states")
        for s in states:
            if not isinstance(s, State):
                raise TypeError(f"generate: expected a State from prefill, got {type(s).__name__}")
        B = len(states)
        if force is not None:
            forces = [list(f) for f in force] if batch else [list(force)]
            if len(forces) != B:
                raise ValueError(f"generate: force has {len(forces)} lists for {B} states")
            for f in forces:
                if f:
                    self._check_ids(f)
        else:
            forces = [[] for _ in range(B)]
        if max_new is None:
            max_new = max(len(f) for f in forces) if force is not None else 64
        if max_new < 0:
            raise ValueError(f"generate: max_new = {max_new} is negative")
        c, o = self.config, self.ops
        eos = set(self.tokenizer.eos_ids) if stop else set()
        t0 = time.perf_counter()
        steps = max(0, max_new - 1)  # the last token is chosen, never fed
        exact = ExactAttention()
        exact.bind(self, states, max_new, layers=None if attention is None else
                   [i for i in range(c.n_layer) if not c.is_global(i)])
        if attention is not None:
            attention.bind(self, states, max_new)
        bind_seconds = time.perf_counter() - t0
        out_ids = [[] for _ in range(B)]
        out_logits = [[] for _ in range(B)]
        done = [max_new == 0] * B
        stopped = [False] * B
        logits = np.stack([s.logits for s in states])
        n_steps = 0
        for step in range(max_new):
            chosen = np.argmax(logits, axis=-1)
            toks = []
            for b in range(B):
                t = forces[b][step] if step < len(forces[b]) else int(chosen[b])
                toks.append(t)
                if done[b]:
                    continue
                out_ids[b].append(t)
                if on_token is not None:
                    on_token(b, t)
                if return_logits:
                    out_logits[b].append(logits[b].copy())
                if t in eos and step >= len(forces[b]):
                    done[b] = stopped[b] = True
                if len(out_ids[b]) >= max_new:
                    done[b] = True
            if all(done) or step == steps:
                break
            logits = self._step(states, toks, step, exact, attention)
            n_steps += 1
        o.sync()
        dt = time.perf_counter() - t0
        results = []
        for b in range(B):
            ids = out_ids[b]
            text_ids = ids[:-1] if stopped[b] else ids
            results.append(Result(ids=ids, text=self.tokenizer.decode(text_ids, skip_special=True), stopped=stopped[b],
                                  logits=np.stack(out_logits[b]) if return_logits and out_logits[b] else None,
                                  seconds=dt, steps=n_steps, extra={"bind_seconds": bind_seconds}))
        return results if batch else results[0]

    def _step(self, states, toks, step, exact, attention):
        """Feed one token per sequence at its position; returns float32 logits [B, vocab]."""
        c = self.config
        B = len(states)
        positions = [s.n + step for s in states]
        x = self._embed(toks)
        tables = {}
        for layer in range(c.n_layer):
            w = self.w["layers"][layer]
            key = (c.is_global(layer),)
            if key not in tables:
                tables[key] = self._rope_tables(positions, layer)
            h = self._norm(x, w["attn_norm"])
            q, k, v = self._qkv(layer, h, tables[key])
            through = attention if attention is not None and c.is_global(layer) else exact
            a = through.step(layer, q, k, v)
            x = self._after_attention(layer, x, a.reshape(B, c.n_head * c.head_dim))
        return self.ops.numpy(self._logits(x))


class ExactAttention:
    """The runner's own decode attention, with the interface of QgenAttention (bind, step):
    exact softmax attention in float32 over a State's prompt K, V and the decode's new
    tokens, which it keeps in arrays of its own (the State is only read). A sliding-window
    layer sees the current token and the window - 1 before it."""

    def bind(self, model, states, max_new, layers=None):
        """layers: the layers to keep new K, V for (default: all)."""
        c, o = model.config, model.ops
        self.model, self.states = model, list(states)
        B, steps = len(states), max(1, max_new)
        layers = range(c.n_layer) if layers is None else layers
        self.k = {i: o.zeros((B, steps, c.n_head_kv, c.head_dim)) for i in layers}
        self.v = {i: o.zeros((B, steps, c.n_head_kv, c.head_dim)) for i in layers}
        self.count = {i: 0 for i in layers}

    def step(self, layer, q, k, v):
        """Append k, v [B, n_head_kv, D] as each sequence's next token and attend q
        [B, n_head, D] (token i is sequence i's); returns [B, n_head, D]."""
        t = self.count[layer]
        self.k[layer][:, t] = k
        self.v[layer][:, t] = v
        self.count[layer] = t + 1
        o = self.model.ops
        return o.cat([self._one(layer, q[b], b, t)[None] for b in range(q.shape[0])], 0)

    def _one(self, layer, q, b, t):
        m = self.model
        c, o, state = m.config, m.ops, self.states[b]
        H, D = q.shape
        pos = state.n + t
        window = m._window(layer)
        lo = max(0, pos - window + 1) if window else 0
        qg = o.f32(q).reshape(c.n_head_kv, m.group, D)
        parts = []
        if lo < state.n:
            parts.append((state.k[layer][lo:], state.v[layer][lo:]))
        lo_new = max(0, lo - state.n)
        parts.append((self.k[layer][b, lo_new:t + 1], self.v[layer][b, lo_new:t + 1]))
        scores = [qg @ o.permute(o.f32(kk), (1, 2, 0)) for kk, _ in parts]  # [Hkv, G, tokens]
        s = (o.cat(scores, -1) if len(scores) > 1 else scores[0]) * c.attn_scale
        if c.attn_softcap:
            s = c.attn_softcap * o.tanh(s / c.attn_softcap)
        p = m._softmax_rows(s)
        out, start = 0, 0
        for _, vv in parts:
            n = vv.shape[0]
            out = out + p[..., start:start + n] @ o.permute(o.f32(vv), (1, 0, 2))
            start += n
        return o.cast(out.reshape(H, D))
