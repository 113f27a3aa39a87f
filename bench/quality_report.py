#!/usr/bin/env python3
"""quality_report.py — tables and a chart from the `qgen eval` retrieval-quality results.

  python3 bench/quality_report.py --main bench/results/quality-h200.json \
      --margins bench/results/quality-margins-h200.json --out bench/results/quality-h200

Reads the main grid (contexts x coverages x cache types x tasks x selectors at one needle
margin) and the margin sweep (the same at several margins, fewer coverages), both written
by `qgen eval --json`, and writes

  <out>.md   Markdown: a summary, Quest recall per context x cache type x coverage (worst
             task) and every cell below 1.0, attention-mass recall of quest / oracle /
             meanpool, the lossless coverage band per cache type, Quest's output error, and
             the margin thresholds per selector from the sweep;
  <out>.svg  a hand-written SVG chart: needle recall (top row) and mass recall (bottom row)
             against coverage (log2 axis), one panel per context, one line per selector
             (mean over the tasks; the bar spans the tasks' min..max); plus Quest's
             all-needles recall of the worst task.

Every number is computed from the JSON files. Driver and CUDA versions are not in the
JSON; they are taken from the first line of the log next to --main (<main>.log, written as
"# command: ... (GPU: ..., driver X, CUDA Y; ...)") when it exists. Python 3 stdlib only.

Definitions (tools/eval.c): recall = fraction of trials in which every needle's page was
selected in every KV head that owns it; needle recall = the same per (needle, owner head)
pair; mass recall = fp64 full-softmax weight of the selected pages; rel_err = relative L2
error of the output against dense attention over the cache's own contents (err_ref "fp64":
the CPU fp64 reference, ctx <= ref_ctx; "dense": the backend's own dense output).
"""
import argparse
import json
import math
import os
import re
from collections import defaultdict

SELECTORS = ["quest", "oracle", "meanpool"]
SEL_LABEL = {"quest": "Quest (qgen_attend)", "oracle": "oracle (true max logit)",
             "meanpool": "meanpool (32-d projection)"}
SEL_COLOR = {"quest": "#1f77b4", "oracle": "#2ca02c", "meanpool": "#d62728"}
SEL_DASH = {"quest": "", "oracle": "6,4", "meanpool": "2,3"}


# ---------------------------------------------------------------- helpers

def ctx_label(c):
    if c % (1 << 20) == 0:
        return f"{c >> 20}M"
    if c % (1 << 10) == 0:
        return f"{c >> 10}K"
    return str(c)


def cov_label(c):
    return f"{c * 100:g} %"


def num(x, nd=3):
    return "–" if x is None else f"{x:.{nd}f}"


def margin_label(m):
    return "–" if m is None else f"{m:g}"


def md_table(header, rows, align=None):
    align = align or ["--:"] * len(header)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def cov_kt_table(m, heads, cols, cell):
    """A table with one row per (coverage, k_type) of m and one column per entry of cols,
    the cell text being cell(coverage, k_type, col)."""
    rows = [[cov_label(cov), kt] + [cell(cov, kt, c) for c in cols] for cov in m.covs for kt in m.ktypes]
    return md_table(["coverage", "k_type"] + heads, rows, ["--:", "---"] + ["--:"] * len(cols))


def load(path):
    with open(path) as f:
        return json.load(f)


def env_from_log(main_path):
    """(driver, cuda) from the first line of the log beside the main JSON, or (None, None)."""
    log = os.path.splitext(main_path)[0] + ".log"
    try:
        with open(log) as f:
            first = f.readline()
    except OSError:
        return None, None
    d = re.search(r"driver ([0-9.]+)", first)
    c = re.search(r"CUDA ([0-9.]+)", first)
    return (d.group(1) if d else None), (c.group(1) if c else None)


class Grid:
    """Rows of one `qgen eval --json` file, indexed by (task, ctx, k_type, coverage, selector, margin)."""

    def __init__(self, doc):
        self.doc = doc
        self.rows = doc["rows"]
        self.by = {}
        for r in self.rows:
            self.by[(r["task"], r["ctx"], r["k_type"], r["coverage"], r["selector"], r["margin"])] = r
        self.tasks = list(dict.fromkeys(r["task"] for r in self.rows))
        self.ctxs = sorted({r["ctx"] for r in self.rows})
        self.ktypes = list(dict.fromkeys(r["k_type"] for r in self.rows))
        self.covs = sorted({r["coverage"] for r in self.rows}, reverse=True)
        self.margins = sorted({r["margin"] for r in self.rows})
        self.sels = [s for s in SELECTORS if any(r["selector"] == s for r in self.rows)]
        self.variant = {r["k_type"]: r["variant"] for r in self.rows}

    def get(self, task, ctx, kt, cov, sel, margin=None):
        if margin is None:
            margin = self.margins[0]
        return self.by.get((task, ctx, kt, cov, sel, margin))

    def cells(self, **fix):
        return [r for r in self.rows if all(r[k] == v for k, v in fix.items())]


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def selection_identical_across_ktypes(g):
    """True when recall, needle recall and mass recall do not depend on the cache type."""
    groups = defaultdict(set)
    for r in g.rows:
        groups[(r["task"], r["ctx"], r["coverage"], r["selector"], r["margin"])].add(
            (r["recall"], r["needle_recall"], r["mass_recall"], r["mass_recall_min"]))
    return all(len(v) == 1 for v in groups.values())


# ---------------------------------------------------------------- analyses

def worst_recall(g, ctx, kt, cov, sel="quest", key="recall"):
    rs = [g.get(t, ctx, kt, cov, sel) for t in g.tasks]
    rs = [r for r in rs if r is not None]
    w = min(rs, key=lambda r: r[key])
    return w[key], w["task"]


def lossless_from(g, kt, ctxs):
    """Lowest coverage c such that Quest recall is 1.0 on every task and context in ctxs at
    every swept coverage >= c (None: not even at the largest)."""
    best = None
    for cov in g.covs:  # descending
        ok = all(g.get(t, c, kt, cov, "quest")["recall"] == 1 for t in g.tasks for c in ctxs)
        if not ok:
            break
        best = cov
    return best


def mass_table(g, ctx, cov):
    """Mass recall per selector, mean over tasks and cache types."""
    return {s: mean([g.get(t, ctx, kt, cov, s)["mass_recall"] for t in g.tasks for kt in g.ktypes])
            for s in g.sels}


def margin_thresholds(m):
    """Per (selector, coverage, k_type) and per (selector, coverage, k_type, ctx): the largest
    swept margin with recall < 1 on some task (and context), and the smallest swept margin from
    which recall is 1.0 at it and every larger margin on every task (and context); None =
    none failing / never. Computed from the rows; cross-checked against the file's own
    per-cell thresholds."""
    ms = m.margins

    def cell(task, ctx, kt, cov, sel):
        fails = [mg for mg in ms if m.get(task, ctx, kt, cov, sel, mg)["recall"] < 1]
        below = max(fails) if fails else None
        if below is None:
            full = ms[0]
        else:
            above = [mg for mg in ms if mg > below]
            full = above[0] if above else None
        return below, full

    per_cell = {}
    for t in m.tasks:
        for c in m.ctxs:
            for kt in m.ktypes:
                for cov in m.covs:
                    for s in m.sels:
                        per_cell[(t, c, kt, cov, s)] = cell(t, c, kt, cov, s)
    mismatches = []
    for th in m.doc.get("thresholds", []):
        k = (th["task"], th["ctx"], th["k_type"], th["coverage"], th["selector"])
        if k in per_cell and per_cell[k] != (th["recall_below_1_at"], th["full_recall_from"]):
            mismatches.append((k, per_cell[k], (th["recall_below_1_at"], th["full_recall_from"])))

    def agg(vals):
        belows = [b for b, _ in vals if b is not None]
        fulls = [f for _, f in vals]
        return (max(belows) if belows else None), (None if None in fulls else max(fulls))

    overall, per_ctx = {}, {}
    for s in m.sels:
        for cov in m.covs:
            for kt in m.ktypes:
                overall[(s, cov, kt)] = agg([per_cell[(t, c, kt, cov, s)] for t in m.tasks for c in m.ctxs])
                for c in m.ctxs:
                    per_ctx[(s, cov, kt, c)] = agg([per_cell[(t, c, kt, cov, s)] for t in m.tasks])
    return overall, per_ctx, per_cell, mismatches


def group_ktypes(g, items):
    """Join cache types whose values are equal: items = [(k_type, value)] -> [(\"f16, q8_0\", value)]."""
    out = []
    for kt, v in items:
        for i, (kts, w) in enumerate(out):
            if w == v:
                out[i] = (kts + [kt], w)
                break
        else:
            out.append(([kt], v))
    return [(", ".join(k), v) for k, v in out]


# ---------------------------------------------------------------- markdown

def markdown(g, m, driver, cuda, main_path, margins_path):
    doc = g.doc
    same_sel = selection_identical_across_ktypes(g)
    margin = g.margins[0]
    L = []
    env = f"{doc.get('gpu', '?')}"
    if driver:
        env += f" (driver {driver}" + (f", CUDA {cuda})" if cuda else ")")
    L.append("# Retrieval quality of the sparse decode path — " + doc.get("gpu", "?"))
    L.append("")
    L.append(f"Generated by `bench/quality_report.py` from `{main_path}` and `{margins_path}`. "
             f"Measured {doc.get('date', '?')[:10]} on {env}, backend {doc.get('backend')}, "
             f"spec `{doc.get('spec')}`.")
    L.append("")
    L.append("```sh")
    L.append(doc["command"])
    if m:
        L.append(m.doc["command"])
    L.append("```")
    L.append("")
    tm = doc.get("timing_s", {})
    L.append(f"Main grid: {len(g.ctxs)} contexts ({', '.join(ctx_label(c) for c in g.ctxs)}) × "
             f"{len(g.covs)} coverages × {len(g.ktypes)} cache types ({', '.join(g.ktypes)}) × "
             f"{len(g.tasks)} tasks × {len(g.sels)} selectors, needle margin {margin:g}, "
             f"{doc['trials']} trials per cell at every context; {tm.get('workloads', '?')} workloads "
             f"in {tm.get('total', 0):.0f} s. Haystack: {doc.get('haystack')} (seed {doc.get('seed')}); "
             f"output error against the fp64 CPU reference up to ref_ctx = {ctx_label(doc['ref_ctx'])}, "
             f"beyond it Quest's against the GPU's own dense output (err_ref \"dense\"; oracle and "
             f"meanpool have no error there).")
    if m:
        L.append("")
        L.append(f"Margin sweep: margins {', '.join(f'{x:g}' for x in m.margins)} × coverages "
                 f"{', '.join(cov_label(c) for c in m.covs)}, same contexts, cache types and tasks, "
                 f"{m.doc['trials']} trials per cell, no output errors (ref_ctx {m.doc['ref_ctx']}).")
    L.append("")
    L.append("**recall**: fraction of trials in which every needle's page was selected in every KV "
             "head that owns it. **needle recall**: the same per (needle, owner head) pair. "
             "**mass**: fp64 full-softmax attention weight of the selected pages, mean over query "
             "heads and trials. Every selector keeps exactly Quest's page count per KV head "
             "(forced sink/recent/last pages included).")
    if same_sel:
        L.append("")
        L.append("Recall, needle recall and mass recall are identical for "
                 f"{', '.join(g.ktypes)} in every cell: the page bounds Quest ranks by are taken from "
                 "the keys before quantization (base/layout.h), so the cache type changes only "
                 "the output error.")

    # -- summary
    L.append("")
    L.append("## Summary")
    L.append("")
    L.append(summary_table(g))
    L.append("")
    L.append(summary_lines(g, m))

    # -- (a) recall
    L.append("")
    L.append("## Quest recall (worst of the tasks)")
    L.append("")
    L.append(f"Per context and cache type, the lowest recall over the {len(g.tasks)} tasks "
             f"(task in brackets when < 1), margin {margin:g}.")
    L.append("")
    rows = []
    for c in g.ctxs:
        for kt in g.ktypes:
            cells = []
            for cov in g.covs:
                v, t = worst_recall(g, c, kt, cov)
                cells.append(f"{v:.2f}" + ("" if v == 1 else f" ({t.replace('niah_', '')})"))
            rows.append([ctx_label(c), kt] + cells)
    L.append(md_table(["ctx", "k_type"] + [cov_label(c) for c in g.covs], rows,
                      ["--:", "---"] + ["--:"] * len(g.covs)))
    L.append("")
    L.append("Every Quest cell with recall < 1 (cache types joined where the values are equal; "
             "`cov needed max` = the largest coverage Quest's own ranking needed in any trial to "
             "take every needle):")
    L.append("")
    rows = []
    for t in g.tasks:
        for c in g.ctxs:
            for cov in g.covs:
                items = []
                for kt in g.ktypes:
                    r = g.get(t, c, kt, cov, "quest")
                    if r["recall"] < 1:
                        items.append((kt, (r["recall"], r["needle_recall"], r["cov_needed_max"],
                                           g.get(t, c, kt, cov, "oracle")["recall"])))
                for kts, (rc, nr, need, orc) in group_ktypes(g, items):
                    rows.append([t, ctx_label(c), kts, cov_label(cov), f"{rc:.2f}", f"{nr:.4f}",
                                 f"{need:.3f}", f"{orc:.2f}"])
    if rows:
        L.append(md_table(["task", "ctx", "k_type", "coverage", "recall", "needle recall",
                           "cov needed max", "oracle recall"], rows,
                          ["---", "--:", "---", "--:", "--:", "--:", "--:", "--:"]))
    else:
        L.append("(none)")

    # -- (c) lossless band
    L.append("")
    L.append("## Lossless band")
    L.append("")
    L.append("Lowest coverage from which Quest recall is 1.0 on every task at that and every larger "
             "swept coverage (margin "
             f"{margin:g}, {doc['trials']} trials per cell):")
    L.append("")
    hdr = ["k_type", "all contexts"] + [ctx_label(c) for c in g.ctxs]
    rows = []
    for kt in g.ktypes:
        lo = lossless_from(g, kt, g.ctxs)
        rows.append([kt, "none" if lo is None else f"≥ {cov_label(lo)}"] +
                    [("none" if (x := lossless_from(g, kt, [c])) is None else f"≥ {cov_label(x)}")
                     for c in g.ctxs])
    L.append(md_table(hdr, rows, ["---"] + ["--:"] * (len(hdr) - 1)))

    # -- (b) mass recall
    L.append("")
    L.append("## Attention-mass recall: quest vs oracle vs meanpool")
    L.append("")
    L.append("Mean over the tasks" + (" (identical for every cache type)" if same_sel else
                                      " and cache types") + f", margin {margin:g}.")
    L.append("")
    rows = []
    for cov in g.covs:
        for c in g.ctxs:
            mt = mass_table(g, c, cov)
            rows.append([cov_label(cov), ctx_label(c), num(mt["quest"]), num(mt["oracle"]),
                         num(mt["meanpool"]), num(mt["oracle"] - mt["quest"]),
                         num(mt["quest"] - mt["meanpool"])])
    L.append(md_table(["coverage", "ctx", "quest", "oracle", "meanpool", "oracle − quest",
                       "quest − meanpool"], rows))
    L.append("")
    L.append("Largest oracle − quest mass gap per coverage (task means above; single cells = any "
             "task, context and cache type):")
    L.append("")
    rows = []
    for cov in g.covs:
        gaps = [(mass_table(g, c, cov)["oracle"] - mass_table(g, c, cov)["quest"], c) for c in g.ctxs]
        gmax, gctx = max(gaps)
        cell = max(((g.get(t, c, kt, cov, "oracle")["mass_recall"] - g.get(t, c, kt, cov, "quest")["mass_recall"]),
                    t, c) for t in g.tasks for c in g.ctxs for kt in g.ktypes)
        cmin = min((g.get(t, c, kt, cov, "oracle")["mass_recall"] - g.get(t, c, kt, cov, "quest")["mass_recall"])
                   for t in g.tasks for c in g.ctxs for kt in g.ktypes)
        rows.append([cov_label(cov), f"{gmax:.3f} ({ctx_label(gctx)})",
                     f"{cell[0]:.3f} ({cell[1]}, {ctx_label(cell[2])})", f"{cmin:.3f}"])
    L.append(md_table(["coverage", "max gap, task mean", "max gap, single cell", "min gap, single cell"],
                      rows, ["--:", "--:", "--:", "--:"]))
    L.append("")
    L.append(quest_vs_meanpool_line(g))

    # -- output error
    L.append("")
    L.append("## Quest output error")
    L.append("")
    L.append("Relative L2 error of Quest's real GPU output against dense attention over the same "
             "cache (the error of the selection alone): mean over tasks and trials, worst trial in "
             "brackets; reference per row. The oracle's error at the same budget (fp64, ≤ ref_ctx) "
             "is given for scale.")
    L.append("")
    kt0 = g.ktypes[0]
    c25 = min(g.covs, key=lambda c: abs(c - 0.25))
    rows = []
    for c in g.ctxs:
        refs = sorted({g.get(t, c, kt0, cov, "quest")["err_ref"] for t in g.tasks for cov in g.covs} - {None})
        cells = []
        for cov in g.covs:
            qs = [g.get(t, c, kt0, cov, "quest") for t in g.tasks]
            e = mean([r["rel_err"] for r in qs])
            emax = max((r["rel_err_max"] for r in qs if r["rel_err_max"] is not None), default=None)
            cells.append(f"{num(e)} ({num(emax)})")
        o25 = mean([g.get(t, c, kt0, c25, "oracle")["rel_err"] for t in g.tasks])
        rows.append([ctx_label(c), "/".join(refs)] + cells + [num(o25)])
    L.append(f"{kt0} cache:")
    L.append("")
    L.append(md_table(["ctx", "ref"] + [cov_label(c) for c in g.covs] + [f"oracle {cov_label(c25)}"], rows,
                      ["--:", "---"] + ["--:"] * (len(g.covs) + 1)))
    L.append("")
    L.append(f"Quantized caches at {cov_label(c25)}: `rel_err` (selection alone, against dense over the quantized "
             "cache) and `rel_err_total` (selection + quantization, against dense over the "
             "unquantized rows), mean over tasks:")
    L.append("")
    rows = []
    for c in g.ctxs:
        row = [ctx_label(c)]
        for kt in g.ktypes:
            qs = [g.get(t, c, kt, c25, "quest") for t in g.tasks]
            row.append(f"{num(mean([r['rel_err'] for r in qs]))} / {num(mean([r['rel_err_total'] for r in qs]))}")
        rows.append(row)
    L.append(md_table(["ctx"] + [f"{kt}: rel_err / total" for kt in g.ktypes], rows))

    # -- (d) margins
    if m:
        overall, per_ctx, per_cell, mism = margin_thresholds(m)
        L.append("")
        L.append("## Margin thresholds (sweep)")
        L.append("")
        L.append(f"Needle margin = the needle's logit over the strongest distractor, in haystack logit "
                 f"stds. Per selector, coverage and cache type, over every task and context "
                 f"({m.doc['trials']} trials per cell): **fails at** = the largest swept margin with "
                 f"recall < 1 somewhere (– = none), **full from** = the smallest swept margin from "
                 f"which recall is 1.0 at it and every larger margin everywhere (never = not even at "
                 f"{max(m.margins):g}).")
        L.append("")
        rows = []
        for s in m.sels:
            for cov in m.covs:
                items = [(kt, overall[(s, cov, kt)]) for kt in m.ktypes]
                for kts, (b, f) in group_ktypes(m, items):
                    rows.append([s, cov_label(cov), kts, margin_label(b), "never" if f is None else margin_label(f)])
        L.append(md_table(["selector", "coverage", "k_type", "fails at", "full from"], rows,
                          ["---", "--:", "---", "--:", "--:"]))
        L.append("")
        L.append("Quest per context (over the tasks; fails at → full from):")
        L.append("")
        def fails_full(cov, kt, c):
            b, f = per_ctx[('quest', cov, kt, c)]
            return f"{margin_label(b)} → {'never' if f is None else margin_label(f)}"
        L.append(cov_kt_table(m, [ctx_label(c) for c in m.ctxs], m.ctxs, fails_full))
        L.append("")
        L.append("Quest recall (worst task, worst context) per margin:")
        L.append("")
        L.append(cov_kt_table(m, [f"margin {mg:g}" for mg in m.margins], m.margins, lambda cov, kt, mg:
                              f"{min(m.get(t, c, kt, cov, 'quest', mg)['recall'] for t in m.tasks for c in m.ctxs):.2f}"))
        mg_main = [mg for mg in m.margins if mg in g.margins]
        if mg_main:
            mg = mg_main[0]
            shared = [(t, c, kt, cov) for t in m.tasks for c in m.ctxs for kt in m.ktypes for cov in m.covs
                      if g.get(t, c, kt, cov, "quest", mg) is not None]
            # the sweep's cells against the main grid's at the shared margin: no more failed trials,
            # no lower per-trial mass minimum, no larger coverage needed = consistent with a subset
            consistent = all(
                round((1 - m.get(*k, s, mg)["recall"]) * m.doc["trials"]) <=
                round((1 - g.get(*k, s, mg)["recall"]) * doc["trials"]) and
                m.get(*k, s, mg)["mass_recall_min"] >= g.get(*k, s, mg)["mass_recall_min"] - 1e-6 and
                m.get(*k, s, mg)["cov_needed_max"] <= g.get(*k, s, mg)["cov_needed_max"] + 1e-9
                for k in shared for s in m.sels)
            missed = [k for k in shared
                      if m.get(*k, "quest", mg)["recall"] == 1 and g.get(*k, "quest", mg)["recall"] < 1]
            missed_g = group_cells(missed)
            L.append("")
            L.append(f"The sweep has {m.doc['trials']} trials per cell, the main grid {doc['trials']}. "
                     f"At margin {mg:g} the sweep's cells are "
                     f"{'consistent' if consistent else 'NOT consistent'} with being a subset of the "
                     f"grid's trials (never more failed trials, a lower mass minimum or a larger "
                     f"coverage needed), but Quest reaches recall 1.0 in the sweep in {len(missed)} of "
                     f"{len(shared)} shared cells where the {doc['trials']}-trial grid has < 1"
                     + (f" ({missed_g}; grid recall "
                        f"{min(g.get(*k, 'quest', mg)['recall'] for k in missed):.2f}–"
                        f"{max(g.get(*k, 'quest', mg)['recall'] for k in missed):.2f}, sweep per-cell "
                        f"\"full from\" {margin_label(max(per_cell[k + ('quest',)][1] for k in missed))} "
                        f"or lower)" if missed else "") +
                     f". The sweep's thresholds are {m.doc['trials']}-trial estimates: failure rates "
                     f"below about 1/{m.doc['trials']} are not resolved.")
        if mism:
            L.append("")
            L.append(f"WARNING: {len(mism)} per-cell thresholds recomputed from the rows differ from "
                     f"the file's `thresholds`: {mism[:3]}")
    L.append("")
    L.append("![needle and mass recall vs coverage](" + os.path.basename(ARGS_OUT) + ".svg)")
    L.append("")
    return "\n".join(L)


def summary_table(g):
    """Compact table for the README: Quest worst-task recall per coverage and context, and mass
    recall at 25 % (or the coverage nearest it)."""
    same = selection_identical_across_ktypes(g)
    c25 = min(g.covs, key=lambda c: abs(c - 0.25))
    hdr = ["ctx"] + [f"Quest recall {cov_label(c)}" for c in g.covs] + \
          [f"mass {cov_label(c25)}: quest / oracle / meanpool", f"meanpool recall {cov_label(c25)}"]
    rows = []
    for c in g.ctxs:
        kts = g.ktypes if not same else g.ktypes[:1]
        for kt in kts:
            cells = [f"{min(worst_recall(g, c, k, cov)[0] for k in ([kt])):.2f}" for cov in g.covs]
            mt = mass_table(g, c, c25)
            mp = [g.get(t, c, kt, c25, "meanpool")["recall"] for t in g.tasks]
            rows.append([ctx_label(c) + ("" if same else f" {kt}")] + cells +
                        [f"{mt['quest']:.3f} / {mt['oracle']:.3f} / {mt['meanpool']:.3f}",
                         f"{min(mp):.2f}–{max(mp):.2f}"])
    return (md_table(hdr, rows) + f"\n\nQuest recall: the worst of the {len(g.tasks)} tasks"
            + (f", identical for {', '.join(g.ktypes)}" if same else "") +
            f"; mass: mean over the tasks; meanpool recall: range over the tasks "
            f"({g.doc['trials']} trials per cell, needle margin {g.margins[0]:g}).")


def group_cells(cells):
    """[(task, ctx, k_type, coverage)] -> "task ctx coverage (k_types), ..." with cache types joined."""
    d = {}
    for t, c, kt, cov in cells:
        d.setdefault((t, c, cov), []).append(kt)
    return ", ".join(f"{t.replace('niah_', '')} {ctx_label(c)} {cov_label(cov)} ({'/'.join(kts)})"
                     for (t, c, cov), kts in d.items())


def quest_vs_meanpool_line(g):
    n, lose = 0, []
    for t in g.tasks:
        for c in g.ctxs:
            for kt in g.ktypes:
                for cov in g.covs:
                    q, mp = g.get(t, c, kt, cov, "quest"), g.get(t, c, kt, cov, "meanpool")
                    n += 1
                    if any(q[k] < mp[k] for k in ("recall", "needle_recall", "mass_recall")):
                        lose.append((t, ctx_label(c), kt, cov_label(cov)))
    mprow = g.cells(selector="meanpool")
    s = (f"Quest below meanpool (recall, needle recall or mass): "
         f"{'nowhere' if not lose else ', '.join(map(str, lose))} ({len(lose)} of {n} cells). "
         f"Meanpool's best anywhere: recall {max(r['recall'] for r in mprow):.2f}, needle recall "
         f"{max(r['needle_recall'] for r in mprow):.2f}, mass {max(r['mass_recall'] for r in mprow):.3f}.")
    return s


def summary_lines(g, m):
    out = []
    bands = [(kt, lossless_from(g, kt, g.ctxs)) for kt in g.ktypes]
    out.append("- Lossless band (Quest recall 1.0 on every task and context): " +
               "; ".join(f"{kts}: ≥ {cov_label(b)}" if b is not None else f"{kts}: none"
                         for kts, b in group_ktypes(g, bands)) + ".")
    per_ctx = []
    for c in g.ctxs:
        per_ctx.append((ctx_label(c), group_ktypes(g, [(kt, lossless_from(g, kt, [c])) for kt in g.ktypes])))
    out.append("- Per context: " + "; ".join(
        f"{cl} " + ", ".join(f"≥ {cov_label(b)}" + ("" if len(items) == 1 else f" ({kts})")
                             for kts, b in items) for cl, items in per_ctx) + ".")
    lows = [r for r in g.cells(selector="quest") if r["recall"] < 1]
    if lows:
        lo = min(lows, key=lambda r: r["recall"])
        out.append(f"- Below the band Quest recall is {min(r['recall'] for r in lows):.2f}–"
                   f"{max(r['recall'] for r in lows):.2f} in {len(lows)} of {len(g.cells(selector='quest'))} "
                   f"cells (worst: {lo['task']} {ctx_label(lo['ctx'])} at {cov_label(lo['coverage'])}; "
                   f"needle recall ≥ {min(r['needle_recall'] for r in lows):.3f}); the oracle's recall is "
                   f"{min(r['recall'] for r in g.cells(selector='oracle')):.2f} everywhere at the same budget.")
    gaps = []
    for cov in g.covs:
        gaps.append(max(mass_table(g, c, cov)["oracle"] - mass_table(g, c, cov)["quest"] for c in g.ctxs))
    out.append("- Mass recall, oracle − quest (largest task mean over contexts): " +
               ", ".join(f"{cov_label(cov)}: {gp:.3f}" for cov, gp in zip(g.covs, gaps)) + ".")
    out.append("- " + quest_vs_meanpool_line(g))
    if m:
        overall, _, _, _ = margin_thresholds(m)
        parts = []
        for s in m.sels:
            for cov in m.covs:
                vals = {overall[(s, cov, kt)] for kt in m.ktypes}
                if len(vals) == 1:
                    b, f = vals.pop()
                    parts.append(f"{s} {cov_label(cov)}: fails at {margin_label(b)}, full from "
                                 f"{'never' if f is None else margin_label(f)}")
                else:
                    parts.append(f"{s} {cov_label(cov)}: " + "; ".join(
                        f"{kt} fails at {margin_label(overall[(s, cov, kt)][0])}, full from "
                        f"{'never' if overall[(s, cov, kt)][1] is None else margin_label(overall[(s, cov, kt)][1])}"
                        for kt in m.ktypes))
        out.append("- Margin sweep (" + f"{m.doc['trials']} trials): " + "; ".join(parts) + ".")
    return "\n".join(out)


# ---------------------------------------------------------------- svg

def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg_chart(g):
    kt0 = g.ktypes[0]
    same = selection_identical_across_ktypes(g)
    ncol = len(g.ctxs)
    pw, ph = 230, 190            # plot area of one panel
    ml, mt, gapx, gapy = 70, 80, 38, 70
    legend_h = 52
    W = ml + ncol * pw + (ncol - 1) * gapx + 30
    H = mt + 2 * ph + gapy + 50 + legend_h
    lo, hi = math.log2(min(g.covs)), math.log2(max(g.covs))
    padx = 0.25

    def X(col, cov):
        x0 = ml + col * (pw + gapx)
        return x0 + (math.log2(cov) - lo + padx) / (hi - lo + 2 * padx) * pw

    def Y(row, v):
        y0 = mt + row * (ph + gapy)
        return y0 + (1 - v) * ph

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
         f'font-family="Helvetica, Arial, sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="#ffffff"/>']
    title = (f"qgen eval on {g.doc.get('gpu', '?')}: retrieval quality vs coverage "
             f"({g.doc['trials']} trials per point, needle margin {g.margins[0]:g}, "
             f"{'cache types identical' if same else kt0 + ' cache'})")
    o.append(f'<text x="{W / 2:.0f}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{esc(title)}</text>')
    o.append(f'<text x="{W / 2:.0f}" y="44" text-anchor="middle" fill="#444">'
             f'{esc("lines: mean over the " + str(len(g.tasks)) + " tasks; bars: min–max over tasks; x: fraction of pages attended (log2)")}</text>')
    rows = [("needle_recall", "needle recall"), ("mass_recall", "attention-mass recall")]
    for ri, (key, ylab) in enumerate(rows):
        yc = mt + ri * (ph + gapy) + ph / 2
        o.append(f'<text x="18" y="{yc:.1f}" text-anchor="middle" transform="rotate(-90 18 {yc:.1f})" '
                 f'font-size="13">{esc(ylab)}</text>')
        for ci, c in enumerate(g.ctxs):
            x0, y0 = ml + ci * (pw + gapx), mt + ri * (ph + gapy)
            o.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#888"/>')
            for v in [0, 0.2, 0.4, 0.6, 0.8, 1.0]:
                y = Y(ri, v)
                o.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + pw}" y2="{y:.1f}" stroke="#e2e2e2"/>')
                if ci == 0:
                    o.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{v:.1f}</text>')
            for cov in g.covs:
                x = X(ci, cov)
                o.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + ph}" stroke="#ececec"/>')
                o.append(f'<text x="{x:.1f}" y="{y0 + ph + 16}" text-anchor="middle">{cov_label(cov)}</text>')
            if ri == 0:
                o.append(f'<text x="{x0 + pw / 2}" y="{y0 - 10}" text-anchor="middle" font-size="14" '
                         f'font-weight="bold">ctx {ctx_label(c)}</text>')
            if ri == 1:
                o.append(f'<text x="{x0 + pw / 2}" y="{y0 + ph + 34}" text-anchor="middle">coverage</text>')
            for s in sorted(g.sels, key=lambda s: s == "quest"):  # Quest drawn last, on top
                pts = []
                for cov in g.covs:
                    vals = [g.get(t, c, kt0, cov, s)[key] for t in g.tasks]
                    x, ym = X(ci, cov), Y(ri, sum(vals) / len(vals))
                    pts.append((x, ym))
                    ylo, yhi = Y(ri, min(vals)), Y(ri, max(vals))
                    if abs(ylo - yhi) > 0.5:
                        o.append(f'<line x1="{x:.1f}" y1="{ylo:.1f}" x2="{x:.1f}" y2="{yhi:.1f}" '
                                 f'stroke="{SEL_COLOR[s]}" stroke-width="2" opacity="0.5"/>')
                    o.append(f'<circle cx="{x:.1f}" cy="{ym:.1f}" r="3.2" fill="{SEL_COLOR[s]}"/>')
                d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                dash = f' stroke-dasharray="{SEL_DASH[s]}"' if SEL_DASH[s] else ""
                o.append(f'<polyline points="{d}" fill="none" stroke="{SEL_COLOR[s]}" stroke-width="2"{dash}/>')
            if ri == 0:  # Quest's all-needles recall of the worst task
                pts = [(X(ci, cov), Y(ri, worst_recall(g, c, kt0, cov)[0])) for cov in g.covs]
                d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                o.append(f'<polyline points="{d}" fill="none" stroke="#ff7f0e" stroke-width="1.6" '
                         f'stroke-dasharray="5,2,1,2"/>')
                for x, y in pts:
                    o.append(f'<rect x="{x - 2.8:.1f}" y="{y - 2.8:.1f}" width="5.6" height="5.6" fill="#ff7f0e"/>')
    # legend
    ly = mt + 2 * ph + gapy + 50
    entries = [(SEL_LABEL[s], SEL_COLOR[s], SEL_DASH[s], "circle") for s in g.sels]
    entries.append(("Quest all-needles recall, worst task (top row)", "#ff7f0e", "5,2,1,2", "square"))
    lx = ml
    colw = (W - ml - 20) / 2
    for i, (lab, col, dash, mk) in enumerate(entries):
        x = lx + (i % 2) * colw
        y = ly + (i // 2) * 20
        da = f' stroke-dasharray="{dash}"' if dash else ""
        o.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + 34:.1f}" y2="{y:.1f}" stroke="{col}" stroke-width="2"{da}/>')
        if mk == "circle":
            o.append(f'<circle cx="{x + 17:.1f}" cy="{y:.1f}" r="3.2" fill="{col}"/>')
        else:
            o.append(f'<rect x="{x + 14.2:.1f}" y="{y - 2.8:.1f}" width="5.6" height="5.6" fill="{col}"/>')
        o.append(f'<text x="{x + 42:.1f}" y="{y + 4:.1f}">{esc(lab)}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


# ---------------------------------------------------------------- main

ARGS_OUT = ""


def main():
    global ARGS_OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--main", required=True, help="qgen eval --json of the main grid")
    ap.add_argument("--margins", help="qgen eval --json of the margin sweep (optional)")
    ap.add_argument("--out", required=True, help="output prefix: writes <out>.md and <out>.svg")
    a = ap.parse_args()
    ARGS_OUT = a.out
    g = Grid(load(a.main))
    m = Grid(load(a.margins)) if a.margins else None
    driver, cuda = env_from_log(a.main)
    md = markdown(g, m, driver, cuda, a.main, a.margins)
    with open(a.out + ".md", "w") as f:
        f.write(md)
    with open(a.out + ".svg", "w") as f:
        f.write(svg_chart(g))
    print(f"wrote {a.out}.md, {a.out}.svg")
    print(summary_lines(g, m))


if __name__ == "__main__":
    main()
