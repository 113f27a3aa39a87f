# device call 1: qgen's Qwen3-4B f16 step at 64K/128K/512K, B1/B4, dense, 25 % and 6.25 %, for
# one query token a sequence and verify steps of 4 and 8, then the peers over the same cells in
# the same call: SDPA (cuDNN, flash; their verify steps with a lower-right causal mask), a
# PyTorch Quest, and FlashInfer 0.5.3's paged decode (installed from the carried wheels).
# Expects the build in .carry/b and FlashInfer's wheels in .whl/fi (both carried).
set -u
t0=$(date +%s); el() { echo "  [$1 at $(($(date +%s) - t0)) s]"; }
B=.carry/b; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache QGEN_TEMPLATE_DIR=$PWD/templates QGEN_SOURCE_DIR=$PWD
timeout 240 $B/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 64K,128K,512K --batch 1,4 \
  --coverage 1,0.25,0.0625 --tokens 1,4,8 --json $R/q4b-f16.json > $R/qgen.log 2>&1
echo "qgen bench rc $?"; cat $R/qgen.log | tail -80; el qgen
bash bench/flashinfer-wheels.sh install .whl/fi > $R/fi-install.log 2>&1; echo "fi install rc $?"; tail -3 $R/fi-install.log
timeout $((580 - ($(date +%s) - t0))) python3 bench/peers.py --heads 32 --ctx 64K,128K,512K --batch 1,4 \
  --coverage 1,0.25,0.0625 --tokens 4,8 --json $R/peers32.json > $R/peers.log 2>&1
echo "peers rc $?"; cut -c1-600 $R/peers.log; el peers
