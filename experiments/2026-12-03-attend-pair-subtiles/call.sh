#!/usr/bin/env bash
# (Ran with its checks spelled inline; they now go through bench/device-lib.sh: the same
# commands and logs.)
# (Its summary step ran bench/results/<this folder>/summary.py, now bench/ab_summary.py.)
# One device call: two sub-tiles a consumer step for the swapped operands (this tree's
# templates, embedded in build-dev: 4 CTAs an SM asked at head_dim <= 128) checked on the GPU,
# and A/B'd in alternating rounds by QGEN_TEMPLATE_DIR against: main (the previous commit's
# templates), lop3 (the one-LOP3 magic words alone), pair (= the embedded tree), free (pair
# with no CTA minimum: ptxas takes ~128 registers, 3 CTAs an SM).
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qc-emb
check_quick qwen3-pair specs/qwen3-4b.lua 90
check_quick kv-pairs-pair tests/gpu/kv-pairs.lua 200
QGEN_CACHE_DIR=/tmp/qc-free QGEN_TEMPLATE_DIR=$PWD/.carry/t-free check_quick qwen3-free specs/qwen3-4b.lua 90
tdir() { if [ $1 = main ]; then echo $PWD/.carry/main-templates; else echo $PWD/.carry/t-$1; fi; }
for t in pair free; do
  QGEN_CACHE_DIR=/tmp/qc-$t QGEN_TEMPLATE_DIR=$(tdir $t) build-dev/qgen emit --spec specs/qwen3-4b.lua -o /tmp/emit-$t > /dev/null 2>&1
  for v in q4_0 q8_0 q5_0; do
    cuobjdump -sass /tmp/emit-$t/*-${v}_*sm90.cubin > /tmp/k.sass && python3 bench/sass-loop.py /tmp/k.sass | sed "s/^/$t $v: /"
  done
done > $OUT/r/sass.txt 2>&1
for round in 1 2; do
  for v in q4_0 q8_0 q5_0; do
    for t in main lop3 pair free; do
      cov=1,0.0625; [ $v = q4_0 ] && cov=1,0.25,0.0625
      QGEN_CACHE_DIR=/tmp/qc-$t QGEN_TEMPLATE_DIR=$(tdir $t) timeout 60 build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-$v --ctx 128K,1M --batch 1,4 --coverage $cov \
        --json $OUT/r/ab-$v-$t-$round.json > $OUT/r/ab-$v-$t-$round.log 2>&1 || echo "bench $v $t $round failed"
    done
  done
done
export QGEN_CACHE_DIR=/tmp/qc-emb
timeout 60 ncu --clock-control none --metrics smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_tensor.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed.sum,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
  --kernel-name qg_attend --launch-skip 3 --launch-count 1 build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-q4_0 --ctx 128K --batch 1 --coverage 1 --runs 2 --warmup 2 > $OUT/r/ncu-pipes-q4-128k-pair.txt 2>&1
python3 bench/ab_summary.py $OUT/r > $OUT/r/summary.txt; cat $OUT/r/summary.txt $OUT/r/sass.txt
cd $OUT && tar czf all.tgz r
