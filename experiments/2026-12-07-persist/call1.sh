# device call 1 of E93 (.carry/b: a Release build of the persist commit; its attend is
# persistent under QGEN_TUNE=persist=N, the default one-wave kernel otherwise: the A/B in
# one binary). First qgen check, in parallel: qwen3-4b f16 with persist=2 at every context
# to 300K; every qwen3-4b variant --quick with persist=1 and with persist=4; the e4m3
# variant --quick with persist=2. Then compute-sanitizer racecheck of persist=2 (f16,
# --quick). Then the A/B, two rounds: base (one wave) against persist=1 (one share a
# slot: the loop's cost alone) and persist=2 (twice the shares, claimed as CTAs free up),
# 16K/128K/512K x B1/B4, one-token steps: f16 dense and 6.25 %, q8_0 and e4m3 dense. Results
# under $R (check logs; <variant>/summary.txt each).
. experiments/2026-12-06-verify-cost/head.sh
B=.carry/b
chk() { # NAME TUNE SPEC ARGS...: qgen check under QGEN_TUNE=TUNE into $R/check-NAME.log
  local name=$1 tune=$2 spec=$3
  shift 3
  QGEN_CACHE_DIR=/tmp/qc-$name QGEN_TUNE=$tune timeout 200 $B/qgen check --spec $spec "$@" > $R/check-$name.log 2>&1
  echo "check $name rc $?: $(grep -c FAIL $R/check-$name.log) FAIL; $(grep 'checks passed' $R/check-$name.log | tr '\n' ' ')"
}
chk p2-full persist=2 specs/qwen3-4b.lua --variant qwen3-4b &
chk p1-quick persist=1 specs/qwen3-4b.lua --quick &
chk p4-quick persist=4 specs/qwen3-4b.lua --quick &
chk p2-e4m3 persist=2 specs/qwen3-4b-fp8.lua --variant qwen3-4b-e4m3 --quick &
wait
elapsed; pack
for v in qwen3-4b; do
  QGEN_CACHE_DIR=/tmp/qc-rc QGEN_TUNE=persist=2 timeout 120 compute-sanitizer --tool racecheck $B/qgen check --spec specs/qwen3-4b.lua --variant $v --quick > $R/racecheck-$v.log 2>&1
  echo "racecheck $v rc $?: $(grep -E 'RACECHECK SUMMARY|checks passed' $R/racecheck-$v.log | tr '\n' ' ')"
done
elapsed; pack
export AB_CTX=16K,128K,512K AB_BATCH=1,4 AB_TOKENS=1
for round in 1 2; do
  for arm in base persist=1 persist=2; do
    tune=${arm#base}
    ab_cell qwen3-4b ${arm/=/} $round 1,0.0625 QGEN_TUNE=$tune
    ab_cell qwen3-4b-q8_0 ${arm/=/} $round 1 QGEN_TUNE=$tune
    AB_SPEC=specs/qwen3-4b-fp8.lua ab_cell qwen3-4b-e4m3 ${arm/=/} $round 1 QGEN_TUNE=$tune
  done
  echo "round $round $(elapsed)"; pack
done
ab_summary qwen3-4b qwen3-4b-q8_0 qwen3-4b-e4m3
