# device call 3: call 1 again with the bench fix (a verify step's eager first step ran with the
# benchmark marks on, which only a capture takes), after test_api on the GPU alone (call 2's
# log did not come back: too many files). Results packed into one archive after each part.
set -u
t0=$(date +%s); el() { echo "  [$1 at $(($(date +%s) - t0)) s]"; }
B=.carry/b; R=$OUT/r; mkdir -p $R
pack() { tar czf $OUT/r.tgz -C $OUT r; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache QGEN_TEMPLATE_DIR=$PWD/templates QGEN_SOURCE_DIR=$PWD
QGEN_TEST_BACKEND=gpu LD_PRELOAD=$PWD/.carry/abrt.so timeout 120 $B/tests/test_api > $R/test-api-gpu.log 2>&1
echo "test_api gpu rc $? ok $(grep -c '^ok' $R/test-api-gpu.log)"; grep -v "^ok" $R/test-api-gpu.log | tail -8; el api; pack
timeout 200 $B/qgen bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 64K,128K,512K --batch 1,4 \
  --coverage 1,0.25,0.0625 --tokens 1,4,8 --json $R/q4b-f16.json > $R/qgen.log 2>&1
echo "qgen bench rc $?"; tail -60 $R/qgen.log; el qgen; pack
bash bench/flashinfer-wheels.sh install .whl/fi > $R/fi-install.log 2>&1; echo "fi install rc $?"
timeout 150 python3 bench/peers.py --heads 32 --ctx 64K,128K,512K --batch 1,4 \
  --coverage 1,0.25,0.0625 --tokens 4,8 --json $R/peers32.json > $R/peers.log 2>&1
echo "peers rc $?"; grep '^{' $R/peers.log | cut -c1-300; el peers; pack
