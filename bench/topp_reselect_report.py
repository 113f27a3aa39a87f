#!/usr/bin/env python3
"""topp_reselect_report.py — the tables of bench/results/topp-reselect-cpu.md from the
runs of that study: `qgen eval --json` files of the top-p runs (--top-p P) and of the
selection-reuse runs (--steps, --reselect, --wl drift=RHO), combined into one JSON.

usage: topp_reselect_report.py OUT.json RUN.json...   (the markdown tables on stdout)
"""
import json
import sys
from collections import defaultdict


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def main(out, paths):
    runs = [json.load(open(p)) for p in paths]
    json.dump({"runs": runs}, open(out, "w"), indent=1)
    topp = [r for r in runs if "steps" not in r]
    reuse = [r for r in runs if "steps" in r]
    # top-p: mean over tasks per (coverage, ctx, selector)
    cell = defaultdict(list)
    for r in topp:
        for w in r["rows"]:
            cell[(w["coverage"], w["ctx"], w["selector"])].append(w)
    def order(name):  # quest, oracle, then each rescoreR with p falling (p = 1 first)
        base, _, p = name.partition("-p")
        return (base.startswith("rescore"), base != "quest", int(base[7:] or 0) if base.startswith("rescore") else 0,
                -float(p or 1))
    sels = sorted({w["selector"] for r in topp for w in r["rows"]}, key=order)
    print("**top-p** — needle recall / mass recall / pages read per KV head, mean over the four tasks\n")
    print("| coverage | ctx | " + " | ".join(sels) + " |")
    print("|---|---|" + "---|" * len(sels))
    for cov in sorted({k[0] for k in cell}, reverse=True):
        for ctx in sorted({k[1] for k in cell}):
            xs = []
            for s in sels:
                ws = cell.get((cov, ctx, s), [])
                xs.append("%.3f / %.4f / %.1f" % (mean([w["needle_recall"] for w in ws]),
                                                   mean([w["mass_recall"] for w in ws]), mean([w["pages"] for w in ws]))
                          if ws else "-")
            print("| %g | %dK | %s |" % (cov, ctx // 1024, " | ".join(xs)))
    # reuse: per (drift, coverage, selector) against reselect N
    cell = defaultdict(list)
    ns, rsels = set(), []
    for r in reuse:
        rho, n = r["workload"]["drift"], r["reselect"]
        ns.add(n)
        for w in r["rows"]:
            cell[(rho, w["coverage"], w["selector"], n)].append(w)
            if w["selector"] not in rsels:
                rsels.append(w["selector"])
    ns = sorted(ns)
    print("\n**selection reuse** — needle recall / mass recall against the reselect interval N,"
          " mean over the tasks and the steps\n")
    print("| drift | coverage | selector | " + " | ".join("N = %d" % n for n in ns) + " |")
    print("|---|---|---|" + "---|" * len(ns))
    for rho in sorted({k[0] for k in cell}):
        for cov in sorted({k[1] for k in cell}, reverse=True):
            for s in rsels:
                xs = []
                for n in ns:
                    ws = cell.get((rho, cov, s, n), [])
                    xs.append("%.3f / %.4f" % (mean([w["needle_recall"] for w in ws]), mean([w["mass_recall"] for w in ws]))
                              if ws else "-")
                print("| %g | %g | %s | %s |" % (rho, cov, s, " | ".join(xs)))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
