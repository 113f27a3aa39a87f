# device call 4: test_api on the GPU backend after the snap_take fix
B=.carry/b; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache QGEN_TEMPLATE_DIR=$PWD/templates QGEN_SOURCE_DIR=$PWD
QGEN_TEST_BACKEND=gpu LD_PRELOAD=$PWD/.carry/abrt.so timeout 100 $B/tests/test_api > $R/test-api-gpu.log 2>&1; echo "test_api gpu rc $?"; grep -v "^ok" $R/test-api-gpu.log | tail -25
