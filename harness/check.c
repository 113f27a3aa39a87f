/* check.c — `qgen check` (see check.h): the GPU executor against the CPU reference.
 *
 * Both backends run the same spec with the same memory layout, so the append check compares
 * raw bytes. Attention outputs are compared in relative L2 error against the reference's
 * fp64 result; sparse outputs against the reference attention over the GPU's own page lists
 * (so a near-tie in selection does not count twice), while the lists themselves are
 * compared with a tolerance derived from float summation error.
 */
#include "harness/check.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/cudrv.h"
#include "runtime/qgen_ext.h"
#include "ref/ref.h"
#include "jit/bundle.h"
#include "base/util.h"
#include "base/rng.h"
#include "harness/common.h"

/* ---- data ---------------------------------------------------------------------------- */

/* A value of mean 0 and variance 1 (a sum of four uniforms, close enough to normal for
   test data) that depends only on (seed, i): counter-based, so any element can be
   regenerated anywhere (the >4 GiB reference streams it instead of storing it). */
static float gauss_at(uint64_t seed, uint64_t i) {
  uint64_t a = qgen_mix64(seed ^ qgen_mix64(i));
  double s = (double)(a & 0xffff) + (double)(a >> 16 & 0xffff) + (double)(a >> 32 & 0xffff) + (double)(a >> 48);
  return (float)((s / 65536.0 - 2.0) * 1.7320508075688772);
}

/* rows x head_dim values of the in_type into dst, N(0, sigma^2). */
static void fill(const qgen_layout *L, uint64_t seed, void *dst, int64_t rows, float sigma) {
  float *tmp = malloc(sizeof(float) * (size_t)L->head_dim);
  const qgen_type_traits *t = qgen_type_traits_of(L->in_type);
  for (int64_t r = 0; r < rows; r++) {
    for (int d = 0; d < L->head_dim; d++) tmp[d] = sigma * gauss_at(seed, (uint64_t)r * L->head_dim + d);
    t->from_f32(tmp, (uint8_t *)dst + r * L->in_row_bytes, L->head_dim);
  }
  free(tmp);
}

/* ---- device buffers ---------------------------------------------------------------- */

typedef struct {
  const qgen_cudrv *cu;
  int fails, checks;
} env;

static CUdeviceptr dalloc(env *e, size_t n) {
  CUdeviceptr p = 0;
  if (e->cu->cuMemAlloc(&p, n ? n : 1) != CUDA_SUCCESS) {
    fprintf(stderr, "qgen check: cuMemAlloc(%zu) failed\n", n);
    exit(2);
  }
  return p;
}
static void upload(env *e, CUdeviceptr d, const void *h, size_t n) {
  if (e->cu->cuMemcpyHtoD(d, h, n) != CUDA_SUCCESS) { fprintf(stderr, "qgen check: upload failed\n"); exit(2); }
}
static void download(env *e, void *h, CUdeviceptr d, size_t n) {
  if (e->cu->cuCtxSynchronize() != CUDA_SUCCESS || e->cu->cuMemcpyDtoH(h, d, n) != CUDA_SUCCESS) {
    fprintf(stderr, "qgen check: download failed (a kernel faulted?)\n");
    exit(2);
  }
}
static void poison(env *e, CUdeviceptr d, size_t n) { e->cu->cuMemsetD8(d, 0xff, n); }

static void verdict(env *e, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void verdict(env *e, int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("  %-4s  ", ok ? "PASS" : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  e->checks++;
  e->fails += !ok;
}

#define API(call) QGEN_API_CHECK(gc, call, QGEN_API_FATAL("check"))

/* ---- comparisons ----------------------------------------------------------------------- */

/* Relative L2 error of a GPU output (out_type bytes) against fp64; NaN => +inf. */
static double rel_err(const qgen_layout *L, const void *gpu, const double *ref, int64_t n) {
  float *g = malloc(sizeof(float) * (size_t)n);
  qgen_type_traits_of(L->out_type)->to_f32(gpu, g, n);
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    if (g[i] != g[i]) {
      free(g);
      return INFINITY;
    }
    num += (g[i] - ref[i]) * (g[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  free(g);
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double tolerance(const qgen_layout *L) { return qgen_type_traits_of(L->out_type)->check_tol; }

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

/* ---- the checks ---------------------------------------------------------------------- */

typedef struct {
  const char *path;
  qgen_open_opts go, co;
  uint64_t seed;
} setup;

/* The per-tensor scales every cache of this check gets where its K / V type takes one (fp8):
   not powers of two (the division rounds), K's putting some values in the subnormals and
   V's saturating e4m3 beyond about 2.8 sigma. */
static const float CHECK_K_SCALE = 0.3f, CHECK_V_SCALE = 1.0f / 160.0f;

/* Those scales on a cache or view of ctx (1 for a type without a per-tensor scale). */
static void set_check_scales(qgen_ctx *gc, qgen_kv *kv) {
  const qgen_layout *L = qgen_ext_layout(gc);
  API(qgen_cache_set_scales(kv, qgen_type_traits_of(L->k_type)->tensor_scale ? CHECK_K_SCALE : 1.0f,
                            qgen_type_traits_of(L->v_type)->tensor_scale ? CHECK_V_SCALE : 1.0f));
}

/* A cache of ctx (either backend) with those scales. */
static void new_cache(qgen_ctx *gc, qgen_kv **kv, int max_seqs, int64_t max_tokens) {
  API(qgen_cache_create(gc, kv, max_seqs, max_tokens));
  set_check_scales(gc, *kv);
}

/* A pair of caches (GPU, reference) holding the same random sequences of lengths lens. */
typedef struct {
  qgen_kv *g, *c;
  int nb;
  const int64_t *lens;
  int *seq;
} pair;

static void make_pair(env *e, qgen_ctx *gc, qgen_ctx *cc, pair *pr, int nb, const int64_t *lens, uint64_t seed,
                      int shuffle_pages) {
  const qgen_layout *L = qgen_ext_layout(gc);
  int64_t maxlen = 1, total = 0;
  for (int i = 0; i < nb; i++) {
    if (lens[i] > maxlen) maxlen = lens[i];
    total += lens[i];
  }
  pr->nb = nb;
  pr->lens = lens;
  pr->seq = malloc(sizeof(int) * (size_t)nb);
  for (int i = 0; i < nb; i++) pr->seq[i] = i;
  new_cache(gc, &pr->g, nb, maxlen);
  new_cache(cc, &pr->c, nb, maxlen);
  if (shuffle_pages) { /* a permutation of the whole pool, the same on both backends */
    const int64_t np = qgen_kv_n_pages(pr->g), pps = qgen_kv_pages_per_seq(pr->g);
    int *perm = malloc(sizeof(int) * (size_t)np);
    for (int64_t i = 0; i < np; i++) perm[i] = (int)i;
    for (int64_t i = np - 1; i > 0; i--) {
      int64_t j = (int64_t)(qgen_mix64(seed + (uint64_t)i) % (uint64_t)(i + 1));
      int t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    for (int s = 0; s < nb; s++) {
      API(qgen_kv_map(pr->g, s, perm + s * pps, pps));
      API(qgen_kv_map(pr->c, s, perm + s * pps, pps));
    }
    free(perm);
  }
  const size_t rowb = (size_t)L->n_head_kv * L->in_row_bytes, bytes = (size_t)total * rowb;
  uint8_t *k = malloc(bytes ? bytes : 1), *v = malloc(bytes ? bytes : 1);
  fill(L, seed * 2 + 1, k, total * L->n_head_kv, 1.0f);
  fill(L, seed * 2 + 2, v, total * L->n_head_kv, 1.0f);
  CUdeviceptr dk = dalloc(e, bytes), dv = dalloc(e, bytes);
  upload(e, dk, k, bytes);
  upload(e, dv, v, bytes);
  int *nn = malloc(sizeof(int) * (size_t)nb);
  for (int i = 0; i < nb; i++) nn[i] = (int)lens[i];
  API(qgen_append(pr->g, pr->seq, nb, nn, dk, dv, NULL));
  API(qgen_append(pr->c, pr->seq, nb, nn, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL));
  download(e, k, dk, 1); /* waits for the appends */
  e->cu->cuMemFree(dk);
  e->cu->cuMemFree(dv);
  free(nn);
  free(k);
  free(v);
}

static void free_pair(pair *pr) {
  qgen_cache_destroy(pr->g);
  qgen_cache_destroy(pr->c);
  free(pr->seq);
}

/* append: chunked GPU appends vs one reference append per sequence, byte for byte. */
static void check_append(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed) {
  const qgen_layout *L = qgen_ext_layout(gc);
  const int nb = 3;
  const int64_t lens[3] = {1000, 4100, 65};
  const int chunks[4] = {1, 7, 64, 4096};
  qgen_kv *g, *c;
  new_cache(gc, &g, nb, 4100);
  new_cache(cc, &c, nb, 4100);
  const int64_t np = qgen_kv_n_pages(g), pps = qgen_kv_pages_per_seq(g);
  int *perm = malloc(sizeof(int) * (size_t)np);
  for (int64_t i = 0; i < np; i++) perm[i] = (int)((i * 7 + 3) % np); /* np is not a multiple of 7 here */
  for (int s = 0; s < nb; s++) {
    API(qgen_kv_map(g, s, perm + s * pps, pps));
    API(qgen_kv_map(c, s, perm + s * pps, pps));
  }
  free(perm);
  const size_t rowb = (size_t)L->n_head_kv * L->in_row_bytes;
  uint8_t *k[3], *v[3];
  for (int s = 0; s < nb; s++) {
    k[s] = malloc((size_t)lens[s] * rowb);
    v[s] = malloc((size_t)lens[s] * rowb);
    fill(L, seed + 10 * s, k[s], lens[s] * L->n_head_kv, 1.0f);
    fill(L, seed + 10 * s + 5, v[s], lens[s] * L->n_head_kv, 1.0f);
    int seqs = s, n = (int)lens[s];
    API(qgen_append(c, &seqs, 1, &n, (qgen_ptr)(uintptr_t)k[s], (qgen_ptr)(uintptr_t)v[s], NULL));
  }
  /* GPU: rounds of one multi-sequence call, each sequence taking its next chunk size */
  CUdeviceptr dk = dalloc(e, 3 * 4096 * rowb), dv = dalloc(e, 3 * 4096 * rowb);
  uint8_t *sk = malloc(3 * 4096 * rowb), *sv = malloc(3 * 4096 * rowb);
  int64_t done[3] = {0, 0, 0};
  int calls = 0;
  for (int round = 0;; round++) {
    int seqs[3], nn[3], m = 0;
    size_t off = 0;
    for (int s = 0; s < nb; s++) {
      int64_t take = chunks[(round + s) % 4];
      if (take > lens[s] - done[s]) take = lens[s] - done[s];
      seqs[m] = s;
      nn[m++] = (int)take;
      memcpy(sk + off, k[s] + done[s] * rowb, (size_t)take * rowb);
      memcpy(sv + off, v[s] + done[s] * rowb, (size_t)take * rowb);
      off += (size_t)take * rowb;
      done[s] += take;
    }
    if (off == 0) break;
    upload(e, dk, sk, off);
    upload(e, dv, sv, off);
    API(qgen_append(g, seqs, m, nn, dk, dv, NULL));
    calls++;
  }
  const char *names[] = {"K pool", "V pool", "bounds", "page table", "lengths", "sketch", "8-bit bounds"};
  int ok = 1;
  char what[256] = "";
  for (int w = QGEN_KV_K; w <= QGEN_KV_BOUNDS_I8; w++) {
    size_t n = qgen_kv_size(g, w);
    if (n == 0) continue;
    uint8_t *a = malloc(n), *b = malloc(n);
    API(qgen_kv_read(g, w, a, n));
    API(qgen_kv_read(c, w, b, n));
    for (size_t i = 0; i < n && ok; i++)
      if (a[i] != b[i]) {
        ok = 0;
        snprintf(what, sizeof what, "; %s differs first at byte %zu (gpu %02x, ref %02x)", names[w], i, a[i], b[i]);
      }
    free(a);
    free(b);
  }
  verdict(e, ok, "append   3 sequences (1000, 4100, 65 tokens) in %d calls of 1/7/64/4096-token chunks, shuffled pages: "
          "K, V, bounds%s, lengths%s byte-identical%s", calls, L->bounds_i8 ? ", 8-bit bounds" : "", L->sketch_page_bytes ? ", sketch" : "", what);
  for (int s = 0; s < nb; s++) free(k[s]), free(v[s]);
  free(sk);
  free(sv);
  e->cu->cuMemFree(dk);
  e->cu->cuMemFree(dv);
  qgen_cache_destroy(g);
  qgen_cache_destroy(c);
}

/* attend: dense and (sparse specs) sparse against the reference. */
/* The sparse step kv just took (GPU) against the reference over the host cache m of the same
   tokens: each sequence's lists by compare_lists (ranked by the 8-bit bounds when i8), and
   in ref the reference attention over the GPU's lists, for the caller's rel_err. Returns
   whether every list matched; near, total, cut and why describe them. */
static int sparse_vs_ref(qgen_ctx *gc, const qgen_layout *L, qgen_kv *kv, const qgen_kvmem *m, int nb, const int64_t *lens,
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

static void check_attend(env *e, qgen_ctx *gc, qgen_ctx *cc, int nb, const int64_t *lens, uint64_t seed) {
  const qgen_layout *L = qgen_ext_layout(gc);
  pair pr;
  make_pair(e, gc, cc, &pr, nb, lens, seed, nb > 1);
  const size_t qb = (size_t)nb * L->q_bytes, ob = (size_t)nb * L->out_bytes;
  const int64_t nout = (int64_t)nb * L->n_head * L->head_dim;
  uint8_t *q = malloc(qb), *out = malloc(ob);
  double *ref = malloc(sizeof(double) * (size_t)nout);
  fill(L, seed * 3 + 7, q, (int64_t)nb * L->n_head, 1.5f);
  CUdeviceptr dq = dalloc(e, qb), dout = dalloc(e, ob);
  upload(e, dq, q, qb);
  char desc[128];
  int n = snprintf(desc, sizeof desc, "ctx %lld", (long long)lens[0]);
  for (int i = 1; i < nb && n < 100; i++) n += snprintf(desc + n, sizeof desc - (size_t)n, "/%lld", (long long)lens[i]);

  qgen_attend_opts od = qgen_attend_defaults(gc);
  od.mode = QGEN_ATTEND_DENSE;
  poison(e, dout, ob);
  API(qgen_attend(pr.g, pr.seq, nb, dq, dout, &od, NULL));
  download(e, out, dout, ob);
  qgen_ref_order ord; /* the GPU's order: what sparse-V skips depends on it */
  qgen_ext_attend_order(gc, nb, &ord);
  for (int i = 0; i < nb; i++)
    qgen_ref_attend_order(L, qgen_ext_host_cache(pr.c), i, q + i * L->q_bytes, NULL, NULL, &ord, NULL, ref + (int64_t)i * L->n_head * L->head_dim);
  double rd = rel_err(L, out, ref, nout);
  verdict(e, rd <= tolerance(L), "attend   dense   %-32s rel err %.2e (tol %.0e)", desc, rd, tolerance(L));

  if (L->sparse) {
    qgen_attend_opts os = qgen_attend_defaults(gc);
    qgen_budget bs = {os.budget > 0 ? QGEN_BUDGET_TOKENS : QGEN_BUDGET_COVERAGE, os.coverage, os.budget, os.sink, os.recent};
    poison(e, dout, ob);
    API(qgen_attend(pr.g, pr.seq, nb, dq, dout, &os, NULL));
    download(e, out, dout, ob);
    int near = 0, total = 0, cut = 0;
    char why[512] = "", cuts[64] = "";
    const int bad = !sparse_vs_ref(gc, L, pr.g, qgen_ext_host_cache(pr.c), nb, lens, q, &bs, &ord, L->bounds_i8, ref, &near, &total,
                                   &cut, why, sizeof why);
    double rs = rel_err(L, out, ref, nout);
    if (L->top_p < 1) snprintf(cuts, sizeof cuts, ", top-p cut %d", cut);
    verdict(e, !bad && rs <= tolerance(L), "attend   sparse  %-32s rel err %.2e, lists of %d heads match (%d near-ties%s)%s%s",
            desc, rs, total, near, cuts, bad ? ": " : "", why);
  }
  e->cu->cuMemFree(dq);
  e->cu->cuMemFree(dout);
  free(q);
  free(out);
  free(ref);
  free_pair(&pr);
}

/* reuse (QGEN_ATTEND_REUSE): after a sparse step and more appended tokens (pages begun in
   some sequences, none in others), each GPU list is its last selection extended as
   qgen_ref_extend_list does, and the output is the reference's over those lists. */
static void check_reuse(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed) {
  const qgen_layout *L = qgen_ext_layout(gc);
  enum { NB = 3 };
  const int64_t lens[NB] = {700, 77, 1500};
  const int more[NB] = {L->block + 5, 1, 2 * L->block};
  int64_t cap[NB];
  for (int i = 0; i < NB; i++) cap[i] = lens[i] + more[i];
  pair pr;
  make_pair(e, gc, cc, &pr, NB, cap, seed, 1); /* room for the later tokens: filled to cap, then reset and refilled */
  for (int i = 0; i < NB; i++) {
    API(qgen_reset(pr.g, i));
    API(qgen_reset(pr.c, i));
  }
  const size_t rowb = (size_t)L->n_head_kv * L->in_row_bytes, qb = NB * L->q_bytes, ob = NB * L->out_bytes;
  const int64_t nout = (int64_t)NB * L->n_head * L->head_dim, pps = qgen_kv_pages_per_seq(pr.g);
  int64_t total = 0;
  for (int i = 0; i < NB; i++) total += cap[i];
  uint8_t *k = malloc((size_t)total * rowb), *v = malloc((size_t)total * rowb), *q = malloc(qb), *out = malloc(ob);
  fill(L, seed * 5 + 1, k, total * L->n_head_kv, 1.0f);
  fill(L, seed * 5 + 2, v, total * L->n_head_kv, 1.0f);
  fill(L, seed * 5 + 3, q, (int64_t)NB * L->n_head, 1.5f);
  CUdeviceptr dk = dalloc(e, (size_t)total * rowb), dv = dalloc(e, (size_t)total * rowb), dq = dalloc(e, qb), dout = dalloc(e, ob);
  upload(e, dk, k, (size_t)total * rowb);
  upload(e, dv, v, (size_t)total * rowb);
  upload(e, dq, q, qb);
  int first[NB];
  for (int i = 0; i < NB; i++) first[i] = (int)lens[i];
  API(qgen_append(pr.g, pr.seq, NB, first, dk, dv, NULL));
  API(qgen_append(pr.c, pr.seq, NB, first, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL));
  qgen_attend_opts os = qgen_attend_defaults(gc), orr = os;
  orr.mode = QGEN_ATTEND_REUSE;
  API(qgen_attend(pr.g, pr.seq, NB, dq, dout, &os, NULL));
  int *l0 = malloc(sizeof(int) * (size_t)(NB * L->n_head_kv * pps)), *c0 = malloc(sizeof(int) * NB * L->n_head_kv);
  int *l1 = malloc(sizeof(int) * (size_t)(L->n_head_kv * pps)), *c1 = malloc(sizeof(int) * L->n_head_kv);
  for (int i = 0; i < NB; i++) API(qgen_kv_selection(pr.g, i, l0 + (size_t)i * L->n_head_kv * pps, c0 + i * L->n_head_kv));
  const size_t off = (size_t)(lens[0] + lens[1] + lens[2]) * rowb;
  API(qgen_append(pr.g, pr.seq, NB, more, dk + off, dv + off, NULL));
  API(qgen_append(pr.c, pr.seq, NB, more, (qgen_ptr)(uintptr_t)(k + off), (qgen_ptr)(uintptr_t)(v + off), NULL));
  poison(e, dout, ob);
  API(qgen_attend(pr.g, pr.seq, NB, dq, dout, &orr, NULL));
  download(e, out, dout, ob);
  double *ref = malloc(sizeof(double) * (size_t)nout);
  const int32_t **lp = malloc(sizeof(int32_t *) * L->n_head_kv);
  int64_t *cn = malloc(sizeof(int64_t) * L->n_head_kv);
  int32_t *want = malloc(sizeof(int32_t) * (size_t)pps);
  qgen_ref_order ord;
  qgen_ext_attend_order(gc, NB, &ord);
  int lists_ok = 1, grew = 0;
  for (int i = 0; i < NB; i++) {
    API(qgen_kv_selection(pr.g, i, l1, c1));
    for (int h = 0; h < L->n_head_kv; h++) {
      const int *a = l0 + ((size_t)i * L->n_head_kv + h) * pps;
      for (int j = 0; j < c0[i * L->n_head_kv + h]; j++) want[j] = a[j];
      const int64_t n = qgen_ref_extend_list(want, c0[i * L->n_head_kv + h], cap[i], L->block, pps);
      lists_ok &= n == c1[h] && !memcmp(want, l1 + h * pps, (size_t)n * sizeof *want);
      grew |= n > c0[i * L->n_head_kv + h];
      lp[h] = l1 + h * pps, cn[h] = c1[h];
    }
    qgen_ref_attend_order(L, qgen_ext_host_cache(pr.c), i, q + i * L->q_bytes, lp, cn, &ord, NULL, ref + (int64_t)i * L->n_head * L->head_dim);
  }
  const double r = rel_err(L, out, ref, nout);
  verdict(e, lists_ok && grew && r <= tolerance(L), "reuse    sparse  ctx 700/77/1500 + %d/1/%d          rel err %.2e, lists "
          "%s the last selection extended%s", more[0], more[2], r, lists_ok ? "are" : "ARE NOT", grew ? "" : " (none grew)");
  e->cu->cuMemFree(dk), e->cu->cuMemFree(dv), e->cu->cuMemFree(dq), e->cu->cuMemFree(dout);
  free(k), free(v), free(q), free(out), free(l0), free(c0), free(l1), free(c1), free(ref), free(lp), free(cn), free(want);
  free_pair(&pr);
}

/* bits: determinism, sparse-with-full-budget == dense, graph replay == eager. */
static void check_bits(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed, int quick) {
  const qgen_layout *L = qgen_ext_layout(gc);
  const int64_t lens[2] = {quick ? 3000 : 20000, 777};
  pair pr;
  make_pair(e, gc, cc, &pr, 2, lens, seed, 0);
  const size_t qb = 2 * L->q_bytes, ob = 2 * L->out_bytes;
  uint8_t *q = malloc(qb), *a = malloc(ob), *b = malloc(ob);
  fill(L, seed + 99, q, 2 * L->n_head, 1.5f);
  CUdeviceptr dq = dalloc(e, qb), dout = dalloc(e, ob);
  upload(e, dq, q, qb);
  qgen_attend_opts od = qgen_attend_defaults(gc), os = od;
  od.mode = QGEN_ATTEND_DENSE;
#define RUN(opts, dst, stream)                                     \
  do {                                                             \
    poison(e, dout, ob);                                           \
    API(qgen_attend(pr.g, pr.seq, 2, dq, dout, &(opts), stream));  \
    download(e, dst, dout, ob);                                    \
  } while (0)
  RUN(od, a, NULL);
  RUN(od, b, NULL);
  verdict(e, memcmp(a, b, ob) == 0, "bits     dense run twice: identical");
  if (L->sparse) {
    uint8_t *c1 = malloc(ob);
    RUN(os, c1, NULL);
    RUN(os, b, NULL);
    verdict(e, memcmp(c1, b, ob) == 0, "bits     sparse run twice: identical");
    qgen_attend_opts full = os;
    full.budget = 0;
    full.coverage = 1.0;
    RUN(full, b, NULL);
    verdict(e, memcmp(a, b, ob) == 0, "bits     sparse with coverage 1.0 == dense, bit for bit");
    full.coverage = 0; /* a budget instead of the coverage: one of the two (qgen.h) */
    full.budget = lens[0] + 1000;
    RUN(full, b, NULL);
    verdict(e, memcmp(a, b, ob) == 0, "bits     sparse with budget %lld tokens >= context == dense, bit for bit",
            (long long)full.budget);
    /* a sparse step captured in a CUDA graph and replayed */
    CUstream st;
    CUgraph graph;
    CUgraphExec exec;
    int ok = e->cu->cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
             e->cu->cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS;
    ok = ok && qgen_attend(pr.g, pr.seq, 2, dq, dout, &os, (qgen_stream)st) == QGEN_OK;
    ok = e->cu->cuStreamEndCapture(st, &graph) == CUDA_SUCCESS && ok;
    ok = ok && e->cu->cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS;
    if (ok) {
      poison(e, dout, ob);
      ok = e->cu->cuGraphLaunch(exec, st) == CUDA_SUCCESS && e->cu->cuStreamSynchronize(st) == CUDA_SUCCESS;
      download(e, b, dout, ob);
      ok = ok && memcmp(c1, b, ob) == 0;
      e->cu->cuGraphExecDestroy(exec);
      e->cu->cuGraphDestroy(graph);
    }
    e->cu->cuStreamDestroy(st);
    verdict(e, ok, "bits     sparse step captured in a CUDA graph and replayed == eager, bit for bit");
    free(c1);
  }
#undef RUN
  e->cu->cuMemFree(dq);
  e->cu->cuMemFree(dout);
  free(q);
  free(a);
  free(b);
  free_pair(&pr);
}

/* views: the rows of a GPU cache copied into a pool of vLLM's NHD layout ([page][slot][KV
   head][row], pages of the spec's block and of half of it, shuffled page tables) read
   through qgen_view_open give that cache's dense output bit for bit; with a 16-bit K the
   view's bounds (qgen_view_update, two chunks of slots) equal a reference view's over the
   same pool byte for byte (and with 8-bit bounds, pages of the block, its 8-bit rows), and
   the sparse output and page lists equal the cache's; with 8-bit bounds a view of half-block
   pages ranks by its f16 bounds, so its lists are checked against the reference's f16
   ranking and its output against reference attention over them. A spec with two-stage
   selection (a view keeps no sketch), or with K or V rows not of 4-byte multiples (a view
   copies 4 bytes at least), must be refused. */
static void check_views(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed) {
  enum { NB = 3 };
  const qgen_layout *L = qgen_ext_layout(gc);
  const int64_t lens[NB] = {5000, 1, 777};
  pair pr;
  make_pair(e, gc, cc, &pr, NB, lens, seed, 1);
  const qgen_kvmem *m = qgen_ext_host_cache(pr.c);
  const int bounds = L->sparse && !qgen_type_traits_of(L->k_type)->is_quant && L->k_row_bytes == 2 * (size_t)L->head_dim;
  const size_t qb = NB * L->q_bytes, ob = NB * L->out_bytes;
  uint8_t *q = malloc(qb), *a = malloc(ob), *b = malloc(ob);
  fill(L, seed + 7, q, NB * L->n_head, 1.5f);
  CUdeviceptr dq = dalloc(e, qb), dout = dalloc(e, ob);
  upload(e, dq, q, qb);
  for (int page = L->block; page >= L->block / 2 && page % 16 == 0; page /= 2) {
    const int64_t maxb = (lens[0] + page - 1) / page, np = NB * maxb + 5, H = L->n_head_kv;
    const size_t rk = L->k_row_bytes, rv = L->v_row_bytes, kb = (size_t)np * page * H * rk, vb = (size_t)np * page * H * rv;
    uint8_t *hk = calloc(kb, 1), *hv = calloc(vb, 1);
    int32_t *bt = malloc(sizeof(int32_t) * NB * maxb), len32[NB];
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)(lens[0] + lens[1] + lens[2]));
    int *perm = malloc(sizeof(int) * (size_t)np);
    for (int64_t i = 0; i < np; i++) perm[i] = (int)i;
    for (int64_t i = np - 1; i > 0; i--) {
      const int64_t j = (int64_t)(qgen_mix64(seed + 11 * (uint64_t)i) % (uint64_t)(i + 1));
      const int t = perm[i];
      perm[i] = perm[j], perm[j] = t;
    }
    int64_t ns = 0;
    for (int sq = 0; sq < NB; sq++) {
      len32[sq] = (int32_t)lens[sq];
      for (int64_t i = 0; i < maxb; i++) bt[sq * maxb + i] = perm[sq * maxb + i];
      for (int64_t t = 0; t < lens[sq]; t++) {
        const int64_t own = m->page_table[sq * m->pages_per_seq + t / L->block], pg = bt[sq * maxb + t / page];
        for (int h = 0; h < H; h++) {
          const size_t slot = (size_t)(t % L->block), dst = ((size_t)(pg * page + t % page) * H + h);
          memcpy(hk + dst * rk, m->k + own * L->k_page_bytes + ((size_t)h * L->block + slot) * rk, rk);
          memcpy(hv + dst * rv, m->v + own * L->v_page_bytes + ((size_t)h * L->block + slot) * rv, rv);
        }
        slots[ns++] = pg * page + t % page;
      }
    }
    CUdeviceptr dk = dalloc(e, kb), dv = dalloc(e, vb), dbt = dalloc(e, sizeof(int32_t) * NB * maxb), dl = dalloc(e, sizeof len32),
                ds = dalloc(e, sizeof(int64_t) * (size_t)ns);
    upload(e, dk, hk, kb);
    upload(e, dv, hv, vb);
    upload(e, dbt, bt, sizeof(int32_t) * NB * maxb);
    upload(e, dl, len32, sizeof len32);
    upload(e, ds, slots, sizeof(int64_t) * (size_t)ns);
    qgen_view_desc dg = {dk, dv, page, np, (long long)(page * H * rk), (long long)(H * rk), (long long)rk,
                         (long long)(page * H * rv), (long long)(H * rv), (long long)rv, dbt, maxb, dl, NB, maxb};
    qgen_view_desc dc = dg;
    dc.k = (qgen_ptr)(uintptr_t)hk, dc.v = (qgen_ptr)(uintptr_t)hv, dc.block_table = (qgen_ptr)(uintptr_t)bt;
    dc.seq_lens = (qgen_ptr)(uintptr_t)len32;
    qgen_kv *vg = NULL, *vc = NULL;
    /* a view keeps no sketch, and copies rows of 4-byte multiples (q8_0 at head_dim 32: 34) */
    const int odd_rows = L->k_row_bytes % 4 || L->v_row_bytes % 4;
    const int refused = L->rescore > 1 || odd_rows;
    if (refused) {
      const qgen_status sg = qgen_view_open(gc, &dg, &vg), sc = qgen_view_open(cc, &dc, &vc);
      verdict(e, sg == QGEN_ERR_UNSUPPORTED && sc == QGEN_ERR_UNSUPPORTED && !vg && !vc,
              "views    refused on both backends (%s), nothing opened",
              L->rescore > 1 ? "two-stage selection" : "rows not of 4-byte multiples");
    } else {
      API(qgen_view_open(gc, &dg, &vg));
      API(qgen_view_open(cc, &dc, &vc));
      set_check_scales(gc, vg); /* the owned cache's, so the bytes read mean the same values */
      set_check_scales(cc, vc);
      qgen_attend_opts od = qgen_attend_defaults(gc), os = od;
      od.mode = QGEN_ATTEND_DENSE;
      API(qgen_attend(pr.g, pr.seq, NB, dq, dout, &od, NULL));
      download(e, a, dout, ob);
      poison(e, dout, ob);
      API(qgen_attend(vg, pr.seq, NB, dq, dout, &od, NULL));
      download(e, b, dout, ob);
      verdict(e, memcmp(a, b, ob) == 0, "views    NHD pages of %d, shuffled: dense == the owned cache, bit for bit", page);
      if (bounds) {
        for (int w = 0; w < 2; w++) {
          const int64_t s0 = w ? ns / 3 : 0, s1 = w ? ns : ns / 3;
          API(qgen_view_update(vg, ds + (CUdeviceptr)(s0 * 8), s1 - s0, 8, NULL));
          API(qgen_view_update(vc, (qgen_ptr)(uintptr_t)(slots + s0), s1 - s0, 8, NULL));
        }
        const size_t nbnd = qgen_kv_size(vg, QGEN_KV_BOUNDS);
        uint8_t *bg = malloc(nbnd), *bc = malloc(nbnd);
        API(qgen_kv_read(vg, QGEN_KV_BOUNDS, bg, nbnd));
        API(qgen_kv_read(vc, QGEN_KV_BOUNDS, bc, nbnd));
        const size_t n8 = qgen_kv_size(vg, QGEN_KV_BOUNDS_I8);
        uint8_t *r8g = malloc(n8 + 1), *r8c = malloc(n8 + 1);
        if (n8) API(qgen_kv_read(vg, QGEN_KV_BOUNDS_I8, r8g, n8));
        if (n8) API(qgen_kv_read(vc, QGEN_KV_BOUNDS_I8, r8c, n8));
        verdict(e, memcmp(bg, bc, nbnd) == 0 && memcmp(r8g, r8c, n8) == 0 && (n8 > 0) == (L->bounds_i8 && page == L->block),
                "views    pages of %d: qgen_view_update's bounds == the reference's, byte for byte (8-bit rows: %zu bytes)", page, n8);
        free(r8g), free(r8c);
        if (L->bounds_i8 && page != L->block) { /* the half-block view ranks by its f16 bounds */
          qgen_budget bs = {os.budget > 0 ? QGEN_BUDGET_TOKENS : QGEN_BUDGET_COVERAGE, os.coverage, os.budget, os.sink, os.recent};
          qgen_ref_order ord;
          qgen_ext_attend_order(gc, NB, &ord);
          poison(e, dout, ob);
          API(qgen_attend(vg, pr.seq, NB, dq, dout, &os, NULL));
          download(e, b, dout, ob);
          const int64_t nout = (int64_t)NB * L->n_head * L->head_dim;
          double *ref = malloc(sizeof(double) * (size_t)nout);
          int near = 0, total = 0, cut = 0;
          char why[512] = "";
          const int ok = sparse_vs_ref(gc, L, vg, m, NB, lens, q, &bs, &ord, 0, ref, &near, &total, &cut, why, sizeof why);
          const double rs = rel_err(L, b, ref, nout);
          verdict(e, ok && rs <= tolerance(L), "views    pages of %d: sparse lists of %d heads == the f16 bounds' reference (%d near-ties), rel err %.2e%s%s",
                  page, total, near, rs, ok ? "" : ": ", why);
          free(ref);
          continue;
        }
        API(qgen_attend(pr.g, pr.seq, NB, dq, dout, &os, NULL));
        download(e, a, dout, ob);
        poison(e, dout, ob);
        API(qgen_attend(vg, pr.seq, NB, dq, dout, &os, NULL));
        download(e, b, dout, ob);
        const int64_t pps = qgen_kv_pages_per_seq(pr.g);
        int *l1 = calloc((size_t)(H * pps), sizeof(int)), *l2 = calloc((size_t)(H * pps), sizeof(int)), *c1 = malloc(sizeof(int) * H),
            *c2 = malloc(sizeof(int) * H);
        int same = qgen_kv_pages_per_seq(vg) == pps;
        for (int sq = 0; sq < NB && same; sq++) {
          API(qgen_kv_selection(pr.g, sq, l1, c1));
          API(qgen_kv_selection(vg, sq, l2, c2));
          for (int h = 0; h < H; h++) same &= c1[h] == c2[h] && memcmp(l1 + h * pps, l2 + h * pps, sizeof(int) * (size_t)c1[h]) == 0;
        }
        verdict(e, same && memcmp(a, b, ob) == 0, "views    pages of %d: sparse lists and output == the owned cache's", page);
        free(bg), free(bc), free(l1), free(l2), free(c1), free(c2);
      }
    }
    qgen_cache_destroy(vg);
    qgen_cache_destroy(vc);
    CUdeviceptr all[] = {dk, dv, dbt, dl, ds};
    for (int i = 0; i < 5; i++) e->cu->cuMemFree(all[i]);
    free(hk), free(hv), free(bt), free(slots), free(perm);
    if (refused) break; /* one refusal is the whole check */
  }
  e->cu->cuMemFree(dq);
  e->cu->cuMemFree(dout);
  free(q), free(a), free(b);
  free_pair(&pr);
}

/* Every array of two caches (GPU or reference), byte for byte. */
static int same_arrays(qgen_ctx *gc, qgen_kv *a, qgen_kv *b) {
  int same = 1;
  for (int w = QGEN_KV_K; w <= QGEN_KV_BOUNDS_I8; w++) {
    const size_t n = qgen_kv_size(a, w);
    if (n == 0) continue;
    uint8_t *x = malloc(n), *y = malloc(n);
    API(qgen_kv_read(a, w, x, n));
    API(qgen_kv_read(b, w, y, n));
    same &= memcmp(x, y, n) == 0;
    free(x);
    free(y);
  }
  return same;
}

/* decode graph: qgen_append_decode + attend (dense, and sparse) captured once and replayed
   for N steps, each with new k, v, q copied into the captured buffers, against the same
   steps run eagerly with qgen_append on a second GPU cache (bit for bit: same kernels, same
   data) and with qgen_append_decode on the reference; then one replay past the capacity of
   the longest sequence, which qgen_sync must report. */
static void check_decode_graph(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed) {
  enum { NB = 3, N = 64 };
  const qgen_layout *L = qgen_ext_layout(gc);
  const int64_t lens[NB] = {1000, 63, 0}, cap = 1000 + N;
  int seq[NB] = {0, 1, 2}, ones[NB] = {1, 1, 1};
  qgen_kv *g, *eg, *c;
  new_cache(gc, &g, NB, cap);
  new_cache(gc, &eg, NB, cap);
  new_cache(cc, &c, NB, cap);
  const int64_t prompt = lens[0] + lens[1] + lens[2];
  const size_t rowb = (size_t)L->n_head_kv * L->in_row_bytes, pb = (size_t)prompt * rowb;
  uint8_t *pk = malloc(pb), *pv = malloc(pb);
  fill(L, seed + 1, pk, prompt * L->n_head_kv, 1.0f);
  fill(L, seed + 2, pv, prompt * L->n_head_kv, 1.0f);
  CUdeviceptr dpk = dalloc(e, pb), dpv = dalloc(e, pb);
  upload(e, dpk, pk, pb);
  upload(e, dpv, pv, pb);
  int nn[NB] = {(int)lens[0], (int)lens[1], (int)lens[2]};
  API(qgen_append(g, seq, NB, nn, dpk, dpv, NULL));
  API(qgen_append(eg, seq, NB, nn, dpk, dpv, NULL));
  API(qgen_append(c, seq, NB, nn, (qgen_ptr)(uintptr_t)pk, (qgen_ptr)(uintptr_t)pv, NULL));
  /* the graph's fixed buffers (k, v, q in; dense and sparse out) and the eager run's outputs */
  const size_t kb = NB * rowb, qb = NB * L->q_bytes, ob = NB * L->out_bytes;
  uint8_t *hk = malloc(kb), *hv = malloc(kb), *hq = malloc(qb), *og = malloc(2 * ob), *oe = malloc(2 * ob);
  CUdeviceptr dk = dalloc(e, kb), dv = dalloc(e, kb), dq = dalloc(e, qb), dog = dalloc(e, 2 * ob), doe = dalloc(e, 2 * ob);
  qgen_attend_opts od = qgen_attend_defaults(gc), os = od;
  od.mode = QGEN_ATTEND_DENSE;
  const int modes = L->sparse ? 2 : 1;
  CUstream st = NULL;
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  int ok = e->cu->cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
           e->cu->cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS;
  ok = ok && qgen_append_decode(g, seq, NB, dk, dv, (qgen_stream)st) == QGEN_OK &&
       qgen_attend(g, seq, NB, dq, dog, &od, (qgen_stream)st) == QGEN_OK &&
       (modes < 2 || qgen_attend(g, seq, NB, dq, dog + ob, &os, (qgen_stream)st) == QGEN_OK);
  ok = e->cu->cuStreamEndCapture(st, &graph) == CUDA_SUCCESS && ok;
  ok = ok && e->cu->cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS;
  int same = ok, step = 0;
  for (; step < N && same; step++) { /* step i's inputs: seeds from i, so every step differs */
    fill(L, seed * 7 + 3 * step, hk, NB * L->n_head_kv, 1.0f);
    fill(L, seed * 7 + 3 * step + 1, hv, NB * L->n_head_kv, 1.0f);
    fill(L, seed * 7 + 3 * step + 2, hq, NB * L->n_head, 1.5f);
    same = e->cu->cuMemcpyHtoDAsync(dk, hk, kb, st) == CUDA_SUCCESS &&
           e->cu->cuMemcpyHtoDAsync(dv, hv, kb, st) == CUDA_SUCCESS &&
           e->cu->cuMemcpyHtoDAsync(dq, hq, qb, st) == CUDA_SUCCESS && e->cu->cuGraphLaunch(exec, st) == CUDA_SUCCESS;
    API(qgen_append(eg, seq, NB, ones, dk, dv, (qgen_stream)st));
    API(qgen_attend(eg, seq, NB, dq, doe, &od, (qgen_stream)st));
    if (modes == 2) API(qgen_attend(eg, seq, NB, dq, doe + ob, &os, (qgen_stream)st));
    API(qgen_append_decode(c, seq, NB, (qgen_ptr)(uintptr_t)hk, (qgen_ptr)(uintptr_t)hv, NULL));
    same = same && e->cu->cuStreamSynchronize(st) == CUDA_SUCCESS;
    download(e, og, dog, (size_t)modes * ob);
    download(e, oe, doe, (size_t)modes * ob);
    same = same && memcmp(og, oe, (size_t)modes * ob) == 0;
  }
  char why[64] = "";
  if (!ok) snprintf(why, sizeof why, ": capture failed");
  else if (!same) snprintf(why, sizeof why, ": first difference at step %d", step - 1);
  verdict(e, same, "decode   append_decode + attend%s captured once, replayed %d steps (ctx 1000/63/0) == eager "
          "qgen_append + attend, bit for bit%s", modes == 2 ? " dense + sparse" : "", N, why);
  int lens_ok = 1;
  for (int i = 0; i < NB; i++) lens_ok &= qgen_seq_len(g, i) == lens[i] + N && qgen_seq_len(c, i) == lens[i] + N;
  verdict(e, same && lens_ok && same_arrays(gc, g, eg) && same_arrays(gc, g, c) && qgen_sync(g) == QGEN_OK,
          "decode   after it: lengths %lld/%lld/%lld, cache bytes == eager == reference, qgen_sync ok",
          qgen_seq_len(g, 0), qgen_seq_len(g, 1), qgen_seq_len(g, 2));
  /* sequence 0 is full now: one more replay keeps its length and qgen_sync says so, once */
  ok = same && e->cu->cuGraphLaunch(exec, st) == CUDA_SUCCESS && e->cu->cuStreamSynchronize(st) == CUDA_SUCCESS;
  const qgen_status full = qgen_sync(g);
  ok = ok && full == QGEN_ERR_CAPACITY && qgen_sync(g) == QGEN_OK && qgen_seq_len(g, 0) == cap &&
       qgen_seq_len(g, 1) == lens[1] + N + 1 && qgen_seq_len(g, 2) == lens[2] + N + 1;
  verdict(e, ok, "decode   a replay past capacity: the full sequence stays at %lld, the others advance, qgen_sync: %s",
          (long long)cap, qgen_status_str(full));
  if (exec) e->cu->cuGraphExecDestroy(exec);
  if (graph) e->cu->cuGraphDestroy(graph);
  if (st) e->cu->cuStreamDestroy(st);
  CUdeviceptr all[] = {dpk, dpv, dk, dv, dq, dog, doe};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) e->cu->cuMemFree(all[i]);
  free(pk), free(pv), free(hk), free(hv), free(hq), free(og), free(oe);
  qgen_cache_destroy(g);
  qgen_cache_destroy(eg);
  qgen_cache_destroy(c);
}

/* ---- the > 4 GiB sequence ------------------------------------------------------------ */

/* Values of the big sequence are generated, not stored: element (t, h, d) of K (which 0) or
   V (1) is f16(gauss_at(seed + which, (t * n_kv + h) * D + d)). */
typedef struct {
  const qgen_layout *L;
  uint64_t seed;
  int64_t t0, t1;
  const float *q;            /* [n_head][D], f16-exact */
  const int *const *lists;   /* per KV head, or NULL = every page */
  const int *counts;
  int64_t len;
  double *m, *l, *o;         /* per query head: running max, sum, [D] accumulator */
  /* sparse scoring */
  double *scores;            /* [n_kv][n_pages], filled for pages in [t0/B, t1/B) */
} big_job;

static float big_val(const qgen_layout *L, uint64_t seed, int which, int64_t t, int h, int d) {
  return qgen_f16_to_f32(qgen_f32_to_f16(gauss_at(seed + (uint64_t)which, ((uint64_t)t * L->n_head_kv + h) * L->head_dim + d)));
}

static void *big_scores(void *arg) { /* Quest scores of whole pages [t0/B, t1/B) */
  big_job *j = arg;
  const qgen_layout *L = j->L;
  const int B = L->block, D = L->head_dim;
  const int64_t n = qgen_pages_of(j->len, B);
  double *mn = malloc(sizeof(double) * D), *mx = malloc(sizeof(double) * D);
  uint16_t *bnd = malloc(sizeof(uint16_t) * 2 * D), so[2];
  uint8_t *codes = malloc((size_t)2 * D);
  for (int64_t p = j->t0 / B; p < j->t1 / B && p < n; p++)
    for (int h = 0; h < L->n_head_kv; h++) {
      for (int d = 0; d < D; d++) mn[d] = INFINITY, mx[d] = -INFINITY;
      for (int64_t t = p * B; t < (p + 1) * B && t < j->len; t++)
        for (int d = 0; d < D; d++) {
          float x = big_val(L, j->seed, 0, t, h, d);
          if (x < mn[d]) mn[d] = x;
          if (x > mx[d]) mx[d] = x;
        }
      if (L->bounds_i8) { /* the keys are f16 values, so these are the f16 bounds */
        for (int d = 0; d < D; d++) bnd[d] = qgen_f32_to_f16((float)mn[d]), bnd[D + d] = qgen_f32_to_f16((float)mx[d]);
        qgen_ref_bounds_i8(bnd, D, so, codes); /* finite: N(0,1) keys */
        qgen_ref_bounds_i8_decode(so, codes, D, mn, mx);
      }
      double best = -INFINITY;
      for (int g = 0; g < L->group; g++) {
        double s = 0;
        for (int d = 0; d < D; d++) {
          double qv = j->q[(h * L->group + g) * D + d];
          s += qv > 0 ? qv * mx[d] : qv < 0 ? qv * mn[d] : 0;
        }
        if (g == 0 || s > best) best = s;
      }
      j->scores[h * n + p] = best;
    }
  free(mn);
  free(mx);
  free(bnd);
  free(codes);
  return NULL;
}

static void *big_attend(void *arg) { /* online fp64 softmax over tokens [t0, t1) of the listed pages */
  big_job *j = arg;
  const qgen_layout *L = j->L;
  const int D = L->head_dim;
  float *k = malloc(sizeof(float) * D), *v = malloc(sizeof(float) * D);
  uint8_t **on = malloc(sizeof(uint8_t *) * L->n_head_kv);
  const int64_t n = qgen_pages_of(j->len, L->block);
  for (int h = 0; h < L->n_head_kv; h++) {
    on[h] = calloc((size_t)n, 1);
    for (int i = 0; i < (j->lists ? j->counts[h] : n); i++) on[h][j->lists ? j->lists[h][i] : i] = 1;
  }
  for (int64_t t = j->t0; t < j->t1; t++)
    for (int h = 0; h < L->n_head_kv; h++) {
      if (!on[h][t / L->block]) continue;
      for (int d = 0; d < D; d++) k[d] = big_val(L, j->seed, 0, t, h, d), v[d] = big_val(L, j->seed, 1, t, h, d);
      for (int g = 0; g < L->group; g++) {
        const int hq = h * L->group + g;
        double s = 0;
        for (int d = 0; d < D; d++) s += (double)j->q[hq * D + d] * k[d];
        s *= L->scale;
        double *o = j->o + (int64_t)hq * D;
        if (s > j->m[hq]) {
          double f = exp(j->m[hq] - s);
          j->l[hq] *= f;
          for (int d = 0; d < D; d++) o[d] *= f;
          j->m[hq] = s;
        }
        double p = exp(s - j->m[hq]);
        j->l[hq] += p;
        for (int d = 0; d < D; d++) o[d] += p * v[d];
      }
    }
  for (int h = 0; h < L->n_head_kv; h++) free(on[h]);
  free(on);
  free(k);
  free(v);
  return NULL;
}

#define BIG_THREADS 16

/* Elements [i0, i1) of a chunk of the big sequence (element 0 = global index base). */
typedef struct {
  uint64_t seed, base;
  size_t i0, i1;
  uint16_t *k, *v;
} gen_job;
static void *gen_f16(void *arg) {
  gen_job *j = arg;
  for (size_t i = j->i0; i < j->i1; i++) {
    j->k[i] = qgen_f32_to_f16(gauss_at(j->seed, j->base + i));
    j->v[i] = qgen_f32_to_f16(gauss_at(j->seed + 1, j->base + i));
  }
  return NULL;
}

/* Streaming fp64 attention of the whole generated sequence (lists NULL = dense). */
static void big_reference(const qgen_layout *L, uint64_t seed, int64_t len, const float *q, const int *const *lists,
                          const int *counts, double *out) {
  big_job jobs[BIG_THREADS];
  pthread_t th[BIG_THREADS];
  const int NH = L->n_head, D = L->head_dim;
  const int64_t per = (len + BIG_THREADS - 1) / BIG_THREADS;
  for (int i = 0; i < BIG_THREADS; i++) {
    big_job *j = &jobs[i];
    *j = (big_job){L, seed, i * per, (i + 1) * per < len ? (i + 1) * per : len, q, lists, counts, len, NULL, NULL, NULL, NULL};
    j->m = malloc(sizeof(double) * NH);
    j->l = calloc((size_t)NH, sizeof(double));
    j->o = calloc((size_t)NH * D, sizeof(double));
    for (int h = 0; h < NH; h++) j->m[h] = -INFINITY;
    pthread_create(&th[i], NULL, big_attend, j);
  }
  for (int i = 0; i < BIG_THREADS; i++) pthread_join(th[i], NULL);
  for (int hq = 0; hq < NH; hq++) {
    double m = -INFINITY, l = 0;
    for (int i = 0; i < BIG_THREADS; i++) if (jobs[i].m[hq] > m) m = jobs[i].m[hq];
    for (int d = 0; d < D; d++) out[hq * D + d] = 0;
    for (int i = 0; i < BIG_THREADS; i++) {
      if (jobs[i].m[hq] == -INFINITY) continue;
      double f = exp(jobs[i].m[hq] - m);
      l += f * jobs[i].l[hq];
      for (int d = 0; d < D; d++) out[hq * D + d] += f * jobs[i].o[(int64_t)hq * D + d];
    }
    for (int d = 0; d < D; d++) out[hq * D + d] /= l;
  }
  for (int i = 0; i < BIG_THREADS; i++) free(jobs[i].m), free(jobs[i].l), free(jobs[i].o);
}

static void check_big(env *e, qgen_ctx *gc, uint64_t seed) {
  const qgen_layout *L = qgen_ext_layout(gc);
  if (L->k_type != QGEN_TYPE_F16 || L->v_type != QGEN_TYPE_F16 || L->in_type != QGEN_TYPE_F16) {
    printf("  skip  big      (needs an f16 spec with f16 inputs)\n");
    return;
  }
  if (L->rescore > 1) { /* its streamed reference ranks by Quest alone */
    printf("  skip  big      (two-stage selection: the checks above cover it)\n");
    return;
  }
  const int64_t per_token = (int64_t)L->n_head_kv * (int64_t)L->k_row_bytes;
  const int64_t len = ((int64_t)1 << 32) / per_token + 12345; /* K cache just over 4 GiB */
  qgen_kv *kv;
  new_cache(gc, &kv, 1, len);
  const int64_t chunk = 32768;
  const size_t rowb = (size_t)L->n_head_kv * L->in_row_bytes;
  uint16_t *hk = malloc((size_t)chunk * rowb), *hv = malloc((size_t)chunk * rowb);
  CUdeviceptr dk = dalloc(e, (size_t)chunk * rowb), dv = dalloc(e, (size_t)chunk * rowb);
  double t0 = qgen_now_ms();
  for (int64_t s = 0; s < len; s += chunk) {
    const int64_t nt = len - s < chunk ? len - s : chunk;
    gen_job gj[BIG_THREADS];
    pthread_t gt[BIG_THREADS];
    const size_t nv = (size_t)nt * L->n_head_kv * L->head_dim, per = (nv + BIG_THREADS - 1) / BIG_THREADS;
    for (int i = 0; i < BIG_THREADS; i++) {
      gj[i] = (gen_job){seed, (uint64_t)s * L->n_head_kv * L->head_dim, i * per, (i + 1) * per < nv ? (i + 1) * per : nv, hk, hv};
      pthread_create(&gt[i], NULL, gen_f16, &gj[i]);
    }
    for (int i = 0; i < BIG_THREADS; i++) pthread_join(gt[i], NULL);
    upload(e, dk, hk, (size_t)nt * rowb);
    upload(e, dv, hv, (size_t)nt * rowb);
    int zero = 0, n = (int)nt;
    API(qgen_append(kv, &zero, 1, &n, dk, dv, NULL));
  }
  printf("        big      appended %lld tokens (K cache %.2f GiB) in %.1f s\n", (long long)len,
         (double)len * per_token / (1u << 30), (qgen_now_ms() - t0) / 1e3);
  /* a query that also looks for a planted pattern: the key of the last token */
  const int NH = L->n_head, D = L->head_dim;
  float *qf = malloc(sizeof(float) * NH * D);
  uint16_t *qh = malloc(sizeof(uint16_t) * NH * D);
  for (int hq = 0; hq < NH; hq++)
    for (int d = 0; d < D; d++) {
      float x = 1.5f * gauss_at(seed + 7, (uint64_t)hq * D + d) + 0.3f * big_val(L, seed, 0, len - 1, hq / L->group, d);
      qh[hq * D + d] = qgen_f32_to_f16(x);
      qf[hq * D + d] = qgen_f16_to_f32(qh[hq * D + d]);
    }
  CUdeviceptr dq = dalloc(e, L->q_bytes), dout = dalloc(e, L->out_bytes);
  upload(e, dq, qh, L->q_bytes);
  uint8_t *out = malloc(L->out_bytes);
  double *ref = malloc(sizeof(double) * NH * D);
  int zero = 0;
  qgen_attend_opts od = qgen_attend_defaults(gc);
  od.mode = QGEN_ATTEND_DENSE;
  poison(e, dout, L->out_bytes);
  API(qgen_attend(kv, &zero, 1, dq, dout, &od, NULL));
  download(e, out, dout, L->out_bytes);
  t0 = qgen_now_ms();
  big_reference(L, seed, len, qf, NULL, NULL, ref);
  double rd = rel_err(L, out, ref, NH * D);
  verdict(e, rd <= tolerance(L), "big      dense   ctx %lld (K cache > 4 GiB) rel err %.2e (reference %.1f s)", (long long)len, rd,
          (qgen_now_ms() - t0) / 1e3);
  if (L->sparse) {
    qgen_attend_opts os = qgen_attend_defaults(gc);
    poison(e, dout, L->out_bytes);
    API(qgen_attend(kv, &zero, 1, dq, dout, &os, NULL));
    download(e, out, dout, L->out_bytes);
    const int64_t pps = qgen_kv_pages_per_seq(kv), n = qgen_pages_of(len, L->block);
    int *lists = malloc(sizeof(int) * (size_t)(L->n_head_kv * pps)), *counts = malloc(sizeof(int) * L->n_head_kv);
    API(qgen_kv_selection(kv, 0, lists, counts));
    /* reference scores, threaded by page ranges */
    double *scores = malloc(sizeof(double) * (size_t)(n * L->n_head_kv));
    big_job jobs[BIG_THREADS];
    pthread_t th[BIG_THREADS];
    const int64_t per = (n + BIG_THREADS - 1) / BIG_THREADS * L->block;
    for (int i = 0; i < BIG_THREADS; i++) {
      jobs[i] = (big_job){L, seed, i * per, (i + 1) * per, qf, NULL, NULL, len, NULL, NULL, NULL, scores};
      pthread_create(&th[i], NULL, big_scores, &jobs[i]);
    }
    for (int i = 0; i < BIG_THREADS; i++) pthread_join(th[i], NULL);
    qgen_budget bs = {os.budget > 0 ? QGEN_BUDGET_TOKENS : QGEN_BUDGET_COVERAGE, os.coverage, os.budget, os.sink, os.recent};
    int32_t *rl = malloc(sizeof(int32_t) * (size_t)n);
    int differ = 0, bad = 0;
    for (int h = 0; h < L->n_head_kv; h++) {
      int64_t rc = qgen_ref_select(&bs, len, L->block, scores + h * n, rl);
      if (rc != counts[h]) bad = 1;
      for (int64_t i = 0; i < rc && !bad; i++) differ += rl[i] != lists[h * pps + i];
    }
    const int **lp = malloc(sizeof(int *) * L->n_head_kv);
    for (int h = 0; h < L->n_head_kv; h++) lp[h] = lists + h * pps;
    big_reference(L, seed, len, qf, lp, counts, ref);
    free(lp);
    double rs = rel_err(L, out, ref, NH * D);
    verdict(e, !bad && rs <= tolerance(L), "big      sparse  ctx %lld rel err %.2e, %d of %lld list entries differ from the reference (near-ties)",
            (long long)len, rs, differ, (long long)counts[0] * L->n_head_kv);
    free(lists);
    free(counts);
    free(scores);
    free(rl);
  }
  free(qf);
  free(qh);
  free(out);
  free(ref);
  free(hk);
  free(hv);
  e->cu->cuMemFree(dk);
  e->cu->cuMemFree(dv);
  e->cu->cuMemFree(dq);
  e->cu->cuMemFree(dout);
  qgen_cache_destroy(kv);
}

/* ---- driver ------------------------------------------------------------------------- */

static int check_variant(const char *path, const char *variant, const qgen_check_opts *o) {
  qgen_ctx *gc = NULL, *cc = NULL;
  qgen_open_opts go = {QGEN_BACKEND_GPU, 0, variant, NULL}, co = {QGEN_BACKEND_CPU, 0, variant, NULL};
  qgen_status st = qgen_open(&gc, path, &go);
  if (st == QGEN_ERR_NO_DRIVER || st == QGEN_ERR_NO_DEVICE) {
    printf("qgen check: %s — skipped (exit 77)\n", qgen_error(gc));
    qgen_close(gc);
    return 77;
  }
  if (st != QGEN_OK) {
    fprintf(stderr, "qgen check: %s: %s\n", qgen_status_str(st), qgen_error(gc));
    qgen_close(gc);
    return -1;
  }
  API(qgen_open(&cc, path, &co));
  env e = {qgen_cudrv_get(NULL), 0, 0};
  qgen_info info;
  qgen_get_info(gc, &info);
  const qgen_layout *L = qgen_ext_layout(gc);
  char planned[64] = ""; /* the kernels planned for another arch's limits: an older bundle arch, or QGEN_EMULATE */
  if (info.plan_arch && info.plan_arch != info.arch) snprintf(planned, sizeof planned, ", planned for sm_%d", info.plan_arch);
  printf("%s on %s (sm_%d, %d SMs%s)%s: k %s, v %s, in %s, out %s, D %d, heads %d/%d, block %d, %s\n", info.name,
         info.device_name, info.arch, info.sm_count, planned, info.from_ptx ? " from PTX" : "", info.k_type, info.v_type,
         info.in_type, info.out_type, info.head_dim, info.n_head, info.n_head_kv, info.block,
         !info.sparse ? "dense" : L->bounds_i8 ? "sparse, 8-bit bounds" : "sparse, f16 bounds");
  if (qgen_type_traits_of(L->k_type)->tensor_scale || qgen_type_traits_of(L->v_type)->tensor_scale)
    printf("  fp8 per-tensor scales: k %g, v %g (on fp8 caches)\n", CHECK_K_SCALE, CHECK_V_SCALE);
  const uint64_t seed = o->seed;
  check_append(&e, gc, cc, seed);
  static const int64_t singles[] = {1, 63, 64, 65, 1000, 16384, 131072, 300000}; /* 300000: select's cluster path */
  for (size_t i = 0; i < sizeof singles / sizeof *singles; i++)
    if (!o->quick || singles[i] <= 1000) check_attend(&e, gc, cc, 1, &singles[i], seed + 100 + i);
  const int64_t b3[3] = {100, o->quick ? 1500 : 5000, 777};
  check_attend(&e, gc, cc, 3, b3, seed + 200);
  const int64_t b8[8] = {1, 2047, 64, 9000, o->quick ? 1500 : 15000, 333, 4096, o->quick ? 2000 : 20000};
  check_attend(&e, gc, cc, 8, b8, seed + 300);
  check_bits(&e, gc, cc, seed + 400, o->quick);
  if (L->sparse) check_reuse(&e, gc, cc, seed + 420);
  check_decode_graph(&e, gc, cc, seed + 450);
  check_views(&e, gc, cc, seed + 470);
  if (o->big) check_big(&e, gc, seed + 500);
  printf("%s: %d of %d checks passed\n\n", info.name, e.checks - e.fails, e.checks);
  qgen_close(gc);
  qgen_close(cc);
  return e.fails;
}

int qgen_check_spec(const char *path, const qgen_check_opts *o) {
  static qgen_spec_set set;
  char err[4096];
  /* A bundle runs what it holds: on a newer GPU than its archs, the driver-compiled PTX
     of an older one (how the sm_80 code paths run on an sm_90 machine). */
  if (qgen_bundle_is(path)) return check_variant(path, o->variant, o);
  if (qgen_spec_load(path, &set, err, sizeof err) != 0) {
    fprintf(stderr, "qgen: %s\n", err);
    return -1;
  }
  int fails = 0;
  for (int v = 0; v < set.n; v++) {
    if (o->variant && strcmp(o->variant, set.v[v].name) != 0) continue;
    int r = check_variant(path, set.v[v].name, o);
    if (r == 77 || r < 0) return r;
    fails += r;
  }
  return fails;
}
