# device call 2 of E90 (the second form: the next stage waited for at the step's start, the load branch-free) (.carry/b = main's Release build; .carry/tkpf = the branch's templates,
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
cell() { # VARIANT TAG ROUND TEMPLATE_DIR
  mkdir -p $R/$1
  env QGEN_CACHE_DIR=/tmp/qc-$2 QGEN_TEMPLATE_DIR=${4:-} timeout 60 $B/qgen bench --spec specs/qwen3-4b.lua --variant $1 --ctx 128K,512K \
    --batch 1,4 --coverage 1,0.0625 --tokens 1,8 --runs 20 --warmup 5 --json $R/$1/$2-$3.json > $R/$1/$2-$3.log 2>&1 ||
    echo "$1 $2 $3 failed: $(tail -n 2 $R/$1/$2-$3.log)"
}
for round in 1 2; do
  for v in qwen3-4b-q4_0 qwen3-4b-q5_0; do cell $v base $round; cell $v kpf $round .carry/tkpf; done
  echo "round $round $(elapsed)"; pack
done
for v in qwen3-4b-q4_0 qwen3-4b-q5_0; do
  python3 experiments/2026-12-06-merge-cost/summary.py $R/$v > $R/$v/summary.txt; echo "== $v"; cat $R/$v/summary.txt
done
elapsed; pack
