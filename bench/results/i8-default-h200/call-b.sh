#!/usr/bin/env bash
# Device call B of NOTES 69: the same-call A/B of f16 against 8-bit bounds (the variants of
# tests/gpu/bounds-i8.lua, Qwen3-4B's shape), f16 and q4_0 caches, 25 % and 6.25 %, 128K and 1M,
# batch 1, two rounds; then the probe grid (bench/run.sh probe) with the 8-bit default.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
# (it ran this A/B with the loops inline, each bounds form innermost; ab_trees runs the
# same commands with them outermost)
ab_trees "f16:build-dev/qgen i8:build-dev/qgen" "f16:tests/gpu/bounds-i8.lua:qwen3-4b-f16-bounds-@ q4_0:tests/gpu/bounds-i8.lua:qwen3-4b-q4_0-bounds-@" "0.25 0.0625"
probe_if_time 560
cd $OUT && tar czf all.tgz r
