#!/usr/bin/env bash
# (Ran with its checks and its summary step spelled inline; they now go through bench/device-lib.sh: the same
# commands and logs.)
# call 5: kv-pairs on main (swap-* variants); the K-offset experiment (.carry/exp-reg: offsets in
# registers, .carry/exp-templates: per-warp shared copy) checked and A/B'd against main
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qc-main
check_quick kv-pairs-main tests/gpu/kv-pairs.lua 120
for t in exp-reg exp-templates; do
  export QGEN_CACHE_DIR=/tmp/qc-$t QGEN_TEMPLATE_DIR=$PWD/.carry/$t
  check_quick qwen3-$t specs/qwen3-4b.lua 60
  unset QGEN_TEMPLATE_DIR
done
export QGEN_CACHE_DIR=/tmp/qc-exp-reg QGEN_TEMPLATE_DIR=$PWD/.carry/exp-reg
check_quick kv-pairs-exp-reg tests/gpu/kv-pairs.lua 120
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
python3 bench/ab_summary.py $OUT/r
cd $OUT && tar czf all.tgz r
