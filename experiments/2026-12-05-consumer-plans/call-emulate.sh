# device call 1: issue-40 proof (emulation of sm_86/89/120, native sm_90 specs, Python GPU tests under sm_86)
set -u
t0=$(date +%s); el() { echo "  at $(($(date +%s) - t0)) s"; }
B=.carry/b
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
export QGEN_CACHE_DIR=/tmp/qgen-cache
EMULATE_JOBS=8 timeout 300 bash tests/gpu-run.sh $B $R quick emulate > /dev/null 2>&1; echo "emulate rc $? PASS $(grep -c PASS $R/gpu-check-emulate.log) FAIL $(grep -c FAIL $R/gpu-check-emulate.log)"; el
for a in sm_86 sm_120; do QGEN_EMULATE=$a timeout 60 $B/qgen eval --backend gpu --spec specs/qwen3-4b.lua --ctx 32K --trials 2 > $R/eval-$a.log 2>&1; echo "eval $a rc $?"; done; el
pip install -q --no-index --find-links .whl pytest > /dev/null 2>&1; python3 -c "import pytest; print('pytest', pytest.__version__)"
QGEN_EMULATE=sm_86 QGEN_LIBRARY=$PWD/$B/libqgen.so timeout 220 python3 -m pytest -q -p no:cacheprovider python/tests > $R/pytest-sm_86.log 2>&1; echo "pytest sm_86 rc $?"; tail -3 $R/pytest-sm_86.log; el
