#!/usr/bin/env bash
# (Ran with its A/B bench lines spelled inline; they now go through bench/device-lib.sh's
# ab_bench and ab_summary: the same commands and files.)
# One device call (NOTES 64): (1) the GPU test run of the tree's defaults (pairs for q4_0/q8_0,
# not q5_0; the ring one sub-tile a stage for 16-bit and fp8 tiles, not GPU-run since the
# chunk change), quick specs and paths parts and the kv-pairs shapes; the pairs' A/B on two
# of those shapes (q8_0 K with q4_0 V, which spills 8 bytes under pairs; head_dim 64);
# (2) the chunk fault of NOTES 63 named: build-exp is HEAD with plan.c's guard turned into a
# default (QGEN_TUNE chunk=N then forces chunks on 16-bit/fp8 tiles), run on qwen2.5-0.5b
# (f16, 128-byte rows) and qwen3-4b-fp8 plain and under compute-sanitizer memcheck, then with
# two template variants: tpl-hoist (the L2 policy made once a chunk, outside the sub-tile
# loop) and tpl-nopol (16-byte cp.async without an L2 policy).
set -u
. bench/device-lib.sh
export QGEN_CACHE_DIR=/tmp/qgen-cache
for part in specs paths; do gpu_run_quick $part 240; done
check_quick kv-pairs tests/gpu/kv-pairs.lua 200
for round in 1 2; do
  for tree in pair0 pair1; do
    for v in q8q4:pair-q8_0-q4_0 q8q4d64:swap-q8_0-q4_0-d64-g2; do # (ab_summary's TYPE: no dashes)
      ab_bench ${v%%:*} $tree $round build-dev/qgen tests/gpu/kv-pairs.lua ${v#*:} 1 QGEN_TUNE=pair=${tree#pair}
    done
  done
done
ab_summary
chk() { # NAME SPEC SECS [VAR=VALUE ...]: qgen check --quick of SPEC with build-exp under them
  local name=$1 spec=$2 secs=$3; shift 3
  env "$@" timeout "$secs" build-exp/qgen check --quick --spec "$spec" > "$OUT/r/check-$name.log" 2>&1
  echo "$name: exit $? $(pass_counts "$OUT/r/check-$name.log") $(elapsed)"
}
q05=specs/qwen2.5-0.5b.lua fp8=specs/qwen3-4b-fp8.lua
[ $(($(date +%s) - t0)) -lt 420 ] || { cd $OUT && tar czf all.tgz r; exit 0; } # the fault experiment needs ~3 min
chk q05-chunk4 $q05 60 QGEN_TUNE=chunk=4
chk fp8-chunk2 $fp8 60 QGEN_TUNE=chunk=2
QGEN_TUNE=chunk=4 timeout 150 compute-sanitizer --tool memcheck --show-backtrace device build-exp/qgen check --quick --spec $q05 > "$OUT/r/memcheck-q05-chunk4.log" 2>&1
echo "memcheck q05 chunk4: exit $? $(elapsed)"; grep -m3 -A6 'Invalid\|Illegal\|illegal' "$OUT/r/memcheck-q05-chunk4.log" | head -30
for t in hoist nopol; do
  chk q05-chunk4-$t $q05 60 QGEN_TUNE=chunk=4 QGEN_TEMPLATE_DIR=.carry/tpl-$t
  chk fp8-chunk2-$t $fp8 60 QGEN_TUNE=chunk=2 QGEN_TEMPLATE_DIR=.carry/tpl-$t
done
cd $OUT && tar czf all.tgz r
