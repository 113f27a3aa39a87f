# device call 6, call 4 trimmed for a short lease: the merge kernel's A/B against main
# (.carry/head) on qwen3-4b f16 and q4_0 (16K/128K/512K, B1/B4, dense/25 %/6.25 %,
# T = 1, 4, 8; two rounds), the one-token step under QGEN_TUNE merge=1, then its GPU checks:
# tests/gpu-run.sh quick on specs/ and tests/gpu specs, test_api on the GPU backend, qgen
# check of qwen3-4b and its q4_0 variant under merge=1. Results into $OUT/r.tgz.
. experiments/2026-12-06-verify-cost/head.sh
cell() { # TAG BUILD VARIANT ROUND [TUNE] [TOKENS]
  env QGEN_CACHE_DIR=/tmp/qc-$2 QGEN_TUNE=${5:-} timeout 100 .carry/$2/qgen bench --spec specs/qwen3-4b.lua --variant $3 --ctx 16K,128K,512K \
    --batch 1,4 --coverage 1,0.25,0.0625 --tokens ${6:-1,4,8} --runs 20 --warmup 5 --json $R/$1-$4.json > $R/$1-$4.log 2>&1 ||
    echo "$1 $4 failed: $(tail -2 $R/$1-$4.log)"
  echo "$1 round $4 $(elapsed)"
}
for round in 1 2; do
  cell base head qwen3-4b $round; cell new b qwen3-4b $round
  cell q4-base head qwen3-4b-q4_0 $round; cell q4-new b qwen3-4b-q4_0 $round
  cell merge1 b qwen3-4b $round merge=1 1
  pack
done
python3 experiments/2026-12-06-merge-cost/summary.py $R > $R/summary.txt; cat $R/summary.txt | head -80; elapsed; pack
B=.carry/b; export QGEN_CACHE_DIR=/tmp/qc-b
for p in specs gpu-specs; do timeout 150 bash tests/gpu-run.sh $B $R/gpu quick $p > $R/gpu-run-$p.txt 2>&1 & done
QGEN_TEST_BACKEND=gpu QGEN_TEMPLATE_DIR=$PWD/templates timeout 150 $B/tests/test_api > $R/test-api-gpu.log 2>&1 &
for v in qwen3-4b qwen3-4b-q4_0; do
  QGEN_TUNE=merge=1 timeout 120 $B/qgen check --spec specs/qwen3-4b.lua --variant $v --quick > $R/check-merge1-$v.log 2>&1
  echo "check merge=1 $v rc $? $(tail -1 $R/check-merge1-$v.log)"
done
wait
echo "test_api gpu ok $(grep -c '^ok' $R/test-api-gpu.log) not-ok $(grep -c '^not ok' $R/test-api-gpu.log); $(tail -1 $R/test-api-gpu.log)"
for f in $R/gpu/gpu-check-*.log; do echo "$(basename $f .log): $(grep -c PASS $f) PASS, $(grep -c FAIL $f) FAIL"; grep FAIL $f | head -3; done
tail -3 $R/gpu-run-specs.txt $R/gpu-run-gpu-specs.txt; elapsed; pack
