/* test_plan.c — the launch plan (base/plan.c) over every shape a spec may have: the
 * invariants attend.cu's static_asserts and runtime/gpu.c rely on, checked on the host so a
 * plan change that breaks one shape fails here, not on a GPU at run time.
 *
 *   head_dim 32..256 (multiples of 32) x group 1..64 x block 32..256 x every k/v cache type:
 *   - the ring: stages a multiple of the token groups, 2..4 stages a group;
 *   - the CTA: 32 * (m-tiles * groups + 1) threads, at most 8 warps;
 *   - the token groups: 3 for 16-bit caches, 4 when a side is quantized (fewer for
 *     several m-tiles or a small budget);
 *   - rows unpadded; a 16-bit row is whole swizzle pieces of 128 bytes (64 when 128 does
 *     not divide it), a quantized one has none; a 16-row sub-tile is whole 16-byte chunks,
 *     its tile rounded to 128 bytes;
 *   - shared memory: q + the larger of the ring, the token groups' merge area and the
 *     merge weights + 128 bytes of alignment slack, at most 227 KiB (the H100/H200 per-block limit) by default (a tuned
 *     plan may ask for more: qgen_open refuses it, naming the device's limit);
 *   - estimate (also for f32 queries): its staged Qsplit is n-tiles x 8 rows (twice with
 *     the residue of an f32/bf16 query), at most 163 KiB; its launch bounds ask 4 CTAs an
 *     SM (3 above head_dim 128) for groups of up to 8 as before, 2..4 for larger ones;
 *   - the ring's chunks: whole sub-tiles of a page dividing the stages, >= 2 chunk stages,
 *     by default the largest such of at most 4, but one sub-tile for fp8 K and V;
 *   - pairs (two sub-tiles a consumer step) exactly where the swapped operands are, both types
 *     with pair_ctas (registers for the fewer of their CTAs), head_dim <= 128, no sparse-V and chunk + groups <= stages (never elsewhere,
 *     tuned or not), and
 *     attend's registers then sized for 4 CTAs an SM; else left to ptxas;
 *   - QGEN_TUNE groups= / stages= / selreg= / chunk= / ctas= / pair= reach the plan, a CTA never exceeds 1024
 *     threads, and out-of-range values are refused by name.
 * Prints one line per check and "N passed, N failed"; exits 1 on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/layout.h"
#include "base/plan.h"
#include "base/qtypes.h"

#include "testlib.h"

static const qgen_type CACHE_TYPES[] = {QGEN_TYPE_F16, QGEN_TYPE_BF16, QGEN_TYPE_Q8_0, QGEN_TYPE_Q4_0, QGEN_TYPE_Q5_0};
enum { N_TYPES = sizeof CACHE_TYPES / sizeof *CACHE_TYPES };

/* The first broken invariant of plan P for layout L, or NULL. */
static const char *broken(const qgen_layout *L, const qgen_plan *P, int tuned) {
  const int D = L->head_dim;
  if (P->mt != (L->group + 15) / 16 || P->warps_m != P->mt) return "m-tiles";
  if (P->warps_t < 1 || P->stages % P->warps_t != 0 || P->stages < 2 * P->warps_t) return "ring: stages a multiple of the groups, >= 2 each";
  if (!tuned && P->stages / P->warps_t > 4) return "ring: more than 4 stages a group";
  if (P->attend_threads != 32 * (P->warps_m * P->warps_t + 1) || P->attend_threads > 1024) return "CTA size";
  if (!tuned && P->attend_threads > 256) return "more than 8 warps by default";
  const int sides[2][2] = {{(int)L->k_row_bytes, P->k_srow}, {(int)L->v_row_bytes, P->v_srow}};
  const qgen_type types[2] = {L->k_type, L->v_type};
  const int pieces[2] = {P->k_piece, P->v_piece}, tiles[2] = {P->k_tile_bytes, P->v_tile_bytes};
  const int quant = qgen_type_traits_of(types[0])->is_quant || qgen_type_traits_of(types[1])->is_quant;
  const int want = (quant ? 4 : 3) / P->mt > 0 ? (quant ? 4 : 3) / P->mt : 1;
  if (!tuned && P->warps_t > want) return "token groups: at most 3 (4 when a side is quantized) per m-tile count";
  if (!tuned && P->warps_t < want && 106 * 1024 / ((tiles[0] + tiles[1]) * want) >= 2) return "token groups: fewer only when the budget is short";
  for (int i = 0; i < 2; i++) {
    const int row = sides[i][0], srow = sides[i][1], pc = pieces[i];
    if (srow != row) return "rows unpadded";
    if (!qgen_type_traits_of(types[i])->is_quant) {
      if (!(pc == 128 || (pc == 64 && row % 128))) return "16-bit rows: 128-byte pieces (64 only when 128 does not divide the row)";
      if (row % pc) return "16-bit rows: whole pieces";
    } else if (pc) return "quantized rows: no pieces";
    if ((16 * row) % 16) return "a sub-tile is whole 16-byte chunks";
    if (tiles[i] != (16 * row + 127) / 128 * 128) return "tile = 16 rows, rounded to a 128-byte line";
  }
  const int nq = qgen_type_traits_of(L->k_type)->bf16_mma ? 2 : 1, q = nq * P->mt * 16 * P->q_srow;
  const int ring = P->stages * (P->k_tile_bytes + P->v_tile_bytes), red = P->warps_t * P->mt * 16 * (D + 2) * 4;
  const int comb = L->group * QGEN_MAX_SPLITS * 4;
  const int area = ring > red ? (ring > comb ? ring : comb) : (red > comb ? red : comb);
  if (P->attend_smem != q + area + 128) return "shared memory = q + max(ring, merge, weights) + 128 (to align the ring)";
  if (!tuned && P->attend_smem > 227 * 1024) return "shared memory over 227 KiB"; /* tuned: qgen_open refuses by the device's limit */
  const int est_nt = (L->group + 7) / 8, est_nq = L->in_type == QGEN_TYPE_F16 ? 1 : 2;
  if (P->est_smem != est_nq * est_nt * 8 * P->est_qrow || P->est_qrow < 4 * D) return "estimate: staged Qsplit = n-tiles x 8 rows (x 2 with a residue)";
  if (P->est_smem > 163 * 1024) return "estimate: shared memory over 163 KiB (the A100's per-block limit)";
  if (P->est_min_ctas < 2 || P->est_min_ctas > 4 || (est_nt == 1 && P->est_min_ctas != (D <= 128 ? 4 : 3)))
    return "estimate: 2..4 CTAs an SM, 4 (3 above head_dim 128) for groups of up to 8";
  const int swappable = qgen_type_traits_of(types[0])->is_quant && qgen_type_traits_of(types[1])->is_quant && L->group <= 8;
  if (!tuned && P->swap_ops != swappable) return "attend's swapped operands exactly where K and V are block-quantized and G <= 8";
  if (P->swap_ops && (!swappable || P->old_dequant)) return "swapped operands only where they apply, and never under olddq";
  const int spp = L->block / 16, ch = P->chunk;
  if (ch < 1 || spp % ch || P->stages % ch || P->stages / ch < 2) return "ring chunks: whole sub-tiles of a page, dividing the stages, >= 2 chunk stages";
  const int fp8 = qgen_type_traits_of(types[0])->tensor_scale && qgen_type_traits_of(types[1])->tensor_scale;
  if (!tuned && fp8 && ch != 1) return "ring chunks: one sub-tile for fp8 K and V";
  for (int c = ch + 1; !tuned && !fp8 && c <= 4; c++)
    if (spp % c == 0 && P->stages % c == 0 && P->stages / c >= 2) return "ring chunks: the largest of at most 4 that fits";
  const int kc = qgen_type_traits_of(types[0])->pair_ctas, vc = qgen_type_traits_of(types[1])->pair_ctas;
  const int pairable = P->swap_ops && D <= 128 && L->v_tau == 0 && ch + P->warps_t <= P->stages && kc && vc;
  if (P->pair && !pairable) return "pairs only with swapped operands of types with pair_ctas, head_dim <= 128, no sparse-V, chunk + groups <= stages";
  if (!tuned && P->pair != pairable) return "pairs by default wherever they apply";
  if (!tuned && P->attend_min_ctas != (P->pair ? (kc < vc ? kc : vc) : 0))
    return "attend's registers for the fewer of K's and V's pair_ctas under pairs, else left to ptxas";
  return NULL;
}

/* Every shape; returns the number of plans that broke an invariant (printing the first). */
static int sweep(const qgen_tune *t, int *n_plans, int *max_smem) {
  static const int groups[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 24, 32, 33, 48, 64};
  int bad = 0;
  *n_plans = 0;
  *max_smem = 0;
  for (int D = 32; D <= 256; D += 32)
    for (size_t gi = 0; gi < sizeof groups / sizeof *groups; gi++)
      for (int block = 32; block <= 256; block += 32)
        for (int k = 0; k < N_TYPES; k++)
          for (int v = 0; v < N_TYPES; v++) {
            const int G = groups[gi];
            qgen_layout L; /* an f32 query on every other plan (estimate's residue) */
            const qgen_type in = (k + v) % 2 ? QGEN_TYPE_F32 : QGEN_TYPE_F16;
            qgen_layout_init(&L, D, 2 * G, 2, block, CACHE_TYPES[k], CACHE_TYPES[v], in, QGEN_TYPE_F16, 1.0, 1);
            qgen_plan P;
            qgen_plan_make(&L, t, &P);
            (*n_plans)++;
            if (P.attend_smem > *max_smem) *max_smem = P.attend_smem;
            const char *why = broken(&L, &P, t != NULL);
            if (why && bad++ == 0)
              printf("  first broken: D %d, group %d, block %d, k %s, v %s: %s (groups %d, stages %d, threads %d, smem %d)\n", D, G,
                     block, qgen_type_traits_of(CACHE_TYPES[k])->name, qgen_type_traits_of(CACHE_TYPES[v])->name, why, P.warps_t,
                     P.stages, P.attend_threads, P.attend_smem);
          }
  return bad;
}

int main(void) {
  int n, smem, bad = sweep(NULL, &n, &smem);
  check(bad == 0, "default plan: %d shapes x types, %d break an invariant (largest attend smem %d bytes)", n, bad, smem);

  /* the default ring for the shape the benchmarks use: 3 groups x 4 stages, 128 threads */
  qgen_layout L;
  qgen_plan P;
  qgen_tune t;
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, NULL, &P);
  check(P.warps_t == 3 && P.stages == 12 && P.attend_threads == 128, "qwen3-4b f16: 3 groups x 4 stages, 128 threads (got %d, %d, %d)",
        P.warps_t, P.stages, P.attend_threads);
  /* fp8 K and V: 2 stages a group; fp8 on one side only keeps the budget's ring */
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_E4M3, QGEN_TYPE_E4M3, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, NULL, &P);
  check(P.warps_t == 3 && P.stages == 6, "qwen3-4b e4m3: 3 groups x 2 stages (got %d, %d)", P.warps_t, P.stages);
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_E5M2, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, NULL, &P);
  check(P.stages / P.warps_t == 4, "e5m2 K, f16 V: 4 stages a group (got %d / %d)", P.stages, P.warps_t);
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);

  char err[256];
  int rc = qgen_tune_parse("groups=2,stages=3", &t, err, sizeof err);
  qgen_plan_make(&L, &t, &P);
  check(rc == 1 && P.warps_t == 2 && P.stages == 6 && P.attend_threads == 96,
        "QGEN_TUNE=groups=2,stages=3: 2 groups, a ring of 6, 96 threads (got %d, %d, %d)", P.warps_t, P.stages, P.attend_threads);

  qgen_tune_parse("groups=16,stages=8", &t, err, sizeof err);
  bad = sweep(&t, &n, &smem);
  check(bad == 0, "QGEN_TUNE=groups=16,stages=8: %d shapes, %d break an invariant (at most 1024 threads: fewer groups)", n, bad);
  qgen_layout_init(&L, 64, 128, 2, 64, QGEN_TYPE_Q4_0, QGEN_TYPE_Q4_0, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.125, 1);
  qgen_plan_make(&L, &t, &P);
  check(P.mt == 4 && P.warps_t == 7 && P.attend_threads == 32 * 29, "group 64: 16 groups asked, 7 given (%d threads)", P.attend_threads);

  rc = qgen_tune_parse("bulk=0,pdl=0", &t, err, sizeof err);
  qgen_plan_make(&L, &t, &P);
  check(rc == 0 && P.bulk == 0 && P.pdl == 0, "QGEN_TUNE=bulk=0,pdl=0: launch-time keys, kernels unchanged");
  rc = qgen_tune_parse(NULL, &t, err, sizeof err);
  qgen_plan_make(&L, &t, &P);
  check(rc == 0 && P.bulk == 1 && P.pdl == 1, "default: bulk copies and PDL on (got bulk %d, pdl %d)", P.bulk, P.pdl);
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_Q8_0, QGEN_TYPE_Q8_0, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, NULL, &P);
  check(P.warps_t == 4 && P.stages == 16 && P.attend_threads == 160, "qwen3-4b q8_0: 4 groups x 4 stages, 160 threads (got %d, %d, %d)",
        P.warps_t, P.stages, P.attend_threads);
  check(P.swap_ops == 1 && P.old_dequant == 0, "qwen3-4b q8_0: swapped operands, on oct/tpair (got swap %d, olddq %d)", P.swap_ops,
        P.old_dequant);
  rc = qgen_tune_parse("swap=0", &t, err, sizeof err);
  qgen_plan_make(&L, &t, &P);
  check(rc == 1 && P.swap_ops == 0 && P.old_dequant == 1, "QGEN_TUNE=swap=0: q8_0 back to per-element operands (got rc %d, swap %d, olddq %d)",
        rc, P.swap_ops, P.old_dequant);
  rc = qgen_tune_parse("olddq=1,swap=1", &t, err, sizeof err);
  qgen_plan_make(&L, &t, &P);
  check(rc == 1 && P.swap_ops == 0 && P.old_dequant == 1, "QGEN_TUNE=olddq=1,swap=1: olddq wins (got swap %d, olddq %d)", P.swap_ops,
        P.old_dequant);

  check(P.sel_regs == 4 && P.sel_threads == 1024, "default select: 1024 threads, short lists of up to 4 keys a thread (got %d, %d)",
        P.sel_threads, P.sel_regs);
  rc = qgen_tune_parse("selreg=0", &t, err, sizeof err);
  qgen_plan_make(&L, &t, &P);
  check(rc == 1 && P.sel_regs == 0, "QGEN_TUNE=selreg=0: short path off, a kernel-shaping key (got %d)", P.sel_regs);

  rc = qgen_tune_parse("chunk=3,ctas=4", &t, err, sizeof err);
  qgen_plan_make(&L, &t, &P);
  check(rc == 1 && P.chunk == 2 && P.attend_min_ctas == 4, "QGEN_TUNE=chunk=3,ctas=4: 3 does not divide 64-token pages, 2 given; 4 CTAs (got %d, %d)",
        P.chunk, P.attend_min_ctas);
  qgen_plan_make(&L, NULL, &P);
  check(P.chunk == 4 && P.pair == 1 && P.attend_min_ctas == 4, "qwen3-4b q8_0: chunks of 4 sub-tiles, pairs, registers for 4 CTAs (got %d, %d, %d)",
        P.chunk, P.pair, P.attend_min_ctas);
  rc = qgen_tune_parse("pair=0", &t, err, sizeof err);
  qgen_plan_make(&L, &t, &P);
  check(rc == 1 && P.pair == 0 && P.attend_min_ctas == 0, "QGEN_TUNE=pair=0: one sub-tile a step, registers left to ptxas (got %d, %d)", P.pair,
        P.attend_min_ctas);
  rc = qgen_tune_parse("pair=1,ctas=3", &t, err, sizeof err);
  qgen_plan_make(&L, &t, &P);
  check(rc == 1 && P.pair == 1 && P.attend_min_ctas == 3, "QGEN_TUNE=pair=1,ctas=3: ctas wins over the pairs' 4 (got %d, %d)", P.pair,
        P.attend_min_ctas);
  rc = qgen_tune_parse("pair=1,swap=0", &t, err, sizeof err);
  qgen_plan_make(&L, &t, &P);
  check(rc == 1 && P.pair == 0, "QGEN_TUNE=pair=1,swap=0: no pairs without the swapped operands (got %d)", P.pair);
  L.v_tau = 0.01;
  qgen_plan_make(&L, NULL, &P);
  check(P.pair == 0 && P.attend_min_ctas == 0 && !broken(&L, &P, 0), "q8_0 with sparse-V: no pairs (got %d, %d)", P.pair,
        P.attend_min_ctas);
  L.v_tau = 0;
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_Q5_0, QGEN_TYPE_Q5_0, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, NULL, &P);
  check(P.pair == 1 && P.attend_min_ctas == 3, "qwen3-4b q5_0: pairs, registers for 3 CTAs (got %d, %d)", P.pair, P.attend_min_ctas);
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_Q8_0, QGEN_TYPE_Q5_0, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, NULL, &P);
  check(P.pair == 1 && P.attend_min_ctas == 3, "q8_0 K, q5_0 V: pairs, registers for the fewer CTAs, 3 (got %d, %d)", P.pair,
        P.attend_min_ctas);

  const char *refused[] = {"groups=0", "groups=17", "stages=1", "stages=9", "groups=x", "groups=", "bulk=2", "selreg=33", "selreg=-1",
                           "chunk=0", "chunk=17", "ctas=0", "ctas=17", "pair=2", "pair=-1"};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    err[0] = 0;
    check(qgen_tune_parse(refused[i], &t, err, sizeof err) == -1 && strstr(err, "groups=1..16"), "QGEN_TUNE=%s is refused: %s",
          refused[i], err);
  }
  err[0] = 0; /* 17 x 1024 keys: more than the packed counts and registers allow */
  check(qgen_tune_parse("selreg=17", &t, err, sizeof err) == -1 && strstr(err, "at most 16384"),
        "QGEN_TUNE=selreg=17 is refused with sel=1024: %s", err);
  rc = qgen_tune_parse("sel=512,selreg=32", &t, err, sizeof err);
  qgen_plan_make(&L, &t, &P);
  check(rc == 1 && P.sel_regs == 32 && P.sel_threads == 512, "QGEN_TUNE=sel=512,selreg=32 reaches the plan");
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
