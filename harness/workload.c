/* workload.c — the synthetic attention workloads of workload.h.
 *
 * Layout of the code: random numbers (counter-based), the haystack tables and rows, the
 * logits, the trial (query, statistics pass, recency window, sink), planting, and a small
 * pthreads parallel-for. Every random draw is addressed by (seed, stream, index), so the
 * order in which rows are produced never changes a value; the statistics pass works in
 * fixed chunks of pages and merges them in order, so its result does not depend on the
 * number of threads either.
 */
#include "harness/workload.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"

/* ---- random numbers --------------------------------------------------------------------- */

/* The key of one stream of one seed; draws are mix(key ^ index). */
static uint64_t stream_key(uint64_t seed, uint64_t stream) {
  return qgen_mix64(qgen_mix64(seed) ^ (stream * 0xd1b54a32d192ed03ull + 0x8cb92ba72f3d8dd7ull));
}

/* Irwin–Hall(4) of one 64-bit draw, scaled to unit variance. */
static inline float gauss_k(uint64_t key, uint64_t i) {
  const uint64_t a = qgen_mix64(key ^ i);
  const double s = (double)(a & 0xffff) + (double)(a >> 16 & 0xffff) + (double)(a >> 32 & 0xffff) + (double)(a >> 48);
  return (float)((s / 65535.0 - 2.0) * 1.7320508075688772);
}
static inline double unif_k(uint64_t key, uint64_t i) { return (double)(qgen_mix64(key ^ i) >> 11) * 0x1p-53; }

float qgen_wl_gauss(uint64_t seed, uint64_t stream, uint64_t i) { return gauss_k(stream_key(seed, stream), i); }

enum {
  ST_KEY = 1,       /* haystack key noise, index (t*Hkv + h)*D + d */
  ST_VALUE = 2,     /* haystack value noise */
  ST_STRUCT = 3,    /* per-head tables */
  ST_TOPIC = 4,     /* segment vectors, index (segment*Hkv + h)*D + d */
  ST_SEGMENT = 5,   /* segment boundaries, index = cell */
  ST_QUERY_C = 10,  /* the group's query */
  ST_QUERY_W = 11,  /* per-head deviations */
  ST_DRIFT = 12,    /* the fresh query of drift step s: the trial seed of stream_key(seed, ST_DRIFT) + s */
  ST_PLANT = 100,   /* + task */
};

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "qgen workload: out of memory (%zu x %zu bytes)\n", n, size);
    abort();
  }
  return p;
}

/* ---- names and knobs --------------------------------------------------------------------- */

static const char *const TASK_NAMES[QGEN_WL_TASK_COUNT] = {"niah_single", "niah_multikey", "niah_multivalue",
                                                          "niah_boundary"};

const char *qgen_wl_task_name(qgen_wl_task t) { return (unsigned)t < QGEN_WL_TASK_COUNT ? TASK_NAMES[t] : "?"; }

int qgen_wl_task_from_name(const char *name, qgen_wl_task *t) {
  for (int i = 0; i < QGEN_WL_TASK_COUNT; i++)
    if (!strcmp(name, TASK_NAMES[i]) || !strcmp(name, TASK_NAMES[i] + 5)) { /* "single" also */
      *t = (qgen_wl_task)i;
      return 0;
    }
  return -1;
}

qgen_wl_params qgen_wl_defaults(void) {
  qgen_wl_params p = {
      .active_pairs = 0, .active_std = 1.0, .inactive_std = 0.2, .outlier_pairs = 2, .outlier_mean = 8.0,
      .rope_base = 10000.0, .value_mean = 0.5, .logit_std = 1.5, .head_spread = 0.3, .outlier_logit = 0.5,
      .sink_mass = 0.3, .recent_window = 512, .recent_boost = 3.0, .recent_tau = 128.0, .owners = 0,
      .multikey = 4, .multivalue = 4, .topic_len = 256, .topic_share = 0.5, .drift = 0.9,
  };
  return p;
}

/* One row per knob: its range (open at lo where lo_open; hi_open likewise) is where the
   workload means what workload.h says, so a value outside it is refused, not clamped. */
typedef struct {
  const char *name;
  int is_int;
  size_t off;
  double lo, hi;
  int lo_open, hi_open;
} knob;
#define KI(f, lo, hi) {#f, 1, offsetof(qgen_wl_params, f), lo, hi, 0, 0}
#define KD(f, lo, hi, lo_open, hi_open) {#f, 0, offsetof(qgen_wl_params, f), lo, hi, lo_open, hi_open}
#define BIG 1e6 /* a bound only so a typo of many digits is caught */
static const knob KNOBS[] = {
    KI(active_pairs, 0, BIG), /* 0 = head_dim / 8 */
    KD(active_std, 0, BIG, 0, 0),
    KD(inactive_std, 0, BIG, 0, 0),
    KI(outlier_pairs, 0, BIG),
    KD(outlier_mean, -BIG, BIG, 0, 0),
    KD(rope_base, 1, 1e12, 0, 0),
    KD(value_mean, -BIG, BIG, 0, 0),
    KD(logit_std, 0, BIG, 0, 0),
    KD(head_spread, 0, BIG, 0, 0),
    KD(outlier_logit, -BIG, BIG, 0, 0),
    KD(sink_mass, 0, 1, 0, 1), /* 0 = no sink; a share of the mass, so < 1 */
    KI(recent_window, 0, 1e9),
    KD(recent_boost, -BIG, BIG, 0, 0),
    KD(recent_tau, 0, 1e9, 1, 0), /* divides */
    KI(owners, 0, BIG),           /* 0 = max(1, n_head_kv / 4); at most n_head_kv are used */
    KI(multikey, 1, QGEN_WL_MAX_PLANTED),
    KI(multivalue, 1, QGEN_WL_MAX_PLANTED),
    KI(topic_len, 1, 1e9),
    KD(topic_share, 0, 1, 0, 0),
    KD(drift, 0, 1, 0, 0),
};
#undef BIG

/* 0 if x is in k's range, else -1 with why naming the knob and the value as given. */
static int knob_check(const knob *k, double x, const char *given, char *why, size_t n) {
  if (k->is_int && x != floor(x)) return snprintf(why, n, "%s: %s is not an integer", k->name, given), -1;
  if (!(x >= k->lo && x <= k->hi) || (k->lo_open && x == k->lo) || (k->hi_open && x == k->hi))
    return snprintf(why, n, "%s: %s is not in %c%.10g, %.10g%c", k->name, given, k->lo_open ? '(' : '[', k->lo, k->hi,
                    k->hi_open ? ')' : ']'), -1;
  return 0;
}

int qgen_wl_params_set(qgen_wl_params *p, const char *a, char *why, size_t n) {
  const char *eq = strchr(a, '=');
  const size_t len = eq ? (size_t)(eq - a) : strlen(a);
  for (size_t i = 0; i < sizeof KNOBS / sizeof KNOBS[0]; i++) {
    const knob *k = &KNOBS[i];
    if (strlen(k->name) != len || strncmp(a, k->name, len) != 0) continue;
    if (!eq) return snprintf(why, n, "%s needs =VALUE", k->name), -1;
    char *end;
    const double x = strtod(eq + 1, &end);
    if (end == eq + 1 || *end || !isfinite(x)) return snprintf(why, n, "%s: '%s' is not a finite number", k->name, eq + 1), -1;
    if (knob_check(k, x, eq + 1, why, n) != 0) return -1;
    if (k->is_int)
      *(int *)((char *)p + k->off) = (int)x;
    else
      *(double *)((char *)p + k->off) = x;
    return 0;
  }
  snprintf(why, n, "no workload knob '%.*s' (the names of qgen_wl_params in harness/workload.h)", (int)(len < 64 ? len : 64), a);
  return -1;
}

int qgen_wl_params_check(const qgen_wl_params *p, char *why, size_t n) {
  for (size_t i = 0; i < sizeof KNOBS / sizeof KNOBS[0]; i++) {
    const knob *k = &KNOBS[i];
    const double x = k->is_int ? *(const int *)((const char *)p + k->off) : *(const double *)((const char *)p + k->off);
    char given[32];
    snprintf(given, sizeof given, "%.10g", x);
    if (knob_check(k, x, given, why, n) != 0) return -1;
  }
  return 0;
}

void qgen_wl_params_json(const qgen_wl_params *p, char *buf, size_t n) {
  size_t at = 0;
  at += (size_t)snprintf(buf + at, n - at, "{");
  for (size_t i = 0; i < sizeof KNOBS / sizeof KNOBS[0] && at < n; i++) {
    const char *sep = i ? ", " : "";
    if (KNOBS[i].is_int)
      at += (size_t)snprintf(buf + at, n - at, "%s\"%s\": %d", sep, KNOBS[i].name, *(const int *)((const char *)p + KNOBS[i].off));
    else
      at += (size_t)snprintf(buf + at, n - at, "%s\"%s\": %.17g", sep, KNOBS[i].name,
                             *(const double *)((const char *)p + KNOBS[i].off));
  }
  if (at < n) snprintf(buf + at, n - at, "}");
}

/* ---- the haystack ------------------------------------------------------------------------ */

/* Round n values through the shape's input type (in place). */
static void round_row(const qgen_wl *w, float *x, int n) {
  const qgen_type_traits *t = qgen_type_traits_of(w->s.round_type);
  if (t->exact) return;
  uint8_t tmp[4 * 512];
  for (int i = 0; i < n; i += 512) {
    const int m = n - i < 512 ? n - i : 512;
    t->from_f32(x + i, tmp, m);
    t->to_f32(tmp, x + i, m);
  }
}

/* The first k indices of [lo, hi) \ excluded, ordered by a hash: a seeded random subset. */
static int pick_pairs(uint64_t key, uint64_t salt, int lo, int hi, const uint8_t *excluded, int k, int *out) {
  int n = 0;
  uint64_t best_prev = 0;
  int have_prev = 0;
  for (; n < k; n++) { /* k is small: repeated selection of the next smallest hash */
    int arg = -1;
    uint64_t best = UINT64_MAX;
    for (int i = lo; i < hi; i++) {
      if (excluded && excluded[i]) continue;
      uint64_t hsh = qgen_mix64(key ^ (salt * 1000003u + (uint64_t)i));
      if (have_prev && (hsh < best_prev || (hsh == best_prev && i <= out[n - 1]))) continue;
      if (hsh < best || (hsh == best && i < arg)) best = hsh, arg = i;
    }
    if (arg < 0) break;
    out[n] = arg;
    best_prev = best;
    have_prev = 1;
  }
  return n;
}

int qgen_wl_init(qgen_wl *w, const qgen_wl_shape *s, const qgen_wl_params *p, uint64_t seed, char *err, size_t errn) {
  memset(w, 0, sizeof *w);
  const int D = s->head_dim, Hkv = s->n_head_kv;
  if (D < 2 || D % 2 || D > 1024 || Hkv < 1 || Hkv > 32 || s->n_head % Hkv || s->block < 1 || s->n_tokens < 1 ||
      !(s->scale > 0)) {
    snprintf(err, errn, "workload: unsupported shape (head_dim %d, heads %d/%d, block %d, %lld tokens)", D, s->n_head,
             Hkv, s->block, (long long)s->n_tokens);
    return -1;
  }
  const qgen_type_traits *rt = qgen_type_traits_of(s->round_type);
  if (!rt || rt->block != 1) {
    snprintf(err, errn, "workload: round_type must be a plain float type");
    return -1;
  }
  w->s = *s;
  w->p = *p;
  w->seed = seed;
  w->group = s->n_head / Hkv;
  w->n_pages = (s->n_tokens + s->block - 1) / s->block;
  w->window = p->recent_window < s->n_tokens - 1 ? p->recent_window : s->n_tokens - 1;
  if (w->window < 0) w->window = 0;
  w->body_end = s->n_tokens - w->window;
  w->theta = xcalloc((size_t)D / 2, sizeof *w->theta);
  w->kstd = xcalloc((size_t)Hkv * D, sizeof *w->kstd);
  w->kmean = xcalloc((size_t)Hkv * D, sizeof *w->kmean);
  w->vmean = xcalloc((size_t)Hkv * D, sizeof *w->vmean);
  w->outlier = xcalloc((size_t)Hkv * D / 2, 1);
  for (int i = 0; i < D / 2; i++) w->theta[i] = pow(p->rope_base, -2.0 * i / D);

  const uint64_t key = stream_key(seed, ST_STRUCT);
  const int half = D / 2, olo = half - (D / 8 > 0 ? D / 8 : 1); /* lowest-frequency quarter of the pairs */
  int n_active = p->active_pairs > 0 ? p->active_pairs : D / 8;
  int *idx = xcalloc((size_t)half, sizeof *idx);
  for (int h = 0; h < Hkv; h++) {
    uint8_t *out = w->outlier + (size_t)h * half;
    int no = pick_pairs(key, 2 * (uint64_t)h, olo, half, NULL, p->outlier_pairs < half ? p->outlier_pairs : half, idx);
    for (int j = 0; j < no; j++) out[idx[j]] = 1;
    int na = pick_pairs(key, 2 * (uint64_t)h + 1, 0, half, out, n_active, idx);
    float *sd = w->kstd + (size_t)h * D, *mu = w->kmean + (size_t)h * D, *vm = w->vmean + (size_t)h * D;
    for (int d = 0; d < D; d++) sd[d] = (float)p->inactive_std;
    for (int j = 0; j < na; j++) sd[2 * idx[j]] = sd[2 * idx[j] + 1] = (float)p->active_std;
    for (int i = 0; i < half; i++)
      if (out[i]) {
        const double phi = 2 * M_PI * unif_k(key, 1000000u + (uint64_t)h * half + i);
        mu[2 * i] = (float)(p->outlier_mean * p->active_std * cos(phi));
        mu[2 * i + 1] = (float)(p->outlier_mean * p->active_std * sin(phi));
      }
    for (int d = 0; d < D; d++) vm[d] = (float)(p->value_mean * gauss_k(key, 2000000u + (uint64_t)h * D + d));
  }
  free(idx);
  return 0;
}

void qgen_wl_free(qgen_wl *w) {
  free(w->theta);
  free(w->kstd);
  free(w->kmean);
  free(w->vmean);
  free(w->outlier);
  memset(w, 0, sizeof *w);
}

/* Rotate the pairs of x (D values) by the angles pos·θ_i. */
static void rope(const qgen_wl *w, double pos, float *x) {
  for (int i = 0; i < w->s.head_dim / 2; i++) {
    const double a = pos * w->theta[i], c = cos(a), s = sin(a);
    const double x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = (float)(c * x0 - s * x1);
    x[2 * i + 1] = (float)(s * x0 + c * x1);
  }
}

int64_t qgen_wl_segment(const qgen_wl *w, int64_t t) {
  const int64_t L = w->p.topic_len > 0 ? w->p.topic_len : 1, c = t / L;
  const uint64_t key = stream_key(w->seed, ST_SEGMENT);
  const int64_t start = c * L + (int64_t)(qgen_mix64(key ^ (uint64_t)c) % (uint64_t)L);
  return t >= start ? c : c - 1; /* segment c runs from cell c's boundary to cell c+1's */
}

void qgen_wl_haystack(const qgen_wl *w, int64_t t0, int64_t t1, float *k, float *v) {
  const int D = w->s.head_dim, Hkv = w->s.n_head_kv, half = D / 2;
  const uint64_t kk = stream_key(w->seed, ST_KEY), kv = stream_key(w->seed, ST_VALUE),
                 kt = stream_key(w->seed, ST_TOPIC);
  const double share = w->p.topic_share < 0 ? 0 : w->p.topic_share > 1 ? 1 : w->p.topic_share;
  const double a = sqrt(1 - share), b = sqrt(share);
  double cs[2 * 512];
  for (int64_t t = t0; t < t1; t++) {
    const uint64_t seg = (uint64_t)(qgen_wl_segment(w, t) + 1);
    if (k)
      for (int i = 0; i < half; i++) {
        const double ang = (double)t * w->theta[i];
        cs[2 * i] = cos(ang);
        cs[2 * i + 1] = sin(ang);
      }
    for (int h = 0; h < Hkv; h++) {
      const uint64_t base = ((uint64_t)t * (uint64_t)Hkv + (uint64_t)h) * (uint64_t)D;
      const size_t off = ((size_t)(t - t0) * (size_t)Hkv + (size_t)h) * (size_t)D;
      if (k) {
        const float *sd = w->kstd + (size_t)h * D, *mu = w->kmean + (size_t)h * D;
        const uint64_t tb = (seg * (uint64_t)Hkv + (uint64_t)h) * (uint64_t)D;
        float *r = k + off;
        for (int i = 0; i < half; i++) {
          const double x0 = mu[2 * i] + a * sd[2 * i] * gauss_k(kk, base + 2 * (uint64_t)i);
          const double x1 = mu[2 * i + 1] + a * sd[2 * i + 1] * gauss_k(kk, base + 2 * (uint64_t)i + 1);
          const double y0 = b > 0 ? b * sd[2 * i] * gauss_k(kt, tb + 2 * (uint64_t)i) : 0.0;
          const double y1 = b > 0 ? b * sd[2 * i + 1] * gauss_k(kt, tb + 2 * (uint64_t)i + 1) : 0.0;
          r[2 * i] = (float)(cs[2 * i] * x0 - cs[2 * i + 1] * x1 + y0);
          r[2 * i + 1] = (float)(cs[2 * i + 1] * x0 + cs[2 * i] * x1 + y1);
        }
        round_row(w, r, D);
      }
      if (v) {
        const float *vm = w->vmean + (size_t)h * D;
        float *r = v + off;
        for (int d = 0; d < D; d++) r[d] = vm[d] + gauss_k(kv, base + (uint64_t)d);
        round_row(w, r, D);
      }
    }
  }
}

/* ---- logits ------------------------------------------------------------------------------ */

static inline double dot(const float *a, const float *b, int n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += (double)a[d] * (double)b[d];
    s1 += (double)a[d + 1] * (double)b[d + 1];
    s2 += (double)a[d + 2] * (double)b[d + 2];
    s3 += (double)a[d + 3] * (double)b[d + 3];
  }
  for (; d < n; d++) s0 += (double)a[d] * (double)b[d];
  return (s0 + s1) + (s2 + s3);
}

void qgen_wl_logits(const qgen_wl_trial *T, const float *k, double *out) {
  const qgen_wl *w = T->w;
  const int D = w->s.head_dim, G = w->group;
  for (int h = 0; h < w->s.n_head_kv; h++)
    for (int g = 0; g < G; g++) {
      const int hq = h * G + g;
      out[hq] = w->s.scale * dot(T->q + (size_t)hq * D, k + (size_t)h * D, D);
    }
}

/* ---- parallel-for ---------------------------------------------------------------------- */

typedef struct {
  atomic_llong next;
  int64_t n;
  void (*fn)(void *, int64_t);
  void *ctx;
} par_job;

static void *par_worker(void *arg) {
  par_job *j = arg;
  for (;;) {
    const int64_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->n) break;
    j->fn(j->ctx, i);
  }
  return NULL;
}

void qgen_wl_parallel(int64_t n, int threads, void (*fn)(void *ctx, int64_t i), void *ctx) {
  if (threads > n) threads = (int)n;
  if (threads <= 1) {
    for (int64_t i = 0; i < n; i++) fn(ctx, i);
    return;
  }
  par_job j;
  atomic_init(&j.next, 0);
  j.n = n;
  j.fn = fn;
  j.ctx = ctx;
  pthread_t *th = xcalloc((size_t)threads, sizeof *th);
  int started = 0;
  for (int i = 0; i < threads - 1; i++)
    if (pthread_create(&th[started], NULL, par_worker, &j) == 0) started++;
  par_worker(&j);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  free(th);
}

/* ---- per-page statistics ------------------------------------------------------------------- */

/* Online log-sum-exp of one page for one head. */
static inline void lse_add(double *m, double *s, double x) {
  if (x <= *m) *s += exp(x - *m);
  else {
    *s = *s * exp(*m - x) + 1.0;
    *m = x;
  }
}

/* Max and log-sum-exp over the final rows (T, P) of page p, every query head, skipping the
   n_skip positions in skip. An empty page gives -inf for both. */
static void page_stat(const qgen_wl_trial *T, const qgen_wl_plan *P, int64_t p, const int64_t *skip, int n_skip,
                      double *mx, double *lse) {
  const qgen_wl *w = T->w;
  const int B = w->s.block, Hq = w->s.n_head;
  const size_t row = (size_t)w->s.n_head_kv * w->s.head_dim;
  const int64_t t0 = p * B, t1 = (p + 1) * B < w->s.n_tokens ? (p + 1) * B : w->s.n_tokens;
  float *k = xcalloc((size_t)(t1 - t0) * row, sizeof *k);
  double *l = xcalloc((size_t)Hq, sizeof *l), *s = xcalloc((size_t)Hq, sizeof *s);
  qgen_wl_rows(T, P, t0, t1, k, NULL);
  for (int g = 0; g < Hq; g++) mx[g] = -INFINITY;
  for (int64_t t = t0; t < t1; t++) {
    int skipped = 0;
    for (int i = 0; i < n_skip; i++) skipped |= skip[i] == t;
    if (skipped) continue;
    qgen_wl_logits(T, k + (size_t)(t - t0) * row, l);
    for (int g = 0; g < Hq; g++) lse_add(&mx[g], &s[g], l[g]);
  }
  for (int g = 0; g < Hq; g++) lse[g] = mx[g] == -INFINITY ? -INFINITY : mx[g] + log(s[g]);
  free(k);
  free(l);
  free(s);
}

/* ---- the trial ----------------------------------------------------------------------------- */

#define CHUNK_PAGES 16

typedef struct {
  qgen_wl_trial *T;
  const qgen_wl_source *src;
  double *moments; /* [chunks][Hq][3]: count, sum, sum of squares of the body logits */
} pass_ctx;

static void pass_chunk(void *arg, int64_t c) {
  pass_ctx *pc = arg;
  qgen_wl_trial *T = pc->T;
  const qgen_wl *w = T->w;
  const int B = w->s.block, Hq = w->s.n_head;
  const size_t row = (size_t)w->s.n_head_kv * w->s.head_dim;
  const int64_t p0 = c * CHUNK_PAGES, p1 = p0 + CHUNK_PAGES < w->n_pages ? p0 + CHUNK_PAGES : w->n_pages;
  const int64_t t0 = p0 * B, t1 = p1 * B < w->s.n_tokens ? p1 * B : w->s.n_tokens;
  float *scratch = NULL;
  const float *k;
  if (pc->src && pc->src->keys) {
    scratch = malloc((size_t)(t1 - t0) * row * sizeof *scratch);
    k = pc->src->keys(pc->src->ctx, t0, t1, scratch);
  } else {
    scratch = xcalloc((size_t)(t1 - t0) * row, sizeof *scratch);
    qgen_wl_haystack(w, t0, t1, scratch, NULL);
    k = scratch;
  }
  double l[1024], s[1024];
  double *mom = pc->moments + (size_t)c * Hq * 3;
  for (int64_t p = p0; p < p1; p++) {
    double *mx = T->pmax + (size_t)p * Hq, *ls = T->plse + (size_t)p * Hq;
    for (int g = 0; g < Hq; g++) mx[g] = -INFINITY, s[g] = 0;
    const int64_t e = (p + 1) * B < t1 ? (p + 1) * B : t1;
    for (int64_t t = p * B; t < e; t++) {
      qgen_wl_logits(T, k + (size_t)(t - t0) * row, l);
      const int body = t >= 1 && t < w->body_end;
      for (int g = 0; g < Hq; g++) {
        lse_add(&mx[g], &s[g], l[g]);
        if (body) {
          mom[3 * g] += 1;
          mom[3 * g + 1] += l[g];
          mom[3 * g + 2] += l[g] * l[g];
        }
      }
    }
    for (int g = 0; g < Hq; g++) ls[g] = mx[g] + log(s[g]);
  }
  free(scratch);
}

/* The query of a trial seed: q [n_head][D] (rotated, rounded); mean (if not NULL) receives
   its deterministic part, the outlier component (rotated, unrounded). */
static void draw_query(const qgen_wl *w, uint64_t seed, float *qout, float *mean) {
  const int D = w->s.head_dim, Hkv = w->s.n_head_kv, G = w->group;
  const qgen_wl_params *p = &w->p;
  const double scale = w->s.scale;
  const uint64_t kc = stream_key(seed, ST_QUERY_C), kw = stream_key(seed, ST_QUERY_W);
  double *c = xcalloc((size_t)D, sizeof *c), *x = xcalloc((size_t)D, sizeof *x);
  for (int h = 0; h < Hkv; h++) {
    const float *sd = w->kstd + (size_t)h * D, *mu = w->kmean + (size_t)h * D;
    const uint8_t *out = w->outlier + (size_t)h * (D / 2);
    double mu2 = 0;
    for (int d = 0; d < D; d++) mu2 += (double)mu[d] * mu[d];
    for (int d = 0; d < D; d++) c[d] = out[d / 2] ? 0.0 : sd[d] * gauss_k(kc, (uint64_t)h * D + d);
    for (int g = 0; g < G; g++) {
      float *q = qout + (size_t)(h * G + g) * D;
      double n2 = 0;
      for (int d = 0; d < D; d++) {
        const double wv = out[d / 2] ? 0.0 : sd[d] * gauss_k(kw, (uint64_t)(h * G + g) * D + d);
        x[d] = c[d] + p->head_spread * wv;
        n2 += x[d] * x[d] * sd[d] * sd[d];
      }
      const double f = n2 > 0 ? p->logit_std / (scale * sqrt(n2)) : 0.0;
      const double a = mu2 > 0 ? p->outlier_logit * p->logit_std / (scale * sqrt(mu2)) : 0.0;
      for (int d = 0; d < D; d++) q[d] = (float)(f * x[d] + a * mu[d] / (mu2 > 0 ? sqrt(mu2) : 1.0));
      rope(w, (double)w->s.n_tokens, q);
      round_row(w, q, D);
      if (mean) {
        float *m = mean + (size_t)(h * G + g) * D;
        for (int d = 0; d < D; d++) m[d] = (float)(a * mu[d] / (mu2 > 0 ? sqrt(mu2) : 1.0));
        rope(w, (double)w->s.n_tokens, m);
      }
    }
  }
  free(c);
  free(x);
}

/* 1. The trial's query, each group's unit direction u_h, and qu = scale · q_g·u_h. */
static void trial_query(qgen_wl_trial *T) {
  const qgen_wl *w = T->w;
  const int D = w->s.head_dim, Hkv = w->s.n_head_kv, G = w->group;
  const double scale = w->s.scale;
  draw_query(w, T->seed, T->q, NULL);
  double *c = xcalloc((size_t)D, sizeof *c);
  for (int h = 0; h < Hkv; h++) {
    /* the group's direction */
    double n2 = 0;
    float *u = T->u + (size_t)h * D;
    for (int d = 0; d < D; d++) {
      double s = 0;
      for (int g = 0; g < G; g++) s += T->q[(size_t)(h * G + g) * D + d];
      c[d] = s;
      n2 += s * s;
    }
    for (int d = 0; d < D; d++) u[d] = (float)(n2 > 0 ? c[d] / sqrt(n2) : 0.0);
    for (int g = 0; g < G; g++) T->qu[h * G + g] = scale * dot(T->q + (size_t)(h * G + g) * D, u, D);
  }
  free(c);
}

/* 2. The statistics pass over the base haystack (read from src): the per-page max and
   log-sum-exp of every query head, and S_g from the body logits' moments, merged in chunk
   order so the thread count does not change them. */
static void trial_stats(qgen_wl_trial *T, const qgen_wl_source *src, int threads) {
  const qgen_wl *w = T->w;
  const int Hq = w->s.n_head;
  const int64_t chunks = (w->n_pages + CHUNK_PAGES - 1) / CHUNK_PAGES;
  pass_ctx pc = {T, src, xcalloc((size_t)chunks * Hq * 3, sizeof(double))};
  qgen_wl_parallel(chunks, threads, pass_chunk, &pc);
  for (int g = 0; g < Hq; g++) {
    double n = 0, s = 0, s2 = 0;
    for (int64_t ci = 0; ci < chunks; ci++) {
      n += pc.moments[((size_t)ci * Hq + g) * 3];
      s += pc.moments[((size_t)ci * Hq + g) * 3 + 1];
      s2 += pc.moments[((size_t)ci * Hq + g) * 3 + 2];
    }
    const double var = n > 1 ? (s2 - s * s / n) / (n - 1) : 0.0;
    T->S[g] = var > 0 ? sqrt(var) : 1.0;
  }
  free(pc.moments);
}

/* 3. The recency window: raise the group's mean logit by boost·S·exp(-distance/tau), and
   the statistics of the pages it touches again. */
static void trial_recency(qgen_wl_trial *T) {
  const qgen_wl *w = T->w;
  const qgen_wl_params *p = &w->p;
  const int Hkv = w->s.n_head_kv, G = w->group, Hq = w->s.n_head;
  const int64_t N = w->s.n_tokens, B = w->s.block;
  for (int64_t i = 0; i < w->window; i++) {
    const int64_t t = N - w->window + i;
    for (int h = 0; h < Hkv; h++) {
      double sbar = 0, qbar = 0;
      for (int g = 0; g < G; g++) sbar += T->S[h * G + g] / G, qbar += T->qu[h * G + g] / G;
      const double delta = p->recent_boost * sbar * exp(-(double)(N - 1 - t) / (p->recent_tau > 0 ? p->recent_tau : 1));
      T->beta[(size_t)i * Hkv + h] = qbar > 0 ? delta / qbar : 0.0;
    }
  }
  if (w->window > 0)
    for (int64_t pg = (N - w->window) / B; pg < w->n_pages; pg++)
      page_stat(T, NULL, pg, NULL, 0, T->pmax + (size_t)pg * Hq, T->plse + (size_t)pg * Hq);
}

/* 4. The sink: token 0 takes sink_mass of the mass of the rest of the context (alpha0, the
   shift along u_h, averaged over the group's heads); dmax0 and page 0's statistics. */
static void trial_sink(qgen_wl_trial *T) {
  const qgen_wl *w = T->w;
  const qgen_wl_params *p = &w->p;
  const int D = w->s.head_dim, Hkv = w->s.n_head_kv, G = w->group, Hq = w->s.n_head;
  double *l0 = xcalloc((size_t)Hq, sizeof *l0), *lse0 = xcalloc((size_t)Hq, sizeof *lse0);
  const int64_t zero = 0;
  page_stat(T, NULL, 0, &zero, 1, T->dmax0, lse0);
  if (p->sink_mass > 0 && p->sink_mass < 1) {
    float *k0 = xcalloc((size_t)Hkv * D, sizeof *k0);
    qgen_wl_haystack(w, 0, 1, k0, NULL);
    qgen_wl_logits(T, k0, l0);
    for (int h = 0; h < Hkv; h++) {
      double a = 0;
      int na = 0;
      for (int g = 0; g < G; g++) {
        const int hq = h * G + g;
        double m = lse0[hq], z = 0; /* log-sum-exp of every token but 0 */
        for (int64_t pg = 1; pg < w->n_pages; pg++) m = T->plse[(size_t)pg * Hq + hq] > m ? T->plse[(size_t)pg * Hq + hq] : m;
        if (lse0[hq] > -INFINITY) z += exp(lse0[hq] - m);
        for (int64_t pg = 1; pg < w->n_pages; pg++) z += exp(T->plse[(size_t)pg * Hq + hq] - m);
        const double target = m + log(z) + log(p->sink_mass / (1 - p->sink_mass));
        if (T->qu[hq] > 0) a += (target - l0[hq]) / T->qu[hq], na++;
      }
      T->alpha0[h] = na ? a / na : 0.0;
    }
    free(k0);
  }
  page_stat(T, NULL, 0, NULL, 0, T->pmax, T->plse);
  free(l0);
  free(lse0);
}

int qgen_wl_trial_init(qgen_wl_trial *T, const qgen_wl *w, uint64_t trial_seed, const qgen_wl_source *src,
                       int threads) {
  memset(T, 0, sizeof *T);
  const int D = w->s.head_dim, Hkv = w->s.n_head_kv, Hq = w->s.n_head;
  if (Hq > 1024) return -1;
  T->w = w;
  T->seed = trial_seed;
  T->q = xcalloc((size_t)Hq * D, sizeof *T->q);
  T->u = xcalloc((size_t)Hkv * D, sizeof *T->u);
  T->qu = xcalloc((size_t)Hq, sizeof *T->qu);
  T->S = xcalloc((size_t)Hq, sizeof *T->S);
  T->pmax = xcalloc((size_t)w->n_pages * Hq, sizeof *T->pmax);
  T->plse = xcalloc((size_t)w->n_pages * Hq, sizeof *T->plse);
  T->dmax0 = xcalloc((size_t)Hq, sizeof *T->dmax0);
  T->beta = xcalloc((size_t)(w->window > 0 ? w->window : 1) * Hkv, sizeof *T->beta);
  T->alpha0 = xcalloc((size_t)Hkv, sizeof *T->alpha0);
  trial_query(T);
  trial_stats(T, src, threads);
  trial_recency(T);
  trial_sink(T);
  return 0;
}

void qgen_wl_trial_free(qgen_wl_trial *T) {
  free(T->q);
  free(T->u);
  free(T->qu);
  free(T->S);
  free(T->pmax);
  free(T->plse);
  free(T->dmax0);
  free(T->beta);
  free(T->alpha0);
  memset(T, 0, sizeof *T);
}

/* ---- final rows ------------------------------------------------------------------------------ */

static void shift_row(const qgen_wl *w, float *r, const float *u, double a) {
  for (int d = 0; d < w->s.head_dim; d++) r[d] = (float)((double)r[d] + a * (double)u[d]);
  round_row(w, r, w->s.head_dim);
}

void qgen_wl_rows(const qgen_wl_trial *T, const qgen_wl_plan *P, int64_t t0, int64_t t1, float *k, float *v) {
  const qgen_wl *w = T->w;
  const int D = w->s.head_dim, Hkv = w->s.n_head_kv;
  const size_t row = (size_t)Hkv * D;
  const int64_t N = w->s.n_tokens;
  qgen_wl_haystack(w, t0, t1, k, v);
  const int sink = w->p.sink_mass > 0 && w->p.sink_mass < 1;
  if (sink && t0 == 0 && t1 > 0) {
    if (k)
      for (int h = 0; h < Hkv; h++) shift_row(w, k + (size_t)h * D, T->u + (size_t)h * D, T->alpha0[h]);
    if (v) memset(v, 0, row * sizeof *v);
  }
  if (k)
    for (int64_t t = t0 > N - w->window ? t0 : N - w->window; t < t1; t++) {
      if (t == 0) continue;
      const int64_t i = t - (N - w->window);
      for (int h = 0; h < Hkv; h++)
        shift_row(w, k + (size_t)(t - t0) * row + (size_t)h * D, T->u + (size_t)h * D, T->beta[(size_t)i * Hkv + h]);
    }
  if (k && P)
    for (int j = 0; j < P->n; j++)
      if (P->at[j].pos >= t0 && P->at[j].pos < t1)
        memcpy(k + (size_t)(P->at[j].pos - t0) * row, P->rows + (size_t)j * row, row * sizeof *k);
}

int64_t qgen_wl_specials(const qgen_wl_trial *T, const qgen_wl_plan *P, int64_t *pos) {
  const qgen_wl *w = T->w;
  int64_t n = 0;
  pos[n++] = 0;
  for (int j = 0; P && j < P->n; j++) pos[n++] = P->at[j].pos;
  for (int64_t t = w->s.n_tokens - w->window; t < w->s.n_tokens; t++)
    if (t > 0) pos[n++] = t;
  return n;
}

void qgen_wl_drift(const qgen_wl_trial *T, int step, const float *prev, float *next) {
  const qgen_wl *w = T->w;
  const int D = w->s.head_dim, G = w->group, Hq = w->s.n_head;
  const double rho = w->p.drift < 0 ? 0 : w->p.drift > 1 ? 1 : w->p.drift, nu = sqrt(1 - rho * rho);
  float *fresh = xcalloc((size_t)Hq * D, sizeof *fresh), *mean = xcalloc((size_t)Hq * D, sizeof *mean);
  draw_query(w, stream_key(T->seed, ST_DRIFT) + (uint64_t)step, fresh, mean);
  for (int hq = 0; hq < Hq; hq++) {
    const size_t o = (size_t)hq * D;
    const float *u = T->u + (size_t)(hq / G) * D;
    double x[1024], xu = 0, tu = 0;
    for (int d = 0; d < D; d++) {
      x[d] = mean[o + d] + rho * ((double)prev[o + d] - mean[o + d]) + nu * ((double)fresh[o + d] - mean[o + d]);
      xu += x[d] * u[d];
      tu += (double)T->q[o + d] * u[d];
    }
    for (int d = 0; d < D; d++) next[o + d] = (float)(x[d] + (tu - xu) * u[d]);
    round_row(w, next + o, D);
  }
  free(fresh);
  free(mean);
}

typedef struct {
  qgen_wl_trial Tq;
  const qgen_wl_plan *P;
  double *pmax, *plse;
} qstat_job;

static void qstat_page(void *arg, int64_t p) {
  qstat_job *j = arg;
  const size_t Hq = (size_t)j->Tq.w->s.n_head;
  page_stat(&j->Tq, j->P, p, NULL, 0, j->pmax + (size_t)p * Hq, j->plse + (size_t)p * Hq);
}

void qgen_wl_query_stats(const qgen_wl_trial *T, const qgen_wl_plan *P, const float *q, double *pmax, double *plse,
                         int threads) {
  qstat_job j = {*T, P, pmax, plse};
  j.Tq.q = (float *)q; /* read only: page_stat computes logits with it */
  qgen_wl_parallel(T->w->n_pages, threads, qstat_page, &j);
}

void qgen_wl_page_stats(const qgen_wl_trial *T, const qgen_wl_plan *P, double *pmax, double *plse) {
  const qgen_wl *w = T->w;
  const size_t Hq = (size_t)w->s.n_head;
  memcpy(pmax, T->pmax, (size_t)w->n_pages * Hq * sizeof *pmax);
  memcpy(plse, T->plse, (size_t)w->n_pages * Hq * sizeof *plse);
  for (int i = 0; P && i < P->n_pages; i++) {
    memcpy(pmax + (size_t)P->page[i] * Hq, P->pmax + (size_t)i * Hq, Hq * sizeof *pmax);
    memcpy(plse + (size_t)P->page[i] * Hq, P->plse + (size_t)i * Hq, Hq * sizeof *plse);
  }
}

/* ---- planting ---------------------------------------------------------------------------------- */

/* Positions and owners of the n planted tokens of task, drawn from (trial seed, task) only:
   distinct body pages in [first, end); a boundary needle at a page's first or last slot;
   multikey distractors in the needle's KV heads. */
static void plant_positions(qgen_wl_plan *P, const qgen_wl_trial *T, qgen_wl_task task, int n, int owners, int64_t first,
                            int64_t end) {
  const qgen_wl *w = T->w;
  const int Hkv = w->s.n_head_kv, B = w->s.block;
  const uint64_t key = stream_key(T->seed, ST_PLANT + (uint64_t)task);
  uint64_t ctr = 0;
  for (int j = 0; j < n; j++) {
    int64_t pg;
    for (;;) {
      pg = first + (int64_t)(unif_k(key, ctr++) * (double)(end - first));
      if (pg >= end) pg = end - 1;
      int dup = 0;
      for (int i = 0; i < j; i++) dup |= P->at[i].pos / B == pg;
      if (!dup) break;
    }
    int64_t off = (int64_t)(unif_k(key, ctr++) * B);
    if (off >= B) off = B - 1;
    if (task == QGEN_WL_NIAH_BOUNDARY) off = unif_k(key, ctr++) < 0.5 ? 0 : B - 1;
    P->at[j].pos = pg * B + off;
    P->at[j].needle = task != QGEN_WL_NIAH_MULTIKEY || j == 0;
    if (j == 0 || task != QGEN_WL_NIAH_MULTIKEY) {
      uint32_t m = 0;
      for (int o = 0; o < owners; o++) {
        int h;
        do {
          h = (int)(unif_k(key, ctr++) * Hkv);
          if (h >= Hkv) h = Hkv - 1;
        } while (m >> h & 1);
        m |= 1u << h;
      }
      P->at[j].owners = m;
    } else {
      P->at[j].owners = P->at[0].owners; /* near-duplicates live in the needle's heads */
    }
  }
  P->n = n;
}

/* P->M: per query head the strongest distractor, the largest logit over every token but the
   sink and the planted ones. */
static void strongest_distractor(qgen_wl_plan *P, const qgen_wl_trial *T) {
  const qgen_wl *w = T->w;
  const int Hq = w->s.n_head, B = w->s.block, n = P->n;
  P->M = xcalloc((size_t)Hq, sizeof *P->M);
  int64_t skip[QGEN_WL_MAX_PLANTED];
  for (int j = 0; j < n; j++) skip[j] = P->at[j].pos;
  uint8_t *planted_page = xcalloc((size_t)w->n_pages, 1);
  for (int j = 0; j < n; j++) planted_page[P->at[j].pos / B] = 1;
  for (int g = 0; g < Hq; g++) P->M[g] = T->dmax0[g];
  for (int64_t pg = 1; pg < w->n_pages; pg++)
    if (!planted_page[pg])
      for (int g = 0; g < Hq; g++)
        if (T->pmax[(size_t)pg * Hq + g] > P->M[g]) P->M[g] = T->pmax[(size_t)pg * Hq + g];
  double *mx = xcalloc((size_t)Hq, sizeof *mx), *ls = xcalloc((size_t)Hq, sizeof *ls);
  for (int j = 0; j < n; j++) {
    page_stat(T, NULL, P->at[j].pos / B, skip, n, mx, ls);
    for (int g = 0; g < Hq; g++)
      if (mx[g] > P->M[g]) P->M[g] = mx[g];
  }
  free(planted_page);
  free(mx);
  free(ls);
}

/* The planted keys into P->rows: each is its base row moved along u_h in its owner heads,
   needles first, up to margin S_g over the strongest distractor for every query head of the
   group; then the multikey distractors, down to margin S_g below the needle. */
static void plant_keys(qgen_wl_plan *P, const qgen_wl_trial *T, double margin) {
  const qgen_wl *w = T->w;
  const int D = w->s.head_dim, Hkv = w->s.n_head_kv, G = w->group, Hq = w->s.n_head, n = P->n;
  const size_t row = (size_t)Hkv * D;
  P->rows = xcalloc((size_t)n * row, sizeof *P->rows);
  double *l = xcalloc((size_t)Hq, sizeof *l), *ln = xcalloc((size_t)Hq, sizeof *ln);
  for (int pass = 0; pass < 2; pass++)
    for (int j = 0; j < n; j++) {
      if (P->at[j].needle != (pass == 0)) continue;
      float *r = P->rows + (size_t)j * row;
      qgen_wl_haystack(w, P->at[j].pos, P->at[j].pos + 1, r, NULL);
      qgen_wl_logits(T, r, l);
      if (pass == 1) qgen_wl_logits(T, P->rows, ln); /* the needle is at[0] before sorting */
      for (int h = 0; h < Hkv; h++) {
        if (!(P->at[j].owners >> h & 1)) continue;
        double a = pass == 0 ? -INFINITY : INFINITY;
        for (int g = 0; g < G; g++) {
          const int hq = h * G + g;
          if (!(T->qu[hq] > 0)) continue;
          if (pass == 0) {
            const double need = (P->M[hq] + margin * T->S[hq] - l[hq]) / T->qu[hq];
            if (need > a) a = need;
          } else {
            const double room = (ln[hq] - margin * T->S[hq] - l[hq]) / T->qu[hq];
            if (room < a) a = room;
          }
        }
        if (isfinite(a)) shift_row(w, r + (size_t)h * D, T->u + (size_t)h * D, a);
      }
    }
  free(l);
  free(ln);
}

/* The planted tokens in ascending positions (their rows move with them). */
static void sort_planted(qgen_wl_plan *P, size_t row) {
  const int n = P->n;
  qgen_wl_planted tmp[QGEN_WL_MAX_PLANTED];
  int order[QGEN_WL_MAX_PLANTED];
  memcpy(tmp, P->at, sizeof tmp);
  for (int j = 0; j < n; j++) order[j] = j;
  for (int a = 1; a < n; a++) /* insertion sort of the indices by position */
    for (int b = a; b > 0 && tmp[order[b]].pos < tmp[order[b - 1]].pos; b--) {
      int x = order[b];
      order[b] = order[b - 1];
      order[b - 1] = x;
    }
  float *sorted = xcalloc((size_t)n * row, sizeof *sorted);
  for (int j = 0; j < n; j++) {
    P->at[j] = tmp[order[j]];
    memcpy(sorted + (size_t)j * row, P->rows + (size_t)order[j] * row, row * sizeof *sorted);
  }
  free(P->rows);
  P->rows = sorted;
}

int qgen_wl_plant(qgen_wl_plan *P, const qgen_wl_trial *T, qgen_wl_task task, double margin, char *err, size_t errn) {
  memset(P, 0, sizeof *P);
  const qgen_wl *w = T->w;
  const qgen_wl_params *p = &w->p;
  const int Hkv = w->s.n_head_kv, Hq = w->s.n_head, B = w->s.block;
  P->task = task;
  P->margin = margin;
  int n = task == QGEN_WL_NIAH_MULTIKEY ? p->multikey : task == QGEN_WL_NIAH_MULTIVALUE ? p->multivalue : 1;
  if (n < 1) n = 1;
  if (n > QGEN_WL_MAX_PLANTED) n = QGEN_WL_MAX_PLANTED;
  const int64_t first = 1, end = w->body_end / B; /* body pages [first, end) */
  if (end - first < n) {
    snprintf(err, errn, "workload: %lld tokens leave %lld body pages (outside the sink page and the last %lld tokens); "
             "%s needs %d", (long long)w->s.n_tokens, (long long)(end - first > 0 ? end - first : 0),
             (long long)w->window, qgen_wl_task_name(task), n);
    return -1;
  }
  int owners = p->owners > 0 ? p->owners : Hkv / 4;
  if (owners < 1) owners = 1;
  if (owners > Hkv) owners = Hkv;
  plant_positions(P, T, task, n, owners, first, end);
  strongest_distractor(P, T);
  plant_keys(P, T, margin);
  sort_planted(P, (size_t)Hkv * w->s.head_dim);
  /* the final statistics of the planted pages (distinct pages, so one page per token) */
  P->n_pages = n;
  P->pmax = xcalloc((size_t)n * Hq, sizeof *P->pmax);
  P->plse = xcalloc((size_t)n * Hq, sizeof *P->plse);
  for (int j = 0; j < n; j++) {
    P->page[j] = P->at[j].pos / B;
    page_stat(T, P, P->page[j], NULL, 0, P->pmax + (size_t)j * Hq, P->plse + (size_t)j * Hq);
  }
  return 0;
}

void qgen_wl_plan_free(qgen_wl_plan *P) {
  free(P->rows);
  free(P->M);
  free(P->pmax);
  free(P->plse);
  memset(P, 0, sizeof *P);
}
