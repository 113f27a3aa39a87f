#!/usr/bin/env bash
# (Ran with its ncu steps spelled inline; they now go through bench/device-lib.sh's ncu_src:
# the same commands and files.)
# (Ran with its A/B bench lines spelled inline; they now go through bench/device-lib.sh's
# ab_bench and ab_summary: the same commands and files.)
# One device call (NOTES 65): (1) f16 chunks without the L2 policy (the fault's only passing
# form: chunk-fault-h200/tpl-nopol.patch, here on e6437e0's templates), A/B against the
# tree's chunk 1 with the policy: cur (templates,
# chunk 1) / np1 (tpl-nopol, chunk 1) / np4 (tpl-nopol, chunk=4: 4 where it fits), qwen3-4b f16
# and qwen2.5-0.5b dense 128K and 1M B1, two rounds, with build-exp (chunks forced by
# QGEN_TUNE); (2) ncu stall sampling (SourceCounters) of build-dev's attend, q4_0 (pairs) and
# q5_0 (no pairs) dense 128K B1: where the quantized step's time is now.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for round in 1 2; do
  for tree in cur np1 np4; do
    tpl=.carry/tpl-nopol; [ $tree = cur ] && tpl=templates
    ch=1; [ $tree = np4 ] && ch=4
    for v in f16:specs/qwen3-4b.lua:qwen3-4b q05:specs/qwen2.5-0.5b.lua:qwen2.5-0.5b; do
      IFS=: read ty spec var <<< "$v"
      ab_bench $ty $tree $round build-exp/qgen $spec $var 1 QGEN_TUNE=chunk=$ch QGEN_TEMPLATE_DIR=$tpl
    done
  done
done
ab_summary
for t in q4_0 q5_0; do ncu_src $t 128K 120 12; done
cd $OUT && tar czf all.tgz r
