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
cell() { # VARIANT TAG ROUND TEMPLATE_DIR
  mkdir -p $R/$1
  env QGEN_CACHE_DIR=/tmp/qc-$2 QGEN_TEMPLATE_DIR=${4:-} timeout 60 $B/qgen bench --spec specs/qwen3-4b.lua --variant $1 --ctx 128K,512K \
    --batch 1,4 --coverage 1,0.0625 --tokens 1,8 --runs 20 --warmup 5 --json $R/$1/$2-$3.json > $R/$1/$2-$3.log 2>&1 ||
    echo "$1 $2 $3 failed: $(tail -n 2 $R/$1/$2-$3.log)"
}
for round in 1 2; do
  for v in qwen3-4b-q4_0 qwen3-4b; do cell $v base $round .carry/tbase; cell $v full $round; done
  echo "round $round $(elapsed)"; pack
done
for v in qwen3-4b-q4_0 qwen3-4b; do
  python3 experiments/2026-12-06-merge-cost/summary.py $R/$v > $R/$v/summary.txt; echo "== $v"; cat $R/$v/summary.txt
done
elapsed; pack
