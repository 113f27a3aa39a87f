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
#include "harness/eval_int.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/rng.h"
#include "base/util.h"
#include "base/cudrv.h"
#include "runtime/qgen_ext.h"
#include "ref/ref.h"

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

void *eval_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "qgen eval: out of memory (%zu x %zu bytes)\n", n, size);
    exit(2);
  }
  return p;
}

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
  float *v = eval_xcalloc((size_t)(t1 - t0) * e->row, sizeof *v);
  float *k = e->hk + (size_t)t0 * e->row;
  qgen_wl_haystack(&e->w, t0, t1, k, v);
  const qgen_type_traits *it = qgen_type_traits_of(e->L->in_type);
  it->from_f32(k, j->stage_k + (size_t)(t0 - j->b0) * e->rowb, (int64_t)((size_t)(t1 - t0) * e->row));
  it->from_f32(v, j->stage_v + (size_t)(t0 - j->b0) * e->rowb, (int64_t)((size_t)(t1 - t0) * e->row));
  free(v);
}

static const float *src_keys(void *ctx, int64_t t0, int64_t t1, float *scratch) {
  (void)t1;
  (void)scratch;
  return ((ev *)ctx)->hk + (size_t)t0 * ((ev *)ctx)->row;
}

/* ---- the run ----------------------------------------------------------------------------------- */

static double now_s(void) { return qgen_now_ms() * 1e-3; }

int eval_fail(ev *e, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->err, e->errn, fmt, ap);
  va_end(ap);
  return code;
}

/* Whether a cache of type cache holds every value of type in unchanged. */
static int stores_exactly(qgen_type cache, qgen_type in) {
  return cache == in || qgen_type_traits_of(cache)->exact;
}

/* Open every variant; they must share the shape. */
static int open_variants(ev *e) {
  const qgen_eval_cfg *cfg = e->cfg;
  e->nv = cfg->n_variants > 0 ? cfg->n_variants : 1;
  e->ctx = eval_xcalloc((size_t)e->nv, sizeof *e->ctx);
  e->kv = eval_xcalloc((size_t)e->nv, sizeof *e->kv);
  e->ktype = eval_xcalloc((size_t)e->nv, sizeof *e->ktype);
  e->vname = eval_xcalloc((size_t)e->nv, sizeof *e->vname);
  for (int vi = 0; vi < e->nv; vi++) {
    qgen_open_opts o = {cfg->backend, 0, cfg->n_variants > 0 ? cfg->variants[vi] : NULL, NULL};
    qgen_status st = qgen_harness_open(&e->ctx[vi], cfg->spec, &o, cfg->v_tau);
    if (st != QGEN_OK) return eval_fail(e, qgen_harness_open_exit(st), "qgen eval: %s", qgen_error(e->ctx[vi]));
    qgen_info info;
    qgen_get_info(e->ctx[vi], &info);
    const qgen_layout *L = qgen_ext_layout(e->ctx[vi]), *L0 = qgen_ext_layout(e->ctx[0]);
    if (!L->sparse) return eval_fail(e, 1, "qgen eval: spec %s is dense; the evaluation needs a sparse spec", info.name);
    if (L->head_dim != L0->head_dim || L->n_head != L0->n_head || L->n_head_kv != L0->n_head_kv ||
        L->block != L0->block || L->in_type != L0->in_type || L->out_type != L0->out_type || L->scale != L0->scale)
      return eval_fail(e, 1, "qgen eval: variants %s and %s differ in shape; evaluate them in separate runs",
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
  if (e->Hkv > 32) return eval_fail(e, 1, "qgen eval: more than 32 KV heads");
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
    return eval_fail(e, 2, "qgen eval: no host memory for %lld tokens of keys (%.1f GiB)", (long long)N,
                (double)N * e->row * 4 / (1u << 30));
  if (dalloc(&e->d, &e->bk, (size_t)N * e->rowb) || dalloc(&e->d, &e->bv, (size_t)N * e->rowb) ||
      dalloc(&e->d, &e->pk, e->nspec_max * e->rowb) || dalloc(&e->d, &e->pv, e->nspec_max * e->rowb) ||
      dalloc(&e->d, &e->dq, e->L->q_bytes) || dalloc(&e->d, &e->dout, (size_t)(nc + 1) * e->L->out_bytes))
    return eval_fail(e, 2, "qgen eval: cannot allocate the buffers of a %lld-token context", (long long)N);
  for (int vi = 0; vi < e->nv; vi++) API(vi, qgen_cache_create(e->ctx[vi], &e->kv[vi], 1, N));
  e->pm = eval_xcalloc((size_t)np * e->Hkv * e->R, sizeof *e->pm);
  e->spec_pos = eval_xcalloc(e->nspec_max, sizeof *e->spec_pos);
  e->spec_src = eval_xcalloc(e->nspec_max, sizeof *e->spec_src);
  e->prow_k = eval_xcalloc(e->nspec_max * e->row, sizeof *e->prow_k);
  e->prow_v = eval_xcalloc(e->nspec_max * e->row, sizeof *e->prow_v);
  e->patch_k = eval_xcalloc(e->nspec_max * e->rowb, 1);
  e->patch_v = eval_xcalloc(e->nspec_max * e->rowb, 1);
  e->page_ovr = eval_xcalloc((size_t)np, sizeof *e->page_ovr);
  e->pm_ovr = eval_xcalloc(e->nspec_max * e->Hkv * e->R, sizeof *e->pm_ovr); /* >= pages holding specials */
  e->pmax = eval_xcalloc((size_t)np * e->Hq, sizeof *e->pmax);
  e->plse = eval_xcalloc((size_t)np * e->Hq, sizeof *e->plse);
  e->lse_tot = eval_xcalloc((size_t)e->Hq, sizeof *e->lse_tot);
  e->wgt = eval_xcalloc((size_t)np * e->Hq, sizeof *e->wgt);
  for (int s = 0; s < QGEN_SEL_COUNT; s++) {
    e->score[s] = eval_xcalloc((size_t)e->Hkv * np, sizeof(double));
    e->order[s] = eval_xcalloc((size_t)e->Hkv * np, sizeof(int32_t));
  }
  e->forced = eval_xcalloc((size_t)np, 1);
  e->mark = eval_xcalloc((size_t)nc * QGEN_SEL_COUNT * e->Hkv * np, 1);
  e->qlist = eval_xcalloc((size_t)nc * e->Hkv * np, sizeof *e->qlist);
  e->qcount = eval_xcalloc((size_t)nc * e->Hkv, sizeof *e->qcount);
  e->hlist = eval_xcalloc((size_t)N_HSETS(nc) * e->Hkv * np, sizeof *e->hlist);
  e->hcount = eval_xcalloc((size_t)N_HSETS(nc) * e->Hkv, sizeof *e->hcount);
  e->sketch = eval_xcalloc((size_t)e->Hkv * np, sizeof *e->sketch);
  e->outs = eval_xcalloc((size_t)(nc + 1) * e->Hq * e->D, sizeof *e->outs);
  e->refo = eval_xcalloc((size_t)N_HSETS(nc) * e->Hq * e->D, sizeof *e->refo);
  e->exact = eval_xcalloc((size_t)e->Hq * e->D, sizeof *e->exact);
  e->bounds = eval_xcalloc((size_t)np * e->L->bounds_page_bytes, 1);
  e->ptab = eval_xcalloc((size_t)np, sizeof *e->ptab);
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
    e->hkv_sl = eval_xcalloc(1, sizeof *e->hkv_sl);
    if (!e->hkv_k || !e->hkv_v) return eval_fail(e, 2, "qgen eval: no host memory for a copy of the cache");
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
  if (e->cfg->backend == QGEN_BACKEND_GPU) sk = eval_xcalloc((size_t)blk * e->rowb, 1), sv = eval_xcalloc((size_t)blk * e->rowb, 1);
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
      rc = eval_fail(e, 2, "qgen eval: uploading the haystack failed");
  }
  free(sk);
  free(sv);
  eval_page_means(e);
  e->res->t_haystack += now_s() - th;
  return rc;
}

/* The query q in in_type (qin, and on the backend: dq) and meanpool's projection of it. */
static int set_query(ev *e, const float *q) {
  qgen_type_traits_of(e->L->in_type)->from_f32(q, e->qin, (int64_t)e->Hq * e->D);
  if (dput(&e->d, e->dq, e->qin, e->L->q_bytes)) return eval_fail(e, 2, "qgen eval: uploading the query failed");
  for (int g = 0; g < e->Hq; g++)
    for (int r = 0; r < e->R; r++) {
      double s = 0;
      for (int d = 0; d < e->D; d++) s += (double)e->proj[(size_t)r * e->D + d] * q[(size_t)g * e->D + d];
      e->pq[(size_t)g * e->R + r] = (float)s;
    }
  return 0;
}

/* After qgen_wl_trial_init: upload the query, project it, and put the trial's special rows
   (token 0, the recency window) at the front of the patch buffer; meanpool gets the means
   of the pages holding them. */
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
    return eval_fail(e, 2, "qgen eval: uploading the patch rows failed");
  for (int64_t p = 0; p < e->np; p++) e->page_ovr[p] = -1;
  e->n_ovr_trial = 0;
  for (int64_t p = 0; p < e->np; p++) {
    if (!(p == 0 || (p + 1) * e->B > N - W)) continue;
    e->page_ovr[p] = e->n_ovr_trial;
    const int64_t a = p * e->B, b = (p + 1) * e->B < N ? (p + 1) * e->B : N;
    float *k = eval_xcalloc((size_t)(b - a) * e->row, sizeof *k);
    qgen_wl_rows(T, NULL, a, b, k, NULL);
    for (int h = 0; h < e->Hkv; h++) eval_project_mean(e, k, b - a, h, e->pm_ovr + ((size_t)e->n_ovr_trial * e->Hkv + h) * e->R);
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
    eval_fail(e, 2, "qgen eval: uploading the patch rows failed");
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
  double *l = eval_xcalloc((size_t)e->Hq, sizeof *l), s = 0;
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
  float *f = eval_xcalloc((size_t)e->Hq * e->D, sizeof *f);
  for (int c = 0; c < nc + e->dense_on; c++) {
    if (dget(&e->d, e->outb, e->dout + (size_t)c * e->L->out_bytes, e->L->out_bytes)) {
      free(f);
      return eval_fail(e, 2, "qgen eval: reading the output failed");
    }
    ot->to_f32(e->outb, f, (int64_t)e->Hq * e->D);
    for (size_t i = 0; i < (size_t)e->Hq * e->D; i++) e->outs[(size_t)c * e->Hq * e->D + i] = f[i];
  }
  free(f);
  return 0;
}

/* --steps: decode steps 1 .. steps - 1 of variant vi over the same cache, the query drifting
   (qgen_wl_drift). Every reselect-th step selects again with its own query (the decode path
   and every host selector); the steps between reuse the last lists (their forced pages are
   this step's anyway: the cache does not grow). Each step adds to the cells, scored against
   its own query's attention (recall, mass; no output errors). Leaves the trial's query,
   statistics and host rankings in place for the next variant. */
static int drift_steps(ev *e, int vi, const qgen_wl_trial *T, const qgen_wl_plan *P, int ti, int mi, double *need) {
  const size_t nq = (size_t)e->Hq * e->D;
  float *q = eval_xcalloc(nq, sizeof *q);
  memcpy(q, T->q, nq * sizeof *q);
  qgen_wl_trial Tq = *T;
  Tq.q = q;
  int rc = 0;
  for (int s = 1; s < e->cfg->steps && !rc; s++) {
    qgen_wl_drift(T, s - 1, q, q);
    qgen_wl_query_stats(T, P, q, e->pmax, e->plse, e->threads);
    set_weights(e, &Tq, P);
    if (s % e->cfg->reselect == 0) {
      if ((rc = set_query(e, q)) != 0 || (rc = decode(e, vi)) != 0 || (rc = eval_variant_scores(e, vi, &Tq)) != 0) break;
      eval_host_rankings(e, &Tq, P);
      eval_needs(e, P, eval_build_selections(e, vi), need);
    }
    eval_score_variant(e, vi, ti, mi, P, need, 0);
  }
  free(q);
  if (rc) return rc;
  qgen_wl_page_stats(T, P, e->pmax, e->plse);
  set_weights(e, T, P);
  eval_host_rankings(e, T, P);
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
  eval_host_rankings(e, T, P);
  res->t_host_sel += now_s() - t;
  int exact_ok = 0, rc;
  for (int vo = 0; vo < e->nv; vo++) {
    const int lo = e->lossless;
    const int vi = lo < 0 ? vo : vo == 0 ? lo : vo <= lo ? vo - 1 : vo;
    t = now_s();
    if ((rc = append_sequence(e, vi, nspec)) != 0 || (rc = decode(e, vi)) != 0) return rc;
    res->t_backend += now_s() - t;
    t = now_s();
    if ((rc = eval_variant_scores(e, vi, T)) != 0) return rc;
    double need[QGEN_SEL_COUNT] = {0};
    eval_needs(e, P, eval_build_selections(e, vi), need);
    res->t_host_sel += now_s() - t;
    t = now_s();
    if (e->ref_on && (rc = eval_reference(e, vi)) != 0) return rc;
    res->t_ref += now_s() - t;
    if (vo == 0 && vi == lo && (e->ref_on || e->dense_on)) {
      memcpy(e->exact, e->ref_on ? e->refo : e->outs + (size_t)e->cfg->n_cov * e->Hq * e->D,
             (size_t)e->Hq * e->D * sizeof *e->exact);
      exact_ok = 1;
    }
    eval_score_variant(e, vi, ti, mi, P, need, exact_ok);
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
  res->rows = eval_xcalloc((size_t)cfg->n_ctx * e->nv * nt * nm * nc * ns, sizeof *res->rows);
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
  res->thr = eval_xcalloc((size_t)cfg->n_ctx * e->nv * nt * nc * ns, sizeof *res->thr);
  int *mo = eval_xcalloc((size_t)nm, sizeof *mo);
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
      rc = eval_fail(e, 2, "qgen eval: trial setup failed");
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
    rc = eval_fail(&e, 1, "qgen eval: needs a spec and non-empty lists (tasks, contexts, coverages, selectors, margins)");
  if (!rc && (cfg->trials < 1 || cfg->proj_dim < 1 || cfg->chunk < 1))
    rc = eval_fail(&e, 1, "qgen eval: --trials %d, --proj-dim %d, --chunk %lld: each must be >= 1", cfg->trials, cfg->proj_dim,
              cfg->chunk);
  if (!rc && !(cfg->top_p > 0 && cfg->top_p <= 1))
    rc = eval_fail(&e, 1, "qgen eval: top-p %g is not in (0, 1]", cfg->top_p);
  if (!rc && (cfg->steps < 1 || cfg->steps > 4096 || cfg->reselect < 1))
    rc = eval_fail(&e, 1, "qgen eval: steps %d / reselect %d: need 1 <= steps <= 4096 and reselect >= 1", cfg->steps,
              cfg->reselect);
  char why[160];
  if (!rc && qgen_wl_params_check(&cfg->wl, why, sizeof why) != 0) rc = eval_fail(&e, 1, "qgen eval: workload knob %s", why);
  for (int i = 0; i < cfg->n_cov && !rc; i++)
    if (!(cfg->coverage[i] > 0 && cfg->coverage[i] <= 1)) rc = eval_fail(&e, 1, "qgen eval: coverage %g is not in (0, 1]", cfg->coverage[i]);
  for (int i = 0; i < cfg->n_ctx && !rc; i++)
    if (cfg->ctx[i] < 1 || cfg->ctx[i] > INT32_MAX) rc = eval_fail(&e, 1, "qgen eval: context %lld is out of range", cfg->ctx[i]);
  if (!rc) rc = open_variants(&e);
  if (!rc) {
    const size_t ncell = (size_t)cfg->n_ctx * e.nv * cfg->n_tasks * cfg->n_margin * cfg->n_cov * cfg->n_sel;
    e.cells = eval_xcalloc(ncell, sizeof *e.cells);
    for (size_t i = 0; i < ncell; i++) e.cells[i].mass_min = INFINITY;
    /* meanpool's projection: fixed for the run */
    e.proj = eval_xcalloc((size_t)e.R * e.D, sizeof *e.proj);
    for (int i = 0; i < e.R * e.D; i++) e.proj[i] = qgen_wl_gauss(cfg->seed ^ 0x6d65616e706f6f6cull, 1, (uint64_t)i);
    e.pq = eval_xcalloc((size_t)e.Hq * e.R, sizeof *e.pq);
    e.qin = eval_xcalloc(e.L->q_bytes, 1);
    e.outb = eval_xcalloc(e.L->out_bytes, 1);
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
