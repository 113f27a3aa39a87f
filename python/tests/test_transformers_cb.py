"""transformers' continuous batching through attn_implementation "paged|qgen" (test
size): a tiny random Qwen3 (2 layers, 8 query / 2 KV heads, head_dim 128,
bf16), 8 requests with prompts of 100 to 3000 tokens, 64 new greedy tokens each, through
model.generate_batch over transformers' own paged cache (pages of 32, qgen spec block 64).

    dense: every request's tokens equal those of "paged|sdpa", or, at a request's first
      difference, SDPA's top-2 logit gap there is below the measured logit error (the
      largest |qgen - SDPA| logit at that position, teacher-forced: SDPA over the context,
      and qgen's decode of its last token after an SDPA prefill of the rest);
    sparse (coverage 0.25): completes; its per-request token agreement with dense is
      printed (random weights give near-uniform attention: a smoke number).
Needs torch, transformers (continuous batching) and a CUDA device; skips otherwise.
"""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)
if not hasattr(getattr(transformers, "Qwen3ForCausalLM", None), "generate_batch"):  # a mixin of the model classes
    pytest.skip(f"transformers {transformers.__version__} has no continuous batching (generate_batch)",
                allow_module_level=True)
try:
    import qgen.transformers_paged as qtp
except Exception as e:  # the qgen package or its library is missing here
    pytest.skip(f"qgen.transformers_paged does not import: {e}", allow_module_level=True)

PROMPT_LENS = [100, 317, 640, 1000, 1536, 2048, 2500, 3000]
NEW_TOKENS = 64


@pytest.fixture(scope="module")
def model():
    config = transformers.Qwen3Config(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=8, num_key_value_heads=2, head_dim=128, vocab_size=1000,
                                      max_position_embeddings=65536)
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    yield m.to(device="cuda", dtype=torch.bfloat16).eval()
    torch.cuda.empty_cache()


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(1, 1000, (n,), generator=g).tolist() for n in PROMPT_LENS]


def tokens(model, prompts, attn, **spec):
    qtp.configure(**spec)
    try:
        outs = qtp.generate_batch(model, prompts, NEW_TOKENS, attn_implementation=attn)
    finally:
        qtp.configure()
    for out in outs:
        assert out.error is None, out.error
    return [list(out.generated_tokens) for out in outs]


def test_dense_matches_paged_sdpa(model, prompts):
    ref = tokens(model, prompts, "paged|sdpa")
    before = dict(qtp.calls)
    got = tokens(model, prompts, qtp.NAME)
    ran = {k: qtp.calls[k] - before[k] for k in before}
    print(f"paged|qgen layer calls: {ran}")
    layers = model.config.num_hidden_layers
    assert ran["decode"] + ran["mixed"] >= (NEW_TOKENS - 1) * layers, f"qgen attended too few steps: {ran}"
    equal = 0
    for r, (p, s, q) in enumerate(zip(prompts, ref, got)):
        assert len(q) == len(s) == NEW_TOKENS, f"request {r}: {len(q)} qgen / {len(s)} SDPA tokens"
        diff = qtp.greedy_difference(model, p, s, q)
        if diff is None:
            equal += 1
            continue
        d, gap, err = diff
        print(f"request {r} ({len(p)} tokens): tokens differ first at step {d}: top-2 gap {gap:.3g}, "
              f"logit error {err:.3g}")
        assert gap < err, f"request {r} step {d}: tokens differ with a top-2 gap {gap:.3g} >= logit error {err:.3g}"
    print(f"paged|qgen dense: {equal} of {len(prompts)} requests token for token equal to paged|sdpa")


def test_sparse_runs(model, prompts):
    dense = tokens(model, prompts, qtp.NAME)
    sparse = tokens(model, prompts, qtp.NAME, coverage=0.25)
    for r, (d, s) in enumerate(zip(dense, sparse)):
        assert len(s) == NEW_TOKENS, f"request {r}: {len(s)} tokens"
    agree = sum(x == y for d, s in zip(dense, sparse) for x, y in zip(d, s)) / (NEW_TOKENS * len(prompts))
    print(f"paged|qgen sparse 25 %: token agreement with dense {agree:.3f} (smoke number)")


def test_outside_continuous_batching_refused(model):
    model.set_attn_implementation(qtp.NAME)
    try:
        with torch.no_grad(), pytest.raises(ValueError, match="continuous batching"):
            model(torch.ones((1, 8), dtype=torch.long, device="cuda"))
    finally:
        model.set_attn_implementation("sdpa")
