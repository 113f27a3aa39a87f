/* eval.c — `qgen eval`: how much of what attention should find does the sparse decode
 * path keep? Needle retrieval, attention-mass recall and output error on the synthetic
 * long-context workloads of workload.h, for three page selectors at equal budget.
 *
 * One run covers contexts x variants (cache types) x tasks x margins x coverages x
 * selectors, `trials` workloads per cell. Per trial:
 *
 *   1. a trial of the workload (qgen_wl_trial): a fresh query, one statistics pass over
 *      the haystack (per page and query head: max logit and log-sum-exp, fp64 from the
 *      generated f32 keys), the recency window and the sink; the rows of token 0 and of
 *      the recency window go to the front of a small patch buffer (once per trial);
 *   2. per task and margin, the planted tokens (qgen_wl_plan) — positions depend on the
 *      trial and the task, not on the margin, so margins are paired; their rows follow
 *      in the patch buffer;
 *   3. per variant, the sequence is rebuilt in a cache of the chosen backend: qgen_reset,
 *      then qgen_append in chunks — the unchanged haystack rows straight from a buffer that
 *      holds the base haystack (on the device for the GPU backend), the rows that differ
 *      from the patch buffer;
 *   4. per coverage, the real decode path: qgen_attend (sparse, that coverage, the spec's
 *      sink and recent) and its page lists (qgen_kv_selection) — "quest", or "2stage-rR"
 *      for a variant with two-stage selection (sparse.rescore, candidates R > 1: the
 *      backend's select -> rescore -> select chain);
 *   5. the same budget for the host selectors, computed from the generated keys:
 *        oracle    pages ranked by their true max logit over the group's query heads —
 *                  the ceiling of any page-level top-K;
 *        meanpool  per page the mean key, projected with a fixed N(0,1) matrix to
 *                  proj_dim (32) dimensions, scored by the projected query (max over the
 *                  group's heads) — the JL-projection block selector of the seed note's
 *                  comparison;
 *      and, asked for by name (previews of selection modes the GPU does not have yet),
 *      from the variant's cache (ref/ref.h):
 *        quest-i8  Quest's bound over the 8-bit form of the cache's bounds (one f16
 *                  offset and scale per page and KV head, codes rounded outward: the
 *                  host's view of what "quest" is on a spec with sparse.bounds = "i8",
 *                  where the decode path itself ranks by it);
 *        rescoreR  (R = 2, 4, 8, 16) two-stage: R times the budget's non-forced pages
 *                  by the Quest bound, the best of those by their exact max logit from
 *                  the cache's K as q4_0 (its own K when it is quantized);
 *      each keeps exactly Quest's page count per KV head: the same forced pages (sink,
 *      recent, last; layout.h) plus the best K_eff - |forced| others (ties: lower page);
 *      with --top-p P (rows "rescoreR-pP"), the mass-adaptive budget instead: per KV head
 *      the fewest of those candidates, best first, whose estimated softmax mass (token
 *      count x exp(scale x exact page max)) reaches P of all the candidates', at most the
 *      budget's (qgen_ref_select_top_p); its row's `pages` is the average read;
 *   5b. with --steps S (selection reuse): S decode steps per workload over the same cache,
 *      the query of step s + 1 drifting from step s's (qgen_wl_drift: an AR(1) walk with
 *      rho = --wl drift, its component along the needles' direction held); every
 *      --reselect N-th step (and step 0) every selector selects again from its own query
 *      (the decode path too), the others reuse those lists (the sink and recent pages are
 *      in each list; the cache does not grow between steps). Every step is scored against
 *      its own query's attention and counts as a trial of its cell (recall and mass
 *      averaged over the steps; no output errors);
 *   6. metrics per selector:
 *        recall       every needle's page selected in every KV head that owns the needle
 *                     (and needle_recall, per (needle, owner head) pair);
 *        mass recall  the sum over the selected pages of the fp64 full-softmax weights of
 *                     the generated keys, averaged over query heads;
 *        rel_err      relative L2 error of the output against dense attention over the
 *                     cache's own contents (the error of the selection alone):
 *                     ctx <= ref_ctx (128K): the fp64 CPU reference (qgen_ref_attend);
 *                     Quest's output is the backend's real output (out_type: an f16 output
 *                     carries ~1e-4 of rounding), oracle's and meanpool's are
 *                     qgen_ref_attend over their lists (fp64); ctx > ref_ctx: Quest against
 *                     the backend's own dense output, the others null;
 *        rel_err_total  the same outputs against dense attention over the unquantized rows
 *                     (selection + cache quantization), when the run holds a lossless
 *                     variant (k/v type = in_type): its reference serves every variant of
 *                     the same workload (that variant is processed first);
 *        need         the coverage the selector's own ranking needs to select every needle
 *                     (Quest's ranking: the reference estimate over the cache's bounds, the
 *                     same rule as the decode path) — how far a miss was, or the slack.
 *
 * Cost model (why the GPU grid fits in minutes): the haystack is generated once per context
 * (--fresh-haystack: per trial) and kept as f32 keys on the host for the statistics pass;
 * the pass (Hkv·G·D multiply-adds per token, fp64 accumulation) runs once per trial and is
 * shared by every task, margin and variant; a workload costs the planting (a few pages),
 * the host selectors (sorts of n pages per KV head), an append of the whole context (GPU:
 * ms) and one attend per coverage. The fp64 reference (about 1 + 2·Σcoverage dense
 * attentions per workload and variant, spread over threads by KV head) dominates at
 * <= ref_ctx. Host work is multi-threaded (pthreads, workload.c's parallel-for); results do
 * not depend on the thread count.
 */
#include "tools/eval.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/commands.h"
#include "tools/common.h"
#include "tools/opts.h"
#include "base/rng.h"
#include "base/util.h"
#include "base/cudrv.h"
#include "runtime/qgen_ext.h"
#include "ref/ref.h"

static const char *const SEL_NAMES[QGEN_SEL_COUNT] = {"quest",    "oracle",   "meanpool", "quest-i8",
                                                       "rescore2", "rescore4", "rescore8", "rescore16"};
const char *qgen_eval_selector_name(int s) { return s >= 0 && s < QGEN_SEL_COUNT ? SEL_NAMES[s] : "?"; }

/* The candidate factor of a two-stage selector (2, 4, 8, 16), or 0. */
static int rescore_r(int sel) { return sel >= QGEN_SEL_RESCORE2 ? 2 << (sel - QGEN_SEL_RESCORE2) : 0; }

const char *qgen_eval_row_selector(int sel, int rescore, double top_p, char *buf, size_t n) {
  if (rescore_r(sel) && top_p < 1) snprintf(buf, n, "%s-p%g", qgen_eval_selector_name(sel), top_p);
  else if (sel == QGEN_SEL_QUEST && rescore > 1 && top_p < 1) snprintf(buf, n, "2stage-r%d-p%g", rescore, top_p);
  else if (sel == QGEN_SEL_QUEST && rescore > 1) snprintf(buf, n, "2stage-r%d", rescore);
  else return qgen_eval_selector_name(sel);
  return buf;
}

/* The host selectors' reference list set of coverage c: set 0 is every page, then one set
   per (coverage, selector other than quest). */
#define HSET(c, sel) (1 + (c) * (QGEN_SEL_COUNT - 1) + (sel) - 1)
#define N_HSETS(nc) (1 + (nc) * (QGEN_SEL_COUNT - 1))

void qgen_eval_cfg_init(qgen_eval_cfg *c) {
  memset(c, 0, sizeof *c);
  c->backend = QGEN_BACKEND_GPU;
  for (int i = 0; i < QGEN_WL_TASK_COUNT; i++) c->tasks[i] = i;
  c->n_tasks = QGEN_WL_TASK_COUNT;
  c->ctx[0] = 16384;
  c->n_ctx = 1;
  c->coverage[0] = 0.25;
  c->n_cov = 1;
  for (int i = 0; i < QGEN_SEL_DEFAULTS; i++) c->selectors[i] = i;
  c->n_sel = QGEN_SEL_DEFAULTS;
  c->margin[0] = 4.0;
  c->n_margin = 1;
  c->v_tau = -1;
  c->top_p = 1;
  c->steps = 1;
  c->reselect = 1;
  c->trials = 10;
  c->seed = 1;
  c->ref_ctx = 131072;
  c->chunk = 65536;
  c->proj_dim = 32;
  c->wl = qgen_wl_defaults();
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "qgen eval: out of memory (%zu x %zu bytes)\n", n, size);
    exit(2);
  }
  return p;
}

/* ---- buffers of either backend ---------------------------------------------------------- */

typedef struct {
  qgen_backend be;
  const qgen_cudrv *cu;
} dev;

static int dalloc(dev *d, qgen_ptr *p, size_t n) {
  if (d->be == QGEN_BACKEND_CPU) {
    void *h = calloc(n ? n : 1, 1);
    *p = (qgen_ptr)(uintptr_t)h;
    return h ? 0 : -1;
  }
  CUdeviceptr x = 0;
  if (d->cu->cuMemAlloc(&x, n ? n : 1) != CUDA_SUCCESS) return -1;
  *p = (qgen_ptr)x;
  return 0;
}
static void dfree(dev *d, qgen_ptr p) {
  if (!p) return;
  if (d->be == QGEN_BACKEND_CPU) free((void *)(uintptr_t)p);
  else d->cu->cuMemFree((CUdeviceptr)p);
}
static int dput(dev *d, qgen_ptr dst, const void *src, size_t n) {
  if (d->be == QGEN_BACKEND_CPU) {
    memcpy((void *)(uintptr_t)dst, src, n);
    return 0;
  }
  return d->cu->cuMemcpyHtoD((CUdeviceptr)dst, src, n) == CUDA_SUCCESS ? 0 : -1;
}
static int dget(dev *d, void *dst, qgen_ptr src, size_t n) {
  if (d->be == QGEN_BACKEND_CPU) {
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return 0;
  }
  return d->cu->cuCtxSynchronize() == CUDA_SUCCESS && d->cu->cuMemcpyDtoH(dst, (CUdeviceptr)src, n) == CUDA_SUCCESS ? 0
                                                                                                              : -1;
}

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

/* ---- page ranking and lists ------------------------------------------------------------------ */

typedef struct {
  double s;
  int32_t p;
} scored;

static int cmp_scored(const void *a, const void *b) { /* best first, ties to the lower page */
  const scored *x = a, *y = b;
  if (x->s != y->s) return x->s > y->s ? -1 : 1;
  return x->p < y->p ? -1 : x->p > y->p;
}

/* The selection of one KV head for a budget: the forced pages plus the first
   keff - nf non-forced pages of `order`. mark[p] = 1 for the chosen; returns the ascending
   list's length. */
static int64_t build_list(const int32_t *order, int64_t n, const uint8_t *forced, int64_t nf, int64_t keff,
                          uint8_t *mark, int32_t *list) {
  if (keff >= n) memset(mark, 1, (size_t)n);
  else {
    memcpy(mark, forced, (size_t)n);
    int64_t need = keff - nf;
    for (int64_t i = 0; i < n && need > 0; i++)
      if (!forced[order[i]]) mark[order[i]] = 1, need--;
  }
  int64_t c = 0;
  for (int64_t p = 0; p < n; p++)
    if (mark[p]) list[c++] = (int32_t)p;
  return c;
}

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

/* ---- threaded helpers ------------------------------------------------------------------------ */

typedef struct {
  ev *e;
  int64_t b0, b1;   /* the token block being generated */
  uint8_t *stage_k, *stage_v; /* in_type rows of [b0, b1) */
} gen_job;
#define GEN_PIECE 1024

static void gen_piece(void *arg, int64_t i) {
  gen_job *j = arg;
  ev *e = j->e;
  const int64_t t0 = j->b0 + i * GEN_PIECE, t1 = t0 + GEN_PIECE < j->b1 ? t0 + GEN_PIECE : j->b1;
  float *v = xcalloc((size_t)(t1 - t0) * e->row, sizeof *v);
  float *k = e->hk + (size_t)t0 * e->row;
  qgen_wl_haystack(&e->w, t0, t1, k, v);
  const qgen_type_traits *it = qgen_type_traits_of(e->L->in_type);
  it->from_f32(k, j->stage_k + (size_t)(t0 - j->b0) * e->rowb, (int64_t)((size_t)(t1 - t0) * e->row));
  it->from_f32(v, j->stage_v + (size_t)(t0 - j->b0) * e->rowb, (int64_t)((size_t)(t1 - t0) * e->row));
  free(v);
}

typedef struct {
  ev *e;
} pm_job;

/* Projected mean key of page p, head h, from rows k of the page (n tokens). */
static void project_mean(const ev *e, const float *k, int64_t n, int h, float *out) {
  double *mean = xcalloc((size_t)e->D, sizeof *mean);
  for (int64_t t = 0; t < n; t++)
    for (int d = 0; d < e->D; d++) mean[d] += k[(size_t)t * e->row + (size_t)h * e->D + d];
  for (int r = 0; r < e->R; r++) {
    double s = 0;
    for (int d = 0; d < e->D; d++) s += (double)e->proj[(size_t)r * e->D + d] * mean[d];
    out[r] = (float)(s / (double)n);
  }
  free(mean);
}

static void pm_page(void *arg, int64_t p) {
  ev *e = ((pm_job *)arg)->e;
  const int64_t t0 = p * e->B, t1 = (p + 1) * e->B < e->N ? (p + 1) * e->B : e->N;
  for (int h = 0; h < e->Hkv; h++)
    project_mean(e, e->hk + (size_t)t0 * e->row, t1 - t0, h, e->pm + ((size_t)p * e->Hkv + h) * e->R);
}

static const float *src_keys(void *ctx, int64_t t0, int64_t t1, float *scratch) {
  (void)t1;
  (void)scratch;
  return ((ev *)ctx)->hk + (size_t)t0 * ((ev *)ctx)->row;
}

/* meanpool's page scores of one KV head: max over the group of (P q_g)·(P mean key) */
typedef struct {
  ev *e;
  const float *pq;
  const int32_t *ovr;
  const float *pm_ovr;
} mp_job;

static void mp_head(void *arg, int64_t h) {
  mp_job *j = arg;
  ev *e = j->e;
  for (int64_t p = 0; p < e->np; p++) {
    const float *m = j->ovr[p] >= 0 ? j->pm_ovr + ((size_t)j->ovr[p] * e->Hkv + h) * e->R
                                     : e->pm + ((size_t)p * e->Hkv + h) * e->R;
    double b = -INFINITY;
    for (int g = 0; g < e->G; g++) {
      const float *x = j->pq + (size_t)(h * e->G + g) * e->R;
      double s = 0;
      for (int r = 0; r < e->R; r++) s += (double)x[r] * m[r];
      if (s > b) b = s;
    }
    e->score[QGEN_SEL_MEANPOOL][(size_t)h * e->np + p] = b;
  }
}

typedef struct {
  ev *e;
  int sel;
} rank_job;

static void rank_head(void *arg, int64_t h) {
  rank_job *j = arg;
  ev *e = j->e;
  scored *s = xcalloc((size_t)e->np, sizeof *s);
  const double *sc = e->score[j->sel] + (size_t)h * e->np;
  for (int64_t p = 0; p < e->np; p++) s[p].s = sc[p], s[p].p = (int32_t)p;
  qsort(s, (size_t)e->np, sizeof *s, cmp_scored);
  int32_t *o = e->order[j->sel] + (size_t)h * e->np;
  for (int64_t p = 0; p < e->np; p++) o[p] = s[p].p;
  free(s);
}

/* fp64 reference attention, one (list set, KV head) per item */
typedef struct {
  const ev *e;
  const qgen_layout *L;    /* the variant's layout (its cache types) */
  const qgen_layout *L0;   /* the same without sparse-V: set 0, the dense reference */
  const qgen_kvmem *m;
  const void *q;
  int32_t *const *lists;   /* [set * Hkv + h] */
  const int64_t *counts;   /* [set * Hkv + h] */
  double *out;             /* [set][Hq][D] */
} ref_job;

static void ref_item(void *arg, int64_t i) {
  ref_job *j = arg;
  const ev *e = j->e;
  const int set = (int)(i / e->Hkv), h = (int)(i % e->Hkv);
  const int32_t *lp[32];
  int64_t cnt[32];
  for (int x = 0; x < e->Hkv; x++) lp[x] = j->lists[(size_t)set * e->Hkv + h], cnt[x] = x == h ? j->counts[(size_t)set * e->Hkv + h] : 0;
  double *o = xcalloc((size_t)e->Hq * e->D, sizeof *o);
  qgen_ref_attend(set == 0 ? j->L0 : j->L, j->m, 0, j->q, lp, cnt, NULL, o);
  memcpy(j->out + ((size_t)set * e->Hq + (size_t)h * e->G) * e->D, o + (size_t)h * e->G * e->D,
         (size_t)e->G * e->D * sizeof *o);
  free(o);
}

/* Quest's page scores (layout.h) from the cache's bounds: the reference estimate, one (KV
   head, run of pages) per item, so more threads than KV heads share the work. */
typedef struct {
  ev *e;
  const uint16_t *bounds;
  const int32_t *pt;
  const float *q;
  int sel; /* quest, or quest-i8 */
  int i8;  /* over the 8-bit form of the bounds: quest-i8, and quest on a spec with bounds = "i8" */
  int64_t runs; /* runs of pages a head */
} qs_job;

static void quest_head(void *arg, int64_t item) {
  qs_job *j = arg;
  ev *e = j->e;
  const int D = e->D;
  const int64_t h = item / j->runs, r = item % j->runs, p0 = e->np * r / j->runs, p1 = e->np * (r + 1) / j->runs;
  double *lo = xcalloc((size_t)D, sizeof *lo), *hi = xcalloc((size_t)D, sizeof *hi);
  uint8_t *codes = xcalloc((size_t)D, 2);
  for (int64_t p = p0; p < p1; p++) {
    const uint16_t *b = j->bounds + ((size_t)j->pt[p] * e->Hkv + (size_t)h) * 2 * D;
    uint16_t so[2];
    if (!j->i8)
      for (int d = 0; d < D; d++) lo[d] = qgen_f16_to_f32(b[d]), hi[d] = qgen_f16_to_f32(b[D + d]);
    else if (qgen_ref_bounds_i8(b, D, so, codes) == 0)
      qgen_ref_bounds_i8_decode(so, codes, D, lo, hi);
    else { /* no 8-bit form: always attended */
      e->score[j->sel][(size_t)h * e->np + p] = INFINITY;
      continue;
    }
    double best = -INFINITY;
    for (int g = 0; g < e->G; g++) {
      const float *q = j->q + (size_t)(h * e->G + g) * D;
      double sum = 0;
      for (int d = 0; d < D; d++) sum += q[d] > 0 ? q[d] * hi[d] : q[d] < 0 ? q[d] * lo[d] : 0.0;
      if (sum > best || sum != sum) best = sum;
    }
    e->score[j->sel][(size_t)h * e->np + p] = best;
  }
  free(lo);
  free(hi);
  free(codes);
}

/* The two-stage selectors' exact page scores from variant vi's K, one (KV head, run of
   pages) per item, so every thread has work when there are fewer heads than threads. */
typedef struct {
  ev *e;
  const qgen_layout *L;
  const qgen_kvmem *m;
  int64_t runs;
} sk_job;

static void sketch_head(void *arg, int64_t item) {
  sk_job *j = arg;
  const int64_t np = j->e->np, h = item / j->runs, r = item % j->runs, p0 = np * r / j->runs, p1 = np * (r + 1) / j->runs;
  uint8_t *want = xcalloc((size_t)np, 1);
  memset(want + p0, 1, (size_t)(p1 - p0));
  qgen_ref_sketch_scores(j->L, j->m, 0, j->e->qin, (int)h, want, j->e->sketch + (size_t)h * np);
  free(want);
}

/* The smallest coverage at which the ranking by `score` selects every needle of P in every
   owner head: a needle page of non-forced rank r (0-based; better = higher score, ties to
   the lower page) is selected iff ceil(c·n) >= nf + r + 1. */
static double coverage_needed(const ev *e, const double *score, const qgen_wl_plan *P, const uint8_t *forced,
                              int64_t nf) {
  double need = 0;
  for (int j = 0; j < P->n; j++) {
    if (!P->at[j].needle) continue;
    const int64_t p = P->at[j].pos / e->B;
    for (int h = 0; h < e->Hkv; h++) {
      if (!(P->at[j].owners >> h & 1)) continue;
      if (forced[p]) continue;
      const double *s = score + (size_t)h * e->np;
      int64_t r = 0;
      for (int64_t x = 0; x < e->np; x++)
        if (!forced[x] && x != p && (s[x] > s[p] || (s[x] == s[p] && x < p) || (s[x] != s[x] && s[p] == s[p]))) r++;
      const double c = (double)(nf + r + 1) / (double)e->np;
      if (c > need) need = c;
    }
  }
  return need;
}

static double rel_l2(const double *x, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (x[i] != x[i]) return INFINITY;
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- the run ----------------------------------------------------------------------------------- */

static double now_s(void) { return qgen_now_ms() * 1e-3; }

static int fail(ev *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ev *e, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->err, e->errn, fmt, ap);
  va_end(ap);
  return code;
}

#define API(vi, call) QGEN_API_CHECK(e->ctx[vi], call, return fail(e, 2, "qgen eval: %s", why))

/* Whether a cache of type cache holds every value of type in unchanged. */
static int stores_exactly(qgen_type cache, qgen_type in) {
  return cache == in || qgen_type_traits_of(cache)->exact;
}

/* Open every variant; they must share the shape. */
static int open_variants(ev *e) {
  const qgen_eval_cfg *cfg = e->cfg;
  e->nv = cfg->n_variants > 0 ? cfg->n_variants : 1;
  e->ctx = xcalloc((size_t)e->nv, sizeof *e->ctx);
  e->kv = xcalloc((size_t)e->nv, sizeof *e->kv);
  e->ktype = xcalloc((size_t)e->nv, sizeof *e->ktype);
  e->vname = xcalloc((size_t)e->nv, sizeof *e->vname);
  for (int vi = 0; vi < e->nv; vi++) {
    qgen_open_opts o = {cfg->backend, 0, cfg->n_variants > 0 ? cfg->variants[vi] : NULL, NULL};
    qgen_status st = qgen_opts_open(&e->ctx[vi], cfg->spec, &o, cfg->v_tau);
    if (st != QGEN_OK) return fail(e, qgen_opts_open_exit(st), "qgen eval: %s", qgen_error(e->ctx[vi]));
    qgen_info info;
    qgen_get_info(e->ctx[vi], &info);
    const qgen_layout *L = qgen_ext_layout(e->ctx[vi]), *L0 = qgen_ext_layout(e->ctx[0]);
    if (!L->sparse) return fail(e, 1, "qgen eval: spec %s is dense; the evaluation needs a sparse spec", info.name);
    if (L->head_dim != L0->head_dim || L->n_head != L0->n_head || L->n_head_kv != L0->n_head_kv ||
        L->block != L0->block || L->in_type != L0->in_type || L->out_type != L0->out_type || L->scale != L0->scale)
      return fail(e, 1, "qgen eval: variants %s and %s differ in shape; evaluate them in separate runs",
                  e->vname[0], info.name);
    /* the k_type column: the cache type, "+i8" with 8-bit page bounds (an f16/i8 A/B in one run) */
    snprintf(e->ktype[vi], sizeof e->ktype[vi], "%s%s", info.k_type, L->bounds_i8 ? "+i8" : "");
    snprintf(e->vname[vi], sizeof e->vname[vi], "%s", info.name);
  }
  e->lossless = -1;
  for (int v = e->nv - 1; v >= 0; v--) {
    const qgen_layout *L = qgen_ext_layout(e->ctx[v]);
    if (stores_exactly(L->k_type, L->in_type) && stores_exactly(L->v_type, L->in_type)) e->lossless = v;
  }
  snprintf(e->res->backend, sizeof e->res->backend, "%s", cfg->backend == QGEN_BACKEND_CPU ? "cpu" : "gpu");
  if (cfg->backend == QGEN_BACKEND_GPU) {
    qgen_info info;
    qgen_get_info(e->ctx[0], &info);
    snprintf(e->res->device, sizeof e->res->device, "%s", info.device_name);
    e->d.cu = qgen_cudrv_get(NULL);
  }
  e->L = qgen_ext_layout(e->ctx[0]);
  e->D = e->L->head_dim, e->Hkv = e->L->n_head_kv, e->G = e->L->group, e->Hq = e->L->n_head, e->B = e->L->block;
  e->row = (size_t)e->Hkv * e->D;
  e->rowb = (size_t)e->Hkv * e->L->in_row_bytes;
  if (e->Hkv > 32) return fail(e, 1, "qgen eval: more than 32 KV heads");
  return 0;
}

/* Release everything of the current context (safe on a partial setup). */
static void ctx_end(ev *e) {
  if (e->have_w) qgen_wl_free(&e->w), e->have_w = 0;
  for (int v = 0; v < e->nv; v++)
    if (e->kv && e->kv[v]) qgen_cache_destroy(e->kv[v]), e->kv[v] = NULL;
  qgen_ptr *bufs[] = {&e->bk, &e->bv, &e->pk, &e->pv, &e->dq, &e->dout};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dfree(&e->d, *bufs[i]), *bufs[i] = 0;
  void **p[] = {(void **)&e->hk,      (void **)&e->pm,      (void **)&e->spec_pos, (void **)&e->spec_src,
                (void **)&e->prow_k,  (void **)&e->prow_v,  (void **)&e->patch_k,  (void **)&e->patch_v,
                (void **)&e->page_ovr, (void **)&e->pm_ovr, (void **)&e->pmax,     (void **)&e->plse,
                (void **)&e->lse_tot, (void **)&e->wgt,     (void **)&e->forced,   (void **)&e->mark,
                (void **)&e->qlist,   (void **)&e->qcount,  (void **)&e->hlist,    (void **)&e->hcount,
                (void **)&e->outs,    (void **)&e->refo,    (void **)&e->exact,    (void **)&e->bounds,
                (void **)&e->ptab,    (void **)&e->hkv_k,   (void **)&e->hkv_v,    (void **)&e->hkv_sl,
                (void **)&e->sketch};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(*p[i]), *p[i] = NULL;
  for (int s = 0; s < QGEN_SEL_COUNT; s++) free(e->score[s]), free(e->order[s]), e->score[s] = NULL, e->order[s] = NULL;
  for (int s = 0; s < 2; s++) free(e->qmemo[s].b), e->qmemo[s] = (qs_memo){0};
}

/* Buffers and caches of context ci. */
static int ctx_begin(ev *e, int ci) {
  const qgen_eval_cfg *cfg = e->cfg;
  const int nc = cfg->n_cov;
  e->ci = ci;
  e->N = cfg->ctx[ci];
  e->np = qgen_pages_of(e->N, e->B);
  e->ref_on = e->N <= cfg->ref_ctx && cfg->steps == 1; /* the later steps have no outputs */
  e->dense_on = !e->ref_on && cfg->ref_ctx >= 0 && cfg->steps == 1;
  const int64_t N = e->N, np = e->np;
  e->nspec_max = (size_t)cfg->wl.recent_window + 2 + QGEN_WL_MAX_PLANTED;
  e->hk = malloc((size_t)N * e->row * sizeof *e->hk);
  if (!e->hk)
    return fail(e, 2, "qgen eval: no host memory for %lld tokens of keys (%.1f GiB)", (long long)N,
                (double)N * e->row * 4 / (1u << 30));
  if (dalloc(&e->d, &e->bk, (size_t)N * e->rowb) || dalloc(&e->d, &e->bv, (size_t)N * e->rowb) ||
      dalloc(&e->d, &e->pk, e->nspec_max * e->rowb) || dalloc(&e->d, &e->pv, e->nspec_max * e->rowb) ||
      dalloc(&e->d, &e->dq, e->L->q_bytes) || dalloc(&e->d, &e->dout, (size_t)(nc + 1) * e->L->out_bytes))
    return fail(e, 2, "qgen eval: cannot allocate the buffers of a %lld-token context", (long long)N);
  for (int vi = 0; vi < e->nv; vi++) API(vi, qgen_cache_create(e->ctx[vi], &e->kv[vi], 1, N));
  e->pm = xcalloc((size_t)np * e->Hkv * e->R, sizeof *e->pm);
  e->spec_pos = xcalloc(e->nspec_max, sizeof *e->spec_pos);
  e->spec_src = xcalloc(e->nspec_max, sizeof *e->spec_src);
  e->prow_k = xcalloc(e->nspec_max * e->row, sizeof *e->prow_k);
  e->prow_v = xcalloc(e->nspec_max * e->row, sizeof *e->prow_v);
  e->patch_k = xcalloc(e->nspec_max * e->rowb, 1);
  e->patch_v = xcalloc(e->nspec_max * e->rowb, 1);
  e->page_ovr = xcalloc((size_t)np, sizeof *e->page_ovr);
  e->pm_ovr = xcalloc(e->nspec_max * e->Hkv * e->R, sizeof *e->pm_ovr); /* >= pages holding specials */
  e->pmax = xcalloc((size_t)np * e->Hq, sizeof *e->pmax);
  e->plse = xcalloc((size_t)np * e->Hq, sizeof *e->plse);
  e->lse_tot = xcalloc((size_t)e->Hq, sizeof *e->lse_tot);
  e->wgt = xcalloc((size_t)np * e->Hq, sizeof *e->wgt);
  for (int s = 0; s < QGEN_SEL_COUNT; s++) {
    e->score[s] = xcalloc((size_t)e->Hkv * np, sizeof(double));
    e->order[s] = xcalloc((size_t)e->Hkv * np, sizeof(int32_t));
  }
  e->forced = xcalloc((size_t)np, 1);
  e->mark = xcalloc((size_t)nc * QGEN_SEL_COUNT * e->Hkv * np, 1);
  e->qlist = xcalloc((size_t)nc * e->Hkv * np, sizeof *e->qlist);
  e->qcount = xcalloc((size_t)nc * e->Hkv, sizeof *e->qcount);
  e->hlist = xcalloc((size_t)N_HSETS(nc) * e->Hkv * np, sizeof *e->hlist);
  e->hcount = xcalloc((size_t)N_HSETS(nc) * e->Hkv, sizeof *e->hcount);
  e->sketch = xcalloc((size_t)e->Hkv * np, sizeof *e->sketch);
  e->outs = xcalloc((size_t)(nc + 1) * e->Hq * e->D, sizeof *e->outs);
  e->refo = xcalloc((size_t)N_HSETS(nc) * e->Hq * e->D, sizeof *e->refo);
  e->exact = xcalloc((size_t)e->Hq * e->D, sizeof *e->exact);
  e->bounds = xcalloc((size_t)np * e->L->bounds_page_bytes, 1);
  e->ptab = xcalloc((size_t)np, sizeof *e->ptab);
  int rescore = 0;
  for (int si = 0; si < cfg->n_sel; si++) rescore |= rescore_r(cfg->selectors[si]) > 0;
  if ((e->ref_on || rescore) && cfg->backend == QGEN_BACKEND_GPU) {
    size_t kb = 0, vb = 0;
    for (int v = 0; v < e->nv; v++) {
      if (qgen_kv_size(e->kv[v], QGEN_KV_K) > kb) kb = qgen_kv_size(e->kv[v], QGEN_KV_K);
      if (qgen_kv_size(e->kv[v], QGEN_KV_V) > vb) vb = qgen_kv_size(e->kv[v], QGEN_KV_V);
    }
    e->hkv_k = malloc(kb);
    e->hkv_v = malloc(vb);
    e->hkv_sl = xcalloc(1, sizeof *e->hkv_sl);
    if (!e->hkv_k || !e->hkv_v) return fail(e, 2, "qgen eval: no host memory for a copy of the cache");
  }
  return 0;
}

/* Generate the base haystack of the context: f32 keys on the host, K and V rows in in_type
   in the base buffers, meanpool's projected page means. */
static int make_haystack(ev *e, uint64_t seed) {
  const double th = now_s();
  const int64_t N = e->N;
  qgen_wl_shape shape = {e->D, e->Hq, e->Hkv, e->B, e->L->scale, N, e->L->in_type};
  if (e->have_w) qgen_wl_free(&e->w), e->have_w = 0;
  if (qgen_wl_init(&e->w, &shape, &e->cfg->wl, seed, e->err, e->errn) != 0) return 1;
  e->have_w = 1;
  const int64_t blk = 65536;
  uint8_t *sk = NULL, *sv = NULL;
  if (e->cfg->backend == QGEN_BACKEND_GPU) sk = xcalloc((size_t)blk * e->rowb, 1), sv = xcalloc((size_t)blk * e->rowb, 1);
  int rc = 0;
  for (int64_t b0 = 0; b0 < N && !rc; b0 += blk) {
    gen_job j = {e, b0, b0 + blk < N ? b0 + blk : N, sk, sv};
    if (!sk) { /* CPU backend: the base buffers are host memory */
      j.stage_k = (uint8_t *)(uintptr_t)e->bk + (size_t)b0 * e->rowb;
      j.stage_v = (uint8_t *)(uintptr_t)e->bv + (size_t)b0 * e->rowb;
    }
    qgen_wl_parallel((j.b1 - j.b0 + GEN_PIECE - 1) / GEN_PIECE, e->threads, gen_piece, &j);
    if (sk && (dput(&e->d, e->bk + (size_t)b0 * e->rowb, sk, (size_t)(j.b1 - b0) * e->rowb) ||
               dput(&e->d, e->bv + (size_t)b0 * e->rowb, sv, (size_t)(j.b1 - b0) * e->rowb)))
      rc = fail(e, 2, "qgen eval: uploading the haystack failed");
  }
  free(sk);
  free(sv);
  pm_job pj = {e};
  qgen_wl_parallel(e->np, e->threads, pm_page, &pj);
  e->res->t_haystack += now_s() - th;
  return rc;
}

/* After qgen_wl_trial_init: upload the query, project it, and put the trial's special rows
   (token 0, the recency window) at the front of the patch buffer; meanpool gets the means
   of the pages holding them. */
/* The query q in in_type (qin, and on the backend: dq) and meanpool's projection of it. */
static int set_query(ev *e, const float *q) {
  qgen_type_traits_of(e->L->in_type)->from_f32(q, e->qin, (int64_t)e->Hq * e->D);
  if (dput(&e->d, e->dq, e->qin, e->L->q_bytes)) return fail(e, 2, "qgen eval: uploading the query failed");
  for (int g = 0; g < e->Hq; g++)
    for (int r = 0; r < e->R; r++) {
      double s = 0;
      for (int d = 0; d < e->D; d++) s += (double)e->proj[(size_t)r * e->D + d] * q[(size_t)g * e->D + d];
      e->pq[(size_t)g * e->R + r] = (float)s;
    }
  return 0;
}

static int trial_begin(ev *e, const qgen_wl_trial *T) {
  const int64_t N = e->N, W = e->w.window;
  const qgen_type_traits *it = qgen_type_traits_of(e->L->in_type);
  if (set_query(e, T->q)) return 2;
  e->nwin = 1 + W;
  qgen_wl_rows(T, NULL, 0, 1, e->prow_k, e->prow_v);
  if (W > 0) qgen_wl_rows(T, NULL, N - W, N, e->prow_k + e->row, e->prow_v + e->row);
  it->from_f32(e->prow_k, e->patch_k, (int64_t)((size_t)e->nwin * e->row));
  it->from_f32(e->prow_v, e->patch_v, (int64_t)((size_t)e->nwin * e->row));
  if (dput(&e->d, e->pk, e->patch_k, (size_t)e->nwin * e->rowb) || dput(&e->d, e->pv, e->patch_v, (size_t)e->nwin * e->rowb))
    return fail(e, 2, "qgen eval: uploading the patch rows failed");
  for (int64_t p = 0; p < e->np; p++) e->page_ovr[p] = -1;
  e->n_ovr_trial = 0;
  for (int64_t p = 0; p < e->np; p++) {
    if (!(p == 0 || (p + 1) * e->B > N - W)) continue;
    e->page_ovr[p] = e->n_ovr_trial;
    const int64_t a = p * e->B, b = (p + 1) * e->B < N ? (p + 1) * e->B : N;
    float *k = xcalloc((size_t)(b - a) * e->row, sizeof *k);
    qgen_wl_rows(T, NULL, a, b, k, NULL);
    for (int h = 0; h < e->Hkv; h++) project_mean(e, k, b - a, h, e->pm_ovr + ((size_t)e->n_ovr_trial * e->Hkv + h) * e->R);
    free(k);
    e->n_ovr_trial++;
  }
  return 0;
}

static void set_weights(ev *e, const qgen_wl_trial *T, const qgen_wl_plan *P);

/* After qgen_wl_plant: the planted rows after the trial's in the patch buffer, where every
   special token's row is (spec_src), the final page statistics, each page's share of the
   softmax mass, and the needles' own share. Returns the number of special tokens. */
static int64_t workload_begin(ev *e, const qgen_wl_trial *T, const qgen_wl_plan *P) {
  const int64_t N = e->N, W = e->w.window, nwin = e->nwin;
  const qgen_type_traits *it = qgen_type_traits_of(e->L->in_type);
  const int64_t nspec = qgen_wl_specials(T, P, e->spec_pos);
  for (int j = 0; j < P->n; j++)
    qgen_wl_rows(T, P, P->at[j].pos, P->at[j].pos + 1, e->prow_k + (size_t)(nwin + j) * e->row,
                 e->prow_v + (size_t)(nwin + j) * e->row);
  it->from_f32(e->prow_k + (size_t)nwin * e->row, e->patch_k + (size_t)nwin * e->rowb, (int64_t)((size_t)P->n * e->row));
  it->from_f32(e->prow_v + (size_t)nwin * e->row, e->patch_v + (size_t)nwin * e->rowb, (int64_t)((size_t)P->n * e->row));
  if (dput(&e->d, e->pk + (size_t)nwin * e->rowb, e->patch_k + (size_t)nwin * e->rowb, (size_t)P->n * e->rowb) ||
      dput(&e->d, e->pv + (size_t)nwin * e->rowb, e->patch_v + (size_t)nwin * e->rowb, (size_t)P->n * e->rowb)) {
    fail(e, 2, "qgen eval: uploading the patch rows failed");
    return -1;
  }
  for (int64_t i = 0, j = 0; i < nspec; i++) {
    const int64_t t = e->spec_pos[i];
    e->spec_src[i] = t == 0 ? 0 : t >= N - W ? 1 + (t - (N - W)) : nwin + j++;
  }
  qgen_wl_page_stats(T, P, e->pmax, e->plse);
  set_weights(e, T, P);
  return nspec;
}

/* From the page statistics in pmax/plse (of T's query): each page's share of the softmax
   mass, and the needles' own share. */
static void set_weights(ev *e, const qgen_wl_trial *T, const qgen_wl_plan *P) {
  const int64_t np = e->np;
  for (int g = 0; g < e->Hq; g++) {
    double m = -INFINITY, z = 0;
    for (int64_t p = 0; p < np; p++) m = e->plse[(size_t)p * e->Hq + g] > m ? e->plse[(size_t)p * e->Hq + g] : m;
    for (int64_t p = 0; p < np; p++) z += exp(e->plse[(size_t)p * e->Hq + g] - m);
    e->lse_tot[g] = m + log(z);
  }
  for (int64_t p = 0; p < np; p++)
    for (int g = 0; g < e->Hq; g++) e->wgt[(size_t)p * e->Hq + g] = exp(e->plse[(size_t)p * e->Hq + g] - e->lse_tot[g]);
  double *l = xcalloc((size_t)e->Hq, sizeof *l), s = 0;
  int n = 0;
  for (int j = 0; j < P->n; j++) {
    if (!P->at[j].needle) continue;
    qgen_wl_logits(T, P->rows + (size_t)j * e->row, l);
    for (int g = 0; g < e->Hq; g++)
      if (P->at[j].owners >> (g / e->G) & 1) s += exp(l[g] - e->lse_tot[g]), n++;
  }
  free(l);
  e->nmass = n ? s / n : 0;
}

/* Oracle's and meanpool's page scores and rankings (shared by every variant and coverage). */
static void host_rankings(ev *e, const qgen_wl_trial *T, const qgen_wl_plan *P) {
  const int64_t N = e->N, np = e->np;
  for (int si = 0; si < e->cfg->n_sel; si++) {
    const int sel = e->cfg->selectors[si];
    if (sel != QGEN_SEL_ORACLE && sel != QGEN_SEL_MEANPOOL) continue; /* the others read the cache */
    if (sel == QGEN_SEL_ORACLE) {
      for (int h = 0; h < e->Hkv; h++)
        for (int64_t p = 0; p < np; p++) {
          double b = -INFINITY;
          for (int g = 0; g < e->G; g++) {
            const double x = e->pmax[(size_t)p * e->Hq + h * e->G + g];
            if (x > b) b = x;
          }
          e->score[sel][(size_t)h * np + p] = b;
        }
    } else { /* meanpool: planted pages get the means of their final rows too */
      for (int j = 0; j < P->n; j++) {
        const int64_t p = P->at[j].pos / e->B, a = p * e->B, b = (p + 1) * e->B < N ? (p + 1) * e->B : N;
        e->page_ovr[p] = e->n_ovr_trial + j;
        float *k = xcalloc((size_t)(b - a) * e->row, sizeof *k);
        qgen_wl_rows(T, P, a, b, k, NULL);
        for (int h = 0; h < e->Hkv; h++)
          project_mean(e, k, b - a, h, e->pm_ovr + ((size_t)(e->n_ovr_trial + j) * e->Hkv + h) * e->R);
        free(k);
      }
      mp_job mj = {e, e->pq, e->page_ovr, e->pm_ovr};
      qgen_wl_parallel(e->Hkv, e->threads, mp_head, &mj);
      for (int j = 0; j < P->n; j++) e->page_ovr[P->at[j].pos / e->B] = -1;
    }
    rank_job rj = {e, sel};
    qgen_wl_parallel(e->Hkv, e->threads, rank_head, &rj);
  }
}

/* Rebuild sequence 0 of variant vi's cache: base rows from the haystack buffer, the special
   tokens' rows from the patch buffer (a run of them in one call when stored in order). */
static int append_sequence(ev *e, int vi, int64_t nspec) {
  const int seq = 0;
  qgen_kv *kv = e->kv[vi];
  API(vi, qgen_reset(kv, seq));
  for (int64_t t = 0, si = 0; t < e->N;) {
    int n;
    qgen_ptr k, v;
    if (si < nspec && e->spec_pos[si] == t) {
      int64_t r = si;
      while (r + 1 < nspec && e->spec_pos[r + 1] == e->spec_pos[r] + 1 && e->spec_src[r + 1] == e->spec_src[r] + 1 &&
             r + 1 - si < e->cfg->chunk)
        r++;
      n = (int)(r - si + 1);
      k = e->pk + (size_t)e->spec_src[si] * e->rowb, v = e->pv + (size_t)e->spec_src[si] * e->rowb;
      si = r + 1;
    } else {
      const int64_t next = si < nspec ? e->spec_pos[si] : e->N;
      n = (int)(next - t < e->cfg->chunk ? next - t : e->cfg->chunk);
      k = e->bk + (size_t)t * e->rowb, v = e->bv + (size_t)t * e->rowb;
    }
    API(vi, qgen_append(kv, &seq, 1, &n, k, v, NULL));
    t += n;
  }
  return 0;
}

/* The real decode path at every coverage (+ dense when it is the reference): outputs into
   outs, Quest's lists into qlist/qcount. */
static int decode(ev *e, int vi) {
  const int seq = 0, nc = e->cfg->n_cov;
  qgen_kv *kv = e->kv[vi];
  const qgen_attend_opts defs = qgen_attend_defaults(e->ctx[vi]);
  for (int c = 0; c < nc; c++) {
    qgen_attend_opts ao = defs;
    ao.mode = QGEN_ATTEND_SPARSE, ao.coverage = e->cfg->coverage[c], ao.budget = 0;
    API(vi, qgen_attend(kv, &seq, 1, e->dq, e->dout + (size_t)c * e->L->out_bytes, &ao, NULL));
    API(vi, qgen_kv_selection(kv, seq, e->qlist + (size_t)c * e->Hkv * e->np, e->qcount + (size_t)c * e->Hkv));
  }
  if (e->dense_on) {
    qgen_attend_opts ao = defs;
    ao.mode = QGEN_ATTEND_DENSE;
    API(vi, qgen_attend(kv, &seq, 1, e->dq, e->dout + (size_t)nc * e->L->out_bytes, &ao, NULL));
  }
  const qgen_type_traits *ot = qgen_type_traits_of(e->L->out_type);
  float *f = xcalloc((size_t)e->Hq * e->D, sizeof *f);
  for (int c = 0; c < nc + e->dense_on; c++) {
    if (dget(&e->d, e->outb, e->dout + (size_t)c * e->L->out_bytes, e->L->out_bytes)) {
      free(f);
      return fail(e, 2, "qgen eval: reading the output failed");
    }
    ot->to_f32(e->outb, f, (int64_t)e->Hq * e->D);
    for (size_t i = 0; i < (size_t)e->Hq * e->D; i++) e->outs[(size_t)c * e->Hq * e->D + i] = f[i];
  }
  free(f);
  return 0;
}

/* Every selector's selection at every coverage into mark (and the host selectors' lists
   into hlist, sets HSET(c, sel)); returns |forced|. The variant's scores are in place
   (variant_scores). */
static int64_t build_selections(ev *e, int vi) {
  const qgen_attend_opts d0 = qgen_attend_defaults(e->ctx[vi]);
  const int64_t np = e->np;
  qgen_budget bud = {QGEN_BUDGET_COVERAGE, 0, 0, d0.sink, d0.recent};
  const int64_t nf = qgen_forced_pages(&bud, e->N, e->B, e->forced);
  for (int c = 0; c < e->cfg->n_cov; c++) {
    bud.coverage = e->cfg->coverage[c];
    const int64_t keff = qgen_budget_pages(&bud, np, nf, e->B);
    for (int si = 0; si < e->cfg->n_sel; si++) {
      const int sel = e->cfg->selectors[si];
      for (int h = 0; h < e->Hkv; h++) {
        uint8_t *mk = e->mark + (((size_t)c * QGEN_SEL_COUNT + sel) * e->Hkv + h) * np;
        if (sel == QGEN_SEL_QUEST) {
          memset(mk, 0, (size_t)np);
          const int32_t *l = e->qlist + ((size_t)c * e->Hkv + h) * np;
          const int cnt = e->qcount[(size_t)c * e->Hkv + h];
          for (int i = 0; i < cnt; i++)
            if (l[i] >= 0 && l[i] < np) mk[l[i]] = 1;
          /* a top-p cut reads fewer pages than the budget by design */
          if (cnt != keff && !(cnt < keff && qgen_ext_layout(e->ctx[vi])->top_p < 1) && e->cfg->log)
            fprintf(e->cfg->log, "qgen eval: note: quest selected %d pages in head %d, the budget says %lld\n", cnt, h,
                    (long long)keff);
        } else if (rescore_r(sel)) {
          int32_t *l = e->hlist + ((size_t)HSET(c, sel) * e->Hkv + h) * np;
          const int64_t cnt = qgen_ref_select_top_p(&bud, e->N, e->B, rescore_r(sel), e->cfg->top_p, e->L->scale,
                                                    e->score[QGEN_SEL_QUEST] + (size_t)h * np, e->sketch + (size_t)h * np, l);
          e->hcount[(size_t)HSET(c, sel) * e->Hkv + h] = cnt;
          memset(mk, 0, (size_t)np);
          for (int64_t i = 0; i < cnt; i++) mk[l[i]] = 1;
        } else {
          e->hcount[(size_t)HSET(c, sel) * e->Hkv + h] = build_list(e->order[sel] + (size_t)h * np, np, e->forced, nf, keff,
                                                                    mk, e->hlist + ((size_t)HSET(c, sel) * e->Hkv + h) * np);
        }
      }
    }
  }
  return nf;
}

/* Variant vi's cache as host memory (*m): the CPU backend's own; on the GPU, K, V, the
   page table and the length read back into hm (no bounds). */
static int host_cache(ev *e, int vi, qgen_kvmem *hm, const qgen_kvmem **m) {
  const int64_t np = e->np;
  qgen_kv *kv = e->kv[vi];
  *m = qgen_ext_host_cache(kv);
  if (e->cfg->backend == QGEN_BACKEND_GPU) {
    API(vi, qgen_kv_read(kv, QGEN_KV_K, e->hkv_k, qgen_kv_size(kv, QGEN_KV_K)));
    API(vi, qgen_kv_read(kv, QGEN_KV_V, e->hkv_v, qgen_kv_size(kv, QGEN_KV_V)));
    API(vi, qgen_kv_read(kv, QGEN_KV_PAGE_TABLE, e->ptab, (size_t)np * sizeof(int32_t)));
    API(vi, qgen_kv_read(kv, QGEN_KV_SEQ_LEN, e->hkv_sl, sizeof(int32_t)));
    /* every other field zero: an owned layout (page_size 0), no bounds, no sketch */
    *hm = (qgen_kvmem){.k = e->hkv_k, .v = e->hkv_v, .page_table = e->ptab, .seq_len = e->hkv_sl, .max_seqs = 1,
                       .pages_per_seq = np, .n_pages = np,
                       .k_scale = 1.0f, .v_scale = 1.0f}; /* eval's caches keep qgen_cache_create's scales */
    *m = hm;
  }
  return 0;
}

/* The fp64 reference outputs of variant vi's cache: dense (set 0) and, for every host
   selector, over its lists (sets HSET(c, sel)), one (set, KV head) per thread item. */
static int reference(ev *e, int vi) {
  const int nc = e->cfg->n_cov;
  const int64_t np = e->np;
  qgen_kvmem hm;
  const qgen_kvmem *m;
  int rc = host_cache(e, vi, &hm, &m);
  if (rc) return rc;
  for (int h = 0; h < e->Hkv; h++) { /* set 0: every page */
    int32_t *l = e->hlist + (size_t)h * np;
    for (int64_t p = 0; p < np; p++) l[p] = (int32_t)p;
    e->hcount[h] = np;
  }
  int sets[N_HSETS(QGEN_EVAL_MAX_LIST)], nsets = 0;
  sets[nsets++] = 0;
  for (int c = 0; c < nc; c++)
    for (int si = 0; si < e->cfg->n_sel; si++)
      if (e->cfg->selectors[si] != QGEN_SEL_QUEST) sets[nsets++] = HSET(c, e->cfg->selectors[si]);
  int32_t **lp = xcalloc((size_t)nsets * e->Hkv, sizeof *lp);
  int64_t *cnts = xcalloc((size_t)nsets * e->Hkv, sizeof *cnts);
  double *out = xcalloc((size_t)nsets * e->Hq * e->D, sizeof *out);
  for (int s = 0; s < nsets; s++)
    for (int h = 0; h < e->Hkv; h++) {
      lp[s * e->Hkv + h] = e->hlist + ((size_t)sets[s] * e->Hkv + h) * np;
      cnts[(size_t)s * e->Hkv + h] = e->hcount[(size_t)sets[s] * e->Hkv + h];
    }
  qgen_layout L0 = *qgen_ext_layout(e->ctx[vi]);
  L0.v_tau = 0;
  ref_job rj = {e, qgen_ext_layout(e->ctx[vi]), &L0, m, e->qin, lp, cnts, out};
  qgen_wl_parallel((int64_t)nsets * e->Hkv, e->threads, ref_item, &rj);
  for (int s = 0; s < nsets; s++)
    memcpy(e->refo + (size_t)sets[s] * e->Hq * e->D, out + (size_t)s * e->Hq * e->D, (size_t)e->Hq * e->D * sizeof *out);
  free(lp);
  free(cnts);
  free(out);
  return 0;
}

/* Quest's host scores are a function of the bounds, the page table and the query alone:
   the variants of one workload over the same keys (r = 1 .. 16 of one cache type) share
   them. Returns 1 when m holds exactly j's inputs (the scores in e->score are theirs);
   otherwise records j's inputs (the caller computes the scores) and returns 0. */
static int qs_memo_hit(qs_memo *m, const qs_job *j, size_t nbounds, int64_t np, size_t nq) {
  const void *part[3] = {j->bounds, j->pt, j->q};
  const size_t len[3] = {nbounds, (size_t)np * sizeof(int32_t), nq * sizeof(float)}, n = len[0] + len[1] + len[2];
  int hit = m->valid && m->i8 == j->i8 && m->n == n;
  for (size_t i = 0, off = 0; i < 3 && hit; off += len[i++]) hit = memcmp(m->b + off, part[i], len[i]) == 0;
  if (hit) return 1;
  if (n > m->cap) free(m->b), m->b = xcalloc(n, 1), m->cap = n;
  for (size_t i = 0, off = 0; i < 3; off += len[i++]) memcpy(m->b + off, part[i], len[i]);
  m->n = n, m->i8 = j->i8, m->valid = 1;
  return 0;
}

/* The scores that depend on variant vi's cache: Quest's (the reference estimate over its own
   bounds, 8-bit ones on a spec with bounds = "i8" (so quest and quest-i8 agree there), the
   decode path's rule: the coverage-needed diagnostic and the two-stage
   selectors' first stage), quest-i8's and its ranking, and the two-stage selectors' exact
   page scores; each only when a selector asks for it and, for Quest's, only when its inputs
   changed (qs_memo_hit). */
static int variant_scores(ev *e, int vi, const qgen_wl_trial *T) {
  int want_q = 0, want_i8 = 0, want_sk = 0;
  for (int si = 0; si < e->cfg->n_sel; si++) {
    const int sel = e->cfg->selectors[si];
    want_q |= sel == QGEN_SEL_QUEST || rescore_r(sel);
    want_i8 |= sel == QGEN_SEL_QUEST_I8;
    want_sk |= rescore_r(sel) > 0;
  }
  qgen_kv *kv = e->kv[vi];
  const qgen_kvmem *hc = qgen_ext_host_cache(kv); /* NULL on the GPU: read back below */
  qs_job qj = {e, hc ? hc->bounds : NULL, hc ? hc->page_table : NULL, T->q, QGEN_SEL_QUEST, qgen_ext_layout(e->ctx[vi])->bounds_i8, 1};
  if ((want_q || want_i8) && e->cfg->backend == QGEN_BACKEND_GPU) {
    API(vi, qgen_kv_read(kv, QGEN_KV_BOUNDS, e->bounds, qgen_kv_size(kv, QGEN_KV_BOUNDS)));
    API(vi, qgen_kv_read(kv, QGEN_KV_PAGE_TABLE, e->ptab, (size_t)e->np * sizeof(int32_t)));
    qj.bounds = e->bounds, qj.pt = e->ptab;
  }
  const size_t nb = qgen_kv_size(kv, QGEN_KV_BOUNDS);
  qj.runs = (2 * e->threads + e->Hkv - 1) / e->Hkv;
  if (want_q && !qs_memo_hit(&e->qmemo[0], &qj, nb, e->np, (size_t)e->Hq * e->D))
    qgen_wl_parallel(e->Hkv * qj.runs, e->threads, quest_head, &qj);
  if (want_i8) {
    qj.sel = QGEN_SEL_QUEST_I8, qj.i8 = 1;
    if (!qs_memo_hit(&e->qmemo[1], &qj, nb, e->np, (size_t)e->Hq * e->D)) {
      qgen_wl_parallel(e->Hkv * qj.runs, e->threads, quest_head, &qj);
      rank_job rj = {e, QGEN_SEL_QUEST_I8};
      qgen_wl_parallel(e->Hkv, e->threads, rank_head, &rj);
    }
  }
  if (want_sk) {
    qgen_kvmem hm;
    sk_job sj = {e, qgen_ext_layout(e->ctx[vi]), NULL, qj.runs};
    const int rc = host_cache(e, vi, &hm, &sj.m);
    if (rc) return rc;
    qgen_wl_parallel(e->Hkv * sj.runs, e->threads, sketch_head, &sj);
  }
  return 0;
}

/* Add one workload of variant vi to its cells: recall, mass, errors, pages, coverage needed. */
static void score_variant(ev *e, int vi, int ti, int mi, const qgen_wl_plan *P, const double *need, int exact_ok) {
  const size_t on = (size_t)e->Hq * e->D;
  const int64_t np = e->np;
  const int nc = e->cfg->n_cov;
  for (int c = 0; c < nc; c++)
    for (int si = 0; si < e->cfg->n_sel; si++) {
      const int sel = e->cfg->selectors[si];
      cell *ce = &CELL(e, vi, ti, mi, c, si);
      const uint8_t *mk = e->mark + ((size_t)c * QGEN_SEL_COUNT + sel) * e->Hkv * np;
      int all = 1;
      for (int j = 0; j < P->n; j++) {
        if (!P->at[j].needle) continue;
        for (int h = 0; h < e->Hkv; h++)
          if (P->at[j].owners >> h & 1) {
            const int hit = mk[(size_t)h * np + P->at[j].pos / e->B];
            ce->pairs++;
            ce->found += hit;
            all &= hit;
          }
      }
      double mass = 0, pages = 0;
      for (int g = 0; g < e->Hq; g++) {
        const uint8_t *mh = mk + (size_t)(g / e->G) * np;
        double s = 0;
        for (int64_t p = 0; p < np; p++)
          if (mh[p]) s += e->wgt[(size_t)p * e->Hq + g];
        mass += s / e->Hq;
      }
      for (int64_t i = 0; i < (int64_t)e->Hkv * np; i++) pages += mk[i];
      double er = NAN, et = NAN;
      const double *x = NULL;
      if (sel == QGEN_SEL_QUEST) x = e->outs + (size_t)c * on;
      else if (e->ref_on) x = e->refo + (size_t)HSET(c, sel) * on;
      if (e->ref_on) {
        er = rel_l2(x, e->refo, on);
        ce->err_fp64 = 1;
      } else if (x && e->dense_on) {
        er = rel_l2(x, e->outs + (size_t)nc * on, on);
      }
      if (x && exact_ok) et = rel_l2(x, e->exact, on);
      ce->trials++;
      ce->all_found += all;
      ce->mass_sum += mass;
      if (mass < ce->mass_min) ce->mass_min = mass;
      ce->pages_sum += pages / e->Hkv;
      ce->need_sum += need[sel];
      if (need[sel] > ce->need_max) ce->need_max = need[sel];
      ce->nmass_sum += e->nmass;
      if (er == er) {
        ce->err_n++;
        ce->err_sum += er;
        if (er > ce->err_max) ce->err_max = er;
      }
      if (et == et) {
        ce->errt_n++;
        ce->errt_sum += et;
        if (et > ce->errt_max) ce->errt_max = et;
      }
    }
}

/* The coverage each selector's ranking needs (the two-stage ones: none) into need. */
static void needs(ev *e, const qgen_wl_plan *P, int64_t nf, double *need) {
  for (int si = 0; si < e->cfg->n_sel; si++) {
    const int sel = e->cfg->selectors[si];
    if (!rescore_r(sel)) need[sel] = coverage_needed(e, e->score[sel], P, e->forced, nf);
  }
}

/* --steps: decode steps 1 .. steps - 1 of variant vi over the same cache, the query drifting
   (qgen_wl_drift). Every reselect-th step selects again with its own query (the decode path
   and every host selector); the steps between reuse the last lists (their forced pages are
   this step's anyway: the cache does not grow). Each step adds to the cells, scored against
   its own query's attention (recall, mass; no output errors). Leaves the trial's query,
   statistics and host rankings in place for the next variant. */
static int drift_steps(ev *e, int vi, const qgen_wl_trial *T, const qgen_wl_plan *P, int ti, int mi, double *need) {
  const size_t nq = (size_t)e->Hq * e->D;
  float *q = xcalloc(nq, sizeof *q);
  memcpy(q, T->q, nq * sizeof *q);
  qgen_wl_trial Tq = *T;
  Tq.q = q;
  int rc = 0;
  for (int s = 1; s < e->cfg->steps && !rc; s++) {
    qgen_wl_drift(T, s - 1, q, q);
    qgen_wl_query_stats(T, P, q, e->pmax, e->plse, e->threads);
    set_weights(e, &Tq, P);
    if (s % e->cfg->reselect == 0) {
      if ((rc = set_query(e, q)) != 0 || (rc = decode(e, vi)) != 0 || (rc = variant_scores(e, vi, &Tq)) != 0) break;
      host_rankings(e, &Tq, P);
      needs(e, P, build_selections(e, vi), need);
    }
    score_variant(e, vi, ti, mi, P, need, 0);
  }
  free(q);
  if (rc) return rc;
  qgen_wl_page_stats(T, P, e->pmax, e->plse);
  set_weights(e, T, P);
  host_rankings(e, T, P);
  return set_query(e, T->q) ? 2 : 0;
}

/* One workload (trial T, plan P) on every variant. The lossless variant goes first: its
   dense reference is the "exact" one of the others. */
static int run_workload(ev *e, const qgen_wl_trial *T, const qgen_wl_plan *P, int ti, int mi) {
  qgen_eval_result *res = e->res;
  double t = now_s();
  const int64_t nspec = workload_begin(e, T, P);
  if (nspec < 0) return 2;
  res->t_plant += now_s() - t;
  t = now_s();
  host_rankings(e, T, P);
  res->t_host_sel += now_s() - t;
  int exact_ok = 0, rc;
  for (int vo = 0; vo < e->nv; vo++) {
    const int lo = e->lossless;
    const int vi = lo < 0 ? vo : vo == 0 ? lo : vo <= lo ? vo - 1 : vo;
    t = now_s();
    if ((rc = append_sequence(e, vi, nspec)) != 0 || (rc = decode(e, vi)) != 0) return rc;
    res->t_backend += now_s() - t;
    t = now_s();
    if ((rc = variant_scores(e, vi, T)) != 0) return rc;
    double need[QGEN_SEL_COUNT] = {0};
    needs(e, P, build_selections(e, vi), need);
    res->t_host_sel += now_s() - t;
    t = now_s();
    if (e->ref_on && (rc = reference(e, vi)) != 0) return rc;
    res->t_ref += now_s() - t;
    if (vo == 0 && vi == lo && (e->ref_on || e->dense_on)) {
      memcpy(e->exact, e->ref_on ? e->refo : e->outs + (size_t)e->cfg->n_cov * e->Hq * e->D,
             (size_t)e->Hq * e->D * sizeof *e->exact);
      exact_ok = 1;
    }
    score_variant(e, vi, ti, mi, P, need, exact_ok);
    t = now_s();
    if (e->cfg->steps > 1 && (rc = drift_steps(e, vi, T, P, ti, mi, need)) != 0) return rc;
    res->t_host_sel += now_s() - t;
  }
  return 0;
}

/* Rows (one per cell) and margin thresholds. */
static void make_rows(ev *e) {
  const qgen_eval_cfg *cfg = e->cfg;
  qgen_eval_result *res = e->res;
  const int nt = cfg->n_tasks, nm = cfg->n_margin, nc = cfg->n_cov, ns = cfg->n_sel;
  res->rows = xcalloc((size_t)cfg->n_ctx * e->nv * nt * nm * nc * ns, sizeof *res->rows);
  for (e->ci = 0; e->ci < cfg->n_ctx; e->ci++)
    for (int v = 0; v < e->nv; v++)
      for (int ti = 0; ti < nt; ti++)
        for (int mi = 0; mi < nm; mi++)
          for (int c = 0; c < nc; c++)
            for (int si = 0; si < ns; si++) {
              const cell *ce = &CELL(e, v, ti, mi, c, si);
              const double n = ce->trials;
              qgen_eval_row *r = &res->rows[res->n_rows++];
              r->task = cfg->tasks[ti], r->selector = cfg->selectors[si], r->ctx = cfg->ctx[e->ci];
              snprintf(r->k_type, sizeof r->k_type, "%s", e->ktype[v]);
              snprintf(r->variant, sizeof r->variant, "%s", e->vname[v]);
              r->rescore = qgen_ext_layout(e->ctx[v])->rescore;
              r->top_p = rescore_r(r->selector) ? cfg->top_p : r->selector == QGEN_SEL_QUEST ? qgen_ext_layout(e->ctx[v])->top_p : 1;
              const int two = rescore_r(r->selector) || (r->selector == QGEN_SEL_QUEST && r->rescore > 1); /* no single ranking */
              r->coverage = cfg->coverage[c], r->margin = cfg->margin[mi], r->trials = ce->trials;
              r->recall = n ? ce->all_found / n : NAN;
              r->needle_recall = ce->pairs ? (double)ce->found / (double)ce->pairs : NAN;
              r->mass_recall = n ? ce->mass_sum / n : NAN;
              r->mass_min = n ? ce->mass_min : NAN;
              r->rel_err = ce->err_n ? ce->err_sum / ce->err_n : NAN;
              r->rel_err_max = ce->err_n ? ce->err_max : NAN;
              r->err_fp64 = ce->err_fp64;
              r->rel_err_total = ce->errt_n ? ce->errt_sum / ce->errt_n : NAN;
              r->rel_err_total_max = ce->errt_n ? ce->errt_max : NAN;
              r->pages = n ? ce->pages_sum / n : NAN;
              r->need = n && !two ? ce->need_sum / n : NAN;
              r->need_max = n && !two ? ce->need_max : NAN;
              r->needle_mass = n ? ce->nmass_sum / n : NAN;
            }
  /* per (ctx, variant, task, coverage, selector), over the margins in increasing order */
  res->thr = xcalloc((size_t)cfg->n_ctx * e->nv * nt * nc * ns, sizeof *res->thr);
  int *mo = xcalloc((size_t)nm, sizeof *mo);
  for (int i = 0; i < nm; i++) mo[i] = i;
  for (int a = 1; a < nm; a++)
    for (int b = a; b > 0 && cfg->margin[mo[b]] < cfg->margin[mo[b - 1]]; b--) {
      const int x = mo[b];
      mo[b] = mo[b - 1];
      mo[b - 1] = x;
    }
  for (e->ci = 0; e->ci < cfg->n_ctx; e->ci++)
    for (int v = 0; v < e->nv; v++)
      for (int ti = 0; ti < nt; ti++)
        for (int c = 0; c < nc; c++)
          for (int si = 0; si < ns; si++) {
            qgen_eval_threshold *t = &res->thr[res->n_thr++];
            t->task = cfg->tasks[ti], t->selector = cfg->selectors[si], t->ctx = cfg->ctx[e->ci];
            snprintf(t->k_type, sizeof t->k_type, "%s", e->ktype[v]);
            t->rescore = qgen_ext_layout(e->ctx[v])->rescore;
            t->top_p = rescore_r(t->selector) ? cfg->top_p : t->selector == QGEN_SEL_QUEST ? qgen_ext_layout(e->ctx[v])->top_p : 1;
            t->coverage = cfg->coverage[c];
            int last_fail = -1;
            for (int i = 0; i < nm; i++) {
              const cell *ce = &CELL(e, v, ti, mo[i], c, si);
              if (ce->all_found < ce->trials) last_fail = i;
            }
            t->below = last_fail >= 0 ? cfg->margin[mo[last_fail]] : NAN;
            t->full_from = last_fail + 1 < nm ? cfg->margin[mo[last_fail + 1]] : NAN;
          }
  free(mo);
}

/* One context: haystack, trials, workloads. */
static int run_context(ev *e, int ci) {
  const qgen_eval_cfg *cfg = e->cfg;
  int rc = ctx_begin(e, ci);
  const double t0 = now_s();
  for (int trial = 0; trial < cfg->trials && !rc; trial++) {
    if (trial == 0 || cfg->fresh_haystack) {
      const uint64_t hseed =
          cfg->fresh_haystack ? qgen_mix64(cfg->seed ^ qgen_mix64(0x68617973ull + (uint64_t)trial)) : cfg->seed;
      if ((rc = make_haystack(e, hseed)) != 0) break;
    }
    double ts = now_s();
    qgen_wl_trial T;
    qgen_wl_source src = {src_keys, e};
    const uint64_t tseed = qgen_mix64(cfg->seed ^ qgen_mix64(0x747269616cull + (uint64_t)trial));
    if (qgen_wl_trial_init(&T, &e->w, tseed, &src, e->threads) != 0) {
      rc = fail(e, 2, "qgen eval: trial setup failed");
      break;
    }
    rc = trial_begin(e, &T);
    e->res->t_stats += now_s() - ts;
    for (int ti = 0; ti < cfg->n_tasks && !rc; ti++)
      for (int mi = 0; mi < cfg->n_margin && !rc; mi++) {
        qgen_wl_plan P;
        double tp = now_s();
        if (qgen_wl_plant(&P, &T, (qgen_wl_task)cfg->tasks[ti], cfg->margin[mi], e->err, e->errn) != 0) {
          rc = 1;
          break;
        }
        e->res->t_plant += now_s() - tp;
        e->res->workloads++;
        rc = run_workload(e, &T, &P, ti, mi);
        qgen_wl_plan_free(&P);
      }
    qgen_wl_trial_free(&T);
    if (cfg->log && !rc)
      fprintf(cfg->log, "qgen eval: ctx %lld trial %d/%d done (%.1f s)\n", (long long)e->N, trial + 1, cfg->trials,
              now_s() - t0);
  }
  ctx_end(e);
  return rc;
}

int qgen_eval_run(const qgen_eval_cfg *cfg, qgen_eval_result *res, char *err, size_t errn) {
  memset(res, 0, sizeof *res);
  const double t_start = now_s();
  ev e;
  memset(&e, 0, sizeof e);
  e.cfg = cfg, e.res = res, e.err = err, e.errn = errn;
  e.threads = cfg->threads > 0 ? cfg->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (e.threads < 1) e.threads = 1;
  res->threads = e.threads;
  e.d.be = cfg->backend;
  e.R = cfg->proj_dim;
  int rc = 0;
  if (!cfg->spec || cfg->n_tasks < 1 || cfg->n_margin < 1 || cfg->n_cov < 1 || cfg->n_sel < 1 || cfg->n_ctx < 1)
    rc = fail(&e, 1, "qgen eval: needs a spec and non-empty lists (tasks, contexts, coverages, selectors, margins)");
  if (!rc && (cfg->trials < 1 || cfg->proj_dim < 1 || cfg->chunk < 1))
    rc = fail(&e, 1, "qgen eval: --trials %d, --proj-dim %d, --chunk %lld: each must be >= 1", cfg->trials, cfg->proj_dim,
              cfg->chunk);
  if (!rc && !(cfg->top_p > 0 && cfg->top_p <= 1))
    rc = fail(&e, 1, "qgen eval: top-p %g is not in (0, 1]", cfg->top_p);
  if (!rc && (cfg->steps < 1 || cfg->steps > 4096 || cfg->reselect < 1))
    rc = fail(&e, 1, "qgen eval: steps %d / reselect %d: need 1 <= steps <= 4096 and reselect >= 1", cfg->steps,
              cfg->reselect);
  char why[160];
  if (!rc && qgen_wl_params_check(&cfg->wl, why, sizeof why) != 0) rc = fail(&e, 1, "qgen eval: workload knob %s", why);
  for (int i = 0; i < cfg->n_cov && !rc; i++)
    if (!(cfg->coverage[i] > 0 && cfg->coverage[i] <= 1)) rc = fail(&e, 1, "qgen eval: coverage %g is not in (0, 1]", cfg->coverage[i]);
  for (int i = 0; i < cfg->n_ctx && !rc; i++)
    if (cfg->ctx[i] < 1 || cfg->ctx[i] > INT32_MAX) rc = fail(&e, 1, "qgen eval: context %lld is out of range", cfg->ctx[i]);
  if (!rc) rc = open_variants(&e);
  if (!rc) {
    const size_t ncell = (size_t)cfg->n_ctx * e.nv * cfg->n_tasks * cfg->n_margin * cfg->n_cov * cfg->n_sel;
    e.cells = xcalloc(ncell, sizeof *e.cells);
    for (size_t i = 0; i < ncell; i++) e.cells[i].mass_min = INFINITY;
    /* meanpool's projection: fixed for the run */
    e.proj = xcalloc((size_t)e.R * e.D, sizeof *e.proj);
    for (int i = 0; i < e.R * e.D; i++) e.proj[i] = qgen_wl_gauss(cfg->seed ^ 0x6d65616e706f6f6cull, 1, (uint64_t)i);
    e.pq = xcalloc((size_t)e.Hq * e.R, sizeof *e.pq);
    e.qin = xcalloc(e.L->q_bytes, 1);
    e.outb = xcalloc(e.L->out_bytes, 1);
  }
  for (int ci = 0; ci < cfg->n_ctx && !rc; ci++) rc = run_context(&e, ci);
  if (!rc) make_rows(&e);
  res->seconds = now_s() - t_start;
  free(e.cells), free(e.proj), free(e.pq), free(e.qin), free(e.outb);
  for (int v = 0; v < e.nv && e.ctx; v++) qgen_close(e.ctx[v]);
  free(e.ctx), free(e.kv), free(e.ktype), free(e.vname);
  if (rc != 0) qgen_eval_result_free(res);
  return rc;
}

void qgen_eval_result_free(qgen_eval_result *r) {
  free(r->rows);
  free(r->thr);
  r->rows = NULL;
  r->thr = NULL;
  r->n_rows = r->n_thr = 0;
}

/* ---- output ------------------------------------------------------------------------------------ */

static void fmt_ctx(char *b, size_t n, long long x) {
  if (x >= 1048576 && x % 1048576 == 0) snprintf(b, n, "%lldM", x / 1048576);
  else if (x >= 1024 && x % 1024 == 0) snprintf(b, n, "%lldK", x / 1024);
  else snprintf(b, n, "%lld", x);
}

void qgen_eval_print(const qgen_eval_result *r, FILE *f) {
  char sn[48];
  fprintf(f, "%-16s %6s %-6s %7s %-9s %6s %6s %7s %7s %7s %7s %9s %9s %9s %7s %7s %7s %7s\n", "task", "ctx", "k_type", "cov",
          "selector", "margin", "trials", "recall", "needle", "mass", "mass_lo", "rel_err", "err_max", "err_tot", "pages",
          "need", "need_hi", "n_mass");
  for (int i = 0; i < r->n_rows; i++) {
    const qgen_eval_row *w = &r->rows[i];
    char c[32], e1[16], e2[16], e3[16];
    fmt_ctx(c, sizeof c, w->ctx);
    if (w->rel_err == w->rel_err) snprintf(e1, sizeof e1, "%.2e%s", w->rel_err, w->err_fp64 ? "" : "*");
    else snprintf(e1, sizeof e1, "-");
    if (w->rel_err_max == w->rel_err_max) snprintf(e2, sizeof e2, "%.2e", w->rel_err_max);
    else snprintf(e2, sizeof e2, "-");
    if (w->rel_err_total == w->rel_err_total) snprintf(e3, sizeof e3, "%.2e", w->rel_err_total);
    else snprintf(e3, sizeof e3, "-");
    fprintf(f, "%-16s %6s %-6s %7.4g %-9s %6.3g %6d %7.3f %7.3f %7.4f %7.4f %9s %9s %9s %7.1f %7.4f %7.4f %7.4f\n",
            qgen_wl_task_name(w->task), c, w->k_type, w->coverage, qgen_eval_row_selector(w->selector, w->rescore, w->top_p, sn, sizeof sn), w->margin,
            w->trials, w->recall, w->needle_recall, w->mass_recall, w->mass_min, e1, e2, e3, w->pages, w->need, w->need_max, w->needle_mass);
  }
  int any_dense = 0;
  for (int i = 0; i < r->n_rows; i++) any_dense |= r->rows[i].rel_err == r->rows[i].rel_err && !r->rows[i].err_fp64;
  if (any_dense) fprintf(f, "(* error against the backend's dense output, not the fp64 reference)\n");
  int sweep = 0;
  for (int i = 0; i < r->n_thr; i++) sweep |= r->thr[i].below == r->thr[i].below;
  if (r->n_thr && sweep) {
    fprintf(f, "\nmargin below which recall < 1 (largest failing margin -> smallest margin with recall 1 above it):\n");
    fprintf(f, "%-16s %6s %-6s %7s %-9s %8s %10s\n", "task", "ctx", "k_type", "cov", "selector", "fails_at", "full_from");
    for (int i = 0; i < r->n_thr; i++) {
      const qgen_eval_threshold *t = &r->thr[i];
      char c[32], a[16], b[16];
      fmt_ctx(c, sizeof c, t->ctx);
      if (t->below == t->below) snprintf(a, sizeof a, "%.3g", t->below);
      else snprintf(a, sizeof a, "none");
      if (t->full_from == t->full_from) snprintf(b, sizeof b, "%.3g", t->full_from);
      else snprintf(b, sizeof b, "never");
      fprintf(f, "%-16s %6s %-6s %7.4g %-9s %8s %10s\n", qgen_wl_task_name(t->task), c, t->k_type, t->coverage,
              qgen_eval_row_selector(t->selector, t->rescore, t->top_p, sn, sizeof sn), a, b);
    }
  }
  fprintf(f, "\n%lld workloads in %.1f s on %d threads (haystack %.1f, statistics %.1f, planting %.1f, host selectors %.1f, "
          "%s %.1f, fp64 reference %.1f)\n",
          r->workloads, r->seconds, r->threads, r->t_haystack, r->t_stats, r->t_plant, r->t_host_sel, r->backend,
          r->t_backend, r->t_ref);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    const unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}
static void json_num(FILE *f, double x) {
  if (x == x && isfinite(x)) fprintf(f, "%.6g", x);
  else fprintf(f, "null");
}

int qgen_eval_write_json(const qgen_eval_cfg *c, const qgen_eval_result *r, const char *path) {
  char sn[48];
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "qgen: eval: cannot write %s: %s\n", path, strerror(errno));
    return QGEN_EXIT_WRITE;
  }
  char date[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  char wl[2048];
  qgen_wl_params_json(&c->wl, wl, sizeof wl);
  fprintf(f, "{\n  \"backend\": ");
  json_str(f, r->backend);
  fprintf(f, ",\n  \"gpu\": ");
  if (r->device[0]) json_str(f, r->device);
  else fprintf(f, "null");
  fprintf(f, ",\n  \"date\": ");
  json_str(f, date);
  fprintf(f, ",\n  \"command\": ");
  json_str(f, c->command ? c->command : "");
  fprintf(f, ",\n  \"spec\": ");
  json_str(f, c->spec);
  fprintf(f, ",\n  \"seed\": %llu, \"trials\": %d, \"ref_ctx\": %lld, \"haystack\": \"%s\", \"proj_dim\": %d, \"threads\": %d,\n",
          (unsigned long long)c->seed, c->trials, c->ref_ctx, c->fresh_haystack ? "per-trial" : "per-context", c->proj_dim,
          r->threads);
  if (c->top_p < 1) fprintf(f, "  \"top_p\": %.17g,\n", c->top_p);
  if (c->steps > 1) fprintf(f, "  \"steps\": %d, \"reselect\": %d,\n", c->steps, c->reselect);
  fprintf(f, "  \"workload\": %s,\n", wl);
  fprintf(f, "  \"timing_s\": {\"total\": %.3f, \"haystack\": %.3f, \"statistics\": %.3f, \"planting\": %.3f, "
          "\"host_selectors\": %.3f, \"backend\": %.3f, \"fp64_reference\": %.3f, \"workloads\": %lld},\n",
          r->seconds, r->t_haystack, r->t_stats, r->t_plant, r->t_host_sel, r->t_backend, r->t_ref, r->workloads);
  fprintf(f, "  \"rows\": [\n");
  for (int i = 0; i < r->n_rows; i++) {
    const qgen_eval_row *w = &r->rows[i];
    fprintf(f, "    {\"task\": \"%s\", \"ctx\": %lld, \"k_type\": ", qgen_wl_task_name(w->task), w->ctx);
    json_str(f, w->k_type);
    fprintf(f, ", \"variant\": ");
    json_str(f, w->variant);
    fprintf(f, ", \"coverage\": ");
    json_num(f, w->coverage);
    fprintf(f, ", \"selector\": \"%s\", \"rescore\": %d, \"margin\": ", qgen_eval_row_selector(w->selector, w->rescore, w->top_p, sn, sizeof sn),
            w->rescore);
    json_num(f, w->margin);
    fprintf(f, ", \"trials\": %d, \"recall\": ", w->trials);
    json_num(f, w->recall);
    fprintf(f, ", \"needle_recall\": ");
    json_num(f, w->needle_recall);
    fprintf(f, ", \"mass_recall\": ");
    json_num(f, w->mass_recall);
    fprintf(f, ", \"mass_recall_min\": ");
    json_num(f, w->mass_min);
    fprintf(f, ", \"rel_err\": ");
    json_num(f, w->rel_err);
    fprintf(f, ", \"rel_err_max\": ");
    json_num(f, w->rel_err_max);
    fprintf(f, ", \"rel_err_total\": ");
    json_num(f, w->rel_err_total);
    fprintf(f, ", \"rel_err_total_max\": ");
    json_num(f, w->rel_err_total_max);
    fprintf(f, ", \"err_ref\": %s, \"pages\": ",
            w->rel_err == w->rel_err ? (w->err_fp64 ? "\"fp64\"" : "\"dense\"") : "null");
    json_num(f, w->pages);
    fprintf(f, ", \"needle_mass\": ");
    json_num(f, w->needle_mass);
    fprintf(f, ", \"cov_needed\": ");
    json_num(f, w->need);
    fprintf(f, ", \"cov_needed_max\": ");
    json_num(f, w->need_max);
    fprintf(f, "}%s\n", i + 1 < r->n_rows ? "," : "");
  }
  fprintf(f, "  ],\n  \"thresholds\": [\n");
  for (int i = 0; i < r->n_thr; i++) {
    const qgen_eval_threshold *t = &r->thr[i];
    fprintf(f, "    {\"task\": \"%s\", \"ctx\": %lld, \"k_type\": ", qgen_wl_task_name(t->task), t->ctx);
    json_str(f, t->k_type);
    fprintf(f, ", \"coverage\": ");
    json_num(f, t->coverage);
    fprintf(f, ", \"selector\": \"%s\", \"recall_below_1_at\": ", qgen_eval_row_selector(t->selector, t->rescore, t->top_p, sn, sizeof sn));
    json_num(f, t->below);
    fprintf(f, ", \"full_recall_from\": ");
    json_num(f, t->full_from);
    fprintf(f, "}%s\n", i + 1 < r->n_thr ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  return qgen_opts_close_output("eval", f, path);
}

/* ---- command line -------------------------------------------------------------------------------- */

static const char EVAL_SYNOPSIS[] =
    "usage: qgen eval --spec FILE [--variant V[,V...]] [--backend cpu|gpu] [--task T[,T...]|all]\n"
    "                 [--ctx N[,N...]] [--coverage c[,c...]] [--selector S[,S...]]\n"
    "                 [--trials N] [--margin m[,m...]] [--seed S] [--json FILE] [--threads N]\n"
    "                 [--ref-ctx N] [--chunk N] [--proj-dim R] [--top-p P] [--steps N] [--reselect N]\n"
    "                 [--fresh-haystack] [--wl NAME=VALUE]... [-q]\n"
    "\n"
    "Retrieval quality of the sparse decode path on synthetic long-context workloads (RoPE'd\n"
    "keys with outlier channels, an attention sink, recency, planted needles; tools/workload.h).\n"
    "Per trial and workload: the context is appended to a cache of the backend, qgen_attend runs\n"
    "sparse at each coverage, and its page lists (quest) are compared at equal budget with the\n"
    "oracle (true max logit per page) and a mean-pooled-key selector with a random projection\n"
    "(meanpool): needle recall, attention-mass recall, output error (fp64 reference <= --ref-ctx).\n"
    "Lists are comma-separated; contexts take K/M suffixes (16K = 16384).\n"
    "\n";

/* What each column of the table means (qgen_eval_print writes them; the JSON rows carry
   the same numbers under their long names). */
static const char EVAL_COLUMNS[] =
    "\n"
    "Columns, one row per task, context, variant, margin, coverage and selector:\n"
    "  task      the workload: niah_single, niah_multikey, niah_multivalue, niah_boundary\n"
    "  ctx       context length in tokens\n"
    "  k_type    the variant's K cache type\n"
    "  cov       coverage: the fraction of a sequence's pages each selector keeps\n"
    "  selector  quest: the decode path itself (qgen_attend's own page lists; 2stage-rR\n"
    "            for a variant with two-stage selection), oracle, meanpool, quest-i8,\n"
    "            rescoreR (rescoreR-pP with --top-p): see --selector\n"
    "  margin    the needles' logit over the strongest distractor, in haystack logit stds\n"
    "  trials    workloads in the row (x steps with --steps)\n"
    "  recall    the fraction of trials in which every needle's page was selected in\n"
    "            every KV head that owns the needle\n"
    "  needle    the fraction of (needle, owner head) pairs selected\n"
    "  mass      attention-mass recall: the fp64 full-softmax weight of the selected\n"
    "            pages, averaged over query heads, mean over trials\n"
    "  mass_lo   the lowest trial's mass\n"
    "  rel_err   relative L2 error of the output against dense attention over the cache's\n"
    "            own contents (the selection's error alone), mean over trials: against\n"
    "            the fp64 CPU reference up to --ref-ctx, beyond it (marked *) against the\n"
    "            backend's dense output; '-' when not computed (--ref-ctx -1, --steps)\n"
    "  err_max   the largest trial's rel_err\n"
    "  err_tot   the same outputs against dense attention over the unquantized rows\n"
    "            (selection and cache quantization together); '-' unless the run holds\n"
    "            a lossless variant (k/v type = in_type) for the reference\n"
    "  pages     pages selected per KV head, mean over trials\n"
    "  need      the coverage the selector's own ranking needs to select every needle,\n"
    "            mean over trials: above cov, how far a miss was; below, the slack\n"
    "            (nan for two-stage selectors, which have no single ranking)\n"
    "  need_hi   the largest trial's need\n"
    "  n_mass    the fp64 softmax weight of one needle token (over its owner heads'\n"
    "            query heads), mean over trials\n"
    "With several --margin values, a second table per (task, ctx, k_type, cov, selector):\n"
    "fails_at, the largest margin with recall < 1 ('none'), and full_from, the smallest\n"
    "margin above every failing one ('never': the largest margin fails).\n";

/* The option setters below take the whole configuration (dst) and return 0, or -1 with why. */
static int set_variants(void *dst, const char *v, char *why, size_t n) {
  qgen_eval_cfg *c = dst;
  static char buf[1024]; /* c->variants point into it */
  qgen_fmt(buf, sizeof buf, "%s", v);
  if ((c->n_variants = qgen_opts_split(buf, c->variants, QGEN_EVAL_MAX_LIST)) < 1)
    return qgen_fmt(why, n, "1 to %d distinct, non-empty names expected", QGEN_EVAL_MAX_LIST), -1;
  return 0;
}

static int set_backend(void *dst, const char *v, char *why, size_t n) {
  qgen_eval_cfg *c = dst;
  if (!strcmp(v, "cpu")) c->backend = QGEN_BACKEND_CPU;
  else if (!strcmp(v, "gpu")) c->backend = QGEN_BACKEND_GPU;
  else return qgen_fmt(why, n, "cpu or gpu expected"), -1;
  return 0;
}

static int set_tasks(void *dst, const char *v, char *why, size_t n) {
  qgen_eval_cfg *c = dst;
  char buf[1024];
  const char *names[QGEN_WL_TASK_COUNT];
  int k;
  if (!strcmp(v, "all")) {
    for (k = 0; k < QGEN_WL_TASK_COUNT; k++) c->tasks[k] = k;
    c->n_tasks = QGEN_WL_TASK_COUNT;
    return 0;
  }
  qgen_fmt(buf, sizeof buf, "%s", v);
  const int m = qgen_opts_split(buf, names, QGEN_WL_TASK_COUNT);
  if (m < 1) return qgen_fmt(why, n, "1 to %d distinct, non-empty task names expected", QGEN_WL_TASK_COUNT), -1;
  for (k = 0; k < m; k++) {
    qgen_wl_task t;
    if (qgen_wl_task_from_name(names[k], &t) != 0) return qgen_fmt(why, n, "unknown task '%s'", names[k]), -1;
    c->tasks[k] = t;
  }
  c->n_tasks = m;
  return 0;
}

static int set_selectors(void *dst, const char *v, char *why, size_t n) {
  qgen_eval_cfg *c = dst;
  char buf[256];
  const char *names[QGEN_SEL_COUNT];
  qgen_fmt(buf, sizeof buf, "%s", v);
  const int m = qgen_opts_split(buf, names, QGEN_SEL_COUNT);
  if (m < 1) return qgen_fmt(why, n, "1 to %d distinct, non-empty selectors expected", QGEN_SEL_COUNT), -1;
  for (int k = 0; k < m; k++) {
    int s = -1;
    for (int j = 0; j < QGEN_SEL_COUNT; j++)
      if (!strcmp(names[k], SEL_NAMES[j])) s = j;
    if (s < 0)
      return qgen_fmt(why, n, "unknown selector '%s' (quest, oracle, meanpool, quest-i8, rescore2, rescore4, rescore8, "
                      "rescore16)", names[k]), -1;
    c->selectors[k] = s;
  }
  c->n_sel = m;
  return 0;
}

static int set_knob(void *dst, const char *v, char *why, size_t n) {
  qgen_eval_cfg *c = dst;
  return qgen_wl_params_set(&c->wl, v, why, n);
}

int qgen_eval_main(int argc, char **argv) {
  qgen_eval_cfg c;
  qgen_eval_cfg_init(&c);
  const char *json = NULL;
  int quiet = 0;
  const qgen_opt opts[] = {
      {.name = "--spec", .arg = "FILE", .kind = QGEN_OPT_STR, .dst = &c.spec},
      {.name = "--variant", .arg = "LIST", .kind = QGEN_OPT_FUNC, .dst = &c, .set = set_variants,
       .help = "spec variants to evaluate (cache types), default the first"},
      {.name = "--backend", .arg = "B", .kind = QGEN_OPT_FUNC, .dst = &c, .set = set_backend,
       .help = "gpu (default) or cpu (the reference executor)"},
      {.name = "--task", .arg = "LIST", .kind = QGEN_OPT_FUNC, .dst = &c, .set = set_tasks,
       .help = "niah_single, niah_multikey, niah_multivalue, niah_boundary, or all (default)"},
      {.name = "--ctx", .arg = "LIST", .kind = QGEN_OPT_TOKENS, .dst = c.ctx, .count = &c.n_ctx,
       .max = QGEN_EVAL_MAX_LIST, .help = "default 16K"},
      {.name = "--coverage", .arg = "LIST", .kind = QGEN_OPT_NUMS, .dst = c.coverage, .count = &c.n_cov,
       .max = QGEN_EVAL_MAX_LIST, .lo = 0, .hi = 1, .open_lo = 1,
       .help = "fractions of the pages, default the spec's own: its coverage, or its\n"
               "token budget over the context (one --ctx then)"},
      {.name = "--selector", .arg = "LIST", .kind = QGEN_OPT_FUNC, .dst = &c, .set = set_selectors,
       .help = "default quest,oracle,meanpool; also quest-i8 (Quest over 8-bit\n"
               "page bounds) and rescore2, rescore4, rescore8, rescore16 (two-stage:\n"
               "R x the budget's candidates by Quest, rescored from a q4_0 K)"},
      {.name = "--trials", .arg = "N", .kind = QGEN_OPT_INT, .dst = &c.trials, .help = "workloads per cell, default 10"},
      {.name = "--margin", .arg = "LIST", .kind = QGEN_OPT_NUMS, .dst = c.margin, .count = &c.n_margin,
       .max = QGEN_EVAL_MAX_LIST,
       .help = "needle logit over the strongest distractor, in haystack logit stds; default 4.\n"
               "With several, the margin below which recall < 1 is reported per selector"},
      {.name = "--seed", .arg = "S", .kind = QGEN_OPT_U64, .dst = &c.seed,
       .help = "default 1 (haystack seed; trial t uses a seed derived from S and t)"},
      {.name = "--json", .arg = "FILE", .kind = QGEN_OPT_STR, .dst = &json,
       .help = "write {backend, gpu, date, command, ..., rows, thresholds}"},
      {.name = "--threads", .arg = "N", .kind = QGEN_OPT_INT, .dst = &c.threads, .lo = 1, .hi = 4096,
       .help = "host threads (1..4096), default all CPUs"},
      {.name = "--ref-ctx", .arg = "N", .kind = QGEN_OPT_TOKENS, .dst = &c.ref_ctx,
       .help = "fp64 CPU reference up to this context (default 128K); beyond, Quest's\n"
               "error is against the backend's dense output and the others are null;\n"
               "-1: no output errors at all (fast recall and margin sweeps)"},
      {.name = "--chunk", .arg = "N", .kind = QGEN_OPT_TOKENS, .dst = &c.chunk,
       .help = "tokens per qgen_append (default 64K)"},
      {.name = "--proj-dim", .arg = "R", .kind = QGEN_OPT_INT, .dst = &c.proj_dim,
       .help = "meanpool's projection (default 32)"},
      {.name = "--v-tau", .arg = "X", .kind = QGEN_OPT_DOUBLE, .dst = &c.v_tau, .lo = 0, .hi = 1,
       .help = "sparse-V threshold in [0, 1] for every variant (spec sparse.v_tau;\n"
               "default the spec's): its output error on top of the selection's"},
      {.name = "--top-p", .arg = "P", .kind = QGEN_OPT_DOUBLE, .dst = &c.top_p,
       .help = "mass-adaptive budget for the rescoreR selectors (named rescoreR-pP):\n"
               "per KV head the fewest candidates whose estimated softmax mass reaches P,\n"
               "at most the budget's (ref/ref.h qgen_ref_select_top_p); default 1 (off)"},
      {.name = "--steps", .arg = "N", .kind = QGEN_OPT_INT, .dst = &c.steps,
       .help = "decode steps per workload over the same cache, each query drifting from\n"
               "the last (--wl drift=RHO, default 0.9); rows count (workload, step)\n"
               "pairs as trials; no output errors. Default 1"},
      {.name = "--reselect", .arg = "N", .kind = QGEN_OPT_INT, .dst = &c.reselect,
       .help = "with --steps: every selector selects every N-th step and reuses its\n"
               "lists between (sink and recent pages are in every list); default 1"},
      {.name = "--fresh-haystack", .kind = QGEN_OPT_FLAG, .dst = &c.fresh_haystack,
       .help = "a new haystack per trial (default: one per context, needles re-planted)"},
      {.name = "--wl", .arg = "NAME=VALUE", .kind = QGEN_OPT_FUNC, .dst = &c, .set = set_knob,
       .help = "a workload knob (tools/workload.h; one out of its range is refused):\n"
               "active_pairs, active_std, inactive_std, outlier_pairs, outlier_mean,\n"
               "rope_base, value_mean, logit_std, head_spread, outlier_logit, sink_mass,\n"
               "recent_window, recent_boost, recent_tau, owners, multikey, multivalue,\n"
               "topic_len, topic_share, drift"},
      {.name = "--quiet", .alias = "-q", .kind = QGEN_OPT_FLAG, .dst = &quiet, .help = "no progress lines on stderr"},
      {0}};
  const qgen_cmd eval_cmd = {"eval", EVAL_SYNOPSIS, EVAL_COLUMNS, 20, opts};
  c.n_cov = 0; /* none given: the spec's own, below */
  const int done = qgen_opts_parse(&eval_cmd, argc, argv, NULL, 0, NULL);
  if (done >= 0) return done;
  c.log = quiet ? NULL : stderr;
  if (!c.spec) {
    fprintf(stderr, "qgen: eval: needs --spec FILE (see qgen eval --help)\n");
    return 1;
  }
  /* the arguments against the spec, before looking for a GPU */
  static qgen_spec_set set;
  char why[4400];
  if (qgen_opts_spec_set(c.spec, &set) == 0) {
    for (int i = 0; i < c.n_variants; i++)
      if (qgen_opts_variant_in(c.spec, &set, c.variants[i]) != 0) return 1;
    const qgen_spec *s = c.n_variants ? qgen_spec_find(&set, c.variants[0]) : &set.v[0];
    if (!c.n_cov && s->sparse && s->budget && c.n_ctx > 1) {
      fprintf(stderr, "qgen: eval: %s has a budget of %lld tokens, another coverage at each context: give --coverage "
              "LIST or one --ctx\n", c.spec, (long long)s->budget);
      return 1;
    }
    if (!c.n_cov && s->sparse) {
      const double cov = s->budget ? (double)s->budget / (double)c.ctx[0] : s->coverage;
      c.coverage[0] = cov < 1 ? cov : 1;
      c.n_cov = 1;
    }
  }
  if (!c.n_cov) c.n_cov = 1; /* 0.25; a spec that does not load or is dense is refused by the run */
  if (json && qgen_dir_writable(json, why, sizeof why) != 0) {
    fprintf(stderr, "qgen: eval: --json %s\n", why);
    return 1;
  }
  const int same = json ? qgen_opts_not_input("eval", "--json", json, c.spec) : 0;
  if (same) return same;
  /* the command, for the record */
  size_t cl = 16;
  for (int i = 0; i < argc; i++) cl += strlen(argv[i]) + 3;
  char *cmd = xcalloc(cl, 1);
  strcpy(cmd, "qgen eval");
  for (int i = 0; i < argc; i++) {
    strcat(cmd, " ");
    const int q = strpbrk(argv[i], " \t\"'$") != NULL;
    if (q) strcat(cmd, "'");
    strcat(cmd, argv[i]);
    if (q) strcat(cmd, "'");
  }
  c.command = cmd;
  qgen_eval_result r;
  char err[4096];
  int rc = qgen_eval_run(&c, &r, err, sizeof err);
  if (rc == 77) {
    printf("%s — skipped%s\n", err, c.backend == QGEN_BACKEND_GPU ? " (--backend cpu runs it on the CPU reference)" : "");
    free(cmd);
    return 77;
  }
  if (rc != 0) {
    fprintf(stderr, "%s\n", err);
    free(cmd);
    return rc;
  }
  printf("qgen eval: %s, backend %s%s%s, %d trials per cell", c.spec, r.backend, r.device[0] ? " " : "", r.device,
         c.trials);
  if (c.steps > 1) printf(" x %d steps (drift %g), selecting every %d", c.steps, c.wl.drift, c.reselect);
  printf("\n");
  qgen_eval_print(&r, stdout);
  if (json) rc = qgen_eval_write_json(&c, &r, json);
  qgen_eval_result_free(&r);
  free(cmd);
  return rc;
}
