#!/usr/bin/env python3
"""frontier.py — the selection modes' frontier: bytes read per decode step against needle
recall and attention mass, per mode (Quest and two-stage r = 4, 8, 16 at 25 % and 6.25 %),
from two committed measurements of tests/gpu/rescore.lua's f16 variants:

  python3 bench/frontier.py --eval bench/results/rescore-grid-h200/rescore-256K-f16.json \\
      --bench bench/results/rescore-bench-h200.txt --out bench/results/frontier-h200

  --eval   `qgen eval --json` (needle recall, mass, the oracle's mass) at --eval-ctx, --margin
  --bench  `qgen bench` tables (step time and GB/s at --bench-ctx, B1; bytes = GB/s x time)

Writes <out>.md (one row per mode: bytes and time per step, recall, mass and its gap to the
oracle's) and <out>.svg (recall and mass gap against bytes, log x axis). The two files are
measured at different contexts (eval's and bench's own grids); bytes per step as a share of
the dense step's hardly depend on the context, which is what the chart's x axis shows.
Python 3 stdlib only.
"""
import argparse
import collections
import json
import math
import re

N_KV, HEAD_DIM, KV_BYTES = 8, 128, 2  # the Qwen3-4B shape of rescore.lua's f16 variants


def size(text):
    m = re.fullmatch(r"(\d+)([KM]?)", text)
    return int(m[1]) * {"": 1, "K": 1024, "M": 1 << 20}[m[2]]


def bench_rows(path, ctx):
    """{(variant, coverage): (step µs, bytes)} of the B1 rows at ctx."""
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) > 9 and f[1] == "1" and f[2] == str(ctx) and f[4] == "|":
            step, gbs = float(f[5]), float(f[-2])
            out[(f[0], float(f[3]))] = (step, gbs * 1e9 * step * 1e-6)
    return out


def eval_cells(path, ctx, margin):
    """{(variant, coverage): (worst-task needle recall, mean needle recall, mean mass, the
    oracle's mean mass)} at ctx and margin."""
    doc = json.load(open(path))
    by = collections.defaultdict(list)
    for r in doc["rows"]:
        if r["ctx"] == ctx and r["margin"] == margin and r["selector"] != "meanpool":
            by[(r["variant"], r["coverage"], r["selector"] == "oracle")].append(r)
    out = {}
    for (v, cov, orc), rs in by.items():
        if orc:
            continue
        o = by[(v, cov, True)]
        nr = [r["needle_recall"] for r in rs]
        out[(v, cov)] = (min(nr), sum(nr) / len(nr), sum(r["mass_recall"] for r in rs) / len(rs),
                         sum(r["mass_recall"] for r in o) / len(o))
    return out, doc


def mode_name(variant, cov):
    r = int(variant.rsplit("-r", 1)[1])
    return f"{'Quest' if r == 1 else f'two-stage r={r}'} {cov * 100:g} %"


def svg(points, dense_bytes, title):
    """Two panels: needle recall (worst task) and mass gap to the oracle vs bytes (log x)."""
    W, H, pw, ph, ml, mt = 900, 400, 360, 260, 70, 60
    xs = [p["bytes"] for p in points]
    x0, x1 = math.log10(min(xs) / 1.4), math.log10(max(xs + [dense_bytes]) * 1.2)
    gaps = [p["mass"] - p["oracle_mass"] for p in points]
    g0 = math.floor(min(gaps) / 0.02) * 0.02
    panels = [("needle recall, worst task", "recall_min", 0.0, 1.0, [k / 4 for k in range(5)]),
              ("mass − oracle's mass", "gap", g0, 0.01, [g0 + 0.02 * k for k in range(round(-g0 / 0.02) + 1)])]
    colors = {"Quest": "#d62728", "r=4": "#1f77b4", "r=8": "#2ca02c", "r=16": "#9467bd"}
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
         'font-family="sans-serif" font-size="11">', '<rect width="100%" height="100%" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="13">{title}</text>']
    for i, (label, key, y0, y1, ticks) in enumerate(panels):
        ox = ml + i * (pw + 90)

        def px(b):
            return ox + (math.log10(b) - x0) / (x1 - x0) * pw

        def py(v):
            return mt + ph - (v - y0) / (y1 - y0) * ph

        o.append(f'<rect x="{ox}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
        o.append(f'<text x="{ox + pw / 2}" y="{mt - 8}" text-anchor="middle">{label}</text>')
        for v in ticks:
            o.append(f'<line x1="{ox}" x2="{ox + pw}" y1="{py(v):.1f}" y2="{py(v):.1f}" stroke="#eee"/>')
            o.append(f'<text x="{ox - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        for e in range(math.floor(x0), math.floor(x1) + 1):
            for m in (1, 2, 5):
                b = m * 10 ** e
                if x0 <= math.log10(b) <= x1:
                    o.append(f'<line x1="{px(b):.1f}" x2="{px(b):.1f}" y1="{mt}" y2="{mt + ph}" stroke="#eee"/>')
                    o.append(f'<text x="{px(b):.1f}" y="{mt + ph + 14}" text-anchor="middle">{b / 1e9:g}</text>')
        o.append(f'<line x1="{px(dense_bytes):.1f}" x2="{px(dense_bytes):.1f}" y1="{mt}" y2="{mt + ph}" '
                 'stroke="#000" stroke-dasharray="4 3"/>')
        o.append(f'<text x="{px(dense_bytes) - 3:.1f}" y="{mt + 12}" text-anchor="end">dense</text>')
        o.append(f'<text x="{ox + pw / 2}" y="{mt + ph + 32}" text-anchor="middle">GB read per step (log)</text>')
        at = collections.defaultdict(list)  # modes on one spot share a label
        for p in points:
            v = p["recall_min"] if key == "recall_min" else p["mass"] - p["oracle_mass"]
            c = colors[p["name"].split()[0] if p["name"].startswith("Quest") else p["name"].split()[1]]
            x, y = px(p["bytes"]), py(v)
            if p["cov"] > 0.1:
                o.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{c}"/>')
            else:
                o.append(f'<rect x="{x - 4.5:.1f}" y="{y - 4.5:.1f}" width="9" height="9" fill="{c}"/>')
            at[(round(x), round(y))].append("Q" if p["name"].startswith("Quest") else p["name"].split()[1][2:])
        for (x, y), names in at.items():
            text = names[0] if names == ["Q"] else "r" + "/".join(sorted(names, key=int))
            o.append(f'<text x="{x + 8}" y="{y + 4}" fill="#444">{text}</text>')
    ly = H - 14
    o.append(f'<text x="{ml}" y="{ly}">● 25 % of the pages   ■ 6.25 %</text>')
    for j, (k, c) in enumerate(colors.items()):
        o.append(f'<text x="{ml + 220 + j * 120}" y="{ly}" fill="{c}">{"Quest (Q)" if k == "Quest" else "two-stage " + k}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eval", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--eval-ctx", default="256K")
    ap.add_argument("--bench-ctx", default="1M")
    ap.add_argument("--margin", type=float, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ectx, bctx = size(a.eval_ctx), size(a.bench_ctx)
    cells, doc = eval_cells(a.eval, ectx, a.margin)
    timing = bench_rows(a.bench, bctx)
    dense = 2 * bctx * N_KV * HEAD_DIM * KV_BYTES
    points = []
    for (v, cov), (rmin, rmean, mass, omass) in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if (v, cov) not in timing:
            continue
        step, nbytes = timing[(v, cov)]
        points.append(dict(name=mode_name(v, cov), cov=cov, step=step, bytes=nbytes, recall_min=rmin, recall=rmean,
                           mass=mass, oracle_mass=omass))
    points.sort(key=lambda p: p["bytes"])
    if not points:
        raise SystemExit("frontier.py: no mode is in both files at these contexts")
    title = (f"Selection modes, f16 cache: bytes per step at {a.bench_ctx} (qgen bench, B1) vs quality at "
             f"{a.eval_ctx}, needle margin {a.margin:g} (qgen eval, {doc['trials']} trials)")
    md = [f"# Selection modes: bytes read per step against needle recall and mass — {doc.get('gpu', '?')}", "",
          f"Generated by `bench/frontier.py` from `{a.eval}` (`{doc['command']}`) and `{a.bench}`. Bytes and "
          f"time: one decode step at {a.bench_ctx} tokens, batch 1, Qwen3-4B shape, f16 cache (two-stage reads "
          f"its q4_0 sketch too); dense reads {dense / 1e9:.2f} GB. Quality at {a.eval_ctx} tokens, needle "
          f"margin {a.margin:g}, {doc['trials']} trials per task: needle recall worst task / mean over the four "
          "tasks, attention mass (mean over tasks) and its gap to the oracle's (the true top pages at the same "
          "budget).", "",
          "| mode | GB per step | of dense | step µs | needle recall (worst / mean) | mass | gap to oracle |",
          "|---|--:|--:|--:|--:|--:|--:|"]
    for p in points:
        md.append(f"| {p['name']} | {p['bytes'] / 1e9:.3f} | {p['bytes'] / dense:.3f} | {p['step']:.1f} | "
                  f"{p['recall_min']:.2f} / {p['recall']:.2f} | {p['mass']:.4f} | {p['mass'] - p['oracle_mass']:+.4f} |")
    md += ["", f"![bytes per step vs recall and mass]({a.out.rsplit('/', 1)[-1]}.svg)", ""]
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(md))
    with open(a.out + ".svg", "w") as f:
        f.write(svg(points, dense, title))
    print(f"wrote {a.out}.md, {a.out}.svg")


if __name__ == "__main__":
    main()
