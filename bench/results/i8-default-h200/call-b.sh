#!/usr/bin/env bash
# Device call B of NOTES 69: the same-call A/B of f16 against 8-bit bounds (the variants of
# tests/gpu/bounds-i8.lua, Qwen3-4B's shape), f16 and q4_0 caches, 25 % and 6.25 %, 128K and 1M,
# batch 1, two rounds; then the probe grid (bench/run.sh probe) with the 8-bit default.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for round in 1 2; do
  for cov in 0.25 0.0625; do
    for kv in f16 q4_0; do
      for b in f16 i8; do
        ab_bench "${kv}c${cov#0.}" "$b" $round build-dev/qgen tests/gpu/bounds-i8.lua "qwen3-4b-$kv-bounds-$b" $cov
      done
    done
  done
  echo "round $round $(elapsed)"
done
ab_summary
probe_if_time 560
cd $OUT && tar czf all.tgz r
