"""summary.py DIR — the step (µs, median of a cell's replays) of each tag of a device call of
this experiment, round 2 (round 1 in brackets), and each tag's T-token step / T = 1 step."""
import glob, json, os, sys
from collections import defaultdict

d = sys.argv[1]
cells = defaultdict(dict)  # (tag, round) -> key -> row
for f in sorted(glob.glob(os.path.join(d, "*-[12].json"))):
    tag, rnd = os.path.basename(f)[:-5].rsplit("-", 1)
    for c in json.load(open(f)):
        cells[(tag, rnd)][(c["ctx"] // 1024, c["batch"], c["coverage"], c["tokens"])] = c
tags = sorted({t for t, _ in cells}, key=lambda t: (t != "base", t))
keys = sorted({k for v in cells.values() for k in v})
print("step µs, round 2 [round 1]; attend µs of round 2 in ( )")
print("ctx B cov T | " + " | ".join(tags))
for k in keys:
    row = []
    for t in tags:
        c2, c1 = cells[(t, "2")].get(k), cells[(t, "1")].get(k)
        row.append(f"{c2['qgen_us']:.1f} [{c1['qgen_us']:.1f}] ({c2['attend_us']:.1f})" if c2 and c1 else "-")
    print(f"{k[0]}K {k[1]} {k[2]} {k[3]} | " + " | ".join(row))
print("\nT-token step / the same tag's T = 1 step (round 2)")
for k in keys:
    if k[3] == 1:
        continue
    one = (k[0], k[1], k[2], 1)
    row = []
    for t in tags:
        c, c1 = cells[(t, "2")].get(k), cells[(t, "2")].get(one)
        row.append(f"{c['qgen_us'] / c1['qgen_us']:.2f}" if c and c1 else "-")
    print(f"{k[0]}K {k[1]} {k[2]} T={k[3]} | " + " | ".join(row))
