#!/usr/bin/env python3
"""targets.py — the performance targets, checked against a results file.

    python3 bench/targets.py bench/results/decode-h200.json [--spec qwen3-4b] [--verify verify-f16.json]

Reads the rows `qgen bench` / bench/run.sh wrote (with the peers merged in) and prints one
line per target (the quantized and sparse round's, and the first round's that still stand): the measured value (the worst cell where a target covers several), the
goal, and met / NOT MET, then how many are met. Exit status 0 whether or not they are met
(it reports; it does not judge a run), 1 when a cell a target needs is missing.

Ratios follow the README: xcuDNN = cuDNN's time / ours (> 1: we are faster); xstream = our
time / the streaming read of the cell's bytes (the practical floor; < 1.2 is the goal);
the estimate+select share of a sparse step = (step - attend) / step, attend timed alone;
xFlashInfer = FlashInfer's paged decode time / ours (its targets read "not run" where the run
had no FlashInfer columns); xone-token = a speculative verify step's time / the one-token
step's at the same budget (`qgen bench --tokens 1,4,8` rows, --verify; "not run" without).
"""
import argparse
import json
import sys

K = 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="a decode-<gpu>.json written by bench/run.sh (merge.py)")
    ap.add_argument("--spec", default="qwen3-4b", help="the f16 spec; its quantized variants are SPEC-q8_0 / -q4_0 / -q5_0 / -e4m3")
    ap.add_argument("--verify", help="qgen bench JSON with --tokens 1,4,8 rows of the f16 spec (verify steps)")
    a = ap.parse_args()
    with open(a.results) as f:
        doc = json.load(f)
    rows = {(r["spec"], r["batch"], r["ctx"], round(r["coverage"], 6)): r for r in doc["rows"]}
    missing = []

    def cell(spec, b, ctx, cov):
        r = rows.get((spec, b, ctx, round(cov, 6)))
        if r is None:
            missing.append(f"{spec} B{b} {ctx // K}K cov {cov}")
        return r

    def ctx_name(c):
        return f"{c // (K * K)}M" if c >= K * K else f"{c // K}K"

    results = []  # (target, measured text, goal text, met)

    def worst(label, cells, value, goal, higher_is_better, fmt="{:.2f}"):
        """The worst of value(cell) over cells against goal."""
        vals = [(value(c), name) for c, name in cells if c is not None]
        if not vals:
            return
        v, name = min(vals) if higher_is_better else max(vals)
        met = v >= goal if higher_is_better else v <= goal
        lo, hi = min(x for x, _ in vals), max(x for x, _ in vals)
        rng = fmt.format(v) if len(vals) == 1 else f"{fmt.format(lo)}–{fmt.format(hi)} (worst {name})"
        results.append((label, rng, ("≥ " if higher_is_better else "≤ ") + fmt.format(goal), met))

    s = a.spec
    big = [64 * K, 128 * K, 256 * K, 512 * K, K * K]
    xcudnn = lambda r: r["cudnn_us"] / r["qgen_us"]
    xstream = lambda r: r["qgen_us"] / r["stream_us"]
    for b in (1, 4):
        worst(f"1. dense f16 vs cuDNN, >= 64K, B{b} (xcuDNN)",
              [(cell(s, b, c, 1), ctx_name(c)) for c in big], xcudnn, 1.0, True, "{:.3f}")
    worst("1. dense f16 at 16K B1 (xstream)", [(cell(s, 1, 16 * K, 1), "16K")], xstream, 1.2, False)
    for b in (1, 4):
        worst(f"1. dense f16 >= 256K, B{b} (xstream)",
              [(cell(s, b, c, 1), ctx_name(c)) for c in big[2:]], xstream, 1.1, False)
    # sparse f16 against cuDNN at 128K and at 512K-1M: what selection buys over the best dense kernel
    for cov, ctxs, goal in ((0.25, [128 * K], 2.6), (0.25, big[3:], 3.3), (0.0625, [128 * K], 6.0), (0.0625, [K * K], 10.0)):
        worst(f"2. sparse {cov * 100:g} % at {'-'.join(ctx_name(c) for c in (ctxs[0], ctxs[-1])) if len(ctxs) > 1 else ctx_name(ctxs[0])} B1 (xcuDNN)",
              [(cell(s, 1, c, cov), ctx_name(c)) for c in ctxs], lambda r: cell(s, 1, r["ctx"], 1)["cudnn_us"] / r["qgen_us"], goal, True)
    small = sorted({k[2] for k in rows if k[0] == s and k[1] == 1 and k[3] == 1.0})
    worst("2. sparse 25 % faster than our dense, B1 (dense / sparse)",
          [(cell(s, 1, c, 0.25), ctx_name(c)) for c in small],
          lambda r: cell(s, 1, r["ctx"], 1)["qgen_us"] / r["qgen_us"], 1.0, True)
    # every sparse step at >= 256K within 1.25x a read of exactly its bytes (selection overhead bounded)
    worst("3. sparse f16/q4_0 25 %/6.25 % >= 256K B1 (xstream)",
          [(cell(sp, 1, c, cov), f"{sp[len(s) + 1:] or 'f16'} {cov * 100:g} % {ctx_name(c)}")
           for sp in (s, f"{s}-q4_0") for cov in (0.25, 0.0625) for c in big[2:]], xstream, 1.25, False)
    for t in ("q8_0", "q4_0", "q5_0"):  # quantized dense near the floor of its smaller reads
        worst(f"4. {t} dense >= 128K, B1,4 (xstream)",
              [(cell(f"{s}-{t}", b, c, 1), f"B{b} {ctx_name(c)}") for b in (1, 4) for c in big[1:]], xstream, 1.15, False)
    for cov, goal in ((0.25, 100.0), (0.0625, 45.0)):  # q4_0 sparse at 1M: absolute step times
        worst(f"4. q4_0 sparse {cov * 100:g} % at 1M B1 (us)", [(cell(f"{s}-q4_0", 1, K * K, cov), "1M")],
              lambda r: r["qgen_us"], goal, False, "{:.1f}")
    batches = sorted({k[1] for k in rows if k[0] == f"{s}-e4m3"})  # fp8 at the floor of its 1-byte reads
    worst(f"fp8. e4m3 dense >= 128K, B{','.join(map(str, batches))} (xstream)",
          [(cell(f"{s}-e4m3", b, c, 1), f"B{b} {ctx_name(c)}") for b in batches for c in big[1:]], xstream, 1.15, False)
    share = lambda r: 100.0 * (r["qgen_us"] - r["attend_us"]) / r["qgen_us"]
    worst("5. est+select share of the 25 % step at 128K B1 (%)", [(cell(s, 1, 128 * K, 0.25), "128K")], share, 20.0, False, "{:.1f}")
    worst("5. est+select share of the 25 % step at >= 512K B1 (%)",
          [(cell(s, 1, c, 0.25), ctx_name(c)) for c in big[3:]], share, 10.0, False, "{:.1f}")

    # FlashInfer's paged decode, where the run had it (bench/peers.py): dense at equal shape, and
    # our sparse attend (attend_us: the kernel alone) against its decode over as many pages a sequence
    has_fi = lambda r, col: r is not None and r.get(col) is not None
    fi_cells = lambda sp, col, bs, covs, ctxs: [(r, f"B{b} {cov * 100:g} % {ctx_name(c)}") for b in bs for cov in covs for c in ctxs
                                                 if has_fi(r := rows.get((sp, b, c, round(cov, 6))), col)]
    fi_targets = [(f"6. dense f16 vs FlashInfer, >= 64K, B1,4 (xFlashInfer)", fi_cells(s, "fi_f16_us", (1, 4), (1,), big),
                   lambda r: r["fi_f16_us"] / r["qgen_us"]),
                  (f"6. dense e4m3 vs FlashInfer's e4m3, >= 64K, B1,4 (xFlashInfer)", fi_cells(f"{s}-e4m3", "fi_e4m3_us", (1, 4), (1,), big),
                   lambda r: r["fi_e4m3_us"] / r["qgen_us"]),
                  (f"6. sparse f16 attend vs FlashInfer at equal pages, 25 %/6.25 % >= 128K B1 (xFlashInfer)",
                   [(r, n) for r, n in fi_cells(s, "fi_f16_us", (1,), (0.25, 0.0625), big[1:]) if r.get("attend_us")],
                   lambda r: r["fi_f16_us"] / r["attend_us"])]
    for label, cells, value in fi_targets:
        if cells:
            worst(label, cells, value, 1.0, True, "{:.3f}")
        else:
            results.append((label, "not run (no FlashInfer columns)", "≥ 1.000", False))

    # a speculative verify step reads each selected page once for all its tokens
    vrows = {}
    if a.verify:
        with open(a.verify) as f:
            vrows = {(r["spec"], r["batch"], r["ctx"], round(r["coverage"], 6), r.get("tokens", 1)): r for r in json.load(f)}
    for T in (4, 8):
        label = f"7. verify step of {T} tokens, dense/25 %/6.25 %, 128K-512K, B1,4 (xone-token)"
        cells = [((vrows[k], vrows[k[:4] + (1,)]), f"B{k[1]} {k[3] * 100:g} % {ctx_name(k[2])}") for k in sorted(vrows)
                 if k[0] == s and k[4] == T and k[2] in (128 * K, 512 * K) and k[1] in (1, 4) and k[:4] + (1,) in vrows]
        if cells:
            worst(label, cells, lambda p: p[0]["qgen_us"] / p[1]["qgen_us"], 1.3, False)
        else:
            results.append((label, "not run (no --verify rows)", "≤ 1.30", False))

    print(f"{doc.get('gpu', '?')}, driver {doc.get('driver', '?')}, {doc.get('date', '?')}: {doc.get('command', '?')}")
    w = max(len(t) for t, *_ in results)
    for t, v, g, met in results:
        print(f"{t:<{w}}  {v:<28} goal {g:<8} {'met' if met else 'NOT MET'}")
    print(f"{sum(m for *_, m in results)} of {len(results)} met")
    if missing:
        print("missing cells: " + "; ".join(sorted(set(missing))), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
