#!/usr/bin/env python3
"""e2e.py — whole-model decode speed of a Qwen3-4B-shaped model: qgen against PyTorch SDPA.

    QGEN_LIBRARY=build/libqgen.so python3 bench/e2e.py --json bench/results/e2e-h200.json \\
        --md bench/results/e2e-h200.md --png bench/results/e2e-h200.png

The model (36 layers, 32 query / 8 KV heads, head_dim 128, hidden 2560, intermediate
9728, vocab 151936, tied embeddings) is built from Qwen3Config with seeded random bf16
weights on the GPU (decode speed does not depend on their values). The KV caches are
filled directly to the context: random K/V appended through qgen's append in big chunks,
or a preallocated static cache [B, 8, ctx + slack, 128] filled with random values for
SDPA. One decode step (embedding, every layer, final norm, lm head) is written here from
the model's own modules and captured in ONE CUDA graph per configuration:

    noattn          the step with attention replaced by the identity on q (projections,
                    norms, RoPE, MLPs and head kept): attention cost = step - noattn
    sdpa            torch SDPA, cuDNN backend, enable_gqa, over the static cache
    qgen-KV-dense   qgen dense; KV = the cache type (f16, bf16, q8_0, q4_0, q5_0)
    qgen-KV-P       qgen sparse attending P % of the pages (e.g. qgen-f16-25, qgen-q4_0-6.25)
    hf-generate     what a transformers user gets: model.generate with the default
                    DynamicCache (pre-filled to the context), SDPA, eager, no graph

A qgen graph replays as consecutive decode steps: its append is qgen_append_decode, which
writes each new token at the length the device holds, so every replay appends one token
and attends over one more (a few dozen over a run, noise at these contexts). The SDPA
graph writes one fixed slot of its static cache and attends ctx + 1 tokens every replay. Times are the median of the timed replays (CUDA
events) after warm-up replays. For every qgen configuration the attention of the same
cell is also timed alone: the layer count x (append + attend), and x attend only, each
captured as one graph, so "e2e attention cost / (layers x one-layer time)" is measured in
the same call. The floor is (weight bytes + KV bytes the step reads) / bandwidth, with
the bandwidth the larger of a 4 GiB device-to-device copy ((read + written) / time) and
a read-only sum over 4 GiB, both measured in this run (the JSON keeps both). A
configuration whose memory (estimated before building it) does not fit the free GPU
memory is recorded as "does not fit".
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import qgen  # noqa: E402
from qgen.tp import head_range, rank_fields  # noqa: E402
from qgen.transformers import spec_fields  # noqa: E402

K = 1024
GiB = 1 << 30
HEAD_DIM, N_HEAD, N_KV = 128, 32, 8
PAD = 64             # qgen capacity beyond what the graphs may append (see QgenLayers)
MARGIN = 4 * GiB     # free memory kept for activations, graph pools and workspaces
SINK, RECENT = 64, 256  # the sparse spec's always-attended tokens (as in specs/qwen3-4b.lua)
FILL_CHUNK = 32 * K  # tokens per sequence per fill append
DTYPE = torch.bfloat16

QGEN_DEFAULT = ["qgen-f16-dense", "qgen-f16-25", "qgen-f16-6.25", "qgen-q8_0-dense", "qgen-q8_0-25",
                "qgen-q8_0-6.25", "qgen-q4_0-dense", "qgen-q4_0-25", "qgen-q4_0-6.25"]
DEFAULT_CONFIGS = ["noattn", "sdpa"] + QGEN_DEFAULT + ["hf-generate"]


def size(text):
    t = text.strip().upper()
    mult = {"K": K, "M": K * K}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def ctx_name(n):
    return f"{n // (K * K)}M" if n >= K * K and n % (K * K) == 0 else f"{n // K}K" if n % K == 0 else str(n)


def parse_qgen(name):
    """'qgen-q4_0-25' -> ('q4_0', 0.25); 'qgen-f16-dense' -> ('f16', None)."""
    parts = name.split("-")
    if len(parts) != 3 or parts[0] != "qgen":
        raise SystemExit(f"e2e.py: bad configuration {name!r}; expected qgen-KV-dense or qgen-KV-PERCENT")
    if parts[2] == "dense":
        return parts[1], None
    pct = float(parts[2])
    if not 0 < pct <= 100:
        raise SystemExit(f"e2e.py: bad coverage in {name!r}; a percentage in (0, 100]")
    return parts[1], pct / 100


# ---- environment -------------------------------------------------------------------------

def environment(argv):
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        driver = "unknown (nvidia-smi not available)"
    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    return {
        "command": " ".join(["python3"] + argv),
        "gpu": props.name, "gpu_memory_gib": round(props.total_memory / GiB, 1), "driver": driver,
        "cuda": torch.version.cuda, "torch": torch.__version__, "transformers": tf_version,
        "python": platform.python_version(), "qgen_library": os.environ.get("QGEN_LIBRARY", "(default)"),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def bandwidth():
    """(copy GB/s as (read + written) / time, read-only sum GB/s), medians of 10."""
    n = 4 * GiB // 2
    src = torch.empty(n, dtype=DTYPE, device="cuda").normal_()
    dst = torch.empty_like(src)
    acc = torch.empty((), dtype=torch.float32, device="cuda")

    def med(fn):
        for _ in range(3):
            fn()
        times = []
        for _ in range(10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        return statistics.median(times)

    copy = 2 * src.numel() * 2 / med(lambda: dst.copy_(src)) / 1e9
    read = src.numel() * 2 / med(lambda: torch.sum(src, dim=0, dtype=torch.float32, out=acc)) / 1e9
    return copy, read  # the buffers go with this frame; need() empties the allocator's cache


# ---- the model and its decode step ---------------------------------------------------------

def build_model(n_layers, max_pos):
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=n_layers,
                      num_attention_heads=N_HEAD, num_key_value_heads=N_KV, head_dim=HEAD_DIM,
                      tie_word_embeddings=True, max_position_embeddings=max_pos, use_cache=True)
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(DTYPE)
    try:
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    finally:
        torch.set_default_dtype(prev)
    model = model.to(device="cuda", dtype=DTYPE).eval()
    model.generation_config.eos_token_id = None
    return model


def weight_bytes(model):
    """Bytes of every distinct parameter: what one decode step reads (the tied embedding
    is read once, as the lm head; its one embedding row is noise)."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())


def module_step(model, attention):
    """The decode step as transformers' modules compute it (one call per module); the
    benchmark times fused_step and checks it against this one (check_step)."""
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    m = model.model

    def step(tok, pos):
        h = m.embed_tokens(tok)
        cos, sin = m.rotary_emb(h, pos)
        b = tok.shape[0]
        for i, layer in enumerate(m.layers):
            a = layer.self_attn
            x = layer.input_layernorm(h)
            q = a.q_norm(a.q_proj(x).view(b, 1, -1, HEAD_DIM)).transpose(1, 2)
            k = a.k_norm(a.k_proj(x).view(b, 1, -1, HEAD_DIM)).transpose(1, 2)
            v = a.v_proj(x).view(b, 1, -1, HEAD_DIM).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            h = h + a.o_proj(attention(i, q, k, v))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return model.lm_head(m.norm(h))

    return step


def _pre_attention(h, wn, wqkv, qn, kn, cos, sin, eps: float, n_head: int = N_HEAD, n_kv: int = N_KV):
    """Norm, the q|k|v projection, q/k norms and RoPE of one layer -> q, k, v [B, 1, heads, D]
    (n_head query and n_kv KV heads: a tensor-parallel rank's share)."""
    b, half = h.shape[0], HEAD_DIM // 2
    x = F.rms_norm(h, (h.shape[-1],), wn, eps)
    qkv = F.linear(x, wqkv).view(b, 1, n_head + 2 * n_kv, HEAD_DIM)
    qk = torch.cat([F.rms_norm(qkv[:, :, :n_head], (HEAD_DIM,), qn, eps),
                    F.rms_norm(qkv[:, :, n_head:n_head + n_kv], (HEAD_DIM,), kn, eps)], 2)
    qk = qk * cos + torch.cat([-qk[..., half:], qk[..., :half]], -1) * sin
    # contiguous here, where torch.compile writes them so from its own kernels: qgen takes
    # [B, heads, D] rows, and slices of qk / qkv are strided for B > 1
    return qk[:, :, :n_head].contiguous(), qk[:, :, n_head:].contiguous(), qkv[:, :, n_head + n_kv:].contiguous()


def _mlp(h, wn, wgu, wd, eps: float):
    """Norm and gate|up MLP of one layer (no residual)."""
    gu = F.linear(F.rms_norm(h, (h.shape[-1],), wn, eps), wgu)
    inter = gu.shape[-1] // 2
    return F.linear(F.silu(gu[..., :inter]) * gu[..., inter:], wd)


def _post_attention(h, o, wo, wn, wgu, wd, eps: float):
    """The o projection and residual, norm, gate|up MLP and residual of one layer."""
    h = h + F.linear(o, wo)
    return h + _mlp(h, wn, wgu, wd, eps)


def _post_reduced(h, a, wn, wgu, wd, eps: float):
    """Tensor-parallel: the residual of the all-reduced o projection a, and this rank's
    partial MLP output (the caller all-reduces it and adds it)."""
    h = h + a
    return h, _mlp(h, wn, wgu, wd, eps)


_COMPILED = {}


def make_step(model, attention, compiled=True, all_reduce=None):
    """The same decode step with the launches an engine fuses fused: one q|k|v and one
    gate|up projection, F.rms_norm, RoPE on q and k at once, and (compiled) the pieces
    around attention through torch.compile, one compilation shared by every layer (the
    weights are arguments). Without this the step is launch-bound (~45 kernels a layer),
    which hides what attention costs. attention(i, q, k, v) -> [B, 1, H*D] with
    q [B, H, 1, D] and k, v [B, Hkv, 1, D] (post-norm, post-RoPE). Tensor-parallel (a model
    split by qgen.tp.split_model): the heads are the rank's, and all_reduce(t) sums t over
    the ranks in place, after the o and the down projection."""
    m = model.model
    eps = model.config.rms_norm_eps
    a0 = m.layers[0].self_attn
    n_head, n_kv = a0.q_proj.weight.shape[0] // HEAD_DIM, a0.k_proj.weight.shape[0] // HEAD_DIM
    inter = m.layers[0].mlp.gate_proj.weight.shape[0]
    fused = getattr(model, "_e2e_fused", None)
    if fused is None:  # once per model; the modules' weights become views of the fused ones
        fused = []
        with torch.no_grad():
            for layer in m.layers:
                a, mlp = layer.self_attn, layer.mlp
                wqkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
                wgu = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
                a.q_proj.weight.data, a.k_proj.weight.data, a.v_proj.weight.data = wqkv.split(
                    [n_head * HEAD_DIM, n_kv * HEAD_DIM, n_kv * HEAD_DIM])
                mlp.gate_proj.weight.data, mlp.up_proj.weight.data = wgu.split([inter, inter])
                fused.append((wqkv, wgu))
        model._e2e_fused = fused
        torch.cuda.empty_cache()
    if compiled and not _COMPILED:
        _COMPILED["pre"] = torch.compile(_pre_attention, dynamic=False)
        _COMPILED["post"] = torch.compile(_post_attention, dynamic=False)
        _COMPILED["post_reduced"] = torch.compile(_post_reduced, dynamic=False)
    pre = _COMPILED["pre"] if compiled else _pre_attention
    post = _COMPILED["post"] if compiled else _post_attention
    post_reduced = _COMPILED["post_reduced"] if compiled else _post_reduced

    def step(tok, pos):
        h = m.embed_tokens(tok)
        cos, sin = m.rotary_emb(h, pos)  # [B, 1, D]
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # over the heads
        for i, layer in enumerate(m.layers):
            a = layer.self_attn
            wqkv, wgu = fused[i]
            q, k, v = pre(h, layer.input_layernorm.weight, wqkv, a.q_norm.weight, a.k_norm.weight, cos, sin, eps,
                          n_head, n_kv)
            o = attention(i, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            wn, wd = layer.post_attention_layernorm.weight, layer.mlp.down_proj.weight
            if all_reduce is None:
                h = post(h, o, a.o_proj.weight, wn, wgu, wd, eps)
            else:
                proj = F.linear(o, a.o_proj.weight)
                all_reduce(proj)
                h, d = post_reduced(h, proj, wn, wgu, wd, eps)
                all_reduce(d)
                h = h + d
        return model.lm_head(F.rms_norm(h, (h.shape[-1],), m.norm.weight, eps))

    return step


def check_step(model, compiled):
    """max |fused - modules| / max |modules| of the logits of one step over a small SDPA
    cache: the timed step computes what the model computes."""
    b, ctx = 2, 256
    kc = [torch.randn(b, N_KV, ctx + 1, HEAD_DIM, dtype=DTYPE, device="cuda") for _ in model.model.layers]
    vc = [torch.randn_like(t) for t in kc]

    def attention(i, q, k, v):
        kc[i][:, :, ctx:ctx + 1].copy_(k)
        vc[i][:, :, ctx:ctx + 1].copy_(v)
        o = F.scaled_dot_product_attention(q, kc[i], vc[i], enable_gqa=True)
        return o.transpose(1, 2).reshape(q.shape[0], 1, -1)

    tok = torch.randint(0, model.config.vocab_size, (b, 1), device="cuda")
    pos = torch.full((b, 1), ctx, dtype=torch.long, device="cuda")
    ref = module_step(model, attention)(tok, pos).float()
    got = make_step(model, attention, compiled)(tok, pos).float()
    return ((got - ref).abs().max() / ref.abs().max()).item()


def capture(fn, warm=2):
    """fn run eagerly (warm-up, on a side stream) then captured; -> (graph, its output)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warm):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    torch.cuda.synchronize()
    return g, out


def time_graph(g, warm, n):
    """Median ms of n replays after warm replays."""
    for _ in range(warm):
        g.replay()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in ev:
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in ev)


# ---- configurations ----------------------------------------------------------------------

class DoesNotFit(Exception):
    pass


def need(nbytes, what):
    torch.cuda.empty_cache()
    free = torch.cuda.mem_get_info()[0]
    if nbytes + MARGIN > free:
        raise DoesNotFit(f"{what} needs {nbytes / GiB:.1f} GiB + {MARGIN / GiB:.0f} GiB margin, "
                         f"{free / GiB:.1f} GiB free")


def sdpa_attention(n_layers, batch, ctx, backends):
    cap = ctx + 1  # every replay writes slot ctx
    need(n_layers * 2 * batch * N_KV * cap * HEAD_DIM * 2, f"the static bf16 cache ({ctx_name(ctx)} x B{batch})")
    kc = [torch.empty(batch, N_KV, cap, HEAD_DIM, dtype=DTYPE, device="cuda").normal_() for _ in range(n_layers)]
    vc = [torch.empty_like(t).normal_() for t in kc]
    from torch.nn.attention import sdpa_kernel

    def attention(i, q, k, v):
        kc[i][:, :, ctx:ctx + 1].copy_(k)
        vc[i][:, :, ctx:ctx + 1].copy_(v)
        with sdpa_kernel(backends):
            o = F.scaled_dot_product_attention(q.contiguous(), kc[i], vc[i], enable_gqa=True)
        return o.transpose(1, 2).reshape(q.shape[0], 1, -1)

    kv_read = n_layers * 2 * batch * N_KV * (ctx + 1) * HEAD_DIM * 2
    return attention, kv_read


def pick_sdpa_backend(batch):
    """cuDNN if it takes the decode shape with GQA, else the next backend that does."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(batch, N_HEAD, 1, HEAD_DIM, dtype=DTYPE, device="cuda")
    k = torch.randn(batch, N_KV, 4096, HEAD_DIM, dtype=DTYPE, device="cuda")
    for b in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel([b]):
                F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
            torch.cuda.synchronize()
            return [b], b.name
        except RuntimeError:
            continue
    return [SDPBackend.MATH], "MATH"


class QgenLayers:
    """One qgen cache per layer, filled with random K/V (seeded) to ctx tokens per sequence."""

    def __init__(self, model_cfg, kv_type, sparse, batch, ctx, appends, rank=0, world=1):
        """appends: how many tokens the graphs may add on top of ctx (if the device-side
        lengths advance with every replay), so the capacity is ctx + appends + PAD.
        rank, world: a tensor-parallel rank holds its share of the KV heads (qgen.tp) and
        of the same K/V values."""
        fields = spec_fields(model_cfg, DTYPE, k_type=kv_type, coverage=0.25 if sparse else None,
                             sink=SINK if sparse else None, recent=RECENT if sparse else None)
        self.ctx = qgen.Context(backend="gpu", device=torch.cuda.current_device(), **rank_fields(fields, world))
        info = self.ctx.info
        self.info = info
        self.n_head, self.n_kv = info["n_head"], info["n_head_kv"]
        n_layers = model_cfg.num_hidden_layers
        capacity = ctx + appends + PAD
        pages = batch * math.ceil(capacity / info["block"])
        per_layer = pages * self.n_kv * info["block"] * (info["k_row_bytes"] + info["v_row_bytes"])
        if sparse:
            per_layer += pages * self.n_kv * 2 * HEAD_DIM * 2  # page bounds, f16
        need(n_layers * per_layer, f"{n_layers} qgen {kv_type} caches ({ctx_name(ctx)} x B{batch})")
        self.seqs = list(range(batch))
        self.caches = []
        chunk = min(FILL_CHUNK, ctx)
        gen = torch.Generator(device="cuda").manual_seed(1)
        k0, k1 = head_range(N_KV, world, rank)
        k = torch.randn(batch * chunk, N_KV, HEAD_DIM, dtype=DTYPE, device="cuda", generator=gen)[:, k0:k1].contiguous()
        v = torch.randn(k.shape[0], N_KV, HEAD_DIM, dtype=DTYPE, device="cuda", generator=gen)[:, k0:k1].contiguous()
        for _ in range(n_layers):
            c = self.ctx.cache(batch, capacity)
            self.caches.append(c)
            done = 0
            while done < ctx:
                n = min(chunk, ctx - done)
                rows = k if n == chunk else k[:batch * n]
                c.append(rows, v[:rows.shape[0]], seqs=self.seqs, n_new=[n] * batch)
                done += n
        torch.cuda.synchronize()
        self.pages_per_seq = math.ceil(ctx / info["block"])

    def kv_read(self, ctx, batch, coverage):
        """Bytes the attention of one step reads: the K/V rows attended, plus every page's
        bounds when sparse (the selected tokens estimated as coverage x ctx + sink + recent)."""
        info, n = self.info, len(self.caches)
        rows = ctx + 1 if coverage is None else min(ctx + 1, coverage * ctx + SINK + RECENT)
        nbytes = rows * self.n_kv * (info["k_row_bytes"] + info["v_row_bytes"])
        if coverage is not None:
            nbytes += self.pages_per_seq * self.n_kv * 2 * HEAD_DIM * 2
        return n * batch * nbytes

    def attention(self, coverage, batch):
        outs = [torch.empty(batch, self.n_head, HEAD_DIM, dtype=DTYPE, device="cuda") for _ in self.caches]
        opts = {"dense": True} if coverage is None else {"coverage": coverage}
        n_head, n_kv = self.n_head, self.n_kv

        def attention(i, q, k, v):
            c = self.caches[i]
            c.append_decode(k.reshape(batch, n_kv, HEAD_DIM).contiguous(), v.reshape(batch, n_kv, HEAD_DIM).contiguous(),
                            seqs=self.seqs)
            c.attend(q.reshape(batch, n_head, HEAD_DIM).contiguous(), seqs=self.seqs, out=outs[i], **opts)
            return outs[i].view(batch, 1, -1)

        return attention

    def alone(self, coverage, batch, warm, n):
        """ms of (append + attend) and of attend only, over all layers, each one graph."""
        opts = {"dense": True} if coverage is None else {"coverage": coverage}
        q = torch.randn(batch, self.n_head, HEAD_DIM, dtype=DTYPE, device="cuda")
        k = torch.randn(batch, self.n_kv, HEAD_DIM, dtype=DTYPE, device="cuda")
        out = torch.empty_like(q)

        def both():
            for c in self.caches:
                c.append_decode(k, k, seqs=self.seqs)
                c.attend(q, seqs=self.seqs, out=out, **opts)

        def attend_only():
            for c in self.caches:
                c.attend(q, seqs=self.seqs, out=out, **opts)

        res = []
        for fn in (both, attend_only):
            g, _ = capture(fn, warm=1)
            res.append(time_graph(g, warm, n))
            del g
        return res

    def close(self):
        for c in self.caches:
            c.close()
        self.caches = []
        if hasattr(self.ctx, "close"):
            self.ctx.close()


def hf_generate(model, batch, ctx, new_tokens):
    """ms per token of model.generate with a DynamicCache pre-filled to ctx, SDPA, eager."""
    from transformers import DynamicCache, StoppingCriteria, StoppingCriteriaList

    n_layers = model.config.num_hidden_layers
    layer_bytes = 2 * batch * N_KV * (ctx + new_tokens) * HEAD_DIM * 2
    need((n_layers + 1) * layer_bytes, f"a DynamicCache ({ctx_name(ctx)} x B{batch}; each step copies a layer)")
    cache = DynamicCache()
    for i in range(n_layers):
        k = torch.randn(batch, N_KV, ctx, HEAD_DIM, dtype=DTYPE, device="cuda")
        cache.update(k, torch.randn_like(k), i)
        del k
    ids = torch.randint(0, model.config.vocab_size, (batch, ctx + 1), device="cuda")
    stamps = []

    class Stamp(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            torch.cuda.synchronize()
            stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache, max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                       stopping_criteria=StoppingCriteriaList([Stamp()]))
    held = cache.get_seq_length()
    del cache, ids
    # the prompt's last token and new_tokens - 1 decode steps each add one
    if held != ctx + new_tokens:
        raise RuntimeError(f"generate did not decode on the pre-filled cache: it holds {held} tokens, "
                           f"expected {ctx + new_tokens}")
    steps = [b - a for a, b in zip(stamps, stamps[1:])]
    return statistics.median(steps) * 1e3


# ---- the run -----------------------------------------------------------------------------

def run_cell(model, batch, ctx, configs, a, bw, wbytes, rows):
    n_layers = model.config.num_hidden_layers
    tok = torch.zeros(batch, 1, dtype=torch.long, device="cuda")
    pos = torch.full((batch, 1), ctx, dtype=torch.long, device="cuda")
    base = {"ctx": ctx, "batch": batch}
    noattn_ms = None

    def record(name, ms, kv_read, extra=None):
        floor = (wbytes + kv_read) / (bw * 1e9) * 1e3
        r = dict(base, config=name, status="ok", ms=round(ms, 4), tok_s=round(batch * 1e3 / ms, 2),
                 weight_bytes=wbytes, kv_read_bytes=int(kv_read), floor_ms=round(floor, 4),
                 vs_floor=round(ms / floor, 3))
        if noattn_ms is not None and name != "noattn":
            r["attn_ms"] = round(ms - noattn_ms, 4)
        r.update(extra or {})
        rows.append(r)
        print(f"  {name:18s} {ms:8.3f} ms  {r['tok_s']:9.2f} tok/s  floor {floor:7.3f} ms (x{r['vs_floor']})"
              + (f"  attention {r['attn_ms']:.3f} ms" if "attn_ms" in r else ""), flush=True)

    def skip(name, status, why):
        rows.append(dict(base, config=name, status=status, reason=why))
        print(f"  {name:18s} {status}: {why}", flush=True)

    def graph_ms(attention):
        step = make_step(model, attention)
        g, _ = capture(lambda: step(tok, pos))
        ms = time_graph(g, a.warm, a.steps)
        del g
        return ms

    # every graph configuration needs the no-attention step of its cell
    noattn_ms = graph_ms(lambda i, q, k, v: q.transpose(1, 2).reshape(q.shape[0], 1, -1))
    record("noattn", noattn_ms, 0)
    def run_sdpa():  # its static cache goes with this frame
        backends, backend_name = pick_sdpa_backend(batch)
        attention, kv_read = sdpa_attention(n_layers, batch, ctx, backends)
        record("sdpa", graph_ms(attention), kv_read, {"sdpa_backend": backend_name})

    if "sdpa" in configs:
        try:
            run_sdpa()
        except DoesNotFit as e:
            skip("sdpa", "does not fit", str(e))
        except RuntimeError as e:  # torch.OutOfMemoryError is one
            skip("sdpa", "error", str(e).splitlines()[0])
        torch.cuda.empty_cache()
    groups = {}
    for c in configs:
        if c.startswith("qgen-"):
            kv, cov = parse_qgen(c)
            groups.setdefault((kv, cov is not None), []).append((c, cov))
    for (kv, sparse), members in groups.items():
        # per member: the step graph (2 eager warm-ups, the capture, the replays) and the
        # append+attend graph (1 warm-up, the capture, the replays)
        appends = len(members) * (2 * (a.warm + a.steps) + 5)
        layers = None
        try:
            layers = QgenLayers(model.config, kv, sparse, batch, ctx, appends)
            for name, cov in members:
                ms = graph_ms(layers.attention(cov, batch))
                both, attend = layers.alone(cov, batch, a.warm, a.steps)
                record(name, ms, layers.kv_read(ctx, batch, cov),
                       {"layers_x_append_attend_ms": round(both, 4), "layers_x_attend_ms": round(attend, 4),
                        "attn_vs_alone": round((ms - noattn_ms) / both, 3), "spec": layers.info.get("name"),
                        "k_type": kv, "coverage": cov})
        except DoesNotFit as e:
            for name, _ in members:
                skip(name, "does not fit", str(e))
        except (qgen.Error, RuntimeError) as e:
            done = {r["config"] for r in rows if r["ctx"] == ctx and r["batch"] == batch}
            for name, _ in members:
                if name not in done:
                    skip(name, "error", str(e).splitlines()[0])
        if layers is not None:
            layers.close()
        del layers
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctx", default="32K,128K,512K,1M", help="contexts for batch 1 (default %(default)s)")
    ap.add_argument("--batch", default="1", help="batch sizes for every --ctx (default %(default)s)")
    ap.add_argument("--extra", default="4@128K", help="more cells BATCH@CTX (default %(default)s; '' = none)")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), help="default: %(default)s")
    ap.add_argument("--hf-ctx", default="1K,512K", help="contexts of hf-generate (default %(default)s)")
    ap.add_argument("--hf-tokens", type=int, default=16, help="new tokens per hf-generate run")
    ap.add_argument("--steps", type=int, default=30, help="timed replays per graph (>= 20 for the record)")
    ap.add_argument("--warm", type=int, default=5, help="untimed replays before timing")
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 layers, 4K and 16K, few replays")
    ap.add_argument("--json")
    ap.add_argument("--md")
    ap.add_argument("--png")
    ap.add_argument("--no-compile", action="store_true", help="the fused step without torch.compile")
    a = ap.parse_args()
    if a.quick:
        a.layers, a.ctx, a.extra, a.hf_ctx, a.steps, a.warm = 2, "4K,16K", "2@4K", "1K", 5, 2
    if not torch.cuda.is_available():
        raise SystemExit("e2e.py: needs a CUDA device")
    if a.steps < 1 or a.warm < 0:
        raise SystemExit("e2e.py: --steps must be >= 1 and --warm >= 0")
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    for c in configs:
        if c.startswith("qgen-"):
            parse_qgen(c)
        elif c not in ("noattn", "sdpa", "hf-generate"):
            raise SystemExit(f"e2e.py: unknown configuration {c!r}")
    cells = [(size(b), size(c)) for b in a.batch.split(",") for c in a.ctx.split(",")]
    cells += [(size(e.split("@")[0]), size(e.split("@")[1])) for e in a.extra.split(",") if e.strip()]

    env = environment(sys.argv)
    t0 = time.time()
    copy_bw, read_bw = bandwidth()
    bw = max(copy_bw, read_bw)
    env.update(bandwidth_copy_gb_s=round(copy_bw, 1), bandwidth_read_gb_s=round(read_bw, 1),
               bandwidth_floor_gb_s=round(bw, 1),
               bandwidth_floor_from="device-to-device copy" if copy_bw >= read_bw else "read-only sum",
               replays="qgen: every replay is the next decode step (qgen_append_decode advances the "
                       "device-side lengths); sdpa: every replay writes the same slot and attends ctx + 1",
               steps=a.steps, warm=a.warm, layers=a.layers)
    print(f"{env['gpu']}, driver {env['driver']}, torch {env['torch']}, transformers {env['transformers']}")
    print(f"bandwidth: copy {copy_bw:.0f} GB/s (read + written), read-only sum {read_bw:.0f} GB/s; floor uses {bw:.0f}")

    max_ctx = max(c for _, c in cells)
    hf_ctx = [size(c) for c in a.hf_ctx.split(",") if c.strip()] if "hf-generate" in configs else []
    model = build_model(a.layers, max(max_ctx, max(hf_ctx, default=0)) + 4096)
    wbytes = weight_bytes(model)
    env["weight_bytes"] = wbytes
    print(f"model: {a.layers} layers, {wbytes / 1e9:.2f} GB of weights "
          f"(read alone in {wbytes / (bw * 1e9) * 1e3:.2f} ms)")
    rows = []
    # first, while the process is as a transformers user has it (before torch.compile)
    for ctx in hf_ctx:
        row = {"config": "hf-generate", "ctx": ctx, "batch": 1}
        try:
            ms = hf_generate(model, 1, ctx, a.hf_tokens)
            row.update(status="ok", ms=round(ms, 3), tok_s=round(1e3 / ms, 2))
            print(f"hf-generate B1 {ctx_name(ctx)}: {ms:.2f} ms/token, {1e3 / ms:.2f} tok/s", flush=True)
        except DoesNotFit as e:
            row.update(status="does not fit", reason=str(e))
        except RuntimeError as e:
            row.update(status="error", reason=str(e).splitlines()[0])
        if row["status"] != "ok":
            print(f"hf-generate B1 {ctx_name(ctx)}: {row['status']}: {row['reason']}", flush=True)
        rows.append(row)
        torch.cuda.empty_cache()
    with torch.no_grad():
        env["step_check_rel_err"] = check_step(model, not a.no_compile)
    env["step"] = "fused, torch.compile around attention" if not a.no_compile else "fused, eager"
    print(f"fused step vs the modules' step, logits max rel. error {env['step_check_rel_err']:.2e}")
    for batch, ctx in cells:
        print(f"B{batch} {ctx_name(ctx)}:", flush=True)
        with torch.no_grad():
            run_cell(model, batch, ctx, configs, a, bw, wbytes, rows)
    env["runtime_s"] = round(time.time() - t0, 1)
    print(f"done in {env['runtime_s']} s")
    doc = {"env": env, "rows": rows}
    save(doc, a.json, a.md, markdown)
    if a.png:
        plot(doc, a.png)


def save(doc, json_path, md_path, render):
    """doc as JSON to json_path and render(doc) as Markdown to md_path, each when given."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump(doc, f, indent=1)
    if md_path:
        with open(md_path, "w") as f:
            f.write(render(doc))


def markdown(doc):
    env, rows = doc["env"], doc["rows"]
    sdpa = {(r["batch"], r["ctx"]): r for r in rows if r["config"] == "sdpa" and r["status"] == "ok"}
    out = [f"# Whole-model decode, Qwen3-4B shape ({env['layers']} layers), {env['gpu']}", "",
           f"`{env['command']}`", "",
           f"GPU {env['gpu']} ({env['gpu_memory_gib']} GiB), driver {env['driver']}, CUDA {env['cuda']}, "
           f"torch {env['torch']}, transformers {env['transformers']}, Python {env['python']}, {env['date']}.", "",
           f"Bandwidth in this run: copy {env['bandwidth_copy_gb_s']} GB/s ((read + written) / time), read-only "
           f"sum {env['bandwidth_read_gb_s']} GB/s; the floor uses {env['bandwidth_floor_gb_s']} GB/s "
           f"({env['bandwidth_floor_from']}). Weights: {env['weight_bytes'] / 1e9:.2f} GB.", "",
           "The timed step fuses in plain PyTorch what an engine fuses (one q|k|v and one gate|up "
           "projection, F.rms_norm, RoPE on q and k at once; with torch.compile around attention unless "
           "--no-compile); its logits match the step of transformers' modules to "
           f"{env.get('step_check_rel_err', float('nan')):.1e} (max |difference| / max |logit|: bf16 rounding in "
           "another order, grown through the layers of random weights; the 2-layer --quick run gives ~6e-3).", "",
           f"Each configuration's whole decode step is one CUDA graph; ms = median of {env['steps']} replays "
           f"after {env['warm']} warm-up replays; {env['replays']}. attention = step - noattn (same cell). "
           "L x layer = the layer count x (append + attend), the qgen calls alone as one graph; "
           "ratio = attention / L x layer. floor = (weights + KV bytes read) / bandwidth.", "",
           "| config | B | context | ms/token | tokens/s | x SDPA tok/s | floor ms | ms/floor | attention ms "
           "| L x layer ms | ratio |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["config"] == "hf-generate":
            continue
        head = f"| {r['config']} | {r['batch']} | {ctx_name(r['ctx'])} "
        if r["status"] != "ok":
            out.append(head + f"| {r['status']} | | | | | | | |")
            continue
        s = sdpa.get((r["batch"], r["ctx"]))
        vs = f"{r['tok_s'] / s['tok_s']:.2f}" if s and r["config"] != "noattn" else ""
        out.append(head + f"| {r['ms']:.3f} | {r['tok_s']:.1f} | {vs} | {r['floor_ms']:.3f} | {r['vs_floor']:.2f} "
                   f"| {r.get('attn_ms', '')} | {r.get('layers_x_append_attend_ms', '')} "
                   f"| {r.get('attn_vs_alone', '')} |")
    hf = [r for r in rows if r["config"] == "hf-generate"]
    if hf:
        out += ["", "Out of the box: `model.generate` with the default DynamicCache (pre-filled to the context), "
                "SDPA, eager, no graph, batch 1:", "", "| context | ms/token | tokens/s |", "|---|---|---|"]
        for r in hf:
            out.append(f"| {ctx_name(r['ctx'])} | {r['ms']:.2f} | {r['tok_s']:.2f} |" if r["status"] == "ok"
                       else f"| {ctx_name(r['ctx'])} | {r['status']} | |")
    return "\n".join(out) + "\n"


def plot(doc, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("e2e.py: matplotlib is not importable; no --png written")
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    names = []
    for r in doc["rows"]:
        if r["config"] not in names and r["config"] != "hf-generate":
            names.append(r["config"])
    for name in names:
        pts = sorted((r["ctx"], r["tok_s"]) for r in doc["rows"]
                     if r["config"] == name and r["batch"] == 1 and r["status"] == "ok")
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context (tokens), batch 1")
    ax.set_ylabel("tokens/s (whole model, one CUDA graph per step)")
    ax.set_title(f"Qwen3-4B shape decode, {doc['env']['gpu']}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
