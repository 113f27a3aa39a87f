#!/usr/bin/env bash
# (Ran with its A/B bench lines spelled inline; they now go through bench/device-lib.sh's
# ab_bench and ab_summary: the same commands and files.)
# One device call (NOTES 65): (1) the chunk fault's workaround candidate: the L2 policy made
# inside cp_async16's own asm (tpl-inasm, chunk-fault-h200/tpl-inasm.patch) with build-exp
# (chunks forced by QGEN_TUNE on 16-bit/fp8 tiles): qwen2.5-0.5b at chunk 4, qwen3-4b-fp8 at
# chunk 2; where both pass, the A/B of f16 (qwen3-4b, qwen2.5-0.5b) and e4m3 dense at 128K and
# 1M B1: cur (the tree's templates, chunk 1) / in1 (tpl-inasm, chunk 1) / in4 (tpl-inasm,
# chunk=4: the largest that fits); (2) the probe grid of build-dev (e6437e0: pairs) with the
# peers and targets.py, in the time left.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
ok=1
for c in q05:specs/qwen2.5-0.5b.lua:4 fp8:specs/qwen3-4b-fp8.lua:2; do
  IFS=: read name spec ch <<< "$c"
  QGEN_TUNE=chunk=$ch QGEN_TEMPLATE_DIR=.carry/tpl-inasm timeout 60 build-exp/qgen check --quick --spec $spec > $OUT/r/check-$name-chunk$ch-inasm.log 2>&1
  rc=$?; echo "$name chunk $ch inasm: exit $rc $(pass_counts $OUT/r/check-$name-chunk$ch-inasm.log) $(elapsed)"
  [ $rc = 0 ] || ok=0
done
if [ $ok = 1 ]; then
  for round in 1 2; do
    for tree in cur in1 in4; do
      tpl=.carry/tpl-inasm; [ $tree = cur ] && tpl=templates
      ch=1; [ $tree = in4 ] && ch=4
      for v in f16:specs/qwen3-4b.lua:qwen3-4b q05:specs/qwen2.5-0.5b.lua:qwen2.5-0.5b e4m3:specs/qwen3-4b-fp8.lua:qwen3-4b-e4m3; do
        IFS=: read ty spec var <<< "$v"
        ab_bench $ty $tree $round build-exp/qgen $spec $var 1 QGEN_TUNE=chunk=$ch QGEN_TEMPLATE_DIR=$tpl
      done
    done
  done
  ab_summary
fi
probe_if_time 585
cd $OUT && tar czf all.tgz r
