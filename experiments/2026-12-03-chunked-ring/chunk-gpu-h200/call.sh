#!/usr/bin/env bash
# (Ran with its checks spelled inline; they now go through bench/device-lib.sh: the same
# commands and logs.)
# Ran on 3f31496 (chunk 4 the default for every cache type). Its specs and paths parts faulted
# on qwen2.5-0.5b, qwen3-4b-e4m3/e5m2 (sm_90 and sm_80 PTX): see NOTES 63; the logs are
# tests/gpu-results/gpu-check-{specs,paths}-quick-3f31496-h200.log. The probe's e4m3 bench hit
# "an illegal instruction", so its merge step failed on the device; probe/decode-h200.* and
# probe/targets.txt were then made here from the other JSONs: python3 bench/merge.py --qgen
# probe/q4b-{f16,q4_0,q5_0,q8_0}.json probe/q14b-f16.json --peers probe/peers32.json
# probe/peers40.json --meta probe/meta.json --out probe/decode-h200; python3 bench/targets.py
# probe/decode-h200.json.
# One device call: the GPU test run of the chunked ring as the default (chunk 4), quick
# sizes, parts specs and paths (select's paths, olddq=1, swap=0, the sm_80 PTX bundles whose
# cp.async producer fills chunks sub-tile by sub-tile, eval); compute-sanitizer racecheck of
# qwen3-4b-q4_0 (the bulk chunk copies and the chunk mbarriers); then, with the time left,
# the probe grid with the peers and targets.py.
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for part in specs paths; do
  gpu_run_quick $part 240
done
timeout 90 compute-sanitizer --tool racecheck build-dev/qgen check --spec specs/qwen3-4b.lua --variant qwen3-4b-q4_0 --quick > $OUT/r/racecheck-q4_0.log 2>&1
echo "racecheck q4_0: exit $? $(grep -E 'RACECHECK SUMMARY|checks passed' $OUT/r/racecheck-q4_0.log | tr '\n' ' ') at $(( $(date +%s) - t0 )) s"
probe_if_time 560
cd $OUT && tar czf all.tgz r
