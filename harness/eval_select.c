/* eval_select.c — the selectors of `qgen eval` at equal budget and what is measured of
 * them (eval.c explains the method): page scores and rankings of the host selectors
 * (oracle, meanpool, quest-i8, the two-stage rescoreR), the decode path's own lists, the
 * coverage each ranking needs, the fp64 reference outputs, and one workload's metrics added
 * to its cells. Host work runs on workload.c's parallel-for, one KV head (or run of pages)
 * an item.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/eval_int.h"
#include "runtime/qgen_ext.h"
#include "ref/ref.h"

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

typedef struct {
  ev *e;
} pm_job;

/* Projected mean key of page p, head h, from rows k of the page (n tokens). */
void eval_project_mean(const ev *e, const float *k, int64_t n, int h, float *out) {
  double *mean = eval_xcalloc((size_t)e->D, sizeof *mean);
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
    eval_project_mean(e, e->hk + (size_t)t0 * e->row, t1 - t0, h, e->pm + ((size_t)p * e->Hkv + h) * e->R);
}
void eval_page_means(ev *e) {
  pm_job pj = {e};
  qgen_wl_parallel(e->np, e->threads, pm_page, &pj);
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
  scored *s = eval_xcalloc((size_t)e->np, sizeof *s);
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
  double *o = eval_xcalloc((size_t)e->Hq * e->D, sizeof *o);
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
  double *lo = eval_xcalloc((size_t)D, sizeof *lo), *hi = eval_xcalloc((size_t)D, sizeof *hi);
  uint8_t *codes = eval_xcalloc((size_t)D, 2);
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
  uint8_t *want = eval_xcalloc((size_t)np, 1);
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

/* Oracle's and meanpool's page scores and rankings (shared by every variant and coverage). */
void eval_host_rankings(ev *e, const qgen_wl_trial *T, const qgen_wl_plan *P) {
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
        float *k = eval_xcalloc((size_t)(b - a) * e->row, sizeof *k);
        qgen_wl_rows(T, P, a, b, k, NULL);
        for (int h = 0; h < e->Hkv; h++)
          eval_project_mean(e, k, b - a, h, e->pm_ovr + ((size_t)(e->n_ovr_trial + j) * e->Hkv + h) * e->R);
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

/* Every selector's selection at every coverage into mark (and the host selectors' lists
   into hlist, sets HSET(c, sel)); returns |forced|. The variant's scores are in place
   (variant_scores). */
int64_t eval_build_selections(ev *e, int vi) {
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
int eval_reference(ev *e, int vi) {
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
  int32_t **lp = eval_xcalloc((size_t)nsets * e->Hkv, sizeof *lp);
  int64_t *cnts = eval_xcalloc((size_t)nsets * e->Hkv, sizeof *cnts);
  double *out = eval_xcalloc((size_t)nsets * e->Hq * e->D, sizeof *out);
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
  if (n > m->cap) free(m->b), m->b = eval_xcalloc(n, 1), m->cap = n;
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
int eval_variant_scores(ev *e, int vi, const qgen_wl_trial *T) {
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
void eval_score_variant(ev *e, int vi, int ti, int mi, const qgen_wl_plan *P, const double *need, int exact_ok) {
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
void eval_needs(ev *e, const qgen_wl_plan *P, int64_t nf, double *need) {
  for (int si = 0; si < e->cfg->n_sel; si++) {
    const int sel = e->cfg->selectors[si];
    if (!rescore_r(sel)) need[sel] = coverage_needed(e, e->score[sel], P, e->forced, nf);
  }
}
