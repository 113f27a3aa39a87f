# device call: same-call A/B of the sm_90 benchmark, before (qgen-head, be4eb29) and after (qgen) the per-arch plan:
# qwen3-4b f16 and q4_0, 16K and 1M, B1/B4, dense/25 %/6.25 % (24 cells a tree), trees alternating; then the two
# views failures of tests/gpu/bounds-i8.lua's i8-d64-g1-f16-f32 rerun with their seeds, on both trees
set -u
t0=$(date +%s); el() { echo "  at $(($(date +%s) - t0)) s"; }
B=.carry/b; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache-ab
for round in 1 2; do for tree in head new; do q=$B/qgen; [ $tree = head ] && q=$B/qgen-head
  timeout 100 $q bench --spec specs/qwen3-4b.lua --variant qwen3-4b,qwen3-4b-q4_0 --ctx 16K,1M --batch 1,4 --coverage 1,0.25,0.0625 --runs 20 --warmup 5 --json $R/ab-$tree-r$round.json > $R/ab-$tree-r$round.log 2>&1; echo "$tree r$round rc $?"; el
  [ $(( $(date +%s) - t0 )) -gt 200 ] && break 2
done; done
for tree in head new; do q=$B/qgen; [ $tree = head ] && q=$B/qgen-head
  timeout 40 $q check --quick --spec tests/gpu/bounds-i8.lua --variant i8-d64-g1-f16-f32 --seed 562480 > $R/views-$tree-562480.log 2>&1; echo "$tree seed 562480 rc $?"
done
QGEN_EMULATE=sm_86 timeout 40 $B/qgen check --quick --spec tests/gpu/bounds-i8.lua --variant i8-d64-g1-f16-f32 --seed 10470 > $R/views-new-sm86-10470.log 2>&1; echo "sm_86 seed 10470 rc $?"
for s in 1 2 3; do timeout 40 $B/qgen check --quick --spec tests/gpu/bounds-i8.lua --variant i8-d64-g1-f16-f32 --seed $s > $R/views-new-$s.log 2>&1; echo "new seed $s rc $?"; done; el
