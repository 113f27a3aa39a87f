# device call 1 of E85, for a lease that may hold one call only. Builds (made on the CPU
# machine): .carry/head = main's qgen, .carry/b = branch experiment/mtile-warp (the merge
# kernel of E84 and QGEN_TUNE mtw). In order, packing after each part:
#  1. qgen check of qwen3-4b f16 and q4_0 under mtw=2 and under merge=1 (correctness first);
#  2. the same-call A/B, two rounds: head vs b (default plan: the merge kernel alone), f16 and
#     q4_0, 16K/128K/512K x B1/B4 x dense/25 %/6.25 % x T = 1, 4, 8; b under mtw=2 (T = 1, 8:
#     only the 8-token step has two m-tiles); b under merge=1 (the one-token step);
#  3. tests/gpu-run.sh quick over specs/ and tests/gpu specs, test_api on the GPU backend;
#  4. Nsight Compute of qg_estimate at 128K B1 6.25 %, T = 1 and 8.
. experiments/2026-12-06-verify-cost/head.sh
B=.carry/b
for tune in mtw=2 merge=1; do
  for v in qwen3-4b qwen3-4b-q4_0; do
    QGEN_CACHE_DIR=/tmp/qc-$tune QGEN_TUNE=$tune timeout 100 $B/qgen check --spec specs/qwen3-4b.lua --variant $v --quick > $R/check-$tune-$v.log 2>&1
    echo "check $tune $v rc $? $(tail -1 $R/check-$tune-$v.log)"
  done
done
elapsed; pack
cell() { # TAG BUILD VARIANT ROUND TUNE TOKENS
  env QGEN_CACHE_DIR=/tmp/qc-$2${5:-} QGEN_TUNE=${5:-} timeout 100 .carry/$2/qgen bench --spec specs/qwen3-4b.lua --variant $3 --ctx 16K,128K,512K \
    --batch 1,4 --coverage 1,0.25,0.0625 --tokens $6 --runs 20 --warmup 5 --json $R/$1-$4.json > $R/$1-$4.log 2>&1 ||
    echo "$1 $4 failed: $(tail -2 $R/$1-$4.log)"
}
for round in 1 2; do
  cell base head qwen3-4b $round "" 1,4,8; cell new b qwen3-4b $round "" 1,4,8
  cell q4-base head qwen3-4b-q4_0 $round "" 1,4,8; cell q4-new b qwen3-4b-q4_0 $round "" 1,4,8
  cell mtw2 b qwen3-4b $round mtw=2 1,8; cell q4-mtw2 b qwen3-4b-q4_0 $round mtw=2 1,8
  cell merge1 b qwen3-4b $round merge=1 1
  echo "round $round $(elapsed)"; pack
done
python3 experiments/2026-12-06-merge-cost/summary.py $R > $R/summary.txt; cat $R/summary.txt; elapsed; pack
export QGEN_CACHE_DIR=/tmp/qc-b
for p in specs gpu-specs; do timeout 120 bash tests/gpu-run.sh $B $R/gpu quick $p > $R/gpu-run-$p.txt 2>&1 & done
QGEN_TEST_BACKEND=gpu QGEN_TEMPLATE_DIR=$PWD/templates timeout 120 $B/tests/test_api > $R/test-api-gpu.log 2>&1 &
wait
echo "test_api gpu ok $(grep -c '^ok' $R/test-api-gpu.log) not-ok $(grep -c '^not ok' $R/test-api-gpu.log); $(tail -1 $R/test-api-gpu.log)"
for f in $R/gpu/gpu-check-*.log; do echo "$(basename $f .log): $(grep -c PASS $f) PASS, $(grep -c FAIL $f) FAIL"; grep FAIL $f | head -3; done
tail -3 $R/gpu-run-specs.txt $R/gpu-run-gpu-specs.txt; elapsed; pack
N=$R/ncu; mkdir -p $N
sec="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters"
for t in 1 8; do
  timeout 60 ncu --clock-control none $sec --kernel-name qg_estimate --launch-skip 3 --launch-count 1 \
    $B/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 128K --batch 1 --coverage 0.0625 --tokens $t --runs 2 --warmup 2 \
    > $N/ncu-estimate-128k-6-T$t.txt 2>&1
  echo "ncu T=$t rc $?"; grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Grid Size" $N/ncu-estimate-128k-6-T$t.txt | head -8
done
elapsed; pack
