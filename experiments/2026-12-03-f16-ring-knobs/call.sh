#!/usr/bin/env bash
# (Ran with its A/B loop spelled inline; it now goes through bench/device-lib.sh's ab_rounds:
# the same commands and files.)
# One device call (NOTES 68): qwen3-4b f16 dense against cuDNN's speed (issue 19 must-show 5),
# the ring's shape since chunks became f16's default (26a6387): the default (3 groups x 4
# stages, chunks of 4), chunk=2, chunk=1 (with the L2 policy), groups=4,stages=3,
# groups=2,stages=6 (all 168 registers, 2 CTAs an SM); dense 128K and 1M, B1 and B4, two
# rounds. Information only: a winner would need its own GPU checks before it became a default.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache AB_BATCH=1,4
ab_rounds build-dev/qgen "head= ch2=chunk=2 ch1=chunk=1 g4s3=groups=4,stages=3 g2s6=groups=2,stages=6" \
  f16:specs/qwen3-4b.lua:qwen3-4b
ab_summary
cd $OUT && tar czf all.tgz r
