# device call 4: does the attend's merge tail (the last CTA merges every split's partial:
# 33 splits x 32 rows at T = 8) set the small sparse verify steps' cost? c706242 (.carry/b)
# with fewer, longer splits for small lists (QGEN_TUNE split=512 / 1024: at least that many
# tokens a split; at 128K 6.25 % 16 / 8 splits instead of 32), T = 4 and 8, against the
# default (T = 1, 4, 8); qwen3-4b f16, 128K/512K, B1/B4, dense/25 %/6.25 %, two rounds.
set -u
t0=$(date +%s)
DEST=$OUT; R=/tmp/o/r; mkdir -p $R
elapsed() { echo "at $(($(date +%s) - t0)) s"; }
pack() { tar czf $DEST/r.tgz -C /tmp/o r; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/gpu.txt
# cell TAG TUNE TOKENS ROUND
cell() {
  env QGEN_CACHE_DIR=/tmp/qc QGEN_TUNE="$2" timeout 150 .carry/b/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 128K,512K \
    --batch 1,4 --coverage 1,0.25,0.0625 --tokens $3 --runs 20 --warmup 5 --json $R/$1-$4.json > $R/$1-$4.log 2>&1 || echo "$1 $4 failed: $(tail -2 $R/$1-$4.log)"
  echo "$1 round $4 $(elapsed)"
}
for round in 1 2; do
  cell new "" 1,4,8 $round
  cell new-s512 split=512 4,8 $round
  cell new-s1024 split=1024 4,8 $round
  pack
done
python3 experiments/2026-12-06-verify-cost/summary.py $R > $R/summary.txt; cat $R/summary.txt | grep -E "^ +(128|512)K [14] +[0-9.]+ +[48] \||T-token" ; sed -n '/T-token step/,$p' $R/summary.txt
elapsed; pack
