# device call of E88 (build .carry/b = branch experiment/full-tiles; .carry/tbase = main's
# templates, read instead of the built-in ones by QGEN_TEMPLATE_DIR: the baseline in the same
# binary). qgen check --quick of qwen3-4b f16 and q4_0 with the new templates; then the A/B,
# two rounds: base (main's templates) against full (the branch's), f16 and q4_0, 128K/512K x
# B1/B4 x dense/6.25 % x T = 1, 8. Results under $R/<variant>/ (summary.txt each), into $OUT/r.tgz.
. experiments/2026-12-06-verify-cost/head.sh
B=.carry/b
for v in qwen3-4b qwen3-4b-q4_0; do
  QGEN_CACHE_DIR=/tmp/qc-full timeout 100 $B/qgen check --spec specs/qwen3-4b.lua --variant $v --quick > $R/check-full-$v.log 2>&1
  echo "check full $v rc $? $(grep 'checks passed' $R/check-full-$v.log | tail -n 1)"
done
elapsed; pack
for round in 1 2; do
  for v in qwen3-4b-q4_0 qwen3-4b; do
    ab_cell $v base $round 1,0.0625 QGEN_TEMPLATE_DIR=.carry/tbase
    ab_cell $v full $round 1,0.0625
  done
  echo "round $round $(elapsed)"; pack
done
ab_summary qwen3-4b-q4_0 qwen3-4b
