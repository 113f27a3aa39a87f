# device call 3 of E85: mtw=2 on the other block types (q8_0, q5_0): qgen check under it and
# the A/B against the default plan at T = 1, 8, two rounds; then call 5 of E84 without its ncu
# (the verify grid with FlashInfer's peers for bench/verify_table.py), into $R/verify/.
. experiments/2026-12-06-verify-cost/head.sh
B=.carry/b
for v in qwen3-4b-q8_0 qwen3-4b-q5_0; do
  QGEN_CACHE_DIR=/tmp/qc-mtw QGEN_TUNE=mtw=2 timeout 60 $B/qgen check --spec specs/qwen3-4b.lua --variant $v --quick > $R/check-mtw=2-$v.log 2>&1
  echo "check mtw=2 $v rc $? $(grep -cE 'PASS|ok' $R/check-mtw=2-$v.log) pass lines, $(grep -cE 'FAIL' $R/check-mtw=2-$v.log) FAIL"
done
cell() { # TAG VARIANT ROUND TUNE
  env QGEN_CACHE_DIR=/tmp/qc-b${4:-} QGEN_TUNE=${4:-} timeout 60 $B/qgen bench --spec specs/qwen3-4b.lua --variant $2 --ctx 16K,128K,512K \
    --batch 1,4 --coverage 1,0.25,0.0625 --tokens 1,8 --runs 20 --warmup 5 --json $R/$1-$3.json > $R/$1-$3.log 2>&1 || echo "$1 $3 failed: $(tail -2 $R/$1-$3.log)"
}
for round in 1 2; do
  cell q8-new qwen3-4b-q8_0 $round; cell q8-mtw2 qwen3-4b-q8_0 $round mtw=2
  cell q5-new qwen3-4b-q5_0 $round; cell q5-mtw2 qwen3-4b-q5_0 $round mtw=2
done
python3 experiments/2026-12-06-merge-cost/summary.py $R > $R/summary.txt; sed -n '/T-token step/,$p' $R/summary.txt; elapsed; pack
V=$R/verify; mkdir -p $V; cp $R/gpu.txt $V/
export QGEN_CACHE_DIR=/tmp/qc-b
timeout 150 $B/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 64K,128K,512K --batch 1,4 \
  --coverage 1,0.25,0.0625 --tokens 1,4,8 --json $V/q4b-f16.json > $V/qgen.log 2>&1
echo "verify qgen rc $?"; elapsed; pack
bash bench/flashinfer-wheels.sh install .whl/fi > $V/fi-install.log 2>&1; echo "fi install rc $?"
timeout 150 python3 bench/peers.py --heads 32 --ctx 64K,128K,512K --batch 1,4 \
  --coverage 1,0.25,0.0625 --tokens 4,8 --json $V/peers32.json > $V/peers.log 2>&1
echo "peers rc $?"; python3 bench/verify_table.py $V > $V/tables.md 2>&1; head -30 $V/tables.md; elapsed; pack
