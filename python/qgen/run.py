"""python -m qgen.run — the one-command demo: a real model answers a prompt with every
full-attention layer decoding through qgen's sparse attention, optionally beside the same
model decoding with exact attention.

    python -m qgen.run --gguf smollm2 --prompt "What is the capital of France?" --compare-dense
    python -m qgen.run --gguf gemma3 --prompt "The Eiffel Tower is in" --coverage 0.1 --k-type q8_0
"""
import argparse
import os
import sys
import time


def _parser():
    ap = argparse.ArgumentParser(
        prog="python -m qgen.run",
        description="Run a GGUF model (Llama architecture such as SmolLM2, or Gemma 3) on a prompt, greedy, with "
                    "every full-attention layer's decode attention going through qgen (sparse by default: "
                    "25%% of the 64-token pages). The prompt is prefilled with exact attention.",
        epilog="Models: 'smollm2' and 'gemma3' name the files fetched by `python -m qgen.models fetch NAME` "
               "(into $QGEN_MODEL_DIR or ~/.cache/qgen/models). Example: python -m qgen.run --gguf smollm2 "
               "--prompt 'What is the capital of France?' --compare-dense")
    ap.add_argument("--gguf", default="smollm2", help="a .gguf file, or smollm2 / gemma3 (default: smollm2)")
    ap.add_argument("--prompt", required=True, help="the prompt text (wrapped in the chat format with --chat)")
    ap.add_argument("--prompt-file", action="store_true", help="--prompt names a file whose text is the prompt")
    b = ap.add_mutually_exclusive_group()
    b.add_argument("--coverage", type=float, help="fraction of pages attended, in (0, 1] (default 0.25)")
    b.add_argument("--budget", type=int, help="tokens attended (a multiple of the 64-token page, rounded up)")
    b.add_argument("--dense", action="store_true", help="qgen's dense attention (no selection)")
    # Two-stage r = 8 by default: on SmolLM2's RULER grid Quest alone lost 53-80 points of
    # accuracy (mean) at 50-25 % of the pages where r = 8 matched dense (bench/results/real-models-h100).
    ap.add_argument("--rescore", type=int, default=8,
                    help="two-stage selection: Quest picks RESCORE candidates per budget page, which are "
                         "rescored exactly (default 8; 1: Quest alone)")
    ap.add_argument("--k-type", default="f16", help="qgen cache type of K and V: f16, bf16, q8_0, q4_0, q5_0 (default f16)")
    ap.add_argument("--backend", choices=["cpu", "gpu"], default="cpu",
                    help="cpu: NumPy and qgen's reference executor; gpu: torch on CUDA and qgen's kernels")
    ap.add_argument("--dtype", default=None, help="under --backend gpu: float32 (default), float16 or bfloat16")
    ap.add_argument("--max-new", type=int, default=64, help="tokens to generate at most (default 64)")
    c = ap.add_mutually_exclusive_group()
    c.add_argument("--chat", dest="chat", action="store_true", default=None,
                   help="wrap the prompt as one user turn (default when the file has a chat template)")
    c.add_argument("--no-chat", dest="chat", action="store_false", help="use the prompt as plain text")
    ap.add_argument("--compare-dense", action="store_true",
                    help="also decode with the runner's exact attention and say whether the answers match")
    ap.add_argument("--no-stream", action="store_true", help="print the answer at the end instead of token by token")
    return ap


class _Streamer:
    """Prints a sequence's text as its tokens come, holding back bytes of an unfinished
    UTF-8 character and the stop token."""

    def __init__(self, tok, out, enabled):
        self.tok, self.out, self.enabled = tok, out, enabled
        self.ids, self.shown = [], ""

    def __call__(self, _seq, token):
        if not self.enabled:
            return
        if token in self.tok.eos_ids:
            return
        self.ids.append(token)
        text = self.tok.decode(self.ids, skip_special=True)
        if text.endswith("\ufffd"):
            return
        self.out.write(text[len(self.shown):].replace("\n", "\n        "))
        self.out.flush()
        self.shown = text


def main(argv=None):
    a = _parser().parse_args(argv)
    out = sys.stdout

    def fail(msg):
        print(f"error: {msg}", file=sys.stderr)
        return 2

    if a.max_new < 1:
        return fail(f"--max-new {a.max_new}: give at least 1")
    if a.coverage is not None and not 0 < a.coverage <= 1:
        return fail(f"--coverage {a.coverage}: must be in (0, 1]")
    if a.budget is not None and a.budget < 1:
        return fail(f"--budget {a.budget}: must be at least 1 token")
    if a.rescore < 1:
        return fail(f"--rescore {a.rescore}: must be at least 1")
    prompt = a.prompt
    if a.prompt_file:
        try:
            with open(a.prompt, encoding="utf-8") as f:
                prompt = f.read()
        except OSError as e:
            return fail(f"--prompt-file: {e}")
    try:
        from . import Error
        from . import models
    except (ImportError, OSError) as e:
        return fail(f"cannot load qgen: {e}")
    from .models import ModelError

    gguf = a.gguf
    if gguf not in models.MODELS and not os.path.exists(gguf):
        return fail(f"{gguf}: no such file; give a .gguf path or one of {', '.join(models.MODELS)} "
                    f"(fetched with: python3 -m qgen.models fetch NAME)")
    try:
        t0 = time.perf_counter()
        device = "cuda" if a.backend == "gpu" else "cpu"
        if a.backend == "cpu" and a.dtype not in (None, "float32"):
            return fail(f"--dtype {a.dtype} needs --backend gpu (the CPU runner computes in float32)")
        model = models.load(gguf, device=device, dtype=a.dtype)
        load_s = time.perf_counter() - t0
        cfg, tok = model.config, model.tokenizer
        chat = a.chat if a.chat is not None else cfg.chat_template
        text = tok.chat(prompt) if chat else prompt
        ids = tok.encode(text)
        if len(ids) + a.max_new > cfg.context_length:
            print(f"note: {len(ids)} prompt tokens + {a.max_new} new exceed the model's trained context "
                  f"({cfg.context_length}); quality may suffer", file=sys.stderr)
        if a.dense:
            sparse, mode = False, "dense"
        else:
            sparse = {"block": 64}
            if a.budget is not None:
                sparse["budget"] = a.budget
                mode = f"budget {a.budget} tokens"
            else:
                sparse["coverage"] = a.coverage if a.coverage is not None else 0.25
                mode = f"coverage {sparse['coverage']:g}"
            if a.rescore > 1:
                sparse["rescore"] = {"candidates": a.rescore}
                mode += f", two-stage (rescore {a.rescore})"
            else:
                mode += ", Quest"
        qa = models.QgenAttention(model, k_type=a.k_type, sparse=sparse, backend=a.backend)
        n_global = len(cfg.global_layers)
        print(f"model:  {cfg.summary()}", file=out)
        print(f"        loaded in {load_s:.1f} s ({model.ops.name} {model.ops.dtype_name} on {model.ops.device})", file=out)
        print(f"qgen:   {n_global} of {cfg.n_layer} layers through qgen ({a.backend}), cache {a.k_type}, {mode}"
              + ("" if n_global == cfg.n_layer else "; sliding-window layers exact"), file=out)
        t0 = time.perf_counter()
        state = model.prefill(ids)
        print(f"prompt: {len(ids)} tokens{' (chat format)' if chat else ''}, prefill {time.perf_counter() - t0:.2f} s",
              file=out)
        runs = [("qgen", qa)] + ([("dense", None)] if a.compare_dense else [])
        results = {}
        for label, attn in runs:
            out.write(f"{label:6s}> ")
            out.flush()
            stream = _Streamer(tok, out, not a.no_stream)
            r = model.generate(state, a.max_new, attention=attn, on_token=stream)
            if a.no_stream:
                out.write(r.text.replace("\n", "\n        "))
            out.write("\n")
            rate = len(r.ids) / r.seconds if r.seconds > 0 else float("inf")
            extra = f", of which {r.extra['bind_seconds']:.2f} s loading the prompt into qgen's caches" if attn else ""
            print(f"        {len(r.ids)} tokens in {r.seconds:.2f} s: {rate:.1f} tokens/s{extra}"
                  + ("" if r.stopped else " (max-new reached)"), file=out)
            results[label] = r
        if a.compare_dense:
            q, d = results["qgen"].ids, results["dense"].ids
            if q == d:
                print("match:  yes, the same tokens", file=out)
            else:
                first = next((i for i, (x, y) in enumerate(zip(q, d)) if x != y), min(len(q), len(d)))
                same_text = results["qgen"].text.strip() == results["dense"].text.strip()
                print(f"match:  no, the tokens differ from token {first}"
                      + (" (the texts are equal)" if same_text else ""), file=out)
        qa.close()
    except ModelError as e:
        return fail(str(e))
    except Error as e:
        return fail(f"qgen: {e}")
    except (ValueError, ImportError) as e:
        return fail(str(e))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
