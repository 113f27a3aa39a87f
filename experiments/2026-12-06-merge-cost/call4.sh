# device call 4: call 2 (the merge kernel's same-call A/B and GPU checks), then, on the same
# machine, the verify grid of bench/results/verify-flashinfer-* with the merge kernel: qgen's
# verify steps (64K/128K/512K, B1/B4, dense/25 %/6.25 %, T = 1, 4, 8) and the peers (SDPA,
# FlashInfer 0.5.3's paged decode) into $R/verify/ for bench/verify_table.py. One start for
# both, since starts are refused often.
bash experiments/2026-12-06-merge-cost/call2.sh
. experiments/2026-12-06-verify-cost/head.sh
V=$R/verify; mkdir -p $V; cp $R/gpu.txt $V/
export QGEN_CACHE_DIR=/tmp/qc-b
timeout 200 .carry/b/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 64K,128K,512K --batch 1,4 \
  --coverage 1,0.25,0.0625 --tokens 1,4,8 --json $V/q4b-f16.json > $V/qgen.log 2>&1
echo "verify qgen rc $?"; elapsed; pack
bash bench/flashinfer-wheels.sh install .whl/fi > $V/fi-install.log 2>&1; echo "fi install rc $?"
timeout 150 python3 bench/peers.py --heads 32 --ctx 64K,128K,512K --batch 1,4 \
  --coverage 1,0.25,0.0625 --tokens 4,8 --json $V/peers32.json > $V/peers.log 2>&1
echo "peers rc $?"; python3 bench/verify_table.py $V 2>&1 | head -24; elapsed; pack
