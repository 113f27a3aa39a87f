"""qgen.transformers_paged — qgen as the decode attention of transformers' continuous batching
(model.generate_batch), over transformers' own paged KV cache.

    import qgen.transformers_paged as qtp        # registers attn_implementation "paged|qgen"
    qtp.configure(coverage=0.25)                 # optional: sparse (default dense); or QGEN_CB_COVERAGE=0.25
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="paged|qgen", dtype=torch.bfloat16).cuda()
    outs = qtp.generate_batch(model, prompts, max_new_tokens=64)  # generate_batch with the settings below

How a step runs, per layer. transformers' continuous batching calls the attention function
with its PagedAttentionCache (`cache`), the packed batch (query [1, H, T, D]: the tokens of
every request of the step in order, `cu_seq_lens_q` / `cu_seq_lens_k` their cumulative query
and key lengths) and the cache indices of the step (`write_index`, `read_index`, one tensor
per layer group; or a `block_table` in a decode-only step of versions that have one).
- A decode-only step (every request has one query token): transformers' cache writes the
  new K/V rows (cache.update with an empty read index: a write only), the sparse spec's page
  bounds follow (View.update over the written slots), and qgen attends every request through
  a qgen.View over this layer's pages of transformers' cache, with a block table and lengths
  gathered on the device from the step's read index (or its block table). No host sync.
- Any other step (prefill chunks, alone or mixed with decode tokens) goes through
  transformers' own "paged|sdpa" function, which writes the cache and attends every token;
  the causal block-diagonal mask it needs is built here on the device (transformers builds
  masks only for "paged|sdpa" and "paged|eager"). Then the decode tokens of a mixed step are
  attended again by qgen and replace SDPA's rows, so every decode token goes through qgen.
  No host sync either (the mask and the rows are device gathers).
The spec comes from the model config as qgen.transformers derives it, with the head counts
of the tensors the layer sees (a tensor-parallel rank's share) and the cache dtype as the KV
type; unsupported configurations are refused (check_config).

Settings (generate_batch below passes them): transformers' pages of 32 or 64 tokens
(ContinuousBatchingConfig(block_size=32); qgen attends pages of its spec's block, 64, or
half of it), CUDA graphs off. Not supported (refused with an error): CUDA-graph capture of
the step, sliding-window / chunked / soft-capped attention, attention sinks, dropout in
training mode.
"""
import math
import os

from ._views import as_pages
from .transformers import IO_TYPES, UNSUPPORTED_KWARGS, check_config, register_functions, spec_fields

try:
    import torch
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    _IMPORT_ERROR = None
except ImportError as e:  # the index helpers below still work (and are tested) without them
    _IMPORT_ERROR = e

NAME = "paged|qgen"
SDPA = "paged|sdpa"  # transformers' own paged path, for prefill

_settings = {}
# Layer calls by kind since import ("decode": attended by qgen, "mixed": prefill through SDPA
# and the decode tokens by qgen, "prefill": SDPA only): how a caller or a test sees that qgen ran.
calls = {"decode": 0, "mixed": 0, "prefill": 0}


def configure(coverage=None, budget=None, block=None, sink=None, recent=None):
    """The budget of "paged|qgen": coverage (a fraction of pages) or budget (tokens) makes it
    sparse, neither dense; block, sink, recent as spec_fields takes them. Applies to the
    caches of later generate_batch calls (a running one keeps its spec)."""
    if coverage is not None and budget is not None:
        raise ValueError("qgen: give coverage (a fraction of pages) or budget (tokens), not both")
    _settings.clear()
    _settings.update(coverage=coverage, budget=budget, block=block, sink=sink, recent=recent)


def _env_settings():
    """configure() arguments from QGEN_CB_COVERAGE / QGEN_CB_BUDGET."""
    cov, bud = os.environ.get("QGEN_CB_COVERAGE"), os.environ.get("QGEN_CB_BUDGET")
    return dict(coverage=float(cov) if cov else None, budget=int(bud) if bud else None)


# ---- index helpers (NumPy arrays or torch tensors alike) -------------------------------


def _xp(x):
    if type(x).__module__.startswith("torch"):
        import torch as xp

        return xp, {"device": x.device}
    import numpy as xp

    return xp, {}


def decode_rows(cu_q, n_tokens):
    """For each request of a packed step: its last token's row, whether it is a decode
    request (query length 1), and the row its qgen output goes to: its own for a decode
    request, n_tokens (a spare row) for any other."""
    xp, _ = _xp(cu_q)
    last = cu_q[1:] - 1
    is_decode = (cu_q[1:] - cu_q[:-1]) == 1
    last = xp.where(last < 0, 0, last)
    return last, is_decode, xp.where(is_decode, last, n_tokens)


def block_table(read_index, cu_k, page_size, max_blocks):
    """Per request, the pages of its tokens: read_index holds the cache slot of every key
    token of the step, request after request (cu_k its cumulative key lengths); the page of
    a request's block b is the slot of its token b * page_size over page_size. int32
    [n_requests, max_blocks], 0 past a request's length."""
    xp, dev = _xp(cu_k)
    pos = cu_k[:-1, None] + xp.arange(max_blocks, **dev)[None, :] * page_size
    valid = pos < cu_k[1:, None]
    if read_index.shape[0] == 0:
        return xp.zeros(pos.shape, dtype=xp.int32, **dev)
    page = xp.where(valid, read_index[xp.where(valid, pos, 0)] // page_size, 0)
    return page.astype(xp.int32) if xp.__name__ == "numpy" else page.to(xp.int32)


def decode_slots(table, seq_lens, page_size):
    """The slot of each request's newest token (its length - 1) through its block table;
    -1 for an empty request."""
    xp, dev = _xp(seq_lens)
    pos = xp.where(seq_lens > 0, seq_lens - 1, 0)
    page = table[xp.arange(table.shape[0], **dev), pos // page_size]
    return xp.where(seq_lens > 0, page * page_size + pos % page_size, -1)


def all_slots(table, seq_lens, page_size):
    """Every token's slot of every request through its block table, request after request
    [n_requests * max_blocks * page_size]; -1 past a request's length."""
    xp, dev = _xp(seq_lens)
    pos = xp.arange(table.shape[1] * page_size, **dev)[None, :]
    slots = table[:, pos[0] // page_size] * page_size + pos % page_size
    return xp.where(pos < seq_lens[:, None], slots, -1).reshape(-1)


def causal_mask(cu_q, cu_k, n_tokens, n_keys):
    """Whether token t of a packed step may attend key j [n_tokens, n_keys]: both belong to
    the same request, and j is at most t's position (the request's cached keys first, then
    its new tokens). Tokens past the last request (padding) attend the last request's keys."""
    xp, dev = _xp(cu_q)
    t = xp.arange(n_tokens, **dev)
    n = cu_q.shape[0] - 1
    req = (t[:, None] >= cu_q[None, 1:]).sum(1)
    req = xp.where(req > n - 1, n - 1, req)
    past = (cu_k[req + 1] - cu_k[req]) - (cu_q[req + 1] - cu_q[req])
    lo = cu_k[req]
    hi = xp.minimum(lo + past + (t - cu_q[req]) + 1, cu_k[req + 1])
    j = xp.arange(n_keys, **dev)[None, :]
    return (j >= lo[:, None]) & (j < hi[:, None])


# ---- the attention function --------------------------------------------------------------


def _layer_pools(cache, layer_idx):
    """(group index, k pages, v pages) of a layer in transformers' paged cache, the pages as
    [pages, page_size, H, D] views of its memory: the per-layer allocator views of versions
    with cache allocators, else the layer's key_cache / value_cache [num_blocks * block_size
    (+ 2 padding rows), H, D]."""
    allocators = getattr(cache, "layer_to_allocator", None)
    if allocators is not None:
        alloc = allocators[layer_idx]
        k, v = alloc.get_cache_for_block_table(layer_idx)
        return alloc.index, k, v
    if not hasattr(cache, "key_cache") or not hasattr(cache, "layer_index_to_group_indices"):
        raise NotImplementedError(f"qgen: this transformers' {type(cache).__name__} has neither layer_to_allocator "
                                  "nor key_cache / layer_index_to_group_indices; paged|qgen does not know its layout")
    group, j = cache.layer_index_to_group_indices[layer_idx]
    bs = int(cache.block_size)
    k, v = cache.key_cache[j], cache.value_cache[j]
    n = (k.shape[0] // bs) * bs
    return group, as_pages(k[:n], bs), as_pages(v[:n], bs)


class _Step:
    """Block table and lengths of one layer group, shared by the group's views (qgen reads
    them when its kernels run), and the step they were filled for, with its prefill mask.
    The buffers grow by doubling past 64 requests or 1024 pages a request, re-opening the
    views; a sparse view re-opened rebuilds its page bounds from the step's requests (the
    pages of a request outside that step keep no bounds: its selection is then wrong)."""

    def __init__(self):
        self.table = self.lens = self.mask = None
        self.views = {}
        self.key = self.mask_key = None


class _State:
    """What paged|qgen keeps on a PagedAttentionCache: the qgen context (the spec) and, per
    layer group, the step buffers and the per-layer views."""

    def __init__(self, module, query, key, settings):
        from . import Context

        cfg = module.config
        check_config(cfg)
        dtype = str(query.dtype)
        io = IO_TYPES.get(dtype)
        if io is None:
            raise ValueError(f"qgen: model dtype {query.dtype} is not supported; allowed: bfloat16, float16, float32")
        fields = spec_fields(cfg, dtype, k_type=io, **settings)  # the cache holds K/V in the model dtype
        fields.update(n_head=int(query.shape[1]), n_head_kv=int(key.shape[1]))  # this rank's heads
        backend = "gpu" if query.device.type == "cuda" else "cpu"
        self.ctx = Context(backend=backend, device=query.device.index or 0, **fields)
        self.scale = self.ctx.info["scale"]
        self.sparse = "sparse" in fields
        self.groups = {}

    def view(self, g, k, v, layer_idx, n, blocks):
        """The step buffers of group g, at least n rows by blocks columns, this layer's view,
        and whether the view is new (its bounds to be built)."""
        from . import View

        st = self.groups.setdefault(g, _Step())
        if st.table is None or st.table.shape[0] < n or st.table.shape[1] < blocks:
            rows = max(n, 2 * st.table.shape[0] if st.table is not None else 64)
            cols = max(blocks, 2 * st.table.shape[1] if st.table is not None else 1024)
            for old in st.views.values():
                old.close()
            st.views = {}
            st.table = torch.zeros((rows, cols), dtype=torch.int32, device=k.device)
            st.lens = torch.zeros((rows,), dtype=torch.int32, device=k.device)
            st.key = None
        fresh = layer_idx not in st.views
        if fresh:
            st.views[layer_idx] = View(self.ctx, k, v, st.table, st.lens)
        return st, st.views[layer_idx], fresh


def _group_value(x):
    return x["full_attention"] if isinstance(x, dict) else x


def _fill(st, kwargs, g, page_size, n, decode_only, table_kw):
    """The step's block table and lengths into the group's buffers, once a step (its layers
    share them): a decode-only step attends every request, a mixed step only its decode
    requests (the others get length 0: no work, zero rows)."""
    cu_q, cu_k = kwargs["cu_seq_lens_q"], _group_value(kwargs["cu_seq_lens_k"])
    if st.key is not None and st.key[0] is cu_q and st.key[1] is cu_k:
        return
    lens = (cu_k[1:] - cu_k[:-1]).to(torch.int32)
    if not decode_only:
        lens = torch.where((cu_q[1:] - cu_q[:-1]) == 1, lens, 0)
    if table_kw is not None:
        table = table_kw[g][:n]
    else:
        blocks = -(-int(_group_value(kwargs["max_seqlen_k"])) // page_size)
        table = block_table(kwargs["read_index"][g], cu_k, page_size, blocks)
    st.table[:n, : table.shape[1]] = table
    st.lens[:n] = lens
    st.lens[n:] = 0
    st.key = (cu_q, cu_k)  # held, so a later step's tensors cannot take their identity


def _prefill_mask(st, kwargs, g, n_tokens, dtype):
    """The additive causal block-diagonal mask [1, 1, tokens, keys] of a step that is not
    decode-only, built once a step: keys are the rows transformers' cache reads back (the
    read index), or the step's own tokens when it reads none."""
    cu_q, cu_k = kwargs["cu_seq_lens_q"], _group_value(kwargs["cu_seq_lens_k"])
    if st.mask_key is None or st.mask_key[0] is not cu_q or st.mask_key[1] is not cu_k:
        keys = kwargs["read_index"][g].shape[0] or n_tokens
        allowed = causal_mask(cu_q, cu_k, n_tokens, keys)
        bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
        st.mask = bias.masked_fill_(~allowed, torch.finfo(dtype).min)[None, None]
        st.mask_key = (cu_q, cu_k)
    return st.mask


def _state(cache, module, query, key):
    settings = dict(_settings) if _settings else _env_settings()
    st = getattr(cache, "_qgen_paged", None)
    if st is None or st[0] != settings:
        st = (settings, _State(module, query, key, settings))
        cache._qgen_paged = st
    return st[1]


def _write(cache, pools, key, value, layer_idx, write_index, slots):
    """transformers' own cache write of a decode step's K/V, without the read-back (an empty
    read index). A decode step that brought a block table instead of write indices (the
    flash fast path of some versions) writes the rows at the slots the table gives, into the
    same page views."""
    if slots is None:
        empty = [w[:0] for w in write_index]
        if hasattr(cache, "layer_to_allocator"):  # the allocators take [tokens, H, D]
            cache.update(key[0].transpose(0, 1), value[0].transpose(0, 1), layer_idx, empty, write_index)
        else:
            cache.update(key, value, layer_idx, empty, write_index)
        return
    ok = (slots >= 0)[:, None, None]
    dest = torch.where(slots >= 0, slots, 0).long()
    for pages, x in zip(pools, (key, value)):
        rows = pages.reshape(-1, *pages.shape[2:])
        rows.index_copy_(0, dest, torch.where(ok, x[0].transpose(0, 1), rows[dest]))


def paged_qgen_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """The attention function of "paged|qgen" (see the module docstring)."""
    cache = kwargs.get("cache")
    if cache is None:
        raise ValueError("qgen: paged|qgen runs under transformers' continuous batching (model.generate_batch); "
                         "for model.generate use attn_implementation='qgen' with a qgen.transformers.QgenCache")
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise NotImplementedError("qgen: paged|qgen does not run under CUDA-graph capture; turn the continuous "
                                  "batching CUDA graphs off (ContinuousBatchingConfig(use_cuda_graph=False))")
    for name in UNSUPPORTED_KWARGS:
        if kwargs.get(name) is not None:
            raise NotImplementedError(f"qgen: attention with {name}={kwargs[name]!r} is not supported")
    if dropout and module.training:
        raise NotImplementedError("qgen: attention dropout (training mode) is not supported; call model.eval()")
    state = _state(cache, module, query, key)
    if scaling is not None and not math.isclose(scaling, state.scale, rel_tol=1e-6):
        raise NotImplementedError(f"qgen: the model scales attention by {scaling}, the qgen spec by {state.scale}")

    layer_idx = module.layer_idx
    cu_q = kwargs["cu_seq_lens_q"]
    n, n_tokens = cu_q.shape[0] - 1, query.shape[2]
    table_kw = kwargs.get("block_table")
    decode_only = table_kw is not None or int(kwargs.get("max_seqlen_q", 2)) == 1
    g, kp, vp = _layer_pools(cache, layer_idx)
    page_size = kp.shape[1]
    blocks = table_kw.shape[-1] if table_kw is not None else \
        -(-int(_group_value(kwargs.get("max_seqlen_k", 1))) // page_size)
    st, view, fresh = state.view(g, kp, vp, layer_idx, n, blocks)

    if not decode_only:
        mask = _prefill_mask(st, kwargs, g, n_tokens, query.dtype)
        out, _ = ALL_ATTENTION_FUNCTIONS[SDPA](module, query, key, value, mask, dropout=dropout, scaling=scaling,
                                               **kwargs)
        if state.sparse:  # a new view: the bounds of every page the step reads
            read = kwargs["read_index"][g]
            view.update(read if fresh and read.shape[0] else kwargs["write_index"][g])
        if kwargs["read_index"][g].shape[0] == 0:  # nothing cached yet: no request is decoding
            calls["prefill"] += 1
            return out, None
        calls["mixed"] += 1
        last, _, dest = decode_rows(cu_q, n_tokens)
        _fill(st, kwargs, g, page_size, n, False, None)
        att = view.attend(query[0][:, last.long()].transpose(0, 1).contiguous(), seqs=list(range(n)))
        flat = out.reshape(n_tokens, *att.shape[1:])
        rows = torch.cat([flat, flat.new_zeros((1,) + tuple(att.shape[1:]))])  # + a spare row
        rows.index_copy_(0, dest.long(), att.to(rows.dtype))
        return rows[:n_tokens].reshape(out.shape), None

    if n_tokens != n:
        raise NotImplementedError(f"qgen: a decode step of {n_tokens} tokens for {n} requests (padded); "
                                  "turn the continuous batching CUDA graphs off")
    calls["decode"] += 1
    _fill(st, kwargs, g, page_size, n, True, table_kw)
    slots = None if table_kw is None else decode_slots(st.table[:n], st.lens[:n], page_size)
    _write(cache, (kp, vp), key, value, layer_idx, kwargs.get("write_index"), slots)
    if state.sparse:  # a new view: the bounds of every page the step reads
        if fresh:
            view.update(kwargs["read_index"][g] if slots is None else all_slots(st.table[:n], st.lens[:n], page_size))
        else:
            view.update(kwargs["write_index"][g] if slots is None else slots)
    return view.attend(query[0].transpose(0, 1).contiguous(), seqs=list(range(n))).unsqueeze(0), None


def generate_batch(model, prompts, max_new_tokens, attn_implementation=NAME, block_size=32, record_timestamps=False,
                   **generation):
    """model.generate_batch over prompts (lists of token ids) with the continuous batching
    settings paged|qgen needs: pages of block_size tokens (32 or 64 under qgen's default
    block-64 spec), CUDA graphs and async batching off; greedy unless generation says
    otherwise; record_timestamps keeps each token's time (GenerationOutput.timestamps).
    Returns the GenerationOutputs in the order of the prompts. Also runs other
    implementations ("paged|sdpa") under the same settings, for comparisons."""
    import inspect

    from transformers import GenerationConfig

    model.set_attn_implementation(attn_implementation)
    generation.setdefault("do_sample", False)
    gen = GenerationConfig(max_new_tokens=max_new_tokens, **generation)
    kw = {}
    try:
        from transformers.generation import ContinuousBatchingConfig
    except ImportError:  # versions before ContinuousBatchingConfig read these from the generation config
        for name, val in (("block_size", block_size), ("use_cuda_graph", False)):
            setattr(gen, name, val)
    else:
        fields = inspect.signature(ContinuousBatchingConfig).parameters
        want = dict(use_cuda_graph=False, use_async_batching=False)
        want["page_size" if "page_size" in fields else "block_size"] = block_size  # its newer name
        kw["continuous_batching_config"] = ContinuousBatchingConfig(**{k: v for k, v in want.items() if k in fields})
    params = inspect.signature(model.generate_batch).parameters
    for name, val in (("warmup", False), ("progress_bar", False), ("record_timestamps", record_timestamps)):
        if name in params:
            kw[name] = val
    outputs = model.generate_batch(inputs=[list(p) for p in prompts], generation_config=gen, **kw)
    by_prompt = {}
    for out in outputs.values():
        by_prompt.setdefault(tuple(out.prompt_ids), []).append(out)
    return [by_prompt[tuple(p)].pop(0) for p in prompts]


def greedy_difference(model, prompt, ref, got):
    """Where two greedy continuations of prompt (ref from paged|sdpa, got from paged|qgen
    dense) first differ, and whether rounding explains it: None when equal, else (step,
    gap, error) with gap SDPA's top-2 logit gap at that step and error the largest
    |qgen - SDPA| logit there, teacher-forced on prompt + ref[:step] (SDPA over all of it
    against an SDPA prefill of all but its last token into a QgenCache and qgen's decode of
    that token). A difference with gap < error is a near-tie decided by rounding."""
    from .transformers import QgenCache

    step = next((i for i, (x, y) in enumerate(zip(ref, got)) if x != y), None)
    if step is None and len(ref) == len(got):
        return None
    step = min(len(ref), len(got)) if step is None else step
    ids = torch.tensor([list(prompt) + list(ref[:step])], device=model.device)
    kv = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}[model.dtype]
    prev = model.config._attn_implementation
    try:
        with torch.no_grad():
            model.set_attn_implementation("sdpa")
            sdpa = model(ids, logits_to_keep=1).logits[0, -1].float()
            model.set_attn_implementation("qgen")
            cache = QgenCache(model.config, max_tokens=ids.shape[1], k_type=kv)
            model(ids[:, :-1], past_key_values=cache, use_cache=True, logits_to_keep=1)
            qg = model(ids[:, -1:], past_key_values=cache, use_cache=True).logits[0, -1].float()
            cache.close()
    finally:
        model.set_attn_implementation(prev)
    top2 = sdpa.topk(2).values
    return step, float(top2[0] - top2[1]), float((qg - sdpa).abs().max())


def _no_mask(*args, **kwargs):
    """The mask function of "paged|qgen": none (the prefill mask is built per step above)."""
    return None


def register(name=NAME):
    """Make attn_implementation=name use qgen under continuous batching (done on import)."""
    register_functions(name, paged_qgen_attention, _no_mask, "qgen.transformers_paged", _IMPORT_ERROR)


if _IMPORT_ERROR is None:
    register()
