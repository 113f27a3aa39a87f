# prep1.sh — what call1.sh carries, made here from the repository root at 8f99090 (no GPU):
# .carry/tpl/nocomb and .carry/tpl/noq (the templates with one diagnostic edit each; timing
# only, their outputs are wrong) and .carry/rows/qgen (8f99090 with the partials' rows
# uncapped, so an engine step may take the splits its occupancy allows). .carry/b is
# 8f99090's Release build.
set -eu
for v in nocomb noq; do rm -rf .carry/tpl/$v && mkdir -p .carry/tpl/$v && cp templates/* .carry/tpl/$v/; done
python3 - <<'PY'
def edit(p, a, b):
    s = open(p).read(); assert a in s, (p, a); open(p, 'w').write(s.replace(a, b))
# nocomb: the last CTA's merge of the splits returns at once
a = "__device__ __forceinline__ void combine_group(const qg_work &wk, const qg_batch &bt, int b, int h, int ns, void *out, float *wsm) {\n"
edit('.carry/tpl/nocomb/combine.cu', a, a + "  if (ns > 0) return; // DIAGNOSTIC\n")
# noq: engine modules load no query; every staged row is zero
edit('.carry/tpl/noq/attend.cu', "    load_group_q<NC * 32>(q, bt, b, h, [&](int r, int d, float x) {",
     "    if (!STEP) load_group_q<NC * 32>(q, bt, b, h, [&](int r, int d, float x) { // DIAGNOSTIC: engine modules skip q")
edit('.carry/tpl/noq/attend.cu', """      for (int i = threadIdx.x; i < (MT * 16 - G) * Q_SROW / 16; i += NC * 32)
        *(uint4 *)(qsm + qc * MT * 16 * Q_SROW + G * Q_SROW + 16 * i) = make_uint4(0, 0, 0, 0);""",
     """      for (int i = threadIdx.x; i < (MT * 16 - (STEP ? 0 : G)) * Q_SROW / 16; i += NC * 32) // DIAGNOSTIC: all rows zero
        *(uint4 *)(qsm + qc * MT * 16 * Q_SROW + (STEP ? 0 : G) * Q_SROW + 16 * i) = make_uint4(0, 0, 0, 0);""")
PY
rm -rf /tmp/rows && git worktree add -q /tmp/rows HEAD
python3 - <<'PY'
p = '/tmp/rows/runtime/gpu.c'; s = open(p).read(); a = "  m->part_rows = rows;\n"; assert a in s
open(p, 'w').write(s.replace(a, "  if (rows < 16 * QGEN_MAX_SPLITS) rows = 16 * QGEN_MAX_SPLITS; /* DIAGNOSTIC */\n" + a))
PY
cmake -S /tmp/rows -B /tmp/rows-b -DCMAKE_BUILD_TYPE=Release > /dev/null && make -C /tmp/rows-b -j2 qgen > /dev/null
mkdir -p .carry/rows && cp /tmp/rows-b/qgen .carry/rows/qgen
