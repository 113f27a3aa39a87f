# device call 2 of E85: call 1 cut to ~6 min for a short lease. qgen check of qwen3-4b f16
# and q4_0 under mtw=2; the A/B at 128K/512K x B1/B4 x dense/6.25 % x T = 1, 8, two rounds
# (main's qgen, the branch's default plan, the branch under mtw=2); test_api on the GPU.
. experiments/2026-12-06-verify-cost/head.sh
B=.carry/b
for v in qwen3-4b-q4_0 qwen3-4b; do
  QGEN_CACHE_DIR=/tmp/qc-mtw QGEN_TUNE=mtw=2 timeout 100 $B/qgen check --spec specs/qwen3-4b.lua --variant $v --quick > $R/check-mtw=2-$v.log 2>&1
  echo "check mtw=2 $v rc $? $(tail -1 $R/check-mtw=2-$v.log)"
done
elapsed; pack
cell() { # TAG BUILD VARIANT ROUND TUNE
  env QGEN_CACHE_DIR=/tmp/qc-$2${5:-} QGEN_TUNE=${5:-} timeout 60 .carry/$2/qgen bench --spec specs/qwen3-4b.lua --variant $3 --ctx 128K,512K \
    --batch 1,4 --coverage 1,0.0625 --tokens 1,8 --runs 20 --warmup 5 --json $R/$1-$4.json > $R/$1-$4.log 2>&1 ||
    echo "$1 $4 failed: $(tail -2 $R/$1-$4.log)"
}
for round in 1 2; do
  cell q4-base head qwen3-4b-q4_0 $round; cell q4-new b qwen3-4b-q4_0 $round; cell q4-mtw2 b qwen3-4b-q4_0 $round mtw=2
  cell base head qwen3-4b $round; cell new b qwen3-4b $round; cell mtw2 b qwen3-4b $round mtw=2
  echo "round $round $(elapsed)"; pack
done
python3 experiments/2026-12-06-merge-cost/summary.py $R > $R/summary.txt; cat $R/summary.txt; elapsed; pack
QGEN_CACHE_DIR=/tmp/qc-b QGEN_TEST_BACKEND=gpu QGEN_TEMPLATE_DIR=$PWD/templates timeout 100 $B/tests/test_api > $R/test-api-gpu.log 2>&1
echo "test_api gpu rc $? ok $(grep -c '^ok' $R/test-api-gpu.log) not-ok $(grep -c '^not ok' $R/test-api-gpu.log); $(tail -1 $R/test-api-gpu.log)"
elapsed; pack
