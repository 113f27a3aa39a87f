/* example.c — libqgen from an installed tree: open a spec, make a KV cache for two
 * sequences, append random K/V, attend dense and sparse, print a few numbers and how far
 * sparse attention over every page is from dense (it should be 0).
 *
 *   example [cpu|gpu] [spec.lua or bundle]
 * The backend comes from the argument, else $QGEN_BACKEND, else the GPU, falling back to
 * the CPU when there is no driver or device. Without a spec file it uses the text below.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qgen.h>

static const char *SPEC =
    "return spec{ name = 'example', head_dim = 128, n_head = 8, n_head_kv = 2,\n"
    "  in_type = 'f32', out_type = 'f32',\n"
    "  sparse = { block = 64, coverage = 0.25, sink = 64, recent = 64 } }\n";

/* Buffers: host memory for the CPU backend, device memory (the CUDA driver, loaded here
   the way libqgen loads it) for the GPU backend, whose context qgen_open made current. */
static struct {
  int gpu;
  int (*alloc)(qgen_ptr *, size_t);
  int (*put)(qgen_ptr, const void *, size_t);
  int (*get)(void *, qgen_ptr, size_t);
  int (*release)(qgen_ptr);
} mem;

static int load_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) return -1;
  *(void **)&mem.alloc = dlsym(h, "cuMemAlloc_v2");
  *(void **)&mem.put = dlsym(h, "cuMemcpyHtoD_v2");
  *(void **)&mem.get = dlsym(h, "cuMemcpyDtoH_v2");
  *(void **)&mem.release = dlsym(h, "cuMemFree_v2");
  return mem.alloc && mem.put && mem.get && mem.release ? 0 : -1;
}

static qgen_ptr buf_new(const void *src, size_t bytes) {
  if (!mem.gpu) {
    void *p = calloc(1, bytes);
    if (p && src) memcpy(p, src, bytes);
    return (qgen_ptr)(uintptr_t)p;
  }
  qgen_ptr d = 0;
  if (mem.alloc(&d, bytes) != 0) return 0;
  if (src && mem.put(d, src, bytes) != 0) return 0;
  return d;
}

static void buf_get(void *dst, qgen_ptr p, size_t bytes) {
  if (mem.gpu) mem.get(dst, p, bytes);
  else memcpy(dst, (void *)(uintptr_t)p, bytes);
}

static void buf_free(qgen_ptr p) {
  if (mem.gpu) mem.release(p);
  else free((void *)(uintptr_t)p);
}

static qgen_status open_ctx(qgen_ctx **ctx, const char *spec, qgen_backend be) {
  qgen_open_opts o = {be, 0, NULL, NULL};
  return spec ? qgen_open(ctx, spec, &o) : qgen_open_text(ctx, SPEC, "example", &o);
}

int main(int argc, char **argv) {
  const char *be_name = argc > 1 ? argv[1] : getenv("QGEN_BACKEND");
  const char *spec = argc > 2 ? argv[2] : NULL;
  if (be_name && strcmp(be_name, "cpu") && strcmp(be_name, "gpu")) {
    fprintf(stderr, "usage: %s [cpu|gpu] [spec.lua or bundle]\n", argv[0]);
    return 2;
  }
  qgen_backend be = be_name && !strcmp(be_name, "cpu") ? QGEN_BACKEND_CPU : QGEN_BACKEND_GPU;
  qgen_ctx *ctx;
  qgen_status st = open_ctx(&ctx, spec, be);
  if (!be_name && (st == QGEN_ERR_NO_DRIVER || st == QGEN_ERR_NO_DEVICE)) {
    printf("no GPU (%s): using the CPU backend\n", qgen_error(ctx));
    qgen_close(ctx);
    st = open_ctx(&ctx, spec, be = QGEN_BACKEND_CPU);
  }
  if (st != QGEN_OK) {
    fprintf(stderr, "qgen_open: %s: %s\n", qgen_status_str(st), qgen_error(ctx));
    qgen_close(ctx);
    return 1;
  }
  qgen_info info;
  qgen_get_info(ctx, &info);
  if (strcmp(info.in_type, "f32") || strcmp(info.out_type, "f32")) {
    fprintf(stderr, "this example fills and prints f32 tensors; spec %s has in_type %s, out_type %s\n", info.name,
            info.in_type, info.out_type);
    qgen_close(ctx);
    return 1;
  }
  mem.gpu = be == QGEN_BACKEND_GPU;
  if (mem.gpu && load_driver() != 0) {
    fprintf(stderr, "libcuda.so.1: %s\n", dlerror());
    return 1;
  }
  printf("spec %s: head_dim %d, %d query heads, %d KV heads, K %s, V %s, %s backend%s%s\n", info.name, info.head_dim,
         info.n_head, info.n_head_kv, info.k_type, info.v_type, mem.gpu ? "GPU" : "CPU", mem.gpu ? " on " : "",
         mem.gpu ? info.device_name : "");

  enum { N_SEQ = 2, TOKENS = 1000 };
  const int seqs[N_SEQ] = {0, 1}, n_new[N_SEQ] = {TOKENS, TOKENS};
  const size_t kv_n = (size_t)N_SEQ * TOKENS * info.n_head_kv * info.head_dim;
  const size_t q_n = (size_t)N_SEQ * info.n_head * info.head_dim;
  float *host = malloc((kv_n * 2 + q_n) * sizeof *host), *res = malloc(3 * q_n * sizeof *res);
  srand(1);
  for (size_t i = 0; i < kv_n * 2 + q_n; i++) host[i] = 2.0f * rand() / RAND_MAX - 1.0f;
  qgen_ptr k = buf_new(host, kv_n * sizeof *host), v = buf_new(host + kv_n, kv_n * sizeof *host);
  qgen_ptr q = buf_new(host + 2 * kv_n, q_n * sizeof *host), out = buf_new(NULL, q_n * sizeof *host);

  qgen_kv *kv;
  if ((st = qgen_cache_create(ctx, &kv, N_SEQ, 4096)) != QGEN_OK ||
      (st = qgen_append(kv, seqs, N_SEQ, n_new, k, v, NULL)) != QGEN_OK) {
    fprintf(stderr, "%s: %s\n", qgen_status_str(st), qgen_error(ctx));
    return 1;
  }
  /* dense; the spec's default (sparse, its coverage); sparse over every page */
  qgen_attend_opts dense = {.mode = QGEN_ATTEND_DENSE, .coverage = 1.0}, all = {.mode = QGEN_ATTEND_SPARSE, .coverage = 1.0};
  const qgen_attend_opts *modes[3] = {&dense, NULL, &all};
  for (int m = 0; m < 3; m++) {
    if (m > 0 && !info.sparse) break;
    if ((st = qgen_attend(kv, seqs, N_SEQ, q, out, modes[m], NULL)) != QGEN_OK) {
      fprintf(stderr, "qgen_attend: %s: %s\n", qgen_status_str(st), qgen_error(ctx));
      return 1;
    }
    buf_get(res + m * q_n, out, q_n * sizeof *res);
  }
  printf("sequence lengths %lld, %lld\n", qgen_seq_len(kv, 0), qgen_seq_len(kv, 1));
  printf("dense  out[0][0][0..3] = %.6f %.6f %.6f %.6f\n", res[0], res[1], res[2], res[3]);
  if (info.sparse) {
    double d_default = 0, d_all = 0;
    for (size_t i = 0; i < q_n; i++) {
      d_default = fmax(d_default, fabs(res[q_n + i] - res[i]));
      d_all = fmax(d_all, fabs(res[2 * q_n + i] - res[i]));
    }
    printf("sparse out[0][0][0..3] = %.6f %.6f %.6f %.6f (the spec's budget)\n", res[q_n], res[q_n + 1],
           res[q_n + 2], res[q_n + 3]);
    printf("max |sparse - dense| = %g at the spec's budget, %g over every page\n", d_default, d_all);
    if (d_all != 0) return 1;
  }
  qgen_cache_destroy(kv);
  buf_free(k), buf_free(v), buf_free(q), buf_free(out);
  free(host), free(res);
  qgen_close(ctx);
  return 0;
}
