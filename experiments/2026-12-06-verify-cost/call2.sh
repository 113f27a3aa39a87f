# device call 2: the verify step's two costs that call 1's Nsight Compute named, same call:
# (1) the query prologue (templates/ at HEAD in .carry/tpl-head vs the working tree's
# templates: all of a thread's query loads in flight at once), T = 1, 4, 8; (2) attend's ring
# for 32 query rows (mt = 2: the plan gives one token group of 4 stages) under QGEN_TUNE
# groups/stages, T = 8 alone. qwen3-4b f16 and q4_0, 128K/512K, B1/B4, dense/25 %/6.25 %,
# 20 runs a cell; two rounds. Results into $OUT/r.tgz.
. experiments/2026-12-06-verify-cost/head.sh
# cell TAG TEMPLATES TUNE TOKENS VARIANT ROUND
cell() {
  env QGEN_TEMPLATE_DIR=$PWD/$2 QGEN_CACHE_DIR=/tmp/qc-$(basename $2) QGEN_TUNE="$3" timeout 150 .carry/b/qgen bench \
    --spec specs/qwen3-4b.lua --variant $5 --ctx 128K,512K --batch 1,4 --coverage 1,0.25,0.0625 --tokens $4 --runs 20 --warmup 5 \
    --json $R/$1-$6.json > $R/$1-$6.log 2>&1 || echo "$1 $6 failed: $(tail -2 $R/$1-$6.log)"
  echo "$1 round $6 $(elapsed)"
}
for round in 1 2; do
  cell head .carry/tpl-head "" 1,4,8 qwen3-4b $round
  cell new templates "" 1,4,8 qwen3-4b $round
  cell new-g2 templates groups=2 8 qwen3-4b $round
  cell new-g2s6 templates groups=2,stages=6 8 qwen3-4b $round
  cell new-g1s8 templates groups=1,stages=8 8 qwen3-4b $round
  cell new-g3s4 templates groups=3,stages=4 8 qwen3-4b $round
  cell q4-head .carry/tpl-head "" 1,4,8 qwen3-4b-q4_0 $round
  cell q4-new templates "" 1,4,8 qwen3-4b-q4_0 $round
  cell q4-new-g2s8 templates groups=2,stages=8 8 qwen3-4b-q4_0 $round
  pack
done
python3 experiments/2026-12-06-verify-cost/summary.py $R | tee $R/summary.txt
elapsed; pack
