#!/usr/bin/env python3
"""merge.py — join `qgen bench` rows with the peer timings of the same run into
bench/results/decode-<gpu>.json, a Markdown table and a chart.

  python3 bench/merge.py --qgen q1.json q2.json --peers p32.json p40.json \
      --meta meta.json --out bench/results/decode-h200 [--chart]

meta.json holds {"gpu", "driver", "cuda", "date", "command"}. Peer rows are matched on
(n_head, batch, ctx) for the dense backends and (n_head, batch, ctx, coverage) for the
PyTorch Quest and FlashInfer; every qgen row keeps its own fields and gains cudnn_us,
flash_us, torch_quest_us, fi_f16_us, fi_e4m3_us (null where the peer did not run that cell).
"""
import argparse
import json


def key(r, *f):
    return tuple(r.get(x) for x in f)


def fmt(x, nd=1):
    return "–" if x is None else f"{x:.{nd}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qgen", nargs="+", required=True)
    ap.add_argument("--peers", nargs="*", default=[])
    ap.add_argument("--meta", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--chart", action="store_true")
    a = ap.parse_args()
    meta = json.load(open(a.meta))
    dense, quest, fi, peer_meta = {}, {}, {}, []
    fi_cols = ("fi_f16_us", "fi_e4m3_us")
    for p in a.peers:
        d = json.load(open(p))
        peer_meta.append({k: d[k] for k in ("torch", "cudnn", "flashinfer", "gpu", "heads") if k in d})
        for r in d["rows"]:
            h = d.get("heads")
            if "cudnn_us" in r:
                dense[(h, r["batch"], r["ctx"])] = r
            if "torch_quest_us" in r:
                quest[(h, r["batch"], r["ctx"], r["coverage"])] = r["torch_quest_us"]
            if any(c in r for c in fi_cols):
                fi[(h, r["batch"], r["ctx"], r["coverage"])] = r
    rows = []
    for f in a.qgen:
        for r in json.load(open(f)):
            d = dense.get((r.get("n_head"), r["batch"], r["ctx"]), {})
            r["cudnn_us"] = d.get("cudnn_us")
            r["flash_us"] = d.get("flash_us")
            r["cudnn_eager_us"] = d.get("cudnn_eager_us")
            r["torch_quest_us"] = quest.get((r.get("n_head"), r["batch"], r["ctx"], r["coverage"]))
            f_row = fi.get((r.get("n_head"), r["batch"], r["ctx"], r["coverage"]), {})
            for c in fi_cols:  # FlashInfer's paged decode at the same coverage (its pages per sequence)
                r[c] = f_row.get(c)
            rows.append(r)
    out = dict(meta, peers=peer_meta, rows=rows)
    with open(a.out + ".json", "w") as f:
        json.dump(out, f, indent=1)

    # Markdown: one table per (spec, batch): contexts down, coverages across.
    md = [f"Measured {meta['date']} on {meta['gpu']} (driver {meta['driver']}, CUDA {meta['cuda']}); "
          f"µs per decode step of one layer, median of the runs; ×cuDNN = cuDNN SDPA time / ours; "
          f"×FI = FlashInfer's paged decode over as many pages a sequence / ours (the whole step: "
          f"estimate, select and attend).", ""]
    groups = {}
    for r in rows:
        groups.setdefault((r["spec"], r["k_type"], r["v_type"], r["batch"]), []).append(r)
    for (spec, kt, vt, b), rs in groups.items():
        covs = sorted({r["coverage"] for r in rs}, reverse=True)
        # FlashInfer's decode over a cache of the same type (f16 or e4m3 K and V), where it ran:
        # its time at each coverage over ours (×FI), as ×cuDNN is for the dense peers
        fk = {"f16": "fi_f16_us", "e4m3": "fi_e4m3_us"}.get(kt) if kt == vt else None
        if fk and not any(r.get(fk) for r in rs):
            fk = None
        md.append(f"**{spec}** (K {kt}, V {vt}), batch {b}")
        md.append("")
        head = "| ctx | stream µs | cuDNN µs | flash µs |" + (" FlashInfer µs |" if fk else "") + "".join(
            f" {'dense' if c >= 1 else f'{c:g}'} µs | ×cuDNN |" + (" ×FI |" if fk else "") for c in covs) + " torch Quest 25% µs |"
        md.append(head)
        md.append("|" + "---|" * (head.count("|") - 1))
        for ctx in sorted({r["ctx"] for r in rs}):
            cell = {r["coverage"]: r for r in rs if r["ctx"] == ctx}
            dense_r = cell.get(1.0) or next(iter(cell.values()))
            line = f"| {ctx // 1024}K | {fmt(dense_r['stream_us'])} | {fmt(dense_r['cudnn_us'])} | {fmt(dense_r['flash_us'])} |"
            if fk:
                line += f" {fmt(dense_r.get(fk))} |"
            for c in covs:
                r = cell.get(c)
                if not r:
                    line += " | |" + (" |" if fk else "")
                    continue
                sp = r["cudnn_us"] / r["qgen_us"] if r["cudnn_us"] else None
                line += f" {fmt(r['qgen_us'])} | {fmt(sp, 2)} |"
                if fk:
                    line += f" {fmt(r[fk] / r['qgen_us'] if r.get(fk) else None, 2)} |"
            tq = cell.get(0.25, {}).get("torch_quest_us")
            line += f" {fmt(tq)} |"
            md.append(line)
        md.append("")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(md))

    if a.chart:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 5))
        sel = [r for r in rows if r["batch"] == 1 and r["k_type"] == "f16" and r["cudnn_us"]
               and r["spec"] == rows[0]["spec"]]
        for c in sorted({r["coverage"] for r in sel}, reverse=True):
            pts = sorted((r["ctx"], r["cudnn_us"] / r["qgen_us"]) for r in sel if r["coverage"] == c)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    label="dense" if c >= 1 else f"coverage {c:g}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("speed-up over cuDNN SDPA (dense f16)")
        ax.set_title(f"{rows[0]['spec']} decode step, batch 1, {meta['gpu']}")
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(a.out + ".png", dpi=110)


if __name__ == "__main__":
    main()
