#!/usr/bin/env bash
# (Ran with its checks spelled inline; they now go through bench/device-lib.sh: the same
# commands and logs.)
# (Its summary step ran bench/results/<this folder>/summary.py, now bench/ab_summary.py.)
# One device call: the one-LOP3 magic words (this tree's templates, embedded in build-dev)
# checked on the GPU, their attend loop counted in SASS, and A/B'd against the previous
# templates (.carry/main-templates, by QGEN_TEMPLATE_DIR) in alternating rounds.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qc-new
check_quick qwen3-new specs/qwen3-4b.lua 90
check_quick kv-pairs-new tests/gpu/kv-pairs.lua 150
# SASS of both trees' attend loops (sm_90 cubins of the emitted units)
for t in main new; do
  if [ $t = main ]; then export QGEN_TEMPLATE_DIR=$PWD/.carry/main-templates; else unset QGEN_TEMPLATE_DIR; fi
  QGEN_CACHE_DIR=/tmp/qc-$t build-dev/qgen emit --spec specs/qwen3-4b.lua -o /tmp/emit-$t > /dev/null 2>&1
  for v in q4_0 q8_0 q5_0; do
    cuobjdump -sass /tmp/emit-$t/*-${v}_*sm90.cubin > /tmp/k.sass && echo "$t $v: $(python3 bench/sass-loop.py /tmp/k.sass | head -1)"
  done
done > $OUT/r/sass.txt 2>&1
unset QGEN_TEMPLATE_DIR
for round in 1 2; do
  for v in q4_0 q8_0 q5_0; do
    for t in main new; do
      export QGEN_CACHE_DIR=/tmp/qc-$t
      if [ $t = main ]; then export QGEN_TEMPLATE_DIR=$PWD/.carry/main-templates; else unset QGEN_TEMPLATE_DIR; fi
      cov=1,0.0625; [ $v = q4_0 ] && cov=1,0.25,0.0625
      timeout 60 build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-$v --ctx 128K,1M --batch 1,4 --coverage $cov \
        --json $OUT/r/ab-$v-$t-$round.json > $OUT/r/ab-$v-$t-$round.log 2>&1 || echo "bench $v $t $round failed"
    done
  done
done
unset QGEN_TEMPLATE_DIR
export QGEN_CACHE_DIR=/tmp/qc-new
timeout 60 ncu --clock-control none --metrics smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_tensor.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed.sum,gpu__time_duration.sum \
  --kernel-name qg_attend --launch-skip 3 --launch-count 1 build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-q4_0 --ctx 128K --batch 1 --coverage 1 --runs 2 --warmup 2 > $OUT/r/ncu-pipes-q4-128k.txt 2>&1
python3 bench/ab_summary.py $OUT/r > $OUT/r/summary.txt; cat $OUT/r/summary.txt $OUT/r/sass.txt
cd $OUT && tar czf all.tgz r
