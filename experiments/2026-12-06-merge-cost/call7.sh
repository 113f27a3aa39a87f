# device call 7, for a lease that may hold one call only: call 6 (the merge kernel's same-call
# A/B against main's qgen, f16 and q4_0, and its GPU checks), then call 5's Nsight Compute of
# qg_estimate at 128K B1 6.25 % for the one-token and the 8-token step, into $R/ncu/.
bash experiments/2026-12-06-merge-cost/call6.sh
. experiments/2026-12-06-verify-cost/head.sh
N=$R/ncu; mkdir -p $N
sec="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters"
for t in 1 8; do
  QGEN_CACHE_DIR=/tmp/qc-b timeout 90 ncu --clock-control none $sec --kernel-name qg_estimate --launch-skip 3 --launch-count 1 \
    .carry/b/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 128K --batch 1 --coverage 0.0625 --tokens $t --runs 2 --warmup 2 \
    > $N/ncu-estimate-128k-6-T$t.txt 2>&1
  echo "ncu T=$t rc $?"; grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Grid Size" $N/ncu-estimate-128k-6-T$t.txt | head -8
done
elapsed; pack
