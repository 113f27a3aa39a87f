/* test_ggml_view.c — a view (qgen_view_open) over a KV cache laid out as llama.cpp keeps it,
 * its q8_0 / q4_0 blocks written by ggml's own quantizer (ggml_quantize_chunk of an installed
 * ggml-base: tests/CMakeLists.txt says how to point at one, QGEN_GGML_PREFIX; only ggml.h's
 * public API is used).
 *
 * llama.cpp's cache is, per layer, one tensor of kv_size cells x n_head_kv*head_dim values in
 * the ggml block type (V not transposed under flash attention), a sequence owning runs of
 * cells. The view reads it in place: token stride = one cell's row, head stride = the bytes
 * of head_dim values, page = page_size consecutive cells, block table = the cell runs each
 * sequence owns (shuffled through the pool, among stale cells of random values).
 *
 * For dense specs of head_dim 64 and 128 (GQA groups 4 and 6), K/V q8_0/q8_0, q4_0/q4_0 and
 * q8_0/q4_0, f32 in and out, pages of the spec's block and of half of it, and a batch of 8
 * sequences listed in shuffled order (ragged: one empty, one of one token, none a multiple
 * of a page), with the same f32 rows appended to an owned cache:
 *   (a) the owned cache's K/V bytes equal ggml's blocks of those tokens;
 *   (b) qgen_attend over the view equals it over the owned cache, bit for bit;
 *   (c) both are within the output type's tolerance of a double-precision attention over
 *       ggml's dequantized cache (ggml's to_float), an empty sequence giving zeros exactly.
 * Outputs are poisoned (NaN) before each attend.
 *
 * CPU backend; the GPU backend with QGEN_TEST_BACKEND=gpu (exit 77 without a GPU). Fresh
 * random data each run: the seed is printed; QGEN_SEED=<n> reproduces a run. Prints one
 * line per check and "N passed, N failed"; exits 1 on any failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ggml.h>

#include "base/cudrv.h"
#include "base/qtypes.h"
#include "runtime/qgen.h"
#include "tools/gpucheck.h"

#include "testlib.h"
#include "rng.h"

enum { SEQS = 8, MAXTOK = 600, SPARE_PAGES = 5 };

static qgen_backend backend = QGEN_BACKEND_CPU;
static const qgen_cudrv *cu;

/* ---- memory the calls get: the host buffer itself (CPU), or a device copy (GPU) -------- */

static void cu_ok(CUresult r, const char *what, size_t n) {
  if (r == CUDA_SUCCESS) return;
  fprintf(stderr, "test_ggml_view: %s of %zu bytes failed: %s\n", what, n, qgen_cu_errstr(r));
  exit(1);
}
static qgen_ptr dev(const void *h, size_t n) {
  if (backend == QGEN_BACKEND_CPU) return (qgen_ptr)(uintptr_t)h;
  CUdeviceptr d = 0;
  cu_ok(cu->cuMemAlloc(&d, n ? n : 1), "cuMemAlloc", n);
  cu_ok(cu->cuMemcpyHtoD(d, h, n), "copy to the device", n);
  return d;
}
static void undev(qgen_ptr d) {
  if (backend == QGEN_BACKEND_GPU && d) cu->cuMemFree(d);
}
/* A call's output back to host memory (on the CPU backend it is there already). */
static void fetch(void *h, qgen_ptr d, size_t n) {
  if (backend == QGEN_BACKEND_CPU) return;
  cu_ok(cu->cuCtxSynchronize(), "the step before a copy back", n);
  cu_ok(cu->cuMemcpyDtoH(h, d, n), "copy back", n);
}
static void poison(void *h, qgen_ptr d, size_t n) {
  memset(h, 0xff, n); /* f32 NaN */
  if (backend == QGEN_BACKEND_GPU) cu_ok(cu->cuMemcpyHtoD(d, h, n), "poisoning an output", n);
}

static enum ggml_type ggml_type_of(const char *name) { return !strcmp(name, "q8_0") ? GGML_TYPE_Q8_0 : GGML_TYPE_Q4_0; }

/* ---- one spec: its tokens, the owned cache, views of two page sizes --------------------- */

typedef struct {
  qgen_ctx *ctx;
  qgen_info in;
  enum ggml_type gt[2];   /* K, V */
  size_t hrow[2], row[2]; /* bytes of one head's row, of one cell (all heads) */
  int len[SEQS], order[SEQS], total;
  float *kv[2];           /* the tokens: [total][n_head_kv * head_dim], seq 0 first */
  float *q;               /* [SEQS][n_head][head_dim], row i for sequence order[i] */
  qgen_kv *own;
  uint8_t *own_pool[2];
  int32_t *own_pt;        /* [SEQS][pages_per_seq] */
  float *out_own, *out_ref;
} fixture;

static float rnd_value(void) { return (float)(2.0 * rnd_unit() - 1.0); }

/* The double-precision attention of the listed sequences over dequantized pools (cells of
   kv_dim values), token t of sequence s in cell cell_of(s, t). */
static void reference(fixture *f, float *const deq[2], int32_t *const cells[SEQS]) {
  const int D = f->in.head_dim, H = f->in.n_head, G = f->in.group, kvd = f->in.n_head_kv * D;
  double *w = malloc(sizeof(double) * (MAXTOK + 1)), *acc = malloc(sizeof(double) * D);
  for (int i = 0; i < SEQS; i++) {
    const int s = f->order[i];
    for (int h = 0; h < H; h++) {
      const float *q = f->q + ((size_t)i * H + h) * D;
      float *o = f->out_ref + ((size_t)i * H + h) * D;
      const int hk = h / G;
      double mx = -INFINITY, sum = 0;
      for (int t = 0; t < f->len[s]; t++) {
        const float *k = deq[0] + (size_t)cells[s][t] * kvd + (size_t)hk * D;
        double dot = 0;
        for (int d = 0; d < D; d++) dot += (double)q[d] * k[d];
        w[t] = dot * f->in.scale;
        if (w[t] > mx) mx = w[t];
      }
      memset(acc, 0, sizeof(double) * D);
      for (int t = 0; t < f->len[s]; t++) {
        const float *v = deq[1] + (size_t)cells[s][t] * kvd + (size_t)hk * D;
        const double p = exp(w[t] - mx);
        sum += p;
        for (int d = 0; d < D; d++) acc[d] += p * v[d];
      }
      for (int d = 0; d < D; d++) o[d] = f->len[s] ? (float)(acc[d] / sum) : 0.0f;
    }
  }
  free(w), free(acc);
}

/* The relative RMS error of out against ref over the batch; *zeros: the empty sequence's
   rows are exactly 0 in out. */
static double rel_rms(const fixture *f, const float *out, int *zeros) {
  const size_t per = (size_t)f->in.n_head * f->in.head_dim;
  double e = 0, r = 0;
  *zeros = 1;
  for (int i = 0; i < SEQS; i++)
    for (size_t j = 0; j < per; j++) {
      const double a = out[i * per + j], b = f->out_ref[i * per + j];
      if (f->len[f->order[i]] == 0) *zeros &= a == 0.0 && !signbit(a);
      e += (a - b) * (a - b), r += b * b;
    }
  return isfinite(e) ? sqrt(e / r) : INFINITY;
}

/* One layout: page_size cells a page, the sequences' pages in runs of 1..3 consecutive
   pages laid through the pool in shuffled order among spare pages of stale values. */
static void run_view(fixture *f, int page) {
  const int D = f->in.head_dim, Hkv = f->in.n_head_kv, kvd = Hkv * D, B = f->in.block;
  const char *tag = f->in.name;
  const int max_blocks = (MAXTOK + page - 1) / page;
  /* runs: (sequence or -1 for spare, first logical page, pages) */
  int run_seq[SEQS * (MAXTOK / 16 + 1) + SPARE_PAGES], run_lp[sizeof run_seq / sizeof *run_seq],
      run_np[sizeof run_seq / sizeof *run_seq], n_runs = 0;
  for (int s = 0; s < SEQS; s++)
    for (int lp = 0, need = (f->len[s] + page - 1) / page; lp < need;) {
      int np = (int)rnd_int(1, 3);
      if (np > need - lp) np = need - lp;
      run_seq[n_runs] = s, run_lp[n_runs] = lp, run_np[n_runs++] = np;
      lp += np;
    }
  for (int i = 0; i < SPARE_PAGES; i++) run_seq[n_runs] = -1, run_lp[n_runs] = 0, run_np[n_runs++] = 1;
  for (int i = n_runs - 1; i > 0; i--) { /* shuffle the runs */
    const int j = (int)rnd_int(0, i), a = run_seq[i], b = run_lp[i], c = run_np[i];
    run_seq[i] = run_seq[j], run_lp[i] = run_lp[j], run_np[i] = run_np[j];
    run_seq[j] = a, run_lp[j] = b, run_np[j] = c;
  }
  int32_t *bt = calloc((size_t)SEQS * max_blocks, sizeof(int32_t)), n_pages = 0;
  for (int r = 0; r < n_runs; r++) {
    for (int p = 0; p < run_np[r]; p++)
      if (run_seq[r] >= 0) bt[run_seq[r] * max_blocks + run_lp[r] + p] = n_pages + p;
    n_pages += run_np[r];
  }
  /* the cells in f32: stale random values, then each sequence's tokens in its cells */
  const int64_t cells = (int64_t)n_pages * page;
  float *src[2], *deq[2];
  uint8_t *pool[2];
  int32_t *cell_of[SEQS];
  for (int w = 0; w < 2; w++) {
    src[w] = malloc(sizeof(float) * cells * kvd);
    for (int64_t i = 0; i < cells * kvd; i++) src[w][i] = rnd_value();
  }
  for (int s = 0, r0 = 0; s < SEQS; r0 += f->len[s++]) {
    cell_of[s] = malloc(sizeof(int32_t) * (f->len[s] + 1));
    for (int t = 0; t < f->len[s]; t++) {
      cell_of[s][t] = bt[s * max_blocks + t / page] * page + t % page;
      for (int w = 0; w < 2; w++)
        memcpy(src[w] + (size_t)cell_of[s][t] * kvd, f->kv[w] + (size_t)(r0 + t) * kvd, sizeof(float) * kvd);
    }
  }
  /* ggml writes the cache: rows of kvd values (blocks of 32 never straddle heads: D % 32 == 0),
     and reads it back for the reference */
  for (int w = 0; w < 2; w++) {
    pool[w] = malloc(f->row[w] * cells);
    deq[w] = malloc(sizeof(float) * cells * kvd);
    const size_t wrote = ggml_quantize_chunk(f->gt[w], src[w], pool[w], 0, cells, kvd, NULL);
    check(wrote == f->row[w] * cells, "%s page %d: ggml_quantize_chunk wrote the %s cache (%zu bytes)", tag, page,
          w ? "V" : "K", wrote);
    ggml_get_type_traits(f->gt[w])->to_float(pool[w], deq[w], cells * kvd);
  }

  /* (a) the owned cache holds ggml's bytes */
  const long long pps = qgen_kv_pages_per_seq(f->own);
  int same = 1;
  for (int w = 0; w < 2; w++)
    for (int s = 0; s < SEQS; s++)
      for (int t = 0; t < f->len[s]; t++)
        for (int h = 0; h < Hkv; h++) {
          const size_t o = (((size_t)f->own_pt[s * pps + t / B] * Hkv + h) * B + t % B) * f->hrow[w];
          same &= !memcmp(f->own_pool[w] + o, pool[w] + (size_t)cell_of[s][t] * f->row[w] + h * f->hrow[w], f->hrow[w]);
        }
  check(same, "%s page %d: the owned cache's K and V bytes (qgen_append of f32 rows) equal ggml's blocks", tag, page);

  /* (b) the view over ggml's cache vs the owned cache */
  int32_t seq_lens[SEQS];
  for (int s = 0; s < SEQS; s++) seq_lens[s] = f->len[s];
  const qgen_ptr K = dev(pool[0], f->row[0] * cells), V = dev(pool[1], f->row[1] * cells),
                 BT = dev(bt, sizeof(int32_t) * SEQS * max_blocks), SL = dev(seq_lens, sizeof seq_lens);
  const long long ps[2] = {(long long)(page * f->row[0]), (long long)(page * f->row[1])};
  qgen_view_desc d = {K, V, page, n_pages, ps[0], (long long)f->row[0], (long long)f->hrow[0],
                      ps[1], (long long)f->row[1], (long long)f->hrow[1], BT, max_blocks, SL, SEQS, max_blocks};
  qgen_kv *view = NULL;
  qgen_status st = qgen_view_open(f->ctx, &d, &view);
  check(st == QGEN_OK, "%s page %d: view over %d cells opens%s%s", tag, page, (int)cells, st ? ": " : "",
        st ? qgen_error(f->ctx) : "");
  if (st == QGEN_OK) {
    const size_t ob = sizeof(float) * SEQS * f->in.n_head * D;
    float *out = malloc(ob);
    const qgen_ptr Q = dev(f->q, ob), O = dev(out, ob);
    qgen_attend_opts o = qgen_attend_defaults(f->ctx);
    poison(out, O, ob);
    st = qgen_attend(view, f->order, SEQS, Q, O, &o, NULL);
    fetch(out, O, ob);
    check(st == QGEN_OK && !memcmp(out, f->out_own, ob), "%s page %d: dense output over the view bit-identical to the owned cache's%s%s",
          tag, page, st ? ": " : "", st ? qgen_error(f->ctx) : "");
    /* (c) both against double precision over ggml's dequantized values */
    reference(f, deq, cell_of);
    qgen_type ot = QGEN_TYPE_F32;
    qgen_type_from_name(f->in.out_type, &ot);
    const double tol = qgen_check_tolerance(ot);
    int z1, z2;
    const double e1 = rel_rms(f, out, &z1), e2 = rel_rms(f, f->out_own, &z2);
    check(e1 <= tol && e2 <= tol && z1 && z2, "%s page %d: view and owned within %.0e of double attention over ggml's dequantized cache (rel. RMS %.2e, %.2e), the empty sequence 0",
          tag, page, tol, e1, e2);
    undev(Q), undev(O);
    free(out);
    qgen_cache_destroy(view);
  }
  undev(K), undev(V), undev(BT), undev(SL);
  for (int w = 0; w < 2; w++) free(src[w]), free(deq[w]), free(pool[w]);
  for (int s = 0; s < SEQS; s++) free(cell_of[s]);
  free(bt);
}

static void run_spec(int head_dim, int n_head, int n_head_kv, int block, const char *kt, const char *vt) {
  char text[512], name[64];
  snprintf(name, sizeof name, "d%d-g%d-%s-%s", head_dim, n_head / n_head_kv, kt, vt);
  snprintf(text, sizeof text,
           "return spec{ name = '%s', head_dim = %d, n_head = %d, n_head_kv = %d, k_type = '%s', v_type = '%s',"
           " in_type = 'f32', out_type = 'f32', sparse = { enabled = false, block = %d } }",
           name, head_dim, n_head, n_head_kv, kt, vt, block);
  fixture f;
  memset(&f, 0, sizeof f);
  qgen_open_opts oo = {backend, 0, NULL, NULL};
  if (qgen_open_text(&f.ctx, text, name, &oo) != QGEN_OK) {
    check(0, "%s: open: %s", name, qgen_error(f.ctx));
    qgen_close(f.ctx);
    return;
  }
  qgen_get_info(f.ctx, &f.in);
  const int D = head_dim, kvd = n_head_kv * D;
  const char *names[2] = {kt, vt};
  for (int w = 0; w < 2; w++) {
    f.gt[w] = ggml_type_of(names[w]);
    f.hrow[w] = ggml_row_size(f.gt[w], D);
    f.row[w] = ggml_row_size(f.gt[w], kvd);
  }
  check(f.hrow[0] == f.in.k_row_bytes && f.hrow[1] == f.in.v_row_bytes, "%s: ggml's row bytes (%zu, %zu) are qgen's", name,
        f.hrow[0], f.hrow[1]);
  /* ragged lengths: one empty, one of one token, the others random, none a multiple of 16 */
  for (int s = 0; s < SEQS; s++) {
    f.len[s] = s == 0 ? 0 : s == 1 ? 1 : (int)rnd_int(2, MAXTOK - 1);
    if (f.len[s] % 16 == 0) f.len[s]++;
    f.total += f.len[s];
    f.order[s] = s;
  }
  for (int i = SEQS - 1; i > 0; i--) {
    const int j = (int)rnd_int(0, i), t = f.order[i];
    f.order[i] = f.order[j], f.order[j] = t;
  }
  /* the tokens: values in [-amp, amp), amp per head row in [1/8, 4), so block scales vary */
  for (int w = 0; w < 2; w++) {
    f.kv[w] = malloc(sizeof(float) * ((size_t)f.total * kvd + 1));
    for (int64_t r = 0; r < (int64_t)f.total * n_head_kv; r++) {
      const float amp = ldexpf(1.0f + (float)rnd_unit(), (int)rnd_int(-3, 1));
      for (int d = 0; d < D; d++) f.kv[w][r * D + d] = amp * rnd_value();
    }
  }
  const size_t ob = sizeof(float) * SEQS * n_head * D;
  f.q = malloc(ob), f.out_own = malloc(ob), f.out_ref = malloc(ob);
  for (size_t i = 0; i < ob / sizeof(float); i++) f.q[i] = 2.0f * rnd_value();

  /* the owned cache: the same f32 rows appended, sequence by sequence */
  qgen_status st = qgen_cache_create(f.ctx, &f.own, SEQS, MAXTOK);
  const qgen_ptr Kin = dev(f.kv[0], sizeof(float) * ((size_t)f.total * kvd + 1)),
                 Vin = dev(f.kv[1], sizeof(float) * ((size_t)f.total * kvd + 1)), Q = dev(f.q, ob), O = dev(f.out_own, ob);
  const int seq[SEQS] = {0, 1, 2, 3, 4, 5, 6, 7};
  if (st == QGEN_OK) st = qgen_append(f.own, seq, SEQS, f.len, Kin, Vin, NULL);
  if (st == QGEN_OK) {
    qgen_attend_opts o = qgen_attend_defaults(f.ctx);
    poison(f.out_own, O, ob);
    st = qgen_attend(f.own, f.order, SEQS, Q, O, &o, NULL);
    fetch(f.out_own, O, ob);
  }
  const long long pps = qgen_kv_pages_per_seq(f.own);
  const int which[3] = {QGEN_KV_K, QGEN_KV_V, QGEN_KV_PAGE_TABLE};
  void *arr[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3 && st == QGEN_OK; i++) {
    const size_t n = qgen_kv_size(f.own, which[i]);
    arr[i] = malloc(n);
    st = qgen_kv_read(f.own, which[i], arr[i], n);
  }
  check(st == QGEN_OK && pps > 0, "%s: owned cache of %d tokens in %d sequences: append, attend, read%s%s", name, f.total, SEQS,
        st ? ": " : "", st ? qgen_error(f.ctx) : "");
  if (st == QGEN_OK) {
    f.own_pool[0] = arr[0], f.own_pool[1] = arr[1], f.own_pt = arr[2];
    for (int page = block; page >= block / 2; page /= 2) run_view(&f, page);
  }
  undev(Kin), undev(Vin), undev(Q), undev(O);
  for (int i = 0; i < 3; i++) free(arr[i]);
  free(f.kv[0]), free(f.kv[1]), free(f.q), free(f.out_own), free(f.out_ref);
  qgen_cache_destroy(f.own);
  qgen_close(f.ctx);
}

int main(void) {
  const char *be = getenv("QGEN_TEST_BACKEND");
  if (be && !strcmp(be, "gpu")) {
    const char *why = "";
    if (!(cu = qgen_cudrv_get(&why))) {
      printf("test_ggml_view: GPU backend requested: %s — skipped\n", why);
      return 77;
    }
    backend = QGEN_BACKEND_GPU;
  }
  const char *env = getenv("QGEN_SEED");
  const uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)clock() << 32;
  rng_state = seed;
  printf("test_ggml_view: %s backend, seed %llu (QGEN_SEED=%llu reproduces)\n", backend == QGEN_BACKEND_GPU ? "GPU" : "CPU",
         (unsigned long long)seed, (unsigned long long)seed);
  static const char *pairs[3][2] = {{"q8_0", "q8_0"}, {"q4_0", "q4_0"}, {"q8_0", "q4_0"}};
  for (int p = 0; p < 3; p++) {
    run_spec(64, 8, 2, 32, pairs[p][0], pairs[p][1]);
    run_spec(128, 24, 4, 64, pairs[p][0], pairs[p][1]);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
