# device call 3 of E92 (after call2.sh, in the same call; .carry/b as for call1.sh): where
# qg_estsel's time goes. Nsight Compute on the one kernel at 128K and 512K B1 6.25 % (f16,
# QGEN_TUNE=estsel=1), and on the default qg_estimate and qg_select at 128K B1 6.25 %, into
# $R/ncu/ (the text reports; SourceCounters names the stalling instructions).
. experiments/2026-12-06-verify-cost/head.sh
B=.carry/b
N=$R/ncu; mkdir -p $N
sec="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters"
prof() { # NAME KERNEL CTX TUNE
  QGEN_CACHE_DIR=/tmp/qc-ncu-$4 QGEN_TUNE=$4 timeout 120 ncu --clock-control none $sec --kernel-name $2 --launch-skip 3 --launch-count 1 \
    $B/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx $3 --batch 1 --coverage 0.0625 --tokens 1 --runs 2 --warmup 2 \
    > $N/$1.txt 2>&1
  echo "ncu $1 rc $?"; grep -E "^  qg_|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Grid Size|Cluster Size|Block Size" $N/$1.txt | head -10
}
prof estsel-128k qg_estsel 128K estsel=1
prof estsel-512k qg_estsel 512K estsel=1
prof estimate-128k qg_estimate 128K ""
prof select-128k qg_select 128K ""
elapsed; pack
