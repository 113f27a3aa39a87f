#!/usr/bin/env bash
# One device call on ffe507a's kernels (= 749fa0d's; build-dev carried): is q4_0's swapped
# attend held by its producer's in-order fill (NOTES 60)? The plan's existing knobs, same call,
# q4_0 dense B1 at 128K and 1M, two alternating rounds: the default (bulk copies, 4 stages a
# group); bulk=0 (cp.async copies); stages=2, 3, 6 a group.
set -u
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache
for round in 1 2; do
  for tune in default bulk=0 stages=2 stages=3 stages=6; do
    if [ $tune = default ]; then unset QGEN_TUNE; else export QGEN_TUNE=$tune; fi
    timeout 40 build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-q4_0 --ctx 128K,1M --batch 1 --coverage 1 --runs 30 \
      --json $OUT/r/tune-$tune-$round.json > $OUT/r/tune-$tune-$round.log 2>&1 || echo "bench $tune $round failed"
  done
done
python3 - $OUT/r <<'PY' | tee $OUT/r/summary.txt
import glob, json, os, sys, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(sys.argv[1], "tune-*.json"))):
    tune = os.path.basename(f)[5:-5].rsplit("-", 1)[0]
    for r in json.load(open(f)): d[(r["ctx"], tune)].append(r["attend_us"])
for k in sorted(d): print(f"q4_0 dense B1 ctx {k[0]:>8} {k[1]:9} attend us " + " / ".join(f"{x:.1f}" for x in d[k]))
PY
cd $OUT && tar czf all.tgz r
