# device call 3 (call 2 trimmed to the device time left after refused starts): the merge kernel
# vs 8f99090 (.carry/head) as a same-call A/B, qwen3-4b f16, 16K/128K/512K, B1/B4,
# dense/6.25 %, T = 1, 4, 8, two rounds; then in parallel `qgen check --quick` of qwen3-4b
# (head_dim 128), gemma-3-4b (256) and phi-3-mini (96) and test_api on the GPU backend.
# Results into $OUT/r.tgz.
. experiments/2026-12-06-verify-cost/head.sh
cell() {
  env QGEN_CACHE_DIR=/tmp/qc-$2 timeout 100 .carry/$2/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 16K,128K,512K --batch 1,4 \
    --coverage 1,0.0625 --tokens 1,4,8 --runs 20 --warmup 5 --json $R/$1-$3.json > $R/$1-$3.log 2>&1 || echo "$1 $3 failed: $(tail -2 $R/$1-$3.log)"
  echo "$1 round $3 $(elapsed)"
}
for round in 1 2; do cell base head $round; cell new b $round; done
python3 experiments/2026-12-06-merge-cost/summary.py $R > $R/summary.txt; sed -n '/T-token step/,$p' $R/summary.txt; pack
B=.carry/b
export QGEN_CACHE_DIR=/tmp/qc-b
for s in qwen3-4b gemma-3-4b phi-3-mini; do timeout 150 $B/qgen check --quick --spec specs/$s.lua > $R/check-$s.log 2>&1 & done
QGEN_TEST_BACKEND=gpu QGEN_TEMPLATE_DIR=$PWD/templates timeout 150 $B/tests/test_api > $R/test-api-gpu.log 2>&1
wait
echo "test_api gpu ok $(grep -c '^ok' $R/test-api-gpu.log) not-ok $(grep -c '^not ok' $R/test-api-gpu.log); $(tail -1 $R/test-api-gpu.log)"
for f in $R/check-*.log; do echo "$(basename $f .log) $(grep -c PASS $f) PASS $(grep -c FAIL $f) FAIL; $(tail -1 $f | cut -c1-100)"; grep FAIL $f | head -3; done
elapsed; pack
