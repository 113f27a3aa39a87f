# device call 5: c706242's verify steps and one-token steps beside SDPA and FlashInfer 0.5.3 in
# one call (bench/results/flashinfer-h200/verify: bench/verify_table.py), then whether the merge
# tail sets the small sparse steps' cost: fewer, longer splits for small lists (QGEN_TUNE
# split=512 / 1024) at T = 4, 8 against the default, 128K/512K, B1/B4, two rounds. .carry/b the Release build, .whl/fi FlashInfer's wheels. Into $OUT/r.tgz.
. experiments/2026-12-06-verify-cost/head.sh
export QGEN_CACHE_DIR=/tmp/qc
timeout 200 .carry/b/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 64K,128K,512K --batch 1,4 \
  --coverage 1,0.25,0.0625 --tokens 1,4,8 --json $R/q4b-f16.json > $R/qgen.log 2>&1
echo "qgen bench rc $? $(elapsed)"; pack
bash bench/flashinfer-wheels.sh install .whl/fi > $R/fi-install.log 2>&1; echo "fi install rc $?"
timeout 170 python3 bench/peers.py --heads 32 --ctx 64K,128K,512K --batch 1,4 --coverage 1,0.25,0.0625 --tokens 4,8 \
  --json $R/peers32.json > $R/peers.log 2>&1
echo "peers rc $? $(elapsed)"; python3 bench/verify_table.py $R > $R/tables.md 2>&1; head -24 $R/tables.md; pack
mkdir -p $R/split
# cell TAG TUNE TOKENS ROUND
cell() {
  env QGEN_TUNE="$2" timeout 100 .carry/b/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 128K,512K \
    --batch 1,4 --coverage 1,0.25,0.0625 --tokens $3 --runs 20 --warmup 5 --json $R/split/$1-$4.json > $R/split/$1-$4.log 2>&1 || echo "$1 $4 failed"
}
for round in 1 2; do
  cell new "" 1,4,8 $round; cell new-s512 split=512 4,8 $round; cell new-s1024 split=1024 4,8 $round
  echo "split round $round $(elapsed)"; pack
done
python3 experiments/2026-12-06-verify-cost/summary.py $R/split > $R/split/summary.txt; sed -n '/T-token step/,$p' $R/split/summary.txt
elapsed; pack
