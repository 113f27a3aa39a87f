/* check.c — `qgen check` (see check.h): the GPU executor against the CPU reference.
 *
 * Both backends run the same spec with the same memory layout, so the append check compares
 * raw bytes. Attention outputs are compared in relative L2 error against the reference's
 * fp64 result; sparse outputs against the reference attention over the GPU's own page lists
 * (so a near-tie in selection does not count twice), while the lists themselves are
 * compared with a tolerance derived from float summation error.
 */
#include "harness/check_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "jit/bundle.h"
#include "base/rng.h"

/* ---- data ---------------------------------------------------------------------------- */

/* A value of mean 0 and variance 1 (a sum of four uniforms, close enough to normal for
   test data) that depends only on (seed, i): counter-based, so any element can be
   regenerated anywhere (the >4 GiB reference streams it instead of storing it). */
float check_gauss_at(uint64_t seed, uint64_t i) {
  uint64_t a = qgen_mix64(seed ^ qgen_mix64(i));
  double s = (double)(a & 0xffff) + (double)(a >> 16 & 0xffff) + (double)(a >> 32 & 0xffff) + (double)(a >> 48);
  return (float)((s / 65536.0 - 2.0) * 1.7320508075688772);
}

/* rows x head_dim values of the in_type into dst, N(0, sigma^2). */
void check_fill(const qgen_layout *L, uint64_t seed, void *dst, int64_t rows, float sigma) {
  float *tmp = malloc(sizeof(float) * (size_t)L->head_dim);
  const qgen_type_traits *t = qgen_type_traits_of(L->in_type);
  for (int64_t r = 0; r < rows; r++) {
    for (int d = 0; d < L->head_dim; d++) tmp[d] = sigma * check_gauss_at(seed, (uint64_t)r * L->head_dim + d);
    t->from_f32(tmp, (uint8_t *)dst + r * L->in_row_bytes, L->head_dim);
  }
  free(tmp);
}

/* ---- device buffers ---------------------------------------------------------------- */

CUdeviceptr check_dalloc(env *e, size_t n) {
  CUdeviceptr p = 0;
  if (e->cu->cuMemAlloc(&p, n ? n : 1) != CUDA_SUCCESS) {
    fprintf(stderr, "qgen check: cuMemAlloc(%zu) failed\n", n);
    exit(2);
  }
  return p;
}
void check_upload(env *e, CUdeviceptr d, const void *h, size_t n) {
  if (e->cu->cuMemcpyHtoD(d, h, n) != CUDA_SUCCESS) { fprintf(stderr, "qgen check: upload failed\n"); exit(2); }
}
void check_download(env *e, void *h, CUdeviceptr d, size_t n) {
  if (e->cu->cuCtxSynchronize() != CUDA_SUCCESS || e->cu->cuMemcpyDtoH(h, d, n) != CUDA_SUCCESS) {
    fprintf(stderr, "qgen check: download failed (a kernel faulted?)\n");
    exit(2);
  }
}
void check_poison(env *e, CUdeviceptr d, size_t n) { e->cu->cuMemsetD8(d, 0xff, n); }
void check_verdict(env *e, int ok, const char *fmt, ...) {
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

/* ---- comparisons ----------------------------------------------------------------------- */

/* Relative L2 error of a GPU output (out_type bytes) against fp64; NaN => +inf. */
double check_rel_err(const qgen_layout *L, const void *gpu, const double *ref, int64_t n) {
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

double qgen_check_tolerance(qgen_type out_type) {
  /* f32 and f16 outputs at f16 precision, bf16 ones at their own 8 bits */
  return out_type == QGEN_TYPE_BF16 ? 1e-2 : 2e-3;
}

double check_tolerance(const qgen_layout *L) { return qgen_check_tolerance(L->out_type); }

/* ---- caches of the checks -------------------------------------------------------------- */

/* Those scales on a cache or view of ctx (1 for a type without a per-tensor scale). */
void check_set_scales(qgen_ctx *gc, qgen_kv *kv) {
  const qgen_layout *L = qgen_ext_layout(gc);
  API(qgen_cache_set_scales(kv, qgen_type_traits_of(L->k_type)->tensor_scale ? CHECK_K_SCALE : 1.0f,
                            qgen_type_traits_of(L->v_type)->tensor_scale ? CHECK_V_SCALE : 1.0f));
}

/* A cache of ctx (either backend) with those scales. */
void check_new_cache(qgen_ctx *gc, qgen_kv **kv, int max_seqs, int64_t max_tokens) {
  API(qgen_cache_create(gc, kv, max_seqs, max_tokens));
  check_set_scales(gc, *kv);
}

void check_make_pair(env *e, qgen_ctx *gc, qgen_ctx *cc, pair *pr, int nb, const int64_t *lens, uint64_t seed,
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
  check_new_cache(gc, &pr->g, nb, maxlen);
  check_new_cache(cc, &pr->c, nb, maxlen);
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
  check_fill(L, seed * 2 + 1, k, total * L->n_head_kv, 1.0f);
  check_fill(L, seed * 2 + 2, v, total * L->n_head_kv, 1.0f);
  CUdeviceptr dk = check_dalloc(e, bytes), dv = check_dalloc(e, bytes);
  check_upload(e, dk, k, bytes);
  check_upload(e, dv, v, bytes);
  int *nn = malloc(sizeof(int) * (size_t)nb);
  for (int i = 0; i < nb; i++) nn[i] = (int)lens[i];
  API(qgen_append(pr->g, pr->seq, nb, nn, dk, dv, NULL));
  API(qgen_append(pr->c, pr->seq, nb, nn, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL));
  check_download(e, k, dk, 1); /* waits for the appends */
  e->cu->cuMemFree(dk);
  e->cu->cuMemFree(dv);
  free(nn);
  free(k);
  free(v);
}

void check_free_pair(pair *pr) {
  qgen_cache_destroy(pr->g);
  qgen_cache_destroy(pr->c);
  free(pr->seq);
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
  check_steps(&e, gc, cc, seed + 460, o->quick);
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
