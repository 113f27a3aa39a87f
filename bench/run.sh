#!/usr/bin/env bash
# run.sh — the benchmark of bench/results/, ours and the peers in one run, on a GPU machine:
#   bash bench/run.sh BUILD_DIR OUT_DIR [full|probe]
# full  = the grid of the performance issue (qwen3-4b f16/q8_0/q4_0/q5_0/e4m3: 16K..1M x B1,2,4,8 x
#         coverage 1..0.0625; qwen2.5-14b-1m: 16K..128K x B1,4,8), then merge.py and
#         targets.py (the performance targets against the new results)
# probe = a few cells, for tuning (targets.py too: it lists the cells a probe lacks)
# The merged tables are OUT_DIR/decode-<GPU>.{json,md,png}, <GPU> the model number in the
# GPU's name (h100, h200).
# Both also time sparse-V (--v-tau 0.001, 0.01) on q8_0/q4_0 at 128K and 1M, B1, into
# OUT_DIR/vtau-*.json (not merged: the same cells as the grid's, another kernel), and
# speculative verify steps of 4 and 8 tokens beside the one-token step (f16, 128K and 512K,
# B1 and B4) into OUT_DIR/verify-f16.json, which targets.py reads with --verify.
# STEPS="qgen peers merge" (the default) runs all three; a subset splits the run over
# several GPU calls. STEPS=rescore (not a default) benches two-stage selection instead:
# tests/gpu/rescore.lua's Qwen3-4B variants (f16 with its q4_0 sketch, q4_0 with its own K;
# r = 1 is Quest) at 128K..1M x B1,4 x coverage 0.25, 0.125, 0.0625 into OUT_DIR/rescore-f16.json and
# rescore-q4_0.json (then bench/rescore_cost.py with the two-stage grid's eval JSON);
# several GPU calls (OUT_DIR must then hold the earlier steps' JSON). FLASHINFER_WHEELS=DIR
# (from `bash bench/flashinfer-wheels.sh fetch DIR`) installs FlashInfer before the peers
# step, which then times its paged decode too; without it the peers have no FlashInfer
# columns unless it is installed already. Each call's command
# line is kept in OUT_DIR/commands.txt and all of them go into the results' "command".
set -u -o pipefail
build=${1:?build dir}
out=${2:?out dir}
mode=${3:-full}
mkdir -p "$out"
q="$build/qgen"
export QGEN_CACHE_DIR=${QGEN_CACHE_DIR:-/tmp/qgen-cache}
cov=1,0.5,0.25,0.125,0.0625
if [ "$mode" = full ]; then
  ctx4=16K,24K,32K,40K,64K,128K,256K,512K,1M; b4=1,2,4,8
  ctx14=16K,24K,32K,40K,64K,128K; b14=1,4,8
else
  ctx4=16K,128K,1M; b4=1,4; ctx14=128K; b14=1; cov=1,0.25,0.0625
fi
steps=${STEPS:-qgen peers merge}
# Every invocation on this OUT_DIR adds its command line, so a run split over STEPS
# subsets records all of them (in order) in the results' "command".
cmd="bash bench/run.sh $build OUT $mode"
[ -n "${STEPS:-}" ] && cmd="STEPS='$steps' $cmd"
[ -n "${QGEN_TUNE:-}" ] && cmd="QGEN_TUNE='$QGEN_TUNE' $cmd"
echo "$cmd" >> "$out/commands.txt"
cat > "$out/meta.json" <<META
{"gpu": "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)",
 "driver": "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)",
 "cuda": "$(basename "$(readlink -f /usr/local/cuda)" | sed 's/cuda-//')",
 "date": "$(date -u +%Y-%m-%d)",
 "command": $(python3 -c 'import json,sys; print(json.dumps("; then ".join(l.strip() for l in open(sys.argv[1]) if l.strip())))' "$out/commands.txt")}
META
# the results' name: decode-<the GPU's model number>, e.g. decode-h100 (decode-gpu if it has none)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | grep -oE '[a-z]*[0-9]{3,4}[a-z]*' | head -1)
res="$out/decode-${gpu:-gpu}"
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
set -x
if has qgen; then
"$q" bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx $ctx4 --batch $b4 --coverage $cov --jit --json "$out/q4b-f16.json"
for t in q8_0 q4_0 q5_0; do
  "$q" bench --spec specs/qwen3-4b.lua --variant qwen3-4b-$t --ctx $ctx4 --batch $b4 --coverage $cov --json "$out/q4b-$t.json"
done
"$q" bench --spec specs/qwen3-4b-fp8.lua --variant qwen3-4b-e4m3 --ctx $ctx4 --batch $b4 --coverage $cov --json "$out/q4b-e4m3.json"
"$q" bench --spec specs/qwen2.5-14b-1m.lua --variant qwen2.5-14b-1m --ctx $ctx14 --batch $b14 --coverage $cov --json "$out/q14b-f16.json"
"$q" bench --spec specs/qwen3-4b.lua --variant qwen3-4b --ctx 128K,512K --batch 1,4 --coverage 1,0.25,0.0625 \
  --tokens 1,4,8 --json "$out/verify-f16.json"
# sparse-V (spec sparse.v_tau) on quantized steps; kept apart from the grid (merge.py reads q4b-*/q14b-*)
for tau in 0.001 0.01; do for t in q8_0 q4_0; do
  "$q" bench --spec specs/qwen3-4b.lua --variant qwen3-4b-$t --v-tau $tau --ctx 128K,1M --batch 1 --coverage 1,0.25,0.0625 \
    --json "$out/vtau-$t-$tau.json"
done; done
fi
if has rescore; then
for t in f16 q4_0; do # one process per cache type: Quest (r1) and two-stage timed back to back
  "$q" bench --spec tests/gpu/rescore.lua --variant qwen3-4b-$t-r1,qwen3-4b-$t-r2,qwen3-4b-$t-r4,qwen3-4b-$t-r8,qwen3-4b-$t-r16 \
    --ctx 128K,256K,512K,1M --batch 1,4 --coverage 0.25,0.125,0.0625 --json "$out/rescore-$t.json"
done
fi
if has peers; then
[ -n "${FLASHINFER_WHEELS:-}" ] && bash bench/flashinfer-wheels.sh install "$FLASHINFER_WHEELS"
python3 bench/peers.py --heads 32 --ctx $ctx4 \
  --batch $b4 --coverage $cov --json "$out/peers32.json"
python3 bench/peers.py --heads 40 --ctx $ctx14 \
  --batch $b14 --coverage $cov --json "$out/peers40.json"
fi
if has merge; then
python3 bench/merge.py --qgen "$out"/q4b-*.json "$out"/q14b-*.json --peers "$out"/peers32.json "$out"/peers40.json \
  --meta "$out/meta.json" --out "$res" --chart
# (a probe lacks cells the targets need: targets.py then lists them and exits 1)
verify=()
[ -f "$out/verify-f16.json" ] && verify=(--verify "$out/verify-f16.json")
python3 bench/targets.py "$res.json" "${verify[@]}" | tee "$out/targets.txt" || [ "$mode" != full ]
fi
