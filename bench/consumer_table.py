#!/usr/bin/env python3
"""consumer_table.py — what qgen's sparse decode would buy on 24 GB and 32 GB consumer
cards, by arithmetic only (nothing here is measured): for Qwen3-4B and
Qwen2.5-14B-Instruct-1M with a GGUF Q4_K_M model beside qgen's KV cache, the largest context
that fits, and the bytes one decode step reads dense and at 25 % and 6.25 % page coverage,
with the bandwidth roofline (bytes / bandwidth) on each card. docs/gpus.md holds the output
between its consumer-table markers; tests/test_docs.sh checks that it is this script's.

  python3 bench/consumer_table.py                     # the markdown tables, on stdout
  python3 bench/consumer_table.py --check-layout QGEN # also compare the cache bytes a token
                                                      # with `QGEN emit --plan` (QGEN: the built
                                                      # qgen); exit 1 on a difference

Python 3 stdlib only.
"""
import argparse
import math
import re
import subprocess
import sys

GIB = 1 << 30
K = 1024

# The cache as qgen lays it out (base/layout.c, base/qtypes.c): a row is one token of one
# KV head; ggml's blocks of 32 values (q8_0: 2-byte scale + 32 bytes, q4_0: 2 + 16); a page
# is BLOCK tokens. A sparse spec keeps per page and KV head f16 key bounds (min and max,
# 2 x head_dim x 2 bytes), which append merges into, and the 8-bit rows estimate reads
# (2 x head_dim codes + 16 bytes of offsets and scales; sparse.bounds = "i8", the default).
BLOCK = 64
ROW_BYTES_PER_32 = {"f16": 64, "q8_0": 34, "q4_0": 18}


def row_bytes(kv_type, head_dim):
    return ROW_BYTES_PER_32[kv_type] * head_dim // 32


def bounds_page_bytes(n_kv, head_dim):
    return n_kv * 2 * head_dim * 2


def bounds_i8_page_bytes(n_kv, head_dim):
    return n_kv * (2 * head_dim + 16)


# The models. Attention shapes: specs/qwen3-4b.lua and specs/qwen2.5-14b-1m.lua (from each
# model's config.json); layers: num_hidden_layers of the same config.json files (Qwen/Qwen3-4B:
# 36, as bench/e2e.py's model; Qwen/Qwen2.5-14B-Instruct-1M: 48). Weights: the size of a
# Q4_K_M GGUF file of the model, about 2.5 GB and 9.0 GB, all of it counted as read each
# step (an upper bound: an untied embedding table is only gathered from).
MODELS = [
    {"name": "Qwen3-4B", "spec": "specs/qwen3-4b.lua", "variant": "qwen3-4b", "layers": 36, "n_kv": 8,
     "head_dim": 128, "weights": 2.5e9, "kv_types": ["f16", "q8_0", "q4_0"]},
    {"name": "Qwen2.5-14B-Instruct-1M", "spec": "specs/qwen2.5-14b-1m.lua", "variant": "qwen2.5-14b-1m",
     "layers": 48, "n_kv": 8, "head_dim": 128, "weights": 9.0e9, "kv_types": ["q8_0", "q4_0"]},
]

# The cards: memory and the memory bandwidth NVIDIA publishes for each.
CARDS = [
    {"name": "RTX 3090", "mem_gib": 24, "gbps": 936},
    {"name": "RTX 4090", "mem_gib": 24, "gbps": 1008},
    {"name": "RTX 5090", "mem_gib": 32, "gbps": 1792},
]
RESERVE = 1 * GIB  # CUDA context, activations, qgen's step scratch: kept free beside weights and cache
CONTEXTS = [32 * K, 128 * K, 256 * K]
COVERAGES = [0.25, 0.0625]


def cache_bytes_per_token_layer(m, kv):
    """Memory of one token in one layer: K and V rows of every KV head, plus its share of
    the page's f16 and 8-bit bounds (what `qgen emit` prints as 'cache per token per layer')."""
    rows = m["n_kv"] * 2 * row_bytes(kv, m["head_dim"])
    return rows, bounds_page_bytes(m["n_kv"], m["head_dim"]) / BLOCK, bounds_i8_page_bytes(m["n_kv"], m["head_dim"]) / BLOCK


def cache_bytes_per_token(m, kv):
    return m["layers"] * sum(cache_bytes_per_token_layer(m, kv))


def max_context(m, kv, mem_gib):
    """The most tokens (whole pages) whose cache fits beside the weights and the reserve."""
    free = mem_gib * GIB - m["weights"] - RESERVE
    pages = math.floor(free / (cache_bytes_per_token(m, kv) * BLOCK))
    return max(pages, 0) * BLOCK


def attention_bytes(m, kv, ctx, cov):
    """Bytes one decode step's attention reads over all layers, batch 1: dense, K and V of
    every token; sparse, K and V of the ceil(cov x pages) attended pages plus every page's
    8-bit bounds (what `qgen bench` counts as the step's bytes, tools/bench.c)."""
    per_token = m["n_kv"] * 2 * row_bytes(kv, m["head_dim"])
    if cov >= 1:
        return m["layers"] * per_token * ctx
    n = math.ceil(ctx / BLOCK)
    return m["layers"] * (per_token * BLOCK * math.ceil(cov * n) + n * bounds_i8_page_bytes(m["n_kv"], m["head_dim"]))


def tokens(n):
    return f"{n // K}K" if n >= K else str(n)


def table():
    out = []
    out.append("| model | KV cache | cache bytes a token (all layers) | weights | largest context, 24 GB | largest context, 32 GB |")
    out.append("|---|---|--:|--:|--:|--:|")
    for m in MODELS:
        for kv in m["kv_types"]:
            out.append(f"| {m['name']} | {kv} | {cache_bytes_per_token(m, kv):,.0f} | {m['weights'] / 1e9:.1f} GB | "
                       f"{tokens(max_context(m, kv, 24))} | {tokens(max_context(m, kv, 32))} |")
    out.append("")
    covs = " / ".join(["dense"] + [f"{c * 100:g} %" for c in COVERAGES])
    out.append(f"| model | KV cache | context | fits 24 / 32 GB | GB a step: {covs} | roofline speed-up: "
               + " / ".join(f"{c * 100:g} %" for c in COVERAGES) + " | "
               + " | ".join(f"ms a step on {c['name']} ({c['gbps']} GB/s): {covs}" for c in CARDS) + " |")
    out.append("|---|---|--:|---|--:|--:|" + "--:|" * len(CARDS))
    for m in MODELS:
        for kv in m["kv_types"]:
            for ctx in CONTEXTS:
                step = [m["weights"] + attention_bytes(m, kv, ctx, c) for c in [1.0] + COVERAGES]
                fits = {g: ctx <= max_context(m, kv, g) for g in (24, 32)}
                cells = []
                for c in CARDS:
                    if fits[c["mem_gib"]]:
                        cells.append(" / ".join(f"{b / (c['gbps'] * 1e9) * 1e3:.2f}" for b in step))
                    else:
                        cells.append("does not fit")
                out.append(f"| {m['name']} | {kv} | {tokens(ctx)} | {'yes' if fits[24] else 'no'} / {'yes' if fits[32] else 'no'} | "
                           + " / ".join(f"{b / 1e9:.2f}" for b in step) + " | "
                           + " / ".join(f"{step[0] / b:.2f}×" for b in step[1:]) + " | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def check_layout(qgen):
    """Compare the cache bytes a token and layer with what `qgen emit --plan` prints for each
    model's spec variant (the layout line), so the constants above follow qgen's layout."""
    bad = 0
    for m in MODELS:
        for kv in m["kv_types"]:
            variant = m["variant"] + ("" if kv == "f16" else "-" + kv)
            r = subprocess.run([qgen, "emit", "--plan", "--spec", m["spec"], "--variant", variant, "--arch", "sm_90"],
                               capture_output=True, text=True)
            got = re.search(r"cache per token per layer: (\d+) bytes \(K (\d+) \+ V (\d+)\) \+ bounds ([\d.]+) "
                            r"\+ 8-bit bounds ([\d.]+)", r.stdout + r.stderr)
            rows, b16, b8 = cache_bytes_per_token_layer(m, kv)
            want = (rows, b16, b8)
            have = (int(got[1]), float(got[4]), float(got[5])) if got else None
            ok = have == want
            bad += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {variant}: qgen {have}, this script {want}", file=sys.stderr)
    return bad == 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check-layout", metavar="QGEN", help="the built qgen, to compare the layout with")
    a = ap.parse_args(argv)
    sys.stdout.write(table())
    if a.check_layout and not check_layout(a.check_layout):
        sys.exit(1)


if __name__ == "__main__":
    main()
