/* test_plan.c — the launch plan (base/plan.c) over every shape a spec may have, on every
 * architecture of base/arch.h: the invariants attend.cu's static_asserts and runtime/gpu.c
 * rely on, checked on the host so a plan change that breaks one shape fails here, not on a
 * GPU at run time. Every kernel's dynamic shared memory within the arch's CTA limit (with
 * room for its static arrays), or the shape refused with the kernel, its bytes and the
 * limit named (only on archs whose CTAs may use less than sm_90's); the architecture table's
 * rows consistent and its occupancy rule.
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
 *     with qgen_plan_pair_ctas (registers for the fewer of their CTAs), head_dim <= 128, no sparse-V and chunk + groups <= stages (never elsewhere,
 *     tuned or not), and
 *     attend's registers then sized for 4 CTAs an SM; else left to ptxas;
 *   - QGEN_TUNE groups= / stages= / selreg= / chunk= / ctas= / pair= reach the plan, a CTA never exceeds 1024
 *     threads, and out-of-range values are refused by name;
 *   - qg_estsel (estimate and select in one launch) is built, under QGEN_TUNE estsel=1 only,
 *     for sm_90's one-token module of one-stage selection only;
 *   - the engine modules (steps of 2, 4, 8 and 16 query tokens: group x step rows) of every
 *     shape on every arch: the same ring, CTA and token-group rules over their m-tiles, no
 *     swapped operands or pairs, shared memory within the arch, the split partials merged by
 *     qg_combine exactly where the rows are >= 16 (the rows whose 4-channel threads fit 128
 *     a CTA; attend then keeps no merge weights), by attend's last CTA in every one-token
 *     module; or refused naming the kernel
 *     (rows of more than 31 m-tiles among them: the plan must refuse them before sizing a ring).
 * Prints one line per check and "N passed, N failed"; exits 1 on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/layout.h"
#include "base/plan.h"
#include "base/qtypes.h"

#include "testlib.h"

#define H100 qgen_arch_of(90) /* the plans as they were tuned: sm_90 */

static const qgen_type CACHE_TYPES[] = {QGEN_TYPE_F16, QGEN_TYPE_BF16, QGEN_TYPE_Q8_0, QGEN_TYPE_Q4_0, QGEN_TYPE_Q5_0};
enum { N_TYPES = sizeof CACHE_TYPES / sizeof *CACHE_TYPES };

/* The first broken invariant of plan P for layout L on architecture A, or NULL. */
static const char *broken(const qgen_layout *L, const qgen_arch *A, const qgen_plan *P, int tuned) {
  const int D = L->head_dim;
  if (P->mt != (L->group + 15) / 16 || P->mtw != 1 || P->warps_m != P->mt) return "m-tiles: one a consumer warp";
  if (P->warps_t < 1 || P->stages % P->warps_t != 0 || P->stages < 2 * P->warps_t) return "ring: stages a multiple of the groups, >= 2 each";
  if (!tuned && P->stages / P->warps_t > 4) return "ring: more than 4 stages a group";
  if (P->attend_threads != 32 * (P->warps_m * P->warps_t + 1) || P->attend_threads > 1024) return "CTA size";
  if (!tuned && P->attend_threads > 256) return "more than 8 warps by default";
  const int sides[2][2] = {{(int)L->k_row_bytes, P->k_srow}, {(int)L->v_row_bytes, P->v_srow}};
  const qgen_type types[2] = {L->k_type, L->v_type};
  const int pieces[2] = {P->k_piece, P->v_piece}, tiles[2] = {P->k_tile_bytes, P->v_tile_bytes};
  const int quant = qgen_type_traits_of(types[0])->is_quant || qgen_type_traits_of(types[1])->is_quant;
  const int want = ((quant ? 4 : 3) + P->warps_m - 1) / P->warps_m;
  if (!tuned && P->warps_t > want) return "token groups: at most 3 (4 when a side is quantized) over the m-tiles, rounded up";
  const int nq0 = qgen_type_traits_of(L->k_type)->bf16_mma ? 2 : 1, q0 = nq0 * P->mt * 16 * P->q_srow;
  const int room = A->smem_block - 512 - q0 - 128, budget = room < 106 * 1024 ? room : 106 * 1024;
  if (!tuned && P->warps_t < want && budget / ((tiles[0] + tiles[1]) * want) >= 2) return "token groups: fewer only when the budget is short";
  if (!tuned && P->stages / P->warps_t > 2 && P->stages * (tiles[0] + tiles[1]) > budget)
    return "ring: more than 2 stages a group only within the budget (106 KiB, or what the arch's CTA limit leaves)";
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
  const int comb = P->merge_rows ? 0 : L->group * QGEN_MAX_SPLITS * 4;
  const int area = ring > red ? (ring > comb ? ring : comb) : (red > comb ? red : comb);
  /* the persistent attend's: two query buffers, the mailbox, the ring, its own merge area
     (the G real rows) and weights, a bit a list of the largest batch */
  const int pers = 2 * q + QGEN_PERSIST_BOX + 128 + ring + P->warps_t * L->group * (D + 2) * 4 + L->group * QGEN_MAX_SPLITS * 4 +
                   QGEN_MAX_BATCH * L->n_head_kv / 8;
  if (P->persist && P->attend_smem != pers) return "persistent: shared memory = 2 q + mailbox + 128 + ring + merge area + weights + list bits";
  if (!P->persist && P->attend_smem != q + area + 128) return "shared memory = q + max(ring, merge, weights) + 128 (to align the ring)";
  if (P->persist && (P->merge_rows || P->attend_smem + 512 > A->smem_block)) return "persistent: attend merges, within the arch's CTA limit";
  if (!tuned && (P->merge_rows || P->merge_threads)) return "a one-token module merges its splits in attend's last CTA";
  if (!tuned && P->attend_smem + 512 > A->smem_block) return "attend: shared memory over the arch's CTA limit"; /* tuned: refused at build */
  const int est_nt = (L->group + 7) / 8, est_nq = L->in_type == QGEN_TYPE_F16 ? 1 : 2;
  if (P->est_smem != est_nq * est_nt * 8 * P->est_qrow || P->est_qrow < 4 * D) return "estimate: staged Qsplit = n-tiles x 8 rows (x 2 with a residue)";
  if (P->est_smem + 512 > A->smem_block) return "estimate: shared memory over the arch's CTA limit";
  const int est_want = (est_nt == 1 ? (D <= 128 ? 4 : 3) : D <= 128 && est_nq * est_nt <= 4 ? 4 : 2) - (A->sm / 10 == 12 && est_nt == 1);
  if (P->est_min_ctas < 2 || P->est_min_ctas > 4 || (est_nt == 1 && P->est_min_ctas != est_want))
    return "estimate: 2..4 CTAs an SM, 4 (3 above head_dim 128) for groups of up to 8, one fewer on sm_12x";
  if (4 * P->sel_smem_keys + 16384 > A->smem_block || P->sel_smem_keys > 24576 || P->sel_smem_keys % 256)
    return "select: keys in shared memory within the arch's limit beside 16 KiB of static arrays, at most 24576, whole 256s";
  if (L->rescore > 1 && (P->resc_smem + 512 > A->smem_block || P->resc_stages < 2 || P->resc_stages > 4))
    return "rescore: 2..4 ring stages a warp, within the arch's CTA limit";
  const int swappable = qgen_type_traits_of(types[0])->is_quant && qgen_type_traits_of(types[1])->is_quant && L->group <= 8;
  if (!tuned && P->swap_ops != swappable) return "attend's swapped operands exactly where K and V are block-quantized and G <= 8";
  if (P->swap_ops && (!swappable || P->old_dequant)) return "swapped operands only where they apply, and never under olddq";
  const int spp = L->block / 16, ch = P->chunk;
  if (ch < 1 || spp % ch || P->stages % ch || P->stages / ch < 2) return "ring chunks: whole sub-tiles of a page, dividing the stages, >= 2 chunk stages";
  const int fp8 = qgen_type_traits_of(types[0])->tensor_scale && qgen_type_traits_of(types[1])->tensor_scale;
  if (!tuned && fp8 && ch != 1) return "ring chunks: one sub-tile for fp8 K and V";
  for (int c = ch + 1; !tuned && !fp8 && c <= 4; c++)
    if (spp % c == 0 && P->stages % c == 0 && P->stages / c >= 2) return "ring chunks: the largest of at most 4 that fits";
  const int kc = qgen_plan_pair_ctas(types[0]), vc = qgen_plan_pair_ctas(types[1]);
  const int pairable = P->swap_ops && D <= 128 && L->v_tau == 0 && ch + P->warps_t <= P->stages && kc && vc;
  if (P->pair && !pairable) return "pairs only with swapped operands of types with qgen_plan_pair_ctas, head_dim <= 128, no sparse-V, chunk + groups <= stages";
  if (!tuned && P->pair != pairable) return "pairs by default wherever they apply";
  const int fit = qgen_arch_occupancy(A, P->attend_threads, 0, P->attend_smem + 512), pc = kc < vc ? kc : vc;
  if (!tuned && P->attend_min_ctas != (P->pair ? (fit >= 1 && fit <= 2 && fit < pc ? fit : pc) : 0))
    return "attend's registers for the fewer of K's and V's qgen_plan_pair_ctas (or the 1-2 CTAs the arch's shared memory holds) under pairs, "
           "else left to ptxas";
  return NULL;
}

/* Every shape on architecture A; returns the number of plans that broke an invariant
   (printing the first). A shape the plan refuses for A must say which kernel, its bytes and
   A's limit, and only an arch whose CTA may use less than sm_90's may refuse one. */
static int sweep(const qgen_arch *A, const qgen_tune *t, int *n_plans, int *max_smem, int *n_refused) {
  static const int groups[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 24, 32, 33, 48, 64};
  int bad = 0;
  *n_plans = *max_smem = *n_refused = 0;
  for (int D = 32; D <= 256; D += 32)
    for (size_t gi = 0; gi < sizeof groups / sizeof *groups; gi++)
      for (int block = 32; block <= 256; block += 32)
        for (int k = 0; k < N_TYPES; k++)
          for (int v = 0; v < N_TYPES; v++) {
            const int G = groups[gi];
            qgen_layout L; /* an f32 query on every other plan (estimate's residue); two-stage on every third */
            const qgen_type in = (k + v) % 2 ? QGEN_TYPE_F32 : QGEN_TYPE_F16;
            qgen_layout_init(&L, D, 2 * G, 2, block, CACHE_TYPES[k], CACHE_TYPES[v], in, QGEN_TYPE_F16, 1.0, 1);
            if ((D / 32 + gi + k) % 3 == 0) qgen_layout_set_rescore(&L, 8);
            qgen_plan P;
            char why[256] = "";
            const int rc = qgen_plan_make(&L, A, t, &P, why, sizeof why);
            (*n_plans)++;
            const char *bad_why = NULL;
            if (rc != 0) {
              (*n_refused)++;
              char lim[32];
              snprintf(lim, sizeof lim, "allows %d", A->smem_block);
              if (!t && A->smem_block >= qgen_arch_of(90)->smem_block) bad_why = "refused on an arch of sm_90's limits";
              else if (!strstr(why, "qg_") || !strstr(why, A->name) || !strstr(why, lim)) bad_why = "a refusal that does not name the kernel and the limit";
            } else {
              if (P.attend_smem > *max_smem) *max_smem = P.attend_smem;
              bad_why = broken(&L, A, &P, t != NULL);
            }
            if (bad_why && bad++ == 0)
              printf("  first broken on %s: D %d, group %d, block %d, k %s, v %s: %s (groups %d, stages %d, threads %d, smem %d; %s)\n",
                     A->name, D, G, block, qgen_type_traits_of(CACHE_TYPES[k])->name, qgen_type_traits_of(CACHE_TYPES[v])->name, bad_why,
                     P.warps_t, P.stages, P.attend_threads, P.attend_smem, why);
          }
  return bad;
}

/* The first broken invariant of the engine-module plan P of L on A (step query tokens a
   row: group x step rows a KV head), or NULL. */
static const char *step_broken(const qgen_layout *L, const qgen_arch *A, const qgen_plan *P, int step, int mtw) {
  const int mr = (L->group * step + 15) / 16, w = mtw < mr ? mtw : mr, mt = (mr + w - 1) / w * w, wm = mt / w;
  if (P->mt != mt || P->mtw != w || P->warps_m != wm) return "m-tiles of group x step rows, mtw of them a warp";
  if (P->warps_t < 1 || P->stages % P->warps_t || P->stages < 2 * P->warps_t || P->stages / P->warps_t > 4) return "ring: 2..4 stages a group";
  if (P->attend_threads != 32 * (wm * P->warps_t + 1) || P->attend_threads > 1024) return "CTA size";
  const int quant = qgen_type_traits_of(L->k_type)->is_quant || qgen_type_traits_of(L->v_type)->is_quant;
  int want = ((quant ? 4 : 3) + wm - 1) / wm;
  if (wm * want + 1 > 32) want = 31 / wm;
  if (P->warps_t > want) return "token groups: at most 3 (4 when a side is quantized) over the m-tiles, rounded up";
  const int nq = qgen_type_traits_of(L->k_type)->bf16_mma ? 2 : 1, q = nq * mt * 16 * P->q_srow;
  const int room = A->smem_block - 512 - q - 128, budget = room < 106 * 1024 ? room : 106 * 1024;
  if (P->warps_t < want && budget / ((P->k_tile_bytes + P->v_tile_bytes) * want) >= 2) return "token groups: fewer only when the budget is short";
  if (P->attend_smem + 512 > A->smem_block || P->est_smem + 512 > A->smem_block) return "shared memory within the arch's CTA limit";
  if (P->swap_ops || P->pair) return "no swapped operands or pairs (rows are masked by token)";
  const int spp = L->block / 16;
  if (P->chunk < 1 || spp % P->chunk || P->stages % P->chunk || P->stages / P->chunk < 2) return "ring chunks: whole sub-tiles of a page, >= 2 chunk stages";
  const int rows = L->group * step, D = L->head_dim;
  if ((P->merge_rows > 0) != (rows >= 16)) return "qg_combine merges the splits exactly where the rows are >= 16";
  if (P->merge_rows && (P->merge_rows * D / 4 > 128 || (P->merge_rows + 1) * D / 4 <= 128 || P->merge_threads % 32 ||
                        P->merge_threads < P->merge_rows * D / 4 || P->merge_threads - 32 >= P->merge_rows * D / 4))
    return "qg_combine: the rows whose 4-channel threads fit 128, in the fewest whole warps";
  const int ring = P->stages * (P->k_tile_bytes + P->v_tile_bytes), red = P->warps_t * mt * 16 * (D + 2) * 4;
  const int weights = P->merge_rows ? 0 : rows * QGEN_MAX_SPLITS * 4, big = ring > red ? ring : red;
  if (P->attend_smem != q + (big > weights ? big : weights) + 128)
    return "shared memory = q + max(ring, merge, the weights where attend merges the splits) + 128";
  return NULL;
}

/* Every shape's engine modules of 2, 4, 8 and 16 tokens on A, with mtw m-tiles a consumer
   warp (QGEN_TUNE mtw; 0: the default): a plan keeps step_broken's invariants or is refused
   naming the kernel; returns the number broken (printing the first). */
static int sweep_steps(const qgen_arch *A, int mtw, int *n_plans, int *n_refused) {
  static const int groups[] = {1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 24, 32, 33, 48, 64};
  int bad = 0;
  *n_plans = *n_refused = 0;
  for (int step = 2; step <= 16; step *= 2)
    for (int D = 32; D <= 256; D += 32)
      for (size_t gi = 0; gi < sizeof groups / sizeof *groups; gi++)
        for (int block = 32; block <= 256; block += 32)
          for (int k = 0; k < N_TYPES; k++)
            for (int v = 0; v < N_TYPES; v++) {
              qgen_layout L;
              qgen_layout_init(&L, D, 2 * groups[gi], 2, block, CACHE_TYPES[k], CACHE_TYPES[v], (k + v) % 2 ? QGEN_TYPE_F32 : QGEN_TYPE_F16,
                               QGEN_TYPE_F16, 1.0, 1);
              qgen_tune t;
              char why[256] = "";
              qgen_tune_parse(NULL, &t, why, sizeof why);
              t.step = step;
              qgen_plan P;
              /* the default: two m-tiles a warp for block types where that plan fits */
              int want = mtw;
              if (!mtw) {
                t.mtw = 2;
                want = qgen_type_traits_of(CACHE_TYPES[k])->is_quant && qgen_type_traits_of(CACHE_TYPES[v])->is_quant &&
                               qgen_plan_make(&L, A, &t, &P, NULL, 0) == 0 ? 2 : 1;
              }
              t.mtw = mtw;
              const int rc = qgen_plan_make(&L, A, &t, &P, why, sizeof why);
              (*n_plans)++;
              const char *bad_why = rc != 0 ? (strstr(why, "qg_") ? NULL : "a refusal that does not name the kernel") : step_broken(&L, A, &P, step, want);
              *n_refused += rc != 0;
              if (bad_why && bad++ == 0)
                printf("  first broken on %s: step %d, D %d, group %d, block %d, k %s, v %s: %s (groups %d, stages %d, threads %d; %s)\n", A->name,
                       step, D, groups[gi], block, qgen_type_traits_of(CACHE_TYPES[k])->name, qgen_type_traits_of(CACHE_TYPES[v])->name,
                       bad_why, P.warps_t, P.stages, P.attend_threads, why);
            }
  return bad;
}

int main(void) {
  int n, smem, n_refused, bad;
  for (int i = 0; qgen_arch_at(i); i++) {
    const qgen_arch *A = qgen_arch_at(i);
    bad = sweep(A, NULL, &n, &smem, &n_refused);
    check(bad == 0, "default plan on %s: %d shapes x types, %d break an invariant, %d refused (largest attend smem %d bytes)", A->name,
          n, bad, n_refused, smem);
  }

  for (int i = 0; qgen_arch_at(i); i++) {
    const qgen_arch *A = qgen_arch_at(i);
    int refused_one = 0;
    for (int mtw = 1; mtw >= 0; mtw--) { /* mtw=1, then the default: it refuses at most what mtw=1 does */
      bad = sweep_steps(A, mtw, &n, &n_refused);
      check(bad == 0 && (mtw || n_refused <= refused_one),
            "engine modules (2-16 tokens, mtw=%s) on %s: %d shapes x types x steps, %d break an invariant, %d refused (mtw=1: %d)",
            mtw ? "1" : "default", A->name, n, bad, n_refused, refused_one);
      if (mtw) refused_one = n_refused;
    }
    bad = sweep_steps(A, 2, &n, &n_refused);
    check(bad == 0, "engine modules (2-16 tokens, mtw=2) on %s: %d shapes x types x steps, %d break an invariant, %d refused", A->name, n,
          bad, n_refused);
  }

  /* the architectures' tables: every row's own numbers consistent, and the occupancy rule */
  for (int i = 0; qgen_arch_at(i); i++) {
    const qgen_arch *A = qgen_arch_at(i);
    check(A->smem_block + A->smem_reserved <= A->smem_sm && A->regs_sm == 65536 && A->threads_sm % 32 == 0 &&
              qgen_arch_of(A->sm) == A && qgen_arch_named(A->name) == A && (A->features & QGEN_ARCH_CP_ASYNC),
          "%s (%s): a CTA's %d bytes and the reserved %d within the SM's %d; found by number and name", A->name, A->gpus,
          A->smem_block, A->smem_reserved, A->smem_sm);
  }
  check(!qgen_arch_of(75) && !qgen_arch_named("sm_75") && !qgen_arch_at(-1), "sm_75 is not an architecture qgen builds for");
  /* sm_90: a 1024-thread CTA of 32 registers a thread, no shared memory: two an SM; 128 threads at 128 registers: 4 */
  check(qgen_arch_occupancy(qgen_arch_of(90), 1024, 32, 0) == 2 && qgen_arch_occupancy(qgen_arch_of(90), 128, 128, 4256) == 4 &&
            qgen_arch_occupancy(qgen_arch_of(86), 128, 168, 78368) == 1 && qgen_arch_occupancy(qgen_arch_of(86), 128, 0, 102400) == 0,
        "occupancy: threads, registers and shared memory bound the CTAs an SM");

  /* the 99 KiB architectures: the f16 ring of qwen3-4b in 3 stages a group instead of 4, select's
     keys what 99 KiB leaves beside its static arrays, the q4_0 pairs' registers for the 2 CTAs
     their shared memory allows; sm_80 and sm_90 as tuned */
  {
    qgen_layout L;
    qgen_plan P;
    qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
    const int rc = qgen_plan_make(&L, qgen_arch_of(86), NULL, &P, NULL, 0);
    check(rc == 0 && P.warps_t == 3 && P.stages == 9 && P.attend_smem == 78208 && P.sel_smem_keys == 21248,
          "qwen3-4b f16 on sm_86: 3 groups x 3 stages, attend 78208 bytes, select 21248 keys (got %d, %d, %d, %d)", P.warps_t, P.stages,
          P.attend_smem, P.sel_smem_keys);
    for (int sm = 80; sm <= 90; sm += 10) {
      qgen_plan_make(&L, qgen_arch_of(sm), NULL, &P, NULL, 0);
      check(P.stages == 12 && P.attend_smem == 102784 && P.sel_smem_keys == 24576, "qwen3-4b f16 on sm_%d: 12 stages, 102784 bytes, 24576 keys",
            sm);
    }
    qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_Q4_0, QGEN_TYPE_Q4_0, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
    qgen_plan_make(&L, qgen_arch_of(120), NULL, &P, NULL, 0);
    check(P.pair == 1 && P.attend_min_ctas == 2 && P.est_min_ctas == 3, "qwen3-4b q4_0 on sm_120: pairs, registers for 2 CTAs; estimate 3 (got %d, %d, %d)",
          P.pair, P.attend_min_ctas, P.est_min_ctas);
    qgen_plan_make(&L, qgen_arch_of(90), NULL, &P, NULL, 0);
    check(P.pair == 1 && P.attend_min_ctas == 4 && P.est_min_ctas == 4, "qwen3-4b q4_0 on sm_90: pairs, registers for 4 CTAs; estimate 4");
    /* a shape no 99 KiB arch holds: estimate's staged queries of head_dim 256, group 64, an f32 query */
    qgen_layout_init(&L, 256, 64, 1, 64, QGEN_TYPE_Q8_0, QGEN_TYPE_Q8_0, QGEN_TYPE_F32, QGEN_TYPE_F16, 0.0625, 1);
    char why[256] = "";
    check(qgen_plan_make(&L, qgen_arch_of(89), NULL, &P, why, sizeof why) == -1 && strstr(why, "qg_estimate") && strstr(why, "101376"),
          "head_dim 256, group 64, f32 query on sm_89: refused: %s", why);
    check(qgen_plan_make(&L, qgen_arch_of(90), NULL, &P, why, sizeof why) == 0, "... and accepted on sm_90");
  }

  /* the default ring for the shape the benchmarks use: 3 groups x 4 stages, 128 threads */
  qgen_layout L;
  qgen_plan P;
  qgen_tune t;
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, H100, NULL, &P, NULL, 0);
  check(P.warps_t == 3 && P.stages == 12 && P.attend_threads == 128, "qwen3-4b f16: 3 groups x 4 stages, 128 threads (got %d, %d, %d)",
        P.warps_t, P.stages, P.attend_threads);
  /* an 8-token verify step of that shape is two m-tiles of rows: two token groups (one would
     leave two consumer warps a CTA), 160 threads */
  char terr[128];
  qgen_tune_parse(NULL, &t, terr, sizeof terr);
  t.step = 8;
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(P.mt == 2 && P.warps_t == 2 && P.stages == 8 && P.attend_threads == 160,
        "qwen3-4b f16, 8-token step: 2 m-tiles, 2 groups x 4 stages, 160 threads (got %d, %d, %d, %d)", P.mt, P.warps_t, P.stages,
        P.attend_threads);
  check(P.merge_rows == 4 && P.merge_threads == 128, "qwen3-4b f16, 8-token step: splits merged by qg_combine, 4 rows a CTA (got %d, %d)",
        P.merge_rows, P.merge_threads);
  const int smem_combine = P.attend_smem;
  check(P.mtw == 1 && P.warps_m == 2, "qwen3-4b f16, 8-token step: one m-tile a warp (got mtw %d, %d warps)", P.mtw, P.warps_m);
  /* a block type's 8-token step: one consumer warp holds both m-tiles, four token groups of
     one warp (its K and V dequantized once a sub-tile, not once a warp of each m-tile);
     QGEN_TUNE mtw=1 gives the warp an m-tile each again; a one-token step of that group has
     one m-tile, and keeps its swapped operands */
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_Q4_0, QGEN_TYPE_Q4_0, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_tune_parse(NULL, &t, terr, sizeof terr);
  t.step = 8;
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(P.mt == 2 && P.mtw == 2 && P.warps_m == 1 && P.warps_t == 4 && P.attend_threads == 160,
        "q4_0 8-token step: 2 m-tiles in one warp, 4 groups, 160 threads (got %d, %d, %d, %d, %d)", P.mt, P.mtw, P.warps_m, P.warps_t,
        P.attend_threads);
  check(qgen_tune_parse("mtw=1", &t, terr, sizeof terr) == 1, "QGEN_TUNE=mtw=1 changes the kernels");
  t.step = 8;
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(P.mt == 2 && P.mtw == 1 && P.warps_m == 2 && P.warps_t == 2 && P.attend_threads == 160,
        "q4_0 8-token step, mtw=1: an m-tile a warp, 2 groups, 160 threads (got %d, %d, %d, %d, %d)", P.mt, P.mtw, P.warps_m, P.warps_t,
        P.attend_threads);
  qgen_tune_parse(NULL, &t, terr, sizeof terr);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(P.mt == 1 && P.mtw == 1 && P.swap_ops == 1, "q4_0 one-token step: one m-tile, swapped operands (got %d, %d, %d)", P.mt, P.mtw,
        P.swap_ops);
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_tune_parse("merge=0", &t, terr, sizeof terr);
  t.step = 8;
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(P.merge_rows == 0 && P.merge_threads == 0 && P.attend_smem >= smem_combine,
        "QGEN_TUNE=merge=0, 8-token step: attend's last CTA merges, with its weights in shared memory (got %d, %d; %d >= %d)", P.merge_rows,
        P.merge_threads, P.attend_smem, smem_combine);
  /* fp8 K and V: 2 stages a group; fp8 on one side only keeps the budget's ring */
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_E4M3, QGEN_TYPE_E4M3, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, H100, NULL, &P, NULL, 0);
  check(P.warps_t == 3 && P.stages == 6, "qwen3-4b e4m3: 3 groups x 2 stages (got %d, %d)", P.warps_t, P.stages);
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_E5M2, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, H100, NULL, &P, NULL, 0);
  check(P.stages / P.warps_t == 4, "e5m2 K, f16 V: 4 stages a group (got %d / %d)", P.stages, P.warps_t);
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);

  char err[256];
  int rc = qgen_tune_parse("groups=2,stages=3", &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 1 && P.warps_t == 2 && P.stages == 6 && P.attend_threads == 96,
        "QGEN_TUNE=groups=2,stages=3: 2 groups, a ring of 6, 96 threads (got %d, %d, %d)", P.warps_t, P.stages, P.attend_threads);

  qgen_tune_parse("groups=16,stages=8", &t, err, sizeof err);
  bad = sweep(H100, &t, &n, &smem, &n_refused);
  check(bad == 0, "QGEN_TUNE=groups=16,stages=8: %d shapes, %d break an invariant (at most 1024 threads: fewer groups), %d refused "
        "as too large for sm_90", n, bad, n_refused);
  qgen_layout_init(&L, 64, 128, 2, 64, QGEN_TYPE_Q4_0, QGEN_TYPE_Q4_0, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.125, 1);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(P.mt == 4 && P.warps_t == 7 && P.attend_threads == 32 * 29, "group 64: 16 groups asked, 7 given (%d threads)", P.attend_threads);

  rc = qgen_tune_parse("bulk=0,pdl=0", &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 0 && P.bulk == 0 && P.pdl == 0, "QGEN_TUNE=bulk=0,pdl=0: launch-time keys, kernels unchanged");
  rc = qgen_tune_parse(NULL, &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 0 && P.bulk == 1 && P.pdl == 1, "default: bulk copies and PDL on (got bulk %d, pdl %d)", P.bulk, P.pdl);
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_Q8_0, QGEN_TYPE_Q8_0, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, H100, NULL, &P, NULL, 0);
  check(P.warps_t == 4 && P.stages == 16 && P.attend_threads == 160, "qwen3-4b q8_0: 4 groups x 4 stages, 160 threads (got %d, %d, %d)",
        P.warps_t, P.stages, P.attend_threads);
  check(P.swap_ops == 1 && P.old_dequant == 0, "qwen3-4b q8_0: swapped operands, on oct/tpair (got swap %d, olddq %d)", P.swap_ops,
        P.old_dequant);
  rc = qgen_tune_parse("swap=0", &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 1 && P.swap_ops == 0 && P.old_dequant == 1, "QGEN_TUNE=swap=0: q8_0 back to per-element operands (got rc %d, swap %d, olddq %d)",
        rc, P.swap_ops, P.old_dequant);
  rc = qgen_tune_parse("olddq=1,swap=1", &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 1 && P.swap_ops == 0 && P.old_dequant == 1, "QGEN_TUNE=olddq=1,swap=1: olddq wins (got swap %d, olddq %d)", P.swap_ops,
        P.old_dequant);

  check(P.sel_regs == 4 && P.sel_threads == 1024, "default select: 1024 threads, short lists of up to 4 keys a thread (got %d, %d)",
        P.sel_threads, P.sel_regs);
  rc = qgen_tune_parse("selreg=0", &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 1 && P.sel_regs == 0, "QGEN_TUNE=selreg=0: short path off, a kernel-shaping key (got %d)", P.sel_regs);

  /* qg_estsel: built and used under QGEN_TUNE=estsel=1 (a kernel-shaping key), for the
     one-token module of one-stage selection on sm_90 only. Rows: arch, QGEN_TUNE, engine step, rescore; keys a thread
     and use wanted. */
  const struct { int sm; const char *tune; int step, rescore, regs, use; const char *what; } es[] = {
      {90, "estsel=1", 0, 1, 8, 1, "sm_90, QGEN_TUNE=estsel=1: one launch, 8 keys a thread"},
      {90, NULL, 0, 1, 0, 0, "sm_90 by default: not built"},
      {90, "estsel=0", 0, 1, 0, 0, "sm_90, QGEN_TUNE=estsel=0: not built"},
      {86, "estsel=1", 0, 1, 0, 0, "sm_86: none"},
      {90, "estsel=1", 4, 1, 0, 0, "an engine module: none"},
      {90, "estsel=1", 0, 4, 0, 0, "two-stage selection: none"},
      {90, "estsel=1,selreg=1", 0, 1, 1, 1, "QGEN_TUNE=selreg=1: one key a thread"},
      {90, "estsel=1,selreg=0", 0, 1, 0, 0, "QGEN_TUNE=selreg=0: not built"}};
  for (size_t i = 0; i < sizeof es / sizeof *es; i++) {
    rc = qgen_tune_parse(es[i].tune, &t, err, sizeof err);
    t.step = es[i].step;
    L.rescore = es[i].rescore;
    qgen_plan_make(&L, qgen_arch_of(es[i].sm), &t, &P, NULL, 0);
    check(rc == (es[i].tune && strstr(es[i].tune, "=1")) && P.estsel_regs == es[i].regs && P.estsel == es[i].use, "qg_estsel, %s (got rc %d, regs %d, use %d)", es[i].what, rc,
          P.estsel_regs, P.estsel);
  }
  L.rescore = 1;

  /* the persistent attend: under QGEN_TUNE=persist=N (a kernel-shaping key), for one-token
     modules where its shared memory fits the arch. Rows: arch, query heads (8 KV heads of
     128 channels), K = V type, QGEN_TUNE, engine step, the plan's persist wanted. */
  const struct { int sm, heads; qgen_type kv; const char *tune; int step, want; const char *what; } pe[] = {
      {90, 32, QGEN_TYPE_F16, "persist=2", 0, 2, "sm_90 f16: persistent, twice the splits"},
      {90, 32, QGEN_TYPE_F16, NULL, 0, 0, "sm_90 f16 by default: one wave"},
      {80, 32, QGEN_TYPE_F16, "persist=1", 0, 1, "sm_80 f16: persistent"},
      {86, 32, QGEN_TYPE_F16, "persist=2", 0, 2, "sm_86 f16: persistent beside its smaller ring"},
      {86, 128, QGEN_TYPE_F16, "persist=2", 0, 0, "sm_86 f16, a group of 16: its merge area beside the ring is over 99 KiB: one wave"},
      {90, 128, QGEN_TYPE_F16, "persist=2", 0, 2, "sm_90 f16, a group of 16: persistent"},
      {90, 32, QGEN_TYPE_Q4_0, "persist=4", 0, 4, "sm_90 q4_0: persistent, pairs"},
      {90, 32, QGEN_TYPE_F16, "persist=2", 4, 0, "an engine module: one wave"},
      {90, 32, QGEN_TYPE_F16, "persist=2,merge=1", 0, 0, "merge=1: one wave"}};
  for (size_t i = 0; i < sizeof pe / sizeof *pe; i++) {
    qgen_layout_init(&L, 128, pe[i].heads, 8, 64, pe[i].kv, pe[i].kv, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
    rc = qgen_tune_parse(pe[i].tune, &t, err, sizeof err);
    t.step = pe[i].step;
    const int ok = qgen_plan_make(&L, qgen_arch_of(pe[i].sm), &t, &P, err, sizeof err) == 0;
    const char *why = ok && !pe[i].step ? broken(&L, qgen_arch_of(pe[i].sm), &P, 1) : NULL;
    check(ok && rc == (pe[i].tune != NULL) && P.persist == pe[i].want && !why && (!P.persist || !P.pair || P.attend_min_ctas <= 3),
          "%s (got persist %d, smem %d, pair %d, ctas %d: %s)", pe[i].what, P.persist, P.attend_smem, P.pair, P.attend_min_ctas, why ? why : "");
  }
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_Q8_0, QGEN_TYPE_Q8_0, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);

  rc = qgen_tune_parse("chunk=3,ctas=4", &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 1 && P.chunk == 2 && P.attend_min_ctas == 4, "QGEN_TUNE=chunk=3,ctas=4: 3 does not divide 64-token pages, 2 given; 4 CTAs (got %d, %d)",
        P.chunk, P.attend_min_ctas);
  qgen_plan_make(&L, H100, NULL, &P, NULL, 0);
  check(P.chunk == 4 && P.pair == 1 && P.attend_min_ctas == 4, "qwen3-4b q8_0: chunks of 4 sub-tiles, pairs, registers for 4 CTAs (got %d, %d, %d)",
        P.chunk, P.pair, P.attend_min_ctas);
  rc = qgen_tune_parse("pair=0", &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 1 && P.pair == 0 && P.attend_min_ctas == 0, "QGEN_TUNE=pair=0: one sub-tile a step, registers left to ptxas (got %d, %d)", P.pair,
        P.attend_min_ctas);
  rc = qgen_tune_parse("merge=1", &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 1 && P.merge_rows == 4 && P.merge_threads == 128 && !broken(&L, H100, &P, 1),
        "QGEN_TUNE=merge=1: the one-token module's splits merged by qg_combine, 4 rows of 128 channels a CTA (got %d, %d)", P.merge_rows,
        P.merge_threads);
  rc = qgen_tune_parse("pair=1,ctas=3", &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 1 && P.pair == 1 && P.attend_min_ctas == 3, "QGEN_TUNE=pair=1,ctas=3: ctas wins over the pairs' 4 (got %d, %d)", P.pair,
        P.attend_min_ctas);
  rc = qgen_tune_parse("pair=1,swap=0", &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 1 && P.pair == 0, "QGEN_TUNE=pair=1,swap=0: no pairs without the swapped operands (got %d)", P.pair);
  L.v_tau = 0.01;
  qgen_plan_make(&L, H100, NULL, &P, NULL, 0);
  check(P.pair == 0 && P.attend_min_ctas == 0 && !broken(&L, H100, &P, 0), "q8_0 with sparse-V: no pairs (got %d, %d)", P.pair,
        P.attend_min_ctas);
  L.v_tau = 0;
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_Q5_0, QGEN_TYPE_Q5_0, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, H100, NULL, &P, NULL, 0);
  check(P.pair == 1 && P.attend_min_ctas == 3, "qwen3-4b q5_0: pairs, registers for 3 CTAs (got %d, %d)", P.pair, P.attend_min_ctas);
  qgen_layout_init(&L, 128, 32, 8, 64, QGEN_TYPE_Q8_0, QGEN_TYPE_Q5_0, QGEN_TYPE_F16, QGEN_TYPE_F16, 0.088, 1);
  qgen_plan_make(&L, H100, NULL, &P, NULL, 0);
  check(P.pair == 1 && P.attend_min_ctas == 3, "q8_0 K, q5_0 V: pairs, registers for the fewer CTAs, 3 (got %d, %d)", P.pair,
        P.attend_min_ctas);

  const char *refused[] = {"groups=0", "groups=17", "stages=1", "stages=9", "groups=x", "groups=", "bulk=2", "selreg=33", "selreg=-1",
                           "chunk=0", "chunk=17", "ctas=0", "ctas=17", "pair=2", "pair=-1", "estsel=2", "persist=0", "persist=5"};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    err[0] = 0;
    check(qgen_tune_parse(refused[i], &t, err, sizeof err) == -1 && strstr(err, "groups=1..16"), "QGEN_TUNE=%s is refused: %s",
          refused[i], err);
  }
  err[0] = 0; /* 17 x 1024 keys: more than the packed counts and registers allow */
  check(qgen_tune_parse("selreg=17", &t, err, sizeof err) == -1 && strstr(err, "at most 16384"),
        "QGEN_TUNE=selreg=17 is refused with sel=1024: %s", err);
  rc = qgen_tune_parse("sel=512,selreg=32", &t, err, sizeof err);
  qgen_plan_make(&L, H100, &t, &P, NULL, 0);
  check(rc == 1 && P.sel_regs == 32 && P.sel_threads == 512, "QGEN_TUNE=sel=512,selreg=32 reaches the plan");
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
