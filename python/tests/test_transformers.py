"""qgen.transformers: spec derivation (CPU, no transformers needed) and, on a CUDA device
with transformers, generate() through QgenCache on tiny random Qwen3 and Llama models
against SDPA (quick version: 4K prompts; 32K with QGEN_TEST_LONG=1).

    qgen dense vs SDPA: per-step logits relative error <= 1e-2 and the same greedy tokens
      (where a token differs, that step's top-2 logit gap is below the measured logit error);
    qgen sparse at coverage 1.0 equals qgen dense bit for bit;
    qgen sparse 25 % runs; its per-step token agreement with dense is printed (a smoke
      number: random weights give near-uniform attention).
"""
import os
from types import SimpleNamespace

import pytest

try:
    import qgen.transformers as qt
except Exception as e:  # the qgen package or its library is missing here
    pytest.skip(f"qgen.transformers does not import: {e}", allow_module_level=True)

NEW_TOKENS = 64
REL_TOL = 1e-2


def cfg(**kw):
    base = dict(num_attention_heads=8, num_key_value_heads=2, head_dim=128, hidden_size=256,
                num_hidden_layers=2, model_type="qwen3")
    base.update(kw)
    return SimpleNamespace(**base)


def test_spec_fields_dense():
    f = qt.spec_fields(cfg(), "torch.bfloat16", k_type="q8_0")
    assert f.pop("scale") == pytest.approx(128 ** -0.5, rel=1e-15)
    assert f == dict(name="qwen3-hf", head_dim=128, n_head=8, n_head_kv=2, k_type="q8_0", v_type="q8_0",
                     in_type="bf16", out_type="bf16")


def test_spec_fields_sparse_and_defaults():
    # no head_dim / num_key_value_heads in the config: hidden_size / heads, MHA
    c = SimpleNamespace(num_attention_heads=4, hidden_size=256, num_hidden_layers=1, model_type="llama")
    f = qt.spec_fields(c, "f16", coverage=0.25, sink=64, recent=128)
    assert (f["head_dim"], f["n_head_kv"], f["in_type"]) == (64, 4, "f16")
    assert f["sparse"] == {"coverage": 0.25, "sink": 64, "recent": 128}
    assert qt.spec_fields(c, "f32", budget=1024, block=128)["sparse"] == {"budget": 1024, "block": 128}


@pytest.mark.parametrize("kw, err", [
    (dict(coverage=0.25, budget=100), "not both"),
    (dict(sink=64), "sparse cache"),
])
def test_spec_fields_refuses(kw, err):
    with pytest.raises(ValueError, match=err):
        qt.spec_fields(cfg(), "bf16", **kw)
    with pytest.raises(ValueError, match="dtype"):
        qt.spec_fields(cfg(), "torch.int8")


@pytest.mark.parametrize("extra, err", [
    (dict(layer_types=["full_attention", "sliding_attention"]), "sliding_attention"),
    (dict(sliding_window=4096, use_sliding_window=True), "sliding window"),
    (dict(attention_chunk_size=8192), "chunked"),
    (dict(layer_types=["full_attention", "chunked_attention"]), "chunked"),
    (dict(attn_logit_softcapping=50.0), "soft-capping"),
])
def test_check_config_refuses(extra, err):
    with pytest.raises(NotImplementedError, match=err):
        qt.check_config(cfg(**extra))
    qt.check_config(cfg(sliding_window=4096, use_sliding_window=False))  # Qwen's default: off


# ---- GPU: generate() on tiny random models ----------------------------------------------

try:
    import torch
    import transformers
except ImportError:
    torch = transformers = None
needs_transformers = pytest.mark.skipif(transformers is None, reason="needs torch and transformers")
gpu = pytest.mark.skipif(transformers is None or not torch.cuda.is_available(),
                         reason="needs torch, transformers and a CUDA device")
# The engine-shaped tests run on both backends: the CPU here and in CI, the GPU's kernels for
# several query tokens, windows and sinks on a CUDA device.
DEVICES = ["cpu", pytest.param("cuda", marks=gpu)]
PROMPTS = [4096] + ([32768] if os.environ.get("QGEN_TEST_LONG") == "1" else [])


def tiny_model(arch):
    common = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                  vocab_size=1000, max_position_embeddings=65536)
    if arch == "qwen3":
        config = transformers.Qwen3Config(num_key_value_heads=2, head_dim=128, **common)
    else:
        config = transformers.LlamaConfig(num_key_value_heads=4, head_dim=64, **common)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    return model.to(device="cuda", dtype=torch.bfloat16).eval()


@pytest.fixture(scope="module", params=["qwen3", "llama"])
def model(request):
    if transformers is None or not torch.cuda.is_available():
        pytest.skip("needs torch, transformers and a CUDA device")
    m = tiny_model(request.param)
    yield m
    del m
    torch.cuda.empty_cache()


def prompt(batch, length, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 1000, (batch, length), generator=g).cuda()


def generate(model, ids, attn, cache=None, **kw):
    """Greedy tokens [B, NEW_TOKENS] and the per-step raw logits [B, NEW_TOKENS, V] (fp32)."""
    model.set_attn_implementation(attn)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                             max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=0, **kw)
    return out.sequences[:, ids.shape[1]:], torch.stack(out.logits, 1).float()


def qgen_cache(model, ids, drafts=0, **kw):
    """Room for the prompt, the new tokens and a verify step's drafts past the last one."""
    return qt.QgenCache(model.config, max_tokens=ids.shape[1] + NEW_TOKENS + drafts, **kw)


def check_against_sdpa(tok_q, log_q, tok_s, log_s):
    """Steps up to each row's first token difference: logits within REL_TOL; at a
    difference, SDPA's top-2 gap is below the logit error there. Returns the worst error."""
    worst = 0.0
    for b in range(tok_s.shape[0]):
        for step in range(tok_s.shape[1]):
            diff = (log_q[b, step] - log_s[b, step])
            rel = float(diff.norm() / log_s[b, step].norm())
            worst = max(worst, rel)
            assert rel <= REL_TOL, f"row {b} step {step}: logits relative error {rel:.3g} > {REL_TOL}"
            if tok_q[b, step] != tok_s[b, step]:
                top2 = log_s[b, step].topk(2).values
                gap, err = float(top2[0] - top2[1]), float(diff.abs().max())
                assert gap < err, f"row {b} step {step}: tokens differ with a top-2 gap {gap:.3g} >= error {err:.3g}"
                print(f"row {b}: tokens differ first at step {step} (top-2 gap {gap:.3g} < logit error {err:.3g})")
                break  # later steps are conditioned on different tokens
    return worst


@gpu
@pytest.mark.parametrize("length", PROMPTS)
@pytest.mark.parametrize("batch", [1, 2])
def test_generate_matches_sdpa(model, batch, length):
    if batch > 1 and length > 4096:
        pytest.skip("batch > 1 only at 4K")
    ids = prompt(batch, length)
    tok_s, log_s = generate(model, ids, "sdpa")
    dense = qgen_cache(model, ids, k_type="bf16")
    tok_d, log_d = generate(model, ids, "qgen", dense)
    assert dense.get_seq_length() == length + NEW_TOKENS - 1  # the last token is not fed back
    worst = check_against_sdpa(tok_d, log_d, tok_s, log_s)
    print(f"{model.config.model_type} B{batch} {length}: qgen dense vs SDPA worst logits rel. error {worst:.3g}")

    tok_c, log_c = generate(model, ids, "qgen", qgen_cache(model, ids, k_type="bf16", coverage=1.0))
    assert torch.equal(tok_c, tok_d) and torch.equal(log_c, log_d), "sparse at coverage 1.0 differs from dense"

    tok_25, _ = generate(model, ids, "qgen", qgen_cache(model, ids, k_type="bf16", coverage=0.25))
    agree = float((tok_25 == tok_d).float().mean())
    print(f"{model.config.model_type} B{batch} {length}: sparse 25 % per-step token agreement with dense "
          f"{agree:.3f} (smoke number)")


@gpu
def test_quantized_cache_runs(model):
    ids = prompt(1, 4096)
    tok, log = generate(model, ids, "qgen", qgen_cache(model, ids, k_type="q8_0", coverage=0.25))
    assert tok.shape == (1, NEW_TOKENS) and torch.isfinite(log).all()


@gpu
def test_reselect_reuses_selections(model):
    """QgenCache(reselect=4): decode steps 1-3 of every 4 attend over the last selection
    (reuse), and generation completes with finite logits; its token agreement with selecting
    every step is printed (random weights: a smoke number)."""
    ids = prompt(1, 4096)
    cache = qgen_cache(model, ids, k_type="bf16", coverage=0.25, reselect=4)
    tok, log = generate(model, ids, "qgen", cache)
    steps = NEW_TOKENS - 1  # the first new token comes from the prompt's pass
    assert all(layer.steps == steps and layer.reused == steps - -(-steps // 4) for layer in cache.layers)
    assert tok.shape == (1, NEW_TOKENS) and torch.isfinite(log).all()
    tok_1, _ = generate(model, ids, "qgen", qgen_cache(model, ids, k_type="bf16", coverage=0.25))
    print(f"{model.config.model_type} 4096: sparse 25 % reselect=4 per-step token agreement with reselect=1 "
          f"{float((tok == tok_1).float().mean()):.3f} (smoke number)")


# ---- CPU: verify steps of several tokens (assisted generation, prompt lookup) ------------

def tiny_cpu_model(seed, layers=2, device="cpu"):
    """A float32 Llama (on the CPU: qgen's CPU backend) with a vocabulary of 32 tokens, so that
    prompt lookup finds repeated n-grams and a random assistant's drafts are sometimes kept."""
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
                                      num_attention_heads=8, num_key_value_heads=2, head_dim=64, vocab_size=32,
                                      max_position_embeddings=4096)
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(device).eval()


def random_ids(n, seed, device, batch=1):
    return torch.randint(0, 32, (batch, n), generator=torch.Generator().manual_seed(seed)).to(device)


@needs_transformers
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("how", ["prompt lookup", "assistant", "same-weights assistant"])
def test_verify_steps_match_sdpa(how, device):
    """Assisted generation and prompt lookup through QgenCache (dense) give SDPA's plain greedy
    tokens and logits (check_against_sdpa); their verify steps are single qgen calls of
    several tokens and their rejected drafts are rolled back (crop), none through SDPA."""
    model = tiny_cpu_model(0, device=device)
    ids = random_ids(300, 5, device)
    kw = {"prompt lookup": dict(prompt_lookup_num_tokens=4),
          "assistant": dict(assistant_model=tiny_cpu_model(1, layers=1, device=device)),
          "same-weights assistant": dict(assistant_model=tiny_cpu_model(0, device=device))}[how]
    if "assistant_model" in kw:  # at most 16 tokens a step: 4 drafts and the token before them
        kw["assistant_model"].generation_config.num_assistant_tokens = 4
        kw["assistant_model"].generation_config.num_assistant_tokens_schedule = "constant"
    tok_s, log_s = generate(model, ids, "sdpa")
    cache = qgen_cache(model, ids, drafts=16, k_type="f16")
    tok_q, log_q = generate(model, ids, "qgen", cache, **kw)
    worst = check_against_sdpa(tok_q, log_q, tok_s, log_s)
    verify = [layer.verify_steps for layer in cache.layers]
    rolled = [layer.rolled_back for layer in cache.layers]
    assert min(verify) > 0 and len(set(verify)) == 1, verify
    assert how == "same-weights assistant" or min(rolled) > 0, rolled
    print(f"{device} {how}: qgen dense vs SDPA worst logits rel. error {worst:.3g}; {verify[0]} verify steps, "
          f"{rolled[0]} draft tokens rolled back, {cache.layers[0].steps} qgen steps")


@needs_transformers
@pytest.mark.parametrize("device", DEVICES)
def test_sparse_verify_steps_run(device):
    model = tiny_cpu_model(0, device=device)
    ids = random_ids(600, 6, device)
    cache = qgen_cache(model, ids, drafts=16, k_type="f16", coverage=0.25, block=32, sink=32, recent=32)
    tok, log = generate(model, ids, "qgen", cache, prompt_lookup_num_tokens=4)
    assert tok.shape == (1, NEW_TOKENS) and torch.isfinite(log).all()
    assert cache.layers[0].verify_steps > 0 and cache.layers[0].rolled_back > 0


@needs_transformers
@pytest.mark.parametrize("device", DEVICES)
def test_verify_step_limits(device):
    model = tiny_cpu_model(0, device=device)
    ids = random_ids(40, 7, device)
    model.set_attn_implementation("qgen")
    cache = qgen_cache(model, ids)
    with torch.no_grad():
        model(ids, past_key_values=cache, use_cache=True)
        with pytest.raises(NotImplementedError, match="at most 16"):
            model(ids[:, :17], past_key_values=cache, use_cache=True)
        model(ids[:, :16], past_key_values=cache, use_cache=True)
        cache.crop(-16)
        assert cache.get_seq_length() == 40 and cache.layers[1].kv.seq_len(0) == 40
        with pytest.raises(ValueError, match="crop"):
            cache.crop(-41)
    model.set_attn_implementation("sdpa")


@needs_transformers
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("coverage", [None, 0.25])
def test_gemma3_sliding_layers(coverage, device):
    """A Gemma 3-shaped model (random weights: sliding-window layers of 64 tokens between
    global ones, Gemma's query_pre_attn_scalar scale) decodes every layer through qgen: the
    sliding layers dense within their window. Dense: SDPA's greedy tokens and logits
    (check_against_sdpa), also with prompt lookup's verify steps; sparse 25 % on the global
    layers: it runs."""
    config = transformers.Gemma3TextConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                           num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                           query_pre_attn_scalar=48, vocab_size=32, sliding_window=64,
                                           layer_types=["sliding_attention", "full_attention"] * 2,
                                           max_position_embeddings=4096)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(device).eval()
    ids = random_ids(300, 8, device)
    sparse = {} if coverage is None else dict(coverage=coverage, block=32, sink=32, recent=32)
    cache = qgen_cache(model, ids, drafts=16, k_type="f16", **sparse)
    assert [layer.window for layer in cache.layers] == [64, 0, 64, 0]
    tok_q, log_q = generate(model, ids, "qgen", cache)
    assert cache.layers[0].steps == NEW_TOKENS - 1 and torch.isfinite(log_q).all()
    if coverage is None:
        tok_s, log_s = generate(model, ids, "sdpa")
        worst = check_against_sdpa(tok_q, log_q, tok_s, log_s)
        cache = qgen_cache(model, ids, drafts=16, k_type="f16")
        tok_v, log_v = generate(model, ids, "qgen", cache, prompt_lookup_num_tokens=4)
        worst = max(worst, check_against_sdpa(tok_v, log_v, tok_s, log_s))
        print(f"{device} gemma3 sliding 64: qgen dense vs SDPA worst logits rel. error {worst:.3g} "
              f"({cache.layers[0].verify_steps} verify steps with prompt lookup)")


def left_padded(lengths, vocab, seed):
    """A batch of prompts of these lengths, left padded with token 0, and its attention mask."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros((len(lengths), max(lengths)), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, -n:] = torch.randint(1, vocab, (n,), generator=g)
        mask[b, -n:] = 1
    return ids, mask


def generate_padded(model, ids, mask, attn, cache=None):
    model.set_attn_implementation(attn)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, past_key_values=cache, max_new_tokens=NEW_TOKENS,
                             min_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
    return out.sequences[:, ids.shape[1]:], torch.stack(out.logits, 1).float()


def check_left_padded(model, ids, mask, **kw):
    """qgen dense on a left-padded batch against SDPA on the same batch; each qgen cache holds
    its row's real tokens only."""
    tok_s, log_s = generate_padded(model, ids, mask, "sdpa")
    cache = qgen_cache(model, ids, k_type=kw.pop("k_type", "f16"), **kw)
    tok_q, log_q = generate_padded(model, ids, mask, "qgen", cache)
    real = mask.sum(1).tolist()
    full = [layer for layer in cache.layers if not layer.window]
    assert full[0].kv.seq_len(list(range(len(real)))) == [n + NEW_TOKENS - 1 for n in real]
    return check_against_sdpa(tok_q, log_q, tok_s, log_s)


@needs_transformers
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_left_padded_small_batch(arch, device):
    """Prompts of 300, 260 and 171 tokens in one left-padded batch: SDPA's greedy tokens and
    logits through a dense QgenCache (a Gemma 3-shaped model: its sliding layers too)."""
    if arch == "llama":
        model = tiny_cpu_model(0, device=device)
    else:
        config = transformers.Gemma3TextConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                               num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                               vocab_size=32, sliding_window=64,
                                               layer_types=["sliding_attention", "full_attention"])
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(device).eval()
    ids, mask = left_padded([300, 260, 171], 32, seed=9)
    worst = check_left_padded(model, ids.to(device), mask.to(device))
    print(f"{device} {arch} left-padded batch of 3: qgen dense vs SDPA worst logits rel. error {worst:.3g}")


@gpu
def test_left_padded_batch(model):
    ids, mask = left_padded([4096, 3000], 1000, seed=10)
    worst = check_left_padded(model, ids.cuda(), mask.cuda(), k_type="bf16")
    print(f"{model.config.model_type} left-padded batch of 2: qgen dense vs SDPA worst logits rel. error {worst:.3g}")


@gpu
def test_refusals(model):
    ids = prompt(2, 256)
    pad = torch.ones_like(ids)
    pad[1, 100:108] = 0  # a hole: only left padding is taken
    model.set_attn_implementation("qgen")
    with torch.no_grad(), pytest.raises(ValueError, match="right padding or holes"):
        model.generate(ids, attention_mask=pad, past_key_values=qgen_cache(model, ids), max_new_tokens=4,
                       do_sample=False, pad_token_id=0)
    with torch.no_grad(), pytest.raises(NotImplementedError, match="beam search|selecting|repeating"):
        model.generate(ids[:1], attention_mask=torch.ones_like(ids[:1]), past_key_values=qgen_cache(model, ids),
                       max_new_tokens=4, num_beams=2, do_sample=False, pad_token_id=0)
    cache = qgen_cache(model, ids[:1])
    with torch.no_grad():
        model(ids[:1], past_key_values=cache, use_cache=True)
        with pytest.raises(NotImplementedError, match="chunked prefill"):
            model(ids[:1, :17], past_key_values=cache, use_cache=True)
    with torch.no_grad(), pytest.raises(ValueError, match="QgenCache"):
        model.generate(ids[:1], attention_mask=torch.ones_like(ids[:1]), max_new_tokens=2, do_sample=False,
                       pad_token_id=0)
    model.set_attn_implementation("sdpa")


@needs_transformers
@pytest.mark.parametrize("device", DEVICES)
def test_gpt_oss_sinks_and_windows(device):
    """A gpt-oss-shaped model (random weights: learned attention sinks in every layer,
    sliding windows of 16 tokens on every other one, mixture of experts) through a dense
    QgenCache gives the greedy tokens and logits of its own eager attention."""
    config = transformers.GptOssConfig(hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=32,
                                       num_local_experts=4, num_experts_per_tok=2, sliding_window=16,
                                       layer_types=["sliding_attention", "full_attention"],
                                       max_position_embeddings=4096)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        for layer in model.model.layers:  # sinks of the scores' scale, not the init's zeros
            layer.self_attn.sinks.normal_(0.0, 2.0)
    model.to(device)
    ids = random_ids(200, 12, device)
    tok_e, log_e = generate(model, ids, "eager")
    cache = qgen_cache(model, ids, k_type="f16")
    assert [layer.window for layer in cache.layers] == [16, 0]
    tok_q, log_q = generate(model, ids, "qgen", cache)
    worst = check_against_sdpa(tok_q, log_q, tok_e, log_e)
    print(f"{device} gpt-oss sinks + windows of 16: qgen dense vs eager worst logits rel. error {worst:.3g}")


@needs_transformers
def test_layer_windows():
    config = transformers.Qwen3Config(num_hidden_layers=2, use_sliding_window=True, sliding_window=128,
                                      max_window_layers=0, layer_types=["sliding_attention"] * 2)
    assert qt.layer_windows(config) == [128, 128]


@needs_transformers
@pytest.mark.parametrize("kw, err", [(dict(reselect=0), "integer >= 1"), (dict(reselect=2.5), "integer >= 1"),
                                     (dict(reselect=4), "give coverage or budget")])
def test_reselect_refused(kw, err):
    config = transformers.Qwen3Config(num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=64)
    with pytest.raises(ValueError, match=err):
        qt.QgenCache(config, max_tokens=1024, **kw)
