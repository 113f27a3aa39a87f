#!/usr/bin/env python3
# ncu_sass_top.py CSV [N] — the warp-stall samples of one kernel from
# `ncu --import R.ncu-rep --page source --csv --print-source sass`: the share of each stall
# reason, then the N instructions (default 25) holding the most samples, with their execution
# counts and top reasons. (The CSV itself is ~1 MB a kernel; this is what the experiment cards cite.)
import csv, sys

rows = list(csv.reader(open(sys.argv[1])))
n = int(sys.argv[2]) if len(sys.argv) > 2 else 25
hdr = next(r for r in rows if "Address" in r)
data = rows[rows.index(hdr) + 1:]
ix = {h: i for i, h in enumerate(hdr)}


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


S = ix["Warp Stall Sampling (All Samples)"]
reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
tot = sum(num(r[S]) for r in data) or 1.0
print(f"{int(tot)} samples; by reason: " +
      ", ".join(f"{h[6:]} {v / tot * 100:.1f}%" for v, h in sorted(((sum(num(r[ix[h]]) for r in data), h) for h in reasons), reverse=True)[:10]))
print(f"{'addr':>6} {'share':>6} {'executed':>9}  instruction / top reasons")
for r in sorted(data, key=lambda r: -num(r[S]))[:n]:
    top = sorted(((num(r[ix[h]]), h) for h in reasons), reverse=True)[:3]
    print(f"{r[0][-5:]:>6} {num(r[S]) / tot * 100:5.1f}% {r[ix['Instructions Executed']]:>9}  {r[1].strip()[:60]:60} " +
          " ".join(f"{h[6:]}={v:.0f}" for v, h in top if v > 0))
