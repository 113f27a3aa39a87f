# device call 1 of E86. Builds (made on the CPU machine): .carry/b = branch
# experiment/estimate-split. qgen check of qwen3-4b f16 and q4_0 under estw=4 and estw=2 (the
# lists compared with the CPU reference's); then the A/B in one build, two rounds: the default
# (estw=1) against estw=2 and estw=4, f16, 16K/128K/512K x B1/B4 x 25 %/6.25 % x T = 1, 4, 8, 16;
# then ncu of qg_estimate at 128K B1 6.25 % T = 8 under estw=4. Results into $OUT/r.tgz.
. experiments/2026-12-06-verify-cost/head.sh
B=.carry/b
for tune in estw=4 estw=2; do check_tuned $tune qwen3-4b qwen3-4b-q4_0; done
elapsed; pack
cell() { # TAG ROUND TUNE
  env QGEN_CACHE_DIR=/tmp/qc-b${3:-} QGEN_TUNE=${3:-} timeout 100 $B/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 16K,128K,512K \
    --batch 1,4 --coverage 0.25,0.0625 --tokens 1,4,8,16 --runs 20 --warmup 5 --json $R/$1-$2.json > $R/$1-$2.log 2>&1 ||
    echo "$1 $2 failed: $(tail -n 2 $R/$1-$2.log)"
}
for round in 1 2; do cell base $round; cell estw2 $round estw=2; cell estw4 $round estw=4; echo "round $round $(elapsed)"; pack; done
python3 experiments/2026-12-06-merge-cost/summary.py $R > $R/summary.txt; cat $R/summary.txt; elapsed; pack
sec="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
QGEN_CACHE_DIR=/tmp/qc-bestw=4 QGEN_TUNE=estw=4 timeout 60 ncu --clock-control none $sec --kernel-name qg_estimate --launch-skip 3 --launch-count 1 \
  $B/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 128K --batch 1 --coverage 0.0625 --tokens 8 --runs 2 --warmup 2 > $R/ncu-estimate-estw4-T8.txt 2>&1
grep -E "Duration|Registers Per|Achieved Occupancy|Waves Per SM" $R/ncu-estimate-estw4-T8.txt | head -6; elapsed; pack
