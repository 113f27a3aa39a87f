"""verify_table.py — the markdown tables of one GPU call's `qgen bench --tokens 1,4,8` JSON
(q4b-f16.json) and `bench/peers.py --tokens 4,8` JSON (peers32.json) in DIR: qgen's verify
steps (T = 4, 8 query tokens a sequence) against its one-token step and SDPA's verify step,
and qgen's one-token step against FlashInfer's paged decode over the same page counts.
    python3 bench/verify_table.py bench/results/verify-flashinfer-h100"""
import json
import os
import sys

d = sys.argv[1]
q = json.load(open(os.path.join(d, "q4b-f16.json")))
p = json.load(open(os.path.join(d, "peers32.json")))["rows"]
Q = {(r["ctx"], r["batch"], r["coverage"], r["tokens"]): r for r in q}
P = {(r["ctx"], r["batch"], r["coverage"], r.get("tokens", 1)): r for r in p}
K = lambda c: f"{c // 1024}K"


def table(title, columns):
    """A markdown table's title and header; the rows are the one-token cells in order."""
    print(title)
    print("| " + " | ".join(columns) + " |")
    print("|---|--:|" + "--:|" * (len(columns) - 2))
    return [(k, r) for k, r in sorted(Q.items()) if k[3] == 1]


for (c, b, cov, _), r in table("verify steps (µs a step, CUDA-graph replay, median of 50): qgen, its ratio to its T=1 step; "
                               "SDPA flash / cuDNN",
                               ["ctx", "B", "coverage", "T=1", "T=4", "T=8", "T=4 / T=1", "T=8 / T=1",
                                "SDPA flash T=1 / 4 / 8", "SDPA cuDNN T=1 / 4 / 8"]):
    t4, t8 = Q[(c, b, cov, 4)]["qgen_us"], Q[(c, b, cov, 8)]["qgen_us"]
    sd = [P.get((c, b, 1.0, t)) for t in (1, 4, 8)]
    fl = " / ".join(f"{x['flash_us']:.0f}" for x in sd) if cov == 1 else ""
    cu = " / ".join(f"{x['cudnn_us']:.0f}" for x in sd) if cov == 1 else ""
    print(f"| {K(c)} | {b} | {cov:g} | {r['qgen_us']:.1f} | {t4:.1f} | {t8:.1f} | {t4 / r['qgen_us']:.2f} | {t8 / r['qgen_us']:.2f} | {fl} | {cu} |")
print()
for (c, b, cov, _), r in table("one-token step against FlashInfer 0.5.3's paged decode (f16 pages of 64, HND; sparse: that many "
                               "pages of each sequence)",
                               ["ctx", "B", "coverage", "qgen step", "qgen attend alone", "FlashInfer f16", "cuDNN (dense)",
                                "FlashInfer / qgen step", "FlashInfer / qgen attend"]):
    f = P[(c, b, cov, 1)]
    att = r["qgen_us"] if cov == 1 else r["attend_us"]
    cd = f"{f['cudnn_us']:.1f}" if cov == 1 else ""
    print(f"| {K(c)} | {b} | {cov:g} | {r['qgen_us']:.1f} | {att:.1f} | {f['fi_f16_us']:.1f} | {cd} | {f['fi_f16_us'] / r['qgen_us']:.2f} | {f['fi_f16_us'] / att:.2f} |")
