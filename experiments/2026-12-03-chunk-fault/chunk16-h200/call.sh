#!/usr/bin/env bash
# (Ran with its A/B bench lines spelled inline; they now go through bench/device-lib.sh's
# ab_bench and ab_summary: the same commands and files.)
# One device call (NOTES 65): chunks for every cache type, the cp.async copies of a chunked
# ring without the L2 policy (L2_HINT). A/B, two rounds, dense 128K and 1M B1: ch1
# (QGEN_TUNE chunk=1: the earlier default for 16-bit/fp8 tiles, policy on) / def (chunk 4
# for f16, 2 for fp8) on qwen3-4b f16, qwen2.5-0.5b (f16, head_dim 64) and qwen3-4b-e4m3; then
# the GPU test run of the new defaults (tests/gpu-run.sh quick specs, the kv-pairs shapes
# with views and engine layouts), the probe grid, and the paths part if time is left.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for round in 1 2; do
  for tree in ch1 def; do
    tune=; [ $tree = ch1 ] && tune=chunk=1
    for v in f16:specs/qwen3-4b.lua:qwen3-4b q05:specs/qwen2.5-0.5b.lua:qwen2.5-0.5b e4m3:specs/qwen3-4b-fp8.lua:qwen3-4b-e4m3; do
      IFS=: read ty spec var <<< "$v"
      ab_bench $ty $tree $round build-dev/qgen $spec $var 1 QGEN_TUNE=$tune
    done
  done
done
ab_summary
gpu_run_quick specs 200
check_quick kv-pairs tests/gpu/kv-pairs.lua 160
probe_if_time 330
[ $(($(date +%s) - t0)) -lt 230 ] && gpu_run_quick paths 180
cd $OUT && tar czf all.tgz r
