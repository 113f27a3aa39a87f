/* plan.h — the launch plan of one specialization: tile sizes, pipeline depth, CTA sizes,
 * shared-memory strides and budgets of the five kernels. One C function decides them; the
 * emitter writes them into the generated source as QG_* defines (the templates
 * static_assert what they can) and the runtime launches with the same numbers, so the two
 * sides cannot drift apart.
 */
#ifndef QGEN_PLAN_H
#define QGEN_PLAN_H

#include "base/arch.h"
#include "base/kargs.h" /* QGEN_MAX_BATCH, QGEN_APPEND_MAX */
#include "base/layout.h"

#define QGEN_MAX_SPLITS 64 /* splits of one (row, KV head) list */
#define QGEN_SEL_BINS 2048 /* bins of the first radix digit (the top 11 bits of a score key) */

/* The plan's fields, each once: X(field, unit). unit 1: a compile-time constant of the
   generated unit too, where the emitter writes it as QG_<FIELD> (upper case); 0: read by
   the launcher only. */
#define QGEN_PLAN_FIELDS(X)                                                                     \
  /* attend: MT m-tiles of 16 query heads, MTW of them a consumer warp; WARPS_T token       \
     groups of WARPS_M = MT / MTW consumer warps and one producer warp; a ring of STAGES   \
     (a multiple of WARPS_T) 16-token sub-tiles */                                          \
  X(mt, 1) X(mtw, 1) X(warps_m, 1) X(warps_t, 1) X(attend_threads, 1) X(stages, 1)             \
  X(k_srow, 1) X(v_srow, 1) X(q_srow, 1)  /* shared-memory bytes per K / V / q row */          \
  X(k_tile_bytes, 1) X(v_tile_bytes, 1)   /* one stage: 16 rows each, rounded to 128 bytes */  \
  /* 16-bit tiles are swizzled in pieces of this many bytes of a row (128, or 64 when 128     \
     does not divide it); 0 = quantized slab */                                             \
  X(k_piece, 1) X(v_piece, 1)                                                                  \
  X(attend_smem, 0)      /* dynamic shared memory of attend, bytes */                          \
  X(attend_min_ctas, 1)  /* the CTAs an SM attend's registers are sized for (0: ptxas's choice) */ \
  X(chunk, 1)            /* attend's ring unit: consecutive sub-tiles of a page copied together */ \
  X(merge_rows, 1)       /* split partials merged by qg_combine, this many rows a CTA (0: by attend's last CTA) */ \
  X(merge_threads, 1)    /* qg_combine's CTA size */                                           \
  X(min_split_tokens, 1) /* a split gets at least this many tokens */                          \
  /* estimate: CTA size, pages a CTA per round, staged q row bytes, the staged q (dynamic    \
     shared memory, bytes), the CTAs an SM its registers are sized for (launch bounds) */     \
  X(est_threads, 1) X(est_pages, 1) X(est_qrow, 1) X(est_smem, 1) X(est_min_ctas, 1)           \
  X(sel_threads, 1) X(sel_smem_keys, 1) /* select: CTA size, pages whose keys it keeps in smem */ \
  /* select: keys a thread holds in registers (short lists of <= sel_regs x sel_threads      \
     pages; 0: never) */                                                                    \
  X(sel_regs, 1)                                                                               \
  /* qg_estsel (estimate CTAs that select their list in a cluster; sm_90): keys a thread  */ \
  /* holds (0: not built), and whether the step uses it (where its clusters fit) */          \
  X(estsel_regs, 1) X(estsel, 0)                                                               \
  X(append_threads, 1)                                                                         \
  /* rescore (two-stage specs; jit/emit.c writes them into those units only): CTA size,    \
     ring stages a warp, one m-tile's ring bytes, dynamic shared memory (query + rings) */  \
  X(resc_threads, 0) X(resc_stages, 0) X(resc_tile, 0) X(resc_smem, 0)                        \
  X(pdl, 0)  /* launch select and attend of a sparse step as programmatic dependents (sm_90+) */ \
  X(bulk, 0) /* attend copies quantized slabs by bulk copies (sm_90+), else by cp.async */    \
  X(old_dequant, 1) /* attend dequantizes quantized K/V per element (the earlier path) */      \
  X(swap_ops, 1)    /* attend's swapped operands: S^T = K Q^T, O^T = V^T P^T (attend.cu) */ \
  X(pair, 1)        /* attend's swapped consumers take their group's sub-tiles two a step */ \
  X(persist, 1)     /* attend persistent, N x the splits claimed by a CTA a slot (0: one wave) */

#define QGEN_PLAN_FIELD(field, unit) int field;
typedef struct qgen_plan {
  QGEN_PLAN_FIELDS(QGEN_PLAN_FIELD)
} qgen_plan;
#undef QGEN_PLAN_FIELD

/* QGEN_TUNE, for tuning experiments: comma-separated overrides of the plan (each key once),
 *   groups=N   attend token groups (1..16)       stages=N   attend stages a group (2..8)
 *   smem=KIB   attend stage budget (16..220)
 *   split=T    fewest tokens a split (64..65536) sel=N      select CTA size (128..1024, 2^k)
 *   selreg=N   select's short path: keys a thread holds in registers (0..32, sel x N <= 16384; 0 = off);
 *              below 8 also qg_estsel's (0: not built)
 *   pdl=0|1    programmatic dependent launch
 *   bulk=0|1   attend's quantized slabs by bulk copies (sm_90+) or cp.async
 *   olddq=0|1  attend's quantized and fp8 operands the earlier way (load4/load8: every
 *              element scaled, 4 bytes a row; 1) or oct/tpair (V's scales on P) and fp8 by
 *              ldmatrix (0), for A/B runs; unset: 0 but for q8_0 K with q8_0 V (measured
 *              slower there)
 *   ctas=N     attend's registers sized for N CTAs an SM (1..16; launch bounds)
 *   chunk=N    attend's ring unit: N sub-tiles of a page (1..16; the largest <= N that
 *              divides the page's sub-tiles and the stages, leaving >= 2 chunk stages;
 *              default 4, fp8 K and V 1); 1 also puts the L2 policy on its cp.async copies
 *   swap=0|1   attend's swapped operands where K and V are block-quantized and the group
 *              is at most 8 heads (1, the default there) or the plain ones (0); elsewhere, and
 *              under olddq=1, it changes nothing
 *   pair=0|1   the swapped consumers two sub-tiles a step (1, the default where it applies:
 *              head_dim <= 128, no sparse-V) or one (0); elsewhere it changes nothing
 *   merge=0|1  split partials merged by qg_combine (1; the default for engine modules of
 *              >= 16 query rows) or by attend's last CTA (0), for every module
 *   mtw=N      m-tiles of 16 query rows a consumer warp of attend holds (1..4, at most
 *              the rows' m-tiles; default 2 in an engine module whose K and V are both block types, where it fits,
 *              else 1):
 *              one warp's K and V operands serve them all (the rows rounded up to whole
 *              warps of N m-tiles)
 *   estsel=0|1 a sparse step's estimate CTAs select their list in a cluster (qg_estsel,
 *              built only under 1; where runtime/gpu.c finds the clusters fit; sm_90) or
 *              estimate and select are two launches (0, the default)
 *   persist=N  attend persistent (attend.cu attend_persistent): a CTA a resident slot
 *              claims shares one by one, N (1..4) times the one wave's splits, its ring
 *              running on from share to share; for one-token modules (not under merge=1)
 *              where its shared memory fits; elsewhere it changes nothing
 * All but pdl, bulk and estsel=0 change the generated kernels (and so their cache key); bundles hold the
 * default plan, so qgen_open of a bundle and qgen bundle refuse while one of them is set.
 * qgen_open parses it once (qgen_tune_parse) and keeps the result for its plan and its JIT
 * build; the CLI parses it once at start. Nothing below reads the environment. */
typedef struct qgen_tune {
  int groups, stages, smem_kib, split, sel, selreg, pdl, bulk; /* 0 / -1 (selreg, pdl, bulk): not set */
  int olddq, swap;                                             /* -1: not set */
  int ctas, chunk;                                             /* 0: not set */
  int pair, merge;                                             /* -1: not set */
  int mtw;                                                     /* 0: not set */
  int estsel;                                                  /* -1: not set */
  int persist;                                                 /* 0: not set */
  /* 0: the one-token module; T >= 1: an engine module, whose CTAs hold the group's heads for
     T query tokens (runtime/gpu.c sets it for a step of several tokens, a window or sinks;
     no QGEN_TUNE key) */
  int step;
} qgen_tune;

/* Parse a QGEN_TUNE value (NULL = unset) into *t. Returns 1 when a key that changes the
   kernels is set, 0 when not, -1 (message in err, *t sets nothing) when it is malformed —
   qgen_open refuses to run with it. */
int qgen_tune_parse(const char *s, qgen_tune *t, char *err, size_t errlen);

/* The plan of L for architecture A (base/arch.h) under the overrides t (NULL: none): every
   shared-memory size derived from A's per-CTA limit. Returns 0, or -1 when a kernel cannot
   fit A even at its smallest shape (why, if not NULL, names the kernel, its bytes and the
   limit); *p is filled either way. */
int qgen_plan_make(const qgen_layout *L, const qgen_arch *A, const qgen_tune *t, qgen_plan *p, char *why, size_t whyn);

/* The CTAs an SM attend's registers are sized for when its swapped consumers take two
   sub-tiles a step (plan pair) over a cache of type t; 0: t takes no pairs. */
int qgen_plan_pair_ctas(qgen_type t);

/* The dynamic shared memory kernel `name` ("qg_attend", ...) launches with under P (select's
   at its largest); 0 for a kernel with none. */
int qgen_plan_dynamic_smem(const qgen_plan *P, const char *kernel);

#endif
