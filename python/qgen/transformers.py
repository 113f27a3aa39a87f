"""qgen.transformers — qgen as the decode attention of a Hugging Face transformers model.

    import qgen.transformers as qt          # registers attn_implementation "qgen"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="qgen", dtype=torch.bfloat16).cuda()
    cache = qt.QgenCache(model.config, max_tokens=40_000, k_type="q8_0", coverage=0.25)
    out = model.generate(ids, past_key_values=cache, max_new_tokens=64, do_sample=False)

A model on the CPU gets qgen's CPU backend (the reference kernels: for tests). Under tensor
parallelism each rank's attention sees its share of the heads; QgenCache(..., tp_size=world)
makes each rank's spec with n_head/world and n_head_kv/world heads (qgen.tp says why that
is all a rank needs).

How it works. QgenCache holds one qgen cache per model layer (a QgenLayer). The prompt
(query length > 1, an empty cache) runs through torch SDPA, causal, on its own K/V; its
K/V rows (post-RoPE, post-norm, as the model computes them) are appended to the qgen
caches. Every later step has one query token per sequence: its K/V are appended, then
qgen attends (dense, or sparse with the spec's budget). A step of several tokens after the
prompt (the verify step of assisted generation or prompt lookup: up to 16 draft tokens)
attends them causally in one qgen call with one page selection for the step, and crop
(the rejected drafts) rolls the qgen caches back; both run on qgen's CPU backend only so
far (its GPU kernels take one query token a step). The spec is derived from the
model config (head_dim, heads), the cache types and the budget given here, and the model
dtype (in_type = out_type). The K tensor that the cache hands back to the model carries
its QgenLayer (attribute `_qgen_layer`): that is how the attention function, which
transformers calls without the cache, finds the layer to attend.

Supported: decoder-only models whose attention is plain causal softmax attention with
RoPE applied before the cache (Llama, Qwen3 and their relatives), a batch of prompts (left
padded: the pads stay out of the qgen caches), greedy or sampled decoding, and on the CPU
assisted generation, prompt lookup and sliding-window layers (Gemma 3). Refused with an
error, rather than computing something else: right padding or holes in the attention_mask,
chunked layers, beam search and anything else that reorders, repeats or selects the cache,
a step of more than 16 tokens after the prompt (chunked prefill), several tokens a step,
crop, sliding-window layers or attention sinks on a GPU, soft-capping, training-mode
dropout.
"""
import abc
import math
import re
import sys

try:
    import torch
    from transformers import AttentionInterface
    from transformers.cache_utils import Cache, CacheLayerMixin
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    _IMPORT_ERROR = None
except ImportError as e:  # spec_fields and check_config still work without them
    _IMPORT_ERROR = e
    Cache = CacheLayerMixin = object

NAME = "qgen"  # the attn_implementation name

IO_TYPES = {"torch.bfloat16": "bf16", "torch.float16": "f16", "torch.float32": "f32",
             "bf16": "bf16", "f16": "f16", "f32": "f32"}


def text_config(config):
    """The decoder's config (multimodal configs nest it)."""
    get = getattr(config, "get_text_config", None)
    if get is None:
        return config
    try:
        return get(decoder=True)
    except TypeError:
        return get()


def layer_windows(config):
    """Each layer's sliding window in tokens (0: full attention), from the config's
    layer_types; None when the config has no layer_types."""
    cfg = text_config(config)
    types = getattr(cfg, "layer_types", None)
    if types is None:
        return None
    return [int(cfg.sliding_window) if t == "sliding_attention" else 0 for t in types]


def check_config(config):
    """Raise NotImplementedError when the model has attention qgen does not compute."""
    cfg = text_config(config)
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        other = sorted({t for t in types if t not in ("full_attention", "sliding_attention")})
        if other:
            raise NotImplementedError(f"qgen: the model has {', '.join(other)} layers; qgen computes full and "
                                      "sliding-window causal attention (chunked and other layers are not supported)")
        if "sliding_attention" in types and not int(getattr(cfg, "sliding_window", 0) or 0) > 0:
            raise NotImplementedError("qgen: the model has sliding_attention layers but no sliding_window")
    elif getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        raise NotImplementedError(f"qgen: the model uses a sliding window of {cfg.sliding_window} tokens; "
                                  "sliding-window attention is not supported")
    if getattr(cfg, "attention_chunk_size", None):
        raise NotImplementedError("qgen: chunked attention (attention_chunk_size) is not supported")
    for field in ("attn_logit_softcapping", "attention_logit_softcapping"):
        if getattr(cfg, field, None):
            raise NotImplementedError(f"qgen: attention soft-capping ({field}) is not supported")


def spec_fields(config, dtype, *, k_type="f16", v_type=None, coverage=None, budget=None, block=None,
                sink=None, recent=None):
    """The qgen.Context keyword fields for this model config: heads and head_dim from the
    config, in/out type from dtype (a torch dtype or "bf16"/"f16"/"f32"), the KV cache
    types, and the sparse budget (coverage, a fraction of pages, or budget, tokens;
    neither = a dense spec)."""
    cfg = text_config(config)
    n_head = int(cfg.num_attention_heads)
    n_head_kv = int(getattr(cfg, "num_key_value_heads", None) or n_head)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head)
    io = IO_TYPES.get(str(dtype))
    if io is None:
        raise ValueError(f"qgen: model dtype {dtype} is not supported; allowed: bfloat16, float16, float32")
    if coverage is not None and budget is not None:
        raise ValueError("qgen: give coverage (a fraction of pages) or budget (tokens), not both")
    name = re.sub(r"[^A-Za-z0-9._-]", "-", str(getattr(cfg, "model_type", None) or "hf"))[:48]
    # Gemma's attention scale is query_pre_attn_scalar^-1/2, the others' head_dim^-1/2
    scalar = getattr(cfg, "query_pre_attn_scalar", None) or head_dim
    fields = dict(name=f"{name}-hf", head_dim=head_dim, n_head=n_head, n_head_kv=n_head_kv,
                  k_type=k_type, v_type=v_type or k_type, in_type=io, out_type=io,
                  scale=1.0 / math.sqrt(scalar))
    if coverage is not None or budget is not None:
        sparse = {"coverage": float(coverage)} if coverage is not None else {"budget": int(budget)}
        for key, val in (("block", block), ("sink", sink), ("recent", recent)):
            if val is not None:
                sparse[key] = int(val)
        fields["sparse"] = sparse
    elif block is not None or sink is not None or recent is not None:
        raise ValueError("qgen: block, sink and recent apply to a sparse cache; give coverage or budget too")
    return fields


def _query_len(query):
    # transformers 5.4+ passes the query length; older versions the cache positions
    return int(query.shape[0]) if hasattr(query, "shape") else int(query)


def _refused(what):
    raise NotImplementedError(f"qgen: {what} is not supported by QgenCache")


# The most tokens of one step after the prompt (qgen.h's QGEN_MAX_STEP_TOKENS).
MAX_STEP_TOKENS = 16


class QgenLayer(CacheLayerMixin):
    """One model layer's qgen cache. Created empty; the qgen cache itself is made at the
    first update, when the batch size, dtype and device are known."""

    is_sliding = False
    is_compileable = False
    is_croppable = True

    def __init__(self, owner, layer_idx):
        super().__init__()
        self.owner, self.layer_idx = owner, layer_idx
        self.kv = None          # the qgen Cache
        self.length = 0         # tokens per sequence (all sequences have equal lengths)
        self.seqs = []
        self.prefill = False    # the last update was a prompt: attention goes to SDPA
        self.pending = None     # the prompt's K/V until its attention tells its padding
        self.n_step = 1         # query tokens of the current step after the prompt
        self.steps = 0          # decode attends since the prompt (QgenCache reselect)
        self.window = (owner.windows or [0] * (layer_idx + 1))[layer_idx]  # sliding window (0: none)
        self.reused = 0         # of them, those over a reused selection
        self.verify_steps = 0   # of them, steps of several tokens (one qgen call each)
        self.rolled_back = 0    # tokens removed by crop

    def lazy_initialization(self, key_states, *args, **kwargs):
        ctx = self.owner.context(key_states.dtype, key_states.device)
        batch = key_states.shape[0]
        self.kv = ctx.cache(batch, self.owner.max_tokens)
        self.scale = ctx.info["scale"]
        self.seqs = list(range(batch))
        self.dtype, self.device = key_states.dtype, key_states.device

    def update(self, key_states, value_states, cache_kwargs=None, *args, **kwargs):
        if self.kv is None:
            self.lazy_initialization(key_states)
        batch, n_kv, n_new, head_dim = key_states.shape
        if batch != len(self.seqs):
            raise ValueError(f"qgen: layer {self.layer_idx} holds {len(self.seqs)} sequences, got a batch of {batch}")
        if n_new > 1 and self.length > 0:
            if n_new > MAX_STEP_TOKENS:
                raise NotImplementedError(f"qgen: {n_new} new tokens after a {self.length}-token prompt; a step after "
                                          f"the prompt adds at most {MAX_STEP_TOKENS} (chunked prefill is not supported)")
            most = self.kv.ctx.info["max_step_tokens"]
            if n_new > most:
                raise NotImplementedError(f"qgen: {n_new} new tokens in one step after the prompt; this context's "
                                          f"kernels take at most {most} (Context.info['max_step_tokens']: a bundle "
                                          "holds one-token kernels, and a spec whose engine kernels do not fit the "
                                          "GPU gets fewer)")
        if self.length + n_new > self.owner.max_tokens:
            raise ValueError(f"qgen: layer {self.layer_idx} holds {self.length} tokens per sequence and got {n_new} "
                             f"more; QgenCache(max_tokens={self.owner.max_tokens}) is too small")
        self.prefill = n_new > 1 and self.length == 0
        if self.prefill:  # appended by commit_prompt, once the padding is known
            self.pending = (key_states, value_states)
            self.steps = 0
        else:
            self._append(key_states, value_states, [n_new] * batch)
        self.n_step = n_new
        self.length += n_new
        key_states._qgen_layer = self
        return key_states, value_states

    def _append(self, key_states, value_states, counts):
        """The last counts[b] tokens of row b of key_states, value_states [B, Hkv, T, D]."""
        batch, n_kv, n_new, head_dim = key_states.shape
        # [B, Hkv, T, D] -> rows [sum(counts), Hkv, D], the rows of sequence 0 first
        if all(c == n_new for c in counts):
            k = key_states.transpose(1, 2).reshape(batch * n_new, n_kv, head_dim).contiguous()
            v = value_states.transpose(1, 2).reshape(batch * n_new, n_kv, head_dim).contiguous()
        else:
            k = torch.cat([key_states[b, :, n_new - c:].transpose(0, 1) for b, c in enumerate(counts)]).contiguous()
            v = torch.cat([value_states[b, :, n_new - c:].transpose(0, 1) for b, c in enumerate(counts)]).contiguous()
        self.kv.append(k, v, seqs=self.seqs, n_new=list(counts))

    def commit_prompt(self, position_ids, attention_mask):
        """Append the prompt's K/V without its left padding. A row's real tokens are its last
        position id + 1 (generate numbers a left-padded row's tokens from 0 at its first real
        one); without position ids, the tokens the last query row of a full-attention mask
        sees; no mask: every token."""
        key_states, value_states = self.pending
        self.pending = None
        batch, _, n_new, _ = key_states.shape
        if position_ids is not None:
            last = (position_ids[0] if position_ids.dim() == 3 else position_ids)[:, -1].expand(batch)  # 3: M-RoPE
            counts = [min(n_new, max(1, int(x) + 1)) for x in last.tolist()]
        elif attention_mask is None:
            counts = [n_new] * batch
        elif not self.window and attention_mask.dim() == 4:
            seen = attention_mask[:, 0, -1] if attention_mask.dtype == torch.bool else attention_mask[:, 0, -1] == 0
            counts = [max(1, int(x)) for x in seen.sum(-1).tolist()]
        else:
            raise NotImplementedError(f"qgen: layer {self.layer_idx} cannot tell a padded prompt's real tokens "
                                      "(no position_ids reach its attention)")
        self._append(key_states, value_states, counts)

    def attend(self, query, sinks=None):
        """query [B, H, T, D], the step's T tokens (the last T cached) -> out [B, T, H, D]
        over this layer's cached tokens, causally; sinks: the layer's learned attention sinks
        (gpt-oss), one logit a head."""
        batch, n_head, n_q, head_dim = query.shape
        if n_q != self.n_step:
            raise ValueError(f"qgen: layer {self.layer_idx} got a query of {n_q} tokens for a step of {self.n_step}")
        q = query.transpose(1, 2).reshape(batch * n_q, n_head, head_dim).contiguous()
        self.steps += 1
        self.verify_steps += n_q > 1
        kw = dict(n_q=None if n_q == 1 else [n_q] * batch)
        if sinks is not None:
            kw["sinks"] = sinks.detach().to(device=self.device, dtype=torch.float32).contiguous()
        if self.window:  # a sliding-window layer: dense within its window
            out = self.kv.attend(q, seqs=self.seqs, dense=True, window=self.window, **kw)
        else:
            reuse = (self.steps - 1) % self.owner.reselect != 0  # every sequence selected at the same steps
            self.reused += reuse
            out = self.kv.attend(q, seqs=self.seqs, reuse=reuse, **kw)
        return out.reshape(batch, n_q, n_head, head_dim)

    def get_seq_length(self, *args, **kwargs):
        return self.length

    def get_query_offset(self, *args, **kwargs):
        return self.length

    def get_mask_sizes(self, query, *args, **kwargs):
        return self.length + _query_len(query), 0

    def get_max_cache_shape(self, *args, **kwargs):
        return -1  # like a dynamic cache: the attention length is the tokens held

    def get_max_length(self, *args, **kwargs):
        return -1

    def reset(self):
        for s in self.seqs:
            self.kv.reset(s)
        self.length = 0
        self.prefill = False
        self.steps = 0

    def reorder_cache(self, *args, **kwargs):
        _refused("beam search (reorder_cache)")

    def crop(self, n):
        # 5.15+: crop(-k) removes k tokens; earlier: crop(length) keeps length tokens
        keep = self.length + n if n <= 0 else min(n, self.length)
        if keep == self.length:
            return
        if keep < 0:
            raise ValueError(f"qgen: crop({n}) of layer {self.layer_idx}, which holds {self.length} tokens")
        for s in self.seqs:
            self.kv.rollback(s, self.length - keep)
        self.rolled_back += self.length - keep
        self.length = keep

    def batch_repeat_interleave(self, repeats):
        if repeats != 1:
            _refused("repeating the batch (batch_repeat_interleave)")

    def batch_select_indices(self, *args, **kwargs):
        _refused("selecting sequences (batch_select_indices)")

    def offload(self):
        _refused("offloading")

    def prefetch(self):
        _refused("offloading")

    def close(self):
        if self.kv is not None:
            self.kv.close()
            self.kv = None


if _IMPORT_ERROR is None:
    # A newer transformers may declare more abstract layer methods than the ones above;
    # they answer with a clear error instead of making QgenLayer impossible to create.
    def _unsupported(name):
        def method(self, *args, **kwargs):
            _refused(f"the cache layer method {name}")
        method.__name__ = name
        return method

    for _name in sorted(getattr(QgenLayer, "__abstractmethods__", ())):
        setattr(QgenLayer, _name, _unsupported(_name))
    abc.update_abstractmethods(QgenLayer)


class QgenCache(Cache):
    """A transformers Cache whose layers are qgen caches.

    config        the model config (model.config)
    max_tokens    capacity of each sequence: prompt + new tokens
    k_type, v_type  the KV cache types: f16, bf16, q8_0, q4_0, q5_0, e4m3, e5m2 (or a torch
                  dtype: torch.float8_e4m3fn; qgen.kv_type); v_type = k_type. fp8 caches
                  here keep scales of 1 (a transformers model has no KV scales)
    coverage      sparse: the fraction of pages attended, e.g. 0.25; or
    budget        sparse: tokens attended; neither = dense attention
    block, sink, recent  the sparse spec's page size and always-attended tokens (spec defaults)
    dtype         the model dtype (default: that of the first K/V the cache sees)
    cache_dir     qgen's kernel cache (default: qgen's)
    tp_size       the tensor-parallel size: this rank holds n_head/tp_size query and
                  n_head_kv/tp_size KV heads of every layer (qgen.tp)
    reselect      sparse: select pages every reselect decode steps and attend over the last
                  selection, extended by the pages begun since, in between (qgen attend
                  reuse=True); 1 (default) selects every step
    """

    def __init__(self, config, max_tokens, *, k_type="f16", v_type=None, coverage=None, budget=None,
                 block=None, sink=None, recent=None, dtype=None, cache_dir=None, tp_size=1, reselect=1):
        if _IMPORT_ERROR is not None:
            raise ImportError(f"qgen.transformers needs torch and transformers: {_IMPORT_ERROR}")
        check_config(config)
        if int(max_tokens) < 1:
            raise ValueError(f"qgen: max_tokens = {max_tokens}; it must be >= 1")
        if isinstance(reselect, bool) or not isinstance(reselect, int) or reselect < 1:
            raise ValueError(f"qgen: reselect = {reselect!r}; it must be an integer >= 1")
        if reselect > 1 and coverage is None and budget is None:
            raise ValueError("qgen: reselect > 1 reuses a sparse selection; give coverage or budget too")
        self.reselect = reselect
        self.config = text_config(config)
        self.max_tokens = int(max_tokens)
        self.spec_args = dict(k_type=k_type, v_type=v_type, coverage=coverage, budget=budget, block=block,
                              sink=sink, recent=recent)
        self.tp_size = tp_size
        self.windows = layer_windows(config)
        self.fields(dtype or "f16")  # bad arguments fail here, not mid-generate
        self.cache_dir = cache_dir
        self.ctx = None
        self._ctx_key = None
        super().__init__(layers=[QgenLayer(self, i) for i in range(int(self.config.num_hidden_layers))])
        if dtype is not None:
            self.context(dtype, None)

    def fields(self, dtype):
        """The qgen.Context fields of this rank's spec for the model dtype."""
        from .tp import rank_fields

        return rank_fields(spec_fields(self.config, dtype, **self.spec_args), self.tp_size)

    def context(self, dtype, device):
        """The qgen Context shared by all layers, opened for this dtype and device: a CUDA
        device (qgen's GPU backend) or the CPU (its CPU backend)."""
        from . import Context

        if device is not None and device.type not in ("cuda", "cpu"):
            raise ValueError(f"qgen: the model runs on {device}; QgenCache needs a CUDA device or the CPU")
        if device is not None and device.type == "cpu":
            backend, index = "cpu", 0
        else:
            backend = "gpu"
            index = torch.cuda.current_device() if device is None or device.index is None else device.index
        key = (str(dtype), backend, index)
        if self.ctx is None:
            self.ctx = Context(backend=backend, device=index, cache_dir=self.cache_dir, **self.fields(dtype))
            self._ctx_key = key
        elif key != self._ctx_key:
            raise ValueError(f"qgen: QgenCache was opened for {self._ctx_key} (dtype, backend, device) and now sees {key}")
        return self.ctx

    @property
    def info(self):
        """qgen's info of the spec in use (None before the first update)."""
        return None if self.ctx is None else self.ctx.info

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None, *args, **kwargs):
        return self.layers[layer_idx].update(key_states, value_states, cache_kwargs)

    def early_initialization(self, batch_size, num_heads, head_dim, dtype, device):
        probe = torch.empty((batch_size, num_heads, 0, head_dim), dtype=dtype, device=device)
        for layer in self.layers:
            if layer.kv is None:
                layer.lazy_initialization(probe)

    def _layer(self, layer_idx):
        idx = 0 if layer_idx is None else int(layer_idx)
        return self.layers[idx] if idx < len(self.layers) else None

    def get_seq_length(self, layer_idx=0, *args, **kwargs):
        layer = self._layer(layer_idx)
        return 0 if layer is None else layer.length

    def get_query_offset(self, layer_idx=0, *args, **kwargs):
        return self.get_seq_length(layer_idx)

    def get_mask_sizes(self, query, layer_idx=0, *args, **kwargs):
        layer = self._layer(layer_idx)
        return (0 if layer is None else layer.length) + _query_len(query), 0

    def get_max_cache_shape(self, *args, **kwargs):
        return -1

    def get_max_length(self, *args, **kwargs):
        return -1

    # is_compileable, is_sliding (and is_croppable where it exists) come from the layers'
    # class attributes through transformers' own Cache properties

    @property
    def max_cache_len(self):
        return self.max_tokens

    @property
    def max_batch_size(self):
        return len(self.layers[0].seqs)

    @property
    def batch_size(self):
        return len(self.layers[0].seqs)

    def reset(self):
        for layer in self.layers:
            layer.reset()

    def reorder_cache(self, *args, **kwargs):
        self.layers[0].reorder_cache(*args, **kwargs)

    def crop(self, n=None, **kwargs):
        # the argument is tokens_to_remove (5.15+) or max_length (earlier)
        n = n if n is not None else kwargs.get("tokens_to_remove", kwargs.get("max_length"))
        for layer in self.layers:
            layer.crop(n)

    def batch_repeat_interleave(self, repeats):
        for layer in self.layers:
            layer.batch_repeat_interleave(repeats)

    def batch_select_indices(self, *args, **kwargs):
        self.layers[0].batch_select_indices(*args, **kwargs)

    def selection(self, layer_idx, seq=0):
        """The pages the last sparse step of layer_idx attended for sequence seq."""
        return self.layers[layer_idx].kv.selection(seq)

    def close(self):
        """Free the GPU memory of every layer's cache now."""
        for layer in self.layers:
            layer.close()
        if self.ctx is not None and hasattr(self.ctx, "close"):
            self.ctx.close()
        self.ctx = None


UNSUPPORTED_KWARGS = ("softcap",)


def _prompt_attention(module, query, key, value, attention_mask, dropout, scaling, sinks, **kwargs):
    """The prompt's attention: SDPA, or with sinks the model's own eager attention (SDPA
    has no sink term), given the additive form of the boolean mask SDPA's would take."""
    if sinks is None:
        return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, dropout=dropout,
                                               scaling=scaling, **kwargs)
    eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if eager is None:
        raise NotImplementedError(f"qgen: attention sinks in {type(module).__name__}, whose module has no "
                                  "eager_attention_forward for the prompt")
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        attention_mask = torch.zeros(attention_mask.shape, dtype=query.dtype, device=query.device).masked_fill(
            ~attention_mask, float("-inf"))
    return eager(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, s_aux=sinks, **kwargs)


def qgen_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """The attention function of attn_implementation "qgen": query [B, H, T, D], key and
    value as the cache returned them; returns ([B, T, H, D], None)."""
    layer = getattr(key, "_qgen_layer", None)
    if layer is None or layer.prefill:
        if query.shape[2] == 1 and layer is None:
            raise ValueError("qgen: attn_implementation='qgen' decodes through a QgenCache; pass "
                             "past_key_values=qgen.transformers.QgenCache(model.config, max_tokens=...)")
        if layer is not None and layer.pending is not None:
            layer.commit_prompt(kwargs.get("position_ids"), attention_mask)
        sinks = kwargs.pop("s_aux", None)
        sinks = kwargs.pop("sinks", None) if sinks is None else sinks
        return _prompt_attention(module, query, key, value, attention_mask, dropout, scaling, sinks, **kwargs)
    for name in UNSUPPORTED_KWARGS:
        if kwargs.get(name) is not None:
            raise NotImplementedError(f"qgen: attention with {name}={kwargs[name]!r} is not supported")
    if dropout and module.training:
        raise NotImplementedError("qgen: attention dropout (training mode) is not supported; call model.eval()")
    window = kwargs.get("sliding_window")
    if (window or 0) != layer.window:
        raise NotImplementedError(f"qgen: layer {layer.layer_idx} attends with sliding_window={window!r}; its config "
                                  f"says {layer.window or None}")
    if scaling is not None and not math.isclose(scaling, layer.scale, rel_tol=1e-6):
        raise NotImplementedError(f"qgen: the model scales attention by {scaling}, the qgen spec by {layer.scale}")
    sinks = kwargs.get("s_aux", kwargs.get("sinks"))
    return layer.attend(query, sinks), None


def qgen_mask(*args, **kwargs):
    """The mask function of "qgen": SDPA's (the prompt runs through SDPA), after refusing a
    mask other than left padding (qgen holds no per-token mask: a left-padded prompt's pads
    are left out of its qgen caches, QgenLayer.commit_prompt)."""
    for name in ("attention_mask", "padding_mask"):
        pad = kwargs.get(name)
        if pad is not None and pad.dim() == 2 and not bool(pad.all()):
            ones = pad.to(torch.bool)
            # left padding: each row zeros, then ones to its end (at least one)
            if not (bool(ones[:, -1].all()) and bool((ones[:, 1:] >= ones[:, :-1]).all())):
                raise ValueError("qgen: the attention_mask has zeros after a one (right padding or holes); "
                                 "QgenCache takes left padding only")
    return ALL_MASK_ATTENTION_FUNCTIONS["sdpa"](*args, **kwargs)


def register_functions(name, attention, mask, module, import_error):
    """Register attention and its mask function as attn_implementation=name with transformers
    (for this module and qgen.transformers_paged); import_error: why module cannot."""
    if import_error is not None:
        raise ImportError(f"{module} needs torch and transformers: {import_error}")
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, mask)


def register(name=NAME):
    """Make attn_implementation=name use qgen (done on import for "qgen")."""
    register_functions(name, qgen_attention, qgen_mask, "qgen.transformers", _IMPORT_ERROR)


if _IMPORT_ERROR is None:
    register()
