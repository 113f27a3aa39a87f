#!/usr/bin/env bash
# call 5: kv-pairs on main (swap-* variants); the K-offset experiment (.carry/exp-reg: offsets in
# registers, .carry/exp-templates: per-warp shared copy) checked and A/B'd against main
set -u
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
export QGEN_CACHE_DIR=/tmp/qc-main
timeout 120 build-dev/qgen check --quick --spec tests/gpu/kv-pairs.lua > $OUT/r/check-kv-pairs-main.log 2>&1
echo "kv-pairs main: exit $? ($(grep -c PASS $OUT/r/check-kv-pairs-main.log) PASS, $(grep -c FAIL $OUT/r/check-kv-pairs-main.log) FAIL)"
for t in exp-reg exp-templates; do
  export QGEN_CACHE_DIR=/tmp/qc-$t QGEN_TEMPLATE_DIR=$PWD/.carry/$t
  timeout 60 build-dev/qgen check --quick --spec specs/qwen3-4b.lua > $OUT/r/check-qwen3-$t.log 2>&1
  echo "qwen3 $t: exit $? ($(grep -c PASS $OUT/r/check-qwen3-$t.log) PASS, $(grep -c FAIL $OUT/r/check-qwen3-$t.log) FAIL)"
  unset QGEN_TEMPLATE_DIR
done
export QGEN_CACHE_DIR=/tmp/qc-exp-reg QGEN_TEMPLATE_DIR=$PWD/.carry/exp-reg
timeout 120 build-dev/qgen check --quick --spec tests/gpu/kv-pairs.lua > $OUT/r/check-kv-pairs-exp-reg.log 2>&1
echo "kv-pairs exp-reg: exit $? ($(grep -c PASS $OUT/r/check-kv-pairs-exp-reg.log) PASS, $(grep -c FAIL $OUT/r/check-kv-pairs-exp-reg.log) FAIL)"
unset QGEN_TEMPLATE_DIR
for round in 1 2; do
  for v in q4_0 q8_0 q5_0; do
    for t in main exp-reg exp-templates; do
      export QGEN_CACHE_DIR=/tmp/qc-$t
      if [ $t = main ]; then unset QGEN_TEMPLATE_DIR; else export QGEN_TEMPLATE_DIR=$PWD/.carry/$t; fi
      timeout 60 build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-$v --ctx 128K,1M --batch 1,4 --coverage 1,0.0625 \
        --json $OUT/r/ab-$v-$t-$round.json > $OUT/r/ab-$v-$t-$round.log 2>&1 || echo "bench $v $t $round failed"
    done
  done
done
unset QGEN_TEMPLATE_DIR
python3 - $OUT/r <<'PY'
import json, glob, sys, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/ab-*.json")):
    v, t, rnd = f.split("/")[-1][3:-5].rsplit("-", 1)[0].split("-", 1) + [f[-6]]
    for r in json.load(open(f)):
        d[(v, r["batch"], r["ctx"], r["coverage"], t)].append((r["qgen_us"], r["attend_us"], r["stream_us"]))
print(f"{'type':5} {'B':>2} {'ctx':>8} {'cov':>6} {'tree':14} {'step r1/r2':>16} {'attend r1/r2':>16} {'x_strm':>6}")
for k in sorted(d):
    x = d[k]
    print(f"{k[0]:5} {k[1]:>2} {k[2]:>8} {k[3]:>6} {k[4]:14} " + "/".join(f"{a[0]:.1f}" for a in x).rjust(16) + " " +
          "/".join(f"{a[1]:.1f}" for a in x).rjust(16) + f" {min(a[0] for a in x)/x[0][2]:6.2f}")
PY
cd $OUT && tar czf all.tgz r
