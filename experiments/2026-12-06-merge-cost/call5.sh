# device call 5: with the merge kernel, the verify grid of bench/results/verify-flashinfer-*:
# qgen's verify steps (64K/128K/512K, B1/B4, dense/25 %/6.25 %, T = 1, 4, 8) and the peers
# (SDPA's verify step, FlashInfer 0.5.3's paged decode) into $R/verify/ for
# bench/verify_table.py; then Nsight Compute on qg_estimate of the one-token and the 8-token
# step at 128K B1 6.25 % (where the 8-token step's estimate is ~5 us longer), into $R/ncu/.
. experiments/2026-12-06-verify-cost/head.sh
V=$R/verify; N=$R/ncu; mkdir -p $V $N; cp $R/gpu.txt $V/
export QGEN_CACHE_DIR=/tmp/qc-b
timeout 200 .carry/b/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 64K,128K,512K --batch 1,4 \
  --coverage 1,0.25,0.0625 --tokens 1,4,8 --json $V/q4b-f16.json > $V/qgen.log 2>&1
echo "verify qgen rc $?"; elapsed; pack
bash bench/flashinfer-wheels.sh install .whl/fi > $V/fi-install.log 2>&1; echo "fi install rc $?"
timeout 180 python3 bench/peers.py --heads 32 --ctx 64K,128K,512K --batch 1,4 \
  --coverage 1,0.25,0.0625 --tokens 4,8 --json $V/peers32.json > $V/peers.log 2>&1
echo "peers rc $?"; python3 bench/verify_table.py $V > $V/tables.md 2>&1; head -22 $V/tables.md; elapsed; pack
sec="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters"
for t in 1 8; do
  timeout 90 ncu --clock-control none $sec --kernel-name qg_estimate --launch-skip 3 --launch-count 1 \
    .carry/b/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 128K --batch 1 --coverage 0.0625 --tokens $t --runs 2 --warmup 2 \
    > $N/ncu-estimate-128k-6-T$t.txt 2>&1
  echo "ncu T=$t rc $?"; grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Grid Size" $N/ncu-estimate-128k-6-T$t.txt | head -8
done
elapsed; pack
