/* eval_int.h — the state of a `qgen eval` run, shared by the files of the engine: eval.c
 * (the run: contexts, trials, workloads on the backend, rows), eval_select.c (the selectors,
 * the fp64 reference and the metrics of each workload) and eval_report.c (the selectors'
 * names). Not for outside harness/.
 */
#ifndef QGEN_EVAL_INT_H
#define QGEN_EVAL_INT_H

#include <stdint.h>
#include <stdio.h>

#include "harness/common.h"
#include "harness/eval.h"
#include "harness/workload.h"
#include "base/cudrv.h"
#include "base/layout.h"

/* The candidate factor of a two-stage selector (2, 4, 8, 16), or 0. */
static inline int rescore_r(int sel) { return sel >= QGEN_SEL_RESCORE2 ? 2 << (sel - QGEN_SEL_RESCORE2) : 0; }

/* The host selectors' reference list set of coverage c: set 0 is every page, then one set
   per (coverage, selector other than quest). */
#define HSET(c, sel) (1 + (c) * (QGEN_SEL_COUNT - 1) + (sel) - 1)
#define N_HSETS(nc) (1 + (nc) * (QGEN_SEL_COUNT - 1))

/* ---- buffers of either backend ---------------------------------------------------------- */

typedef struct {
  qgen_backend be;
  const qgen_cudrv *cu;
} dev;

/* ---- accumulators ------------------------------------------------------------------------- */

/* A copy of the inputs some scores were computed from (qs_memo_hit). */
typedef struct {
  uint8_t *b;
  size_t n, cap;
  int i8, valid;
} qs_memo;

typedef struct {
  int trials, all_found, err_n, err_fp64, errt_n;
  long long pairs, found;
  double mass_sum, mass_min, err_sum, err_max, pages_sum, need_sum, need_max, nmass_sum, errt_sum, errt_max;
} cell;

/* ---- the state of a run ----------------------------------------------------------------------- */

typedef struct {
  const qgen_eval_cfg *cfg;
  qgen_eval_result *res;
  char *err;
  size_t errn;
  int threads;
  dev d;
  /* variants */
  int nv;
  qgen_ctx **ctx;
  qgen_kv **kv;          /* this context's cache of each variant */
  char (*ktype)[16], (*vname)[72];
  int lossless;          /* a variant whose cache stores the inputs exactly, or -1 */
  const qgen_layout *L;  /* the shared shape (variant 0) */
  int D, Hkv, G, Hq, B, R;
  size_t row;            /* floats per token (all KV heads) */
  size_t rowb;           /* in_type bytes per token */
  cell *cells;
  float *proj;           /* [R][D] meanpool's projection */
  float *pq;             /* [Hq][R] the projected query */
  uint8_t *qin, *outb;   /* the query in in_type; one output in out_type */
  /* the context */
  int ci;
  int64_t N, np;
  int ref_on, dense_on;  /* fp64 reference / the backend's dense output as the reference */
  qgen_wl w;
  int have_w;
  float *hk;             /* [N][Hkv][D] base keys (f32, in_type-rounded) */
  float *pm;             /* [np][Hkv][R] projected page means of the base haystack */
  qgen_ptr bk, bv;       /* base haystack rows in in_type (device or host) */
  qgen_ptr pk, pv;       /* patch rows: [0] token 0, [1 + i] recency token i, then planted */
  qgen_ptr dq, dout;     /* query; outputs [n_cov + 1][n_head][D] (the last: dense) */
  /* per-trial and per-workload scratch */
  size_t nspec_max;
  int64_t nwin;          /* 1 + recency window: the trial's rows at the front of the patch */
  int64_t *spec_pos, *spec_src; /* the special tokens and their rows in the patch buffer */
  float *prow_k, *prow_v;
  uint8_t *patch_k, *patch_v;
  int32_t *page_ovr;     /* [np] meanpool: index into pm_ovr of pages with special rows, or -1 */
  float *pm_ovr;
  int n_ovr_trial;
  double *pmax, *plse;   /* [np][Hq] final page statistics */
  double *lse_tot;       /* [Hq] */
  double *wgt;           /* [np][Hq] each page's share of the head's softmax mass */
  double nmass;          /* the needles' mean softmax weight */
  double *score[QGEN_SEL_COUNT]; /* [Hkv][np] page scores per selector (quest: the reference
                                    estimate over the cache's bounds; rescore: unused) */
  double *sketch;        /* [Hkv][np] the two-stage selectors' exact page scores (q4_0 K) */
  int32_t *order[QGEN_SEL_COUNT]; /* [Hkv][np] rankings of the host selectors */
  uint8_t *forced;       /* [np] */
  uint8_t *mark;         /* [n_cov][SEL][Hkv][np] selected pages */
  int32_t *qlist;        /* [n_cov][Hkv][np] Quest's lists */
  int *qcount;           /* [n_cov][Hkv] */
  int32_t *hlist;        /* [N_HSETS(n_cov)][Hkv][np] reference lists: every page, then each
                            host selector's per coverage (HSET) */
  int64_t *hcount;
  double *outs;          /* [n_cov + 1][Hq][D] the backend's outputs */
  double *refo;          /* [N_HSETS(n_cov)][Hq][D] fp64 reference outputs, same sets as hlist */
  double *exact;         /* [Hq][D] dense attention of the unquantized rows */
  uint16_t *bounds;      /* GPU: host copies of the cache's bounds, page table, K and V */
  int32_t *ptab;
  uint8_t *hkv_k, *hkv_v;
  int32_t *hkv_sl;
  qs_memo qmemo[2];      /* the inputs of e->score's quest and quest-i8 scores (qs_memo_hit) */
} ev;

#define CELL(e, v, ti, mi, covi, si)                                                                         \
  (e)->cells[(((((size_t)(e)->ci * (e)->nv + (v)) * (e)->cfg->n_tasks + (ti)) * (e)->cfg->n_margin + (mi)) * \
                (e)->cfg->n_cov + (covi)) * (e)->cfg->n_sel + (si)]

/* calloc that ends the run (exit 2) when memory is out. */
void *eval_xcalloc(size_t n, size_t size);

/* The run's error: the message into e->err, and code returned. */
int eval_fail(ev *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define API(vi, call) QGEN_API_CHECK(e->ctx[vi], call, return eval_fail(e, 2, "qgen eval: %s", why))

/* ---- eval_select.c ---------------------------------------------------------------------- */

/* meanpool's projected mean key of head h over the n rows of one page at k, into out[R]. */
void eval_project_mean(const ev *e, const float *k, int64_t n, int h, float *out);
/* meanpool's projected page means of the base haystack (e->pm). */
void eval_page_means(ev *e);
/* Oracle's and meanpool's page scores and rankings (shared by every variant and coverage). */
void eval_host_rankings(ev *e, const qgen_wl_trial *T, const qgen_wl_plan *P);
/* The scores that depend on variant vi's cache (Quest's, quest-i8's, the two-stage ones'). */
int eval_variant_scores(ev *e, int vi, const qgen_wl_trial *T);
/* Every selector's selection at every coverage into e->mark; returns |forced|. */
int64_t eval_build_selections(ev *e, int vi);
/* The coverage each selector's ranking needs to select every needle, into need. */
void eval_needs(ev *e, const qgen_wl_plan *P, int64_t nf, double *need);
/* The fp64 reference outputs of variant vi's cache (e->refo). */
int eval_reference(ev *e, int vi);
/* Add one workload of variant vi to its cells. */
void eval_score_variant(ev *e, int vi, int ti, int mi, const qgen_wl_plan *P, const double *need, int exact_ok);

#endif
