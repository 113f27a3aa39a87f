#!/usr/bin/env bash
# tune.sh — A/B a few launch plans (QGEN_TUNE, base/plan.h) on a handful of cells, in
# one GPU call, after a quick correctness check of the default plan:
#   bash bench/tune.sh BUILD_DIR OUT_DIR [TUNE ...]     ("" = the default plan)
# CELLS="--ctx 16K,128K,1M --batch 1 --coverage 1,0.25,0.0625" picks the cells.
# Prints one line per (tune, cell): step, estimate, est+select, attend, stream read, step/stream.
set -u -o pipefail
build=${1:?build dir}
out=${2:?out dir}
shift 2
[ $# -gt 0 ] || set -- ""
mkdir -p "$out"
export QGEN_CACHE_DIR=${QGEN_CACHE_DIR:-/tmp/qgen-cache}
cells=${CELLS:---ctx 16K,128K,1M --batch 1 --coverage 1,0.25,0.0625}
spec=${SPEC:-specs/qwen3-4b.lua}
variant=${VARIANT:-qwen3-4b}
if [ -z "${NOCHECK:-}" ]; then
  "$build/qgen" check --spec "$spec" --quick > "$out/check.log" 2>&1
  echo "check --quick $spec: exit $? ($(grep -c PASS "$out/check.log") PASS, $(grep -c FAIL "$out/check.log") FAIL)"
fi
i=0
for t in "$@"; do
  QGEN_TUNE="$t" "$build/qgen" bench --spec "$spec" --variant "$variant" $cells --json "$out/tune$i.json" \
    > "$out/tune$i.log" 2>&1 || { echo "tune '$t': bench failed"; tail -5 "$out/tune$i.log"; }
  i=$((i + 1))
done
python3 - "$out" <<'PY'
import json, glob, sys
print(f"{'tune':24} {'B':>2} {'ctx':>8} {'cov':>6} {'step':>8} {'est':>8} {'est+sel':>8} {'attend':>8} {'stream':>8} {'x_strm':>6}")
for f in sorted(glob.glob(sys.argv[1] + "/tune*.json")):
    try: rows = json.load(open(f))
    except Exception as e: print(f, "unreadable:", e); continue
    for r in rows:
        sel = r["select_us"] if r["select_us"] is not None else 0.0
        print(f"{r['tune'] or 'default':24} {r['batch']:>2} {r['ctx']:>8} {r['coverage']:>6} {r['qgen_us']:8.1f} {r['estimate_us']:8.1f} {sel:8.1f} "
              f"{r['attend_us']:8.1f} {r['stream_us']:8.1f} {r['qgen_us']/r['stream_us']:6.2f}")
PY
