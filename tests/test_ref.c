/* test_ref.c — the CPU reference executor (ref/ref.c) against layout.h's definitions
 * and against a naive fp64 softmax attention written here, independently.
 *
 * The reference is the oracle of every GPU test, so this file checks it from outside:
 * expected bytes and bounds are recomputed from the *inputs* with the type table (never
 * read back through ref.c), the attention oracle is an online-softmax loop over the
 * dequantized input rows (a different algorithm from ref.c's two passes), and selection is
 * checked against the layout.h rules restated here. What is covered:
 *
 *   1. Quest bound: every page's score >= max over its tokens and the group's heads of q.k
 *      with the pre-quantization keys, on random and adversarial data (outlier channels,
 *      all-negative keys, zeros in q, keys on f16 rounding boundaries, f32 keys that f16
 *      cannot hold, values near and past 65504, tiny and signed-zero keys, constant pages);
 *      and the stored bounds are exactly rd(min) / ru(max) of each page's keys.
 *   2. A budget that covers the context (coverage 1, tokens >= len, sink or recent >= len)
 *      gives bit-identical output and the list of every page.
 *   3. attend == naive attention to 1e-12 relative, dense and restricted to sparse lists.
 *   4. Chunked appends (1, 7, 64, 4096, random) give byte-identical pools and bounds to
 *      token-by-token appends, for every K/V type pair.
 *   5. GQA: one list per KV head, the union-by-max of the group's wishes; every head of the
 *      group attends exactly that list.
 *   6. Selection rules: forced pages, ascending, no duplicates, count, ties to the lower
 *      index, NaN first, coverage ceil in double.
 *   7. len 0 gives zeros.
 *   8. Caches of every K type filled from the same keys hold the same bounds and select
 *      the same pages.
 *   9. 8-bit page bounds: the decoded bounds contain the f16 ones; the i8 score is a true
 *      upper bound (>= the page's max logit, and >= the f16 score) on random and
 *      adversarial pages and on many single extreme pages (constant channel, all-equal,
 *      +-65504, a single token); NaN only for pages without finite bounds; the 8-bit row
 *      is laid out as layout.h says; a sparse step over 8-bit bounds selects by them.
 *  10. Two-stage selection: the sketch scores (q4_0 round trip of the keys), r = 1 is
 *      Quest's list, every page a candidate is the exact scores' list, coverage 1 is every
 *      page, and the rules for r = 2..16.
 *  11. Steps of several query tokens (1, 2, 5, 16): one selection by the max over them,
 *      each token attending causally (test_multi).
 * Several caches hold several sequences under a shuffled page table with spare pages that
 * must stay untouched.
 *
 * Fresh random data each run: the seed is printed; QGEN_SEED=<n> reproduces a run.
 * Prints one line per check and "N passed, N failed"; exits 1 on any failure.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/le.h"
#include "ref/ref.h"

#include "testlib.h"
#include "rng.h"

#define F32 QGEN_TYPE_F32
#define F16 QGEN_TYPE_F16
#define BF16 QGEN_TYPE_BF16
#define Q8_0 QGEN_TYPE_Q8_0
#define Q4_0 QGEN_TYPE_Q4_0
#define Q5_0 QGEN_TYPE_Q5_0

/* ---- checks, random numbers, memory -------------------------------------------------- */

/* Roughly N(0, 1), cheaply: the sum of four 16-bit uniforms (Irwin-Hall), centred and
   scaled; tails end at +-3.46. Test data needs spread, not a perfect bell. */
static double rnd_normal(void) {
  const uint64_t r = rnd64();
  const double s = (double)(r & 0xffff) + (double)(r >> 16 & 0xffff) + (double)(r >> 32 & 0xffff) +
                   (double)(r >> 48);
  return (s * 0x1p-16 - 2.0) * 1.7320508075688772;
}

static double now(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC); /* C11; wall clock is fine for a progress note */
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}
static void *xcalloc(size_t n, size_t s) {
  void *p = calloc(n ? n : 1, s);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

static const char *tname(qgen_type t) { return qgen_type_traits_of(t)->name; }
static const qgen_type_traits *tr(qgen_type t) { return qgen_type_traits_of(t); }

/* ---- shapes and caches ------------------------------------------------------------- */

typedef struct {
  int D, H, Hkv, B;
} shape_t;

static const shape_t SHAPES[] = {{128, 32, 8, 64}, {64, 14, 2, 32}, {96, 4, 4, 128}, {256, 8, 4, 256}};

static void layout_make(qgen_layout *L, const shape_t *s, qgen_type k, qgen_type v, qgen_type in,
                        qgen_type out, int sparse) {
  qgen_layout_init(L, s->D, s->H, s->Hkv, s->B, k, v, in, out, 1.0 / sqrt((double)s->D), sparse);
}

static char *layout_name(const qgen_layout *L) {
  static char buf[8][128];
  static int i;
  char *b = buf[i++ & 7];
  snprintf(b, 128, "[D%d %d/%d B%d k=%s v=%s in=%s]", L->head_dim, L->n_head, L->n_head_kv,
           L->block, tname(L->k_type), tname(L->v_type), tname(L->in_type));
  return b;
}

#define SENT_POOL 0xA5
#define SENT_BOUNDS 0x5A

typedef struct {
  qgen_layout L;
  qgen_kvmem m;
  int64_t n_spare;
  int32_t *spare; /* physical pages no sequence owns: must keep their sentinel bytes */
} cache_t;

/* max_seqs sequences with room for pps pages each in the page table; sequence i gets
   physical pages for cap[i] tokens (cap == NULL: all pps), drawn from a shuffled set that
   also holds n_spare pages nobody owns. Page-table entries without a page are -1. Pools
   start as sentinel garbage (so a fresh page that merged instead of overwriting its bounds
   would show). */
static void cache_init(cache_t *c, const qgen_layout *L, int max_seqs, int64_t pps,
                       const int64_t *cap, int64_t n_spare) {
  memset(c, 0, sizeof *c);
  c->L = *L;
  int64_t used = 0;
  for (int i = 0; i < max_seqs; i++) used += cap ? qgen_pages_of(cap[i], L->block) : pps;
  const int64_t np = used + n_spare;
  c->m.max_seqs = max_seqs;
  c->m.pages_per_seq = pps;
  c->m.n_pages = np;
  c->m.k = xmalloc((size_t)np * L->k_page_bytes);
  c->m.v = xmalloc((size_t)np * L->v_page_bytes);
  memset(c->m.k, SENT_POOL, (size_t)np * L->k_page_bytes);
  memset(c->m.v, SENT_POOL, (size_t)np * L->v_page_bytes);
  if (L->sparse) {
    c->m.bounds = xmalloc((size_t)np * L->bounds_page_bytes);
    memset(c->m.bounds, SENT_BOUNDS, (size_t)np * L->bounds_page_bytes);
  }
  int32_t *perm = xmalloc((size_t)np * sizeof *perm);
  for (int64_t i = 0; i < np; i++) perm[i] = (int32_t)i;
  for (int64_t i = np - 1; i > 0; i--) {
    int64_t j = rnd_int(0, i);
    int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  c->m.page_table = xmalloc((size_t)(max_seqs * pps) * sizeof *c->m.page_table);
  int64_t next = 0;
  for (int i = 0; i < max_seqs; i++) {
    const int64_t have = cap ? qgen_pages_of(cap[i], L->block) : pps;
    for (int64_t p = 0; p < pps; p++) c->m.page_table[i * pps + p] = p < have ? perm[next++] : -1;
  }
  c->n_spare = n_spare;
  c->spare = xmalloc((size_t)(n_spare > 0 ? n_spare : 1) * sizeof *c->spare);
  memcpy(c->spare, perm + used, (size_t)n_spare * sizeof *perm);
  c->m.seq_len = xcalloc((size_t)max_seqs, sizeof *c->m.seq_len);
  free(perm);
}

/* A second cache with the same layout and page table (for byte comparisons). */
static void cache_twin(cache_t *c, const cache_t *src) {
  const qgen_layout *L = &src->L;
  memset(c, 0, sizeof *c);
  c->L = *L;
  c->m = src->m;
  const int64_t np = src->m.n_pages, nt = src->m.max_seqs * src->m.pages_per_seq;
  c->m.k = xmalloc((size_t)np * L->k_page_bytes);
  c->m.v = xmalloc((size_t)np * L->v_page_bytes);
  memset(c->m.k, SENT_POOL, (size_t)np * L->k_page_bytes);
  memset(c->m.v, SENT_POOL, (size_t)np * L->v_page_bytes);
  c->m.bounds = NULL;
  if (L->sparse) {
    c->m.bounds = xmalloc((size_t)np * L->bounds_page_bytes);
    memset(c->m.bounds, SENT_BOUNDS, (size_t)np * L->bounds_page_bytes);
  }
  c->m.page_table = xmalloc((size_t)nt * sizeof(int32_t));
  memcpy(c->m.page_table, src->m.page_table, (size_t)nt * sizeof(int32_t));
  c->m.seq_len = xcalloc((size_t)src->m.max_seqs, sizeof(int32_t));
  c->n_spare = src->n_spare;
  c->spare = xmalloc((size_t)(c->n_spare > 0 ? c->n_spare : 1) * sizeof *c->spare);
  memcpy(c->spare, src->spare, (size_t)c->n_spare * sizeof *c->spare);
}

static void cache_free(cache_t *c) {
  free(c->m.k);
  free(c->m.v);
  free(c->m.bounds);
  free(c->m.page_table);
  free(c->m.seq_len);
  free(c->spare);
}

/* Whole pools, bounds and lengths byte-identical. */
static int cache_same(const cache_t *a, const cache_t *b) {
  const qgen_layout *L = &a->L;
  const size_t np = (size_t)a->m.n_pages;
  int same = memcmp(a->m.k, b->m.k, np * L->k_page_bytes) == 0 &&
             memcmp(a->m.v, b->m.v, np * L->v_page_bytes) == 0 &&
             memcmp(a->m.seq_len, b->m.seq_len, (size_t)a->m.max_seqs * sizeof(int32_t)) == 0;
  if (L->sparse) same &= memcmp(a->m.bounds, b->m.bounds, np * L->bounds_page_bytes) == 0;
  return same;
}

/* Spare pages still hold their sentinel bytes. */
static int64_t spare_touched(const cache_t *c) {
  const qgen_layout *L = &c->L;
  int64_t bad = 0;
  for (int64_t i = 0; i < c->n_spare; i++) {
    const size_t p = (size_t)c->spare[i];
    for (size_t j = 0; j < L->k_page_bytes; j++) bad += c->m.k[p * L->k_page_bytes + j] != SENT_POOL;
    for (size_t j = 0; j < L->v_page_bytes; j++) bad += c->m.v[p * L->v_page_bytes + j] != SENT_POOL;
    if (L->sparse) {
      const uint8_t *bb = (const uint8_t *)c->m.bounds + p * L->bounds_page_bytes;
      for (size_t j = 0; j < L->bounds_page_bytes; j++) bad += bb[j] != SENT_BOUNDS;
    }
  }
  return bad;
}

/* ---- sequences: inputs and their exact and dequantized values ------------------------ */

typedef struct {
  int64_t len;
  uint8_t *k_in, *v_in; /* [len][Hkv][D] in in_type: what append is given */
  float *kx, *vx;       /* the same values as f32 (exact): the pre-quantization keys */
  float *kq, *vq;       /* dequantized through k_type / v_type, computed here */
} seq_t;

enum { DATA_RANDOM = 0, DATA_ADVERSARIAL = 1 };

/* One adversarial key value of the given kind (see the header comment). */
static float adv_value(int kind, int d) {
  const double sgn = rnd32() & 1 ? 1.0 : -1.0;
  switch (kind) {
  case 0: /* outlier channels */
    return (float)(rnd_normal() * (d % 13 == 5 ? 3000.0 : 1.0));
  case 1: /* all negative */
    return (float)(-fabs(rnd_normal()) - 0.01);
  case 2: { /* on an f16 rounding boundary: a half, or the midpoint of two adjacent halves */
    uint16_t h = (uint16_t)rnd_int(0x2000, 0x5000);
    double a = qgen_f16_to_f32(h), b = qgen_f16_to_f32((uint16_t)(h + 1));
    return (float)(sgn * (rnd32() & 1 ? a : (a + b) / 2));
  }
  case 3: /* f32 with a full mantissa: not representable in f16 */
    return (float)(sgn * ldexp(1.0 + rnd_unit(), (int)rnd_int(-8, 8)));
  case 4: /* near and past the f16 maximum */
    return (float)(sgn * (rnd32() & 1 ? 65000.0 + 504.0 * rnd_unit() : 65504.0 + 15.99 * rnd_unit()));
  case 5: /* tiny: f16 subnormals and below */
    return (float)(sgn * rnd_unit() * 0x1p-20);
  case 6: { /* signed zeros and the smallest values */
    static const float z[] = {0.0f, -0.0f, 1e-9f, -1e-9f, 0x1p-24f, -0x1p-24f};
    return z[rnd32() % 6];
  }
  default:
    return (float)rnd_normal();
  }
}

/* Build a sequence of len tokens. Random data: keys N(0,1) plus a per-(head, channel)
   offset (a few channels carry large offsets, like real RoPE'd keys), values N(0,1).
   Adversarial keys: one of 8 kinds per page (kind 7: every token of the page the same). */
static void seq_make(seq_t *s, const qgen_layout *L, int64_t len, int data) {
  const int D = L->head_dim, Hkv = L->n_head_kv, B = L->block;
  const size_t nv = (size_t)len * (size_t)Hkv * (size_t)D;
  s->len = len;
  s->kx = xmalloc((nv ? nv : 1) * sizeof(float));
  s->vx = xmalloc((nv ? nv : 1) * sizeof(float));
  s->kq = xmalloc((nv ? nv : 1) * sizeof(float));
  s->vq = xmalloc((nv ? nv : 1) * sizeof(float));
  s->k_in = xmalloc((size_t)len * Hkv * L->in_row_bytes + 1);
  s->v_in = xmalloc((size_t)len * Hkv * L->in_row_bytes + 1);
  double *bias = xmalloc((size_t)Hkv * D * sizeof *bias);
  for (int i = 0; i < Hkv * D; i++) bias[i] = rnd32() % 16 == 0 ? 4.0 * rnd_normal() : 0.3 * rnd_normal();
  const int kind0 = (int)(rnd32() % 8);
  for (int64_t t = 0; t < len; t++)
    for (int h = 0; h < Hkv; h++)
      for (int d = 0; d < D; d++) {
        const size_t i = ((size_t)t * Hkv + h) * D + d;
        if (data == DATA_RANDOM) {
          s->kx[i] = (float)(rnd_normal() + bias[h * D + d]);
        } else {
          const int kind = (int)((t / B + kind0) % 8);
          if (kind == 7 && t % B != 0)
            s->kx[i] = s->kx[((size_t)(t - t % B) * Hkv + h) * D + d];
          else
            s->kx[i] = adv_value(kind, d);
        }
        s->vx[i] = (float)rnd_normal();
      }
  free(bias);
  /* to the input type and back: kx, vx become exactly what append sees */
  const qgen_type_traits *in = tr(L->in_type), *kt = tr(L->k_type), *vt = tr(L->v_type);
  uint8_t *tmp = xmalloc(qgen_type_row_bytes(F32, D));
  for (int64_t r = 0; r < len * Hkv; r++) {
    float *kr = s->kx + (size_t)r * D, *vr = s->vx + (size_t)r * D;
    in->from_f32(kr, s->k_in + (size_t)r * L->in_row_bytes, D);
    in->to_f32(s->k_in + (size_t)r * L->in_row_bytes, kr, D);
    in->from_f32(vr, s->v_in + (size_t)r * L->in_row_bytes, D);
    in->to_f32(s->v_in + (size_t)r * L->in_row_bytes, vr, D);
    kt->from_f32(kr, tmp, D);
    kt->to_f32(tmp, s->kq + (size_t)r * D, D);
    vt->from_f32(vr, tmp, D);
    vt->to_f32(tmp, s->vq + (size_t)r * D, D);
  }
  free(tmp);
}

static void seq_free(seq_t *s) {
  free(s->k_in);
  free(s->v_in);
  free(s->kx);
  free(s->vx);
  free(s->kq);
  free(s->vq);
}

static void append_span(cache_t *c, int seq, const seq_t *s, int64_t from, int64_t cnt) {
  const size_t row = (size_t)c->L.n_head_kv * c->L.in_row_bytes;
  qgen_ref_append(&c->L, &c->m, seq, cnt, s->k_in + (size_t)from * row, s->v_in + (size_t)from * row);
}

/* A query: in bytes and as exact floats. kind 0 gaussian; 1 with zeros (every other
   channel, and all of head 1); 2 all negative; 3 a mix of huge and tiny magnitudes. */
static void query_make(const qgen_layout *L, int kind, uint8_t *q_in, float *qf) {
  const int n = L->n_head * L->head_dim;
  for (int i = 0; i < n; i++) {
    double v = rnd_normal();
    if (kind == 1 && (i % 2 == 0 || i / L->head_dim == 1)) v = 0.0;
    if (kind == 2) v = -fabs(v) - 0.001;
    if (kind == 3) v *= rnd32() & 1 ? 300.0 : 1e-3;
    qf[i] = (float)v;
  }
  tr(L->in_type)->from_f32(qf, q_in, n);
  tr(L->in_type)->to_f32(q_in, qf, n);
}

/* ---- the independent oracles --------------------------------------------------------- */

/* Naive attention: for every query head, every token from first on of the sequence whose
   page is in the head's KV-head mask (mask == NULL: all), online softmax in double over the
   dequantized input rows; sinks (NULL: none) start each head's softmax with one term of
   that logit and no value. */
static void naive_attend_from(const qgen_layout *L, const seq_t *s, int64_t first, const float *sinks, const float *qf,
                              const uint8_t *mask, int64_t n_pages, double *out) {
  const int D = L->head_dim, Hkv = L->n_head_kv;
  double *acc = xmalloc((size_t)D * sizeof *acc);
  for (int hq = 0; hq < L->n_head; hq++) {
    const int h = hq / L->group;
    double m = sinks ? sinks[hq] : -INFINITY, l = sinks ? 1.0 : 0.0;
    for (int d = 0; d < D; d++) acc[d] = 0.0;
    for (int64_t t = first; t < s->len; t++) {
      if (mask && !mask[(size_t)h * n_pages + t / L->block]) continue;
      const float *k = s->kq + ((size_t)t * Hkv + h) * D, *v = s->vq + ((size_t)t * Hkv + h) * D;
      const float *q = qf + (size_t)hq * D;
      double dot = 0.0;
      for (int d = 0; d < D; d++) dot += (double)q[d] * (double)k[d];
      const double sc = L->scale * dot;
      if (sc > m) { /* new running max: rescale what we have */
        const double r = exp(m - sc);
        l *= r;
        for (int d = 0; d < D; d++) acc[d] *= r;
        m = sc;
      }
      const double w = exp(sc - m);
      l += w;
      for (int d = 0; d < D; d++) acc[d] += w * (double)v[d];
    }
    for (int d = 0; d < D; d++) out[(size_t)hq * D + d] = l > 0 ? acc[d] / l : 0.0;
  }
  free(acc);
}

static void naive_attend(const qgen_layout *L, const seq_t *s, const float *qf, const uint8_t *mask, int64_t n_pages,
                         double *out) {
  naive_attend_from(L, s, 0, NULL, qf, mask, n_pages, out);
}

static double rel_err(const double *a, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  if (isnan(num)) return INFINITY;
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* f16 value of a bound, as a double. */
static double hv(uint16_t h) { return qgen_f16_to_f32(h); }

/* Stored bounds == rd(min) / ru(max) over each page's pre-quantization keys (values). */
static int64_t bounds_mismatch(const cache_t *c, int seq, const seq_t *s) {
  const qgen_layout *L = &c->L;
  const int D = L->head_dim, Hkv = L->n_head_kv, B = L->block;
  int64_t bad = 0;
  for (int64_t p = 0; p < qgen_pages_of(s->len, B); p++) {
    const int32_t phys = c->m.page_table[(int64_t)seq * c->m.pages_per_seq + p];
    for (int h = 0; h < Hkv; h++) {
      const uint16_t *bnd = c->m.bounds + ((size_t)phys * Hkv + h) * 2 * D;
      for (int d = 0; d < D; d++) {
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t t = p * B; t < s->len && t < (p + 1) * B; t++) {
          const float x = s->kx[((size_t)t * Hkv + h) * D + d];
          mn = fminf(mn, x);
          mx = fmaxf(mx, x);
        }
        if (hv(bnd[d]) != hv(qgen_f32_to_f16_rd(mn)) || hv(bnd[D + d]) != hv(qgen_f32_to_f16_ru(mx)) ||
            !(hv(bnd[d]) <= mn) || !(mx <= hv(bnd[D + d])))
          bad++;
      }
    }
  }
  return bad;
}

/* Rows at the address layout.h gives for (page_table[seq][t / B], h, t % B) == the
   k_type / v_type encoding of the input row; and qgen_ref_row == the dequantized row. */
static int64_t rows_mismatch(const cache_t *c, int seq, const seq_t *s) {
  const qgen_layout *L = &c->L;
  const int D = L->head_dim, Hkv = L->n_head_kv, B = L->block;
  uint8_t *tmp = xmalloc(qgen_type_row_bytes(F32, D));
  double *row = xmalloc((size_t)D * sizeof *row);
  int64_t bad = 0;
  for (int64_t t = 0; t < s->len; t++) {
    const size_t phys = (size_t)c->m.page_table[(int64_t)seq * c->m.pages_per_seq + t / B];
    for (int h = 0; h < Hkv; h++) {
      const size_t r = (size_t)t * Hkv + h, slot = (size_t)h * B + (size_t)(t % B);
      tr(L->k_type)->from_f32(s->kx + r * D, tmp, D);
      bad += memcmp(tmp, c->m.k + phys * L->k_page_bytes + slot * L->k_row_bytes, L->k_row_bytes) != 0;
      tr(L->v_type)->from_f32(s->vx + r * D, tmp, D);
      bad += memcmp(tmp, c->m.v + phys * L->v_page_bytes + slot * L->v_row_bytes, L->v_row_bytes) != 0;
      if (t % 17 == 0 || t == s->len - 1) {
        qgen_ref_row(L, &c->m, 0, seq, t, h, row);
        for (int d = 0; d < D; d++) bad += row[d] != (double)s->kq[r * D + d];
        qgen_ref_row(L, &c->m, 1, seq, t, h, row);
        for (int d = 0; d < D; d++) bad += row[d] != (double)s->vq[r * D + d];
      }
    }
  }
  free(tmp);
  free(row);
  return bad;
}

/* Quest bound: score >= the true max over the page's tokens and the group's heads of q.k
   from the pre-quantization keys. Both sums run over d in increasing order in double:
   products of an f32 and an f32/f16 are exact in double and a sequential sum is monotone
   in its terms, so the comparison is exact (no tolerance). Returns the number of pages
   (x heads) that violate it; *nan counts NaN scores (there should be none). */
static int64_t bound_violations(const cache_t *c, int seq, const seq_t *s, const uint8_t *q_in,
                                const float *qf, int64_t *nan, double *min_slack) {
  const qgen_layout *L = &c->L;
  const int D = L->head_dim, Hkv = L->n_head_kv, B = L->block, G = L->group;
  const int64_t n = qgen_pages_of(s->len, B);
  double *scores = xmalloc((size_t)(Hkv * n + 1) * sizeof *scores);
  qgen_ref_estimate(L, &c->m, seq, q_in, scores);
  int64_t bad = 0;
  for (int h = 0; h < Hkv; h++)
    for (int64_t p = 0; p < n; p++) {
      double best = -INFINITY;
      for (int64_t t = p * B; t < s->len && t < (p + 1) * B; t++)
        for (int g = 0; g < G; g++) {
          const float *q = qf + (size_t)(h * G + g) * D, *k = s->kx + ((size_t)t * Hkv + h) * D;
          double dot = 0.0;
          for (int d = 0; d < D; d++) dot += (double)q[d] * (double)k[d];
          if (dot > best) best = dot;
        }
      const double sc = scores[(size_t)h * n + p];
      if (isnan(sc)) (*nan)++;
      if (!(sc >= best)) bad++;
      else if (isfinite(sc) && isfinite(best)) {
        const double slack = (sc - best) / (fabs(best) + 1e-300);
        if (slack < *min_slack) *min_slack = slack;
      }
    }
  free(scores);
  return bad;
}

/* The layout.h selection rules, restated: returns 1 when `list` (count entries) is exactly
   the list the rules give for these scores; *why says what failed. */
static int better(const double *sc, int64_t i, int64_t j) { /* page i ranks above page j */
  const int ni = isnan(sc[i]), nj = isnan(sc[j]);
  if (ni != nj) return ni;
  if (!ni && sc[i] != sc[j]) return sc[i] > sc[j];
  return i < j;
}
static int list_is_right(const qgen_budget *b, int64_t len, int B, const double *sc,
                         const int32_t *list, int64_t count, const char **why) {
  const int64_t n = (len + B - 1) / B;
  uint8_t *forced = xcalloc((size_t)(n + 1), 1), *in = xcalloc((size_t)(n + 1), 1);
  int64_t nf = 0, ok = 1;
  for (int64_t p = 0; p < n; p++) {
    const int64_t first = p * B, last = (p + 1) * B < len ? (p + 1) * B - 1 : len - 1;
    forced[p] = first < b->sink || last >= len - b->recent || p == n - 1;
    nf += forced[p];
  }
  int64_t k = n;
  if (b->mode == QGEN_BUDGET_COVERAGE) k = (int64_t)ceil(b->coverage * (double)n);
  if (b->mode == QGEN_BUDGET_TOKENS) k = (b->tokens + B - 1) / B;
  int64_t want = k > nf ? k : nf;
  if (want > n) want = n;
  *why = "";
  if (count != want) ok = 0, *why = "count != min(n, max(K, |forced|))";
  for (int64_t i = 0; ok && i < count; i++) {
    if (list[i] < 0 || list[i] >= n) ok = 0, *why = "page out of range";
    else if (i > 0 && list[i] <= list[i - 1]) ok = 0, *why = "not strictly ascending";
    else in[list[i]] = 1;
  }
  for (int64_t p = 0; ok && p < n; p++)
    if (forced[p] && !in[p]) ok = 0, *why = "a forced page is missing";
  for (int64_t i = 0; ok && i < n; i++) /* every chosen page outranks every left-out one */
    for (int64_t j = 0; ok && j < n && in[i] && !forced[i]; j++)
      if (!in[j] && !better(sc, i, j)) ok = 0, *why = "a better page was left out";
  free(forced);
  free(in);
  return (int)ok;
}

/* ---- 2 + 3 + 1 (random data): one layout, several sequences in one cache ------------- */

static void test_config(const shape_t *sh, qgen_type kt, qgen_type vt, qgen_type it, qgen_type ot) {
  qgen_layout L;
  layout_make(&L, sh, kt, vt, it, ot, 1);
  const char *nm = layout_name(&L);
  const int D = L.head_dim, H = L.n_head, Hkv = L.n_head_kv, B = L.block;
  int64_t lens[] = {1, 63, 64, 65, 1000, 2500, B - 1, B, B + 1, 2 * B + 3};
  const int S = (int)(sizeof lens / sizeof lens[0]);
  int64_t pps = 0;
  for (int i = 0; i < S; i++) pps = qgen_pages_of(lens[i], B) > pps ? qgen_pages_of(lens[i], B) : pps;
  pps += 1;

  cache_t A, T;
  cache_init(&A, &L, S, pps, lens, 5);
  cache_twin(&T, &A);
  seq_t *sq = xmalloc((size_t)S * sizeof *sq);
  for (int i = 0; i < S; i++) seq_make(&sq[i], &L, lens[i], DATA_RANDOM);

  /* A: interleaved chunks of random sizes across the sequences; T: token by token, one
     sequence after the other. */
  for (;;) {
    int open = 0, pick = -1;
    for (int i = 0; i < S; i++) open += A.m.seq_len[i] < lens[i];
    if (!open) break;
    for (int r = (int)rnd_int(0, open - 1), i = 0; i < S; i++)
      if (A.m.seq_len[i] < lens[i] && r-- == 0) pick = i;
    const int64_t left = lens[pick] - A.m.seq_len[pick];
    int64_t cnt = rnd32() % 3 == 0 ? 1 : rnd_int(1, 300);
    if (cnt > left) cnt = left;
    append_span(&A, pick, &sq[pick], A.m.seq_len[pick], cnt);
  }
  for (int i = 0; i < S; i++)
    for (int64_t t = 0; t < lens[i]; t++) append_span(&T, i, &sq[i], t, 1);
  check(cache_same(&A, &T), "%s %d sequences, interleaved random chunks == token by token "
        "(K, V, bounds, lengths byte-identical)", nm, S);
  int64_t bad_rows = 0, bad_bounds = 0;
  for (int i = 0; i < S; i++) {
    bad_rows += rows_mismatch(&A, i, &sq[i]);
    bad_bounds += bounds_mismatch(&A, i, &sq[i]);
  }
  check(bad_rows == 0 && spare_touched(&A) == 0,
        "%s rows at page_table[seq][t/B] hold the encoded inputs; spare pages untouched (%lld bad)",
        nm, (long long)bad_rows);
  check(bad_bounds == 0, "%s bounds == (rd(min), ru(max)) of each page's input keys (%lld bad)", nm,
        (long long)bad_bounds);

  uint8_t *q_in = xmalloc(L.q_bytes), *out = xmalloc(L.out_bytes), *out2 = xmalloc(L.out_bytes),
          *outc = xmalloc(L.out_bytes);
  float *qf = xmalloc((size_t)H * D * sizeof *qf), *tmpf = xmalloc((size_t)D * sizeof *tmpf);
  double *dense = xmalloc((size_t)H * D * sizeof *dense), *o2 = xmalloc((size_t)H * D * sizeof *o2),
         *naive = xmalloc((size_t)H * D * sizeof *naive);
  int32_t *lists = xmalloc((size_t)Hkv * pps * sizeof *lists);
  int64_t counts[64];
  uint8_t *mask = xmalloc((size_t)Hkv * pps);
  double worst_dense = 0, worst_sparse = 0, slack = INFINITY;
  int64_t viol = 0, nans = 0, bad_conv = 0, bad_null = 0, bad_full = 0, bad_lists = 0,
          n_sparse_lists = 0, n_proper = 0;
  const char *why = "", *first_why = "";

  for (int i = 0; i < S; i++) {
    const seq_t *s = &sq[i];
    const int64_t n = qgen_pages_of(s->len, B);
    query_make(&L, (int)(rnd32() % 4), q_in, qf);

    /* 1. Quest bound on random data */
    viol += bound_violations(&A, i, s, q_in, qf, &nans, &slack);

    /* 3. dense == naive */
    qgen_budget dense_b = {QGEN_BUDGET_DENSE, 0, 0, 0, 0};
    qgen_ref_step(&L, &A.m, i, q_in, &dense_b, out, dense, lists, counts);
    naive_attend(&L, s, qf, NULL, n, naive);
    double e = rel_err(dense, naive, (size_t)H * D);
    if (e > worst_dense || isnan(e)) worst_dense = isnan(e) ? INFINITY : e;
    for (int hq = 0; hq < H; hq++) { /* out is out_f64 converted: double -> float -> out_type */
      for (int d = 0; d < D; d++) tmpf[d] = (float)dense[(size_t)hq * D + d];
      const size_t rb = L.out_bytes / (size_t)H;
      tr(ot)->from_f32(tmpf, outc + hq * rb, D);
    }
    bad_conv += memcmp(out, outc, L.out_bytes) != 0;
    /* attend(lists = NULL) is the same computation */
    qgen_ref_attend(&L, &A.m, i, q_in, NULL, NULL, out2, o2);
    bad_null += memcmp(o2, dense, (size_t)H * D * sizeof *o2) != 0 || memcmp(out, out2, L.out_bytes) != 0;
    for (int h = 0; h < Hkv; h++) {
      bad_null += counts[h] != n;
      for (int64_t p = 0; p < n && counts[h] == n; p++) bad_null += lists[(size_t)h * pps + p] != p;
    }

    /* 2. budgets that cover everything == dense, bit for bit */
    const qgen_budget full[] = {
        {QGEN_BUDGET_COVERAGE, 1.0, 0, 0, 0},
        {QGEN_BUDGET_TOKENS, 0, s->len, 0, 0},
        {QGEN_BUDGET_TOKENS, 0, s->len + 3 * B + 1, 0, 0},
        {QGEN_BUDGET_COVERAGE, 0.01, 0, s->len, 0},
        {QGEN_BUDGET_TOKENS, 0, 1, 0, s->len},
        {QGEN_BUDGET_COVERAGE, 0.01, 0, B * ((n + 1) / 2), s->len - B * ((n + 1) / 2)},
    };
    for (size_t j = (size_t)i % 2; j < sizeof full / sizeof full[0]; j += 2) { /* half each */
      memset(out2, 0xee, L.out_bytes);
      qgen_ref_step(&L, &A.m, i, q_in, &full[j], out2, o2, lists, counts);
      int same = memcmp(o2, dense, (size_t)H * D * sizeof *o2) == 0 && memcmp(out, out2, L.out_bytes) == 0;
      for (int h = 0; h < Hkv; h++) {
        same &= counts[h] == n;
        for (int64_t p = 0; p < n && counts[h] == n; p++) same &= lists[(size_t)h * pps + p] == p;
      }
      bad_full += !same;
    }

    /* 3b. sparse budgets: each head's list obeys the rules and the output is naive
       attention restricted to it */
    const qgen_budget sparse[] = {
        {QGEN_BUDGET_COVERAGE, 0.3, 0, 1, B},
        {QGEN_BUDGET_TOKENS, 0, 2 * B, 0, 0},
        {QGEN_BUDGET_COVERAGE, 0.125, 0, 3, 1},
    };
    double *scores = xmalloc((size_t)(Hkv * n + 1) * sizeof *scores);
    qgen_ref_estimate(&L, &A.m, i, q_in, scores);
    for (size_t j = 0; j < sizeof sparse / sizeof sparse[0]; j++) {
      qgen_ref_step(&L, &A.m, i, q_in, &sparse[j], out2, o2, lists, counts);
      memset(mask, 0, (size_t)Hkv * n);
      for (int h = 0; h < Hkv; h++) {
        n_sparse_lists++;
        n_proper += counts[h] < n;
        if (!list_is_right(&sparse[j], s->len, B, scores + (size_t)h * n, lists + (size_t)h * pps,
                           counts[h], &why) && bad_lists++ == 0)
          first_why = why;
        for (int64_t k = 0; k < counts[h]; k++) mask[(size_t)h * n + lists[(size_t)h * pps + k]] = 1;
      }
      naive_attend(&L, s, qf, mask, n, naive);
      e = rel_err(o2, naive, (size_t)H * D);
      if (e > worst_sparse || isnan(e)) worst_sparse = isnan(e) ? INFINITY : e;
    }
    free(scores);
  }
  check(viol == 0 && nans == 0, "%s Quest score >= true max q.k of the pre-quantization keys, "
        "every page x kv head (%lld violations, %lld NaN; min relative slack %.3g)", nm,
        (long long)viol, (long long)nans, slack);
  check(worst_dense <= 1e-12, "%s dense attend vs naive fp64 attention: worst rel err %.3g", nm, worst_dense);
  check(bad_conv == 0 && bad_null == 0, "%s out == (out_type)(float)out_f64; attend(lists=NULL) "
        "bit-identical to the dense step, which lists every page", nm);
  check(bad_full == 0, "%s coverage 1 / tokens >= len / sink >= len / recent >= len / sink+recent "
        "cover all: bit-identical to dense, every page listed", nm);
  check(bad_lists == 0, "%s sparse lists follow the selection rules (%lld bad of %lld, %lld proper "
        "subsets) %s", nm, (long long)bad_lists, (long long)n_sparse_lists, (long long)n_proper, first_why);
  check(worst_sparse <= 1e-12, "%s sparse attend vs naive attention over the same pages: worst "
        "rel err %.3g", nm, worst_sparse);

  for (int i = 0; i < S; i++) seq_free(&sq[i]);
  free(sq);
  free(q_in);
  free(out);
  free(out2);
  free(outc);
  free(qf);
  free(tmpf);
  free(dense);
  free(o2);
  free(naive);
  free(lists);
  free(mask);
  cache_free(&A);
  cache_free(&T);
}

/* ---- 1 (adversarial data) ------------------------------------------------------------ */

static void test_adversarial(const shape_t *sh, qgen_type it, qgen_type kt, qgen_type vt) {
  qgen_layout L;
  layout_make(&L, sh, kt, vt, it, F32, 1);
  const char *nm = layout_name(&L);
  const int D = L.head_dim, H = L.n_head, B = L.block;
  const int64_t lens[] = {8 * B + 5, 1, B + 1};
  const int S = 3;
  cache_t c;
  cache_init(&c, &L, S, 9, lens, 2);
  seq_t sq[3];
  for (int i = 0; i < S; i++) {
    seq_make(&sq[i], &L, lens[i], DATA_ADVERSARIAL);
    for (int64_t t = 0; t < lens[i];) { /* random chunks */
      int64_t cnt = rnd_int(1, 2 * B);
      if (cnt > lens[i] - t) cnt = lens[i] - t;
      append_span(&c, i, &sq[i], t, cnt);
      t += cnt;
    }
  }
  uint8_t *q_in = xmalloc(L.q_bytes);
  float *qf = xmalloc((size_t)H * D * sizeof *qf);
  double *o = xmalloc((size_t)H * D * sizeof *o), *naive = xmalloc((size_t)H * D * sizeof *naive);
  int64_t viol = 0, nans = 0, bad_bounds = 0;
  double slack = INFINITY, worst = 0;
  for (int i = 0; i < S; i++) {
    bad_bounds += bounds_mismatch(&c, i, &sq[i]);
    for (int kind = 0; kind < 4; kind++) {
      query_make(&L, kind, q_in, qf);
      viol += bound_violations(&c, i, &sq[i], q_in, qf, &nans, &slack);
      if (kind == 0) {
        qgen_ref_attend(&L, &c.m, i, q_in, NULL, NULL, NULL, o);
        naive_attend(&L, &sq[i], qf, NULL, qgen_pages_of(lens[i], B), naive);
        double e = rel_err(o, naive, (size_t)H * D);
        worst = isnan(e) || e > worst ? (isnan(e) ? INFINITY : e) : worst;
      }
    }
  }
  check(bad_bounds == 0, "%s adversarial keys: bounds == (rd(min), ru(max)) exactly (%lld bad)", nm,
        (long long)bad_bounds);
  check(viol == 0 && nans == 0, "%s adversarial keys x {gaussian, zeros, negative, huge/tiny} "
        "queries: score >= true max (%lld violations, %lld NaN scores)", nm, (long long)viol,
        (long long)nans);
  check(worst <= 1e-12, "%s adversarial keys: dense attend vs naive rel err %.3g", nm, worst);
  for (int i = 0; i < S; i++) seq_free(&sq[i]);
  free(q_in);
  free(qf);
  free(o);
  free(naive);
  cache_free(&c);
}

/* Hand-made bound cases where outward rounding decides the answer (f32 input, one token). */
static void test_bound_rounding(void) {
  const shape_t sh = {32, 1, 1, 32};
  qgen_layout L;
  qgen_layout_init(&L, sh.D, sh.H, sh.Hkv, sh.B, F16, F16, F32, F32, 1.0, 1);
  cache_t c;
  cache_init(&c, &L, 1, 2, NULL, 0);
  float k[32] = {0}, v[32] = {0}, q[32] = {0};
  /* k0 between two halves; k1 an exact RNE tie; k2 past 65504; k3 tiny positive; k4 tiny
     negative; k5 an exact half */
  k[0] = 0x1.001p0f;
  k[1] = 0x1.002p0f;
  k[2] = 65519.99f;
  k[3] = 1e-9f;
  k[4] = -1e-9f;
  k[5] = -2.5f;
  k[7] = -65519.99f; /* kmin = -inf: a q of 0 there must not make 0 * -inf */
  k[8] = NAN;        /* ignored (PTX min/max semantics): empty bounds +inf / -inf */
  qgen_ref_append(&L, &c.m, 0, 1, k, v);
  const uint16_t *b = c.m.bounds + (size_t)c.m.page_table[0] * 2 * 32;
  check(b[0] == 0x3c00 && b[32] == 0x3c01 && b[1] == 0x3c00 && b[33] == 0x3c01 && b[2] == 0x7bff &&
            b[34] == 0x7c00 && b[3] == 0x0000 && b[35] == 0x0001 && b[4] == 0x8001 && b[36] == 0x8000 &&
            b[5] == 0xc100 && b[37] == 0xc100 && b[6] == 0x0000 && b[38] == 0x0000 &&
            b[7] == 0xfc00 && b[39] == 0xfbff && b[8] == 0x7c00 && b[40] == 0xfc00,
        "outward rounding of single-token bounds: kmin/kmax = %04x/%04x %04x/%04x %04x/%04x "
        "%04x/%04x %04x/%04x %04x/%04x %04x/%04x; a NaN key: %04x/%04x", b[0], b[32], b[1], b[33],
        b[2], b[34], b[3], b[35], b[4], b[36], b[5], b[37], b[7], b[39], b[8], b[40]);
  /* q = +1 on k0 and 0 elsewhere (also where kmin = -inf or kmax = +inf):
     score = kmax = 1 + 2^-10 > k0 (RNE would have given 1 < k0) */
  double sc;
  q[0] = 1.0f;
  qgen_ref_estimate(&L, &c.m, 0, q, &sc);
  check(sc == 0x1.004p0 && sc >= 0x1.001p0, "q = e0: score %a (kmax of 1+2^-12) >= the key", sc);
  /* q = +1 on k2 (past 65504) and 0 on every other channel, including ones whose bounds
     are 0 here: the zero case never multiplies 0 by a bound */
  q[0] = 0.0f;
  q[2] = 1.0f;
  qgen_ref_estimate(&L, &c.m, 0, q, &sc);
  check(isinf(sc) && sc > 0, "q = e2 over a key of 65519.99: score %g (kmax rounds up to inf)", sc);
  q[2] = -1.0f;
  qgen_ref_estimate(&L, &c.m, 0, q, &sc);
  check(sc == -65504.0, "q = -e2: score %g (kmin rounds down to 65504)", sc);
  /* a second token merges: kmin of channel 0 goes down, the inf upper bound stays */
  k[0] = 0x1.ffep-1f; /* just below 1: rd -> 0x3bff */
  k[2] = 1.0f;
  k[8] = 2.0f;
  qgen_ref_append(&L, &c.m, 0, 1, k, v);
  check(b[0] == 0x3bff && b[32] == 0x3c01 && b[2] == 0x3c00 && b[34] == 0x7c00 && b[8] == 0x4000 &&
            b[40] == 0x4000,
        "merge: kmin/kmax of ch0 %04x/%04x, ch2 %04x/%04x, ch8 (NaN, then 2) %04x/%04x", b[0], b[32],
        b[2], b[34], b[8], b[40]);
  cache_free(&c);
}

/* Signed zeros: bounds use the total order -0 < +0, so which zero a page's bound holds
   depends only on the set of keys, never on the order or chunking of the appends. Channels
   take values from {+0, -0, 1e-9, 2^-26} (min decides between 0x8000 and 0x0000) or from
   {-0, +0, -1e-9, -2^-26} (max decides). */
static void test_signed_zeros(void) {
  const shape_t sh = {32, 1, 1, 16};
  qgen_layout L;
  qgen_layout_init(&L, sh.D, sh.H, sh.Hkv, sh.B, F16, F16, F32, F32, 1.0, 1);
  static const float pos[] = {0.0f, -0.0f, 1e-9f, 0x1p-26f}, neg[] = {-0.0f, 0.0f, -1e-9f, -0x1p-26f};
  int same = 1, rule = 1;
  for (int trial = 0; trial < 300; trial++) {
    const int len = (int)rnd_int(1, 40);
    float k[40 * 32], v[40 * 32] = {0};
    for (int t = 0; t < len; t++)
      for (int d = 0; d < 32; d++) k[t * 32 + d] = d < 16 ? pos[rnd32() % 4] : neg[rnd32() % 4];
    cache_t c[3];
    cache_init(&c[0], &L, 1, 3, NULL, 0);
    cache_twin(&c[1], &c[0]);
    cache_twin(&c[2], &c[0]);
    for (int t = 0; t < len; t++) qgen_ref_append(&L, &c[0].m, 0, 1, k + t * 32, v);
    qgen_ref_append(&L, &c[1].m, 0, len, k, v);
    for (int t = 0; t < len;) {
      int cnt = (int)rnd_int(1, 5);
      if (cnt > len - t) cnt = len - t;
      qgen_ref_append(&L, &c[2].m, 0, cnt, k + t * 32, v);
      t += cnt;
    }
    same &= cache_same(&c[0], &c[1]) && cache_same(&c[0], &c[2]);
    for (int p = 0; p * 16 < len; p++) {
      const uint16_t *b = c[0].m.bounds + (size_t)c[0].m.page_table[p] * 64;
      for (int d = 0; d < 32; d++) {
        int has_neg0 = 0, has_pos0 = 0;
        for (int t = p * 16; t < len && t < p * 16 + 16; t++) {
          const float x = k[t * 32 + d];
          has_neg0 |= x == 0 && signbit(x);
          has_pos0 |= x == 0 && !signbit(x);
        }
        if (d < 16) rule &= b[d] == (has_neg0 ? 0x8000 : 0x0000);  /* kmin */
        else rule &= b[32 + d] == (has_pos0 ? 0x0000 : 0x8000);     /* kmax */
      }
    }
    for (int j = 0; j < 3; j++) cache_free(&c[j]);
  }
  check(same, "signed zeros: token by token == one call == random chunks, byte for byte");
  check(rule, "signed zeros: kmin is -0 iff a key is -0; kmax is +0 iff a key is +0 (order -0 < +0)");
}

/* ---- 4. chunking never changes a byte ----------------------------------------------- */

static void test_chunking(const shape_t *sh, qgen_type it, int64_t len, int64_t big, int all_pairs) {
  static const qgen_type kv[] = {F16, BF16, Q8_0, Q4_0, Q5_0};
  int n_pairs = 0, n_same = 0;
  char fails[512] = "";
  for (int a = 0; a < 5; a++)
    for (int b = 0; b < 5; b++) {
      if (!all_pairs && (a + 2 * b) % 5 != 0) continue; /* 5 pairs: each type once as K, once as V */
      qgen_layout L;
      layout_make(&L, sh, kv[a], kv[b], it, F32, 1);
      cache_t T, C[3];
      cache_init(&T, &L, 2, qgen_pages_of(len, sh->B) + 1, NULL, 3);
      for (int j = 0; j < 3; j++) cache_twin(&C[j], &T);
      seq_t s, s2;
      seq_make(&s, &L, len, rnd32() & 1 ? DATA_ADVERSARIAL : DATA_RANDOM);
      seq_make(&s2, &L, 100, DATA_RANDOM);
      for (int64_t t = 0; t < len; t++) append_span(&T, 0, &s, t, 1);
      /* chunk patterns: 1, 7, 64, big then random sizes; all 7; one call */
      for (int j = 0; j < 3; j++) {
        const int64_t lead[] = {1, 7, 64, big};
        int64_t t = 0;
        for (int r = 0; t < len; r++) {
          int64_t cnt = j == 0 ? (r < 4 ? lead[r] : rnd_int(1, 300)) : j == 1 ? 7 : len;
          if (cnt > len - t) cnt = len - t;
          append_span(&C[j], 0, &s, t, cnt);
          t += cnt;
          /* the other sequence grows in between: it must not disturb this one */
          if (C[j].m.seq_len[1] < 100 && r % 3 == 0) append_span(&C[j], 1, &s2, C[j].m.seq_len[1], 1);
        }
        while (C[j].m.seq_len[1] < 100) append_span(&C[j], 1, &s2, C[j].m.seq_len[1], 1);
      }
      for (int64_t t = 0; t < 100; t++) append_span(&T, 1, &s2, t, 1);
      int same = 1;
      for (int j = 0; j < 3; j++) same &= cache_same(&T, &C[j]);
      same &= spare_touched(&T) == 0;
      n_pairs++;
      n_same += same;
      if (!same && strlen(fails) < 400)
        snprintf(fails + strlen(fails), sizeof fails - strlen(fails), " %s/%s", tname(kv[a]), tname(kv[b]));
      seq_free(&s);
      seq_free(&s2);
      cache_free(&T);
      for (int j = 0; j < 3; j++) cache_free(&C[j]);
    }
  check(n_same == n_pairs, "[D%d %d/%d B%d in=%s] %lld tokens appended in chunks (1,7,64,%lld,random "
        "| all 7 | one call) == token by token, byte for byte: %d of %d K/V type pairs%s%s",
        sh->D, sh->H, sh->Hkv, sh->B, tname(it), (long long)len, (long long)big, n_same, n_pairs,
        fails[0] ? ", differ:" : "", fails);
}

/* ---- 5. GQA: one list per KV head --------------------------------------------------- */

static void test_gqa(const shape_t *sh) {
  qgen_layout L;
  layout_make(&L, sh, F16, F16, F32, F32, 1);
  const int D = L.head_dim, H = L.n_head, Hkv = L.n_head_kv, B = L.block, G = L.group;
  const int64_t n = 4 * G + 6, len = n * B - B / 2;
  cache_t c;
  cache_init(&c, &L, 1, n, NULL, 0);
  seq_t s;
  seq_make(&s, &L, len, DATA_RANDOM);
  /* small keys everywhere; page want[h][g] carries +5 on channel g: the page that query
     head g of KV head h wants (each head a different page, none of them forced) */
  int64_t want[8][8];
  for (size_t i = 0; i < (size_t)len * Hkv * D; i++) s.kx[i] = (float)(0.1 * rnd_normal());
  for (int h = 0; h < Hkv; h++)
    for (int g = 0; g < G; g++) {
      want[h][g] = 1 + (int64_t)((g * 3 + h) % (n - 2)); /* pages 1 .. n-2 */
      for (int k = 0; k < g; k++)
        if (want[h][k] == want[h][g]) want[h][g] = (want[h][g] % (n - 2)) + 1, k = -1;
      for (int64_t t = want[h][g] * B; t < (want[h][g] + 1) * B; t++) s.kx[((size_t)t * Hkv + h) * D + g] = 5.0f;
    }
  /* re-encode the edited keys (input f32: exact) and their dequantized copies */
  for (int64_t r = 0; r < len * Hkv; r++) {
    tr(F32)->from_f32(s.kx + (size_t)r * D, s.k_in + (size_t)r * L.in_row_bytes, D);
    uint8_t tmp[512];
    tr(F16)->from_f32(s.kx + (size_t)r * D, tmp, D);
    tr(F16)->to_f32(tmp, s.kq + (size_t)r * D, D);
  }
  append_span(&c, 0, &s, 0, len);
  /* query head g: +3 on channel g, tiny elsewhere */
  float *q = xmalloc((size_t)H * D * sizeof *q), *q1 = xmalloc((size_t)H * D * sizeof *q1);
  for (int hq = 0; hq < H; hq++)
    for (int d = 0; d < D; d++) q[(size_t)hq * D + d] = d == hq % G ? 3.0f : (float)(0.01 * rnd_normal());
  /* K = G + 1 pages, forced = {n-1}: G free picks, one per query head if it is a union */
  const qgen_budget b = {QGEN_BUDGET_TOKENS, 0, (int64_t)(G + 1) * B, 0, 0};
  int32_t *lists = xmalloc((size_t)Hkv * n * sizeof *lists);
  int64_t counts[64];
  double *o = xmalloc((size_t)H * D * sizeof *o), *naive = xmalloc((size_t)H * D * sizeof *naive);
  qgen_ref_step(&L, &c.m, 0, q, &b, NULL, o, lists, counts);

  int all_in = 1, cnt_ok = 1;
  for (int h = 0; h < Hkv; h++) {
    cnt_ok &= counts[h] == G + 1;
    for (int g = 0; g < G; g++) {
      int found = 0;
      for (int64_t k = 0; k < counts[h]; k++) found |= lists[(size_t)h * n + k] == want[h][g];
      all_in &= found;
    }
  }
  check(cnt_ok && all_in, "[D%d %d/%d group %d] GQA: each KV head's list holds the page every one "
        "of its %d query heads wants (union by max), count %lld", D, H, Hkv, G, G, (long long)counts[0]);

  /* every query head of a group attends exactly its KV head's list */
  uint8_t *mask = xcalloc((size_t)Hkv * n, 1);
  for (int h = 0; h < Hkv; h++)
    for (int64_t k = 0; k < counts[h]; k++) mask[(size_t)h * n + lists[(size_t)h * n + k]] = 1;
  naive_attend(&L, &s, q, mask, n, naive);
  const double e = rel_err(o, naive, (size_t)H * D);
  check(e <= 1e-12, "[D%d %d/%d] GQA: every head's output == naive attention over the shared "
        "list (rel err %.3g)", D, H, Hkv, e);

  /* and it is not a per-head selection: head g alone (its q copied over the group) would
     pick another list, and attention over that list gives a different answer */
  int differs = 1;
  int32_t *l1 = xmalloc((size_t)Hkv * n * sizeof *l1);
  int64_t c1[64];
  for (int g = 0; g < G && G > 1; g++) {
    for (int hq = 0; hq < H; hq++)
      memcpy(q1 + (size_t)hq * D, q + (size_t)((hq / G) * G + g) * D, (size_t)D * sizeof *q);
    double *o1 = xmalloc((size_t)H * D * sizeof *o1);
    qgen_ref_step(&L, &c.m, 0, q1, &b, NULL, o1, l1, c1);
    memset(mask, 0, (size_t)Hkv * n);
    for (int h = 0; h < Hkv; h++)
      for (int64_t k = 0; k < c1[h]; k++) mask[(size_t)h * n + l1[(size_t)h * n + k]] = 1;
    naive_attend(&L, &s, q, mask, n, naive); /* the real q over head g's own list */
    int lists_same = 1;
    for (int h = 0; h < Hkv; h++)
      lists_same &= c1[h] == counts[h] && memcmp(l1 + (size_t)h * n, lists + (size_t)h * n, (size_t)counts[h] * 4) == 0;
    differs &= !lists_same && rel_err(o, naive, (size_t)H * D) > 1e-6;
    free(o1);
  }
  if (G > 1)
    check(differs, "[D%d %d/%d] GQA: a per-query-head selection would give other lists and another "
          "output", D, H, Hkv);
  free(q);
  free(q1);
  free(lists);
  free(l1);
  free(o);
  free(naive);
  free(mask);
  seq_free(&s);
  cache_free(&c);
}

/* ---- 6. selection rules ------------------------------------------------------------- */

static void test_select(void) {
  int32_t list[4096];
  double sc[4096];
  const char *why = "";

  /* coverage rounding: ceil(coverage * n) in double */
  static const struct { double cov; int64_t n, k; } cov[] = {
      {0.25, 10, 3}, {0.5, 4, 2}, {1.0 / 3.0, 3, 1}, {0.3, 10, 3}, {0.01, 7, 1},
      {0.07, 100, 8}, /* 0.07 * 100 = 7.000000000000001 in double: ceil gives 8 */
      {0.55, 100, 56}, {1.0, 5, 5}, {0.999, 1000, 999}};
  int ok = 1;
  for (size_t i = 0; i < sizeof cov / sizeof cov[0]; i++) {
    qgen_budget b = {QGEN_BUDGET_COVERAGE, cov[i].cov, 0, 0, 0};
    for (int64_t p = 0; p < cov[i].n; p++) sc[p] = (double)p; /* last page best: forced anyway */
    int64_t c = qgen_ref_select(&b, cov[i].n * 16, 16, sc, list);
    if (c != cov[i].k) {
      ok = 0;
      printf("     coverage %.17g of %lld pages: %lld (want %lld)\n", cov[i].cov, (long long)cov[i].n,
             (long long)c, (long long)cov[i].k);
    }
  }
  check(ok, "coverage K = ceil(coverage * n) in double (0.25 of 10 -> 3, 0.07 of 100 -> 8, ...)");

  /* token budgets: ceil(tokens / block) */
  {
    qgen_budget b = {QGEN_BUDGET_TOKENS, 0, 100, 0, 0};
    for (int p = 0; p < 50; p++) sc[p] = 0;
    int64_t c = qgen_ref_select(&b, 50 * 64, 64, sc, list);
    b.tokens = 128;
    int64_t c2 = qgen_ref_select(&b, 50 * 64, 64, sc, list);
    b.tokens = 129;
    int64_t c3 = qgen_ref_select(&b, 50 * 64, 64, sc, list);
    check(c == 2 && c2 == 2 && c3 == 3, "token budget K = ceil(tokens / block): 100, 128, 129 "
          "tokens of block 64 -> %lld, %lld, %lld pages", (long long)c, (long long)c2, (long long)c3);
  }

  /* ties go to the lower page index */
  {
    qgen_budget b = {QGEN_BUDGET_TOKENS, 0, 4 * 32, 0, 0};
    for (int p = 0; p < 20; p++) sc[p] = p == 7 ? 2.0 : 1.0; /* page 7 best, the rest tie */
    int64_t c = qgen_ref_select(&b, 20 * 32, 32, sc, list);
    check(c == 4 && list[0] == 0 && list[1] == 1 && list[2] == 7 && list[3] == 19,
          "equal scores: the lower pages win (list %d %d %d %d, want 0 1 7 19)", list[0], list[1],
          list[2], list[3]);
    for (int p = 0; p < 20; p++) sc[p] = p % 2 ? -0.0 : 0.0; /* -0 == +0: a tie too */
    c = qgen_ref_select(&b, 20 * 32, 32, sc, list);
    check(c == 4 && list[0] == 0 && list[1] == 1 && list[2] == 2 && list[3] == 19,
          "-0 and +0 tie (list %d %d %d %d)", list[0], list[1], list[2], list[3]);
  }

  /* NaN ranks above every number, including +inf; NaNs among themselves by index */
  {
    qgen_budget b = {QGEN_BUDGET_TOKENS, 0, 4 * 32, 0, 0};
    for (int p = 0; p < 20; p++) sc[p] = p;
    sc[3] = INFINITY;
    sc[12] = NAN;
    sc[5] = NAN;
    sc[9] = NAN;
    int64_t c = qgen_ref_select(&b, 20 * 32, 32, sc, list);
    check(c == 4 && list[0] == 5 && list[1] == 9 && list[2] == 12 && list[3] == 19,
          "NaN scores rank first (list %d %d %d %d, want 5 9 12 19)", list[0], list[1], list[2], list[3]);
    sc[5] = sc[9] = sc[12] = 1.0;
    sc[4] = -INFINITY;
    b.tokens = 3 * 32;
    c = qgen_ref_select(&b, 20 * 32, 32, sc, list);
    check(c == 3 && list[0] == 3 && list[1] == 18 && list[2] == 19, "+inf ranks first among "
          "numbers (list %d %d %d)", list[0], list[1], list[2]);
  }

  /* forced pages: sink, recent (counted in tokens), the partial last page */
  {
    /* len 1000, block 64: 16 pages, the last holds tokens 960..999 */
    qgen_budget b = {QGEN_BUDGET_TOKENS, 0, 64, 65, 41};
    for (int p = 0; p < 16; p++) sc[p] = -p;
    int64_t c = qgen_ref_select(&b, 1000, 64, sc, list);
    /* sink 65 tokens -> pages 0, 1; recent 41 tokens -> tokens 959.. -> pages 14, 15 */
    check(c == 4 && list[0] == 0 && list[1] == 1 && list[2] == 14 && list[3] == 15,
          "forced sink/recent/last outnumber K: count = |forced| (list %d %d %d %d, want 0 1 14 15)",
          list[0], list[1], list[2], list[3]);
    b.recent = 40; /* exactly the last page's 40 tokens: page 15 only */
    b.sink = 64;   /* exactly page 0 */
    b.tokens = 3 * 64;
    c = qgen_ref_select(&b, 1000, 64, sc, list);
    check(c == 3 && list[0] == 0 && list[1] == 2 - 1 && list[2] == 15,
          "sink 64 / recent 40 at the page edges force exactly pages 0 and 15 (list %d %d %d)",
          list[0], list[1], list[2]);
  }

  /* dense mode needs no scores; len 0 has no pages */
  {
    qgen_budget b = {QGEN_BUDGET_DENSE, 0, 0, 0, 0};
    int64_t c = qgen_ref_select(&b, 1000, 64, NULL, list);
    int all = c == 16;
    for (int p = 0; p < 16 && all; p++) all &= list[p] == p;
    b.mode = QGEN_BUDGET_COVERAGE;
    b.coverage = 0.5;
    check(all && qgen_ref_select(&b, 0, 64, NULL, list) == 0,
          "dense mode: every page, scores unused; len 0: empty list");
  }

  /* randomized: any budget, scores with ties, NaN, +-inf, signed zeros */
  int64_t trials = 0, bad = 0;
  for (int it = 0; it < 20000; it++) {
    const int B = 1 << rnd_int(0, 7);
    const int64_t len = rnd_int(1, 300 * (int64_t)B < 40000 ? 300 * (int64_t)B : 40000);
    const int64_t n = (len + B - 1) / B;
    if (n > 4096) continue;
    qgen_budget b = {(int)rnd_int(0, 2), rnd_unit() * 1.1 + 1e-9, rnd_int(1, len + B), 0, 0};
    if (b.coverage > 1) b.coverage = 1;
    if (rnd32() & 1) b.sink = rnd_int(0, len);
    if (rnd32() & 1) b.recent = rnd_int(0, len);
    const int spread = (int)rnd_int(1, 6);
    for (int64_t p = 0; p < n; p++) {
      const uint32_t r = rnd32() % 100;
      sc[p] = r < 3 ? NAN : r < 5 ? INFINITY : r < 7 ? -INFINITY : r < 9 ? -0.0 : (double)rnd_int(-spread, spread);
    }
    memset(list, 0xff, sizeof list);
    const int64_t c = qgen_ref_select(&b, len, B, sc, list);
    trials++;
    if (!list_is_right(&b, len, B, sc, list, c, &why)) {
      if (bad++ < 3)
        printf("     len %lld block %d mode %d cov %g tokens %lld sink %lld recent %lld: %s\n",
               (long long)len, B, b.mode, b.coverage, (long long)b.tokens, (long long)b.sink,
               (long long)b.recent, why);
    }
  }
  check(bad == 0, "random budgets and scores (ties, NaN, inf, -0): the list is exactly the rules' "
        "list, ascending, no duplicates (%lld of %lld wrong)", (long long)bad, (long long)trials);
}

/* ---- 7. len 0 ----------------------------------------------------------------------- */

/* 8. The selection does not depend on the cache type: the bounds come from the keys as
   given, so caches of every K type filled from the same keys hold byte-identical bounds and
   select the same pages for the same query (the cache type must not change what is attended). */
static void test_same_selection(void) {
  const shape_t *sh = &SHAPES[0];
  static const qgen_type kts[] = {F16, BF16, Q8_0, Q4_0, Q5_0};
  const int64_t len = 5000;
  qgen_layout L0;
  layout_make(&L0, sh, F16, F16, F32, F32, 1);
  seq_t sq;
  seq_make(&sq, &L0, len, DATA_RANDOM);
  uint8_t *q_in = xmalloc(L0.q_bytes);
  float *qf = xmalloc(sizeof(float) * (size_t)L0.n_head * L0.head_dim);
  query_make(&L0, 0, q_in, qf);
  const qgen_budget b = {QGEN_BUDGET_COVERAGE, 0.25, 0, 64, 128};
  const int64_t pps = qgen_pages_of(len, sh->B);
  cache_t c0;
  int32_t *l0 = xmalloc(sizeof(int32_t) * (size_t)(sh->Hkv * pps)), *l1 = xmalloc(sizeof(int32_t) * (size_t)(sh->Hkv * pps));
  int64_t n0[64], n1[64];
  for (size_t i = 0; i < sizeof kts / sizeof *kts; i++) {
    qgen_layout L;
    layout_make(&L, sh, kts[i], kts[(i + 2) % 5], F32, F32, 1);
    cache_t c;
    if (i == 0) cache_init(&c0, &L, 1, pps, NULL, 0);
    if (i == 0) c = c0;
    else {
      cache_twin(&c, &c0);
      c.L = L;
      free(c.m.k);
      free(c.m.v);
      c.m.k = xcalloc((size_t)c.m.n_pages, L.k_page_bytes);
      c.m.v = xcalloc((size_t)c.m.n_pages, L.v_page_bytes);
    }
    append_span(&c, 0, &sq, 0, len);
    qgen_ref_step(&L, &c.m, 0, q_in, &b, NULL, NULL, i ? l1 : l0, i ? n1 : n0);
    if (i > 0) {
      int same = memcmp(c.m.bounds, c0.m.bounds, (size_t)c0.m.n_pages * L.bounds_page_bytes) == 0;
      for (int h = 0; h < sh->Hkv && same; h++)
        same = n0[h] == n1[h] && memcmp(l0 + h * pps, l1 + h * pps, sizeof(int32_t) * (size_t)n0[h]) == 0;
      check(same, "same keys, k=%s v=%s vs k=f16: bounds byte-identical and the same page lists",
            tname(kts[i]), tname(kts[(i + 2) % 5]));
      cache_free(&c);
    }
  }
  cache_free(&c0);
  seq_free(&sq);
  free(q_in);
  free(qf);
  free(l0);
  free(l1);
}

static void test_empty(void) {
  const shape_t sh = SHAPES[0];
  qgen_layout L;
  layout_make(&L, &sh, Q8_0, F16, F16, F16, 1);
  cache_t c;
  cache_init(&c, &L, 2, 4, NULL, 0);
  seq_t s;
  seq_make(&s, &L, 100, DATA_RANDOM);
  append_span(&c, 1, &s, 0, 100); /* another sequence has data */
  uint8_t *q = xmalloc(L.q_bytes), *out = xmalloc(L.out_bytes);
  float *qf = xmalloc((size_t)L.n_head * L.head_dim * sizeof *qf);
  double *o = xmalloc((size_t)L.n_head * L.head_dim * sizeof *o);
  query_make(&L, 0, q, qf);
  const qgen_budget bs[] = {{QGEN_BUDGET_DENSE, 0, 0, 0, 0}, {QGEN_BUDGET_COVERAGE, 0.25, 0, 4, 4},
                            {QGEN_BUDGET_TOKENS, 0, 64, 0, 0}};
  int ok = 1;
  for (int j = 0; j < 4; j++) {
    memset(out, 0x7b, L.out_bytes);
    for (int i = 0; i < L.n_head * L.head_dim; i++) o[i] = 1e300;
    int64_t counts[16] = {-1};
    if (j < 3)
      qgen_ref_step(&L, &c.m, 0, q, &bs[j], out, o, NULL, counts);
    else
      qgen_ref_attend(&L, &c.m, 0, q, NULL, NULL, out, o);
    for (size_t i = 0; i < L.out_bytes; i++) ok &= out[i] == 0;
    for (int i = 0; i < L.n_head * L.head_dim; i++) ok &= o[i] == 0.0;
    if (j < 3) ok &= counts[0] == 0;
  }
  check(ok, "len 0: step (dense, coverage, tokens) and attend give zeros (out and out_f64), count 0");
  free(q);
  free(out);
  free(qf);
  free(o);
  seq_free(&s);
  cache_free(&c);
}

/* ---- long context: 32K+ tokens, a needle ------------------------------------------- */

static void test_long(int64_t len, qgen_type kt, qgen_type vt) {
  const shape_t sh = SHAPES[0];
  qgen_layout L;
  layout_make(&L, &sh, kt, vt, F16, F16, 1);
  const char *nm = layout_name(&L);
  const int D = L.head_dim, H = L.n_head, Hkv = L.n_head_kv, B = L.block;
  const int64_t n = qgen_pages_of(len, B);
  cache_t c;
  cache_init(&c, &L, 1, n, NULL, 1);
  seq_t s;
  seq_make(&s, &L, len, DATA_RANDOM);
  /* a needle: one token in the middle whose key lines up with every query head */
  const int64_t needle = len / 2 + 17;
  float *q = xmalloc((size_t)H * D * sizeof *q);
  uint8_t *q_in = xmalloc(L.q_bytes);
  query_make(&L, 0, q_in, q);
  for (int h = 0; h < Hkv; h++)
    for (int d = 0; d < D; d++) {
      float x = q[(size_t)h * L.group * D + d] * 4.0f;
      s.kx[((size_t)needle * Hkv + h) * D + d] = qgen_f16_to_f32(qgen_f32_to_f16(x));
    }
  for (int h = 0; h < Hkv; h++) { /* re-encode the needle rows */
    const size_t r = (size_t)needle * Hkv + h;
    uint8_t tmp[1024];
    tr(F16)->from_f32(s.kx + r * D, s.k_in + r * L.in_row_bytes, D);
    tr(kt)->from_f32(s.kx + r * D, tmp, D);
    tr(kt)->to_f32(tmp, s.kq + r * D, D);
  }
  double t0 = now();
  for (int64_t t = 0; t < len;) {
    int64_t cnt = rnd_int(1, 8192);
    if (cnt > len - t) cnt = len - t;
    append_span(&c, 0, &s, t, cnt);
    t += cnt;
  }
  const double t_append = now() - t0;
  double *o = xmalloc((size_t)H * D * sizeof *o), *naive = xmalloc((size_t)H * D * sizeof *naive);
  int32_t *lists = xmalloc((size_t)Hkv * n * sizeof *lists);
  int64_t counts[64];
  const qgen_budget dense = {QGEN_BUDGET_DENSE, 0, 0, 0, 0};
  t0 = now();
  qgen_ref_step(&L, &c.m, 0, q_in, &dense, NULL, o, NULL, NULL);
  const double t_dense = now() - t0;
  naive_attend(&L, &s, q, NULL, n, naive);
  const double e_dense = rel_err(o, naive, (size_t)H * D);
  const qgen_budget sp = {QGEN_BUDGET_COVERAGE, 0.25, 0, 64, 256};
  t0 = now();
  qgen_ref_step(&L, &c.m, 0, q_in, &sp, NULL, o, lists, counts);
  const double t_sparse = now() - t0;
  uint8_t *mask = xcalloc((size_t)Hkv * n, 1);
  int needle_in = 1;
  for (int h = 0; h < Hkv; h++) {
    int found = 0;
    for (int64_t k = 0; k < counts[h]; k++) {
      mask[(size_t)h * n + lists[(size_t)h * n + k]] = 1;
      found |= lists[(size_t)h * n + k] == needle / B;
    }
    needle_in &= found;
  }
  naive_attend(&L, &s, q, mask, n, naive);
  const double e_sparse = rel_err(o, naive, (size_t)H * D);
  check(e_dense <= 1e-12 && e_sparse <= 1e-12 && needle_in && counts[0] == (n * 25 + 99) / 100,
        "%s %lld tokens: dense rel err %.3g, 25%% coverage (%lld of %lld pages) rel err %.3g, "
        "needle page selected by every KV head: %s (ref: append %.2f s, dense step %.2f s, "
        "sparse step %.2f s)", nm, (long long)len, e_dense, (long long)counts[0], (long long)n,
        e_sparse, needle_in ? "yes" : "NO", t_append, t_dense, t_sparse);
  free(q);
  free(q_in);
  free(o);
  free(naive);
  free(lists);
  free(mask);
  seq_free(&s);
  cache_free(&c);
}

/* ---- 9. 8-bit page bounds (sparse.bounds) -------------------------------------------- */

/* The true max over page p's tokens and the group's heads of q.k, from keys k ([len][Hkv][D]). */
static double page_max_logit(const qgen_layout *L, const float *k, int64_t len, const float *qf,
                             int h, int64_t p) {
  const int D = L->head_dim, Hkv = L->n_head_kv, B = L->block, G = L->group;
  double best = -INFINITY;
  for (int64_t t = p * B; t < len && t < (p + 1) * B; t++)
    for (int g = 0; g < G; g++) {
      const float *q = qf + (size_t)(h * G + g) * D, *kr = k + ((size_t)t * Hkv + h) * D;
      double dot = 0.0;
      for (int d = 0; d < D; d++) dot += (double)q[d] * (double)kr[d];
      if (dot > best) best = dot;
    }
  return best;
}

/* For random and adversarial pages and every query kind: the decoded 8-bit bounds contain
   the f16 ones, so the i8 score is >= the f16 score and >= the true max logit of the page
   (exact comparisons, as in 1.); NaN (always attended) only for pages whose f16 bounds are
   not all finite. */
static void test_bounds_i8(const shape_t *sh, qgen_type it, int data) {
  qgen_layout L;
  layout_make(&L, sh, F16, F16, it, F32, 1);
  const char *nm = layout_name(&L);
  const int D = L.head_dim, Hkv = L.n_head_kv;
  const int64_t len = 9 * (int64_t)L.block + 7, n = qgen_pages_of(len, L.block);
  cache_t c;
  cache_init(&c, &L, 1, n, NULL, 1);
  seq_t sq;
  seq_make(&sq, &L, len, data);
  append_span(&c, 0, &sq, 0, len);
  uint8_t *q_in = xmalloc(L.q_bytes), *codes = xmalloc((size_t)2 * D);
  float *qf = xmalloc((size_t)L.n_head * D * sizeof *qf);
  double *s16 = xmalloc((size_t)Hkv * n * sizeof *s16), *s8 = xmalloc((size_t)Hkv * n * sizeof *s8);
  double *lo = xmalloc((size_t)D * sizeof *lo), *hi = xmalloc((size_t)D * sizeof *hi);
  int64_t outside = 0, below_true = 0, below_f16 = 0, bad_nan = 0, nan_pages = 0;
  for (int64_t p = 0; p < n; p++)
    for (int h = 0; h < Hkv; h++) {
      const uint16_t *b = c.m.bounds + ((size_t)c.m.page_table[p] * Hkv + h) * 2 * D;
      uint16_t so[2];
      if (qgen_ref_bounds_i8(b, D, so, codes) != 0) continue;
      qgen_ref_bounds_i8_decode(so, codes, D, lo, hi);
      for (int d = 0; d < D; d++) outside += !(lo[d] <= hv(b[d]) && hi[d] >= hv(b[D + d]));
    }
  for (int kind = 0; kind < 4; kind++) {
    query_make(&L, kind, q_in, qf);
    qgen_ref_estimate(&L, &c.m, 0, q_in, s16);
    qgen_ref_estimate_i8(&L, &c.m, 0, q_in, s8);
    for (int h = 0; h < Hkv; h++)
      for (int64_t p = 0; p < n; p++) {
        const double x8 = s8[(size_t)h * n + p], x16 = s16[(size_t)h * n + p];
        const uint16_t *b = c.m.bounds + ((size_t)c.m.page_table[p] * Hkv + h) * 2 * D;
        int finite = 1;
        for (int d = 0; d < 2 * D; d++) finite &= isfinite(hv(b[d]));
        if (isnan(x8)) {
          nan_pages++;
          bad_nan += finite;
          continue;
        }
        below_true += !(x8 >= page_max_logit(&L, sq.kx, len, qf, h, p));
        below_f16 += !(x8 >= x16);
      }
  }
  check(outside == 0 && below_true == 0 && below_f16 == 0 && bad_nan == 0,
        "%s %s keys: i8 bounds contain the f16 ones (%lld outside), i8 score >= true max (%lld "
        "violations) and >= the f16 score (%lld), NaN only without finite bounds (%lld of %lld)",
        nm, data == DATA_RANDOM ? "random" : "adversarial", (long long)outside,
        (long long)below_true, (long long)below_f16, (long long)bad_nan, (long long)nan_pages);
  seq_free(&sq);
  cache_free(&c);
  free(q_in), free(codes), free(qf), free(s16), free(s8), free(lo), free(hi);
}

/* One page of ntok keys (f32, ntok x D) of a degenerate or extreme kind, its f16 bounds as
   append makes them (rd(min), ru(max)). kind 0 random, 1 one constant channel, 2 every
   token and channel the same value, 3 +-65504 and the values next to it, 4 a single token,
   5 f16 subnormals, 6 huge and tiny channels mixed, 7 every channel constant (kmin = kmax),
   8 one key past f16 (an infinite bound). */
static void page_of_kind(int kind, int D, int ntok, float *k, uint16_t *bnd) {
  const float same = (float)(rnd_normal() * 10.0);
  for (int t = 0; t < ntok; t++)
    for (int d = 0; d < D; d++) {
      float x = (float)rnd_normal();
      switch (kind) {
      case 1: if (d == 3) x = 1.25f; break;
      case 2: x = same; break;
      case 3: x = rnd32() & 1 ? (rnd32() & 1 ? 65504.0f : -65504.0f) : (float)((2 * rnd_unit() - 1) * 65504.0); break;
      case 5: x = (float)(rnd_normal() * 0x1p-22); break;
      case 6: x = (float)(rnd_normal() * (d % 7 == 0 ? 20000.0 : 1e-3)); break;
      case 7: x = (float)(d - D / 2) * 0.37f; break;
      case 8: if (t == ntok - 1 && d == D - 1) x = 70000.0f; break;
      default: break;
      }
      k[(size_t)t * D + d] = x;
    }
  for (int d = 0; d < D; d++) {
    float mn = INFINITY, mx = -INFINITY;
    for (int t = 0; t < ntok; t++) mn = fminf(mn, k[(size_t)t * D + d]), mx = fmaxf(mx, k[(size_t)t * D + d]);
    bnd[d] = qgen_f32_to_f16_rd(mn);
    bnd[D + d] = qgen_f32_to_f16_ru(mx);
  }
}

/* Many single pages of every kind above, head_dim 32..256: the decoded 8-bit bounds contain
   the f16 ones, so for random queries (zeros, signs, magnitudes mixed) the i8 Quest score is
   >= the f16 one and >= the page's true max q.k (exact comparisons in double); the scale is
   the smallest f16 that spans the page; and qgen_ref_bounds_i8_row lays the row out as
   base/layout.h says (codes, offset and scale little-endian, zero padding; a page with a
   bound past f16 has codes 0 and NaN offset and scale). */
static void test_bounds_i8_pages(int trials) {
  int64_t violations = 0, pages = 0, nan_rows = 0, bad_rows = 0, loose = 0;
  float *k = xmalloc((size_t)256 * 256 * sizeof *k), *q = xmalloc(256 * sizeof *q);
  uint16_t *bnd = xmalloc(2 * 256 * sizeof *bnd), so[2];
  uint8_t *codes = xmalloc(2 * 256), *row = xmalloc(2 * 256 + 16);
  double *lo = xmalloc(256 * sizeof *lo), *hi = xmalloc(256 * sizeof *hi);
  for (int tr = 0; tr < trials; tr++) {
    const int D = 32 * (int)rnd_int(1, 8), kind = tr % 9;
    const int ntok = kind == 4 ? 1 : (int)rnd_int(1, 256);
    page_of_kind(kind, D, ntok, k, bnd);
    const int rc = qgen_ref_bounds_i8(bnd, D, so, codes);
    qgen_ref_bounds_i8_row(bnd, D, row);
    int finite = 1;
    for (int d = 0; d < 2 * D; d++) finite &= isfinite(hv(bnd[d]));
    if (rc != 0 || kind == 8) { /* exactly without finite bounds, and then the NaN row */
      int ok = rc != 0 && !finite && qgen_rd16(row + 2 * D) == 0x7e00 && qgen_rd16(row + 2 * D + 2) == 0x7e00;
      for (int i = 0; i < 2 * D; i++) ok &= row[i] == 0;
      for (int i = 4; i < 16; i++) ok &= row[2 * D + i] == 0;
      bad_rows += !ok, nan_rows++;
      continue;
    }
    pages++;
    int ok = finite && !memcmp(row, codes, (size_t)2 * D) && qgen_rd16(row + 2 * D) == so[0] && qgen_rd16(row + 2 * D + 2) == so[1];
    for (int i = 4; i < 16; i++) ok &= row[2 * D + i] == 0;
    bad_rows += !ok;
    /* the smallest f16 scale: one step down no longer spans the page */
    double top = -INFINITY;
    for (int d = 0; d < D; d++) top = fmax(top, hv(bnd[D + d]));
    loose += so[1] > 0 && hv(so[0]) + 255.0 * hv((uint16_t)(so[1] - 1)) >= top;
    qgen_ref_bounds_i8_decode(so, codes, D, lo, hi);
    for (int qk = 0; qk < 4; qk++) {
      for (int d = 0; d < D; d++) {
        const double x = rnd_normal();
        q[d] = (float)(qk == 1 && d % 2 ? 0.0 : qk == 2 ? -fabs(x) : qk == 3 ? x * (d % 5 ? 1e-4 : 1e3) : x);
      }
      double s8 = 0, s16 = 0, best = -INFINITY;
      for (int d = 0; d < D; d++) {
        const double qd = q[d];
        s8 += qd > 0 ? qd * hi[d] : qd < 0 ? qd * lo[d] : 0.0;
        s16 += qd > 0 ? qd * hv(bnd[D + d]) : qd < 0 ? qd * hv(bnd[d]) : 0.0;
      }
      for (int t = 0; t < ntok; t++) {
        double dot = 0;
        for (int d = 0; d < D; d++) dot += (double)q[d] * k[(size_t)t * D + d];
        best = fmax(best, dot);
      }
      violations += !(s8 >= s16) + !(s16 >= best);
    }
  }
  check(violations == 0 && bad_rows == 0 && loose == 0 && pages > 0 && nan_rows > 0,
        "8-bit bounds, %d single pages (constant channel, all-equal, +-65504, single token, subnormal, "
        "mixed, past f16): i8 score >= f16 score >= true max (%lld violations), smallest scale (%lld looser), rows as "
        "layout.h (%lld wrong; %lld NaN rows of pages past f16)",
        trials, (long long)violations, (long long)loose, (long long)bad_rows, (long long)nan_rows);
  free(k), free(q), free(bnd), free(codes), free(row), free(lo), free(hi);
}

/* ---- 10. two-stage selection (sparse.rescore) ---------------------------------------- */

/* The sketch scores equal the max logit over the cache's keys (dequantized here from the
   inputs), through a q4_0 round trip for an f16 cache, as they are for a q4_0 one; r = 1 gives qgen_ref_select's list; r large
   enough to take every page gives the selection rules' list for the exact scores; a budget
   covering the context gives every page; and for every r the list keeps the budget's count
   and the forced pages, drawn from the best r * K by the Quest bound. */
static void test_rescore(qgen_type kt) {
  const shape_t *sh = &SHAPES[1];
  qgen_layout L;
  layout_make(&L, sh, kt, F16, F32, F32, 1);
  const char *nm = layout_name(&L);
  const int D = L.head_dim, Hkv = L.n_head_kv, B = L.block;
  const int64_t len = 97 * (int64_t)B + 11, n = qgen_pages_of(len, B);
  cache_t c;
  cache_init(&c, &L, 1, n, NULL, 0);
  seq_t sq;
  seq_make(&sq, &L, len, DATA_RANDOM);
  append_span(&c, 0, &sq, 0, len);
  /* the compact K, computed here: the cache's keys (kq), through q4_0 unless quantized */
  const size_t nk = (size_t)len * Hkv * D;
  float *k4 = xmalloc(nk * sizeof *k4);
  uint8_t *blk = xmalloc(qgen_type_row_bytes(Q4_0, D));
  for (size_t r = 0; r < (size_t)len * Hkv; r++) {
    if (tr(kt)->is_quant) {
      memcpy(k4 + r * D, sq.kq + r * D, (size_t)D * sizeof *k4);
      continue;
    }
    tr(Q4_0)->from_f32(sq.kq + r * D, blk, D);
    tr(Q4_0)->to_f32(blk, k4 + r * D, D);
  }
  uint8_t *q_in = xmalloc(L.q_bytes);
  float *qf = xmalloc((size_t)L.n_head * D * sizeof *qf);
  double *bound = xmalloc((size_t)Hkv * n * sizeof *bound), *exact = xmalloc((size_t)n * sizeof *exact);
  int32_t *l1 = xmalloc((size_t)n * sizeof *l1), *l2 = xmalloc((size_t)n * sizeof *l2);
  uint8_t *forced = xmalloc((size_t)n), *top = xmalloc((size_t)n);
  const qgen_budget b = {QGEN_BUDGET_COVERAGE, 0.125, 0, 64, 128}, all = {QGEN_BUDGET_COVERAGE, 1.0, 0, 64, 128};
  int64_t sk_bad = 0, r1_bad = 0, rmax_bad = 0, all_bad = 0, rule_bad = 0, topp_bad = 0;
  const char *why = "";
  for (int kind = 0; kind < 2; kind++) {
    query_make(&L, kind, q_in, qf);
    qgen_ref_estimate(&L, &c.m, 0, q_in, bound);
    for (int h = 0; h < Hkv; h++) {
      const double *bh = bound + (size_t)h * n;
      qgen_ref_sketch_scores(&L, &c.m, 0, q_in, h, NULL, exact);
      for (int64_t p = 0; p < n; p++) sk_bad += exact[p] != page_max_logit(&L, k4, len, qf, h, p);
      const int64_t c0 = qgen_ref_select(&b, len, B, bh, l1);
      const int64_t c1 = qgen_ref_select_rescore(&b, len, B, 1, bh, exact, l2);
      r1_bad += c0 != c1 || memcmp(l1, l2, (size_t)c0 * sizeof *l1) != 0;
      const int64_t cm = qgen_ref_select_rescore(&b, len, B, (int)n, bh, exact, l2);
      rmax_bad += !list_is_right(&b, len, B, exact, l2, cm, &why);
      const int64_t ca = qgen_ref_select_rescore(&all, len, B, 4, bh, exact, l2);
      for (int64_t p = 0; p < ca; p++) all_bad += l2[p] != p;
      all_bad += ca != n;
      for (int r = 2; r <= 16; r *= 2) {
        /* the rules restated: forced pages, K = count - |forced| non-forced pages, each
           among the first r * K non-forced pages by the bound, and no left-out candidate
           above a chosen one by the exact score */
        const int64_t cr = qgen_ref_select_rescore(&b, len, B, r, bh, exact, l2);
        const int64_t nf = qgen_forced_pages(&b, len, B, forced);
        const int64_t keep = c0 - nf;
        memset(top, 0, (size_t)n);
        for (int64_t p = 0; p < n; p++) {
          int64_t rank = 0;
          for (int64_t x = 0; x < n && !forced[p]; x++) rank += !forced[x] && better(bh, x, p);
          top[p] = !forced[p] && rank < keep * r;
        }
        uint8_t *in = xcalloc((size_t)n, 1);
        for (int64_t i = 0; i < cr; i++) in[l2[i]] = 1;
        int ok = cr == c0;
        for (int64_t i = 1; i < cr; i++) ok &= l2[i] > l2[i - 1];
        for (int64_t p = 0; p < n; p++) {
          ok &= !forced[p] || in[p];
          ok &= forced[p] || !in[p] || top[p];
          for (int64_t x = 0; x < n && in[p] && !forced[p]; x++) ok &= in[x] || !top[x] || better(exact, p, x);
        }
        rule_bad += !ok;
        /* top-p: p = 1 is this list; a subset of it (forced pages in) that never shrinks as p grows */
        static const double ps[] = {0.0, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99, 1.0};
        int64_t prev = 0;
        for (size_t pi = 0; pi < sizeof ps / sizeof *ps; pi++) {
          const int64_t ct = qgen_ref_select_top_p(&b, len, B, r, ps[pi], L.scale, bh, exact, l1);
          int tok = ct >= prev && ct <= cr && (ps[pi] < 1 || (ct == cr && memcmp(l1, l2, (size_t)cr * sizeof *l1) == 0));
          int64_t nin = 0;
          for (int64_t i = 0; i < ct; i++) nin += forced[l1[i]], tok &= in[l1[i]] && (i == 0 || l1[i] > l1[i - 1]);
          tok &= nin == nf;
          topp_bad += !tok;
          prev = ct;
        }
        free(in);
      }
    }
  }
  check(sk_bad == 0, "%s sketch scores == max logit over the compact K (the cache's keys, q4_0 unless "
        "quantized; %lld pages differ)", nm, (long long)sk_bad);
  check(r1_bad == 0, "%s rescore r = 1 gives Quest's list exactly (%lld heads differ)", nm,
        (long long)r1_bad);
  check(rmax_bad == 0, "%s rescore with every page a candidate: the selection rules over the "
        "exact scores (%lld heads wrong%s%s)", nm, (long long)rmax_bad, *why ? ": " : "", why);
  check(all_bad == 0, "%s rescore with coverage 1: every page (%lld wrong)", nm, (long long)all_bad);
  check(rule_bad == 0, "%s rescore r = 2, 4, 8, 16: count, forced pages, candidates from the "
        "bound's best r * K, best by the exact score (%lld heads wrong)", nm, (long long)rule_bad);
  check(topp_bad == 0, "%s top-p (p 0 .. 1, r = 2 .. 16): p = 1 is the rescore list, otherwise a "
        "subset of it with every forced page, never shorter for a larger p (%lld wrong)", nm, (long long)topp_bad);
  seq_free(&sq);
  cache_free(&c);
  free(k4), free(blk), free(q_in), free(qf), free(bound), free(exact), free(l1), free(l2);
  free(forced), free(top);
}

/* Several query tokens a step (qgen_ref_step_tokens_in), nq = 1, 2, 5, 16: one list per KV
   head for the step, the selection rules over the max across its tokens of each token's
   Quest scores (and, two-stage, of the exact page logits over the compact K); token j's
   output the naive attention over that list among the first len - (nq - 1 - j) tokens,
   with a window (not a whole number of pages) only the last window of them; the dense step
   every page, causally. */
static void test_multi(const shape_t *sh, qgen_type kt, int r) {
  qgen_layout L;
  layout_make(&L, sh, kt, F16, F16, F32, 1);
  if (r > 1) qgen_layout_set_rescore(&L, r);
  const char *nm = layout_name(&L);
  const int D = L.head_dim, Hkv = L.n_head_kv, Hq = L.n_head, B = L.block;
  const int64_t len = 37 * (int64_t)B + 5, n = qgen_pages_of(len, B);
  cache_t c;
  cache_init(&c, &L, 1, n, NULL, 3);
  if (L.sketch_page_bytes) c.m.sketch = xcalloc((size_t)c.m.n_pages, L.sketch_page_bytes);
  seq_t sq;
  seq_make(&sq, &L, len, DATA_RANDOM);
  append_span(&c, 0, &sq, 0, len);
  const size_t nk = (size_t)len * Hkv * D; /* the compact K of two-stage selection */
  float *k4 = xmalloc(nk * sizeof *k4);
  uint8_t *blk = xmalloc(qgen_type_row_bytes(Q4_0, D));
  for (size_t i = 0; i < (size_t)len * Hkv; i++) {
    tr(Q4_0)->from_f32(sq.kq + i * D, blk, D);
    tr(Q4_0)->to_f32(blk, k4 + i * D, D);
    if (tr(kt)->is_quant) memcpy(k4 + i * D, sq.kq + i * D, (size_t)D * sizeof *k4);
  }
  qgen_ref_scratch *w = qgen_ref_scratch_new(&L, len, NULL);
  enum { NQ = 16 };
  uint8_t *q = xmalloc(NQ * L.q_bytes), *outb = xmalloc(NQ * (size_t)Hq * D * 4);
  float *qf = xmalloc((size_t)NQ * Hq * D * sizeof *qf);
  double *out = xmalloc((size_t)NQ * Hq * D * sizeof *out), *want = xmalloc((size_t)Hq * D * sizeof *want);
  double *sc = xmalloc((size_t)Hkv * n * sizeof *sc), *best = xmalloc((size_t)Hkv * n * sizeof *best);
  double *ex = xmalloc((size_t)n * sizeof *ex);
  int32_t *lists = xmalloc((size_t)Hkv * n * sizeof *lists), *l2 = xmalloc((size_t)n * sizeof *l2);
  int64_t counts[16];
  uint8_t *mask = xmalloc((size_t)Hkv * n);
  const qgen_budget sparse = {QGEN_BUDGET_COVERAGE, 0.2, 0, (int64_t)B, 2 * (int64_t)B}, dense = {QGEN_BUDGET_DENSE, 0, 0, 0, 0};
  static const int nqs[] = {1, 2, 5, 16};
  int64_t list_bad = 0, out_bad = 0;
  double worst = 0;
  const char *why = "";
  const int64_t windows[2] = {0, 3 * (int64_t)B + 7};
  float *sinks = xmalloc((size_t)Hq * sizeof *sinks); /* around the scores' own scale, some far above */
  for (int i = 0; i < Hq; i++) sinks[i] = (float)(i % 3 == 2 ? 30.0 : rnd_normal());
  for (size_t ni = 0; ni < sizeof nqs / sizeof *nqs; ni++)
    for (int m = 0; m < 8; m++) {
      const int nq = nqs[ni];
      const int64_t window = windows[m / 2 % 2];
      const qgen_ref_step_opts so = {window, m >= 4 ? sinks : NULL};
      const qgen_budget *b = m % 2 ? &dense : &sparse;
      for (int j = 0; j < nq; j++) query_make(&L, j % 4, q + (size_t)j * L.q_bytes, qf + (size_t)j * Hq * D);
      memset(outb, 0xA5, NQ * (size_t)Hq * D * 4);
      for (size_t i = 0; i < (size_t)NQ * Hq * D; i++) out[i] = NAN;
      qgen_ref_step_tokens_in(w, &L, &c.m, 0, nq, &so, q, b, outb, out, lists, counts);
      /* the list: every page (dense), or the rules over the step's max scores */
      for (int j = 0; j < nq; j++) {
        qgen_ref_estimate(&L, &c.m, 0, q + (size_t)j * L.q_bytes, sc);
        for (int64_t i = 0; i < Hkv * n; i++) best[i] = j == 0 || sc[i] > best[i] ? sc[i] : best[i];
      }
      memset(mask, 0, (size_t)Hkv * n);
      for (int h = 0; h < Hkv; h++) {
        const int32_t *lh = lists + (size_t)h * n;
        int ok = 1;
        if (m % 2) {
          ok = counts[h] == n;
          for (int64_t p = 0; ok && p < n; p++) ok = lh[p] == p;
        } else if (r > 1) {
          for (int64_t p = 0; p < n; p++) {
            ex[p] = -INFINITY;
            for (int j = 0; j < nq; j++) {
              const double x = page_max_logit(&L, k4, len, qf + (size_t)j * Hq * D, h, p);
              if (x > ex[p]) ex[p] = x;
            }
          }
          const int64_t c2 = qgen_ref_select_rescore(b, len, B, r, best + (size_t)h * n, ex, l2);
          ok = c2 == counts[h] && !memcmp(l2, lh, (size_t)c2 * sizeof *l2);
        } else {
          ok = list_is_right(b, len, B, best + (size_t)h * n, lh, counts[h], &why);
        }
        list_bad += !ok;
        for (int64_t i = 0; i < counts[h]; i++) mask[(size_t)h * n + lh[i]] = 1;
      }
      /* token j: the naive attention over its visible prefix, within the list */
      for (int j = 0; j < nq; j++) {
        seq_t vis = sq;
        vis.len = len - (nq - 1 - j);
        naive_attend_from(&L, &vis, window && vis.len > window ? vis.len - window : 0, so.sinks, qf + (size_t)j * Hq * D,
                          mask, n, want);
        const double e = rel_err(out + (size_t)j * Hq * D, want, (size_t)Hq * D);
        if (e > worst) worst = e;
        out_bad += !(e < 1e-12);
      }
    }
  check(list_bad == 0, "%s r %d: a step of 1, 2, 5, 16 tokens selects once per KV head by the max over its tokens "
        "(%lld lists wrong%s%s)", nm, r, (long long)list_bad, *why ? ": " : "", why);
  check(out_bad == 0, "%s r %d: token j of the step attends causally, the first len - (nq - 1 - j) tokens, sparse "
        "and dense, whole or their last %lld, with and without sinks (%lld outputs wrong, worst rel err %.2e)", nm, r,
        (long long)windows[1],
        (long long)out_bad, worst);
  qgen_ref_scratch_free(w);
  seq_free(&sq);
  free(c.m.sketch);
  c.m.sketch = NULL;
  cache_free(&c);
  free(k4), free(blk), free(q), free(outb), free(qf), free(out), free(want), free(sc), free(best), free(ex);
  free(lists), free(l2), free(mask), free(sinks);
}

/* Sparse-V (v_tau > 0): qgen_ref_attend_order against a token-by-token oracle of the rule
   in ref.h (splits of the list, token groups, a running max per head, the 16-head m-tile's
   verdict over its sub-tile); tau = 0 is the plain attention bit for bit. */
static double sparse_v_naive(const qgen_layout *L, const seq_t *s, const float *qf, const qgen_ref_order *o, double *out) {
  const int D = L->head_dim, Hkv = L->n_head_kv, G = L->group, B = L->block, spp = B / 16;
  const int64_t n = qgen_pages_of(s->len, B), per = o->min_split_tokens / B > 0 ? o->min_split_tokens / B : 1;
  int64_t ns = (n + per - 1) / per;
  ns = ns > o->max_splits ? o->max_splits : ns < 1 ? 1 : ns;
  double *sc = xmalloc((size_t)G * (size_t)s->len * sizeof *sc), *mrun = xmalloc((size_t)o->groups * G * sizeof *mrun);
  uint8_t *drop = xmalloc((size_t)n * spp * 4);
  int64_t dropped = 0, subtiles = 0;
  for (int h = 0; h < Hkv; h++) {
    for (int g = 0; g < G; g++)
      for (int64_t t = 0; t < s->len; t++) {
        double dot = 0.0;
        for (int d = 0; d < D; d++) dot += (double)qf[(size_t)(h * G + g) * D + d] * s->kq[((size_t)t * Hkv + h) * D + d];
        sc[(size_t)g * s->len + t] = L->scale * dot;
      }
    for (int64_t sp = 0; sp < ns; sp++) {
      for (int k = 0; k < o->groups * G; k++) mrun[k] = -INFINITY;
      for (int64_t j = n * sp / ns * spp; j < n * (sp + 1) / ns * spp; j++) { /* sub-tile j of the sequence */
        const int64_t jt = j - n * sp / ns * spp, t0 = j * 16, t1 = t0 + 16 < s->len ? t0 + 16 : s->len;
        for (int m = 0; m < (G + 15) / 16; m++) {
          int small = 1;
          for (int g = 16 * m; g < G && g < 16 * m + 16; g++) {
            double *mr = &mrun[(jt % o->groups) * G + g];
            for (int64_t t = t0; t < t1; t++) *mr = fmax(*mr, sc[(size_t)g * s->len + t]);
            for (int64_t t = t0; t < t1; t++) small &= exp(sc[(size_t)g * s->len + t] - *mr) < L->v_tau;
          }
          drop[j * 4 + m] = small;
          dropped += small && t1 > t0, subtiles += t1 > t0;
        }
      }
    }
    for (int g = 0; g < G; g++) {
      double mx = -INFINITY, l = 0.0;
      for (int64_t t = 0; t < s->len; t++) mx = fmax(mx, sc[(size_t)g * s->len + t]);
      double *acc = out + (size_t)(h * G + g) * D;
      for (int d = 0; d < D; d++) acc[d] = 0.0;
      for (int64_t t = 0; t < s->len; t++) {
        const double w = exp(sc[(size_t)g * s->len + t] - mx);
        l += w;
        if (!drop[(t / 16) * 4 + g / 16])
          for (int d = 0; d < D; d++) acc[d] += w * s->vq[((size_t)t * Hkv + h) * D + d];
      }
      for (int d = 0; d < D; d++) acc[d] /= l;
    }
  }
  free(sc);
  free(mrun);
  free(drop);
  return subtiles ? (double)dropped / (double)subtiles : 0.0;
}

static void test_sparse_v(const shape_t *sh, qgen_type kt, qgen_type vt) {
  qgen_layout L;
  layout_make(&L, sh, kt, vt, F32, F32, 1);
  const int D = L.head_dim, H = L.n_head, B = L.block;
  const int64_t n = 11, len = n * B - 5;
  cache_t c;
  cache_init(&c, &L, 1, n, NULL, 0);
  seq_t s;
  seq_make(&s, &L, len, DATA_RANDOM);
  append_span(&c, 0, &s, 0, len);
  uint8_t *q_in = xmalloc(L.q_bytes);
  float *qf = xmalloc((size_t)H * D * sizeof *qf);
  query_make(&L, 3, q_in, qf); /* large and tiny entries: peaked weights */
  double *o0 = xmalloc((size_t)H * D * sizeof *o0), *o1 = xmalloc((size_t)H * D * sizeof *o1),
         *nv = xmalloc((size_t)H * D * sizeof *nv);
  const qgen_ref_order orders[] = {{1, 1, 1}, {3, B, 2}, {64, 256, 4}};
  qgen_ref_attend(&L, &c.m, 0, q_in, NULL, NULL, NULL, o0);
  qgen_layout Lt = L;
  for (size_t i = 0; i < sizeof orders / sizeof *orders; i++) {
    Lt.v_tau = 0;
    qgen_ref_attend_order(&Lt, &c.m, 0, q_in, NULL, NULL, &orders[i], NULL, o1);
    check(memcmp(o0, o1, (size_t)H * D * sizeof *o0) == 0, "[D%d %d/%d %s/%s] sparse-V tau 0 in order {%d, %d, %d}: plain "
          "attention bit for bit", D, H, L.n_head_kv, tr(kt)->name, tr(vt)->name, orders[i].max_splits,
          orders[i].min_split_tokens, orders[i].groups);
    for (int k = 0; k < 2; k++) {
      Lt.v_tau = k ? 0.05 : 1e-3;
      qgen_ref_attend_order(&Lt, &c.m, 0, q_in, NULL, NULL, &orders[i], NULL, o1);
      const double frac = sparse_v_naive(&Lt, &s, qf, &orders[i], nv), e = rel_err(o1, nv, (size_t)H * D);
      check(e <= 1e-12, "[D%d %d/%d %s/%s] sparse-V tau %g order {%d, %d, %d} == the token-by-token rule "
            "(%.0f %% of sub-tile V dropped, rel err %.2g)", D, H, L.n_head_kv, tr(kt)->name, tr(vt)->name, Lt.v_tau,
            orders[i].max_splits, orders[i].min_split_tokens, orders[i].groups, 100 * frac, e);
    }
  }
  free(q_in);
  free(qf);
  free(o0);
  free(o1);
  free(nv);
  seq_free(&s);
  cache_free(&c);
}

int main(void) {
  const char *env = getenv("QGEN_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)clock() << 32;
  rng_state = seed;
  printf("test_ref: seed %llu (QGEN_SEED=%llu reproduces)\n", (unsigned long long)seed,
         (unsigned long long)seed);
  /* QGEN_TEST_QUICK=1: a smaller run of every kind of check, for valgrind and sanitizers */
  const int quick = getenv("QGEN_TEST_QUICK") && atoi(getenv("QGEN_TEST_QUICK")) > 0;
  if (quick) printf("quick run (QGEN_TEST_QUICK): fewer configurations, shorter contexts\n");

  static const struct { qgen_type k, v, in, out; } cfgs[] = {
      {F16, F16, F16, F16},    {BF16, BF16, F32, F32},  {Q8_0, Q8_0, F16, F32},
      {Q4_0, Q4_0, F32, F16},  {Q5_0, Q5_0, F16, BF16}, {Q8_0, F16, F32, F16},
      {F16, Q4_0, F16, F32},   {Q4_0, Q8_0, F32, F32},  {Q5_0, BF16, F32, F16},
      {BF16, Q5_0, BF16, F16},
  };
  const int n_shapes = (int)(sizeof SHAPES / sizeof SHAPES[0]);
  double t0 = now(), t[8];
  /* every configuration on the first shape; on the others either the five mixed pairs
     (every type once as K and once as V) or the five matched ones */
  const int n_cfgs = (int)(sizeof cfgs / sizeof cfgs[0]);
  for (int si = 0; si < n_shapes; si++)
    for (int j = 0; j < (quick ? (si == 0 ? 3 : 1) : si == 0 ? n_cfgs : 5); j++) {
      const int ci = si == 0 || si == 2 ? j : 5 + j;
      test_config(&SHAPES[si], cfgs[ci].k, cfgs[ci].v, cfgs[ci].in, cfgs[ci].out);
    }

  t[0] = now();
  test_bound_rounding();
  test_signed_zeros();
  static const qgen_type kvs[] = {F16, BF16, Q8_0, Q4_0, Q5_0};
  for (int si = 0; si < n_shapes; si++)
    for (int ii = 0; ii < 2; ii++) {
      const qgen_type in = ii ? F32 : F16;
      test_adversarial(&SHAPES[si], in, kvs[(si + ii) % 5], kvs[(si + 2 * ii + 2) % 5]);
    }

  t[1] = now();
  /* every K/V pair sees a 4096-token chunk on the small shape; the others, five pairs each,
     with shorter contexts */
  test_chunking(&SHAPES[1], F32, 4096 + 700, 4096, !quick);
  if (!quick) {
    test_chunking(&SHAPES[1], F16, 4096 + 333, 4096, 0);
    test_chunking(&SHAPES[0], F32, 1100, 1000, 0);
    test_chunking(&SHAPES[3], BF16, 1300, 1025, 0);
    test_chunking(&SHAPES[2], F32, 1000, 900, 0);
  }

  t[2] = now();
  test_gqa(&SHAPES[0]);
  test_gqa(&SHAPES[1]);
  test_gqa(&SHAPES[2]);
  test_sparse_v(&SHAPES[0], Q4_0, Q8_0);
  test_sparse_v(&SHAPES[1], F16, Q5_0);
  test_sparse_v(&(shape_t){64, 40, 2, 64}, F16, F16); /* group 20: two m-tiles */

  test_select();
  test_same_selection();
  test_empty();
  test_rescore(F16);
  test_rescore(Q4_0);
  test_multi(&SHAPES[1], F16, 1);
  test_multi(&SHAPES[0], Q8_0, 1);
  test_multi(&SHAPES[1], F16, 4);
  test_bounds_i8_pages(quick ? 2000 : 20000);
  for (int si = 0; si < n_shapes; si++) {
    test_bounds_i8(&SHAPES[si], F16, DATA_RANDOM);
    test_bounds_i8(&SHAPES[si], F32, DATA_ADVERSARIAL);
  }

  t[3] = now();
  test_long(quick ? 3000 : 16384 + 1000, F16, F16);
  if (!quick) test_long(65536, Q4_0, Q8_0);

  t[4] = now();
  printf("time: layouts x types %.1f s, adversarial %.1f s, chunking %.1f s, gqa/select/empty "
         "%.1f s, long contexts %.1f s\n", t[0] - t0, t[1] - t[0], t[2] - t[1], t[3] - t[2],
         t[4] - t[3]);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
