#!/usr/bin/env python3
# ab_summary.py DIR — the table of a same-call A/B (written by a device call's script, experiments/*/call.sh): DIR holds
# ab-TYPE-TREE-ROUND.json (qgen bench --json rows; TREE may hold dashes, TYPE does not); per cell
# the step and attend medians of each round, and the best step over the stream read.
import collections, glob, json, os, sys

d = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(sys.argv[1], "ab-*.json"))):
    v, rest = os.path.basename(f)[3:-5].split("-", 1)
    t, rnd = rest.rsplit("-", 1)
    for r in json.load(open(f)):
        d[(v, r["batch"], r["ctx"], r["coverage"], t)].append((r["qgen_us"], r["attend_us"], r["stream_us"]))
w = max([6] + [len(k[4]) for k in d])
print(f"{'type':5} {'B':>2} {'ctx':>8} {'cov':>6} {'tree':{w}} {'step r1/r2':>16} {'attend r1/r2':>16} {'x_strm':>6}")
for k in sorted(d):
    x = d[k]
    print(f"{k[0]:5} {k[1]:>2} {k[2]:>8} {k[3]:>6} {k[4]:{w}} " + "/".join(f"{a[0]:.1f}" for a in x).rjust(16) + " " +
          "/".join(f"{a[1]:.1f}" for a in x).rjust(16) + f" {min(a[0] for a in x) / x[0][2]:6.2f}")
