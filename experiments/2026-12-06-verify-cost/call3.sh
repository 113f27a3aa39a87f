# device call 3: the fix as a same-call A/B (c86f864's qgen and templates in .carry/head vs
# the working tree's in .carry/b: the query prologue's loads unconditional, 16 in flight a
# thread; the plan's token groups over several m-tiles rounded up), qwen3-4b f16 and q4_0,
# 128K/512K, B1/B4, dense/25 %/6.25 %, T = 1, 4, 8, two rounds; then its GPU checks in
# parallel: qgen check --quick of every spec natively, test_api on the GPU backend, the whole
# Python suite and the README's GPU Python blocks. Results into $OUT/r.tgz.
. experiments/2026-12-06-verify-cost/head.sh
# cell TAG BUILD TOKENS VARIANT ROUND (the build's own, embedded templates)
cell() {
  env QGEN_CACHE_DIR=/tmp/qc-$2 timeout 150 .carry/$2/qgen bench --spec specs/qwen3-4b.lua --variant $4 --ctx 128K,512K --batch 1,4 \
    --coverage 1,0.25,0.0625 --tokens $3 --runs 20 --warmup 5 --json $R/$1-$5.json > $R/$1-$5.log 2>&1 || echo "$1 $5 failed: $(tail -2 $R/$1-$5.log)"
  echo "$1 round $5 $(elapsed)"
}
for round in 1 2; do
  cell head head 1,4,8 qwen3-4b $round
  cell new b 1,4,8 qwen3-4b $round
  cell q4-head head 1,4,8 qwen3-4b-q4_0 $round
  cell q4-new b 1,4,8 qwen3-4b-q4_0 $round
  pack
done
python3 experiments/2026-12-06-verify-cost/summary.py $R > $R/summary.txt; sed -n '/T-token step/,/^$/p' $R/summary.txt
elapsed; pack
B=.carry/b
export QGEN_CACHE_DIR=/tmp/qc-b
for f in specs/*.lua tests/gpu/*.lua; do n=$(basename $f .lua); timeout 330 $B/qgen check --quick --spec $f > $R/check-$n.log 2>&1 & done
QGEN_TEST_BACKEND=gpu QGEN_TEMPLATE_DIR=$PWD/templates timeout 200 $B/tests/test_api > $R/test-api-gpu.log 2>&1; echo "test_api gpu rc $? ok $(grep -c '^ok' $R/test-api-gpu.log) not-ok $(grep -c '^not ok' $R/test-api-gpu.log)"
pip install -q --no-index --find-links .whl pytest > /dev/null 2>&1
export QGEN_LIBRARY=$PWD/$B/libqgen.so PYTHONPATH=$PWD/python
timeout 100 python3 tests/readme_python.py README.md "Use it" > $R/readme-gpu.log 2>&1; echo "readme GPU blocks rc $?"; tail -3 $R/readme-gpu.log
timeout 330 python3 -m pytest -q -rs -p no:cacheprovider python/tests > $R/pytest-gpu.log 2>&1; echo "pytest rc $?"; tail -4 $R/pytest-gpu.log
wait
for f in $R/check-*.log; do echo "$(basename $f .log) $(grep -c PASS $f) PASS $(grep -c FAIL $f) FAIL $(tail -1 $f | cut -c1-80)"; done
elapsed; pack
