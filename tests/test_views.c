/* test_views.c — cache views over a caller's pool (qgen_view_open) on the CPU backend: the
 * same tokens in an owned cache and in views of several layouts (vLLM NHD and HND, pages of
 * the spec's block and of half of it, shuffled page tables) give bit-identical dense
 * output and identical sparse page lists, with bounds kept by qgen_view_update in two
 * chunks of slots, for a spec of 8-bit bounds (the default: a view of half-block pages
 * then ranks by its f16 bounds, so it equals an f16 spec's owned cache) and one of f16
 * bounds; bad descriptions, writes through a view and the spec a view cannot keep
 * (two-stage selection) are refused, and so are sizes that overflow and (by the CPU
 * backend's attend) lengths and block table entries out of range; two sequences whose block
 * tables share a prefix's pages select and attend as an owned cache of each alone. Prints
 * one line per check and "N passed, N failed".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/qgen.h"
#include "base/qtypes.h"
#include "base/rng.h"

#include "testlib.h"

enum { D = 64, HQ = 8, HKV = 2, BLOCK = 32, SEQS = 4, MAXTOK = 700 };
/* A CPU context of the views' shape with these sparse fields besides block and coverage
   (bounds unnamed: the default, i8); NULL, and a failed check, if it does not open. */
static qgen_ctx *open_spec(const char *sparse_extra) {
  char text[512];
  snprintf(text, sizeof text, "return spec{ name = 'views', head_dim = 64, n_head = 8, n_head_kv = 2, k_type = 'f16',"
                              " v_type = 'f16', sparse = { block = 32, coverage = 0.3, %s } }", sparse_extra);
  qgen_open_opts oo = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  qgen_ctx *ctx = NULL;
  if (qgen_open_text(&ctx, text, "views", &oo) != QGEN_OK) {
    check(0, "open %s: %s", sparse_extra, qgen_error(ctx));
    qgen_close(ctx);
    return NULL;
  }
  return ctx;
}

static uint64_t rng = 0x1234567ull;

/* One view layout: page size and whether heads are outside tokens (HND); own holds the same
   tokens, read by the bounds the view's estimate reads; i8: ctx's spec has 8-bit bounds. */
static void run_layout(qgen_ctx *ctx, qgen_kv *own, const uint16_t *k, const uint16_t *v, const int *len, const uint16_t *q,
                       int page, int hnd, int i8) {
  const int max_blocks = (MAXTOK + page - 1) / page, n_pages = SEQS * max_blocks + 3;
  const long long row = D * 2, tok = hnd ? row : HKV * row, head = hnd ? page * row : row, pstride = (long long)page * HKV * row;
  uint16_t *kp = calloc((size_t)n_pages * page * HKV * D, 2), *vp = calloc((size_t)n_pages * page * HKV * D, 2);
  int32_t *bt = malloc(sizeof(int32_t) * SEQS * max_blocks), seq_lens[SEQS];
  int *perm = malloc(sizeof(int) * n_pages);
  for (int i = 0; i < n_pages; i++) perm[i] = i;
  for (int i = n_pages - 1; i > 0; i--) { /* shuffled physical pages */
    int j = (int)(qgen_rng_next(&rng) % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  int64_t *slots = malloc(sizeof(int64_t) * SEQS * MAXTOK);
  int ns = 0;
  long long r0 = 0;
  for (int s = 0; s < SEQS; s++) {
    for (int b = 0; b < max_blocks; b++) bt[s * max_blocks + b] = perm[s * max_blocks + b];
    seq_lens[s] = len[s];
    for (int t = 0; t < len[s]; t++, r0++) {
      const long long pg = bt[s * max_blocks + t / page], sl = t % page;
      for (int h = 0; h < HKV; h++) {
        const size_t off = (size_t)((pg * pstride + sl * tok + h * head) / 2);
        memcpy(kp + off, k + (r0 * HKV + h) * D, row);
        memcpy(vp + off, v + (r0 * HKV + h) * D, row);
      }
      slots[ns++] = pg * page + sl;
    }
  }
  qgen_view_desc d = {(qgen_ptr)(uintptr_t)kp, (qgen_ptr)(uintptr_t)vp, page, n_pages, pstride, tok, head, pstride, tok, head,
                      (qgen_ptr)(uintptr_t)bt, max_blocks, (qgen_ptr)(uintptr_t)seq_lens, SEQS, max_blocks};
  qgen_kv *view = NULL;
  qgen_status st = qgen_view_open(ctx, &d, &view);
  check(st == QGEN_OK, "view page %d %s opens%s%s", page, hnd ? "HND" : "NHD", st ? ": " : "", st ? qgen_error(ctx) : "");
  if (st != QGEN_OK) return;
  /* two chunks: the second merges into pages the first started */
  check(qgen_view_update(view, (qgen_ptr)(uintptr_t)slots, ns / 2, 8, NULL) == QGEN_OK &&
            qgen_view_update(view, (qgen_ptr)(uintptr_t)(slots + ns / 2), ns - ns / 2, 8, NULL) == QGEN_OK,
        "view page %d: qgen_view_update", page);
  const size_t ob = (size_t)SEQS * HQ * D * 2;
  uint16_t *o1 = malloc(ob), *o2 = malloc(ob);
  int seq[SEQS] = {0, 1, 2, 3};
  for (int mode = 0; mode < 2; mode++) {
    qgen_attend_opts o = qgen_attend_defaults(ctx);
    o.mode = mode ? QGEN_ATTEND_SPARSE : QGEN_ATTEND_DENSE;
    qgen_attend(own, seq, SEQS, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)o1, &o, NULL);
    st = qgen_attend(view, seq, SEQS, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)o2, &o, NULL);
    check(st == QGEN_OK && memcmp(o1, o2, ob) == 0, "view page %d %s %s: output bit-identical to the owned cache", page,
          hnd ? "HND" : "NHD", mode ? "sparse" : "dense");
  }
  const long long pps = qgen_kv_pages_per_seq(own);
  int *l1 = malloc(sizeof(int) * HKV * pps), *l2 = malloc(sizeof(int) * HKV * pps), c1[HKV], c2[HKV];
  int same = 1;
  for (int s = 0; s < SEQS; s++) {
    memset(l1, 0, sizeof(int) * HKV * pps);
    memset(l2, 0, sizeof(int) * HKV * pps);
    qgen_kv_selection(own, s, l1, c1);
    qgen_kv_selection(view, s, l2, c2);
    same &= qgen_kv_pages_per_seq(view) == pps && memcmp(c1, c2, sizeof c1) == 0 && memcmp(l1, l2, sizeof(int) * HKV * pps) == 0;
  }
  check(same, "view page %d %s: sparse page lists equal the owned cache's", page, hnd ? "HND" : "NHD");
  int one = 1;
  check(qgen_append(view, seq, 1, &one, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL) == QGEN_ERR_INVALID_ARG &&
            strstr(qgen_error(ctx), "view") != NULL,
        "qgen_append on a view is refused: %s", qgen_error(ctx));
  check(qgen_reset(view, 0) == QGEN_ERR_INVALID_ARG && qgen_rollback(view, 0, 1) == QGEN_ERR_INVALID_ARG &&
            strstr(qgen_error(ctx), "qgen_rollback: this is a view") && qgen_seq_len(view, 0) == -1 &&
            qgen_kv_size(view, QGEN_KV_K) == 0 && qgen_kv_size(view, QGEN_KV_BOUNDS) > 0 &&
            (qgen_kv_size(view, QGEN_KV_BOUNDS_I8) > 0) == (i8 && page == BLOCK),
        "a view: no reset, no rollback, no host length, only its bounds to read (8-bit rows: %zu bytes)", qgen_kv_size(view, QGEN_KV_BOUNDS_I8));
  qgen_cache_destroy(view);
  /* bad descriptions */
  qgen_view_desc bad = d;
  bad.page_size = 48;
  check(qgen_view_open(ctx, &bad, &view) == QGEN_ERR_UNSUPPORTED && !view, "page_size 48 refused: %s", qgen_error(ctx));
  bad = d;
  bad.k_token_stride = 64; /* rows of 128 bytes overlap */
  check(qgen_view_open(ctx, &bad, &view) == QGEN_ERR_INVALID_ARG, "overlapping rows refused: %s", qgen_error(ctx));
  bad = d;
  bad.v = d.v + 2;
  check(qgen_view_open(ctx, &bad, &view) == QGEN_ERR_INVALID_ARG, "misaligned v refused: %s", qgen_error(ctx));
  bad = d;
  bad.block_table_stride = max_blocks - 1;
  check(qgen_view_open(ctx, &bad, &view) == QGEN_ERR_INVALID_ARG, "short block table rows refused: %s", qgen_error(ctx));
  free(kp), free(vp), free(bt), free(perm), free(slots), free(o1), free(o2), free(l1), free(l2);
}

/* A valid pool whose page bounds (qgen's side data) cannot be allocated: 2^31 - 1 pages of
   128 KiB of bounds (head_dim 256, 128 KV heads) are 256 TiB, more than a 47-bit address
   space, so even a host that overcommits memory refuses them (a smaller spec's 1 TiB opened
   on one that does). Out of memory, named as qgen_view_open's, with the bytes. */
static void side_data_oom(void) {
  const char *text = "return spec{ name = 'vbig', head_dim = 256, n_head = 128, n_head_kv = 128, k_type = 'f16', v_type = 'f16',"
                     " sparse = { block = 32, coverage = 0.3 } }";
  qgen_open_opts oo = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  qgen_ctx *ctx = NULL;
  if (qgen_open_text(&ctx, text, "vbig", &oo) != QGEN_OK) {
    check(0, "open vbig: %s", qgen_error(ctx));
    qgen_close(ctx);
    return;
  }
  const long long row = 256 * 2, tok = 128 * row, pst = 32 * tok;
  static int32_t bt[4], lens[1];
  const qgen_view_desc d = {(qgen_ptr)4096, (qgen_ptr)4096, 32, INT32_MAX, pst, tok, row, pst, tok, row,
                            (qgen_ptr)(uintptr_t)bt, 4, (qgen_ptr)(uintptr_t)lens, 1, 4};
  qgen_kv *view = NULL;
  const qgen_status st = qgen_view_open(ctx, &d, &view);
  check(st == QGEN_ERR_OUT_OF_MEMORY && !view && !strncmp(qgen_error(ctx), "qgen_view_open: ", 16) && strstr(qgen_error(ctx), " bytes"),
        "a view whose side data does not fit: out of memory, named as qgen_view_open's: %s", qgen_error(ctx));
  qgen_cache_destroy(view);
  qgen_close(ctx);
}

/* qgen_view_open refuses a spec whose selection needs what a view does not keep, naming the
   field (before it reads the description). */
static void refused_spec(const char *sparse_extra, const char *field) {
  qgen_ctx *ctx = open_spec(sparse_extra);
  if (!ctx) return;
  qgen_view_desc d;
  memset(&d, 0, sizeof d);
  qgen_kv *view = NULL;
  check(qgen_view_open(ctx, &d, &view) == QGEN_ERR_UNSUPPORTED && !view && strstr(qgen_error(ctx), field) != NULL,
        "a view of a spec with %s is refused: %s", sparse_extra, qgen_error(ctx));
  qgen_close(ctx);
}

/* Hostile descriptions and contents: sizes whose products overflow are refused, not
   wrapped; lengths and block table entries out of range are refused by the CPU backend's
   attend (its reference would read outside the pool or its scratch), changing nothing. */
static void hostile(qgen_ctx *ctx) {
  enum { NP = 8, P = BLOCK, MB = 4 };
  uint16_t *kp = calloc((size_t)NP * P * HKV * D, 2), *vp = calloc((size_t)NP * P * HKV * D, 2), q[2 * HQ * D] = {0};
  uint16_t o[2 * HQ * D];
  int32_t bt[2 * MB] = {0, 1, 2, 3, 4, 5, 6, 7}, lens[2] = {40, 100};
  const long long row = D * 2, tok = HKV * row, pst = P * tok;
  const qgen_view_desc g = {(qgen_ptr)(uintptr_t)kp, (qgen_ptr)(uintptr_t)vp, P, NP, pst, tok, row, pst, tok, row,
                            (qgen_ptr)(uintptr_t)bt, MB, (qgen_ptr)(uintptr_t)lens, 2, MB};
  qgen_view_desc d = g;
  qgen_kv *view = NULL;
  d.page_size = INT32_MIN; /* 2 * page_size would overflow */
  check(qgen_view_open(ctx, &d, &view) == QGEN_ERR_UNSUPPORTED && !view, "page_size INT_MIN refused: %s", qgen_error(ctx));
  d = g;
  d.max_blocks = d.block_table_stride = INT64_MAX; /* max_blocks * page_size wrapped to a small size */
  check(qgen_view_open(ctx, &d, &view) == QGEN_ERR_INVALID_ARG && !view && strstr(qgen_error(ctx), "max_blocks"),
        "max_blocks = 2^63 - 1 refused: %s", qgen_error(ctx));
  d = g;
  d.k_page_stride = INT64_MAX & ~15LL; /* the pages' extent wrapped */
  check(qgen_view_open(ctx, &d, &view) == QGEN_ERR_INVALID_ARG && !view && strstr(qgen_error(ctx), "k_page_stride"),
        "a page stride whose pool spans over 2^63 bytes refused: %s", qgen_error(ctx));
  d = g;
  d.v_head_stride = INT64_MAX & ~15LL, d.v_token_stride = 2 * row;
  check(qgen_view_open(ctx, &d, &view) == QGEN_ERR_INVALID_ARG && !view && strstr(qgen_error(ctx), "v_head_stride"),
        "a head stride whose pool spans over 2^63 bytes refused: %s", qgen_error(ctx));
  d = g;
  if (qgen_view_open(ctx, &d, &view) != QGEN_OK) {
    check(0, "hostile: the good view opens: %s", qgen_error(ctx));
    return;
  }
  int64_t slot = 0;
  check(qgen_view_update(view, (qgen_ptr)(uintptr_t)&slot, 1LL << 34, 8, NULL) == QGEN_ERR_INVALID_ARG && strstr(qgen_error(ctx), "n = "),
        "qgen_view_update of 2^34 slots refused (the GPU grid would wrap): %s", qgen_error(ctx));
  int seq[2] = {0, 1};
  const qgen_attend_opts dense = {.mode = QGEN_ATTEND_DENSE, .coverage = 1.0};
  check(qgen_attend(view, seq, 2, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)o, &dense, NULL) == QGEN_OK, "hostile: the good view attends");
  struct { int32_t *at, value; const char *what, *field; } bad[] = {
      {&lens[1], MB * P + 1, "seq_lens past max_blocks * page_size", "seq_lens[1]"},
      {&lens[0], -1, "a negative seq_lens", "seq_lens[0]"},
      {&bt[MB + 3], NP, "a block table entry past n_pages", "block_table[1][3]"},
      {&bt[1], -1, "a negative block table entry", "block_table[0][1]"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    const int32_t keep = *bad[i].at;
    *bad[i].at = bad[i].value;
    memset(o, 0x55, sizeof o);
    const qgen_status st = qgen_attend(view, seq, 2, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)o, &dense, NULL);
    check(st == QGEN_ERR_INVALID_ARG && strstr(qgen_error(ctx), bad[i].field) && o[0] == 0x5555,
          "%s: attend refused, nothing written: %s", bad[i].what, qgen_error(ctx));
    *bad[i].at = keep;
  }
  bt[3] = NP; /* past sequence 0's 40 tokens: never read, so no error */
  check(qgen_attend(view, seq, 2, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)o, &dense, NULL) == QGEN_OK,
        "a bad entry past the sequence's pages is not read");
  qgen_cache_destroy(view);
  free(kp), free(vp);
}

/* Two sequences of a view whose block tables share the pages of a prefix (an engine's
   prefix cache: 64 tokens, two pages) attend, select and keep bounds as an owned cache that
   holds each sequence's tokens alone: sequence 0 the prefix and 26 more, sequence 1 the
   prefix and 40 of its own, on pages after the shared ones. */
static void shared_prefix_view(qgen_ctx *ctx) {
  enum { PAGES = 8, ROWS = PAGES * BLOCK };
  uint16_t *kp = calloc((size_t)ROWS * HKV * D, 2), *vp = calloc((size_t)ROWS * HKV * D, 2), q[2 * HQ * D];
  uint16_t *k = malloc(130 * HKV * D * 2), *v = malloc(130 * HKV * D * 2);
  for (int i = 0; i < 130 * HKV * D; i++) k[i] = qgen_f32_to_f16((float)qgen_rng_signed(&rng) * 2.0f), v[i] = qgen_f32_to_f16((float)qgen_rng_signed(&rng));
  for (int i = 0; i < 2 * HQ * D; i++) q[i] = qgen_f32_to_f16((float)qgen_rng_signed(&rng));
  /* token rows: the prefix [0, 64), sequence 0's own [64, 90), sequence 1's own [90, 130) */
  int32_t bt[2 * 4] = {5, 2, 7, -1, 5, 2, 0, 3}, lens[2] = {90, 104};
  int64_t slots[130];
  for (int t = 0; t < 130; t++) {
    const int s = t >= 90, pos = t < 90 ? t : 64 + (t - 90), page = bt[s * 4 + pos / BLOCK];
    slots[t] = (int64_t)page * BLOCK + pos % BLOCK;
    memcpy(kp + (size_t)slots[t] * HKV * D, k + (size_t)t * HKV * D, HKV * D * 2);
    memcpy(vp + (size_t)slots[t] * HKV * D, v + (size_t)t * HKV * D, HKV * D * 2);
  }
  const long long row = D * 2;
  qgen_view_desc d = {(qgen_ptr)(uintptr_t)kp, (qgen_ptr)(uintptr_t)vp, BLOCK, PAGES, BLOCK * HKV * row, HKV * row, row,
                      BLOCK * HKV * row, HKV * row, row, (qgen_ptr)(uintptr_t)bt, 4, (qgen_ptr)(uintptr_t)lens, 2, 4};
  qgen_kv *view = NULL, *own = NULL;
  int seq[2] = {0, 1}, s1 = 1, n64 = 64, n40 = 40;
  int ok = qgen_view_open(ctx, &d, &view) == QGEN_OK && qgen_view_update(view, (qgen_ptr)(uintptr_t)slots, 130, 8, NULL) == QGEN_OK &&
           qgen_cache_create(ctx, &own, 2, 200) == QGEN_OK &&
           qgen_append(own, seq, 1, (int[]){90}, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL) == QGEN_OK &&
           qgen_append(own, &s1, 1, &n64, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL) == QGEN_OK &&
           qgen_append(own, &s1, 1, &n40, (qgen_ptr)(uintptr_t)(k + 90 * HKV * D), (qgen_ptr)(uintptr_t)(v + 90 * HKV * D), NULL) == QGEN_OK;
  qgen_attend_opts o = qgen_attend_defaults(ctx), dense = o;
  o.coverage = 0.5, dense.mode = QGEN_ATTEND_DENSE;
  uint16_t ov[2 * HQ * D], oo[2 * HQ * D];
  for (int m = 0; m < 2 && ok; m++) {
    ok = qgen_attend(view, seq, 2, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)ov, m ? &dense : &o, NULL) == QGEN_OK &&
         qgen_attend(own, seq, 2, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)oo, m ? &dense : &o, NULL) == QGEN_OK &&
         !memcmp(ov, oo, sizeof ov);
    for (int s = 0; s < 2 && ok && m == 0; s++) {
      int lv[HKV * 4], cv[HKV], lo[HKV * 7], co[HKV];
      ok = qgen_kv_selection(view, s, lv, cv) == QGEN_OK && qgen_kv_selection(own, s, lo, co) == QGEN_OK && !memcmp(cv, co, sizeof cv);
      for (int h = 0; h < HKV && ok; h++) ok = !memcmp(lv + h * qgen_kv_pages_per_seq(view), lo + h * qgen_kv_pages_per_seq(own), (size_t)cv[h] * sizeof *lv);
    }
  }
  check(ok, "a view whose two sequences share a 64-token prefix's pages: sparse lists and outputs, and dense outputs, "
        "of an owned cache holding each sequence alone%s%s", ok ? "" : ": ", ok ? "" : qgen_error(ctx));
  qgen_cache_destroy(view);
  qgen_cache_destroy(own);
  free(kp), free(vp), free(k), free(v);
}

int main(void) {
  qgen_ctx *ctx = open_spec("sink = 0, recent = 0"), *c16 = open_spec("sink = 0, recent = 0, bounds = 'f16'");
  qgen_kv *own = NULL, *own16 = NULL;
  if (!ctx || !c16 || qgen_cache_create(ctx, &own, SEQS, MAXTOK) != QGEN_OK || qgen_cache_create(c16, &own16, SEQS, MAXTOK) != QGEN_OK) return 1;
  const int len[SEQS] = {700, 1, 333, 64}; /* ragged: full, one token, partial pages, whole pages */
  int total = 0;
  for (int s = 0; s < SEQS; s++) total += len[s];
  uint16_t *k = malloc((size_t)total * HKV * D * 2), *v = malloc((size_t)total * HKV * D * 2), q[SEQS * HQ * D];
  for (long long i = 0; i < (long long)total * HKV * D; i++) {
    k[i] = qgen_f32_to_f16((float)qgen_rng_signed(&rng) * 2.0f);
    v[i] = qgen_f32_to_f16((float)qgen_rng_signed(&rng));
  }
  for (int i = 0; i < SEQS * HQ * D; i++) q[i] = qgen_f32_to_f16((float)qgen_rng_signed(&rng));
  int seq[SEQS] = {0, 1, 2, 3};
  qgen_append(own, seq, SEQS, len, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL);
  qgen_append(own16, seq, SEQS, len, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL);
  { /* the two specs' owned caches rank differently, so the views below tell them apart */
    qgen_attend_opts o = qgen_attend_defaults(ctx);
    o.mode = QGEN_ATTEND_SPARSE;
    uint16_t o8[SEQS * HQ * D], o16[SEQS * HQ * D];
    const int ok = qgen_attend(own, seq, SEQS, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)o8, &o, NULL) == QGEN_OK &&
                   qgen_attend(own16, seq, SEQS, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)o16, &o, NULL) == QGEN_OK;
    check(ok && memcmp(o8, o16, sizeof o8) != 0, "8-bit and f16 bounds select differently on these keys");
  }
  for (int page = BLOCK; page >= BLOCK / 2; page /= 2)
    for (int hnd = 0; hnd < 2; hnd++) {
      run_layout(ctx, page == BLOCK ? own : own16, k, v, len, q, page, hnd, 1);
      run_layout(c16, own16, k, v, len, q, page, hnd, 0);
    }
  hostile(ctx);
  shared_prefix_view(ctx);
  qgen_cache_destroy(own);
  qgen_cache_destroy(own16);
  qgen_close(ctx);
  qgen_close(c16);
  free(k), free(v);
  side_data_oom();
  refused_spec("rescore = { candidates = 4 }", "sparse.rescore");
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
