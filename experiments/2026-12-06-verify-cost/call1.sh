# device call 1: E81's owed same-call A/B of the one-token step (d13d5a7, before the engine
# kernels, built in .carry/old, against HEAD in .carry/b), then Nsight Compute of the 8-token
# and one-token estimate and attend (qwen3-4b f16, 128K B1 25 %: E80's row where the verify
# step cost most), then the native qgen check --quick of qwen3-4b and qwen3-4b-fp8 (E80's
# lost logs). Everything into $OUT/r.tgz, packed after each part.
set -u
t0=$(date +%s)
DEST=$OUT; OUT=/tmp/o; mkdir -p $OUT # results gathered outside the returned folder, one archive returned
ln -sfn .carry/b build-dev
. bench/device-lib.sh
R=$OUT/r
pack() { tar czf $DEST/r.tgz --exclude '*.ncu-rep' -C $OUT r; }
export QGEN_CACHE_DIR=/tmp/qgen-cache
cat $R/gpu.txt
ab_trees "old:.carry/old/qgen new:.carry/b/qgen" "f16:specs/qwen3-4b.lua:qwen3-4b q4:specs/qwen3-4b.lua:qwen3-4b-q4_0" "1 0.25"; pack
# ncu of one kernel of a T-token step: prof KERNEL T
prof() {
  local k=$1 t=$2 tag=${1#qg_}-t$2
  timeout 90 ncu --clock-control none --section SourceCounters --section WarpStateStats --section SchedulerStats \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
    --kernel-name $k --launch-skip 3 --launch-count 1 -o $R/src-$tag \
    .carry/b/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 128K --batch 1 --coverage 0.25 --tokens $t --runs 2 --warmup 2 \
    > $R/ncu-run-$tag.log 2>&1
  ncu --import $R/src-$tag.ncu-rep --print-summary none > $R/ncu-$tag.txt 2>&1
  ncu --import $R/src-$tag.ncu-rep --page source --csv --print-source sass > $R/sass-$tag.csv 2>&1
  python3 bench/ncu_sass_top.py $R/sass-$tag.csv 25 > $R/top-$tag.txt 2>&1
  rm -f $R/sass-$tag.csv
  grep -E "^ +(Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size|Waves Per SM|Theoretical Occupancy)" $R/ncu-$tag.txt | tr -s ' ' | head -12
  echo "ncu $tag $(elapsed)"
}
for t in 8 1; do prof qg_estimate $t; prof qg_attend $t; done; pack
QGEN_TEMPLATE_DIR=$PWD/templates
timeout 150 .carry/b/qgen check --quick --spec specs/qwen3-4b.lua > $R/check-qwen3-4b.log 2>&1 &
timeout 150 .carry/b/qgen check --quick --spec specs/qwen3-4b-fp8.lua > $R/check-qwen3-4b-fp8.log 2>&1 &
wait
for n in qwen3-4b qwen3-4b-fp8; do echo "$n $(pass_counts $R/check-$n.log) $(tail -1 $R/check-$n.log)"; done
elapsed; pack
