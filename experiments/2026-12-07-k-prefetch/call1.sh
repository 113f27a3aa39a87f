# device call 1 of E90 (AB: the variants of the A/B, default q4_0, q5_0, q8_0; call2.sh sets
# two) (.carry/b = main's Release build; .carry/tkpf = the branch's templates,
# read instead of the built-in ones by QGEN_TEMPLATE_DIR: the A/B in one binary). qgen check
# --quick of qwen3-4b's q8_0, q4_0, q5_0 variants (every engine step) with the new templates, in
# parallel; then the A/B, two rounds: base (built-in) against kpf, the three block types,
# 128K/512K x B1/B4 x dense/6.25 % x T = 1, 8. Results under $R/<variant>/ (summary.txt each).
. experiments/2026-12-06-verify-cost/head.sh
B=.carry/b
for v in qwen3-4b-q8_0 qwen3-4b-q4_0 qwen3-4b-q5_0; do
  QGEN_CACHE_DIR=/tmp/qc-kpf-$v QGEN_TEMPLATE_DIR=.carry/tkpf timeout 150 $B/qgen check --spec specs/qwen3-4b.lua --variant $v --quick > $R/check-kpf-$v.log 2>&1 &
done
wait
for v in qwen3-4b-q8_0 qwen3-4b-q4_0 qwen3-4b-q5_0; do echo "check kpf $v: $(grep 'checks passed' $R/check-kpf-$v.log | tail -n 1)"; done
elapsed; pack
AB=${AB:-qwen3-4b-q4_0 qwen3-4b-q5_0 qwen3-4b-q8_0}
for round in 1 2; do
  for v in $AB; do
    ab_cell $v base $round 1,0.0625
    ab_cell $v kpf $round 1,0.0625 QGEN_TEMPLATE_DIR=.carry/tkpf
  done
  echo "round $round $(elapsed)"; pack
done
ab_summary $AB
