#!/usr/bin/env bash
# The last device call of issue 19's final session (it ran on c47d35b): qgen check --quick of qwen3-4b (the
# header now names the bounds form) and of the test specs not run since 8-bit bounds became
# the default (tests/gpu/rescore.lua: two-stage selection; bounds-i8.lua; fp8.lua), then the
# probe grid with the peers and bench/targets.py on the same machine (bench/run.sh probe).
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
check_quick qwen3 specs/qwen3-4b.lua 60
check_quick rescore tests/gpu/rescore.lua 200
check_quick bounds-i8 tests/gpu/bounds-i8.lua 120
check_quick fp8 tests/gpu/fp8.lua 100
probe_if_time 590
rm -f "$OUT"/r/probe/*.ncu-rep
cd "$OUT" && tar czf all.tgz r
