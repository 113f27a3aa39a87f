"""summary.py DIR: the step times (µs, CUDA-graph replay, median of a cell's runs; both
rounds as r1/r2) of every TAG-ROUND.json of a device call of this experiment, a row per
(variant, ctx, B, coverage, T), a column per tag; then each tag's T-token step over the
one-token step of its templates' default plan (head's for tags from .carry/tpl-head,
new's otherwise)."""
import collections
import glob
import json
import os
import sys

d = sys.argv[1]
cells = collections.defaultdict(dict)  # (spec kind, ctx, B, cov, T) -> tag -> [us per round]
tags = []
for f in sorted(glob.glob(os.path.join(d, "*-[12].json"))):
    tag, rnd = os.path.basename(f)[:-5].rsplit("-", 1)
    if tag not in tags:
        tags.append(tag)
    for r in json.load(open(f)):
        k = (r["k_type"], r["ctx"], r["batch"], r["coverage"], r["tokens"])
        cells[k].setdefault(tag, {})[int(rnd)] = (r["qgen_us"], r["estimate_us"], r["attend_us"])
K = lambda c: f"{c // 1024}K"
for kind in sorted({k[0] for k in cells}):
    ts = [t for t in tags if any(t in cells[k] for k in cells if k[0] == kind)]
    print(f"\n{kind}: step us r1/r2 (estimate / attend of round 2)")
    print("ctx   B   cov   T | " + " | ".join(f"{t:>24}" for t in ts))
    for k in sorted(k for k in cells if k[0] == kind):
        row = []
        for t in ts:
            v = cells[k].get(t)
            if not v:
                row.append(f"{'':>24}")
                continue
            s = "/".join(f"{v[r][0]:.1f}" for r in sorted(v))
            e, a = v[max(v)][1], v[max(v)][2]
            row.append(f"{s:>13} {e if e is not None else 0:4.1f}/{a:5.1f}")
        print(f"{K(k[1]):>5} {k[2]} {k[3]:>5} {k[4]:>2} | " + " | ".join(row))
    print(f"\n{kind}: T-token step / one-token step (round 2; the one-token step of head for head tags, else of new)")
    for k in sorted(k for k in cells if k[0] == kind and k[4] > 1):
        parts = []
        for t in ts:
            v = cells[k].get(t)
            base_tag = next((b for b in ts if b in (("head", "q4-head") if "head" in t else ("new", "q4-new"))), None)
            one = cells.get(k[:4] + (1,), {}).get(base_tag)
            if v and one:
                parts.append(f"{t} {v[max(v)][0] / one[max(one)][0]:.2f}")
        print(f"{K(k[1]):>5} {k[2]} {k[3]:>5} {k[4]:>2} | " + "  ".join(parts))
