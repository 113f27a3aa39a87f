# device call of E87 (after E86's call1.sh in the same device command, build .carry/b): qgen
# check --quick of qwen3-4b's q4_0, q5_0, q8_0 under groups=3; then the A/B in one build, two
# rounds: the default (four token groups) against QGEN_TUNE=groups=3, each block type at
# 128K/512K x B1/B4 x dense/25 %/6.25 % x T = 1, 8. Results under $R/groups/<variant>/
# (summary.txt each), packed with E86's into $OUT/r.tgz.
. experiments/2026-12-06-verify-cost/head.sh
B=.carry/b
R0=$R; R=$R0/groups; mkdir -p $R
check_tuned groups=3 qwen3-4b-q4_0 qwen3-4b-q5_0 qwen3-4b-q8_0
elapsed; pack
for round in 1 2; do
  for v in qwen3-4b-q4_0 qwen3-4b-q5_0 qwen3-4b-q8_0; do
    ab_cell $v base $round 1,0.25,0.0625
    ab_cell $v g3 $round 1,0.25,0.0625 QGEN_TUNE=groups=3
  done
  echo "round $round $(elapsed)"; pack
done
ab_summary qwen3-4b-q4_0 qwen3-4b-q5_0 qwen3-4b-q8_0
