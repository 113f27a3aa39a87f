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

/* The GPU's lists of sequence seq against the reference's (ranked by the 8-bit bounds when
   i8): the near-ties, or -1 with why. With a top-p cut, *cut counts the heads whose
   reference list it shortened (so a reader sees the cut was exercised, not only the full
   two-stage lists). */
static int compare_lists(const qgen_layout *L, const qgen_kvmem *m, int seq, int64_t len, const void *q,
                         const qgen_budget *b, int i8, const int *glist, const int *gcount, int64_t pps, int *cut, char *why,
                         size_t wn) {
  const int64_t n = qgen_pages_of(len, L->block);
  double *sc = malloc(sizeof(double) * (size_t)(n * L->n_head_kv + 1));
  int32_t *rl = malloc(sizeof(int32_t) * (size_t)(n + 1));
  uint8_t *in_g = calloc((size_t)n + 1, 1), *in_r = calloc((size_t)n + 1, 1), *forced = malloc((size_t)n + 1);
  uint8_t *in_c = calloc((size_t)n + 1, 1), *in_k = calloc((size_t)n + 1, 1);
  double *ex = L->rescore > 1 ? malloc(sizeof(double) * (size_t)(n + 1)) : NULL;
  uint8_t *codes = malloc((size_t)2 * L->head_dim);
  (i8 ? qgen_ref_estimate_i8 : qgen_ref_estimate)(L, m, seq, q, sc);
  qgen_forced_pages(b, len, L->block, forced);
  /* float summation error bound of the GPU score, with margin */
  const uint16_t *bd = m->bounds;
  float *qf = malloc(sizeof(float) * (size_t)L->n_head * L->head_dim);
  qgen_type_traits_of(L->in_type)->to_f32(q, qf, (int64_t)L->n_head * L->head_dim);
  int near = 0;
  for (int h = 0; h < L->n_head_kv && near >= 0; h++) {
    double sabs = 0;
    for (int64_t p = 0; p < n; p++) {
      const uint16_t *pb = bd + ((int64_t)m->page_table[(int64_t)seq * m->pages_per_seq + p] * L->n_head_kv + h) * 2 * L->head_dim;
      /* 8-bit bounds: the GPU sums offset * sum q and scale * (q . codes), each term at most
         (|offset| + 255 scale) * |q_d| */
      double i8mag = 0;
      uint16_t so[2];
      if (i8 && qgen_ref_bounds_i8(pb, L->head_dim, so, codes) == 0)
        i8mag = 2 * (fabs(qgen_f16_to_f32(so[0])) + 255.0 * qgen_f16_to_f32(so[1]));
      for (int g = 0; g < L->group; g++) {
        double s = 0;
        for (int d = 0; d < L->head_dim; d++) {
          double a = fabs(qgen_f16_to_f32(pb[d])), c = fabs(qgen_f16_to_f32(pb[L->head_dim + d]));
          s += fabs(qf[(h * L->group + g) * L->head_dim + d]) * (i8 ? i8mag : a > c ? a : c);
        }
        if (s > sabs) sabs = s;
      }
    }
    const double tol = L->head_dim * 0x1p-22 * sabs + 1e-30;
    const double *s = sc + h * n;
    int64_t rc = qgen_ref_select(b, len, L->block, s, rl);
    if (ex) { /* two-stage: the reference's candidates (forced ∪ the best C by Quest), then its list */
      int64_t nf = 0;
      for (int64_t p = 0; p < n; p++) nf += forced[p];
      const int64_t keep = qgen_budget_pages(b, n, nf, L->block) - nf, C = keep * L->rescore < n - nf ? keep * L->rescore : n - nf;
      const qgen_budget bc = {QGEN_BUDGET_TOKENS, 0, (nf + C) * L->block, b->sink, b->recent};
      const int64_t cc = qgen_ref_select(&bc, len, L->block, s, rl);
      memset(in_c, 0, (size_t)n);
      for (int64_t i = 0; i < cc; i++) in_c[rl[i]] = !forced[rl[i]];
      qgen_ref_sketch_scores(L, m, seq, q, h, NULL, ex);
      rc = qgen_ref_select_rescore(b, len, L->block, L->rescore, s, ex, rl);
      if (L->top_p < 1) { /* the two-stage list, then its top-p cut */
        memset(in_k, 0, (size_t)n);
        for (int64_t i = 0; i < rc; i++) in_k[rl[i]] = 1;
        const int64_t full = rc;
        rc = qgen_ref_select_top_p(b, len, L->block, L->rescore, L->top_p, L->scale, s, ex, rl);
        *cut += rc < full;
      }
    }
    if (rc != gcount[h] && !(ex && L->top_p < 1)) { /* a top-p count may differ by near-ties of the mass */
      snprintf(why, wn, "head %d: %d pages selected, reference %lld", h, gcount[h], (long long)rc);
      near = -1;
      break;
    }
    memset(in_g, 0, (size_t)n);
    memset(in_r, 0, (size_t)n);
    for (int64_t i = 0; i < rc; i++) in_r[rl[i]] = 1;
    for (int i = 0; i < gcount[h]; i++) {
      int p = glist[h * pps + i];
      if (p < 0 || p >= n || in_g[p] || (i > 0 && glist[h * pps + i - 1] >= p)) {
        snprintf(why, wn, "head %d: list not ascending / out of range at %d (page %d)", h, i, p);
        near = -1;
        break;
      }
      in_g[p] = 1;
    }
    if (near < 0) break;
    if (ex && L->top_p < 1 && (rc != gcount[h] || memcmp(in_g, in_r, (size_t)n))) {
      const int r = top_p_tie(L, n, len, ex, in_g, in_r, in_k, in_c, forced, tol, h, why, wn);
      if (r < 0) near = -1;
      else near += r;
      continue;
    }
    if (ex) {
      const int r = two_stage_tie(n, s, ex, in_g, in_r, in_c, forced, tol, h, why, wn);
      if (r < 0) near = -1;
      else near += r;
      continue;
    }
    double thr = INFINITY; /* lowest reference score among selected non-forced pages */
    for (int64_t p = 0; p < n; p++)
      if (in_r[p] && !forced[p] && s[p] < thr) thr = s[p];
    for (int64_t p = 0; p < n; p++) {
      if (in_g[p] == in_r[p]) continue;
      if (forced[p] || !(fabs(s[p] - thr) <= tol)) {
        snprintf(why, wn, "head %d: page %lld %s by the GPU only, score %.9g vs threshold %.9g (tol %.3g)", h,
                 (long long)p, in_g[p] ? "selected" : "dropped", s[p], thr, tol);
        near = -1;
        break;
      }
      near++;
    }
  }
  free(sc);
  free(rl);
  free(in_g);
  free(in_r);
  free(forced);
  free(qf);
  free(in_c);
  free(in_k);
  free(ex);
  free(codes);
  return near;
}

/* attend: dense and (sparse specs) sparse against the reference. */
/* The sparse step kv just took (GPU) against the reference over the host cache m of the same
   tokens: each sequence's lists by compare_lists (ranked by the 8-bit bounds when i8), and
   in ref the reference attention over the GPU's lists, for the caller's rel_err. Returns
   whether every list matched; near, total, cut and why describe them. */
int check_sparse_vs_ref(qgen_ctx *gc, const qgen_layout *L, qgen_kv *kv, const qgen_kvmem *m, int nb, const int64_t *lens,
                         const uint8_t *q, const qgen_budget *bs, const qgen_ref_order *ord, int i8, double *ref, int *near,
                         int *total, int *cut, char *why, size_t wn) {
  const int64_t pps = qgen_kv_pages_per_seq(kv);
  int *lists = malloc(sizeof(int) * (size_t)(L->n_head_kv * pps)), *counts = malloc(sizeof(int) * L->n_head_kv);
  const int32_t **lp = malloc(sizeof(int32_t *) * L->n_head_kv);
  int64_t *cn = malloc(sizeof(int64_t) * L->n_head_kv);
  int bad = 0;
  for (int i = 0; i < nb && !bad; i++) {
    API(qgen_kv_selection(kv, i, lists, counts));
    int r = compare_lists(L, m, i, lens[i], q + i * L->q_bytes, bs, i8, lists, counts, pps, cut, why, wn);
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
