"""test_models.py — qgen.models, the real-model runner, on the CPU: the tokenizers (against
hand-derived splits, their vocabularies, and the `regex` module's \\p classes when it is
installed), SmolLM2-135M and Gemma 3 270M answering and scoring text as the models should,
qgen's attention equal to the runner's per layer within a derived bound, sparse at a full
budget equal to dense bit for bit, and a 2K-token needle found by dense and by two-stage 25 %.

The model tests need the `gguf` package and the fetched model files (`python3 -m qgen.models
fetch smollm2`, `... gemma3`); they skip, saying which is missing, without them. The 2K needle
and Gemma tests also skip when NumPy's BLAS is the slow reference one (install OpenBLAS:
libopenblas0-pthread), which would take many minutes; .ci/run installs all of these.
"""
import math
import os
import random
import time

import numpy as np
import pytest

import qgen
from qgen import models
from qgen.models import tokenizer as tk

try:
    import gguf  # noqa: F401

    NO_GGUF = None
except ImportError:
    NO_GGUF = "the gguf package is not importable (python3 -m pip install --no-deps --target DIR gguf==0.19.0)"


def _model_path(name):
    if NO_GGUF:
        pytest.skip(NO_GGUF)
    try:
        return models.path(name)
    except models.ModelError as e:
        pytest.skip(str(e))


_GFLOPS = []


def blas_gflops():
    """float32 matrix-product speed of this NumPy (once): ~3 GFLOP/s with Debian's reference
    libblas, 50+ with OpenBLAS."""
    if not _GFLOPS:
        a = np.ones((256, 576), np.float32)
        b = np.ones((576, 1536), np.float32)
        a @ b
        t = time.perf_counter()
        for _ in range(4):
            a @ b
        _GFLOPS.append(4 * 2 * 256 * 576 * 1536 / (time.perf_counter() - t) / 1e9)
    return _GFLOPS[0]


def need_fast_blas():
    g = blas_gflops()
    if g < 15:
        pytest.skip(f"NumPy's BLAS does {g:.1f} GFLOP/s (the reference libblas?); this test would take many minutes "
                    "(install libopenblas0-pthread, as .ci/run does)")


# Prose written for these tests (about 250 tokens for either tokenizer).
SAMPLE = (
    "Rivers shape the land they cross. Over thousands of years, a river carves a valley, carries sand and "
    "silt downstream, and builds wide plains where it slows near the sea. Farmers have always settled along "
    "rivers because the soil there is rich and water is close at hand. Many of the oldest cities in the world "
    "grew up on river banks, where boats could bring goods from far away and carry harvests to market.\n\n"
    "A river also brings danger. In spring, melting snow and heavy rain can raise the water level quickly, "
    "and a flood may cover fields and streets within a few hours. To protect themselves, people build levees, "
    "dams and channels that guide the water away from their homes. These works help, but they also change "
    "the river: fish lose the places where they breed, and the sand that once renewed the fields is trapped "
    "behind the dams.\n\n"
    "Today, engineers and scientists try to balance these needs. They measure the flow of water every day, "
    "study how the banks erode, and plan reservoirs that store water for dry summers. Some towns have even "
    "removed old dams so that the river can return to a more natural course. The result is often a cleaner "
    "river, more fish, and a landscape that people enjoy visiting on weekends."
)

ROUND_TRIP = ["", "Hello world", "  leading and   inner spaces  ", "tabs\tand\nnew\n\n\nlines\r\n", "12345 + 0.5 = x",
              "don't we'll THEY'RE", "héllo wörld — naïve café", "日本語のテキスト", "emoji 🦙🚀 and ∑ symbols",
              "trailing space ", "\u00a0non-breaking\u2003em space", "x" * 300]


# ---- no model needed -------------------------------------------------------------------

def test_package_imports_without_gguf():
    """qgen.models is part of the package (installed copies too) and imports nothing heavy."""
    assert callable(models.load) and "smollm2" in models.MODELS and "gemma3" in models.MODELS
    assert models.SUPPORTED_ARCHS == ("llama", "gemma3")
    with pytest.raises(models.ModelError, match="fetch it with: python3 -m qgen.models fetch gemma3"):
        models.path("gemma3", directory=os.path.join(os.sep, "nonexistent-qgen-dir"))
    with pytest.raises(models.ModelError, match="unknown model 'llama9'; known: smollm2, gemma3"):
        models.path("llama9")


def test_gpt2_split_by_hand():
    """GPT-2's pattern, worked out by hand: a space joins the word after it, a run of spaces
    before a word gives up its last space, a run at the end stays whole."""
    assert tk.gpt2_split("Hello world") == ["Hello", " world"]
    assert tk.gpt2_split("Hello   world") == ["Hello", "  ", " world"]
    assert tk.gpt2_split("a\n\nb") == ["a", "\n", "\n", "b"]
    assert tk.gpt2_split("end  ") == ["end", "  "]
    assert tk.gpt2_split("don't we'll") == ["don", "'t", " we", "'ll"]
    assert tk.gpt2_split("x 'sup") == ["x", " '", "sup"]
    assert tk.gpt2_split("wow!!! ok?") == ["wow", "!!!", " ok", "?"]
    assert tk.gpt2_split("é漢字 ½") == ["é漢字", " ½"]  # letters of any script; ½ is a number
    # SmolLM2: digits one by one before the pattern
    assert tk.smollm_split("in 2024, 3.5x") == ["in", " ", "2", "0", "2", "4", ",", " ", "3", ".", "5", "x"]


def test_gpt2_split_matches_the_regex_module():
    """The pattern with real \\p{L} / \\p{N} classes (the `regex` module), on fixed and random text."""
    regex = pytest.importorskip("regex", reason="the regex module is not installed (an optional oracle)")
    pat = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
    rng = random.Random(0)
    alphabet = " \t\n\r\u00a0\u2003'sdtlmrevA1٣²½漢字é!?.-_\u0301\U0001F600\x1c\x85"
    texts = ROUND_TRIP + [SAMPLE] + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
                                     for _ in range(2000)]
    for t in texts:
        assert tk.gpt2_split(t) == pat.findall(t), repr(t)
        ref = [x for piece in regex.split(r"(\p{N})", t) if piece for x in pat.findall(piece)]
        assert tk.smollm_split(t) == ref, repr(t)


def test_sentencepiece_merges_by_score_with_byte_fallback():
    """A toy vocabulary: the highest-scoring pair merges first (ab beats bc, so abc -> ab + c;
    in bcab, bc goes first and leaves no c for cab),
    spaces are U+2581, control tokens are whole only with special=True, user-defined always,
    and an unknown character falls back to its UTF-8 bytes."""
    N, C, U, B = tk.NORMAL, tk.CONTROL, tk.USER_DEFINED, tk.BYTE
    vocab = [("<pad>", C, 0), ("<bos>", C, 0), ("<eos>", C, 0), ("<turn>", C, 0), ("\n\n", U, 0),
             ("a", N, -1), ("b", N, -1), ("c", N, -1), ("\u2581", N, -1), ("ab", N, -2), ("bc", N, -3),
             ("\u2581ab", N, -4), ("cab", N, -9)] + [(f"<0x{i:02X}>", B, 0) for i in range(256)]
    t = tk.Tokenizer("llama", [v[0] for v in vocab], [v[1] for v in vocab], scores=[v[2] for v in vocab],
                     bos_id=1, eos_id=2, add_bos=True)
    ids = {v[0]: i for i, v in enumerate(vocab)}
    assert t.encode("abc", add_bos=False) == [ids["ab"], ids["c"]]
    assert t.encode("bcab", add_bos=False) == [ids["bc"], ids["ab"]]  # cab needs c+ab, but bc went first
    assert t.encode("abc") == [ids["<bos>"], ids["ab"], ids["c"]]
    assert t.encode(" ab\n\nbc", add_bos=False) == [ids["\u2581ab"], ids["\n\n"], ids["bc"]]
    assert t.encode("<turn>a", add_bos=False) == [ids["<turn>"], ids["a"]]
    assert t.encode("<turn>", add_bos=False, special=False) == [ids["<0x3C>"], ids["<0x74>"], ids["<0x75>"],
                                                                 ids["<0x72>"], ids["<0x6E>"], ids["<0x3E>"]]
    e = t.encode("é", add_bos=False)
    assert e == [ids["<0xC3>"], ids["<0xA9>"]] and t.decode(e) == "é"
    assert t.decode(t.encode(" ab\n\nbc")) == "<bos> ab\n\nbc" and t.decode(t.encode("abc"), skip_special=True) == "abc"
    assert t.eos_ids == [2]


def _toy_model(window, n_head=4, n_head_kv=2, head_dim=32):
    """A Model holding only what attention reads (no weights), for exact-attention checks."""
    from qgen.models._ops import NumpyOps

    cfg = models.Config(arch="gemma3", name="toy", n_layer=2, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                        hidden=64, ffn=64, vocab=10, context_length=4096, eps=1e-6, rope_base=1e6,
                        rope_base_local=1e4, rope_scale=1.0, rope_dim=head_dim, rope_neox=True, attn_scale=0.125,
                        embed_scale=1.0, sliding_window=window, global_layers=[1])
    return models.Model("toy", cfg, None, {"layers": []}, NumpyOps())


def _fp64_attention(q, k, v, scale, group, visible):
    out = np.zeros(q.shape)
    for i in range(q.shape[0]):
        js = [j for j in range(k.shape[0]) if visible(i, j)]
        for h in range(q.shape[1]):
            s = k[js, h // group].astype(np.float64) @ q[i, h].astype(np.float64) * scale
            w = np.exp(s - s.max())
            out[i, h] = (w / w.sum()) @ v[js, h // group]
    return out


def test_exact_attention_causal_and_sliding_window(monkeypatch):
    """Prefill's chunked attention and decode's ExactAttention against a float64 loop: query i
    sees keys j <= i, and on a sliding layer with window W only i - W < j <= i (the current
    token and the W - 1 before it), across chunk boundaries (chunks of 8 here)."""
    import qgen.models.model as mm

    monkeypatch.setattr(mm, "QUERY_CHUNK", 8)
    rng = np.random.default_rng(3)
    n, W = 40, 6
    m = _toy_model(W)
    q = rng.standard_normal((n, 4, 32)).astype(np.float32)
    k = rng.standard_normal((n, 2, 32)).astype(np.float32)
    v = rng.standard_normal((n, 2, 32)).astype(np.float32)
    for layer, visible in ((1, lambda i, j: j <= i), (0, lambda i, j: i - W < j <= i)):
        got = m._attend_prefill(q, k, v, m._window(layer)).reshape(n, 4, 32)
        np.testing.assert_allclose(got, _fp64_attention(q, k, v, 0.125, 2, visible), atol=1e-5)
    # decode: a 30-token State, then 10 tokens one at a time
    st = models.State(ids=[0] * 30, k=[k[:30], k[:30]], v=[v[:30], v[:30]], logits=None, n=30)
    ex = models.ExactAttention()
    ex.bind(m, [st], 10)
    for t in range(30, 40):
        for layer, visible in ((0, lambda i, j: i - W < j <= i), (1, lambda i, j: j <= i)):
            out = ex.step(layer, q[t:t + 1], k[t:t + 1], v[t:t + 1])
            ref = _fp64_attention(q[:t + 1], k[:t + 1], v[:t + 1], 0.125, 2, visible)[t]
            np.testing.assert_allclose(out[0], ref, atol=1e-5)


def test_unknown_architecture_is_refused(tmp_path):
    if NO_GGUF:
        pytest.skip(NO_GGUF)
    import gguf

    p = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(p), "gpt2")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(models.ModelError, match=r"architecture 'gpt2' is not supported \(supported: llama, gemma3\)"):
        models.load(p)
    with pytest.raises(models.ModelError, match="no such file"):
        models.load(tmp_path / "missing.gguf")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(models.ModelError, match="not a readable GGUF file"):
        models.load(tmp_path / "junk.gguf")


# ---- SmolLM2 ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smol():
    return models.load(_model_path("smollm2"))


def test_smollm2_tokenizer(smol):
    t = smol.tokenizer
    v = t.vocab
    for s in ROUND_TRIP + [SAMPLE]:
        assert t.decode(t.encode(s)) == s, repr(s)
    # common words are single tokens, spelt with GPT-2's Ġ for the space before them
    assert t.encode("The capital of France is Paris.") == [v["The"], v["Ġcapital"], v["Ġof"], v["ĠFrance"], v["Ġis"],
                                                          v["ĠParis"], v["."]]
    assert t.encode("in 2024") == [v["in"], v["Ġ"], v["2"], v["0"], v["2"], v["4"]]
    assert t.encode("a\n\nb") == [v["a"], v["Ċ"], v["Ċ"], v["b"]]
    assert t.encode("é") == [v["Ã©"]]  # bytes C3 A9 in the byte alphabet, merged
    assert not t.add_bos and t.encode("hi") == t.encode("hi", add_bos=False)
    # control tokens whole, or as text when special=False
    assert t.encode("<|im_start|>user") == [v["<|im_start|>"], v["user"]]
    assert v["<|im_start|>"] not in t.encode("<|im_start|>", special=False)
    assert v["<|im_end|>"] in t.eos_ids and t.decode([v["<|im_end|>"]], skip_special=True) == ""
    prompt = t.chat("Hi")
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_smollm2_config(smol):
    c = smol.config
    assert (c.arch, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.hidden, c.vocab) == ("llama", 30, 9, 3, 64, 576, 49152)
    assert c.rope_base == 100000.0 and not c.rope_neox and c.global_layers == list(range(30)) and c.tie
    assert c.chat_template and abs(c.eps - 1e-5) < 1e-9 and c.attn_scale == 1 / 8


def test_smollm2_answers_and_perplexity(smol):
    """The chat answer names Paris; perplexity on SAMPLE is 25.3 measured. Plain English prose
    under a 135M model is in the tens; a wrong rotary layout measured 230, uniform guessing
    would be 49152. The range [12, 40] allows BLAS rounding, not a broken model."""
    t = smol.tokenizer
    r = smol.generate(smol.prefill(t.encode(t.chat("What is the capital of France?"))), 16)
    assert "Paris" in r.text and r.stopped, r.text
    ppl = smol.perplexity(t.encode(SAMPLE))
    assert 12 < ppl < 40, ppl


def test_decode_matches_prefill(smol):
    """Decoding token by token (the runner's exact attention over a State plus new K/V) gives
    the next-token likelihoods that one prefill over the whole text gives."""
    ids = smol.tokenizer.encode(SAMPLE)[:120]
    full_nll = smol.nll(ids)
    state = smol.prefill(ids[:100])
    r = smol.generate(state, 20, force=ids[100:120], return_logits=True)
    lg = r.logits.astype(np.float64)
    lse = lg.max(-1) + np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1))
    dec_nll = lse - lg[np.arange(20), ids[100:120]]
    np.testing.assert_allclose(dec_nll, full_nll[99:119], atol=2e-3)


class Compare:
    """Runs qgen and the runner's exact attention on the same q, k, v at every full-attention
    layer and step, and measures qgen's error against two references:

    - the runner (float32 K and V): within `bound`, the worst case of storing K and V in f16
      (unit roundoff u = 2^-11): a score moves by at most d = scale·u·sum|q||k|, so each weight
      by a factor within e^(±2d), which moves the output by at most (e^(2d) - 1)·max|v|; the
      rounded V adds u·max|v|. Anything attending wrong tokens is off by O(|v|).
    - float64 attention over the f16-rounded K and V qgen stores: within float32 accumulation
      (ref_err, relative to max|v|)."""

    def __init__(self, qa, f16=True):
        self.qa, self.ex, self.f16 = qa, models.ExactAttention(), f16
        self.ratio, self.err, self.ref_err = {}, {}, {}

    def bind(self, model, states, max_new):
        self.model, self.states = model, states
        self.qa.bind(model, states, max_new)
        self.ex.bind(model, states, max_new)
        self.new = {}

    def step(self, layer, q, k, v):
        out = self.qa.step(layer, q, k, v)
        run = self.ex.step(layer, q, k, v)
        c = self.model.config
        self.new.setdefault(layer, []).append((k.copy(), v.copy()))
        u = 2.0 ** -11
        for b, st in enumerate(self.states):
            K = np.concatenate([st.k[layer]] + [x[0][b:b + 1] for x in self.new[layer]]).astype(np.float64)
            V = np.concatenate([st.v[layer]] + [x[1][b:b + 1] for x in self.new[layer]]).astype(np.float64)
            K16, V16 = K.astype(np.float16).astype(np.float64), V.astype(np.float16).astype(np.float64)
            for h in range(c.n_head):
                g = h // (c.n_head // c.n_head_kv)
                qh = q[b, h].astype(np.float64)
                d = c.attn_scale * u * (np.abs(K[:, g]) @ np.abs(qh)).max()
                vmax = np.abs(V[:, g]).max(0)
                bound = (math.expm1(2 * d) + u) * vmax + 1e-6
                diff = np.abs(out[b, h] - run[b, h])
                self.ratio[layer] = max(self.ratio.get(layer, 0), float((diff / bound).max()))
                self.err[layer] = max(self.err.get(layer, 0), float(diff.max()))
                s = K16[:, g] @ qh * c.attn_scale
                w = np.exp(s - s.max())
                ref = (w / w.sum()) @ V16[:, g]
                self.ref_err[layer] = max(self.ref_err.get(layer, 0),
                                          float(np.abs(out[b, h] - ref).max() / vmax.max()))
        return out


def test_qgen_equals_the_runner_per_layer(smol):
    """qgen (dense f16 cache, CPU backend) against the runner in every layer over a 300-token
    prompt and 6 decode steps; then sparse with a budget covering the context equals dense bit
    for bit (qgen's design: the full list is the dense step), logits of a teacher-forced decode."""
    ids = smol.tokenizer.encode(SAMPLE + " " + SAMPLE)[:300]
    state = smol.prefill(ids)
    cmp = Compare(models.QgenAttention(smol, sparse=False))
    smol.generate(state, 7, attention=cmp, stop=False)
    assert sorted(cmp.ratio) == list(range(30))
    worst = max(cmp.ratio.values())
    assert worst <= 1.0, {k: round(r, 3) for k, r in cmp.ratio.items()}
    # float32 sums over ~300 terms: a few ulps relative to the values' size
    assert max(cmp.ref_err.values()) < 1e-5, cmp.ref_err
    # not vacuous: f16 storage does move the outputs, by far less than the bound allows
    assert max(cmp.err.values()) > 0
    dense = smol.generate(state, 6, force=[0] * 6, return_logits=True,
                          attention=models.QgenAttention(smol, attend={"dense": True}))
    full = smol.generate(state, 6, force=[0] * 6, return_logits=True,
                         attention=models.QgenAttention(smol, sparse={"coverage": 1.0, "rescore": {"candidates": 8}}))
    assert full.logits.tobytes() == dense.logits.tobytes()
    exact = smol.generate(state, 6, force=[0] * 6, return_logits=True)
    assert exact.logits.tobytes() != dense.logits.tobytes()  # f16 storage does change something
    np.testing.assert_allclose(dense.logits, exact.logits, atol=0.05)


def test_state_is_shared_not_written(smol):
    """One prefill serves many decodes: the State's arrays are read-only and unchanged, and
    a batch of two states decodes each as it would alone."""
    t = smol.tokenizer
    a = smol.prefill(t.encode(t.chat("What is the capital of France?")))
    b = smol.prefill(t.encode(t.chat("Name a color of the rainbow.")))
    before = [x.copy() for x in a.k + a.v]
    qa = models.QgenAttention(smol, sparse={"coverage": 0.5})
    alone = [smol.generate(s, 10, attention=qa).ids for s in (a, b)]
    both = smol.generate([a, b], 10, attention=qa)
    assert [r.ids for r in both] == alone
    assert all(np.array_equal(x, y) for x, y in zip(before, a.k + a.v))
    assert not a.k[0].flags.writeable
    with pytest.raises(ValueError):
        a.k[0][0, 0, 0] = 1.0
    lists = qa.selection(layer=3, seq=1)
    assert len(lists) == 3 and all(len(p) >= 1 for p in lists)


def test_bad_input_is_refused_clearly(smol):
    state = smol.prefill([1, 2, 3])
    assert smol.generate(state, 0).ids == [] and len(smol.generate(state, 1).ids) == 1
    with pytest.raises(ValueError, match="the prompt is empty"):
        smol.prefill([])
    with pytest.raises(ValueError, match=r"token id 49152 is outside the vocabulary \[0, 49152\)"):
        smol.prefill([5, 49152])
    with pytest.raises(TypeError, match="expected a State from prefill"):
        smol.generate([1, 2, 3], 4)
    with pytest.raises(ValueError, match="force has 1 lists for 2 states"):
        smol.generate([state, state], 2, force=[[1]])
    with pytest.raises(ValueError, match="give a dict of sparse fields, or False for dense"):
        models.QgenAttention(smol, sparse="yes")
    with pytest.raises(ValueError, match="scale comes from the model"):
        models.QgenAttention(smol, scale=0.1)
    with pytest.raises(qgen.Error, match="k_type"):
        models.QgenAttention(smol, k_type="q9")
    with pytest.raises(ValueError, match="backend='gpu' takes CUDA tensors"):
        models.QgenAttention(smol, backend="gpu")
    with pytest.raises(ValueError, match="the NumPy runner computes in float32"):
        models.load(smol.path, dtype="float16")


def _run_demo(*args):
    import subprocess
    import sys

    pkg = os.path.dirname(os.path.dirname(os.path.abspath(qgen.__file__)))
    # the child imports what this process imports: this qgen and this gguf
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([pkg] + [p for p in sys.path if p]))
    return subprocess.run([sys.executable, "-m", "qgen.run", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_demo_command(smol):
    """python -m qgen.run: the answer through qgen beside the dense one, tokens/s, and clear
    errors for a missing file or a bad option."""
    r = _run_demo("--gguf", smol.path, "--prompt", "What is the capital of France?", "--max-new", "12",
                  "--compare-dense", "--rescore", "4", "--k-type", "q8_0")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout and "tokens/s" in r.stdout and "match:" in r.stdout, r.stdout
    assert "30 of 30 layers through qgen (cpu), cache q8_0, coverage 0.25, two-stage (rescore 4)" in r.stdout
    r = _run_demo("--gguf", "/nonexistent/model.gguf", "--prompt", "x")
    assert r.returncode == 2 and "no such file" in r.stderr and "python3 -m qgen.models fetch" in r.stderr
    r = _run_demo("--prompt", "x", "--coverage", "1.5")
    assert r.returncode == 2 and "must be in (0, 1]" in r.stderr


FILLER = ["The morning train left the station a few minutes late.", "A gardener watered the roses along the fence.",
          "Two children built a small boat out of paper and string.", "The library closes early on the first Monday.",
          "Clouds drifted slowly over the quiet hills.", "A baker sold warm bread to the people waiting outside.",
          "The old clock in the hall had stopped at noon.", "Someone left a blue umbrella on the bench."]


def needle_prompt(tok, number, depth, n_tokens, rng):
    sentences = []
    while len(tok.encode(" ".join(sentences))) < n_tokens - 90:
        sentences.append(rng.choice(FILLER))
    sentences.insert(int(depth * len(sentences)), f"The special magic number is {number}. Remember it.")
    question = "What is the special magic number mentioned in the text above?"
    return tok.chat(" ".join(sentences) + "\n" + question)


def test_needle_2k_dense_and_two_stage_25(smol):
    """A 7-digit number hidden at three depths of ~2K tokens of filler: the runner's exact
    decode and qgen's two-stage selection at 25 % of the pages both answer it."""
    need_fast_blas()
    tok = smol.tokenizer
    rng = random.Random(7)
    qa = models.QgenAttention(smol, sparse={"coverage": 0.25, "rescore": {"candidates": 8}}, record=True)
    for depth in (0.2, 0.5, 0.8):
        number = str(rng.randint(1000000, 9999999))
        ids = tok.encode(needle_prompt(tok, number, depth, 2048, rng))
        assert 1900 <= len(ids) <= 2100
        state = smol.prefill(ids)
        dense = smol.generate(state, 24)
        sparse = smol.generate(state, 24, attention=qa)
        assert number in dense.text, (depth, dense.text)
        assert number in sparse.text, (depth, sparse.text)
        # the first qgen step (the prompt plus one token): per layer and KV head, 25 % of the
        # pages or the forced ones (sink page 0, the pages of the last 128 tokens, the last)
        n = state.n + 1
        pages = -(-n // 64)
        forced = {0, pages - 1} | set(range((n - 128) // 64, pages))
        want = max(math.ceil(0.25 * pages), len(forced))
        digits = tok.encode(number)
        at = next(i for i in range(len(ids)) if ids[i:i + len(digits)] == digits)
        needle_pages = {p // 64 for p in range(at, at + len(digits))}
        hits = []
        for layer in range(30):
            for p in qa.selection(layer, step=0):
                assert len(p) == want and p == sorted(set(p)) and forced <= set(p) and p[-1] == pages - 1
                hits.append(len(needle_pages & set(p)) / len(needle_pages))
        print(f"needle at depth {depth}: pages {sorted(needle_pages)} selected in {np.mean(hits):.0%} of "
              f"(layer, KV head) lists at the first step")


def test_torch_path_on_cpu_tensors(smol):
    """The same forward pass over torch CPU tensors (float32), with qgen through torch tensors:
    the same tokens, and logits (magnitudes ~20) equal up to float32 summation order (torch's
    and NumPy's BLAS differ), which after 30 layers and a dozen steps is ~1e-4 relative."""
    pytest.importorskip("torch", reason="torch is not installed (the torch path is optional)")
    mt = models.load(smol.path, arrays="torch")
    t = smol.tokenizer
    ids = t.encode(t.chat("What is the capital of France?"))
    sn, st = smol.prefill(ids), mt.prefill(ids)
    np.testing.assert_allclose(st.logits, sn.logits, atol=2e-3)
    qa_n = models.QgenAttention(smol, sparse={"coverage": 0.25})
    qa_t = models.QgenAttention(mt, sparse={"coverage": 0.25})
    rn = smol.generate(sn, 12, attention=qa_n, return_logits=True)
    rt = mt.generate(st, 12, attention=qa_t, return_logits=True)
    assert rt.ids == rn.ids and "Paris" in rt.text
    np.testing.assert_allclose(rt.logits, rn.logits, atol=1e-2)


# ---- Gemma 3 ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemma():
    p = _model_path("gemma3")
    need_fast_blas()
    return models.load(p)


def test_gemma3_tokenizer_and_config(gemma):
    t, c = gemma.tokenizer, gemma.config
    v = t.vocab
    assert (c.arch, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.hidden, c.vocab) == \
        ("gemma3", 18, 4, 1, 256, 640, 262144)
    assert c.global_layers == [5, 11, 17] and c.sliding_window == 512 and c.rope_neox
    assert (c.rope_base, c.rope_base_local, c.attn_scale) == (1e6, 1e4, 1 / 16) and c.embed_scale == math.sqrt(640)
    for s in ROUND_TRIP + [SAMPLE]:
        assert t.decode(t.encode(s), skip_special=True) == s, repr(s)
    assert t.encode("The capital of France is") == [t.bos_id, v["The"], v["▁capital"], v["▁of"], v["▁France"], v["▁is"]]
    assert t.encode("12", add_bos=False) == [v["1"], v["2"]]  # no multi-digit pieces in this vocabulary
    assert t.encode("a\n\nb  c", add_bos=False) == [v["a"], v["\n\n"], v["b"], v["  "], v["c"]]
    assert t.encode("🦙", add_bos=False) == [v["<0xF0>"], v["<0x9F>"], v["<0xA6>"], v["<0x99>"]]
    assert t.encode("<start_of_turn>user", add_bos=False) == [v["<start_of_turn>"], v["user"]]
    assert v["<end_of_turn>"] in t.eos_ids and t.bos_id == v["<bos>"]


def test_gemma3_answers_perplexity_and_window(gemma):
    """Base-model completion names Paris; SAMPLE's perplexity is in the tens (22.0 measured;
    wrong norm weights measured 10^7, a global rotary base on local layers 100+); a text of
    three copies of SAMPLE (~750 tokens, past the 512-token window) is copied almost exactly in
    its later copies; and decoding past the window matches prefill's likelihoods."""
    t = gemma.tokenizer
    r = gemma.generate(gemma.prefill(t.encode("Question: What is the capital of France?\nAnswer:")), 4)
    assert "Paris" in r.text, r.text
    one = t.encode(SAMPLE)
    assert 12 < math.exp(gemma.nll(one).mean()) < 40
    ids = t.encode(SAMPLE + "\n\n" + SAMPLE + "\n\n" + SAMPLE)
    nll = gemma.nll(ids)
    assert math.exp(nll[len(one) + 20:].mean()) < 1.5
    # decode across position 512 (sliding layers drop their oldest keys) vs one prefill
    state = gemma.prefill(ids[:500])
    r = gemma.generate(state, 30, force=ids[500:530], return_logits=True)
    lg = r.logits.astype(np.float64)
    lse = lg.max(-1) + np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1))
    np.testing.assert_allclose(lse - lg[np.arange(30), ids[500:530]], nll[499:529], atol=2e-3)


def test_gemma3_qgen_on_global_layers(gemma):
    """qgen serves only the global layers 5, 11, 17 (scale 1/16 from query_pre_attn_scalar),
    within the f16 bound of the runner, past the sliding window."""
    ids = gemma.tokenizer.encode(SAMPLE + "\n\n" + SAMPLE + "\n\n" + SAMPLE)[:600]
    state = gemma.prefill(ids)
    qa = models.QgenAttention(gemma, sparse=False)
    assert qa.info["scale"] == 1 / 16 and qa.info["head_dim"] == 256
    cmp = Compare(qa)
    r = gemma.generate(state, 5, attention=cmp, stop=False)
    assert sorted(cmp.ratio) == [5, 11, 17] and len(r.ids) == 5
    assert max(cmp.ratio.values()) <= 1.0, cmp.ratio
    assert max(cmp.ref_err.values()) < 1e-5, cmp.ref_err
