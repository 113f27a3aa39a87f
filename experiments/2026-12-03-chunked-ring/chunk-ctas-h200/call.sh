#!/usr/bin/env bash
# One device call: with the ring in chunks of 4 (the default now) the q4_0 producer waits on
# empty stages and the consumers issue 0.67 a scheduler (chunk-ab-h200's ncu). Do more warps
# an SM pay now? groups x ctas (80 registers) against the default 4 groups (96 registers),
# and ring depth, dense B1 128K / 1M, every quantized type, two alternating rounds.
set -u
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache
t0=$(date +%s)
i=0
for round in 1 2; do
  for tune in default groups=3:ctas=6 groups=5:ctas=4:stages=2 groups=7:ctas=3:stages=2 stages=2 groups=3; do
    i=$((i+1))
    if [ $tune = default ]; then unset QGEN_TUNE; else export QGEN_TUNE=${tune//:/,}; fi
    for v in q4_0 q8_0 q5_0; do
      timeout 40 build-dev/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b-$v --ctx 128K,1M --batch 1 --coverage 1 --runs 20 \
        --json $OUT/r/ab-$v-${tune//[=:]/}-$round.json > $OUT/r/ab-$v-${tune//[=:]/}-$round.log 2>&1 || echo "bench $v $tune $round failed"
    done
  done
  echo "round $round done at $(( $(date +%s) - t0 )) s"
done
python3 bench/ab_summary.py $OUT/r > $OUT/r/summary.txt 2>&1; cat $OUT/r/summary.txt
cd $OUT && tar czf all.tgz r
