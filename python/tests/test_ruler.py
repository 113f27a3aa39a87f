"""test_ruler.py — the RULER-style trials (qgen.models.ruler) with SmolLM2's own tokenizer,
the scoring, and a tiny end-to-end run of bench/real_models.py on the CPU backend.

Needs the GGUF file (~/.cache/qgen/models/SmolLM2-135M-Instruct.Q4_1.gguf, or
$QGEN_MODEL_DIR), the gguf package and qgen.models; each test that needs one skips
with the reason when it is missing. The *-text tasks also need Debian's bible-kjv-text
(or $QGEN_RULER_TEXT) and skip without it.
"""
import importlib.util
import json
import os
import sys

import pytest

from qgen.models import ruler

MODELS_DIR = os.path.expanduser(os.environ.get("QGEN_MODEL_DIR") or "~/.cache/qgen/models")
SMOL = os.path.join(MODELS_DIR, "SmolLM2-135M-Instruct.Q4_1.gguf")
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "real_models.py")


def _why_no_model():
    if not os.path.isfile(SMOL):
        return f"the model file {SMOL} is absent (set QGEN_MODEL_DIR to the folder that holds it)"
    try:
        import gguf  # noqa: F401
    except ImportError:
        return "the gguf package is not importable (PYTHONPATH=/root/pylib/gguf, or pip install gguf)"
    try:
        import qgen.models as qm
    except ImportError as e:
        return f"qgen.models is not importable: {e}"
    if not hasattr(qm, "load"):
        return "qgen.models.load is missing (the real-model runner is not on this branch)"
    return None


@pytest.fixture(scope="module")
def model():
    why = _why_no_model()
    if why:
        pytest.skip(why)
    import qgen.models as qm

    return qm.load(SMOL, device="cpu")


@pytest.fixture(scope="module")
def tok(model):
    return model.tokenizer


def _tasks_here():
    return [t for t in ruler.TASKS if not ruler.task_needs_text(t) or ruler.has_text()]


def test_text_tasks_available_or_said(tmp_path):
    if not ruler.has_text():
        pytest.skip(f"no natural text: install Debian's {ruler.TEXT_PACKAGE} (apt-get install bible-kjv) "
                    f"or set {ruler.TEXT_ENV}; the *-text tasks are skipped")
    name, units = ruler.text_source()
    assert len(units) > 1000 and all(u.isascii() for u in units[:100])
    # the dumped file (what a machine without the package is given) reads back unit for unit,
    # so trials made from it are the trials made from the package
    out = tmp_path / "text.txt"
    ruler.dump_text(str(out))
    assert ruler.text_source(str(out))[1] == units


def test_missing_text_is_an_error_not_a_fallback(monkeypatch, tmp_path):
    monkeypatch.setenv(ruler.TEXT_ENV, str(tmp_path / "absent.txt"))
    with pytest.raises(ruler.TextUnavailable):
        ruler.text_source()


@pytest.mark.parametrize("n", [512, 1024, 2048])
def test_length_and_spans(tok, n):
    for task in _tasks_here():
        for seed in (0, 7):
            t = ruler.make(task, tok, n, seed)
            # at most n tokens, and within one haystack unit of it
            assert n - 64 <= len(t.prompt_ids) <= n, (task, seed, len(t.prompt_ids))
            assert t.meta["prompt_tokens"] == len(t.prompt_ids)
            assert t.answers and len(t.needle_token_spans) >= 1
            # every answer's tokens decode to exactly the answer, inside a needle span
            assert len(t.meta["answer_token_spans"]) == len(t.answers)
            for (a, b), ans in zip(t.meta["answer_token_spans"], t.answers):
                assert tok.decode(t.prompt_ids[a:b]).strip() == ans
                assert any(s <= a and b <= e for s, e in t.needle_token_spans)
            for s, e in t.needle_token_spans:
                assert 0 <= s < e <= len(t.prompt_ids) and e - s < 64
            # the answers appear in the prompt only inside needles (no leak elsewhere)
            inside = set()
            for s, e in t.needle_token_spans:
                inside.update(range(s, e))
            outside = tok.decode([x for i, x in enumerate(t.prompt_ids) if i not in inside])
            for ans in t.answers:
                assert ans not in outside, (task, ans)


def test_deterministic(tok):
    for task in _tasks_here():
        a, b = ruler.make(task, tok, 1024, 3), ruler.make(task, tok, 1024, 3)
        assert a.prompt_ids == b.prompt_ids and a.answers == b.answers
        assert a.needle_token_spans == b.needle_token_spans
        c = ruler.make(task, tok, 1024, 4)
        assert c.answers != a.answers
    # a seed asks the same question at every length
    assert ruler.make("passkey-noise", tok, 1024, 5).answers == ruler.make("passkey-noise", tok, 2048, 5).answers


def test_depth_follows_seed(tok):
    for seed in range(10):
        t = ruler.make("single-number-noise", tok, 2048, seed)
        d = t.meta["depth"]
        assert abs(d - (0.05 + 0.1 * seed)) < 1e-9
        s, _ = t.needle_token_spans[0]
        assert abs(s / len(t.prompt_ids) - d) < 0.12  # the frame (instruction, question) shifts it a little


def test_prompt_styles(tok):
    chat = ruler.make("single-number-noise", tok, 1024, 1, style="chat")
    text = tok.decode(chat.prompt_ids)
    assert "<|im_start|>assistant\n" in text and text.endswith(chat.meta["cue"])
    comp = ruler.make("single-number-noise", tok, 1024, 1, style="completion")
    text = tok.decode(comp.prompt_ids)
    assert "<|im_start|>" not in text and text.endswith("The hidden number for " + comp.meta["key"] + " is")
    with pytest.raises(ValueError):
        ruler.make("single-number-noise", tok, 1024, 1, style="other")
    with pytest.raises(ValueError):
        ruler.make("no-such-task", tok, 1024, 1)


def test_scoring():
    assert ruler.score(" 4829371.", ["4829371"])
    assert ruler.score("The hidden number is 4829371", ["4829371"])
    assert not ruler.score(" 48293712", ["4829371"])       # a longer number is not the answer
    assert not ruler.score(" 14829371", ["4829371"])
    assert not ruler.score(" 482937", ["4829371"])
    assert ruler.score("  ABC-Def  ", ["abc-def"])          # case and spaces do not matter
    assert ruler.score("2D6036FB-d654-4dd9-a89f-2bf8f58407f4", ["2d6036fb-d654-4dd9-a89f-2bf8f58407f4"])
    assert not ruler.score("2d6036fb-d654-4dd9-a89f-2bf8f58407f", ["2d6036fb-d654-4dd9-a89f-2bf8f58407f4"])
    assert ruler.score("1, 2 and 3", ["3", "1", "2"])       # every answer, in any order
    assert not ruler.score("1 and 3", ["1", "2", "3"])
    assert ruler.answer_hits("AAA, CCC", ["AAA", "BBB", "CCC"]) == [True, False, True]
    assert not ruler.score("", ["1"])
    # one answer: its first non-empty line only (a base model runs on past it)
    assert ruler.score("\n 4829371.\nWhat is the hidden number for x? 1111111", ["4829371"])
    assert not ruler.score(" 1111111.\nThe hidden number for y is 4829371.", ["4829371"])
    # several answers: the whole output (lists span lines)
    assert ruler.score("\n1. AAA\n2. BBB", ["AAA", "BBB"])


def test_wilson():
    lo, hi = ruler.wilson(50, 50)
    assert hi == 1.0 and abs(lo - 0.9287) < 1e-3
    lo, hi = ruler.wilson(25, 50)
    assert abs(lo - 0.3664) < 1e-3 and abs(hi - 0.6336) < 1e-3
    assert ruler.wilson(0, 0) == (0.0, 1.0)


def _bench():
    spec = importlib.util.spec_from_file_location("real_models", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["real_models"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_config_grid():
    rm = _bench()
    names = [c["name"] for c in rm.all_configs()]
    assert len(names) == len(set(names))
    for n in ("exact", "f16/dense", "f16/quest/c6.25", "f16/quest-f16b/c50", "f16/r4/b256", "f16/r16/b1024",
              "f16/r8-p0.9/c12.5", "q8_0/dense", "q8_0/r8/c6.25", "q4_0/quest/c25"):
        assert n in names
    assert "q8_0/r16/c6.25" not in names and "q4_0/r8/b512" not in names  # the cut cross product
    sel = [c["name"] for c in rm.pick_configs("f16/r8/*,exact", False)]
    assert sel == ["exact"] + [f"f16/r8/{b}" for b in ("c50", "c25", "c12.5", "c6.25", "b256", "b512", "b1024")]
    with pytest.raises(SystemExit):
        rm.pick_configs("f16/nope", False)


def test_grid_end_to_end(model, tmp_path):
    """Two trials of one task at ~1K tokens, dense and two-stage 25 %, CPU backend."""
    rm = _bench()
    out = tmp_path / "rm"
    rc = rm.main(["--model", SMOL, "--backend", "cpu", "--contexts", "1K", "--tasks", "single-number-noise",
                  "--trials", "2", "--configs", "f16/dense,f16/r8/c25", "--out", str(out)], model=model)
    assert rc == 0
    raw = out / "raw-smollm2.jsonl"
    recs = [json.loads(x) for x in raw.read_text().splitlines()]
    assert len(recs) == 4
    assert {(r["trial"], r["config"]) for r in recs} == {(t, c) for t in (0, 1) for c in ("f16/dense", "f16/r8/c25")}
    keys = {"kind", "model", "ctx", "task", "trial", "seed", "config", "k_type", "selector", "budget", "correct", "hits",
            "output", "n_new", "max_new", "prompt_tokens", "depth", "answers", "recall", "recall_answer", "recall_sink",
            "pages_selected", "decode_s", "prefill_s", "backend"}
    for r in recs:
        assert keys <= set(r), keys - set(r)
        assert r["kind"] == "trial" and r["ctx"] == 1024 and r["backend"] == "cpu"
        assert isinstance(r["correct"], bool) and r["correct"] == all(r["hits"])
        assert r["prompt_tokens"] <= 1024 - rm.GEN_RESERVE and 0 <= r["n_new"] <= r["max_new"]
        if r["config"] == "f16/dense":
            assert r["recall"] is None
        else:
            rc_ = r["recall"]
            assert rc_ is not None, "the two-stage config's page selection was not read back"
            assert 0.0 <= rc_["min"] <= rc_["mean"] <= 1.0 and rc_["layers"]
            assert r["recall_sink"] == 1.0  # page 0 is always kept: the page numbers are read right
            assert r["pages_selected"] >= 3  # sink, recent and last pages at least
    # the same answers from the same prompts: one dense prefill per trial serves every config
    assert len({r["prompt_tokens"] for r in recs if r["trial"] == 0}) == 1
    md = (out / "summary-smollm2.md").read_text()
    assert "## Verdict" in md and "single-number-noise @ 1024 tokens" in md and "[" in md
    js = json.loads((out / "summary-smollm2.json").read_text())
    assert js["model"] == "smollm2" and js["cells"][0]["task"] == "single-number-noise"
    assert set(js["cells"][0]["configs"]) == {"f16/dense", "f16/r8/c25"}
    # a rerun finds everything done and adds nothing
    assert rm.main(["--model", SMOL, "--backend", "cpu", "--contexts", "1K", "--tasks", "single-number-noise",
                    "--trials", "2", "--configs", "f16/dense,f16/r8/c25", "--out", str(out)], model=model) == 0
    assert len(raw.read_text().splitlines()) == 4


def test_agreement_end_to_end(model, tmp_path):
    """Free-running agreement, tiny: 4 exact steps after a 508-token natural-text prefix,
    f16/dense teacher-forced on them (f16 rounding only: it must agree)."""
    if not ruler.has_text():
        pytest.skip(f"no natural text for --agreement (Debian's {ruler.TEXT_PACKAGE} or ${ruler.TEXT_ENV})")
    rm = _bench()
    out = tmp_path / "ag"
    assert rm.main(["--model", SMOL, "--backend", "cpu", "--agreement", "--agree-contexts", "512",
                    "--agree-steps", "4", "--configs", "f16/dense,f16/r8/c25", "--out", str(out)], model=model) == 0
    recs = [json.loads(x) for x in (out / "agree-smollm2.jsonl").read_text().splitlines()]
    assert {r["config"] for r in recs} == {"f16/dense", "f16/r8/c25"}
    for r in recs:
        assert r["kind"] == "agreement" and r["steps"] == 4 and r["ctx"] == 512
        assert 0.0 <= r["agree"] <= 1.0 and r["kl_mean"] >= -1e-6 and r["kl_max"] >= r["kl_mean"] - 1e-9
    dense = next(r for r in recs if r["config"] == "f16/dense")
    assert dense["agree"] == 1.0 and dense["kl_mean"] < 1e-3
    assert "## Free-running agreement" in (out / "summary-smollm2.md").read_text()
