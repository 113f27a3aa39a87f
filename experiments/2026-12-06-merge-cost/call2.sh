# device call 2: the merge kernel (qg_combine for engine modules of >= 16 query rows) as a
# same-call A/B against 8f99090 (.carry/head: its qgen, templates embedded) and the working
# tree (.carry/b), qwen3-4b f16 and q4_0, 16K/128K/512K, B1/B4, dense/25 %/6.25 %, T = 1, 4, 8,
# two rounds; then its GPU checks in parallel: tests/gpu-run.sh quick (specs, tests/gpu specs,
# every spec under sm_86/89/120 emulation), memcheck of qwen3-4b's check, test_api on the GPU
# backend, the Python suite. Results into $OUT/r.tgz.
. experiments/2026-12-06-verify-cost/head.sh
# cell TAG BUILD VARIANT ROUND
cell() {
  env QGEN_CACHE_DIR=/tmp/qc-$2 timeout 150 .carry/$2/qgen bench --spec specs/qwen3-4b.lua --variant $3 --ctx 16K,128K,512K --batch 1,4 \
    --coverage 1,0.25,0.0625 --tokens 1,4,8 --runs 20 --warmup 5 --json $R/$1-$4.json > $R/$1-$4.log 2>&1 || echo "$1 $4 failed: $(tail -2 $R/$1-$4.log)"
  echo "$1 round $4 $(elapsed)"
}
for round in 1 2; do
  cell base head qwen3-4b $round
  cell new b qwen3-4b $round
  cell q4-base head qwen3-4b-q4_0 $round
  cell q4-new b qwen3-4b-q4_0 $round
  pack
done
python3 experiments/2026-12-06-merge-cost/summary.py $R > $R/summary.txt; sed -n '/T-token step/,$p' $R/summary.txt
elapsed; pack
B=.carry/b
export QGEN_CACHE_DIR=/tmp/qc-b
for p in specs gpu-specs emulate; do EMULATE_JOBS=6 timeout 210 bash tests/gpu-run.sh $B $R/gpu quick $p > $R/gpu-run-$p.txt 2>&1 & done
timeout 210 compute-sanitizer --tool memcheck $B/qgen check --spec specs/qwen3-4b.lua --variant qwen3-4b --quick > $R/memcheck.log 2>&1 &
QGEN_TEST_BACKEND=gpu QGEN_TEMPLATE_DIR=$PWD/templates timeout 210 $B/tests/test_api > $R/test-api-gpu.log 2>&1 &
pip install -q --no-index --find-links .whl pytest > /dev/null 2>&1
export QGEN_LIBRARY=$PWD/$B/libqgen.so PYTHONPATH=$PWD/python
timeout 210 python3 -m pytest -q -rs -p no:cacheprovider python/tests > $R/pytest-gpu.log 2>&1
wait
echo "test_api gpu ok $(grep -c '^ok' $R/test-api-gpu.log) not-ok $(grep -c '^not ok' $R/test-api-gpu.log); $(tail -1 $R/test-api-gpu.log)"; tail -2 $R/pytest-gpu.log
grep -E "ERROR SUMMARY|checks passed" $R/memcheck.log | tail -2
for f in $R/gpu/gpu-check-*.log; do echo "$(basename $f .log): $(grep -c PASS $f) PASS, $(grep -c FAIL $f) FAIL"; grep FAIL $f | head -3; done
elapsed; pack
