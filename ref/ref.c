/* ref.c — the CPU reference of the decode path: the oracle every GPU test compares with.
 *
 * Everything here is the plain, slow, obviously-correct version of layout.h's rules; the
 * GPU kernels are clever, this file is not. No SIMD, no threads, no online tricks:
 *
 *   append    For each new token t (position pos = seq_len + i) and KV head h: convert
 *             the input row (in_type) to f32 with the traits table, write it into
 *             page_table[seq][pos / block], slot pos % block, with the k_type / v_type
 *             quantizer (ggml-exact; an fp8 cache stores fp8(x / scale) with its per-tensor
 *             scale and reads fp8 * scale, both in f32). Then, for sparse layouts, the bounds: for every page
 *             this call touches, take min and max per channel over the f32 input keys the
 *             call writes into that page, round them outward to f16 (min toward -inf, max
 *             toward +inf) and either store them (the call wrote the page's slot 0: a fresh
 *             page) or min/max-merge them with the stored f16 bounds.
 *
 *             Chunking must not matter (one call of 4096 tokens == 4096 calls of one): the
 *             rounding is monotone, so rd(min(a, b)) == min(rd(a), rd(b)), and min/max use
 *             one total order in which -0 < +0 (so the result is the same whichever of two
 *             equal-valued zeros comes first; it is also the order of the sign-flipped
 *             integer keys GPUs use for float atomicMin/Max, and PTX's min/max order zeros
 *             the same way). NaN keys are ignored, as PTX min/max and C's fminf do: a channel
 *             whose keys are all NaN gets the empty bounds kmin = +inf, kmax = -inf.
 *
 *   estimate  score(page, h) = max over the group's query heads g of
 *             sum_d (q_gd > 0 ? q_gd*kmax_d : q_gd < 0 ? q_gd*kmin_d : 0), in double, d in
 *             increasing order. (f32 * f16 products are exact in double and a sequential
 *             sum is monotone in its terms, so this is >= the same sum over any key in the
 *             page, exactly, not just up to rounding.) A NaN from any head makes the score NaN.
 *
 *   select    forced pages (sink, recent, last) from qgen_forced_pages, K_eff from
 *             qgen_budget_pages, then the best K_eff - |forced| other pages by score: NaN
 *             first, then larger scores, ties to the lower page index (one qsort with that
 *             total order). Written back in ascending page order.
 *             Two-stage (sparse.rescore): the same ranking keeps r times as many candidates,
 *             a second qsort of those by their exact scores from a compact K (the cache's
 *             own quantized K, or a q4_0 round trip of it) keeps the K_eff - |forced| best.
 *
 *   i8 bounds (sparse.bounds) per (page, KV head): offset = min kmin, scale = range / 255
 *             rounded up to f16, kmin codes rounded down and kmax codes rounded up (checked
 *             in exact double arithmetic), so the decoded bounds contain the f16 ones.
 *
 *   attend    Per query head hq (KV head hq / group), over the listed pages in list order
 *             and their tokens in order: s_t = scale * q.k_t (double, k dequantized with the
 *             k_type traits and the per-tensor scale), m = max s_t, p_t = exp(s_t - m),
 *             out = sum p_t v_t / sum p_t.
 *             Two passes over the tokens (scores, then values); no online rescaling, so the
 *             result is as close to the exact softmax as double allows.
 *
 *   step      dense budget (or one whose K_eff covers every page): attend over every page;
 *             otherwise estimate -> select per KV head -> attend over those lists; with
 *             the layout's rescore r > 1, two-stage selection (computing the exact scores
 *             of the candidates only) and its top-p cut when the layout's top_p < 1. Append also writes the sketch pool of such a layout
 *             over an unquantized K: the q4_0 form of each stored K row.
 *
 * Sizes are 64-bit throughout. Scratch memory is one qgen_ref_scratch block: the CPU backend
 * takes it at cache creation (the _in forms, which never allocate); the plain entry points
 * take one fitted to the call and free it (an allocation failure aborts: they are the
 * oracle of tests and tools, not a serving path).
 */
#include "ref/ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/le.h"

/* ---- small helpers ------------------------------------------------------------------ */

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "qgen_ref: out of memory (%zu bytes)\n", n);
    abort();
  }
  return p;
}

static const qgen_type_traits *traits(qgen_type t) { return qgen_type_traits_of(t); }

static int64_t phys_page(const qgen_kvmem *m, int seq, int64_t logical) {
  return m->page_table[(int64_t)seq * m->pages_per_seq + logical];
}

/* Row of KV head h, slot `slot` of physical page `page` in the K (which = 0) or V pool. */
static uint8_t *pool_row(const qgen_layout *L, const qgen_kvmem *m, int which, int64_t page,
                         int h, int64_t slot) {
  size_t page_bytes = which ? L->v_page_bytes : L->k_page_bytes;
  size_t row_bytes = which ? L->v_row_bytes : L->k_row_bytes;
  uint8_t *pool = which ? m->v : m->k;
  return pool + (size_t)page * page_bytes + ((size_t)h * (size_t)L->block + (size_t)slot) * row_bytes;
}

/* Row of KV head h of token t of seq in the K (which = 0) or V pool: the owned layout, or a
   view's strides over the caller's pages (layout.h, qgen_kvmem). */
static const uint8_t *token_row(const qgen_layout *L, const qgen_kvmem *m, int which, int seq,
                                int64_t t, int h) {
  if (!m->page_size) return pool_row(L, m, which, phys_page(m, seq, t / L->block), h, t % L->block);
  const int64_t *st = which ? m->v_stride : m->k_stride;
  const int64_t page = m->page_table[(int64_t)seq * m->pt_stride + t / m->page_size];
  return (which ? m->v : m->k) + page * st[0] + (t % m->page_size) * st[1] + (int64_t)h * st[2];
}

/* The per-tensor scale of the K (which = 0) or V cache: 1 for a type that takes none. */
static float cache_scale(const qgen_layout *L, const qgen_kvmem *m, int which) {
  if (!traits(which ? L->v_type : L->k_type)->tensor_scale) return 1.0f;
  return which ? m->v_scale : m->k_scale;
}

/* A cache row to f32 values: decoded with the type's traits, times the per-tensor scale. */
static void read_row(const qgen_layout *L, const qgen_kvmem *m, int which, int seq, int64_t t, int h, float *row) {
  traits(which ? L->v_type : L->k_type)->to_f32(token_row(L, m, which, seq, t, h), row, L->head_dim);
  const float sc = cache_scale(L, m, which);
  if (sc != 1.0f)
    for (int d = 0; d < L->head_dim; d++) row[d] *= sc;
}

/* f32 values x (overwritten) into a cache row: divided by the per-tensor scale (f32
   division), then the type's quantizer. */
static void write_row(const qgen_layout *L, const qgen_kvmem *m, int which, int64_t page, int h, int64_t slot,
                      float *x) {
  const float sc = cache_scale(L, m, which);
  if (sc != 1.0f)
    for (int d = 0; d < L->head_dim; d++) x[d] /= sc;
  traits(which ? L->v_type : L->k_type)->from_f32(x, pool_row(L, m, which, page, h, slot), L->head_dim);
}

/* kmin of (page, h) at [0, D), kmax at [D, 2D). */
static uint16_t *page_bounds(const qgen_layout *L, const qgen_kvmem *m, int64_t page, int h) {
  return m->bounds + ((size_t)page * (size_t)L->n_head_kv + (size_t)h) * 2 * (size_t)L->head_dim;
}

/* The total order of the bounds: -inf < ... < -0 < +0 < ... < +inf (NaN: never before). */
static int before(float a, float b) { return a < b || (a == b && signbit(a) && !signbit(b)); }

/* Merge two f16 lower bounds (want_max = 0) or upper bounds (want_max = 1); a NaN loses. */
static uint16_t merge_bound(uint16_t a, uint16_t b, int want_max) {
  float fa = qgen_f16_to_f32(a), fb = qgen_f16_to_f32(b);
  if (isnan(fa)) return b;
  if (isnan(fb)) return a;
  if (want_max) return before(fa, fb) ? b : a;
  return before(fb, fa) ? b : a;
}

/* ---- scratch ---------------------------------------------------------------------- */

typedef struct {
  double score;
  int64_t page;
} ranked;

/* Room for steps over sequences of up to `tokens` tokens (`pages` pages); the arrays follow
   the struct in the same block. qf serves estimate and attend (one after the other), flags
   the forced pages of step and the chosen pages of select. */
struct qgen_ref_scratch {
  int64_t tokens, pages;
  double *kmin, *kmax, *res, *mx, *sum, *s, *scores, *best; /* s: [group][tokens] attend scores; best: a step's max */
  int64_t *counts;
  const int32_t **ptrs;
  ranked *cand;
  float *x, *lo, *hi, *qf;
  int32_t *all, *lists;
  uint8_t *flags, *codes; /* codes: one page's 8-bit bounds */
  uint16_t *bnd;          /* a view's selection page: its engine pages' bounds merged */
  uint8_t *sk;            /* one q4_0 row (two-stage selection) */
  uint8_t *drop;          /* sparse-V: [list sub-tile][m-tile] V left out (v_tau > 0 only) */
  double *mrun;           /* sparse-V: [token group][head] running max */
};

#define SCRATCH_ALIGN(n) (((n) + 63) / 64 * 64)
#define QGEN_REF_MAX_GROUPS 32 /* token groups of a sparse-V order (attend has at most 31 warps) */

/* Lay w's arrays out after it from base; with base == NULL only count the bytes. */
static size_t scratch_layout(qgen_ref_scratch *w, const qgen_layout *L, uint8_t *base) {
  const size_t D = (size_t)L->head_dim, Hq = (size_t)L->n_head, Hkv = (size_t)L->n_head_kv, G = (size_t)L->group;
  const size_t T = (size_t)w->tokens, N = (size_t)w->pages;
  size_t off = SCRATCH_ALIGN(sizeof *w);
#define CARVE(f, n)                                              \
  do {                                                           \
    if (base) w->f = (void *)(base + off);                       \
    off += SCRATCH_ALIGN((size_t)(n) * sizeof *w->f);            \
  } while (0)
  CARVE(kmin, D);
  CARVE(kmax, D);
  CARVE(res, Hq * D);
  CARVE(mx, G);
  CARVE(sum, G);
  CARVE(s, G * T);
  CARVE(scores, Hkv * N);
  CARVE(best, Hkv * N);
  CARVE(counts, Hkv);
  CARVE(ptrs, Hkv);
  CARVE(cand, N);
  CARVE(x, D);
  CARVE(lo, D);
  CARVE(hi, D);
  CARVE(qf, Hq * D);
  CARVE(all, N);
  CARVE(lists, Hkv * N);
  CARVE(flags, N);
  CARVE(codes, 2 * D);
  CARVE(bnd, 2 * D);
  CARVE(sk, qgen_type_row_bytes(QGEN_TYPE_Q4_0, (int64_t)D));
  CARVE(drop, L->v_tau > 0 ? N * (size_t)(L->block / 16) * ((G + 15) / 16) : 0);
  CARVE(mrun, L->v_tau > 0 ? QGEN_REF_MAX_GROUPS * G : 0);
#undef CARVE
  return off;
}

qgen_ref_scratch *qgen_ref_scratch_new(const qgen_layout *L, int64_t max_tokens, size_t *bytes) {
  qgen_ref_scratch w;
  memset(&w, 0, sizeof w);
  w.tokens = max_tokens > 0 ? max_tokens : 1;
  w.pages = qgen_pages_of(w.tokens, L->block);
  const size_t n = scratch_layout(&w, L, NULL);
  if (bytes) *bytes = n;
  uint8_t *base = malloc(n);
  if (!base) return NULL;
  scratch_layout(&w, L, base);
  memcpy(base, &w, sizeof w);
  return (qgen_ref_scratch *)base;
}

void qgen_ref_scratch_free(qgen_ref_scratch *w) { free(w); }

/* The plain entry points' scratch: fitted to the call, fatal when it cannot be had. */
static qgen_ref_scratch *scratch_or_die(const qgen_layout *L, int64_t tokens) {
  size_t n = 0;
  qgen_ref_scratch *w = qgen_ref_scratch_new(L, tokens, &n);
  if (!w) {
    fprintf(stderr, "qgen_ref: out of memory (%zu bytes of scratch)\n", n);
    abort();
  }
  return w;
}

/* ---- append ------------------------------------------------------------------------- */

void qgen_ref_append_in(qgen_ref_scratch *w, const qgen_layout *L, qgen_kvmem *m, int seq,
                        int64_t n_new, const void *k, const void *v) {
  if (n_new <= 0) return;
  const int D = L->head_dim, Hkv = L->n_head_kv, B = L->block;
  const qgen_type_traits *in = traits(L->in_type);
  const uint8_t *kin = k, *vin = v;
  const int64_t len0 = m->seq_len[seq];
  float *x = w->x;

  /* 1. the rows */
  for (int64_t i = 0; i < n_new; i++) {
    const int64_t pos = len0 + i, page = phys_page(m, seq, pos / B), slot = pos % B;
    for (int h = 0; h < Hkv; h++) {
      const size_t off = ((size_t)i * (size_t)Hkv + (size_t)h) * L->in_row_bytes;
      in->to_f32(kin + off, x, D);
      write_row(L, m, 0, page, h, slot, x);
      if (L->sketch_page_bytes) { /* the sketch: the stored row in QGEN_SKETCH_TYPE */
        read_row(L, m, 0, seq, pos, h, x);
        traits(QGEN_SKETCH_TYPE)->from_f32(x, m->sketch + (size_t)page * L->sketch_page_bytes +
                                                  ((size_t)h * (size_t)B + (size_t)slot) * L->sketch_row_bytes, D);
      }
      in->to_f32(vin + off, x, D);
      write_row(L, m, 1, page, h, slot, x);
    }
  }

  /* 2. the bounds, page by page */
  if (L->sparse) {
    float *lo = w->lo, *hi = w->hi;
    const int64_t end = len0 + n_new;
    for (int64_t lp = len0 / B; lp <= (end - 1) / B; lp++) {
      const int64_t t0 = lp * B > len0 ? lp * B : len0;
      const int64_t t1 = (lp + 1) * B < end ? (lp + 1) * B : end;
      const int fresh = t0 == lp * B; /* this call writes the page's first token */
      const int64_t page = phys_page(m, seq, lp);
      for (int h = 0; h < Hkv; h++) {
        for (int d = 0; d < D; d++) {
          lo[d] = INFINITY;
          hi[d] = -INFINITY;
        }
        for (int64_t t = t0; t < t1; t++) {
          in->to_f32(kin + ((size_t)(t - len0) * (size_t)Hkv + (size_t)h) * L->in_row_bytes, x, D);
          for (int d = 0; d < D; d++) {
            if (isnan(x[d])) continue; /* ignored, like PTX min/max */
            if (before(x[d], lo[d])) lo[d] = x[d];
            if (before(hi[d], x[d])) hi[d] = x[d];
          }
        }
        uint16_t *bnd = page_bounds(L, m, page, h);
        for (int d = 0; d < D; d++) {
          uint16_t nlo = qgen_f32_to_f16_rd(lo[d]), nhi = qgen_f32_to_f16_ru(hi[d]);
          if (!fresh) {
            nlo = merge_bound(bnd[d], nlo, 0);
            nhi = merge_bound(bnd[D + d], nhi, 1);
          }
          bnd[d] = nlo;
          bnd[D + d] = nhi;
        }
      }
    }
  }
  m->seq_len[seq] = (int32_t)(len0 + n_new);
}

/* Slot i of a slot mapping of 4- or 8-byte signed integers. */
static int64_t slot_at(const void *slots, int slot_bytes, int64_t i) {
  return slot_bytes == 8 ? ((const int64_t *)slots)[i] : ((const int32_t *)slots)[i];
}

void qgen_ref_view_update_in(qgen_ref_scratch *w, const qgen_layout *L, qgen_kvmem *m,
                             const void *slots, int slot_bytes, int64_t n) {
  const int D = L->head_dim, P = m->page_size;
  const int64_t end = m->n_pages * P;
  const qgen_type_traits *kt = traits(L->k_type);
  /* 1. pages whose first slot is written start empty (kmin +inf, kmax -inf) */
  for (int64_t i = 0; i < n; i++) {
    const int64_t s = slot_at(slots, slot_bytes, i);
    if (s < 0 || s >= end || s % P) continue;
    for (int h = 0; h < L->n_head_kv; h++) {
      uint16_t *bnd = page_bounds(L, m, s / P, h);
      for (int d = 0; d < D; d++) bnd[d] = 0x7c00, bnd[D + d] = 0xfc00;
    }
  }
  /* 2. every written row merges into its page, as append's keys do */
  for (int64_t i = 0; i < n; i++) {
    const int64_t s = slot_at(slots, slot_bytes, i);
    if (s < 0 || s >= end) continue;
    for (int h = 0; h < L->n_head_kv; h++) {
      kt->to_f32(m->k + (s / P) * m->k_stride[0] + (s % P) * m->k_stride[1] + (int64_t)h * m->k_stride[2], w->x, D);
      uint16_t *bnd = page_bounds(L, m, s / P, h);
      for (int d = 0; d < D; d++) {
        if (isnan(w->x[d])) continue;
        bnd[d] = merge_bound(bnd[d], qgen_f32_to_f16_rd(w->x[d]), 0);
        bnd[D + d] = merge_bound(bnd[D + d], qgen_f32_to_f16_ru(w->x[d]), 1);
      }
    }
  }
}

void qgen_ref_append(const qgen_layout *L, qgen_kvmem *m, int seq, int64_t n_new,
                     const void *k, const void *v) {
  qgen_ref_scratch *w = scratch_or_die(L, 1); /* append needs only row-sized arrays */
  qgen_ref_append_in(w, L, m, seq, n_new, k, v);
  qgen_ref_scratch_free(w);
}

/* ---- rollback ------------------------------------------------------------------------ */

void qgen_ref_page_keep(const qgen_layout *L, float k_scale, int r, uint8_t *k_page, uint8_t *v_page,
                        uint8_t *sketch_page, uint16_t *bnd_page, float *x) {
  const int D = L->head_dim, B = L->block;
  const int fp8_scale = traits(L->k_type)->tensor_scale && k_scale != 1.0f;
  for (int h = 0; h < L->n_head_kv; h++) {
    const size_t row0 = (size_t)h * (size_t)B + (size_t)r, rows = (size_t)(B - r);
    memset(k_page + row0 * L->k_row_bytes, 0, rows * L->k_row_bytes);
    memset(v_page + row0 * L->v_row_bytes, 0, rows * L->v_row_bytes);
    if (sketch_page) memset(sketch_page + row0 * L->sketch_row_bytes, 0, rows * L->sketch_row_bytes);
    if (!bnd_page) continue;
    uint16_t *bnd = bnd_page + (size_t)h * 2 * (size_t)D;
    if (r == 0) { /* a page no token reached: zero, as the cache was made */
      memset(bnd, 0, 2 * (size_t)D * sizeof *bnd);
      continue;
    }
    for (int d = 0; d < D; d++) bnd[d] = 0x7c00, bnd[D + d] = 0xfc00; /* empty: +inf, -inf */
    for (int t = 0; t < r; t++) {
      traits(L->k_type)->to_f32(k_page + ((size_t)h * (size_t)B + (size_t)t) * L->k_row_bytes, x, D);
      for (int d = 0; d < D; d++) {
        const float kd = fp8_scale ? x[d] * k_scale : x[d];
        if (isnan(kd)) continue;
        bnd[d] = merge_bound(bnd[d], qgen_f32_to_f16_rd(kd), 0);
        bnd[D + d] = merge_bound(bnd[D + d], qgen_f32_to_f16_ru(kd), 1);
      }
    }
  }
}

void qgen_ref_copy_page_in(qgen_ref_scratch *w, const qgen_layout *L, qgen_kvmem *m, int64_t src, int64_t dst, int keep) {
  memcpy(m->k + dst * L->k_page_bytes, m->k + src * L->k_page_bytes, L->k_page_bytes);
  memcpy(m->v + dst * L->v_page_bytes, m->v + src * L->v_page_bytes, L->v_page_bytes);
  if (m->sketch) memcpy(m->sketch + dst * L->sketch_page_bytes, m->sketch + src * L->sketch_page_bytes, L->sketch_page_bytes);
  uint16_t *bnd = m->bounds ? m->bounds + (size_t)dst * L->bounds_page_bytes / sizeof *bnd : NULL;
  if (bnd) memcpy(bnd, m->bounds + (size_t)src * L->bounds_page_bytes / sizeof *bnd, L->bounds_page_bytes);
  qgen_ref_page_keep(L, m->k_scale, keep, m->k + dst * L->k_page_bytes, m->v + dst * L->v_page_bytes,
                     m->sketch ? m->sketch + dst * L->sketch_page_bytes : NULL, bnd, w->x);
}

void qgen_ref_rollback_in(qgen_ref_scratch *w, const qgen_layout *L, qgen_kvmem *m, int seq, int64_t n) {
  const int64_t len = m->seq_len[seq], keep = len - n, B = L->block;
  if (n <= 0) return;
  for (int64_t lp = keep / B; lp <= (len - 1) / B; lp++) {
    const int64_t page = phys_page(m, seq, lp), r = keep - lp * B;
    qgen_ref_page_keep(L, m->k_scale, r > 0 ? (int)r : 0, m->k + (size_t)page * L->k_page_bytes,
                       m->v + (size_t)page * L->v_page_bytes,
                       m->sketch ? m->sketch + (size_t)page * L->sketch_page_bytes : NULL,
                       m->bounds ? m->bounds + (size_t)page * L->bounds_page_bytes / sizeof *m->bounds : NULL, w->x);
  }
  m->seq_len[seq] = (int32_t)keep;
}

/* ---- estimate ----------------------------------------------------------------------- */

/* The bounds of selection page p of a view's sequence, KV head h: min of the kmins and max
   of the kmaxes of the engine pages it spans (block / page_size of them, those holding
   tokens), in w->bnd. Equal to an owned cache's bounds over the same tokens: the outward
   rounding is monotone. */
static const uint16_t *view_bounds(qgen_ref_scratch *w, const qgen_layout *L, const qgen_kvmem *m, int seq,
                                   int64_t p, int h) {
  const int D = L->head_dim, R = L->block / m->page_size;
  const int64_t used = (m->seq_len[seq] + m->page_size - 1) / m->page_size;
  for (int64_t e = p * R; e < (p + 1) * R && e < used; e++) {
    const uint16_t *b = page_bounds(L, m, m->page_table[(int64_t)seq * m->pt_stride + e], h);
    for (int d = 0; d < 2 * D; d++) w->bnd[d] = e == p * R ? b[d] : merge_bound(w->bnd[d], b[d], d >= D);
  }
  return w->bnd;
}

/* i8: over the 8-bit form of the bounds (qgen_ref_bounds_i8) instead of the f16 ones, but
   for a view's pages of half a block, which keep only f16 bounds (base/layout.h). */
static void estimate(qgen_ref_scratch *w, const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                     int i8, double *scores) {
  const int D = L->head_dim, G = L->group;
  i8 = i8 && (!m->page_size || m->page_size == L->block);
  const int64_t n = qgen_pages_of(m->seq_len[seq], L->block);
  float *qf = w->qf;
  double *kmin = w->kmin, *kmax = w->kmax;
  traits(L->in_type)->to_f32(q, qf, (int64_t)L->n_head * D);

  for (int h = 0; h < L->n_head_kv; h++)
    for (int64_t p = 0; p < n; p++) {
      const uint16_t *bnd = m->page_size ? view_bounds(w, L, m, seq, p, h) : page_bounds(L, m, phys_page(m, seq, p), h);
      if (i8) {
        uint16_t so[2];
        if (qgen_ref_bounds_i8(bnd, D, so, w->codes) != 0) {
          scores[(int64_t)h * n + p] = NAN;
          continue;
        }
        qgen_ref_bounds_i8_decode(so, w->codes, D, kmin, kmax);
      } else {
        for (int d = 0; d < D; d++) {
          kmin[d] = qgen_f16_to_f32(bnd[d]);
          kmax[d] = qgen_f16_to_f32(bnd[D + d]);
        }
      }
      double best = -INFINITY;
      for (int g = 0; g < G; g++) {
        const float *qg = qf + (size_t)(h * G + g) * (size_t)D;
        double s = 0.0;
        for (int d = 0; d < D; d++) {
          const double qd = qg[d];
          s += qd > 0 ? qd * kmax[d] : qd < 0 ? qd * kmin[d] : 0.0;
        }
        if (isnan(s) || s > best) best = s; /* once NaN, stays NaN (NaN > x is false) */
      }
      scores[(int64_t)h * n + p] = best;
    }
}

void qgen_ref_estimate(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                       double *scores) {
  qgen_ref_scratch *w = scratch_or_die(L, 1);
  estimate(w, L, m, seq, q, 0, scores);
  qgen_ref_scratch_free(w);
}

void qgen_ref_estimate_i8(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                          double *scores) {
  qgen_ref_scratch *w = scratch_or_die(L, 1);
  estimate(w, L, m, seq, q, 1, scores);
  qgen_ref_scratch_free(w);
}

/* ---- 8-bit bounds ------------------------------------------------------------------- */

int qgen_ref_bounds_i8(const uint16_t *bnd, int D, uint16_t so[2], uint8_t *codes) {
  double lo = INFINITY, hi = -INFINITY;
  for (int d = 0; d < D; d++) {
    const double a = qgen_f16_to_f32(bnd[d]), b = qgen_f16_to_f32(bnd[D + d]);
    if (!isfinite(a) || !isfinite(b)) return -1;
    if (a < lo) lo = a;
    if (b > hi) hi = b;
  }
  /* lo is an f16 value, so the offset is exact; every sum below is exact in double (f16
     grid values times 8-bit integers) */
  const uint16_t off = qgen_f32_to_f16((float)(lo + 0.0)); /* + 0: a zero offset is +0, whichever zero came first */
  uint16_t sc = qgen_f32_to_f16_ru((float)((hi - lo) / 255.0));
  while (lo + 255.0 * qgen_f16_to_f32(sc) < hi) sc++; /* the next f16 up (sc is positive) */
  const double s = qgen_f16_to_f32(sc);
  for (int d = 0; d < D; d++) {
    const double a = qgen_f16_to_f32(bnd[d]), b = qgen_f16_to_f32(bnd[D + d]);
    double cl = s > 0 ? floor((a - lo) / s) : 0, ch = s > 0 ? ceil((b - lo) / s) : 0;
    cl = cl < 0 ? 0 : cl > 255 ? 255 : cl;
    ch = ch < 0 ? 0 : ch > 255 ? 255 : ch;
    while (cl > 0 && lo + cl * s > a) cl--;   /* the division may have rounded across */
    while (ch < 255 && lo + ch * s < b) ch++; /* lo + 255 s >= hi ends it */
    codes[d] = (uint8_t)cl;
    codes[D + d] = (uint8_t)ch;
  }
  so[0] = off;
  so[1] = sc;
  return 0;
}

void qgen_ref_bounds_i8_decode(const uint16_t so[2], const uint8_t *codes, int D, double *lo,
                               double *hi) {
  const double off = qgen_f16_to_f32(so[0]), s = qgen_f16_to_f32(so[1]);
  for (int d = 0; d < D; d++) {
    lo[d] = off + codes[d] * s;
    hi[d] = off + codes[D + d] * s;
  }
}

void qgen_ref_bounds_i8_row(const uint16_t *bnd, int D, uint8_t *row) {
  uint16_t so[2];
  memset(row, 0, (size_t)2 * D + 16);
  if (qgen_ref_bounds_i8(bnd, D, so, row) != 0) so[0] = so[1] = 0x7e00; /* NaN, codes 0: no 8-bit form */
  qgen_wr16(row + 2 * D, so[0]);
  qgen_wr16(row + 2 * D + 2, so[1]);
}

/* ---- select ------------------------------------------------------------------------- */

/* Best first: NaN above every number, then larger scores, ties to the lower page. */
static int rank_cmp(const void *pa, const void *pb) {
  const ranked *a = pa, *b = pb;
  const int na = isnan(a->score), nb = isnan(b->score);
  if (na != nb) return na ? -1 : 1;
  if (!na && a->score != b->score) return a->score > b->score ? -1 : 1;
  return a->page < b->page ? -1 : a->page > b->page ? 1 : 0;
}

/* Where the exact scores of two-stage selection come from: computed page by page from the
   compact K of KV head h (qf: the group's query rows as f32; row, blk: a row's room). */
/* The exact scores of KV head h: the group's query rows of nq tokens (q: [nq][n_head][D],
   in_type), a page's score the max over all of them. */
typedef struct {
  const qgen_layout *L;
  const qgen_kvmem *m;
  int seq, h, nq;
  const uint8_t *q;
  float *qf; /* G * D */
  float *row;
  uint8_t *blk;
} sketch_src;

/* The exact score of page p (qgen_ref_sketch_scores). */
static double sketch_page(const sketch_src *z, int64_t p) {
  const qgen_layout *L = z->L;
  const int D = L->head_dim, G = L->group, B = L->block;
  const int64_t len = z->m->seq_len[z->seq];
  const qgen_type_traits *kt = traits(L->k_type), *q4 = traits(QGEN_TYPE_Q4_0);
  double best = -INFINITY;
  for (int j = 0; j < z->nq; j++) {
    traits(L->in_type)->to_f32(z->q + ((size_t)j * (size_t)L->n_head + (size_t)z->h * (size_t)G) * L->in_row_bytes, z->qf,
                               (int64_t)G * D);
    for (int64_t t = p * B; t < len && t < (p + 1) * B; t++) {
      read_row(L, z->m, 0, z->seq, t, z->h, z->row);
      if (!kt->is_quant) { /* the q4_0 sketch of an unquantized cache */
        q4->from_f32(z->row, z->blk, D);
        q4->to_f32(z->blk, z->row, D);
      }
      for (int g = 0; g < G; g++) {
        const float *qg = z->qf + (size_t)g * (size_t)D;
        double dot = 0.0;
        for (int d = 0; d < D; d++) dot += (double)qg[d] * (double)z->row[d];
        if (isnan(dot) || dot > best) best = dot; /* once NaN, stays NaN */
      }
    }
  }
  return best;
}

/* Top-p (qgen_ref_select_top_p): how many of the c candidates cand (in stage-3 order) to keep,
   at most keep: NaN candidates (first) always, then the best until their estimated mass
   reaches p of that of all c candidates. A page's estimated mass is its token count times
   exp(scale * (exact - the candidates' largest finite exact score)). No finite positive
   total: keep them all. */
static int64_t mass_keep(const ranked *cand, int64_t c, int64_t keep, int64_t len, int block, double p, double scale) {
  double top = -INFINITY, total = 0, cum = 0;
  for (int64_t i = 0; i < c; i++)
    if (cand[i].score > top) top = cand[i].score;
#define PAGE_MASS(q, x) (isnan(x) || top == -INFINITY ? 0.0 \
    : (double)(((q) + 1) * block < len ? block : len - (q) * block) * exp(scale * ((x) - top)))
  for (int64_t i = 0; i < c; i++) total += PAGE_MASS(cand[i].page, cand[i].score);
  if (!(total > 0) || !isfinite(total)) return keep;
  int64_t i = 0;
  while (i < keep && (isnan(cand[i].score) || cum < p * total)) {
    cum += PAGE_MASS(cand[i].page, cand[i].score);
    i++;
  }
#undef PAGE_MASS
  return i;
}

/* chosen and cand: room for the sequence's pages. exact or z != NULL: two stages, the best
   r * K by scores are ranked again by exact (from the table, or computed from z only at
   the candidates); one stage otherwise. */
static int64_t select_pages(const qgen_budget *b, int64_t len, int block, const double *scores,
                            int r, const double *exact, const sketch_src *z, double top_p, double scale,
                            int32_t *list, uint8_t *chosen, ranked *cand) {
  const int64_t n = qgen_pages_of(len, block);
  if (n <= 0) return 0;
  const int64_t n_forced = qgen_forced_pages(b, len, block, chosen); /* forced pages chosen */
  const int64_t k = b->mode == QGEN_BUDGET_DENSE ? n : qgen_budget_pages(b, n, n_forced, block);

  if (k >= n) {
    memset(chosen, 1, (size_t)n);
  } else {
    int64_t nc = 0;
    for (int64_t p = 0; p < n; p++)
      if (!chosen[p]) {
        cand[nc].score = scores[p];
        cand[nc].page = p;
        nc++;
      }
    qsort(cand, (size_t)nc, sizeof *cand, rank_cmp);
    int64_t keep = k - n_forced;
    if (exact || z) {
      const int64_t c = keep * (r > 1 ? r : 1) < nc ? keep * (r > 1 ? r : 1) : nc;
      for (int64_t i = 0; i < c; i++) cand[i].score = z ? sketch_page(z, cand[i].page) : exact[cand[i].page];
      qsort(cand, (size_t)c, sizeof *cand, rank_cmp);
      if (top_p < 1) keep = mass_keep(cand, c, keep, len, block, top_p, scale);
    }
    for (int64_t i = 0; i < keep; i++) chosen[cand[i].page] = 1;
  }

  int64_t c = 0;
  for (int64_t p = 0; p < n; p++)
    if (chosen[p]) list[c++] = (int32_t)p;
  return c;
}

int64_t qgen_ref_select(const qgen_budget *b, int64_t len, int block, const double *scores,
                        int32_t *list) {
  const int64_t n = qgen_pages_of(len, block);
  if (n <= 0) return 0;
  uint8_t *chosen = xmalloc((size_t)n);
  ranked *cand = xmalloc((size_t)n * sizeof *cand);
  const int64_t c = select_pages(b, len, block, scores, 1, NULL, NULL, 1.0, 0.0, list, chosen, cand);
  free(chosen);
  free(cand);
  return c;
}

int64_t qgen_ref_select_rescore(const qgen_budget *b, int64_t len, int block, int r,
                                const double *bound, const double *exact, int32_t *list) {
  return qgen_ref_select_top_p(b, len, block, r, 1.0, 0.0, bound, exact, list);
}

int64_t qgen_ref_select_top_p(const qgen_budget *b, int64_t len, int block, int r, double p,
                              double scale, const double *bound, const double *exact, int32_t *list) {
  const int64_t n = qgen_pages_of(len, block);
  if (n <= 0) return 0;
  uint8_t *chosen = xmalloc((size_t)n);
  ranked *cand = xmalloc((size_t)n * sizeof *cand);
  const int64_t c = select_pages(b, len, block, bound, r, exact, NULL, p, scale, list, chosen, cand);
  free(chosen);
  free(cand);
  return c;
}

void qgen_ref_sketch_scores(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                            int h, const uint8_t *want, double *scores) {
  const int D = L->head_dim, G = L->group;
  const int64_t n = qgen_pages_of(m->seq_len[seq], L->block);
  float *qf = xmalloc((size_t)G * (size_t)D * sizeof *qf), *row = xmalloc((size_t)D * sizeof *row);
  uint8_t *blk = xmalloc(qgen_type_row_bytes(QGEN_TYPE_Q4_0, D));
  const sketch_src z = {L, m, seq, h, 1, q, qf, row, blk};
  for (int64_t p = 0; p < n; p++)
    if (!want || want[p]) scores[p] = sketch_page(&z, p);
  free(qf);
  free(row);
  free(blk);
}

/* ---- attend ------------------------------------------------------------------------- */

/* Tokens [first, len) of seq (n pages) that a list of cnt pages covers (a list may, in
   principle, repeat a page: then so do its tokens; a page outside the sequence is ignored). */
static int64_t listed_tokens(const int32_t *list, int64_t cnt, int64_t first, int64_t len, int64_t n, int B) {
  int64_t ntok = 0;
  for (int64_t i = 0; i < cnt; i++) {
    const int64_t p = list[i];
    if (p < 0 || p >= n) continue;
    const int64_t t0 = p * B > first ? p * B : first, t1 = (p + 1) * B < len ? (p + 1) * B : len;
    ntok += t1 > t0 ? t1 - t0 : 0;
  }
  return ntok;
}

/* Sparse-V: mark in w->drop the list's sub-tiles whose V an m-tile leaves out (ref.h's
   qgen_ref_order), from the scores s ([g][token], list order, ntok a head). */
static void mark_dropped(qgen_ref_scratch *w, const qgen_layout *L, const qgen_ref_order *ord, const int32_t *list,
                         int64_t cnt, int64_t len, int64_t n, const double *s, size_t ntok) {
  const int G = L->group, B = L->block, spp = B / 16, mt = (G + 15) / 16;
  const int groups = ord->groups < 1 ? 1 : ord->groups > QGEN_REF_MAX_GROUPS ? QGEN_REF_MAX_GROUPS : ord->groups;
  const int64_t per = ord->min_split_tokens / B > 0 ? ord->min_split_tokens / B : 1;
  int64_t ns = (cnt + per - 1) / per;
  if (ns > ord->max_splits) ns = ord->max_splits;
  if (ns < 1) ns = 1;
  const double tau = L->v_tau;
  int64_t tok = 0; /* first score of the current page */
  for (int64_t sp = 0, i = 0; sp < ns; sp++) {
    const int64_t p1 = cnt * (sp + 1) / ns;
    for (int k = 0; k < groups * G; k++) w->mrun[k] = -INFINITY;
    for (int64_t jt = 0; i < p1; i++) {
      const int64_t p = list[i];
      const int64_t valid = p < 0 || p >= n ? 0 : (p + 1) * B < len ? B : len - p * B;
      for (int k = 0; k < spp; k++, jt++) {
        const int64_t t0 = k * 16, t1 = valid < t0 + 16 ? valid : t0 + 16;
        double *mr = w->mrun + (size_t)(jt % groups) * (size_t)G;
        for (int t = 0; t < mt; t++) w->drop[((size_t)i * (size_t)spp + (size_t)k) * (size_t)mt + (size_t)t] = 1;
        for (int g = 0; g < G; g++) {
          const double *sg = s + (size_t)g * ntok + (size_t)tok;
          for (int64_t t = t0; t < t1; t++)
            if (sg[t] > mr[g]) mr[g] = sg[t];
          const double ref = mr[g] == -INFINITY ? 0.0 : mr[g];
          for (int64_t t = t0; t < t1; t++)
            if (!(exp(sg[t] - ref) < tau)) w->drop[((size_t)i * (size_t)spp + (size_t)k) * (size_t)mt + (size_t)(g / 16)] = 0;
        }
      }
      tok += valid;
    }
  }
}

/* One query (q: [n_head][D]) over tokens [first, len) of seq (len below its length for the
   earlier tokens of a multi-token step: causal; first > 0 for a window), restricted to the
   lists' pages; sinks (NULL: none), one logit a query head, each one more softmax term that
   weighs no value. Sparse-V (v_tau > 0) counts its sub-tiles from each page's start (first
   0) and takes no sinks. */
static void attend(qgen_ref_scratch *w, const qgen_layout *L, const qgen_kvmem *m, int seq, int64_t first,
                   int64_t len, const void *q, const int32_t *const *lists, const int64_t *counts,
                   const qgen_ref_order *ord, const float *sinks, void *out, double *out_f64) {
  static const qgen_ref_order plain = {1, 1, 1};
  if (!ord) ord = &plain;
  const int D = L->head_dim, G = L->group, B = L->block;
  const int64_t n = qgen_pages_of(len, B);
  double *res = out_f64 ? out_f64 : w->res;
  float *qf = w->qf;
  float *row = w->x;
  double *mx = w->mx, *sum = w->sum;
  int32_t *all = w->all;
  for (int64_t p = 0; p < n; p++) all[p] = (int32_t)p;

  memset(res, 0, (size_t)L->n_head * (size_t)D * sizeof *res);
  if (len > 0) traits(L->in_type)->to_f32(q, qf, (int64_t)L->n_head * D);

  for (int h = 0; h < L->n_head_kv && len > 0; h++) {
    const int32_t *list = lists ? lists[h] : all;
    const int64_t cnt = lists ? counts[h] : n;
    double *o = res + (size_t)h * (size_t)G * (size_t)D; /* the group's G output rows */

    const size_t ntok = (size_t)listed_tokens(list, cnt, first, len, n, B);
    if (ntok == 0) continue; /* an empty list attends to nothing: zeros */
    double *s = w->s; /* s[g * ntok + token] */

    /* pass 1: scores of every listed token, for every head of the group */
    int64_t nt = 0;
    for (int g = 0; g < G; g++) mx[g] = -INFINITY;
    for (int64_t i = 0; i < cnt; i++) {
      const int64_t p = list[i];
      if (p < 0 || p >= n) continue;
      for (int64_t t = p * B > first ? p * B : first; t < len && t < (p + 1) * B; t++, nt++) {
        read_row(L, m, 0, seq, t, h, row);
        for (int g = 0; g < G; g++) {
          const float *qg = qf + (size_t)(h * G + g) * (size_t)D;
          double dot = 0.0;
          for (int d = 0; d < D; d++) dot += (double)qg[d] * (double)row[d];
          const double st = L->scale * dot;
          s[(size_t)g * ntok + (size_t)nt] = st;
          if (st > mx[g]) mx[g] = st;
        }
      }
    }

    if (L->v_tau > 0) mark_dropped(w, L, ord, list, cnt, len, n, s, ntok);

    /* pass 2: softmax weights (a sink in the denominator only) and the weighted sum of the
       values, same token order */
    for (int g = 0; g < G; g++) {
      const double sk = sinks ? (double)sinks[h * G + g] : -INFINITY;
      if (sk > mx[g]) mx[g] = sk;
      sum[g] = sinks ? exp(sk - mx[g]) : 0.0;
    }
    nt = 0;
    const int spp = B / 16, mt = (G + 15) / 16;
    for (int64_t i = 0; i < cnt; i++) {
      const int64_t p = list[i];
      if (p < 0 || p >= n) continue;
      for (int64_t t = p * B > first ? p * B : first; t < len && t < (p + 1) * B; t++, nt++) {
        read_row(L, m, 1, seq, t, h, row);
        const uint8_t *drop = L->v_tau > 0 ? w->drop + ((size_t)i * (size_t)spp + (size_t)((t - p * B) / 16)) * (size_t)mt : NULL;
        for (int g = 0; g < G; g++) {
          const double w = exp(s[(size_t)g * ntok + (size_t)nt] - mx[g]);
          sum[g] += w;
          if (drop && drop[g / 16]) continue; /* sparse-V: counted, not added */
          for (int d = 0; d < D; d++) o[(size_t)g * D + d] += w * (double)row[d];
        }
      }
    }
    for (int g = 0; g < G; g++)
      for (int d = 0; d < D; d++) o[(size_t)g * D + d] /= sum[g];
  }

  if (out) {
    const qgen_type_traits *ot = traits(L->out_type);
    const size_t out_row = qgen_type_row_bytes(L->out_type, D);
    for (int hq = 0; hq < L->n_head; hq++) {
      for (int d = 0; d < D; d++) row[d] = (float)res[(size_t)hq * D + d];
      ot->from_f32(row, (uint8_t *)out + (size_t)hq * out_row, D);
    }
  }

}

void qgen_ref_attend_order(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                           const int32_t *const *lists, const int64_t *counts,
                           const qgen_ref_order *ord, void *out, double *out_f64) {
  const int64_t len = m->seq_len[seq], n = qgen_pages_of(len, L->block);
  int64_t tokens = len; /* room for the longest list's tokens */
  for (int h = 0; lists && len > 0 && h < L->n_head_kv; h++) {
    const int64_t t = listed_tokens(lists[h], counts[h], 0, len, n, L->block);
    if (t > tokens) tokens = t;
  }
  qgen_ref_scratch *w = scratch_or_die(L, tokens);
  attend(w, L, m, seq, 0, len, q, lists, counts, ord, NULL, out, out_f64);
  qgen_ref_scratch_free(w);
}

void qgen_ref_attend(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                     const int32_t *const *lists, const int64_t *counts, void *out,
                     double *out_f64) {
  qgen_ref_attend_order(L, m, seq, q, lists, counts, NULL, out, out_f64);
}

/* ---- step --------------------------------------------------------------------------- */

int64_t qgen_ref_extend_list(int32_t *list, int64_t count, int64_t len, int block, int64_t max_pages) {
  int64_t n = qgen_pages_of(len, block);
  if (n > max_pages) n = max_pages;
  while (count > 0 && list[count - 1] >= n) count--;
  for (int64_t p = count > 0 ? (int64_t)list[count - 1] + 1 : 0; p < n; p++) list[count++] = (int32_t)p;
  return count;
}

void qgen_ref_step_tokens_in(qgen_ref_scratch *w, const qgen_layout *L, const qgen_kvmem *m, int seq, int nq,
                             const qgen_ref_step_opts *so, const void *q, const qgen_budget *b, void *out,
                             double *out_f64, int32_t *lists_out, int64_t *counts_out) {
  const int64_t window = so ? so->window : 0;
  const int Hkv = L->n_head_kv;
  const int64_t len = m->seq_len[seq], n = qgen_pages_of(len, L->block);
  const size_t room = (size_t)(n > 0 ? n : 1), q_bytes = (size_t)L->n_head * L->in_row_bytes;
  const size_t out_bytes = qgen_type_row_bytes(L->out_type, L->head_dim) * (size_t)L->n_head;
  int32_t *lists = w->lists;
  int64_t *counts = w->counts;
  const int32_t **ptrs = w->ptrs;

  if (b && b->mode == QGEN_BUDGET_REUSE) { /* the last selection, extended in place */
    for (int h = 0; h < Hkv; h++) {
      int32_t *l = lists_out + (size_t)h * (size_t)m->pages_per_seq;
      counts_out[h] = counts[h] = qgen_ref_extend_list(l, counts_out[h], len, L->block, m->pages_per_seq);
      ptrs[h] = l;
    }
  } else {
    /* Dense when asked, when the layout keeps no bounds, or when K_eff covers every page. */
    int dense = !b || b->mode == QGEN_BUDGET_DENSE || !L->sparse || n == 0;
    if (!dense) {
      const int64_t nf = qgen_forced_pages(b, len, L->block, w->flags);
      dense = qgen_budget_pages(b, n, nf, L->block) >= n;
    }
    if (dense) {
      for (int h = 0; h < Hkv; h++) {
        for (int64_t p = 0; p < n; p++) lists[(size_t)h * room + (size_t)p] = (int32_t)p;
        counts[h] = n;
      }
    } else { /* one selection for the step's tokens: a page's score is the max over them */
      double *scores = w->scores, *best = w->best;
      for (int j = 0; j < nq; j++) {
        estimate(w, L, m, seq, (const uint8_t *)q + (size_t)j * q_bytes, L->bounds_i8, j ? scores : best);
        for (size_t i = 0; j && i < (size_t)Hkv * (size_t)n; i++)
          if (isnan(scores[i]) || scores[i] > best[i]) best[i] = scores[i]; /* once NaN, stays NaN */
      }
      for (int h = 0; h < Hkv; h++) { /* two-stage (rescore > 1): exact scores of the candidates */
        const sketch_src z = {L, m, seq, h, nq, q, w->qf, w->x, w->sk};
        counts[h] = select_pages(b, len, L->block, best + (size_t)h * (size_t)n, L->rescore, NULL,
                                 L->rescore > 1 ? &z : NULL, L->top_p, L->scale, lists + (size_t)h * room, w->flags,
                                 w->cand);
      }
    }
    for (int h = 0; h < Hkv; h++) ptrs[h] = lists + (size_t)h * room;
  }

  /* token j of the step sees the tokens before it and itself (all but the last nq - 1 - j),
     with a window only the last `window` of them */
  for (int j = 0; j < nq; j++) {
    const int64_t vis = len - (nq - 1 - j) > 0 ? len - (nq - 1 - j) : 0;
    const int64_t first = window > 0 && vis > window ? vis - window : 0;
    attend(w, L, m, seq, first, vis, (const uint8_t *)q + (size_t)j * q_bytes, ptrs, counts, NULL, so ? so->sinks : NULL,
           out ? (uint8_t *)out + (size_t)j * out_bytes : NULL,
           out_f64 ? out_f64 + (size_t)j * (size_t)L->n_head * (size_t)L->head_dim : NULL);
  }

  for (int h = 0; h < Hkv && !(b && b->mode == QGEN_BUDGET_REUSE); h++) {
    if (lists_out)
      memcpy(lists_out + (size_t)h * (size_t)m->pages_per_seq, ptrs[h],
             (size_t)counts[h] * sizeof *lists_out);
    if (counts_out) counts_out[h] = counts[h];
  }
}

void qgen_ref_step_in(qgen_ref_scratch *w, const qgen_layout *L, const qgen_kvmem *m, int seq,
                      const void *q, const qgen_budget *b, void *out, double *out_f64,
                      int32_t *lists_out, int64_t *counts_out) {
  qgen_ref_step_tokens_in(w, L, m, seq, 1, NULL, q, b, out, out_f64, lists_out, counts_out);
}

void qgen_ref_step(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                   const qgen_budget *b, void *out, double *out_f64, int32_t *lists_out,
                   int64_t *counts_out) {
  qgen_ref_scratch *w = scratch_or_die(L, m->seq_len[seq]);
  qgen_ref_step_in(w, L, m, seq, q, b, out, out_f64, lists_out, counts_out);
  qgen_ref_scratch_free(w);
}

/* ---- row ---------------------------------------------------------------------------- */

void qgen_ref_row(const qgen_layout *L, const qgen_kvmem *m, int which, int seq, int64_t t,
                  int h, double *dst) {
  const int D = L->head_dim;
  float *row = xmalloc((size_t)D * sizeof *row);
  read_row(L, m, which, seq, t, h, row);
  for (int d = 0; d < D; d++) dst[d] = row[d];
  free(row);
}
