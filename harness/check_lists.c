/* check_lists.c — the GPU's page lists against the reference selection (check.c says how
 * the checks compare). Pages in one list and not the other must sit within a float tolerance
 * of the reference's threshold score (near-ties); two-stage selection has two thresholds and
 * a top-p cut a mass rule of its own.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness/check_int.h"

/* Compare the GPU's page lists of one sequence with the reference selection. Pages in one
   list and not the other must sit within tol of the reference threshold score. Two-stage
   selection (rescore > 1) has two thresholds: the Quest score of the last candidate and the
   exact score of the last page kept (two_stage_tie). Returns the number of such near-ties,
   or -1 when a difference is not a near-tie. */
static int two_stage_tie(int64_t n, const double *s, const double *ex, const uint8_t *in_g, const uint8_t *in_r, const uint8_t *in_c,
                         const uint8_t *forced, double tol, int h, char *why, size_t wn) {
  /* thresholds: the Quest score of the reference's last candidate, the exact score of its
     last kept page; then what near-ties at the first may bring in (a page the GPU ranked a
     candidate: up to its exact score, it displaces kept pages) or leave out */
  double thr1 = INFINITY, thr3 = INFINITY, brought = -INFINITY;
  int left_out = 0;
  for (int64_t p = 0; p < n; p++) {
    if (in_c[p] && s[p] < thr1) thr1 = s[p];
    if (in_r[p] && !forced[p] && ex[p] < thr3) thr3 = ex[p];
  }
  for (int64_t p = 0; p < n; p++) {
    const int tie1 = fabs(s[p] - thr1) <= tol;
    if (in_g[p] && !in_r[p] && !in_c[p] && tie1 && ex[p] > brought) brought = ex[p];
    if (in_r[p] && !in_g[p] && tie1) left_out = 1;
  }
  int near = 0;
  for (int64_t p = 0; p < n; p++) {
    if (in_g[p] == in_r[p]) continue;
    const int tie1 = fabs(s[p] - thr1) <= tol, tie3 = fabs(ex[p] - thr3) <= tol;
    const int ok = !forced[p] && (tie3 || (in_g[p] ? (in_c[p] ? left_out : tie1) : tie1 || ex[p] <= brought + tol));
    if (!ok) {
      snprintf(why, wn, "head %d: page %lld %s by the GPU only, %s; Quest %.9g vs %.9g, exact %.9g vs %.9g (tol %.3g)", h,
               (long long)p, in_g[p] ? "selected" : "dropped", in_c[p] ? "a candidate" : "not a candidate", s[p], thr1, ex[p], thr3,
               tol);
      return -1;
    }
    near++;
  }
  return near;
}

/* The top-p cut (layout top_p < 1) of one head, where the GPU's list in_g differs from the
   reference's: it must keep the forced pages and a best-first part of the reference's
   two-stage list in_k (a page outside it only as a near-tie of its lowest exact score;
   every kept candidate at least as good, by exact score within tol, as every one it cut),
   and hold the mass share up to rounding: the pages it kept reach p of
   the candidates' estimated mass less eps (or it kept them all), and without its worst one
   they stay below p plus eps. eps, relative to the total: 1e-5 for the GPU's f32
   exponentials summed in 2^-40 units, plus what its exact scores' error (tol, in both a
   page's score and the best one) does to exp(scale * (exact - best)). Returns the
   near-ties (pages in one list only, against in_r), or -1. */
static int top_p_tie(const qgen_layout *L, int64_t n, int64_t len, const double *ex, const uint8_t *in_g, const uint8_t *in_r,
                     const uint8_t *in_k, const uint8_t *in_c, const uint8_t *forced, double tol, int h, char *why, size_t wn) {
  double top = -INFINITY, total = 0, kept = 0, worst = INFINITY, worst_mass = 0, best_cut = -INFINITY, low = INFINITY;
  int all = 1, near = 0;
  for (int64_t p = 0; p < n; p++) {
    if (in_c[p] && ex[p] > top) top = ex[p];
    if (in_k[p] && !forced[p] && ex[p] < low) low = ex[p];
  }
  for (int64_t p = 0; p < n; p++) {
    const double cnt = (double)((p + 1) * L->block < len ? L->block : len - p * L->block);
    const double w = isnan(ex[p]) || top == -INFINITY ? 0.0 : cnt * exp(L->scale * (ex[p] - top));
    if (in_c[p]) total += w;
    if (forced[p] && !in_g[p]) {
      snprintf(why, wn, "head %d: forced page %lld cut by top-p", h, (long long)p);
      return -1;
    }
    if (forced[p]) continue;
    if (in_g[p] && !in_k[p] && !(ex[p] >= low - tol)) {
      snprintf(why, wn, "head %d: page %lld (exact %.9g) kept by top-p is not in the two-stage list (lowest %.9g, tol %.3g)", h,
               (long long)p, ex[p], low, tol);
      return -1;
    }
    if (in_g[p]) {
      kept += w;
      if (!isnan(ex[p]) && ex[p] < worst) worst = ex[p], worst_mass = w;
    } else if (in_k[p]) {
      all = 0;
      if (isnan(ex[p]) || ex[p] > best_cut) best_cut = isnan(ex[p]) ? INFINITY : ex[p];
    }
    near += in_g[p] != in_r[p];
  }
  if (!(total > 0) || !isfinite(total)) { /* no mass to cut by: every kept candidate stays */
    if (all) return near;
    snprintf(why, wn, "head %d: top-p cut pages with no finite positive candidate mass", h);
    return -1;
  }
  const double want = L->top_p * total, eps = (1e-5 + expm1(2 * fabs(L->scale) * tol)) * total;
  if (best_cut > worst + tol) {
    snprintf(why, wn, "head %d: top-p cut a page of exact score %.9g and kept one of %.9g (tol %.3g)", h, best_cut, worst, tol);
    return -1;
  }
  if (!(all || kept >= want - eps) || !(kept - worst_mass < want + eps)) {
    snprintf(why, wn, "head %d: top-p kept mass %.9g of %.9g (p %.9g; without its worst page %.9g)", h, kept, total, L->top_p,
             kept - worst_mass);
    return -1;
  }
  return near;
}

/* a[i] = max(a[i], b[i]), a NaN in either kept (the reference's rule for a page's score) */
static void max_keep_nan(double *a, const double *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!isnan(a[i]) && (isnan(b[i]) || b[i] > a[i])) a[i] = b[i];
}

/* One sequence's comparison: its inputs and per-page buffers (n pages, +1 so that an empty
   sequence allocates). */
typedef struct {
  const qgen_layout *L;
  const qgen_kvmem *m;
  int seq, i8, nq; /* nq: the step's query tokens (q holds their rows), scored by the max over them */
  int64_t len, n;
  const void *q;
  const qgen_budget *b;
  double *sc;     /* [n_head_kv][n] the reference's page scores */
  double *ex;     /* [n] two-stage: the exact scores of one head; NULL without */
  int32_t *rl;    /* the reference's list of one head */
  uint8_t *in_g, *in_r, *in_c, *in_k, *forced; /* per page: GPU list, reference list, candidates, two-stage list, forced */
  uint8_t *codes; /* 8-bit bounds of one page */
  float *qf;      /* the queries as f32 */
} lcmp;

/* The float summation error bound of the GPU's page score in head h, with margin. */
static double head_tol(const lcmp *c, int h) {
  const qgen_layout *L = c->L;
  const qgen_kvmem *m = c->m;
  const uint16_t *bd = m->bounds;
  double sabs = 0;
  for (int64_t p = 0; p < c->n; p++) {
    const uint16_t *pb = bd + ((int64_t)m->page_table[(int64_t)c->seq * m->pages_per_seq + p] * L->n_head_kv + h) * 2 * L->head_dim;
    /* 8-bit bounds: the GPU sums offset * sum q and scale * (q . codes), each term at most
       (|offset| + 255 scale) * |q_d| */
    double i8mag = 0;
    uint16_t so[2];
    if (c->i8 && qgen_ref_bounds_i8(pb, L->head_dim, so, c->codes) == 0)
      i8mag = 2 * (fabs(qgen_f16_to_f32(so[0])) + 255.0 * qgen_f16_to_f32(so[1]));
    for (int j = 0; j < c->nq; j++)
      for (int g = 0; g < L->group; g++) {
        double s = 0;
        const float *qg = c->qf + ((size_t)j * L->n_head + (size_t)h * L->group + g) * L->head_dim;
        for (int d = 0; d < L->head_dim; d++) {
          double a = fabs(qgen_f16_to_f32(pb[d])), cc = fabs(qgen_f16_to_f32(pb[L->head_dim + d]));
          s += fabs(qg[d]) * (c->i8 ? i8mag : a > cc ? a : cc);
        }
        if (s > sabs) sabs = s;
      }
  }
  return L->head_dim * 0x1p-22 * sabs + 1e-30;
}

/* The reference's list of head h (page scores s) into c->rl: its length. With two-stage
   selection also its candidates (c->in_c: forced ∪ the best C by Quest, forced left out),
   the exact scores (c->ex) and, with a top-p cut, the full two-stage list (c->in_k) the cut
   shortened (counted in *cut). */
static int64_t ref_list(lcmp *c, int h, const double *s, int *cut) {
  const qgen_layout *L = c->L;
  const qgen_budget *b = c->b;
  const int64_t n = c->n, len = c->len;
  int64_t rc = qgen_ref_select(b, len, L->block, s, c->rl);
  if (!c->ex) return rc;
  int64_t nf = 0;
  for (int64_t p = 0; p < n; p++) nf += c->forced[p];
  const int64_t keep = qgen_budget_pages(b, n, nf, L->block) - nf, C = keep * L->rescore < n - nf ? keep * L->rescore : n - nf;
  const qgen_budget bc = {QGEN_BUDGET_TOKENS, 0, (nf + C) * L->block, b->sink, b->recent};
  const int64_t cc = qgen_ref_select(&bc, len, L->block, s, c->rl);
  memset(c->in_c, 0, (size_t)n);
  for (int64_t i = 0; i < cc; i++) c->in_c[c->rl[i]] = !c->forced[c->rl[i]];
  qgen_ref_sketch_scores(L, c->m, c->seq, c->q, h, NULL, c->ex);
  for (int j = 1; j < c->nq; j++) { /* a step's: the max over its tokens */
    double *x = malloc(sizeof(double) * (size_t)(n + 1));
    qgen_ref_sketch_scores(L, c->m, c->seq, (const uint8_t *)c->q + (size_t)j * L->q_bytes, h, NULL, x);
    max_keep_nan(c->ex, x, n);
    free(x);
  }
  rc = qgen_ref_select_rescore(b, len, L->block, L->rescore, s, c->ex, c->rl);
  if (L->top_p < 1) { /* the two-stage list, then its top-p cut */
    memset(c->in_k, 0, (size_t)n);
    for (int64_t i = 0; i < rc; i++) c->in_k[c->rl[i]] = 1;
    const int64_t full = rc;
    rc = qgen_ref_select_top_p(b, len, L->block, L->rescore, L->top_p, L->scale, s, c->ex, c->rl);
    *cut += rc < full;
  }
  return rc;
}

/* The GPU's list of head h (count pages at list) into c->in_g: 0, or -1 with why when it is
   not ascending or leaves the sequence's pages. */
static int gpu_marks(lcmp *c, int h, const int *list, int count, char *why, size_t wn) {
  memset(c->in_g, 0, (size_t)c->n);
  for (int i = 0; i < count; i++) {
    int p = list[i];
    if (p < 0 || p >= c->n || c->in_g[p] || (i > 0 && list[i - 1] >= p)) {
      snprintf(why, wn, "head %d: list not ascending / out of range at %d (page %d)", h, i, p);
      return -1;
    }
    c->in_g[p] = 1;
  }
  return 0;
}

/* One-stage selection: a page in one list only must score within tol of the reference's
   threshold (its lowest selected non-forced page). The near-ties, or -1 with why. */
static int one_stage_tie(int64_t n, const double *s, const uint8_t *in_g, const uint8_t *in_r, const uint8_t *forced,
                         double tol, int h, char *why, size_t wn) {
  double thr = INFINITY; /* lowest reference score among selected non-forced pages */
  for (int64_t p = 0; p < n; p++)
    if (in_r[p] && !forced[p] && s[p] < thr) thr = s[p];
  int near = 0;
  for (int64_t p = 0; p < n; p++) {
    if (in_g[p] == in_r[p]) continue;
    if (forced[p] || !(fabs(s[p] - thr) <= tol)) {
      snprintf(why, wn, "head %d: page %lld %s by the GPU only, score %.9g vs threshold %.9g (tol %.3g)", h,
               (long long)p, in_g[p] ? "selected" : "dropped", s[p], thr, tol);
      return -1;
    }
    near++;
  }
  return near;
}

/* Head h's GPU list (count pages at list) against the reference's: near-ties, or -1. */
static int compare_head(lcmp *c, int h, const int *list, int count, int *cut, char *why, size_t wn) {
  const qgen_layout *L = c->L;
  const int64_t n = c->n;
  const double tol = head_tol(c, h);
  const double *s = c->sc + h * n;
  const int64_t rc = ref_list(c, h, s, cut);
  if (rc != count && !(c->ex && L->top_p < 1)) { /* a top-p count may differ by near-ties of the mass */
    snprintf(why, wn, "head %d: %d pages selected, reference %lld", h, count, (long long)rc);
    return -1;
  }
  memset(c->in_r, 0, (size_t)n);
  for (int64_t i = 0; i < rc; i++) c->in_r[c->rl[i]] = 1;
  if (gpu_marks(c, h, list, count, why, wn) != 0) return -1;
  if (c->ex && L->top_p < 1 && (rc != count || memcmp(c->in_g, c->in_r, (size_t)n)))
    return top_p_tie(L, n, c->len, c->ex, c->in_g, c->in_r, c->in_k, c->in_c, c->forced, tol, h, why, wn);
  if (c->ex) return two_stage_tie(n, s, c->ex, c->in_g, c->in_r, c->in_c, c->forced, tol, h, why, wn);
  return one_stage_tie(n, s, c->in_g, c->in_r, c->forced, tol, h, why, wn);
}

/* The GPU's lists of sequence seq against the reference's (ranked by the 8-bit bounds when
   i8): the near-ties, or -1 with why. With a top-p cut, *cut counts the heads whose
   reference list it shortened (so a reader sees the cut was exercised, not only the full
   two-stage lists). */
static int compare_lists(const qgen_layout *L, const qgen_kvmem *m, int seq, int64_t len, const void *q, int nq,
                         const qgen_budget *b, int i8, const int *glist, const int *gcount, int64_t pps, int *cut, char *why,
                         size_t wn) {
  const int64_t n = qgen_pages_of(len, L->block);
  lcmp c = {.L = L, .m = m, .seq = seq, .i8 = i8, .nq = nq, .len = len, .n = n, .q = q, .b = b};
  c.sc = malloc(sizeof(double) * (size_t)(n * L->n_head_kv + 1));
  c.rl = malloc(sizeof(int32_t) * (size_t)(n + 1));
  c.in_g = calloc((size_t)n + 1, 1), c.in_r = calloc((size_t)n + 1, 1), c.forced = malloc((size_t)n + 1);
  c.in_c = calloc((size_t)n + 1, 1), c.in_k = calloc((size_t)n + 1, 1);
  c.ex = L->rescore > 1 ? malloc(sizeof(double) * (size_t)(n + 1)) : NULL;
  c.codes = malloc((size_t)2 * L->head_dim);
  (i8 ? qgen_ref_estimate_i8 : qgen_ref_estimate)(L, m, seq, q, c.sc);
  for (int j = 1; j < nq; j++) { /* a step's: the max over its tokens */
    double *x = malloc(sizeof(double) * (size_t)(n * L->n_head_kv + 1));
    (i8 ? qgen_ref_estimate_i8 : qgen_ref_estimate)(L, m, seq, (const uint8_t *)q + (size_t)j * L->q_bytes, x);
    max_keep_nan(c.sc, x, n * L->n_head_kv);
    free(x);
  }
  qgen_forced_pages(b, len, L->block, c.forced);
  c.qf = malloc(sizeof(float) * (size_t)nq * L->n_head * L->head_dim);
  qgen_type_traits_of(L->in_type)->to_f32(q, c.qf, (int64_t)nq * L->n_head * L->head_dim);
  int near = 0;
  for (int h = 0; h < L->n_head_kv; h++) {
    const int r = compare_head(&c, h, glist + h * pps, gcount[h], cut, why, wn);
    if (r < 0) {
      near = -1;
      break;
    }
    near += r;
  }
  free(c.sc), free(c.rl), free(c.in_g), free(c.in_r), free(c.forced), free(c.qf), free(c.in_c), free(c.in_k), free(c.ex);
  free(c.codes);
  return near;
}

/* The sparse step kv just took (GPU) against the reference over the host cache m of the same
   tokens: each sequence's lists by compare_lists (ranked by the 8-bit bounds when i8), and
   in ref the reference attention over the GPU's lists, for the caller's rel_err. Returns
   whether every list matched; near, total and cut describe them, why the first that did not. */
int check_sparse_vs_ref(qgen_ctx *gc, const qgen_layout *L, qgen_kv *kv, const qgen_kvmem *m, int nb, const int64_t *lens,
                         const uint8_t *q, const qgen_budget *bs, const qgen_ref_order *ord, int i8, double *ref, int *near,
                         int *total, int *cut, char *why, size_t wn) {
  const int64_t pps = qgen_kv_pages_per_seq(kv);
  int *lists = malloc(sizeof(int) * (size_t)(L->n_head_kv * pps)), *counts = malloc(sizeof(int) * L->n_head_kv);
  const int32_t **lp = malloc(sizeof(int32_t *) * L->n_head_kv);
  int64_t *cn = malloc(sizeof(int64_t) * L->n_head_kv);
  int bad = 0;
  char later[512]; /* after the first mismatch, which why keeps, every sequence is still compared so that ref is whole */
  for (int i = 0; i < nb; i++) {
    API(qgen_kv_selection(kv, i, lists, counts));
    int r = compare_lists(L, m, i, lens[i], q + i * L->q_bytes, 1, bs, i8, lists, counts, pps, cut, bad ? later : why,
                          bad ? sizeof later : wn);
    if (r < 0) bad = 1;
    else *near += r;
    *total += L->n_head_kv;
    /* reference attention over the GPU's lists */
    for (int h = 0; h < L->n_head_kv; h++) lp[h] = lists + h * pps, cn[h] = counts[h];
    qgen_ref_attend_order(L, m, i, q + i * L->q_bytes, lp, cn, ord, NULL, ref + (int64_t)i * L->n_head * L->head_dim);
  }
  free(lists);
  free(counts);
  free(lp);
  free(cn);
  return !bad;
}

int check_steps_vs_ref(qgen_ctx *gc, const qgen_layout *L, qgen_kv *kv, const qgen_kvmem *m, int nb, const int64_t *lens,
                       const int *nq, const uint8_t *q, const qgen_budget *bs, int i8, double *ref, int *near, int *total,
                       int *cut, char *why, size_t wn) {
  const int64_t pps = qgen_kv_pages_per_seq(kv);
  int *lists = malloc(sizeof(int) * (size_t)(L->n_head_kv * pps)), *counts = malloc(sizeof(int) * L->n_head_kv);
  int32_t *rl = malloc(sizeof(int32_t) * (size_t)(L->n_head_kv * pps));
  int64_t *rc = malloc(sizeof(int64_t) * L->n_head_kv);
  int64_t max_len = 1;
  for (int i = 0; i < nb; i++) max_len = lens[i] > max_len ? lens[i] : max_len;
  qgen_ref_scratch *w = qgen_ref_scratch_new(L, max_len, NULL);
  const qgen_budget reuse = {QGEN_BUDGET_REUSE, 0, 0, 0, 0};
  int bad = 0;
  char later[512];
  int64_t row = 0; /* query rows of the earlier sequences */
  for (int i = 0; i < nb; i++) {
    const uint8_t *qi = q + (size_t)row * L->q_bytes;
    API(qgen_kv_selection(kv, i, lists, counts));
    int r = compare_lists(L, m, i, lens[i], qi, nq[i], bs, i8, lists, counts, pps, cut, bad ? later : why, bad ? sizeof later : wn);
    if (r < 0) bad = 1;
    else *near += r;
    *total += L->n_head_kv;
    /* the reference step over the GPU's lists (a reused selection: it holds the last page,
       so extending it adds nothing) */
    for (int h = 0; h < L->n_head_kv; h++) {
      memcpy(rl + h * pps, lists + h * pps, sizeof(int32_t) * (size_t)counts[h]);
      rc[h] = counts[h];
    }
    qgen_ref_step_tokens_in(w, L, m, i, nq[i], NULL, qi, &reuse, NULL, ref + row * L->n_head * L->head_dim, rl, rc);
    row += nq[i];
  }
  qgen_ref_scratch_free(w);
  free(lists), free(counts), free(rl), free(rc);
  return !bad;
}
