#!/usr/bin/env python3
"""e2e_cb.py — transformers' continuous batching (model.generate_batch) of e2e.py's
Qwen3-4B-shaped model: decode tokens/s through "paged|qgen" (dense and sparse) against
transformers' own "paged|sdpa", both over transformers' paged cache.

    QGEN_LIBRARY=$PWD/build/libqgen.so python3 bench/e2e_cb.py \\
        --json bench/results/e2e-cb-h200.json --md bench/results/e2e-cb-h200.md

The model and its seeded random bf16 weights are e2e.py's (36 layers, 32 query / 8 KV heads,
head_dim 128), its EOS off. One generate_batch per configuration: 8 requests with seeded
random prompts of --prompts tokens (default 2K to 32K), --new greedy tokens each, pages of
32 tokens, CUDA graphs and async batching off (qgen.transformers_paged.generate_batch), the
same settings for every configuration:
    paged|sdpa        transformers' paged SDPA (its cache read back and attended every step)
    paged|qgen-dense  qgen dense over transformers' cache (prefill through paged|sdpa)
    paged|qgen-P      qgen sparse attending P % of the pages (e.g. paged|qgen-25)
Per configuration, from the tokens' timestamps: decode tokens/s once every request has its
first token (all 8 decoding: the tokens after the last first token over the time from it
to the last token), the whole call's wall time, and the greedy tokens' agreement with
paged|sdpa (per token, and requests equal throughout). Every configuration first runs once
on the prompts' first 256 tokens (4 new), untimed, so no timed run pays a first call's setup.
"""
import argparse
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e import build_model, ctx_name, environment, save, size  # noqa: E402  (e2e puts python/ on the path)
import qgen.transformers_paged as qtp  # noqa: E402

DEFAULT_PROMPTS = "2K,4K,6K,8K,12K,16K,24K,32K"
DEFAULT_CONFIGS = ["paged|sdpa", "paged|qgen-dense", "paged|qgen-25"]


def parse_config(name):
    """(attn_implementation, coverage): 'paged|sdpa' -> ('paged|sdpa', None), 'paged|qgen-25' ->
    ('paged|qgen', 0.25), 'paged|qgen-dense' -> ('paged|qgen', None)."""
    if name == "paged|sdpa":
        return name, None
    base, _, tail = name.partition("-")
    if base != qtp.NAME or not tail:
        raise SystemExit(f"e2e_cb.py: bad configuration {name!r}; expected paged|sdpa, paged|qgen-dense or paged|qgen-P")
    if tail == "dense":
        return qtp.NAME, None
    pct = float(tail)
    if not 0 < pct <= 100:
        raise SystemExit(f"e2e_cb.py: bad coverage in {name!r}; a percentage in (0, 100]")
    return qtp.NAME, pct / 100


def decode_rate(outs):
    """(decode tokens/s with every request decoding, decode tokens counted, seconds)."""
    start = max(o.timestamps[0] for o in outs)
    end = max(o.timestamps[-1] for o in outs)
    n = sum(sum(t > start for t in o.timestamps) for o in outs)
    return (n / (end - start) if end > start else float("nan")), n, end - start


def run(model, prompts, config, new_tokens):
    attn, coverage = parse_config(config)
    qtp.configure(coverage=coverage)
    try:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = qtp.generate_batch(model, prompts, new_tokens, attn_implementation=attn, record_timestamps=True)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    finally:
        qtp.configure()
    errors = [o.error for o in outs if o.error]
    if errors:
        raise RuntimeError(errors[0])
    return outs, wall


def markdown(doc):
    env, rows = doc["env"], doc["rows"]
    out = [f"# transformers continuous batching, Qwen3-4B shape ({env['layers']} layers), {env['gpu']}", "",
           f"`{env['command']}`", "",
           f"GPU {env['gpu']} ({env['gpu_memory_gib']} GiB), driver {env['driver']}, CUDA {env['cuda']}, "
           f"torch {env['torch']}, transformers {env['transformers']}, Python {env['python']}, {env['date']}.", "",
           f"8 requests, prompts {', '.join(ctx_name(p) for p in env['prompts'])} tokens, {env['new_tokens']} greedy "
           "new tokens each; pages of 32 tokens, CUDA graphs off. Decode tok/s: the tokens after the last request's "
           "first token over the time from it to the last token (all requests decoding).", "",
           "Dense rows: at each request's first difference from paged\\|sdpa, whether SDPA's top-2 logit gap "
           "there is below the measured logit error (qgen's decode of that position against SDPA's, "
           "teacher-forced): a near-tie that rounding decides (qgen.transformers_paged.greedy_difference).", "",
           "| configuration | decode tok/s | vs paged\\|sdpa | wall s | tokens equal to paged\\|sdpa | requests equal "
           "| differences that are near-ties |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    base = next((r["decode_tok_s"] for r in rows if r["config"] == "paged|sdpa" and r["status"] == "ok"), None)
    for r in rows:
        name = r["config"].replace("|", "\\|")
        if r["status"] != "ok":
            out.append(f"| {name} | {r['status']}: {r['reason']} | | | | | |")
            continue
        ratio = f"{r['decode_tok_s'] / base:.2f}x" if base else ""
        ties = f"{r['near_ties']}/{len(r['differences'])}" if "differences" in r else ""
        out.append(f"| {name} | {r['decode_tok_s']:.1f} | {ratio} | {r['wall_s']:.1f} | {r['token_agreement']:.3f} | "
                   f"{r['requests_equal']}/8 | {ties} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default=DEFAULT_PROMPTS, help="8 prompt lengths (default %(default)s)")
    ap.add_argument("--new", type=int, default=64, help="new tokens per request (default %(default)s)")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), help="default: %(default)s")
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 layers, prompts of 1K to 4K, 16 new tokens")
    ap.add_argument("--json")
    ap.add_argument("--md")
    a = ap.parse_args()
    if a.quick:
        a.layers, a.prompts, a.new = 2, "1K,1K,2K,2K,3K,3K,4K,4K", 16
    if not torch.cuda.is_available():
        raise SystemExit("e2e_cb.py: needs a CUDA device")
    lens = [size(p) for p in a.prompts.split(",") if p.strip()]
    if len(lens) != 8 or min(lens) < 1 or a.new < 2:
        raise SystemExit("e2e_cb.py: --prompts takes 8 lengths >= 1, --new >= 2")
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    for c in configs:
        parse_config(c)
    env = environment(sys.argv)
    env.update(layers=a.layers, prompts=lens, new_tokens=a.new)
    print(f"{env['gpu']}, driver {env['driver']}, torch {env['torch']}, transformers {env['transformers']}")
    model = build_model(a.layers, max(lens) + a.new + 64)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 151936, (n,), generator=g).tolist() for n in lens]
    for c in configs:  # warm-up: each configuration's kernels (and qgen's spec) loaded before any is timed
        try:
            run(model, [p[:256] for p in prompts], c, 4)
        except (RuntimeError, NotImplementedError, ValueError):
            pass  # the timed run below reports it
    rows, ref = [], None
    for c in configs:
        row = {"config": c}
        try:
            outs, wall = run(model, prompts, c, a.new)
            rate, n, secs = decode_rate(outs)
            toks = [list(o.generated_tokens) for o in outs]
            if c == "paged|sdpa":
                ref = toks
            agree = (sum(x == y for t, s in zip(toks, ref) for x, y in zip(t, s)) / sum(map(len, ref))
                     if ref else float("nan"))
            row.update(status="ok", decode_tok_s=round(rate, 2), decode_tokens=n, decode_s=round(secs, 3),
                       wall_s=round(wall, 2), token_agreement=round(agree, 4),
                       requests_equal=sum(t == s for t, s in zip(toks, ref)) if ref else 0)
            if ref and c != "paged|sdpa" and parse_config(c)[1] is None:  # dense: is each difference a near-tie?
                diffs = [(r,) + d for r, (p, s, t) in enumerate(zip(prompts, ref, toks))
                         if (d := qtp.greedy_difference(model, p, s, t)) is not None]
                row["differences"] = [dict(request=r, step=d, top2_gap=round(gap, 5), logit_error=round(err, 5))
                                      for r, d, gap, err in diffs]
                row["near_ties"] = sum(gap < err for *_, gap, err in diffs)
                for r, d, gap, err in diffs:
                    print(f"  request {r} ({len(prompts[r])} tokens): first difference at step {d}, top-2 gap "
                          f"{gap:.3g} {'<' if gap < err else '>='} logit error {err:.3g}", flush=True)
            print(f"{c}: decode {rate:.1f} tok/s ({n} tokens in {secs:.2f} s), wall {wall:.1f} s, "
                  f"token agreement with paged|sdpa {agree:.3f}", flush=True)
        except (RuntimeError, NotImplementedError, ValueError) as e:
            row.update(status="error", reason=str(e).splitlines()[0])
            print(f"{c}: error: {row['reason']}", flush=True)
        rows.append(row)
        torch.cuda.empty_cache()
    save({"env": env, "rows": rows}, a.json, a.md, markdown)


if __name__ == "__main__":
    main()
