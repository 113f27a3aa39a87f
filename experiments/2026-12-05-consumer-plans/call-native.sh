# device call: native sm_90 qgen check of specs/ and tests/gpu/ at quick sizes
set -u
t0=$(date +%s); el() { echo "  at $(($(date +%s) - t0)) s"; }
B=.carry/b; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache
timeout 200 bash tests/gpu-run.sh $B $R quick specs > /dev/null 2>&1; echo "specs rc $? PASS $(grep -c PASS $R/gpu-check-specs.log) FAIL $(grep -c FAIL $R/gpu-check-specs.log)"; el
timeout 330 bash tests/gpu-run.sh $B $R quick gpu-specs > /dev/null 2>&1; echo "gpu-specs rc $? PASS $(grep -c PASS $R/gpu-check-gpu-specs.log) FAIL $(grep -c FAIL $R/gpu-check-gpu-specs.log)"; el
