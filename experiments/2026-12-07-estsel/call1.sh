# device call 1 of E92 (.carry/b: the Release build of the estsel commit, whose estimate and
# select run as one launch under QGEN_TUNE=estsel=1 where its clusters fit). qgen check, in
# parallel: qwen3-4b f16 with estsel=1 (contexts to 300K: its register and cluster paths),
# every qwen3-4b variant --quick with estsel=1,selreg=1 (one key a thread: the cluster path
# at small sizes), and --quick with the default; then the A/B, two rounds: base (the
# default: estimate, then select) against estsel=1, f16 and q4_0, 16K/128K/512K x B1/B4/B8
# x 25 %/6.25 %, one-token steps (AB, AB_CTX, AB_BATCH: fewer). Results under $R/<variant>/
# (summary.txt each).
. experiments/2026-12-06-verify-cost/head.sh
B=.carry/b
chk() { # NAME TUNE ARGS...: qgen check under QGEN_TUNE=TUNE into $R/check-NAME.log
  local name=$1 tune=$2
  shift 2
  QGEN_CACHE_DIR=/tmp/qc-$name QGEN_TUNE=$tune timeout 200 $B/qgen check --spec specs/qwen3-4b.lua "$@" > $R/check-$name.log 2>&1
  echo "check $name rc $?: $(grep -c FAIL $R/check-$name.log) FAIL; $(grep 'checks passed' $R/check-$name.log | tr '\n' ' ')"
}
chk estsel-full estsel=1 --variant qwen3-4b &
chk estsel-selreg1 estsel=1,selreg=1 --quick &
chk default "" --variant qwen3-4b --quick &
wait
elapsed; pack
AB=${AB:-qwen3-4b qwen3-4b-q4_0}
export AB_CTX=${AB_CTX:-16K,128K,512K} AB_BATCH=${AB_BATCH:-1,4,8} AB_TOKENS=1
for round in 1 2; do
  for v in $AB; do
    ab_cell $v base $round 0.25,0.0625
    ab_cell $v estsel $round 0.25,0.0625 QGEN_TUNE=estsel=1
  done
  echo "round $round $(elapsed)"; pack
done
ab_summary $AB
