/* test_api.c — the public API (qgen.h) against bad arguments, on the CPU backend, or on the
 * GPU backend with QGEN_TEST_BACKEND=gpu (then host buffers are mirrored to device memory
 * when passed to a call, and outputs are copied back before they are inspected; exit 77
 * without a GPU).
 *
 * A cache of specs/qwen3-4b.lua (sparse) gets valid random data; then every bad call is
 * made and must return its exact status, leave every array of the cache byte-identical
 * (K, V, bounds, page table, seq_len, the host lengths and the last page selections), not
 * touch the output buffer, and leave a message naming the function in qgen_error(). Good
 * calls must still work afterwards. A small dense spec (written to a temp file) covers the
 * sparse-only calls. qgen_open, qgen_cache_create and qgen_status_str get their own bad
 * inputs. qgen_append_decode steps must equal qgen_append of one token at a time. Prints one line per check and "N passed, N failed".
 */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cudrv.h"
#include "runtime/qgen.h"
#include "runtime/qgen_ext.h" /* only to clear ctx's message before a call, so a stale one can't pass */
#include "base/qtypes.h"
#include "base/rng.h"
#include "base/util.h"
#include "ref/ref.h"
#include "spec/spec.h"

#include "testlib.h"

#ifndef QGEN_SOURCE_DIR
#define QGEN_SOURCE_DIR "."
#endif



static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { return (float)qgen_rng_signed(&rng); } /* uniform in [-1, 1) */

/* ---- buffers: host memory, mirrored on the device in GPU mode ------------------------ */

static qgen_backend backend = QGEN_BACKEND_CPU;
typedef struct {
  void *h;
  size_t n;
  CUdeviceptr d;
} mirror;
static mirror mirrors[256];
static int n_mirrors;

/* malloc that remembers the size, so P() can mirror the buffer */
static void *tmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) abort();
  if (n_mirrors == (int)(sizeof mirrors / sizeof *mirrors)) abort();
  mirrors[n_mirrors++] = (mirror){p, n, 0};
  return p;
}
static mirror *mirror_of(const void *p) {
  for (int i = n_mirrors - 1; i >= 0; i--)
    if ((const char *)p >= (const char *)mirrors[i].h && (const char *)p < (const char *)mirrors[i].h + mirrors[i].n)
      return &mirrors[i];
  return NULL;
}
static void tfree(void *p) {
  mirror *m = mirror_of(p);
  if (m) {
    if (m->d) qgen_cudrv_get(NULL)->cuMemFree(m->d);
    *m = mirrors[--n_mirrors];
  }
  free(p);
}

/* The pointer a call gets: the host address (CPU backend), or the device mirror of the
   buffer holding it, refreshed from the host now (GPU backend). */
static qgen_ptr P(const void *p) {
  if (backend == QGEN_BACKEND_CPU || !p) return (qgen_ptr)(uintptr_t)p;
  mirror *m = mirror_of(p);
  if (!m) abort();
  const qgen_cudrv *cu = qgen_cudrv_get(NULL);
  if (!m->d && cu->cuMemAlloc(&m->d, m->n) != CUDA_SUCCESS) abort();
  if (cu->cuMemcpyHtoD(m->d, m->h, m->n) != CUDA_SUCCESS) abort();
  return m->d + (CUdeviceptr)((const char *)p - (const char *)m->h);
}
/* Copy a buffer's device mirror back to the host (after a call that may write it). */
static void pull(void *p) {
  mirror *m = backend == QGEN_BACKEND_GPU ? mirror_of(p) : NULL;
  if (!m || !m->d) return;
  const qgen_cudrv *cu = qgen_cudrv_get(NULL);
  if (cu->cuCtxSynchronize() != CUDA_SUCCESS || cu->cuMemcpyDtoH(m->h, m->d, m->n) != CUDA_SUCCESS) abort();
}

static uint16_t *f16_rows(size_t n) {
  uint16_t *p = tmalloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = qgen_f32_to_f16(frand());
  return p;
}


/* ---- snapshots of a cache --------------------------------------------------------- */

#define N_ARRAYS (QGEN_KV_BOUNDS_I8 + 1)
#define MAX_SEQS 4
#define MAX_TOKENS 256

typedef struct {
  void *a[N_ARRAYS];
  size_t n[N_ARRAYS];
  long long len[MAX_SEQS];
  int *lists[MAX_SEQS], *counts[MAX_SEQS]; /* sparse specs */
} snap;

static void snap_take(qgen_kv *kv, int sparse, snap *s) {
  memset(s, 0, sizeof *s);
  for (int w = 0; w < N_ARRAYS; w++) {
    s->n[w] = qgen_kv_size(kv, w);
    s->a[w] = malloc(s->n[w] ? s->n[w] : 1);
    if (!s->a[w]) abort();
    if (s->n[w] && qgen_kv_read(kv, w, s->a[w], s->n[w]) != QGEN_OK) abort();
  }
  long long pps = qgen_kv_pages_per_seq(kv);
  for (int q = 0; q < MAX_SEQS; q++) {
    s->len[q] = qgen_seq_len(kv, q);
    if (!sparse) continue;
    s->lists[q] = calloc((size_t)(8 * pps), sizeof(int));
    s->counts[q] = calloc(8, sizeof(int));
    if (!s->lists[q] || !s->counts[q]) abort();
  }
  if (sparse) /* the sequences the cache has (qgen_seq_len is -1 past them) */
    for (int q = 0; q < MAX_SEQS && s->len[q] >= 0; q++)
      if (qgen_kv_selection(kv, q, s->lists[q], s->counts[q]) != QGEN_OK) abort();
}

static void snap_free(snap *s) {
  for (int w = 0; w < N_ARRAYS; w++) free(s->a[w]);
  for (int q = 0; q < MAX_SEQS; q++) free(s->lists[q]), free(s->counts[q]);
}

static int snap_same(qgen_kv *kv, int sparse, const snap *s) {
  snap now;
  snap_take(kv, sparse, &now);
  int same = 1;
  for (int w = 0; w < N_ARRAYS; w++)
    same &= now.n[w] == s->n[w] && memcmp(now.a[w], s->a[w], s->n[w]) == 0;
  long long pps = qgen_kv_pages_per_seq(kv);
  for (int q = 0; q < MAX_SEQS; q++) {
    same &= now.len[q] == s->len[q];
    if (sparse)
      same &= !memcmp(now.lists[q], s->lists[q], (size_t)(8 * pps) * sizeof(int)) &&
              !memcmp(now.counts[q], s->counts[q], 8 * sizeof(int));
  }
  snap_free(&now);
  return same;
}

/* ---- the fixture -------------------------------------------------------------------- */

typedef struct {
  qgen_ctx *ctx;
  qgen_kv *kv;
  qgen_info info;
  int sparse;
  size_t row_elems; /* f16 elements of one token's k or v row (all KV heads) */
  size_t q_elems, out_elems;
  snap s;
  uint8_t *out; /* the output buffer of bad attends: must stay as it was */
  size_t out_bytes;
} fixture;

/* The call returned want, the cache and the output buffer are unchanged, and qgen_error
   names fn. */
static void expect(fixture *f, const char *what, qgen_status got, qgen_status want, const char *fn) {
  const char *msg = qgen_error(f->ctx);
  pull(f->out);
  int unchanged = snap_same(f->kv, f->sparse, &f->s);
  int out_ok = 1;
  for (size_t i = 0; i < f->out_bytes; i++) out_ok &= f->out[i] == 0xA5;
  int named = fn == NULL || (msg && *msg && strstr(msg, fn) != NULL);
  check(got == want && unchanged && out_ok && named, "%s: %s (want %s)%s%s%s -- \"%s\"", what,
        qgen_status_str(got), qgen_status_str(want), unchanged ? "" : ", CACHE CHANGED",
        out_ok ? "" : ", OUTPUT WRITTEN", named ? "" : ", message does not name the function", fn ? msg : "");
}

#define EXPECT(f, what, call, want, fn) \
  do {                                  \
    qgen_ext_clear_error((f)->ctx);              \
    qgen_status st_ = (call);           \
    expect((f), (what), st_, (want), (fn)); \
  } while (0)

static int open_cpu(const char *path, const char *variant, qgen_ctx **ctx) {
  qgen_open_opts o = {backend, 0, variant, NULL};
  qgen_status st = qgen_open(ctx, path, &o);
  if (st != QGEN_OK) {
    printf("cannot open %s: %s: %s\n", path, qgen_status_str(st), qgen_error(*ctx));
    return -1;
  }
  return 0;
}

static int setup(fixture *f, const char *path) {
  memset(f, 0, sizeof *f);
  if (open_cpu(path, NULL, &f->ctx) != 0) return -1;
  qgen_get_info(f->ctx, &f->info);
  f->sparse = f->info.sparse;
  if (qgen_cache_create(f->ctx, &f->kv, MAX_SEQS, MAX_TOKENS) != QGEN_OK) {
    printf("cannot create a cache: %s\n", qgen_error(f->ctx));
    return -1;
  }
  f->row_elems = (size_t)f->info.n_head_kv * f->info.head_dim;
  f->q_elems = (size_t)f->info.n_head * f->info.head_dim;
  f->out_elems = f->q_elems;
  /* Sequences 0, 1 and 2 get tokens (0 twice, across a page boundary); 3 stays empty. */
  int seq[3] = {2, 0, 1}, n_new[3] = {5, 100, 37};
  int total = 5 + 100 + 37;
  uint16_t *k = f16_rows((size_t)total * f->row_elems), *v = f16_rows((size_t)total * f->row_elems);
  qgen_status st = qgen_append(f->kv, seq, 3, n_new, P(k), P(v), NULL);
  pull(k);
  tfree(k), tfree(v);
  int s0 = 0, n0 = 50;
  k = f16_rows((size_t)n0 * f->row_elems), v = f16_rows((size_t)n0 * f->row_elems);
  if (st == QGEN_OK) st = qgen_append(f->kv, &s0, 1, &n0, P(k), P(v), NULL);
  pull(k);
  tfree(k), tfree(v);
  if (st != QGEN_OK) {
    printf("setup append failed: %s\n", qgen_error(f->ctx));
    return -1;
  }
  if (f->sparse) { /* a selection to keep: attend sequences 0 and 1 */
    int s2[2] = {0, 1};
    uint16_t *q = f16_rows(2 * f->q_elems), *o = tmalloc(2 * f->out_elems * 2);
    st = qgen_attend(f->kv, s2, 2, P(q), P(o), NULL, NULL);
    pull(o);
    tfree(q), tfree(o);
    if (st != QGEN_OK) return -1;
  }
  snap_take(f->kv, f->sparse, &f->s);
  f->out_bytes = (size_t)MAX_SEQS * f->out_elems * 2;
  f->out = tmalloc(f->out_bytes);
  memset(f->out, 0xA5, f->out_bytes);
  return 0;
}

static void teardown(fixture *f) {
  snap_free(&f->s);
  tfree(f->out);
  qgen_cache_destroy(f->kv);
  qgen_close(f->ctx);
}

/* ---- the checks --------------------------------------------------------------------- */

static void bad_appends(fixture *f) {
  uint16_t *k = f16_rows(300 * f->row_elems), *v = f16_rows(300 * f->row_elems);
  qgen_ptr K = P(k), V = P(v);
  int one = 1, s0 = 0, s1 = 1, s3 = 3;
  int seqs[3] = {1, 3, 0};

  check(qgen_append(NULL, &s0, 1, &one, K, V, NULL) == QGEN_ERR_INVALID_ARG, "qgen_append: kv NULL");
  EXPECT(f, "qgen_append: n_seq = -1", qgen_append(f->kv, &s0, -1, &one, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  EXPECT(f, "qgen_append: n_seq = INT_MIN", qgen_append(f->kv, &s0, INT_MIN, &one, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  EXPECT(f, "qgen_append: seq NULL with n_seq 1", qgen_append(f->kv, NULL, 1, &one, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  EXPECT(f, "qgen_append: n_new NULL with n_seq 1", qgen_append(f->kv, &s0, 1, NULL, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  int bad_ids[] = {-1, MAX_SEQS, MAX_SEQS + 1, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
    char what[96];
    snprintf(what, sizeof what, "qgen_append: seq id %d (max_seqs %d)", bad_ids[i], MAX_SEQS);
    EXPECT(f, what, qgen_append(f->kv, &bad_ids[i], 1, &one, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  }
  { /* a bad id after good ones: nothing of the good ones is written */
    int s[2] = {3, -1}, n[2] = {4, 1};
    EXPECT(f, "qgen_append: a bad id after a good one", qgen_append(f->kv, s, 2, n, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  }
  {
    int s[3] = {1, 3, 1}, n[3] = {1, 1, 1};
    EXPECT(f, "qgen_append: duplicate seq ids {1, 3, 1}", qgen_append(f->kv, s, 3, n, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  }
  {
    int s[2] = {3, 3}, n[2] = {0, 0};
    EXPECT(f, "qgen_append: duplicate seq ids with no tokens", qgen_append(f->kv, s, 2, n, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  }
  {
    int n[3] = {1, -1, 1};
    EXPECT(f, "qgen_append: n_new[1] = -1", qgen_append(f->kv, seqs, 3, n, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
    n[1] = INT_MIN;
    EXPECT(f, "qgen_append: n_new[1] = INT_MIN", qgen_append(f->kv, seqs, 3, n, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  }
  long long len0 = qgen_seq_len(f->kv, 0);
  int over = (int)(MAX_TOKENS - len0 + 1);
  {
    char what[128];
    snprintf(what, sizeof what, "qgen_append: %d tokens to a sequence of %lld (capacity %d)", over, len0, MAX_TOKENS);
    EXPECT(f, what, qgen_append(f->kv, &s0, 1, &over, K, V, NULL), QGEN_ERR_CAPACITY, "qgen_append");
    int big = INT_MAX;
    EXPECT(f, "qgen_append: INT_MAX tokens", qgen_append(f->kv, &s3, 1, &big, K, V, NULL), QGEN_ERR_CAPACITY, "qgen_append");
    int n257 = MAX_TOKENS + 1;
    EXPECT(f, "qgen_append: capacity + 1 tokens to an empty sequence", qgen_append(f->kv, &s3, 1, &n257, K, V, NULL), QGEN_ERR_CAPACITY, "qgen_append");
  }
  { /* only the last of three overflows: nothing of the first two may be written */
    int n[3] = {10, 20, over};
    EXPECT(f, "qgen_append: three sequences, only the last overflows", qgen_append(f->kv, seqs, 3, n, K, V, NULL), QGEN_ERR_CAPACITY, "qgen_append");
  }
  EXPECT(f, "qgen_append: k NULL with tokens", qgen_append(f->kv, &s1, 1, &one, 0, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  EXPECT(f, "qgen_append: v NULL with tokens", qgen_append(f->kv, &s1, 1, &one, K, 0, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  {
    int s[2] = {3, 1}, n[2] = {0, 2};
    EXPECT(f, "qgen_append: k and v NULL, tokens in the second sequence", qgen_append(f->kv, s, 2, n, 0, 0, NULL), QGEN_ERR_INVALID_ARG, "qgen_append");
  }
  /* no-op calls that must succeed and change nothing */
  EXPECT(f, "qgen_append: n_seq = 0 with NULL arrays is a no-op", qgen_append(f->kv, NULL, 0, NULL, 0, 0, NULL), QGEN_OK, NULL);
  {
    int zero = 0;
    EXPECT(f, "qgen_append: 0 tokens with k, v NULL is a no-op", qgen_append(f->kv, &s1, 1, &zero, 0, 0, NULL), QGEN_OK, NULL);
  }
  tfree(k), tfree(v);
}

static void bad_decodes(fixture *f) {
  uint16_t *k = f16_rows(MAX_SEQS * f->row_elems), *v = f16_rows(MAX_SEQS * f->row_elems);
  qgen_ptr K = P(k), V = P(v);
  int s0 = 0, bad_ids[] = {-1, MAX_SEQS, INT_MIN, INT_MAX}, dup[3] = {1, 3, 1}, late[2] = {3, -1};
  check(qgen_append_decode(NULL, &s0, 1, K, V, NULL) == QGEN_ERR_INVALID_ARG, "qgen_append_decode: kv NULL");
  EXPECT(f, "qgen_append_decode: n_seq = -1", qgen_append_decode(f->kv, &s0, -1, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append_decode");
  EXPECT(f, "qgen_append_decode: seq NULL with n_seq 1", qgen_append_decode(f->kv, NULL, 1, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append_decode");
  for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
    char what[96];
    snprintf(what, sizeof what, "qgen_append_decode: seq id %d (max_seqs %d)", bad_ids[i], MAX_SEQS);
    EXPECT(f, what, qgen_append_decode(f->kv, &bad_ids[i], 1, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append_decode");
  }
  EXPECT(f, "qgen_append_decode: a bad id after a good one", qgen_append_decode(f->kv, late, 2, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append_decode");
  EXPECT(f, "qgen_append_decode: duplicate seq ids {1, 3, 1}", qgen_append_decode(f->kv, dup, 3, K, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append_decode");
  EXPECT(f, "qgen_append_decode: k NULL", qgen_append_decode(f->kv, &s0, 1, 0, V, NULL), QGEN_ERR_INVALID_ARG, "qgen_append_decode");
  EXPECT(f, "qgen_append_decode: v NULL", qgen_append_decode(f->kv, &s0, 1, K, 0, NULL), QGEN_ERR_INVALID_ARG, "qgen_append_decode");
  EXPECT(f, "qgen_append_decode: n_seq = 0 with NULL arrays is a no-op", qgen_append_decode(f->kv, NULL, 0, 0, 0, NULL), QGEN_OK, NULL);
  check(qgen_sync(NULL) == QGEN_ERR_INVALID_ARG, "qgen_sync: kv NULL");
  EXPECT(f, "qgen_sync: nothing to report", qgen_sync(f->kv), QGEN_OK, NULL);
  tfree(k), tfree(v);
}

static void bad_attends(fixture *f) {
  uint16_t *q = f16_rows(MAX_SEQS * f->q_elems);
  qgen_ptr Q = P(q), O = P(f->out);
  int s0 = 0;
  qgen_attend_opts d = qgen_attend_defaults(f->ctx), o;

  check(qgen_attend(NULL, &s0, 1, Q, O, NULL, NULL) == QGEN_ERR_INVALID_ARG, "qgen_attend: kv NULL");
  EXPECT(f, "qgen_attend: n_seq = -1", qgen_attend(f->kv, &s0, -1, Q, O, NULL, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  EXPECT(f, "qgen_attend: seq NULL with n_seq 1", qgen_attend(f->kv, NULL, 1, Q, O, NULL, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  int bad_ids[] = {-1, MAX_SEQS, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
    char what[96];
    snprintf(what, sizeof what, "qgen_attend: seq id %d", bad_ids[i]);
    EXPECT(f, what, qgen_attend(f->kv, &bad_ids[i], 1, Q, O, NULL, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  }
  {
    int s[3] = {0, 2, 0};
    EXPECT(f, "qgen_attend: duplicate seq ids {0, 2, 0}", qgen_attend(f->kv, s, 3, Q, O, NULL, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  }
  EXPECT(f, "qgen_attend: q NULL", qgen_attend(f->kv, &s0, 1, 0, O, NULL, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  EXPECT(f, "qgen_attend: out NULL", qgen_attend(f->kv, &s0, 1, Q, 0, NULL, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  EXPECT(f, "qgen_attend: n_seq = 0 is a no-op", qgen_attend(f->kv, NULL, 0, 0, 0, NULL, NULL), QGEN_OK, NULL);
  {
    int n2[2] = {2, 0}, n17 = QGEN_MAX_STEP_TOKENS + 1, nm = INT_MIN, s01[2] = {0, 1};
    check(qgen_attend_multi(NULL, &s0, 1, n2, Q, O, NULL, NULL) == QGEN_ERR_INVALID_ARG, "qgen_attend_multi: kv NULL");
    EXPECT(f, "qgen_attend_multi: n_q NULL", qgen_attend_multi(f->kv, &s0, 1, NULL, Q, O, NULL, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend_multi");
    EXPECT(f, "qgen_attend_multi: n_q[1] = 0", qgen_attend_multi(f->kv, s01, 2, n2, Q, O, NULL, NULL), QGEN_ERR_INVALID_ARG, "n_q[1] = 0");
    EXPECT(f, "qgen_attend_multi: n_q 17", qgen_attend_multi(f->kv, &s0, 1, &n17, Q, O, NULL, NULL), QGEN_ERR_INVALID_ARG, "QGEN_MAX_STEP_TOKENS");
    EXPECT(f, "qgen_attend_multi: n_q INT_MIN", qgen_attend_multi(f->kv, &s0, 1, &nm, Q, O, NULL, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend_multi");
    EXPECT(f, "qgen_attend_multi: seq id -1", qgen_attend_multi(f->kv, (int[]){-1}, 1, n2, Q, O, NULL, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend_multi");
    EXPECT(f, "qgen_attend_multi: n_seq = 0 is a no-op", qgen_attend_multi(f->kv, NULL, 0, NULL, 0, 0, NULL, NULL), QGEN_OK, NULL);
  }
  o = d, o.mode = QGEN_ATTEND_DENSE, o.window = -1;
  EXPECT(f, "qgen_attend: window -1", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "window = -1");
  o = d, o.mode = QGEN_ATTEND_DENSE, o.window = LLONG_MIN;
  EXPECT(f, "qgen_attend: window LLONG_MIN", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  if (f->sparse) {
    o = d, o.window = 64;
    EXPECT(f, "qgen_attend: a window with a sparse attend", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG,
           "a window attends dense");
  }

  o = d, o.mode = 7;
  EXPECT(f, "qgen_attend: mode 7", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  o = d, o.mode = -1;
  EXPECT(f, "qgen_attend: mode -1", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  if (!f->sparse) {
    o = d, o.mode = QGEN_ATTEND_SPARSE, o.coverage = 0.5;
    EXPECT(f, "qgen_attend: mode sparse on a dense spec", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_UNSUPPORTED, "qgen_attend");
    tfree(q);
    return;
  }
  const double covs[] = {0.0, -0.0, -0.25, 1.0000001, 2.0, NAN, -NAN, INFINITY, -INFINITY};
  const char *cnames[] = {"0", "-0", "-0.25", "1.0000001", "2", "NaN", "-NaN", "inf", "-inf"};
  for (size_t i = 0; i < sizeof covs / sizeof *covs; i++) {
    char what[96];
    o = d, o.mode = QGEN_ATTEND_SPARSE, o.budget = 0, o.coverage = covs[i];
    snprintf(what, sizeof what, "qgen_attend: coverage %s", cnames[i]);
    EXPECT(f, what, qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  }
  o = d, o.mode = QGEN_ATTEND_SPARSE, o.budget = -1;
  EXPECT(f, "qgen_attend: budget -1", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  o = d, o.mode = QGEN_ATTEND_SPARSE, o.budget = LLONG_MIN;
  EXPECT(f, "qgen_attend: budget LLONG_MIN", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  o = d, o.mode = QGEN_ATTEND_SPARSE, o.sink = -1;
  EXPECT(f, "qgen_attend: sink -1", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  o = d, o.mode = QGEN_ATTEND_SPARSE, o.recent = -1;
  EXPECT(f, "qgen_attend: recent -1", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  o = d, o.mode = QGEN_ATTEND_SPARSE, o.recent = LLONG_MIN;
  EXPECT(f, "qgen_attend: recent LLONG_MIN", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  /* a coverage and a budget both set: an error, not a silent choice of one */
  o = d, o.mode = QGEN_ATTEND_SPARSE, o.coverage = 0.5, o.budget = 64;
  EXPECT(f, "qgen_attend: coverage 0.5 and budget 64 both set", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "both");
  o = d, o.budget = d.budget > 0 ? d.budget : 64, o.coverage = d.budget > 0 ? 1.0 : d.coverage;
  EXPECT(f, "qgen_attend: the defaults plus the other of coverage and budget", qgen_attend(f->kv, &s0, 1, Q, O, &o, NULL),
         QGEN_ERR_INVALID_ARG, "qgen_attend");
  check((d.coverage > 0) != (d.budget > 0), "qgen_attend_defaults: exactly one of coverage %g and budget %lld is set",
        d.coverage, d.budget);
  { /* a bad option with a bad id: the id error wins, either way nothing changes */
    int s[2] = {0, 9};
    o = d, o.coverage = NAN;
    EXPECT(f, "qgen_attend: bad id and NaN coverage", qgen_attend(f->kv, s, 2, Q, O, &o, NULL), QGEN_ERR_INVALID_ARG, "qgen_attend");
  }
  tfree(q);
}

static void bad_introspection(fixture *f) {
  size_t kb = qgen_kv_size(f->kv, QGEN_KV_K);
  void *buf = malloc(kb + 16);
  EXPECT(f, "qgen_kv_read: K with size - 1", qgen_kv_read(f->kv, QGEN_KV_K, buf, kb - 1), QGEN_ERR_INVALID_ARG, "qgen_kv_read");
  EXPECT(f, "qgen_kv_read: K with size + 1", qgen_kv_read(f->kv, QGEN_KV_K, buf, kb + 1), QGEN_ERR_INVALID_ARG, "qgen_kv_read");
  EXPECT(f, "qgen_kv_read: K with size 0", qgen_kv_read(f->kv, QGEN_KV_K, buf, 0), QGEN_ERR_INVALID_ARG, "qgen_kv_read");
  EXPECT(f, "qgen_kv_read: K into NULL", qgen_kv_read(f->kv, QGEN_KV_K, NULL, kb), QGEN_ERR_INVALID_ARG, "qgen_kv_read");
  EXPECT(f, "qgen_kv_read: unknown array 6", qgen_kv_read(f->kv, N_ARRAYS, buf, kb), QGEN_ERR_INVALID_ARG, "qgen_kv_read");
  EXPECT(f, "qgen_kv_read: 8-bit bounds of a spec without them", qgen_kv_read(f->kv, QGEN_KV_BOUNDS_I8, buf, kb), QGEN_ERR_INVALID_ARG, "qgen_kv_read");
  EXPECT(f, "qgen_kv_read: unknown array -1", qgen_kv_read(f->kv, -1, buf, 0), QGEN_ERR_INVALID_ARG, "qgen_kv_read");
  check(qgen_kv_read(NULL, QGEN_KV_K, buf, kb) == QGEN_ERR_INVALID_ARG, "qgen_kv_read: kv NULL");
  check(qgen_kv_size(NULL, QGEN_KV_K) == 0 && qgen_kv_size(f->kv, N_ARRAYS) == 0 && qgen_kv_size(f->kv, -1) == 0,
        "qgen_kv_size: NULL kv or an unknown array is 0 bytes");
  if (!f->sparse) {
    check(qgen_kv_size(f->kv, QGEN_KV_BOUNDS) == 0, "qgen_kv_size: a dense spec has no bounds");
    EXPECT(f, "qgen_kv_read: bounds of a dense spec", qgen_kv_read(f->kv, QGEN_KV_BOUNDS, buf, 0), QGEN_ERR_INVALID_ARG, "qgen_kv_read");
  }
  free(buf);

  long long pps = qgen_kv_pages_per_seq(f->kv), np = qgen_kv_n_pages(f->kv);
  int *pages = malloc((size_t)(pps + 1) * sizeof *pages);
  for (long long i = 0; i <= pps; i++) pages[i] = (int)(np - 1 - i);
  EXPECT(f, "qgen_kv_map: a non-empty sequence", qgen_kv_map(f->kv, 0, pages, pps), QGEN_ERR_INVALID_ARG, "qgen_kv_map");
  EXPECT(f, "qgen_kv_map: n > pages_per_seq", qgen_kv_map(f->kv, 3, pages, pps + 1), QGEN_ERR_INVALID_ARG, "qgen_kv_map");
  EXPECT(f, "qgen_kv_map: n = LLONG_MAX", qgen_kv_map(f->kv, 3, pages, LLONG_MAX), QGEN_ERR_INVALID_ARG, "qgen_kv_map");
  EXPECT(f, "qgen_kv_map: n = 0", qgen_kv_map(f->kv, 3, pages, 0), QGEN_ERR_INVALID_ARG, "qgen_kv_map");
  EXPECT(f, "qgen_kv_map: n = -1", qgen_kv_map(f->kv, 3, pages, -1), QGEN_ERR_INVALID_ARG, "qgen_kv_map");
  EXPECT(f, "qgen_kv_map: pages NULL", qgen_kv_map(f->kv, 3, NULL, 1), QGEN_ERR_INVALID_ARG, "qgen_kv_map");
  EXPECT(f, "qgen_kv_map: seq -1", qgen_kv_map(f->kv, -1, pages, 1), QGEN_ERR_INVALID_ARG, "qgen_kv_map");
  EXPECT(f, "qgen_kv_map: seq max_seqs", qgen_kv_map(f->kv, MAX_SEQS, pages, 1), QGEN_ERR_INVALID_ARG, "qgen_kv_map");
  pages[pps - 1] = (int)np;
  EXPECT(f, "qgen_kv_map: the last page = n_pages (out of range)", qgen_kv_map(f->kv, 3, pages, pps), QGEN_ERR_INVALID_ARG, "qgen_kv_map");
  pages[pps - 1] = -1;
  EXPECT(f, "qgen_kv_map: the last page = -1", qgen_kv_map(f->kv, 3, pages, pps), QGEN_ERR_INVALID_ARG, "qgen_kv_map");
  pages[pps - 1] = INT_MIN;
  EXPECT(f, "qgen_kv_map: the last page = INT_MIN", qgen_kv_map(f->kv, 3, pages, pps), QGEN_ERR_INVALID_ARG, "qgen_kv_map");
  check(qgen_kv_map(NULL, 3, pages, 1) == QGEN_ERR_INVALID_ARG, "qgen_kv_map: kv NULL");
  free(pages);

  int lists[8 * 64], counts[8];
  if (!f->sparse) {
    EXPECT(f, "qgen_kv_selection: dense spec", qgen_kv_selection(f->kv, 0, lists, counts), QGEN_ERR_UNSUPPORTED, "qgen_kv_selection");
  } else {
    EXPECT(f, "qgen_kv_selection: lists NULL", qgen_kv_selection(f->kv, 0, NULL, counts), QGEN_ERR_INVALID_ARG, "qgen_kv_selection");
    EXPECT(f, "qgen_kv_selection: counts NULL", qgen_kv_selection(f->kv, 0, lists, NULL), QGEN_ERR_INVALID_ARG, "qgen_kv_selection");
    EXPECT(f, "qgen_kv_selection: seq -1", qgen_kv_selection(f->kv, -1, lists, counts), QGEN_ERR_INVALID_ARG, "qgen_kv_selection");
    EXPECT(f, "qgen_kv_selection: seq max_seqs", qgen_kv_selection(f->kv, MAX_SEQS, lists, counts), QGEN_ERR_INVALID_ARG, "qgen_kv_selection");
  }
  check(qgen_kv_selection(NULL, 0, lists, counts) == QGEN_ERR_INVALID_ARG, "qgen_kv_selection: kv NULL");

  EXPECT(f, "qgen_reset: seq -1", qgen_reset(f->kv, -1), QGEN_ERR_INVALID_ARG, "qgen_reset");
  EXPECT(f, "qgen_reset: seq max_seqs", qgen_reset(f->kv, MAX_SEQS), QGEN_ERR_INVALID_ARG, "qgen_reset");
  check(qgen_reset(NULL, 0) == QGEN_ERR_INVALID_ARG, "qgen_reset: kv NULL");
  /* setup gave sequence 0 150 tokens and left 3 empty */
  EXPECT(f, "qgen_rollback: n = -1", qgen_rollback(f->kv, 0, -1), QGEN_ERR_INVALID_ARG, "qgen_rollback");
  EXPECT(f, "qgen_rollback: n = its length + 1", qgen_rollback(f->kv, 0, 151), QGEN_ERR_INVALID_ARG, "qgen_rollback");
  EXPECT(f, "qgen_rollback: n = LLONG_MIN", qgen_rollback(f->kv, 0, LLONG_MIN), QGEN_ERR_INVALID_ARG, "qgen_rollback");
  EXPECT(f, "qgen_rollback: one token of an empty sequence", qgen_rollback(f->kv, 3, 1), QGEN_ERR_INVALID_ARG, "qgen_rollback");
  EXPECT(f, "qgen_rollback: seq -1", qgen_rollback(f->kv, -1, 1), QGEN_ERR_INVALID_ARG, "qgen_rollback");
  EXPECT(f, "qgen_rollback: seq max_seqs", qgen_rollback(f->kv, MAX_SEQS, 1), QGEN_ERR_INVALID_ARG, "qgen_rollback");
  EXPECT(f, "qgen_rollback: n = 0 changes nothing", qgen_rollback(f->kv, 0, 0), QGEN_OK, NULL);
  check(qgen_rollback(NULL, 0, 1) == QGEN_ERR_INVALID_ARG, "qgen_rollback: kv NULL");
  check(qgen_seq_len(f->kv, -1) == -1 && qgen_seq_len(f->kv, MAX_SEQS) == -1 && qgen_seq_len(NULL, 0) == -1,
        "qgen_seq_len: a bad id or NULL kv is -1");
  check(qgen_kv_pages_per_seq(NULL) == -1 && qgen_kv_n_pages(NULL) == -1, "qgen_kv_pages_per_seq/n_pages: NULL kv is -1");
}

static int all_finite_f16(const uint16_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(qgen_f16_to_f32(p[i]))) return 0;
  return 1;
}
static int all_zero(const uint16_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != 0 && p[i] != 0x8000) return 0;
  return 1;
}

/* After all the bad calls: appends, attends, maps and resets work and do what they say. */
static void good_calls(fixture *f, const char *tag) {
  int s[MAX_SEQS] = {3, 0, 2, 1};
  uint16_t *q = f16_rows(MAX_SEQS * f->q_elems), *out = tmalloc(MAX_SEQS * f->out_elems * 2);
  memset(out, 0xA5, MAX_SEQS * f->out_elems * 2);
  qgen_status st = qgen_attend(f->kv, s, MAX_SEQS, P(q), P(out), NULL, NULL);
  pull(out);
  check(st == QGEN_OK && all_finite_f16(out, MAX_SEQS * f->out_elems) && all_zero(out, f->out_elems) &&
            !all_zero(out + f->out_elems, f->out_elems),
        "%s: an attend of 4 sequences after the bad calls gives finite output (zeros for the empty one)", tag);
  qgen_attend_opts o = qgen_attend_defaults(f->ctx);
  o.mode = QGEN_ATTEND_DENSE;
  st = qgen_attend(f->kv, s, MAX_SEQS, P(q), P(out), &o, NULL);
  pull(out);
  check(st == QGEN_OK && all_finite_f16(out, MAX_SEQS * f->out_elems), "%s: a dense attend works", tag);
  if (f->sparse) {
    /* budgets past any length select every page: the dense step, bit for bit */
    qgen_attend_opts dn = qgen_attend_defaults(f->ctx);
    dn.mode = QGEN_ATTEND_DENSE;
    qgen_attend(f->kv, s, MAX_SEQS, P(q), P(out), &dn, NULL);
    pull(out);
    uint16_t *out2 = tmalloc(MAX_SEQS * f->out_elems * 2);
    const long long bsr[][3] = {{LLONG_MAX, 0, 0}, {0, LLONG_MAX, 0}, {0, 0, LLONG_MAX}, {(long long)1 << 62, 0, 0}};
    for (int i = 0; i < 4; i++) {
      o = qgen_attend_defaults(f->ctx);
      o.coverage = bsr[i][0] ? 0.0 : o.coverage; /* a budget replaces the coverage (qgen.h) */
      o.budget = bsr[i][0], o.sink = bsr[i][1], o.recent = bsr[i][2];
      memset(out2, 0x5A, MAX_SEQS * f->out_elems * 2);
      st = qgen_attend(f->kv, s, MAX_SEQS, P(q), P(out2), &o, NULL);
      pull(out2);
      check(st == QGEN_OK && !memcmp(out, out2, MAX_SEQS * f->out_elems * 2),
            "%s: budget %lld, sink %lld, recent %lld is accepted and equals the dense step", tag, bsr[i][0],
            bsr[i][1], bsr[i][2]);
    }
    tfree(out2);
    int lists[8 * 64], counts[8];
    st = qgen_kv_selection(f->kv, 0, lists, counts);
    long long n0 = (qgen_seq_len(f->kv, 0) + f->info.block - 1) / f->info.block;
    check(st == QGEN_OK && counts[0] == n0, "%s: qgen_kv_selection after it lists every page (%d of %lld)", tag,
          counts[0], n0);
  }
  /* appends: three sequences exactly to capacity on seq 0 */
  long long len0 = qgen_seq_len(f->kv, 0), len1 = qgen_seq_len(f->kv, 1), len3 = qgen_seq_len(f->kv, 3);
  int sa[3] = {1, 3, 0}, na[3] = {10, 20, (int)(MAX_TOKENS - len0)};
  int total = na[0] + na[1] + na[2];
  uint16_t *k = f16_rows((size_t)total * f->row_elems), *v = f16_rows((size_t)total * f->row_elems);
  st = qgen_append(f->kv, sa, 3, na, P(k), P(v), NULL);
  check(st == QGEN_OK && qgen_seq_len(f->kv, 0) == MAX_TOKENS && qgen_seq_len(f->kv, 1) == len1 + 10 &&
            qgen_seq_len(f->kv, 3) == len3 + 20,
        "%s: an append filling sequence 0 exactly to capacity works", tag);
  int one = 1, s0 = 0;
  qgen_ext_clear_error(f->ctx);
  st = qgen_append(f->kv, &s0, 1, &one, P(k), P(v), NULL);
  check(st == QGEN_ERR_CAPACITY && strstr(qgen_error(f->ctx), "qgen_append"), "%s: then one more token is QGEN_ERR_CAPACITY", tag);
  int32_t *sl = malloc(qgen_kv_size(f->kv, QGEN_KV_SEQ_LEN));
  qgen_kv_read(f->kv, QGEN_KV_SEQ_LEN, sl, qgen_kv_size(f->kv, QGEN_KV_SEQ_LEN));
  check(sl[0] == MAX_TOKENS && sl[1] == len1 + 10 && sl[3] == len3 + 20, "%s: the seq_len array agrees", tag);
  free(sl);
  st = qgen_attend(f->kv, s, MAX_SEQS, P(q), P(out), NULL, NULL);
  pull(out);
  check(st == QGEN_OK && all_finite_f16(out, MAX_SEQS * f->out_elems), "%s: an attend of the full cache works", tag);
  /* reset + map: sequence 3 gets its pages in reverse order, then holds tokens again */
  st = qgen_reset(f->kv, 3);
  check(st == QGEN_OK && qgen_seq_len(f->kv, 3) == 0, "%s: qgen_reset empties a sequence", tag);
  if (f->sparse) { /* and forgets its last selection */
    int lists[8 * 64], counts[8];
    memset(counts, 0x7f, sizeof counts);
    st = qgen_kv_selection(f->kv, 3, lists, counts);
    int none = 1;
    for (int h = 0; h < f->info.n_head_kv; h++) none &= counts[h] == 0;
    check(st == QGEN_OK && none, "%s: after qgen_reset, qgen_kv_selection lists no pages (count %d)", tag, counts[0]);
  }
  long long pps = qgen_kv_pages_per_seq(f->kv);
  int *pages = malloc((size_t)pps * sizeof *pages);
  for (long long i = 0; i < pps; i++) pages[i] = (int)(3 * pps + pps - 1 - i);
  st = qgen_kv_map(f->kv, 3, pages, pps);
  int32_t *pt = malloc(qgen_kv_size(f->kv, QGEN_KV_PAGE_TABLE));
  qgen_kv_read(f->kv, QGEN_KV_PAGE_TABLE, pt, qgen_kv_size(f->kv, QGEN_KV_PAGE_TABLE));
  check(st == QGEN_OK && !memcmp(pt + 3 * pps, pages, (size_t)pps * sizeof *pages), "%s: qgen_kv_map on an empty sequence works", tag);
  int s3 = 3, n3 = 70;
  st = qgen_append(f->kv, &s3, 1, &n3, P(k), P(v), NULL);
  st = st == QGEN_OK ? qgen_attend(f->kv, &s3, 1, P(q), P(out), NULL, NULL) : st;
  pull(out);
  check(st == QGEN_OK && all_finite_f16(out, f->out_elems) && !all_zero(out, f->out_elems),
        "%s: append + attend on the remapped sequence work", tag);
  free(pt), free(pages), tfree(k), tfree(v), tfree(q), tfree(out);
}

/* Every array of two caches, byte for byte. */
/* A context of path and two caches of ns sequences of cap tokens, for comparing them;
   -1 (a failed check, nothing left open) when that fails. */
static int two_caches(const char *path, int ns, long long cap, const char *tag, qgen_ctx **ctx, qgen_kv **a, qgen_kv **b,
                      qgen_info *in) {
  *ctx = NULL, *a = *b = NULL;
  if (open_cpu(path, NULL, ctx) != 0 || qgen_cache_create(*ctx, a, ns, cap) != QGEN_OK ||
      qgen_cache_create(*ctx, b, ns, cap) != QGEN_OK) {
    check(0, "%s: setup: %s", tag, qgen_error(*ctx));
    qgen_cache_destroy(*a);
    qgen_close(*ctx);
    return -1;
  }
  qgen_get_info(*ctx, in);
  return 0;
}

static int caches_equal(qgen_kv *a, qgen_kv *b) {
  int same = 1;
  for (int w = 0; w < N_ARRAYS; w++) {
    size_t n = qgen_kv_size(a, w);
    if (n == 0) continue;
    uint8_t *x = malloc(n), *y = malloc(n);
    if (!x || !y || qgen_kv_read(a, w, x, n) != QGEN_OK || qgen_kv_read(b, w, y, n) != QGEN_OK) abort();
    same &= !memcmp(x, y, n);
    free(x), free(y);
  }
  return same;
}

/* qgen_append_decode for T steps == qgen_append of the same tokens one at a time (cache
   bytes, lengths, attend outputs); at capacity its token is dropped and qgen_sync reports
   it once; later qgen_append, qgen_reset and qgen_append_decode use the device's lengths. */
static void decode_steps(const char *path, const char *tag) {
  enum { NS = 3, T = 20, CAP = 63 + T + 2 };
  qgen_ctx *ctx;
  qgen_kv *a, *b;
  qgen_info in;
  if (two_caches(path, NS, CAP, tag, &ctx, &a, &b, &in) != 0) return;
  const size_t row = (size_t)in.n_head_kv * in.head_dim, qe = (size_t)in.n_head * in.head_dim;
  int ps[NS] = {0, 1, 2}, pn[NS] = {63, 0, 5}, order[NS] = {1, 2, 0}, ones[NS] = {1, 1, 1};
  uint16_t *k = f16_rows(68 * row), *v = f16_rows(68 * row);
  qgen_status st = qgen_append(a, ps, NS, pn, P(k), P(v), NULL);
  if (st == QGEN_OK) st = qgen_append(b, ps, NS, pn, P(k), P(v), NULL);
  tfree(k), tfree(v);
  uint16_t *kd = tmalloc(NS * row * 2), *vd = tmalloc(NS * row * 2), *q = tmalloc(NS * qe * 2);
  uint16_t *oa = tmalloc(NS * qe * 2), *ob = tmalloc(NS * qe * 2);
  qgen_attend_opts modes[2] = {qgen_attend_defaults(ctx), qgen_attend_defaults(ctx)};
  modes[1].mode = QGEN_ATTEND_DENSE;
  int same_out = 1;
  for (int t = 0; t < T && st == QGEN_OK; t++) {
    for (size_t i = 0; i < NS * row; i++) kd[i] = qgen_f32_to_f16(frand()), vd[i] = qgen_f32_to_f16(frand());
    for (size_t i = 0; i < NS * qe; i++) q[i] = qgen_f32_to_f16(frand());
    st = qgen_append_decode(a, order, NS, P(kd), P(vd), NULL);
    if (st == QGEN_OK) st = qgen_append(b, order, NS, ones, P(kd), P(vd), NULL);
    for (int m = 0; m < 2 && st == QGEN_OK; m++) {
      st = qgen_attend(a, order, NS, P(q), P(oa), &modes[m], NULL);
      if (st == QGEN_OK) st = qgen_attend(b, order, NS, P(q), P(ob), &modes[m], NULL);
      pull(oa), pull(ob);
      same_out &= !memcmp(oa, ob, NS * qe * 2);
    }
  }
  check(st == QGEN_OK && same_out, "%s: %d steps of qgen_append_decode + attend (default and dense) give the outputs of "
        "qgen_append one token at a time -- %s", tag, T, st == QGEN_OK ? "" : qgen_error(ctx));
  check(caches_equal(a, b) && qgen_seq_len(a, 0) == 63 + T && qgen_seq_len(a, 1) == T && qgen_seq_len(a, 2) == 5 + T,
        "%s: and the same cache bytes and lengths (%lld %lld %lld)", tag, qgen_seq_len(a, 0), qgen_seq_len(a, 1),
        qgen_seq_len(a, 2));
  /* sequence 0 has room for 2 more: the third step drops its token and writes sequence 2's */
  int two[2] = {0, 2}, s2 = 2, s0 = 0, s1 = 1;
  st = QGEN_OK;
  for (int t = 0; t < 3 && st == QGEN_OK; t++) {
    for (size_t i = 0; i < 2 * row; i++) kd[i] = qgen_f32_to_f16(frand()), vd[i] = qgen_f32_to_f16(frand());
    st = qgen_append_decode(a, two, 2, P(kd), P(vd), NULL);
    if (st == QGEN_OK) st = t < 2 ? qgen_append(b, two, 2, ones, P(kd), P(vd), NULL)
                                  : qgen_append(b, &s2, 1, ones, P(kd + row), P(vd + row), NULL);
  }
  check(st == QGEN_OK && caches_equal(a, b) && qgen_seq_len(a, 0) == CAP && qgen_seq_len(a, 2) == 5 + T + 3,
        "%s: qgen_append_decode past capacity drops the full sequence's token only (lengths %lld, %lld)", tag,
        qgen_seq_len(a, 0), qgen_seq_len(a, 2));
  qgen_ext_clear_error(ctx);
  st = qgen_sync(a);
  check(st == QGEN_ERR_CAPACITY && strstr(qgen_error(ctx), "qgen_sync") && strstr(qgen_error(ctx), "sequence 0"),
        "%s: qgen_sync reports it: %s -- \"%s\"", tag, qgen_status_str(st), qgen_error(ctx));
  check(qgen_sync(a) == QGEN_OK && qgen_sync(b) == QGEN_OK, "%s: once", tag);
  /* the host calls after it see the device's lengths */
  qgen_ext_clear_error(ctx);
  st = qgen_append(a, &s0, 1, ones, P(kd), P(vd), NULL);
  check(st == QGEN_ERR_CAPACITY && strstr(qgen_error(ctx), "qgen_append"), "%s: qgen_append to the full sequence: %s", tag,
        qgen_status_str(st));
  st = qgen_append(a, &s1, 1, ones, P(kd), P(vd), NULL);
  if (st == QGEN_OK) st = qgen_append(b, &s1, 1, ones, P(kd), P(vd), NULL);
  if (st == QGEN_OK) st = qgen_reset(a, 2);
  if (st == QGEN_OK) st = qgen_reset(b, 2);
  if (st == QGEN_OK) st = qgen_append_decode(a, &s2, 1, P(kd), P(vd), NULL);
  if (st == QGEN_OK) st = qgen_append(b, &s2, 1, ones, P(kd), P(vd), NULL);
  check(st == QGEN_OK && caches_equal(a, b) && qgen_seq_len(a, 1) == T + 1 && qgen_seq_len(a, 2) == 1,
        "%s: qgen_append, qgen_reset and qgen_append_decode after it agree with qgen_append", tag);
  tfree(kd), tfree(vd), tfree(q), tfree(oa), tfree(ob);
  qgen_cache_destroy(a);
  qgen_cache_destroy(b);
  qgen_close(ctx);
}

/* ---- rollback ----------------------------------------------------------------------- */

enum { RB_SEQS = 3, RB_CAP = 300 };

/* The tokens each sequence of the rolled-back cache holds, as fed (in_type rows of all KV
   heads): a fresh cache fed exactly these must hold the same bytes. */
typedef struct {
  const qgen_info *in;
  qgen_type in_t, k_t;
  size_t tok_bytes;                      /* one token's row of all KV heads, in_type */
  uint8_t *k[RB_SEQS], *v[RB_SEQS];     /* [RB_CAP] tokens each */
  long long len[RB_SEQS];
  float k_scale;
} rb_stream;

/* n new random tokens of seq at its current length, in s and in mirrored buffers k, v. */
static void rb_new(rb_stream *s, int seq, int n, uint8_t *k, uint8_t *v) {
  const size_t e = s->tok_bytes / qgen_type_row_bytes(s->in_t, 1) ;
  float *x = malloc(e * sizeof *x);
  if (!x) abort();
  for (int t = 0; t < n; t++)
    for (int w = 0; w < 2; w++) {
      for (size_t i = 0; i < e; i++) x[i] = 3.0f * frand();
      uint8_t *dst = (w ? s->v : s->k)[seq] + (size_t)(s->len[seq] + t) * s->tok_bytes;
      qgen_type_traits_of(s->in_t)->from_f32(x, dst, (int64_t)e);
      memcpy((w ? v : k) + (size_t)t * s->tok_bytes, dst, s->tok_bytes);
    }
  free(x);
  s->len[seq] += n;
}

/* A new cache of ctx fed every sequence's tokens of s in one append. */
static qgen_kv *rb_fresh(qgen_ctx *ctx, const rb_stream *s) {
  qgen_kv *kv = NULL;
  if (qgen_cache_create(ctx, &kv, RB_SEQS, RB_CAP) != QGEN_OK) return NULL;
  if (s->k_scale != 1.0f && qgen_cache_set_scales(kv, s->k_scale, 1.0f) != QGEN_OK) abort();
  int seq[RB_SEQS], n[RB_SEQS];
  long long total = 0;
  for (int i = 0; i < RB_SEQS; i++) seq[i] = i, n[i] = (int)s->len[i], total += s->len[i];
  uint8_t *k = tmalloc((size_t)total * s->tok_bytes + 1), *v = tmalloc((size_t)total * s->tok_bytes + 1);
  size_t off = 0;
  for (int i = 0; i < RB_SEQS; i++) {
    memcpy(k + off, s->k[i], (size_t)s->len[i] * s->tok_bytes);
    memcpy(v + off, s->v[i], (size_t)s->len[i] * s->tok_bytes);
    off += (size_t)s->len[i] * s->tok_bytes;
  }
  if (qgen_append(kv, seq, RB_SEQS, n, P(k), P(v), NULL) != QGEN_OK) abort();
  tfree(k), tfree(v);
  return kv;
}

/* The rolled-back cache a equals the fresh cache b: every array byte for byte, except, for a
   K that does not hold its inputs exactly (exact = 0), the bounds (and 8-bit rows) of the
   partly kept last page of each sequence in cut (a bit mask: those a rollback cut last),
   which must be the tightest f16 bounds of its stored keys (decoded here from a's K rows,
   an oracle apart from the library's). */
static int rb_same(qgen_kv *a, qgen_kv *b, const rb_stream *s, int exact, unsigned cut, char *why, size_t why_n) {
  const qgen_info *in = s->in;
  const int D = in->head_dim, B = in->block, H = in->n_head_kv;
  uint8_t *x[N_ARRAYS][2];
  size_t n[N_ARRAYS];
  for (int w = 0; w < N_ARRAYS; w++) {
    n[w] = qgen_kv_size(a, w);
    for (int c = 0; c < 2; c++) {
      x[w][c] = malloc(n[w] + 1);
      if (!x[w][c] || (n[w] && qgen_kv_read(c ? b : a, w, x[w][c], n[w]) != QGEN_OK)) abort();
    }
  }
  int ok = 1;
  *why = 0;
  unsigned char *loose = calloc((size_t)qgen_kv_n_pages(a) + 1, 1); /* pages whose bounds follow the lossy rule */
  const int32_t *pt = (const int32_t *)x[QGEN_KV_PAGE_TABLE][0];
  const long long pps = qgen_kv_pages_per_seq(a);
  const size_t krow = qgen_type_row_bytes(s->k_t, D), kpage = (size_t)H * B * krow;
  const size_t bpage = (size_t)H * 2 * D * 2, ipage = in->sparse ? qgen_kv_size(a, QGEN_KV_BOUNDS_I8) / (size_t)qgen_kv_n_pages(a) : 0;
  float *key = malloc((size_t)D * sizeof *key);
  for (int q = 0; q < RB_SEQS && !exact && in->sparse; q++) {
    if (s->len[q] % B == 0 || !(cut >> q & 1)) continue;
    const int32_t page = pt[q * pps + s->len[q] / B];
    const int r = (int)(s->len[q] % B);
    loose[page] = 1;
    const uint16_t *bnd = (const uint16_t *)(x[QGEN_KV_BOUNDS][0] + (size_t)page * bpage);
    for (int h = 0; h < H && ok; h++)
      for (int d = 0; d < D && ok; d++) {
        float lo = INFINITY, hi = -INFINITY;
        for (int t = 0; t < r; t++) {
          qgen_type_traits_of(s->k_t)->to_f32(x[QGEN_KV_K][0] + (size_t)page * kpage + ((size_t)h * B + t) * krow, key, D);
          const float kd = key[d] * (qgen_type_traits_of(s->k_t)->tensor_scale ? s->k_scale : 1.0f);
          if (kd < lo) lo = kd;
          if (kd > hi) hi = kd;
        }
        const uint16_t *bh = bnd + (size_t)h * 2 * D;
        if (bh[d] != qgen_f32_to_f16_rd(lo) || bh[D + d] != qgen_f32_to_f16_ru(hi)) {
          snprintf(why, why_n, "sequence %d, page %d, KV head %d, channel %d: bounds %g %g, its %d stored keys span %g %g", q,
                   page, h, d, qgen_f16_to_f32(bh[d]), qgen_f16_to_f32(bh[D + d]), r, lo, hi);
          ok = 0;
        }
      }
    uint8_t *row = malloc((size_t)2 * D + 16);
    for (int h = 0; h < H && ok && ipage; h++) {
      qgen_ref_bounds_i8_row(bnd + (size_t)h * 2 * D, D, row);
      if (memcmp(row, x[QGEN_KV_BOUNDS_I8][0] + (size_t)page * ipage + (size_t)h * (2 * D + 16), (size_t)2 * D + 16)) {
        snprintf(why, why_n, "sequence %d, page %d, KV head %d: the 8-bit row is not that of the f16 bounds", q, page, h);
        ok = 0;
      }
    }
    free(row);
  }
  for (int w = 0; w < N_ARRAYS && ok; w++) {
    const size_t unit = w == QGEN_KV_BOUNDS ? bpage : w == QGEN_KV_BOUNDS_I8 ? ipage : n[w];
    for (size_t off = 0; unit && off < n[w] && ok; off += unit)
      if ((w != QGEN_KV_BOUNDS && w != QGEN_KV_BOUNDS_I8) || !loose[off / unit])
        if (memcmp(x[w][0] + off, x[w][1] + off, unit)) {
          snprintf(why, why_n, "array %d differs (at byte %zu of %zu)", w, off, n[w]);
          ok = 0;
        }
  }
  free(key), free(loose);
  for (int w = 0; w < N_ARRAYS; w++) free(x[w][0]), free(x[w][1]);
  return ok;
}

/* qgen_rollback against caches that never held the removed tokens, through a verify-like
   loop: a prompt, a sparse attend (a selection to outlive the rollback), draft tokens by
   qgen_append_decode (on the GPU the lengths then live on the device), rollbacks into a
   page, to a page boundary and to nothing, appends after them, a rollback across pages,
   and attends (dense and sparse, and a reuse of the old selection) against the fresh
   cache's. */
static void rollback_steps(const char *path, const char *variant, int exact) {
  char tag[160], why[320];
  snprintf(tag, sizeof tag, "rollback %s", variant ? variant : "dense");
  qgen_ctx *ctx = NULL;
  qgen_kv *a = NULL;
  qgen_open_opts o = {backend, 0, variant, NULL};
  if (qgen_open(&ctx, path, &o) != QGEN_OK || qgen_cache_create(ctx, &a, RB_SEQS, RB_CAP) != QGEN_OK) {
    check(0, "%s: setup: %s", tag, qgen_error(ctx));
    qgen_close(ctx);
    return;
  }
  qgen_info in;
  qgen_get_info(ctx, &in);
  rb_stream s = {.in = &in, .k_scale = 1.0f};
  if (qgen_type_from_name(in.in_type, &s.in_t) || qgen_type_from_name(in.k_type, &s.k_t)) abort();
  s.tok_bytes = (size_t)in.n_head_kv * qgen_type_row_bytes(s.in_t, in.head_dim);
  if (qgen_type_traits_of(s.k_t)->tensor_scale) s.k_scale = 0.5f; /* decoded keys times a scale */
  if (s.k_scale != 1.0f && qgen_cache_set_scales(a, s.k_scale, 1.0f) != QGEN_OK) abort();
  for (int q = 0; q < RB_SEQS; q++)
    if (!(s.k[q] = malloc(RB_CAP * s.tok_bytes)) || !(s.v[q] = malloc(RB_CAP * s.tok_bytes))) abort();
  uint8_t *k = tmalloc(RB_CAP * s.tok_bytes), *v = tmalloc(RB_CAP * s.tok_bytes);
  const size_t qb = (size_t)in.n_head * in.head_dim * 4, ob = qb; /* room for f32 rows */
  uint8_t *qv = tmalloc(RB_SEQS * qb), *oa = tmalloc(RB_SEQS * ob), *of = tmalloc(RB_SEQS * ob);
  qgen_type qt;
  if (qgen_type_from_name(in.in_type, &qt)) abort();
  {
    float x[1];
    for (size_t i = 0; i < RB_SEQS * qb / 4; i++) x[0] = frand(), qgen_type_traits_of(qt)->from_f32(x, qv + i * qgen_type_row_bytes(qt, 1), 1);
  }
  int seqs[RB_SEQS] = {0, 1, 2};
  const int prompt[RB_SEQS] = {130, 64, 10};
  qgen_status st = QGEN_OK;
  for (int q = 0; q < RB_SEQS && st == QGEN_OK; q++) {
    rb_new(&s, q, prompt[q], k, v);
    st = qgen_append(a, &q, 1, &prompt[q], P(k), P(v), NULL);
  }
  qgen_attend_opts sparse = qgen_attend_defaults(ctx), dense = sparse, reuse = sparse;
  dense.mode = QGEN_ATTEND_DENSE;
  reuse.mode = QGEN_ATTEND_REUSE;
  if (st == QGEN_OK && in.sparse) st = qgen_attend(a, seqs, RB_SEQS, P(qv), P(oa), &sparse, NULL);
  for (int t = 0; t < 8 && st == QGEN_OK; t++) { /* draft tokens, one step at a time */
    uint8_t *kt = tmalloc(RB_SEQS * s.tok_bytes), *vt = tmalloc(RB_SEQS * s.tok_bytes);
    for (int q = 0; q < RB_SEQS; q++) rb_new(&s, q, 1, kt + q * s.tok_bytes, vt + q * s.tok_bytes);
    st = qgen_append_decode(a, seqs, RB_SEQS, P(kt), P(vt), NULL);
    tfree(kt), tfree(vt);
  }
  /* 138, 72, 18 tokens: keep 133 (5 on page 2), 64 (a page boundary), 0 */
  const long long cut[RB_SEQS] = {5, 8, 18};
  for (int q = 0; q < RB_SEQS && st == QGEN_OK; q++)
    if ((st = qgen_rollback(a, q, cut[q])) == QGEN_OK) s.len[q] -= cut[q];
  qgen_kv *b = st == QGEN_OK ? rb_fresh(ctx, &s) : NULL;
  int same = b && rb_same(a, b, &s, exact, 7, why, sizeof why);
  check(st == QGEN_OK && same && qgen_seq_len(a, 0) == 133 && qgen_seq_len(a, 1) == 64 && qgen_seq_len(a, 2) == 0,
        "%s: rolled back into a page, to a page boundary and to nothing, the cache is one that never held those tokens%s%s%s",
        tag, *why ? ": " : "", why, st == QGEN_OK ? "" : qgen_error(ctx));
  qgen_cache_destroy(b);
  /* 3 more tokens each (written over the removed ones), then 70 off sequence 0 (136 -> 66) */
  for (int q = 0; q < RB_SEQS && st == QGEN_OK; q++) {
    rb_new(&s, q, 3, k, v);
    st = qgen_append(a, &q, 1, (int[]){3}, P(k), P(v), NULL);
  }
  b = st == QGEN_OK ? rb_fresh(ctx, &s) : NULL;
  same = b && (exact || !in.sparse ? rb_same(a, b, &s, 1, 0, why, sizeof why) : 1);
  check(st == QGEN_OK && same, "%s: appends after it give the fresh cache's bytes%s%s%s", tag, exact || !in.sparse ? "" : " (not compared: a lossy K's bounds are of its stored keys)",
        *why ? ": " : "", why);
  qgen_cache_destroy(b);
  if (st == QGEN_OK && (st = qgen_rollback(a, 0, 70)) == QGEN_OK) s.len[0] -= 70;
  b = st == QGEN_OK ? rb_fresh(ctx, &s) : NULL;
  same = b && rb_same(a, b, &s, exact, 1, why, sizeof why);
  check(st == QGEN_OK && same && qgen_seq_len(a, 0) == 66, "%s: 70 tokens off across pages%s%s", tag, *why ? ": " : "", why);
  /* attends read the same tokens; a reused selection drops its pages past the new length */
  const int nm = in.sparse ? (exact ? 2 : 1) : 1;
  qgen_attend_opts *modes[2] = {&dense, &sparse};
  int out_same = 1;
  for (int m = 0; m < nm && st == QGEN_OK && b; m++) {
    memset(oa, 0xA5, RB_SEQS * ob), memset(of, 0x5A, RB_SEQS * ob);
    st = qgen_attend(a, seqs, RB_SEQS, P(qv), P(oa), modes[m], NULL);
    if (st == QGEN_OK) st = qgen_attend(b, seqs, RB_SEQS, P(qv), P(of), modes[m], NULL);
    pull(oa), pull(of);
    out_same &= !memcmp(oa, of, RB_SEQS * (size_t)in.n_head * in.head_dim * 2);
  }
  check(st == QGEN_OK && out_same, "%s: attend (%s) over it gives the fresh cache's outputs", tag, nm == 2 ? "dense and sparse" : "dense");
  if (in.sparse && st == QGEN_OK) {
    int s1 = 1;
    st = qgen_attend(a, &s1, 1, P(qv), P(oa), &reuse, NULL);
    check(st == QGEN_OK, "%s: a reuse of the selection made before the rollback runs%s", tag, st == QGEN_OK ? "" : qgen_error(ctx));
  }
  qgen_cache_destroy(b);
  tfree(k), tfree(v), tfree(qv), tfree(oa), tfree(of);
  for (int q = 0; q < RB_SEQS; q++) free(s.k[q]), free(s.v[q]);
  qgen_cache_destroy(a);
  qgen_close(ctx);
}

/* Outputs a and b (n f16) agree: bit for bit on the CPU backend, whose steps of several tokens
   and one-token steps share one code path; within two f16 ulps on the GPU, whose steps of
   several tokens, windows and sinks run other kernels (an engine module) than one-token
   steps, summing in another order. */
static int same_out(const uint16_t *a, const uint16_t *b, size_t n) {
  if (backend != QGEN_BACKEND_GPU) return !memcmp(a, b, n * 2);
  for (size_t i = 0; i < n; i++) {
    const float x = qgen_f16_to_f32(a[i]), y = qgen_f16_to_f32(b[i]);
    if (!(fabsf(x - y) <= 2e-3f * fabsf(y) + 1e-4f)) return 0;
  }
  return 1;
}

/* qgen_attend_multi: all n_q 1 is qgen_attend bit for bit (sparse, then dense); a dense step
   of 5, 1 and 16 tokens gives, for token j, qgen_attend's output on the cache rolled back to
   that token (same_out); a sparse one runs and leaves one selection per sequence; a window. */
static void multi_steps(void) {
  enum { NS = 3 };
  qgen_ctx *ctx;
  qgen_kv *a, *b;
  qgen_info in;
  if (two_caches(QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", NS, 400, "multi", &ctx, &a, &b, &in) != 0) return;
  const size_t row = (size_t)in.n_head_kv * in.head_dim, qe = (size_t)in.n_head * in.head_dim;
  int seqs[NS] = {2, 0, 1}, lens[NS] = {300, 70, 16}, ones[NS] = {1, 1, 1}, nq[NS] = {5, 1, 16};
  uint16_t *k = f16_rows(386 * row), *v = f16_rows(386 * row), *q = f16_rows(22 * qe);
  uint16_t *o1 = tmalloc(22 * qe * 2), *o2 = tmalloc(22 * qe * 2);
  qgen_status st = qgen_append(a, seqs, NS, lens, P(k), P(v), NULL);
  if (st == QGEN_OK) st = qgen_append(b, seqs, NS, lens, P(k), P(v), NULL);
  qgen_attend_opts sparse = qgen_attend_defaults(ctx), dense = sparse;
  dense.mode = QGEN_ATTEND_DENSE;
  int same = 1;
  for (int m = 0; m < 2 && st == QGEN_OK; m++) {
    memset(o1, 0xA5, 22 * qe * 2), memset(o2, 0x5A, 22 * qe * 2);
    st = qgen_attend_multi(a, seqs, NS, ones, P(q), P(o1), m ? &dense : &sparse, NULL);
    if (st == QGEN_OK) st = qgen_attend(b, seqs, NS, P(q), P(o2), m ? &dense : &sparse, NULL);
    pull(o1), pull(o2);
    same &= !memcmp(o1, o2, NS * qe * 2);
  }
  check(st == QGEN_OK && same, "multi: qgen_attend_multi with one token a sequence is qgen_attend bit for bit (sparse, "
        "dense)%s", st == QGEN_OK ? "" : qgen_error(ctx));
  {
    memset(o1, 0xA5, 22 * qe * 2);
    st = qgen_attend_multi(a, seqs, NS, nq, P(q), P(o1), &dense, NULL);
    pull(o1);
    /* token j of sequence i against a one-token attend over the first len - (nq - 1 - j) */
    int r0 = 0;
    same = st == QGEN_OK;
    for (int i = 0; i < NS && st == QGEN_OK; i++) {
      for (int j = nq[i] - 1; j >= 0 && st == QGEN_OK; j--) {
        memset(o2, 0x5A, qe * 2);
        st = qgen_attend(b, &seqs[i], 1, P(q + (size_t)(r0 + j) * qe), P(o2), &dense, NULL);
        pull(o2);
        same &= st == QGEN_OK && same_out(o1 + (size_t)(r0 + j) * qe, o2, qe);
        if (st == QGEN_OK && j > 0) st = qgen_rollback(b, seqs[i], 1);
      }
      r0 += nq[i];
    }
    check(st == QGEN_OK && same, "multi: a dense step of 5, 1 and 16 tokens: token j's output is the one-token attend "
          "over the cache without the step's later tokens (same_out)%s", st == QGEN_OK ? "" : qgen_error(ctx));
    int lists[8 * 8], counts[8] = {0};
    qgen_attend_opts quarter = sparse;
    quarter.coverage = 0.25, quarter.budget = 0, quarter.sink = quarter.recent = 0;
    st = qgen_attend_multi(a, seqs, NS, nq, P(q), P(o1), &quarter, NULL);
    if (st == QGEN_OK) st = qgen_kv_selection(a, 2, lists, counts);
    check(st == QGEN_OK && counts[0] == 2 && lists[1] == 4, "multi: a sparse step of 5 tokens over 300 at coverage 0.25 keeps "
          "one selection, its last page in it (%d of 5 pages for KV head 0)%s", counts[0], st == QGEN_OK ? "" : qgen_error(ctx));
    /* a window of 37: the outputs of a cache holding only the window's tokens (positions do
       not enter: the keys are stored after RoPE), for each token of a 5-token step */
    qgen_attend_opts win = dense;
    win.window = 37;
    st = qgen_attend_multi(a, seqs, 1, nq, P(q), P(o1), &win, NULL);
    pull(o1);
    same = st == QGEN_OK;
    for (int j = 0; j < 5 && st == QGEN_OK; j++) {
      qgen_kv *c = NULL;
      const int s2 = 2, w = 37, first = 300 - 4 + j - 37; /* sequence 2's rows lead k and v */
      st = qgen_cache_create(ctx, &c, NS, 400);
      if (st == QGEN_OK) st = qgen_append(c, &s2, 1, &w, P(k + (size_t)first * row), P(v + (size_t)first * row), NULL);
      if (st == QGEN_OK) st = qgen_attend(c, &s2, 1, P(q + (size_t)j * qe), P(o2), &dense, NULL);
      pull(o2);
      same &= st == QGEN_OK && same_out(o1 + (size_t)j * qe, o2, qe);
      qgen_cache_destroy(c);
    }
    check(st == QGEN_OK && same, "multi: window 37: each token of a 5-token step attends its last 37 tokens: the attend "
          "of a cache of only those (same_out)%s", st == QGEN_OK ? "" : qgen_error(ctx));
  }
  tfree(k), tfree(v), tfree(q), tfree(o1), tfree(o2);
  qgen_cache_destroy(a);
  qgen_cache_destroy(b);
  qgen_close(ctx);
}

/* ---- shared prefixes ----------------------------------------------------------------- */

/* Attends (sparse and dense) of sequences seqs in a and b give the same bytes, and the
   sparse selections are the same lists. */
static int same_attends(qgen_ctx *ctx, qgen_kv *a, qgen_kv *b, const int *seqs, int n, const uint16_t *q) {
  qgen_info in;
  qgen_get_info(ctx, &in);
  const size_t qe = (size_t)in.n_head * in.head_dim;
  uint16_t *oa = tmalloc((size_t)n * qe * 2), *ob = tmalloc((size_t)n * qe * 2);
  qgen_attend_opts sparse = qgen_attend_defaults(ctx), dense = sparse;
  sparse.sink = sparse.recent = 0, sparse.coverage = 0.5, sparse.budget = 0;
  dense.mode = QGEN_ATTEND_DENSE;
  int same = 1;
  for (int m = 0; m < 2 && same; m++) {
    memset(oa, 0xA5, (size_t)n * qe * 2), memset(ob, 0x5A, (size_t)n * qe * 2);
    same = qgen_attend(a, seqs, n, P(q), P(oa), m ? &dense : &sparse, NULL) == QGEN_OK &&
           qgen_attend(b, seqs, n, P(q), P(ob), m ? &dense : &sparse, NULL) == QGEN_OK;
    pull(oa), pull(ob);
    same = same && !memcmp(oa, ob, (size_t)n * qe * 2);
    const long long pps = qgen_kv_pages_per_seq(a);
    int *la = calloc((size_t)(in.n_head_kv * pps), sizeof *la), *lb = calloc((size_t)(in.n_head_kv * pps), sizeof *lb);
    int *ca = calloc((size_t)in.n_head_kv, sizeof *ca), *cb = calloc((size_t)in.n_head_kv, sizeof *cb);
    for (int i = 0; i < n && same && m == 0; i++) {
      same = qgen_kv_selection(a, seqs[i], la, ca) == QGEN_OK && qgen_kv_selection(b, seqs[i], lb, cb) == QGEN_OK &&
             !memcmp(ca, cb, (size_t)in.n_head_kv * sizeof *ca);
      for (int h = 0; h < in.n_head_kv && same; h++) same = !memcmp(la + h * pps, lb + h * pps, (size_t)ca[h] * sizeof *la);
    }
    free(la), free(lb), free(ca), free(cb);
  }
  tfree(oa), tfree(ob);
  return same;
}

/* qgen_share_prefix against caches fed each sequence's tokens alone: a prefix of 2 whole
   pages and 2 tokens, appends after it to both sequences, a chain, rollbacks that would cut
   into the shared pages refused, resets that leave the other sequence intact and let the
   reset one append at once. */
static void shared_prefixes(void) {
  enum { NS = 4, CAP = 320 };
  qgen_ctx *ctx;
  qgen_kv *a, *f;
  qgen_info in;
  if (two_caches(QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", NS, CAP, "share", &ctx, &a, &f, &in) != 0) return;
  const size_t row = (size_t)in.n_head_kv * in.head_dim, qe = (size_t)in.n_head * in.head_dim;
  uint16_t *k = f16_rows(700 * row), *v = f16_rows(700 * row), *q = f16_rows(NS * qe);
  int s0 = 0, s1 = 1, s2 = 2, n150 = 150, n20 = 20, n30 = 30, n10 = 10, seqs[3] = {0, 1, 2};
  qgen_status st = qgen_append(a, &s0, 1, &n150, P(k), P(v), NULL);
  if (st == QGEN_OK) st = qgen_share_prefix(a, 0, 1, 130);
  if (st == QGEN_OK) st = qgen_append(a, &s0, 1, &n20, P(k + 150 * row), P(v + 150 * row), NULL);
  if (st == QGEN_OK) st = qgen_append(a, &s1, 1, &n30, P(k + 300 * row), P(v + 300 * row), NULL);
  /* the fresh cache: 0 holds rows [0, 170); 1 rows [0, 130) then [300, 330) */
  int n130 = 130;
  if (st == QGEN_OK) st = qgen_append(f, &s0, 1, (int[]){170}, P(k), P(v), NULL);
  if (st == QGEN_OK) st = qgen_append(f, &s1, 1, &n130, P(k), P(v), NULL);
  if (st == QGEN_OK) st = qgen_append(f, &s1, 1, &n30, P(k + 300 * row), P(v + 300 * row), NULL);
  check(st == QGEN_OK && qgen_seq_len(a, 1) == 160 && same_attends(ctx, a, f, seqs, 2, q),
        "share: a prefix of 130 tokens (2 pages shared, 2 tokens copied), then 20 and 30 more: attends and selections "
        "of a cache fed each sequence alone%s", st == QGEN_OK ? "" : qgen_error(ctx));
  /* a chain: 2 takes 1's first 140 tokens (its shared pages and 12 of its own page) */
  if (st == QGEN_OK) st = qgen_share_prefix(a, 1, 2, 140);
  if (st == QGEN_OK) st = qgen_append(a, &s2, 1, &n10, P(k + 450 * row), P(v + 450 * row), NULL);
  if (st == QGEN_OK) st = qgen_append(f, &s2, 1, &n130, P(k), P(v), NULL);
  if (st == QGEN_OK) st = qgen_append(f, &s2, 1, &n10, P(k + 300 * row), P(v + 300 * row), NULL);
  if (st == QGEN_OK) st = qgen_append(f, &s2, 1, &n10, P(k + 450 * row), P(v + 450 * row), NULL);
  check(st == QGEN_OK && same_attends(ctx, a, f, seqs, 3, q), "share: a chain (1's first 140 to 2, then 10 more)%s",
        st == QGEN_OK ? "" : qgen_error(ctx));
  qgen_ext_clear_error(ctx);
  st = qgen_rollback(a, 1, 40);
  check(st == QGEN_ERR_INVALID_ARG && strstr(qgen_error(ctx), "shares") && qgen_seq_len(a, 1) == 160,
        "share: a rollback into a shared page is refused: %s", qgen_error(ctx));
  st = qgen_rollback(a, 2, 10); /* 150 -> 140, within 2's own page */
  if (st == QGEN_OK) st = qgen_rollback(f, 2, 10);
  check(st == QGEN_OK && same_attends(ctx, a, f, seqs, 3, q), "share: a rollback within the sequence's own page%s",
        st == QGEN_OK ? "" : qgen_error(ctx));
  qgen_ext_clear_error(ctx);
  check(qgen_share_prefix(a, 0, 1, 10) == QGEN_ERR_INVALID_ARG && strstr(qgen_error(ctx), "empty sequence") &&
            qgen_share_prefix(a, 0, 3, 171) == QGEN_ERR_INVALID_ARG && qgen_share_prefix(a, 0, 3, 0) == QGEN_ERR_INVALID_ARG &&
            qgen_share_prefix(a, 3, 3, 1) == QGEN_ERR_INVALID_ARG && qgen_share_prefix(a, 0, NS, 1) == QGEN_ERR_INVALID_ARG &&
            qgen_share_prefix(NULL, 0, 3, 1) == QGEN_ERR_INVALID_ARG && qgen_seq_len(a, 3) == 0,
        "share: into a sequence with tokens, past src's length, 0 tokens, onto itself, a bad id: refused");
  /* 0 reset and fed anew at once; 1 and 2 still read the pages they share */
  st = qgen_reset(a, 0);
  if (st == QGEN_OK) st = qgen_reset(f, 0);
  if (st == QGEN_OK) st = qgen_append(a, &s0, 1, &n150, P(k + 500 * row), P(v + 500 * row), NULL);
  if (st == QGEN_OK) st = qgen_append(f, &s0, 1, &n150, P(k + 500 * row), P(v + 500 * row), NULL);
  check(st == QGEN_OK && same_attends(ctx, a, f, seqs, 3, q), "share: the source reset and fed 150 new tokens at once; "
        "the sharers unchanged%s", st == QGEN_OK ? "" : qgen_error(ctx));
  st = qgen_reset(a, 1);
  if (st == QGEN_OK) st = qgen_reset(f, 1);
  if (st == QGEN_OK) st = qgen_append(a, &s1, 1, &n150, P(k + 200 * row), P(v + 200 * row), NULL);
  if (st == QGEN_OK) st = qgen_append(f, &s1, 1, &n150, P(k + 200 * row), P(v + 200 * row), NULL);
  check(st == QGEN_OK && same_attends(ctx, a, f, seqs, 3, q), "share: a sharer reset and fed anew%s",
        st == QGEN_OK ? "" : qgen_error(ctx));
  tfree(k), tfree(v), tfree(q);
  qgen_cache_destroy(a);
  qgen_cache_destroy(f);
  qgen_close(ctx);
}

/* Random appends, rollbacks, shared prefixes and resets on 4 sequences against a model of
   each sequence's tokens: after every call, refused or not, the cache attends (sparse and
   dense, with its selections) as a cache fed the model's tokens would; a refused call
   changed nothing; no append is refused (a reset or emptied sequence can always be fed). */
static void random_ops(void) {
  enum { NS = 4, CAP = 260, POOL = 4000, OPS = 250 };
  qgen_ctx *ctx;
  qgen_kv *a, *unused;
  qgen_info in;
  if (two_caches(QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", NS, CAP, "random ops", &ctx, &a, &unused, &in) != 0) return;
  qgen_cache_destroy(unused);
  const size_t row = (size_t)in.n_head_kv * in.head_dim, qe = (size_t)in.n_head * in.head_dim;
  uint16_t *k = f16_rows(POOL * row), *v = f16_rows(POOL * row), *q = f16_rows(NS * qe);
  uint16_t *kb = tmalloc((size_t)NS * CAP * row * 2), *vb = tmalloc((size_t)NS * CAP * row * 2);
  int tok[NS][CAP], len[NS] = {0}, next = 0, seqs[NS] = {0, 1, 2, 3}, bad = 0, refused = 0, shares = 0, op = 0;
  uint64_t r = 0x5eed;
  for (; op < OPS && !bad; op++) {
    const int s = (int)(qgen_rng_next(&r) % NS), t = (int)(qgen_rng_next(&r) % NS), kind = (int)(qgen_rng_next(&r) % 8);
    qgen_status st;
    if (kind < 4) { /* append 1..24 new tokens */
      int n = 1 + (int)(qgen_rng_next(&r) % 24);
      if (len[s] + n > CAP) n = CAP - len[s];
      if (next + n > POOL) break;
      st = n ? qgen_append(a, &s, 1, &n, P(k + (size_t)next * row), P(v + (size_t)next * row), NULL) : QGEN_OK;
      bad |= st != QGEN_OK; /* a reset or emptied sequence's pages are always free again */
      for (int i = 0; st == QGEN_OK && i < n; i++) tok[s][len[s]++] = next + i;
      next += n;
    } else if (kind < 6) { /* roll back 0..len */
      const int n = len[s] ? (int)(qgen_rng_next(&r) % (uint64_t)(len[s] + 1)) : 0;
      if ((st = qgen_rollback(a, s, n)) == QGEN_OK) len[s] -= n;
    } else if (kind == 6) { /* share 1..len of s into t, an empty one when there is one */
      int d = t;
      for (int x = 0; x < NS; x++) d = len[x] == 0 && x != s ? x : d;
      const int n = 1 + (len[s] ? (int)(qgen_rng_next(&r) % (uint64_t)len[s]) : 0);
      if ((st = qgen_share_prefix(a, s, d, n)) == QGEN_OK) memcpy(tok[d], tok[s], (size_t)n * sizeof **tok), len[d] = n, shares++;
    } else {
      if ((st = qgen_reset(a, s)) == QGEN_OK) len[s] = 0;
    }
    bad |= st != QGEN_OK && st != QGEN_ERR_INVALID_ARG;
    refused += st != QGEN_OK;
    /* a fresh cache of the model's tokens */
    qgen_kv *f = NULL;
    size_t o = 0;
    for (int x = 0; x < NS; x++)
      for (int i = 0; i < len[x]; i++, o++)
        memcpy(kb + o * row, k + (size_t)tok[x][i] * row, row * 2), memcpy(vb + o * row, v + (size_t)tok[x][i] * row, row * 2);
    bad |= qgen_cache_create(ctx, &f, NS, CAP) != QGEN_OK || qgen_append(f, seqs, NS, len, P(kb), P(vb), NULL) != QGEN_OK;
    int live[NS], nl = 0;
    for (int x = 0; x < NS; x++)
      if (len[x]) live[nl++] = x;
    bad |= !bad && nl && !same_attends(ctx, a, f, live, nl, q);
    for (int x = 0; x < NS; x++) bad |= qgen_seq_len(a, x) != len[x];
    qgen_cache_destroy(f);
  }
  check(!bad && op == OPS && shares > 10, "random ops: %d appends, rollbacks, shared prefixes (%d) and resets (%d refused), "
        "each followed by attends equal to a cache fed the tokens alone%s%s", op, shares, refused, bad ? " -- " : "",
        bad ? qgen_error(ctx) : "");
  tfree(k), tfree(v), tfree(q), tfree(kb), tfree(vb);
  qgen_cache_destroy(a);
  qgen_close(ctx);
}

static void bad_opens(void) {
  qgen_open_opts cpu = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  qgen_ctx *c = (qgen_ctx *)&c;
  const char *spec = QGEN_SOURCE_DIR "/specs/qwen3-4b.lua";
  qgen_status st;

  check(qgen_open(NULL, spec, &cpu) == QGEN_ERR_INVALID_ARG, "qgen_open: ctx NULL");
  st = qgen_open(&c, NULL, &cpu);
  check(st == QGEN_ERR_INVALID_ARG && c && strstr(qgen_error(c), "qgen_open"), "qgen_open: path NULL: %s -- \"%s\"",
        qgen_status_str(st), qgen_error(c));
  qgen_close(c);

  const char *missing = QGEN_SOURCE_DIR "/specs/no-such-spec.lua";
  st = qgen_open(&c, missing, &cpu);
  check(st == QGEN_ERR_SPEC && c && strstr(qgen_error(c), "no-such-spec.lua") && strstr(qgen_error(c), "cannot open"),
        "qgen_open: a missing file: %s -- \"%s\"", qgen_status_str(st), qgen_error(c));
  qgen_close(c);

  const char *bad = QGEN_SOURCE_DIR "/tests/specs_bad/n_head_not_multiple.lua";
  char want[8192];
  qgen_spec_set *set = malloc(sizeof *set);
  qgen_spec_load(bad, set, want, sizeof want); /* the loader's own message */
  free(set);
  st = qgen_open(&c, bad, &cpu);
  check(st == QGEN_ERR_SPEC && c && strcmp(qgen_error(c), want) == 0 && strstr(want, "n_head_not_multiple.lua:"),
        "qgen_open: a bad spec is QGEN_ERR_SPEC with the loader's message: \"%s\"", qgen_error(c));
  qgen_close(c);

  const char *syn = QGEN_SOURCE_DIR "/tests/specs_bad/syntax_error.lua";
  st = qgen_open(&c, syn, &cpu);
  check(st == QGEN_ERR_SPEC && c && strstr(qgen_error(c), "syntax_error.lua"), "qgen_open: a syntax error: %s -- \"%s\"",
        qgen_status_str(st), qgen_error(c));
  qgen_close(c);

  qgen_open_opts unk = {(qgen_backend)7, 0, NULL, NULL};
  st = qgen_open(&c, spec, &unk);
  check(st == QGEN_ERR_INVALID_ARG && c && strstr(qgen_error(c), "qgen_open") && strstr(qgen_error(c), "backend"),
        "qgen_open: backend 7: %s -- \"%s\"", qgen_status_str(st), qgen_error(c));
  qgen_close(c);
  unk.backend = (qgen_backend)-1;
  st = qgen_open(&c, spec, &unk);
  check(st == QGEN_ERR_INVALID_ARG, "qgen_open: backend -1: %s", qgen_status_str(st));
  qgen_close(c);

  /* QGEN_EMULATE names an architecture of the table or the open fails naming the allowed
     ones; a known one opens (the CPU backend has no launches to cap). */
  setenv("QGEN_EMULATE", "sm_75", 1);
  st = qgen_open(&c, spec, &cpu);
  check(st == QGEN_ERR_INVALID_ARG && c && strstr(qgen_error(c), "QGEN_EMULATE=sm_75") && strstr(qgen_error(c), "sm_86"),
        "qgen_open: QGEN_EMULATE=sm_75 refused: %s -- \"%s\"", qgen_status_str(st), qgen_error(c));
  qgen_close(c);
  setenv("QGEN_EMULATE", "sm_86", 1);
  st = qgen_open(&c, spec, &cpu);
  check(st == QGEN_OK, "qgen_open: QGEN_EMULATE=sm_86 on the CPU backend opens: %s", qgen_status_str(st));
  qgen_close(c);
  unsetenv("QGEN_EMULATE");

  qgen_open_opts var = {QGEN_BACKEND_CPU, 0, "qwen3-4b-nope", NULL};
  st = qgen_open(&c, spec, &var);
  check(st == QGEN_ERR_SPEC && c && strstr(qgen_error(c), "qwen3-4b-nope"), "qgen_open: an unknown variant: %s -- \"%s\"",
        qgen_status_str(st), qgen_error(c));
  /* a context that failed to open makes no cache */
  qgen_kv *kv = (qgen_kv *)&kv;
  st = qgen_cache_create(c, &kv, 1, 64);
  check(st != QGEN_OK && kv == NULL, "qgen_cache_create on a context that failed to open: %s", qgen_status_str(st));
  qgen_close(c);

  /* a spec given as text: opens like a file; a bad one names its chunk and line */
  const char *text = "return spec{ name = \"api-text\", head_dim = 64, n_head = 4, n_head_kv = 2,\n"
                     "  archs = { \"sm_90\" } }\n";
  st = qgen_open_text(&c, text, "<python>", &cpu);
  qgen_info ti;
  qgen_get_info(c, &ti);
  kv = NULL;
  check(st == QGEN_OK && !strcmp(ti.name, "api-text") && ti.n_head == 4 && qgen_cache_create(c, &kv, 1, 64) == QGEN_OK,
        "qgen_open_text: a valid spec text opens and makes a cache: %s -- \"%s\"", qgen_status_str(st), qgen_error(c));
  qgen_cache_destroy(kv);
  qgen_close(c);
  st = qgen_open_text(&c, "return spec{ name = \"api-text\",\n  head_dim = = 64 }\n", "<python>", &cpu);
  check(st == QGEN_ERR_SPEC && c && strstr(qgen_error(c), "<python>:2:"), "qgen_open_text: a syntax error on line 2: %s -- \"%s\"",
        qgen_status_str(st), qgen_error(c));
  qgen_close(c);
  st = qgen_open_text(&c, "return spec{ name = \"api-text\", head_dim = 64,\n  n_head = 5, n_head_kv = 2 }\n", NULL, &cpu);
  check(st == QGEN_ERR_SPEC && c && strstr(qgen_error(c), "<text>:"), "qgen_open_text: a bad field, unnamed chunk: %s -- \"%s\"",
        qgen_status_str(st), qgen_error(c));
  qgen_close(c);
  st = qgen_open_text(&c, text, "<python>", &var);
  check(st == QGEN_ERR_SPEC && c && strstr(qgen_error(c), "<python>: no variant named 'qwen3-4b-nope'"),
        "qgen_open_text: an unknown variant: %s -- \"%s\"", qgen_status_str(st), qgen_error(c));
  qgen_close(c);
  st = qgen_open_text(&c, NULL, "<python>", &cpu);
  check(st == QGEN_ERR_INVALID_ARG && c && strstr(qgen_error(c), "qgen_open_text"), "qgen_open_text: text NULL: %s -- \"%s\"",
        qgen_status_str(st), qgen_error(c));
  qgen_close(c);
  check(qgen_open_text(NULL, text, NULL, &cpu) == QGEN_ERR_INVALID_ARG, "qgen_open_text: ctx NULL");

  qgen_open_opts v8 = {QGEN_BACKEND_CPU, 0, "qwen3-4b-q8_0", NULL};
  st = qgen_open(&c, spec, &v8);
  qgen_info info;
  qgen_get_info(c, &info);
  check(st == QGEN_OK && !strcmp(info.name, "qwen3-4b-q8_0") && !strcmp(info.k_type, "q8_0"), "qgen_open: a named variant opens");
  qgen_close(c);

  qgen_close(NULL);
  qgen_get_info(NULL, &info);
  check(qgen_error(NULL) && *qgen_error(NULL), "qgen_error(NULL) is a message: \"%s\"", qgen_error(NULL));
  qgen_attend_opts d = qgen_attend_defaults(NULL);
  check(d.mode == QGEN_ATTEND_DENSE, "qgen_attend_defaults(NULL) is dense");
}

static void bad_cache_creates(void) {
  qgen_ctx *c;
  if (open_cpu(QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", NULL, &c) != 0) {
    check(0, "open for qgen_cache_create checks");
    return;
  }
  qgen_kv *kv;
  check(qgen_cache_create(NULL, &kv, 1, 64) == QGEN_ERR_INVALID_ARG, "qgen_cache_create: ctx NULL");
  qgen_ext_clear_error(c);
  qgen_status st = qgen_cache_create(c, NULL, 1, 64);
  check(st == QGEN_ERR_INVALID_ARG && strstr(qgen_error(c), "qgen_cache_create"), "qgen_cache_create: kv NULL -- \"%s\"",
        qgen_error(c));
  struct {
    int seqs;
    long long tokens;
  } bad[] = {{0, 64}, {-1, 64}, {INT_MIN, 64}, {1, 0}, {1, -1}, {1, LLONG_MIN}, {1, (long long)INT32_MAX + 1},
             {1, 1LL << 40}, {1, LLONG_MAX}, {INT_MAX, INT32_MAX}, {1 << 20, 1 << 24}, {65536, INT32_MAX}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    kv = (qgen_kv *)&kv;
    qgen_ext_clear_error(c);
    st = qgen_cache_create(c, &kv, bad[i].seqs, bad[i].tokens);
    check(st == QGEN_ERR_INVALID_ARG && kv == NULL && strstr(qgen_error(c), "qgen_cache_create"),
          "qgen_cache_create: max_seqs %d, max_tokens %lld: %s -- \"%s\"", bad[i].seqs, bad[i].tokens,
          qgen_status_str(st), qgen_error(c));
  }
  st = qgen_cache_create(c, &kv, 1, 1);
  check(st == QGEN_OK && kv && qgen_kv_pages_per_seq(kv) == 1, "qgen_cache_create: 1 sequence of 1 token works");
  qgen_cache_destroy(kv);
  qgen_cache_destroy(NULL);
  qgen_close(c);
}

/* A spec whose budget is in tokens: the defaults carry the budget
   alone, and a coverage set on top of them is refused rather than silently ignored. */
static void budget_spec(void) {
  const char *text = "return spec{ name = \"api-budget\", head_dim = 64, n_head = 4, n_head_kv = 2,\n"
                     "  sparse = { budget = 64 }, archs = { \"sm_90\" } }\n";
  qgen_open_opts oo = {backend, 0, NULL, NULL};
  qgen_ctx *c = NULL;
  qgen_kv *kv = NULL;
  qgen_status st = qgen_open_text(&c, text, "<budget>", &oo);
  if (st != QGEN_OK || qgen_cache_create(c, &kv, 1, 256) != QGEN_OK) {
    check(0, "budget spec: open and cache: %s -- \"%s\"", qgen_status_str(st), qgen_error(c));
    qgen_close(c);
    return;
  }
  qgen_attend_opts d = qgen_attend_defaults(c), o = d;
  check(d.mode == QGEN_ATTEND_SPARSE && d.budget == 64 && d.coverage == 0.0,
        "budget spec: qgen_attend_defaults has budget %lld and coverage %g", d.budget, d.coverage);
  const size_t row = 2 * 64, qn = 4 * 64;
  uint16_t *k = f16_rows(100 * row), *v = f16_rows(100 * row), *q = f16_rows(qn), *out = tmalloc(qn * 2);
  int s0 = 0, n = 100;
  st = qgen_append(kv, &s0, 1, &n, P(k), P(v), NULL);
  st = st == QGEN_OK ? qgen_attend(kv, &s0, 1, P(q), P(out), &d, NULL) : st;
  check(st == QGEN_OK, "budget spec: append + attend with the defaults: %s", qgen_status_str(st));
  o.coverage = 1;
  qgen_ext_clear_error(c);
  st = qgen_attend(kv, &s0, 1, P(q), P(out), &o, NULL);
  check(st == QGEN_ERR_INVALID_ARG && strstr(qgen_error(c), "both"),
        "budget spec: the defaults with coverage = 1 are refused: %s -- \"%s\"", qgen_status_str(st), qgen_error(c));
  o.budget = 0;
  st = qgen_attend(kv, &s0, 1, P(q), P(out), &o, NULL);
  check(st == QGEN_OK, "budget spec: coverage = 1 with budget = 0 works: %s", qgen_status_str(st));
  tfree(k), tfree(v), tfree(q), tfree(out);
  qgen_cache_destroy(kv);
  qgen_close(c);
}

/* Two-stage selection on the CPU backend (sparse.rescore, with top-p cut top_p < 1): the
   step's lists are the reference's two-stage (top-p) lists from its own functions, its
   output the reference attend over them, the sketch the q4_0 form of the stored K rows, and
   a budget covering the context is the dense step bit for bit. */
static void rescore_steps(double top_p) {
  char text[512];
  snprintf(text, sizeof text,
           "return spec{ name = \"api-rescore\", head_dim = 64, n_head = 6, n_head_kv = 2, sparse = { block = 32,\n"
           "  coverage = 0.125, sink = 32, recent = 64, rescore = { candidates = 4, top_p = %.17g } } }\n", top_p);
  qgen_open_opts oo = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  qgen_ctx *c = NULL;
  qgen_kv *kv = NULL;
  qgen_status st = qgen_open_text(&c, text, "<rescore>", &oo);
  if (st != QGEN_OK || qgen_cache_create(c, &kv, 1, 4096) != QGEN_OK) {
    check(0, "rescore spec: open and cache: %s -- \"%s\"", qgen_status_str(st), qgen_error(c));
    qgen_close(c);
    return;
  }
  const qgen_layout *L = qgen_ext_layout(c);
  const int D = 64, Hkv = 2, B = 32, n_tok = 3000;
  const int64_t np = qgen_pages_of(n_tok, B);
  const size_t row = (size_t)Hkv * D, qn = 6 * 64;
  uint16_t *k = f16_rows((size_t)n_tok * row), *v = f16_rows((size_t)n_tok * row), *q = f16_rows(qn);
  uint16_t *out = tmalloc(qn * 2), *out2 = tmalloc(qn * 2), *ref_out = tmalloc(qn * 2);
  int s0 = 0, n = n_tok;
  st = qgen_append(kv, &s0, 1, &n, P(k), P(v), NULL);
  qgen_attend_opts o = qgen_attend_defaults(c);
  st = st == QGEN_OK ? qgen_attend(kv, &s0, 1, P(q), P(out), &o, NULL) : st;
  check(st == QGEN_OK && L->rescore == 4 && L->sketch_page_bytes > 0, "rescore spec: append + attend: %s", qgen_status_str(st));

  const qgen_kvmem *m = qgen_ext_host_cache(kv);
  int *lists = tmalloc((size_t)Hkv * 128 * sizeof *lists), counts[2];
  qgen_kv_selection(kv, 0, lists, counts);
  double *bound = tmalloc((size_t)Hkv * np * sizeof *bound), *exact = tmalloc((size_t)np * sizeof *exact);
  int32_t *want = tmalloc((size_t)Hkv * np * sizeof *want);
  const int32_t *ptrs[2];
  int64_t rc[2];
  const qgen_budget b = {QGEN_BUDGET_COVERAGE, 0.125, 0, 32, 64};
  qgen_ref_estimate(L, m, 0, q, bound);
  int bad = 0, differs = 0, cut = 0;
  for (int h = 0; h < Hkv; h++) {
    qgen_ref_sketch_scores(L, m, 0, q, h, NULL, exact);
    int32_t *l = want + (size_t)h * np;
    rc[h] = qgen_ref_select_top_p(&b, n_tok, B, 4, L->top_p, L->scale, bound + (size_t)h * np, exact, l);
    int32_t quest[128], two[128];
    const int64_t qc = qgen_ref_select(&b, n_tok, B, bound + (size_t)h * np, quest);
    cut += qgen_ref_select_rescore(&b, n_tok, B, 4, bound + (size_t)h * np, exact, two) > rc[h];
    bad += rc[h] != counts[h] || memcmp(l, lists + (size_t)h * 128, (size_t)rc[h] * sizeof *l) != 0;
    differs += qc != rc[h] || memcmp(quest, l, (size_t)qc * sizeof *l) != 0;
    ptrs[h] = l;
  }
  qgen_ref_attend(L, m, 0, q, ptrs, rc, ref_out, NULL);
  check(bad == 0 && !memcmp(out, ref_out, qn * 2), "rescore step (top_p %g): lists (%d, %d pages) and output are the reference's",
        top_p, counts[0], counts[1]);
  check(differs > 0, "rescore step: two-stage changes some list from Quest's on random keys (%d of 2 heads)", differs);
  check(top_p < 1 ? cut == Hkv : cut == 0, "top_p %g: the cut shortens %d of 2 heads' two-stage lists", top_p, cut);

  /* the sketch: q4_0 of the stored K rows */
  const size_t skb = qgen_kv_size(kv, QGEN_KV_SKETCH);
  uint8_t *sk = tmalloc(skb), blk[64];
  float x[64];
  st = qgen_kv_read(kv, QGEN_KV_SKETCH, sk, skb);
  int sk_bad = st != QGEN_OK || skb != (size_t)4096 / B * L->sketch_page_bytes;
  for (int t = 0; t < n_tok && !sk_bad; t++)
    for (int h = 0; h < Hkv; h++) {
      const int64_t pg = m->page_table[t / B];
      const size_t slot = (size_t)h * B + (size_t)(t % B);
      qgen_type_traits_of(QGEN_TYPE_F16)->to_f32(m->k + (size_t)pg * L->k_page_bytes + slot * L->k_row_bytes, x, D);
      qgen_type_traits_of(QGEN_TYPE_Q4_0)->from_f32(x, blk, D);
      sk_bad += memcmp(blk, sk + (size_t)pg * L->sketch_page_bytes + slot * L->sketch_row_bytes, L->sketch_row_bytes) != 0;
    }
  check(sk_bad == 0 && L->sketch_row_bytes == 36, "rescore: the sketch pool holds the q4_0 form of every stored K row");

  /* a budget covering the context: the dense step, bit for bit */
  o.coverage = 1;
  qgen_attend_opts dn = o;
  dn.mode = QGEN_ATTEND_DENSE;
  st = qgen_attend(kv, &s0, 1, P(q), P(out), &o, NULL);
  st = st == QGEN_OK ? qgen_attend(kv, &s0, 1, P(q), P(out2), &dn, NULL) : st;
  check(st == QGEN_OK && !memcmp(out, out2, qn * 2), "rescore: coverage 1 is the dense step bit for bit");
  tfree(k), tfree(v), tfree(q), tfree(out), tfree(out2), tfree(ref_out), tfree(lists), tfree(bound), tfree(exact), tfree(want), tfree(sk);
  qgen_cache_destroy(kv);
  qgen_close(c);
}

/* CPU backend, sparse.bounds = "i8": a sparse step's output and page lists are
   qgen_ref_step's on the 8-bit path (and its lists are qgen_ref_select's over
   qgen_ref_estimate_i8's scores, so the step really ranks by the 8-bit bounds), and
   qgen_kv_read(QGEN_KV_BOUNDS_I8) gives qgen_ref_bounds_i8_row of every page's f16 bounds. */
static void bounds_i8_step(void) {
  const char *text = "return spec{ name = \"api-i8\", head_dim = 64, n_head = 8, n_head_kv = 2,\n"
                     "  sparse = { block = 32, coverage = 0.25, sink = 32, recent = 32, bounds = \"i8\" }, archs = { \"sm_90\" } }\n";
  qgen_open_opts oo = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  qgen_ctx *c = NULL;
  qgen_kv *kv = NULL;
  enum { LEN = 1000, H = 8, HKV = 2, DH = 64 };
  qgen_status st = qgen_open_text(&c, text, "<i8>", &oo);
  if (st != QGEN_OK || qgen_cache_create(c, &kv, 2, 1024) != QGEN_OK) {
    check(0, "i8 bounds: open and cache: %s -- \"%s\"", qgen_status_str(st), qgen_error(c));
    qgen_close(c);
    return;
  }
  const qgen_layout *L = qgen_ext_layout(c);
  uint16_t *k = malloc((size_t)LEN * HKV * DH * 2), *v = malloc((size_t)LEN * HKV * DH * 2);
  uint16_t *q = malloc(H * DH * 2), *out = malloc(H * DH * 2), *ref = malloc(H * DH * 2);
  for (size_t i = 0; i < (size_t)LEN * HKV * DH; i++) /* a few channels with offsets, like RoPE'd keys */
    k[i] = qgen_f32_to_f16(frand() + (i % DH == 5 ? 8.0f : i % DH == 9 ? -3.0f : 0.0f)), v[i] = qgen_f32_to_f16(frand());
  int s1 = 1, n = LEN;
  st = qgen_append(kv, &s1, 1, &n, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL);
  const qgen_kvmem *m = qgen_ext_host_cache(kv);
  const qgen_budget b = {QGEN_BUDGET_COVERAGE, 0.25, 0, 32, 32};
  const int64_t pps = qgen_kv_pages_per_seq(kv), np = (LEN + 31) / 32;
  int32_t *rl = malloc(sizeof(int32_t) * HKV * pps), *sl = malloc(sizeof(int32_t) * np);
  int gl[HKV * 64], gc[HKV];
  int64_t rc[HKV];
  double *sc = malloc(sizeof(double) * HKV * np);
  int same = st == QGEN_OK && L->bounds_i8, trials = 0;
  for (int t = 0; t < 20 && same; t++, trials++) {
    for (int i = 0; i < H * DH; i++) q[i] = qgen_f32_to_f16(2 * frand());
    st = qgen_attend(kv, &s1, 1, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)out, NULL, NULL);
    qgen_ref_step(L, m, 1, q, &b, ref, NULL, rl, rc);
    qgen_ref_estimate_i8(L, m, 1, q, sc);
    same &= st == QGEN_OK && qgen_kv_selection(kv, 1, gl, gc) == QGEN_OK && !memcmp(out, ref, H * DH * 2);
    for (int h = 0; h < HKV && same; h++) {
      const int64_t ns = qgen_ref_select(&b, LEN, 32, sc + h * np, sl);
      same &= gc[h] == rc[h] && ns == rc[h] && rc[h] < np;
      for (int64_t i = 0; i < rc[h] && same; i++) same &= gl[h * pps + i] == rl[h * pps + i] && sl[i] == rl[h * pps + i];
    }
  }
  check(same, "i8 bounds (CPU backend): %d sparse steps equal qgen_ref_step's (output bytes, page lists), the lists "
        "qgen_ref_select's over the 8-bit scores -- %s", trials, qgen_error(c));
  const size_t nb = qgen_kv_size(kv, QGEN_KV_BOUNDS_I8), rb = 2 * DH + 16;
  uint8_t *rows = malloc(nb ? nb : 1), *want = malloc(rb);
  int rows_ok = nb == (size_t)qgen_kv_n_pages(kv) * HKV * rb && qgen_kv_read(kv, QGEN_KV_BOUNDS_I8, rows, nb) == QGEN_OK;
  for (size_t r = 0; rows_ok && r < nb / rb; r++) {
    qgen_ref_bounds_i8_row(m->bounds + r * 2 * DH, DH, want);
    rows_ok &= !memcmp(rows + r * rb, want, rb);
  }
  check(rows_ok, "i8 bounds (CPU backend): qgen_kv_read(QGEN_KV_BOUNDS_I8) holds %zu bytes, the 8-bit rows of the f16 bounds", nb);
  free(k), free(v), free(q), free(out), free(ref), free(rl), free(sl), free(sc), free(rows), free(want);
  qgen_cache_destroy(kv);
  qgen_close(c);
}

/* QGEN_ATTEND_REUSE on the backend under test: the lists are the backend's own last sparse
   selection extended as qgen_ref_extend_list does (a page was begun since, so they grow),
   and the output is attention over exactly them (qgen_ref_attend over a CPU twin holding
   the same tokens: bit for bit on the CPU backend, within f16 rounding on the GPU). Refused
   before a selection and after a reset (nothing written), on a dense spec, and a bad mode's
   message names it. */
static void reuse_steps(void) {
  const char *text = "return spec{ name = \"api-reuse\", head_dim = 64, n_head = 6, n_head_kv = 2,\n"
                     "  sparse = { block = 32, coverage = 0.25, sink = 32, recent = 32 }, archs = { \"sm_90\" } }\n";
  enum { H = 6, HKV = 2, D = 64, B = 32, CAP = 2048, NS = 2 };
  qgen_open_opts oo = {backend, 0, NULL, NULL}, oc = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  qgen_ctx *c = NULL, *cc = NULL;
  qgen_kv *kv = NULL, *twin = NULL;
  qgen_status st = qgen_open_text(&c, text, "<reuse>", &oo);
  if (st == QGEN_OK) st = qgen_open_text(&cc, text, "<reuse>", &oc);
  if (st != QGEN_OK || qgen_cache_create(c, &kv, NS, CAP) != QGEN_OK || qgen_cache_create(cc, &twin, NS, CAP) != QGEN_OK) {
    check(0, "reuse: open and caches: %s -- \"%s\"", qgen_status_str(st), qgen_error(c));
    qgen_cache_destroy(kv), qgen_close(c), qgen_close(cc);
    return;
  }
  const int seqs[NS] = {0, 1}, first[NS] = {700, 77}, more[NS] = {B + 5, 1};
  const size_t row = (size_t)HKV * D, qn = (size_t)NS * H * D;
  const int64_t pps = qgen_kv_pages_per_seq(kv);
  uint16_t *k = f16_rows((size_t)(first[0] + more[0]) * row), *v = f16_rows((size_t)(first[0] + more[0]) * row);
  uint16_t *q = f16_rows(qn), *out = tmalloc(qn * 2), *want = tmalloc(qn * 2);
  int *l0 = tmalloc((size_t)NS * HKV * pps * sizeof *l0), *l1 = tmalloc((size_t)NS * HKV * pps * sizeof *l1);
  int c0[NS * HKV], c1[NS * HKV];
  for (int i = 0; i < NS && st == QGEN_OK; i++) {
    st = qgen_append(kv, &seqs[i], 1, &first[i], P(k), P(v), NULL);
    if (st == QGEN_OK) st = qgen_append(twin, &seqs[i], 1, &first[i], (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL);
  }
  qgen_attend_opts reuse = qgen_attend_defaults(c), sparse = reuse;
  reuse.mode = QGEN_ATTEND_REUSE;
  memset(out, 0x55, qn * 2);
  qgen_status r0 = qgen_attend(kv, seqs, NS, P(q), P(out), &reuse, NULL);
  pull(out);
  check(r0 == QGEN_ERR_INVALID_ARG && strstr(qgen_error(c), "no sparse selection") && out[0] == 0x5555,
        "reuse before any selection refused, nothing written: %s", qgen_error(c));
  if (st == QGEN_OK) st = qgen_attend(kv, seqs, NS, P(q), P(out), &sparse, NULL);
  for (int i = 0; i < NS && st == QGEN_OK; i++) st = qgen_kv_selection(kv, seqs[i], l0 + (size_t)i * HKV * pps, c0 + i * HKV);
  for (int i = 0; i < NS && st == QGEN_OK; i++) { /* the tokens after the selection: seq 0 begins a page */
    const uint16_t *kk = k + (size_t)first[0] * row, *vv = v + (size_t)first[0] * row;
    st = qgen_append(kv, &seqs[i], 1, &more[i], P(kk), P(vv), NULL);
    if (st == QGEN_OK) st = qgen_append(twin, &seqs[i], 1, &more[i], (qgen_ptr)(uintptr_t)kk, (qgen_ptr)(uintptr_t)vv, NULL);
  }
  for (size_t i = 0; i < qn; i++) q[i] = qgen_f32_to_f16(2 * frand()); /* another query: reuse does not look at it to select */
  memset(out, 0x55, qn * 2);
  if (st == QGEN_OK) st = qgen_attend(kv, seqs, NS, P(q), P(out), &reuse, NULL);
  pull(out);
  for (int i = 0; i < NS && st == QGEN_OK; i++) st = qgen_kv_selection(kv, seqs[i], l1 + (size_t)i * HKV * pps, c1 + i * HKV);
  check(st == QGEN_OK, "reuse: appends, a sparse attend, appends, a reuse attend: %s -- %s", qgen_status_str(st), qgen_error(c));
  int lists_ok = st == QGEN_OK, grew = 0, out_ok = st == QGEN_OK;
  double worst = 0;
  const qgen_layout *L = qgen_ext_layout(cc);
  for (int i = 0; i < NS && lists_ok; i++) {
    const int32_t *ptrs[HKV];
    int64_t cnt[HKV];
    for (int h = 0; h < HKV; h++) {
      int32_t *w = malloc(sizeof(int32_t) * (size_t)pps);
      int *a = l0 + ((size_t)i * HKV + h) * pps, *b = l1 + ((size_t)i * HKV + h) * pps;
      for (int64_t j = 0; j < c0[i * HKV + h]; j++) w[j] = a[j];
      const int64_t n = qgen_ref_extend_list(w, c0[i * HKV + h], first[i] + more[i], B, pps);
      lists_ok &= n == c1[i * HKV + h] && !memcmp(w, b, (size_t)n * sizeof *w);
      grew |= n > c0[i * HKV + h];
      free(w);
      ptrs[h] = (const int32_t *)b, cnt[h] = c1[i * HKV + h];
    }
    qgen_ref_attend(L, qgen_ext_host_cache(twin), seqs[i], q + (size_t)i * H * D, ptrs, cnt, want + (size_t)i * H * D, NULL);
  }
  for (size_t i = 0; i < qn && lists_ok; i++) {
    const double a = qgen_f16_to_f32(out[i]), b = qgen_f16_to_f32(want[i]), e = fabs(a - b) / (1e-2 + fabs(b));
    worst = e > worst ? e : worst;
    out_ok &= backend == QGEN_BACKEND_CPU ? out[i] == want[i] : e < 4e-3;
  }
  check(lists_ok && grew, "reuse: the lists are the last selection extended to the new length (qgen_ref_extend_list; a "
        "page was added: %d)", grew);
  check(lists_ok && out_ok, "reuse: the output is attention over exactly those pages (worst relative difference %.2g)", worst);
  int s1 = 1;
  st = qgen_reset(kv, 1);
  memset(out, 0x55, qn * 2);
  qgen_status r1 = qgen_attend(kv, &s1, 1, P(q), P(out), &reuse, NULL);
  pull(out);
  check(st == QGEN_OK && r1 == QGEN_ERR_INVALID_ARG && strstr(qgen_error(c), "sequence 1") && out[0] == 0x5555,
        "reuse after qgen_reset refused, nothing written: %s", qgen_error(c));
  reuse.mode = 7;
  check(qgen_attend(kv, seqs, 1, P(q), P(out), &reuse, NULL) == QGEN_ERR_INVALID_ARG && strstr(qgen_error(c), "QGEN_ATTEND_REUSE"),
        "a bad mode's message names the three: %s", qgen_error(c));
  qgen_ctx *dc = NULL;
  qgen_kv *dkv = NULL;
  if (qgen_open_text(&dc, "return spec{ name = \"api-reuse-dense\", head_dim = 64, n_head = 6, n_head_kv = 2 }\n", "<dense>", &oc) ==
          QGEN_OK && qgen_cache_create(dc, &dkv, 1, 64) == QGEN_OK) {
    qgen_attend_opts o = qgen_attend_defaults(dc);
    o.mode = QGEN_ATTEND_REUSE;
    int s0 = 0;
    check(qgen_attend(dkv, &s0, 1, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)out, &o, NULL) == QGEN_ERR_UNSUPPORTED,
          "reuse on a dense spec refused: %s", qgen_error(dc));
  }
  qgen_cache_destroy(dkv), qgen_close(dc);
  tfree(k), tfree(v), tfree(q), tfree(out), tfree(want), tfree(l0), tfree(l1);
  qgen_cache_destroy(kv), qgen_cache_destroy(twin);
  qgen_close(c), qgen_close(cc);
}

/* GPU backend: a context of the caller's own, current while it calls qgen, is current
   again after every call (qgen works in the primary context, which holds the tensors). */
static void caller_context(void) {
  const qgen_cudrv *cu = qgen_cudrv_get(NULL);
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); /* cuCtxCreate is not in the table */
  CUresult (*create)(CUcontext *, unsigned, CUdevice) = lib ? (CUresult(*)(CUcontext *, unsigned, CUdevice))dlsym(lib, "cuCtxCreate_v2") : NULL;
  CUresult (*destroy)(CUcontext) = lib ? (CUresult(*)(CUcontext))dlsym(lib, "cuCtxDestroy_v2") : NULL;
  CUdevice dev;
  CUcontext mine = NULL, now = NULL;
  if (!create || !destroy || cu->cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
    check(0, "caller context: cuCtxCreate_v2 / cuCtxDestroy_v2 not found");
    return;
  }
  /* the tensors, in the primary context, held here: the fixtures' qgen_close calls may have
     released it, leaving this thread without a usable current context */
  CUcontext prim = NULL;
  if (cu->cuDevicePrimaryCtxRetain(&prim, dev) != CUDA_SUCCESS || cu->cuCtxSetCurrent(prim) != CUDA_SUCCESS) {
    check(0, "caller context: the primary context could not be retained");
    return;
  }
  const size_t row = 8 * 128, qn = 32 * 128;
  uint16_t *k = f16_rows(40 * row), *v = f16_rows(40 * row), *q = f16_rows(qn), *out = tmalloc(qn * 2);
  memset(out, 0, qn * 2);
  qgen_ptr K = P(k), V = P(v), Q = P(q), O = P(out);
  if (create(&mine, 0, dev) != CUDA_SUCCESS) { /* now current */
    check(0, "caller context: cuCtxCreate failed");
    return;
  }
#define STILL(what)                                                                      \
  do {                                                                                   \
    now = NULL;                                                                          \
    cu->cuCtxGetCurrent(&now);                                                           \
    check(st == QGEN_OK && now == mine, "caller context: %s: %s, the caller's context %s", what, \
          qgen_status_str(st), now == mine ? "is current again" : "IS NOT CURRENT");     \
  } while (0)
  qgen_ctx *c = NULL;
  qgen_kv *kv = NULL;
  qgen_open_opts oo = {QGEN_BACKEND_GPU, 0, NULL, NULL};
  qgen_status st = qgen_open(&c, QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", &oo);
  STILL("qgen_open");
  if (st == QGEN_OK) {
    st = qgen_cache_create(c, &kv, 2, 256);
    STILL("qgen_cache_create");
  }
  if (st == QGEN_OK) {
    int s0 = 0, n = 40;
    st = qgen_append(kv, &s0, 1, &n, K, V, NULL);
    STILL("qgen_append");
    st = qgen_attend(kv, &s0, 1, Q, O, NULL, NULL);
    STILL("qgen_attend");
    int lists[8 * 64], counts[8];
    st = qgen_kv_selection(kv, 0, lists, counts);
    STILL("qgen_kv_selection");
    int32_t sl[2];
    st = qgen_kv_read(kv, QGEN_KV_SEQ_LEN, sl, sizeof sl);
    STILL("qgen_kv_read");
    st = qgen_reset(kv, 0);
    STILL("qgen_reset");
    qgen_cache_destroy(kv);
    STILL("qgen_cache_destroy");
  }
  qgen_close(c);
  STILL("qgen_close");
#undef STILL
  destroy(mine); /* the primary context is current again */
  pull(out);
  check(all_finite_f16(out, qn) && !all_zero(out, qn), "caller context: the attend wrote its output");
  tfree(k), tfree(v), tfree(q), tfree(out);
  cu->cuDevicePrimaryCtxRelease(dev);
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* A cache larger than the memory there is: QGEN_ERR_OUT_OF_MEMORY with the sizes, and
   nothing kept, 1000 times over. GPU: device memory as free as before. CPU: in a child
   whose address space is capped (RLIMIT_AS), resident host memory as before. */
static void out_of_memory(void) {
  qgen_ctx *c;
  if (open_cpu(QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", NULL, &c) != 0) {
    check(0, "open for the out-of-memory checks");
    return;
  }
  if (backend == QGEN_BACKEND_GPU) {
    const qgen_cudrv *cu = qgen_cudrv_get(NULL);
    size_t free0 = 0, free1 = 0, total = 0;
    cu->cuMemGetInfo(&free0, &total);
    qgen_info in;
    qgen_get_info(c, &in);
    /* twice the free memory in the K pool alone, so the first allocation already fails
       (a K pool that fits would be allocated and cleared 1000 times over) */
    const int seqs = (int)(2 * free0 / ((size_t)in.k_row_bytes * in.n_head_kv << 20)) + 1;
    int all = 1;
    char first[512] = "";
    for (int i = 0; i < 1000 && all; i++) {
      qgen_kv *kv = (qgen_kv *)&kv;
      qgen_status st = qgen_cache_create(c, &kv, seqs, 1LL << 20);
      if (i == 0) snprintf(first, sizeof first, "%s", qgen_error(c));
      all = st == QGEN_ERR_OUT_OF_MEMORY && kv == NULL && strstr(qgen_error(c), "bytes");
    }
    cu->cuMemGetInfo(&free1, &total);
    check(all, "qgen_cache_create larger than the device's free memory, 1000 times: QGEN_ERR_OUT_OF_MEMORY -- \"%s\"", first);
    check(free1 == free0, "device memory free after them: %zu, before: %zu", free1, free0);
    qgen_close(c);
    return;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) { /* 1 GiB of address space more than now: a cache of 4 GiB cannot be */
    struct rlimit rl;
    long vm = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &vm) != 1) _exit(3);
    fclose(f);
    rl.rlim_cur = rl.rlim_max = (rlim_t)vm * (rlim_t)sysconf(_SC_PAGESIZE) + (1ull << 30);
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
    long rss0 = 0, rss1 = 0;
    for (int i = 0; i < 1000; i++) {
      qgen_kv *kv = (qgen_kv *)&kv;
      qgen_status st = qgen_cache_create(c, &kv, 16, 1 << 16);
      if (st != QGEN_ERR_OUT_OF_MEMORY || kv != NULL || !strstr(qgen_error(c), "bytes")) {
        printf("     create %d: %s -- \"%s\"\n", i, qgen_status_str(st), qgen_error(c));
        _exit(1);
      }
      if (i == 0) printf("     %s\n", qgen_error(c));
      f = fopen("/proc/self/statm", "r");
      if (f && fscanf(f, "%ld %ld", &vm, i == 0 ? &rss0 : &rss1) != 2) _exit(3);
      if (f) fclose(f);
    }
    printf("     resident pages after the first failure %ld, after the last %ld\n", rss0, rss1);
    fflush(stdout);
    /* 1 MiB of slack (4 KiB pages); under AddressSanitizer freed blocks sit in its
       quarantine, so resident memory grows whatever qgen does: only the statuses count */
    _exit(rss1 - rss0 > 256 && !UNDER_ASAN ? 2 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "qgen_cache_create past a capped address space, 1000 times: QGEN_ERR_OUT_OF_MEMORY with the sizes, no host memory kept (child exit %d)",
        WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  qgen_close(c);
}

/* qgen_close before qgen_cache_destroy: close gives the caches' memory back, each handle
   is left for qgen_cache_destroy alone (any other call on it is refused), and the
   destroys that follow free what is left; the usual order still works. */
static void close_then_destroy(void) {
  qgen_ctx *c;
  if (open_cpu(QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", NULL, &c) != 0) {
    check(0, "open for the close-then-destroy checks");
    return;
  }
  qgen_kv *a = NULL, *b = NULL, *d = NULL;
  qgen_info in;
  qgen_get_info(c, &in);
  const size_t row = (size_t)in.n_head_kv * in.head_dim;
  uint16_t *k = f16_rows(8 * row), *v = f16_rows(8 * row);
  int s0 = 0, n8 = 8;
  int ok = qgen_cache_create(c, &a, 2, 128) == QGEN_OK && qgen_cache_create(c, &b, 1, 64) == QGEN_OK &&
           qgen_cache_create(c, &d, 1, 64) == QGEN_OK && qgen_append(a, &s0, 1, &n8, P(k), P(v), NULL) == QGEN_OK;
  check(ok, "three caches of one context, one with tokens -- %s", qgen_error(c));
  if (!ok) return;
  qgen_cache_destroy(d); /* destroyed before the close: the close must not see it */
  const int host_before = backend != QGEN_BACKEND_CPU || qgen_ext_host_cache(a) != NULL;
  /* The pointers the refused calls get are taken while a context is current: after the
     close none is, and the mirrors could not be refreshed (the calls must not read them). */
  const qgen_ptr pk = P(k), pv = P(v);
  qgen_close(c);
  check(host_before && qgen_ext_host_cache(a) == NULL && qgen_ext_host_cache(b) == NULL && qgen_kv_size(a, QGEN_KV_K) == 0,
        "qgen_close gives the memory of the caches still open back");
  check(qgen_append(a, &s0, 1, &n8, pk, pv, NULL) == QGEN_ERR_INVALID_ARG && qgen_seq_len(a, 0) == -1 &&
            qgen_attend(b, &s0, 1, pk, pv, NULL, NULL) == QGEN_ERR_INVALID_ARG && qgen_reset(a, 0) == QGEN_ERR_INVALID_ARG,
        "a cache of a closed context refuses every call (QGEN_ERR_INVALID_ARG)");
  qgen_cache_destroy(a);
  qgen_cache_destroy(b);
  check(1, "qgen_cache_destroy after qgen_close frees the rest (AddressSanitizer checks the use and the leaks)");
  tfree(k), tfree(v);
}

/* Two live sequences must never share a physical page: qgen_kv_map refuses a page that a
   sequence holding tokens maps, a row that names a page twice, and an append that would
   make a second sequence live on a page another live one maps; the message names both
   sequences and the page, and a refused call changes nothing. */
static void shared_pages(void) {
  qgen_ctx *c;
  qgen_kv *kv = NULL;
  if (open_cpu(QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", NULL, &c) != 0 || qgen_cache_create(c, &kv, 3, 256) != QGEN_OK) {
    check(0, "setup for the shared-page checks");
    return;
  }
  qgen_info in;
  qgen_get_info(c, &in);
  const size_t row = (size_t)in.n_head_kv * in.head_dim;
  uint16_t *k = f16_rows(10 * row), *v = f16_rows(10 * row);
  int s0 = 0, s1 = 1, s2 = 2, n10 = 10;
  check(qgen_kv_pages_per_seq(kv) == 4 && qgen_append(kv, &s0, 1, &n10, P(k), P(v), NULL) == QGEN_OK,
        "sequence 0 holds 10 tokens on pages 0..3");
  int onto0[4] = {5, 6, 2, 7};
  qgen_ext_clear_error(c);
  qgen_status st = qgen_kv_map(kv, 1, onto0, 4);
  const char *m = qgen_error(c);
  check(st == QGEN_ERR_INVALID_ARG && strstr(m, "sequence 1") && strstr(m, "sequence 0") && strstr(m, "page 2"),
        "qgen_kv_map of sequence 1 onto page 2, which sequence 0 holds: refused -- \"%s\"", m);
  int32_t pt[12];
  qgen_kv_read(kv, QGEN_KV_PAGE_TABLE, pt, sizeof pt);
  check(pt[4] == 4 && pt[6] == 6, "... and sequence 1's page table row is unchanged");
  int twice[2] = {9, 9};
  qgen_ext_clear_error(c);
  st = qgen_kv_map(kv, 1, twice, 2);
  check(st == QGEN_ERR_INVALID_ARG && strstr(qgen_error(c), "page 9"), "a row naming page 9 twice: refused -- \"%s\"",
        qgen_error(c));
  int tail[1] = {5}; /* logical page 0 onto its own logical page 1's page */
  st = qgen_kv_map(kv, 1, tail, 1);
  check(st == QGEN_ERR_INVALID_ARG, "a page given that the row's kept entries already hold: refused -- \"%s\"", qgen_error(c));
  /* both empty: allowed, until both hold tokens */
  int onto1[4] = {4, 5, 6, 7};
  check(qgen_kv_map(kv, 2, onto1, 4) == QGEN_OK && qgen_append(kv, &s2, 1, &n10, P(k), P(v), NULL) == QGEN_OK,
        "sequence 2 mapped onto empty sequence 1's pages and appended to");
  qgen_ext_clear_error(c);
  st = qgen_append(kv, &s1, 1, &n10, P(k), P(v), NULL);
  m = qgen_error(c);
  check(st == QGEN_ERR_INVALID_ARG && strstr(m, "sequence 1") && strstr(m, "sequence 2") && strstr(m, "page 4") &&
            qgen_seq_len(kv, 1) == 0,
        "then an append to sequence 1, whose pages sequence 2 holds: refused, nothing appended -- \"%s\"", m);
  int dec[2] = {0, 1};
  st = qgen_append_decode(kv, dec, 2, P(k), P(v), NULL);
  check(st == QGEN_ERR_INVALID_ARG && qgen_seq_len(kv, 0) == 10, "qgen_append_decode to it: refused too");
  check(qgen_reset(kv, 2) == QGEN_OK && qgen_append(kv, &s1, 1, &n10, P(k), P(v), NULL) == QGEN_OK,
        "once sequence 2 is reset, sequence 1 takes its pages back");
  qgen_cache_destroy(kv);
  qgen_close(c);
  tfree(k), tfree(v);
}

/* The process's peak resident memory (VmHWM), in KiB. */
static long peak_rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

/* A cache far larger than the memory there is is refused at once, before anything is
   allocated or touched, with the bytes it needs in the message. */
static void absurd_sizes(void) {
  qgen_ctx *c;
  if (open_cpu(QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", NULL, &c) != 0) {
    check(0, "open for the size checks");
    return;
  }
  qgen_kv *kv = (qgen_kv *)&kv;
  const long hwm0 = peak_rss_kib();
  const double t0 = qgen_now_ms();
  qgen_status st = qgen_cache_create(c, &kv, 1 << 28, 1);
  const double ms = qgen_now_ms() - t0;
  const long grew = peak_rss_kib() - hwm0;
  check(st == QGEN_ERR_OUT_OF_MEMORY && kv == NULL && strstr(qgen_error(c), " bytes of ") && ms < 50 && grew < 65536,
        "qgen_cache_create(2^28 sequences x 1 token): QGEN_ERR_OUT_OF_MEMORY in %.1f ms, peak resident memory +%ld KiB -- "
        "\"%s\"", ms, grew, qgen_error(c));
  qgen_close(c);
}

static void status_strings(void) {
  const char *seen[QGEN_ERR_IO + 1];
  int ok = 1;
  for (int s = QGEN_OK; s <= QGEN_ERR_IO; s++) {
    const char *m = qgen_status_str((qgen_status)s);
    int good = m && *m && strcmp(m, "unknown status") != 0;
    for (int k = 0; k < s; k++) good &= strcmp(seen[k], m) != 0;
    seen[s] = m;
    printf("     status %2d: %s\n", s, m ? m : "(null)");
    ok &= good;
  }
  check(ok, "qgen_status_str: every status has its own message");
  check(!strcmp(qgen_status_str((qgen_status)(QGEN_ERR_IO + 1)), "unknown status") &&
            !strcmp(qgen_status_str((qgen_status)-1), "unknown status") &&
            !strcmp(qgen_status_str((qgen_status)INT_MAX), "unknown status"),
        "qgen_status_str: out-of-range values are \"unknown status\"");
}

static void run_fixture(const char *path, const char *tag) {
  fixture f;
  if (setup(&f, path) != 0) {
    check(0, "%s: setup", tag);
    return;
  }
  printf("---- %s (%s): %s, %lld pages of %d tokens\n", tag, path, f.sparse ? "sparse" : "dense",
         qgen_kv_n_pages(f.kv), f.info.block);
  bad_appends(&f);
  bad_decodes(&f);
  bad_attends(&f);
  bad_introspection(&f);
  good_calls(&f, tag);
  teardown(&f);
  decode_steps(path, tag);
}

int main(void) {
  const char *be = getenv("QGEN_TEST_BACKEND");
  if (be && !strcmp(be, "gpu")) {
    const char *why = "";
    if (!qgen_cudrv_get(&why)) {
      printf("test_api: GPU backend requested: %s — skipped\n", why);
      return 77;
    }
    backend = QGEN_BACKEND_GPU;
    printf("test_api: GPU backend\n");
  }
  char dir[] = "/tmp/qgen-test-api-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char dense[4200];
  snprintf(dense, sizeof dense, "%s/dense.lua", dir);
  FILE *fp = fopen(dense, "w");
  if (!fp) return 1;
  fputs("return spec{ name = \"api-dense\", head_dim = 64, n_head = 6, n_head_kv = 2, archs = { \"sm_90\" } }\n", fp);
  fclose(fp);

  printf("---- qgen_status_str\n");
  status_strings();
  printf("---- qgen_open\n");
  bad_opens();
  printf("---- qgen_cache_create\n");
  bad_cache_creates();
  printf("---- out of memory\n");
  out_of_memory();
  absurd_sizes();
  printf("---- qgen_close before qgen_cache_destroy\n");
  close_then_destroy();
  printf("---- pages shared by sequences\n");
  shared_pages();
  printf("---- a budget spec\n");
  budget_spec();
  if (backend == QGEN_BACKEND_CPU) {
    printf("---- two-stage selection\n");
    rescore_steps(1);
    rescore_steps(0.1);
  }
  printf("---- 8-bit bounds\n");
  bounds_i8_step();
  printf("---- selection reuse\n");
  reuse_steps();
  printf("---- several query tokens a step\n");
  multi_steps();
  printf("---- shared prefixes\n");
  shared_prefixes();
  random_ops();
  printf("---- rollback\n");
  rollback_steps(QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", "qwen3-4b", 1);
  rollback_steps(QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", "qwen3-4b-q8_0", 0);
  rollback_steps(QGEN_SOURCE_DIR "/tests/gpu/rescore.lua", "qwen3-4b-f16-r4", 1);
  rollback_steps(QGEN_SOURCE_DIR "/tests/gpu/bounds-i8.lua", "qwen3-4b-f16-bounds-i8", 1);
  rollback_steps(QGEN_SOURCE_DIR "/tests/gpu/fp8.lua", "fp8-e4m3-f16-sparse", 0);
  rollback_steps(dense, NULL, 1);
  run_fixture(QGEN_SOURCE_DIR "/specs/qwen3-4b.lua", "sparse");
  run_fixture(dense, "dense");
  if (backend == QGEN_BACKEND_GPU) {
    printf("---- the caller's CUDA context\n");
    caller_context();
  }

  unlink(dense);
  rmdir(dir);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
