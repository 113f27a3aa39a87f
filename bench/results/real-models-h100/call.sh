# device call 2: SmolLM2 through qgen's GPU backend: the model file joined, a smoke run, whole-model tok/s at 8K, the RULER grid
set -u
t0=$(date +%s); el() { echo "  at $(($(date +%s) - t0)) s"; }
R=$OUT/r; mkdir -p $R .carry/models .carry/rm
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
cat .carry/pa/smol.part-a .carry/pb/smol.part-b .carry/pc/smol.part-c .carry/pd/smol.part-d > .carry/models/SmolLM2-135M-Instruct.Q4_1.gguf
sha256sum .carry/models/SmolLM2-135M-Instruct.Q4_1.gguf
export PYTHONUNBUFFERED=1 QGEN_CACHE_DIR=/tmp/qgen-cache QGEN_LIBRARY=$PWD/.carry/b/libqgen.so PYTHONPATH=$PWD/python:$PWD/.carry/base/gguf QGEN_MODEL_DIR=$PWD/.carry/models QGEN_RULER_TEXT=$PWD/.carry/base/kjv.txt
timeout 60 python3 -m qgen.run --backend gpu --prompt "What is the capital of France?" --max-new 16 --compare-dense > $R/smoke.log 2>&1; echo "smoke rc $?"; tail -4 $R/smoke.log; el
head -c 28000 .carry/base/kjv.txt > /tmp/long.txt
for m in "--dense" "--coverage 0.25" "--coverage 0.0625"; do timeout 60 python3 -m qgen.run --backend gpu --prompt /tmp/long.txt --prompt-file --no-chat --max-new 128 --no-stream $m > "$R/tps-${m// /}.log" 2>&1; echo "tps $m rc $?"; tail -2 "$R/tps-${m// /}.log"; done; el
left=$((${BUDGET:-540} - ($(date +%s) - t0)))
timeout $left python3 bench/real_models.py --model smollm2 --backend gpu --out .carry/rm --max-seconds $((left - 30)) > $R/grid.log 2>&1; echo "grid rc $?"; tail -5 $R/grid.log
cp .carry/rm/* $R/; el
