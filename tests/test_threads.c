/* test_threads.c — what qgen.h says may be shared across threads: several threads, each
 * with its own qgen_kv (and on the GPU its own stream) from one qgen_ctx, give the serial
 * run's outputs bit for bit, and each sees only its own messages in qgen_error; several
 * qgen_open in parallel on one cache directory open the same kernels. CPU backend, or the
 * GPU backend with QGEN_TEST_BACKEND=gpu (exit 77 without a GPU). CI also runs it under
 * ThreadSanitizer (QGEN_TSAN).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cudrv.h"
#include "base/qtypes.h"
#include "base/rng.h"
#include "runtime/qgen.h"

#include "testlib.h"

#ifndef QGEN_SOURCE_DIR
#define QGEN_SOURCE_DIR "."
#endif

#define THREADS 4
#define TOKENS 300
#define STEPS 6

static const char *SPEC = QGEN_SOURCE_DIR "/specs/qwen3-4b.lua";
static qgen_backend backend = QGEN_BACKEND_CPU;
static const qgen_cudrv *cu;
static char cache_dir[64];

typedef struct {
  qgen_ctx *ctx; /* shared */
  int id;
  uint16_t *out; /* [STEPS][n_head][head_dim] */
  size_t qn;
  int ok, own_message;
} job;

static uint16_t *rows(uint64_t seed, size_t n) {
  uint16_t *p = malloc(n * 2);
  for (size_t i = 0; i < n; i++) p[i] = qgen_f32_to_f16((float)qgen_rng_signed(&seed));
  return p;
}

/* Host memory, or a device copy on the GPU backend. */
static qgen_ptr dev(const void *h, size_t n) {
  if (backend == QGEN_BACKEND_CPU) return (qgen_ptr)(uintptr_t)h;
  CUdeviceptr d = 0;
  if (cu->cuMemAlloc(&d, n) != CUDA_SUCCESS || cu->cuMemcpyHtoD(d, h, n) != CUDA_SUCCESS) return 0;
  return d;
}
static void undev(qgen_ptr d) {
  if (backend == QGEN_BACKEND_GPU && d) cu->cuMemFree(d);
}

/* One worker: its own cache and stream; appends and attends, dense and sparse, then a
   bad call whose message must be its own. */
static void *work(void *arg) {
  job *j = arg;
  qgen_info in;
  qgen_get_info(j->ctx, &in);
  CUcontext pc = NULL;
  CUdevice dv;
  CUstream s = NULL;
  if (backend == QGEN_BACKEND_GPU) { /* this thread's tensors live in the primary context too */
    if (cu->cuDeviceGet(&dv, 0) != CUDA_SUCCESS || cu->cuDevicePrimaryCtxRetain(&pc, dv) != CUDA_SUCCESS ||
        cu->cuCtxSetCurrent(pc) != CUDA_SUCCESS || cu->cuStreamCreate(&s, 0) != CUDA_SUCCESS)
      return NULL;
  }
  qgen_kv *kv = NULL;
  const size_t row = (size_t)in.n_head_kv * in.head_dim;
  j->qn = (size_t)in.n_head * in.head_dim;
  j->out = calloc(STEPS * j->qn, 2);
  int ok = qgen_cache_create(j->ctx, &kv, 2, 1024) == QGEN_OK;
  uint16_t *k = rows(11 + j->id, TOKENS * row), *v = rows(101 + j->id, TOKENS * row);
  uint16_t *ob = calloc(j->qn, 2);
  qgen_ptr K = dev(k, TOKENS * row * 2), V = dev(v, TOKENS * row * 2), O = dev(ob, j->qn * 2);
  int seq = 1, n = TOKENS / STEPS;
  for (int t = 0; ok && t < STEPS; t++) {
    uint16_t *q = rows(1000 * j->id + t, j->qn);
    qgen_ptr Q = dev(q, j->qn * 2);
    qgen_attend_opts o = qgen_attend_defaults(j->ctx);
    if (t & 1) o.mode = QGEN_ATTEND_DENSE;
    ok = qgen_append(kv, &seq, 1, &n, K + (qgen_ptr)t * n * row * 2, V + (qgen_ptr)t * n * row * 2, (qgen_stream)s) == QGEN_OK &&
         qgen_attend(kv, &seq, 1, Q, O, &o, (qgen_stream)s) == QGEN_OK;
    if (backend == QGEN_BACKEND_GPU)
      ok &= cu->cuStreamSynchronize(s) == CUDA_SUCCESS && cu->cuMemcpyDtoH(ob, O, j->qn * 2) == CUDA_SUCCESS;
    memcpy(j->out + t * j->qn, ob, j->qn * 2);
    undev(Q);
    free(q);
  }
  /* a failure of its own: the message names its id, whatever the other threads do */
  int bad = 100 + j->id;
  char want[64];
  snprintf(want, sizeof want, "seq[0] = %d", bad);
  for (int r = 0; ok && r < 200; r++) {
    qgen_status st = qgen_reset(kv, bad);
    j->own_message = st == QGEN_ERR_INVALID_ARG && strstr(qgen_error(j->ctx), want) != NULL;
    if (!j->own_message) break;
  }
  j->ok = ok;
  undev(K), undev(V), undev(O);
  free(k), free(v), free(ob);
  qgen_cache_destroy(kv);
  if (s) cu->cuStreamDestroy(s);
  if (pc) cu->cuDevicePrimaryCtxRelease(dv);
  return NULL;
}

static int open_spec(qgen_ctx **c) {
  qgen_open_opts o = {backend, 0, NULL, cache_dir};
  qgen_status st = qgen_open(c, SPEC, &o);
  if (st != QGEN_OK) printf("qgen_open: %s: %s\n", qgen_status_str(st), qgen_error(*c));
  return st == QGEN_OK;
}

typedef struct {
  qgen_ctx *ctx;
  int ok;
} opener;

static void *open_one(void *arg) {
  opener *o = arg;
  o->ok = open_spec(&o->ctx);
  return NULL;
}

/* A thread that fails a call and ends, then threads started after it: one of them usually
   gets the ended thread's pthread_t back (the system reuses its descriptor), and must
   still see no message of its own yet. */
typedef struct {
  qgen_ctx *ctx;
  pthread_t self;
  char seen[256];
} reuser;

static void *fail_once(void *arg) {
  reuser *r = arg;
  qgen_kv *kv = NULL;
  r->self = pthread_self();
  qgen_cache_create(r->ctx, &kv, -7, 1); /* records "... max_seqs = -7 ..." for this thread */
  snprintf(r->seen, sizeof r->seen, "%s", qgen_error(r->ctx));
  return NULL;
}

static void *look(void *arg) {
  reuser *r = arg;
  r->self = pthread_self();
  snprintf(r->seen, sizeof r->seen, "%s", qgen_error(r->ctx));
  return NULL;
}

static void reused_thread_ids(qgen_ctx *ctx) {
  reuser dead = {ctx, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, fail_once, &dead);
  pthread_join(t, NULL);
  int reused = 0, clean = 1;
  for (int i = 0; i < 50 && !reused; i++) {
    reuser later = {ctx, 0, ""};
    pthread_create(&t, NULL, look, &later);
    pthread_join(t, NULL);
    reused = pthread_equal(later.self, dead.self);
    if (reused) clean = later.seen[0] == 0;
    if (reused && !clean) printf("     it sees: \"%s\"\n", later.seen);
  }
  check(strstr(dead.seen, "max_seqs = -7") != NULL, "a thread's failed call leaves its message: \"%s\"", dead.seen);
  if (!reused) printf("     no later thread got the ended thread's pthread_t back: nothing more to check\n");
  check(clean, "a new thread with an ended thread's pthread_t sees no message (not the ended thread's)");
}

int main(void) {
  const char *be = getenv("QGEN_TEST_BACKEND");
  if (be && !strcmp(be, "gpu")) {
    const char *why = "";
    if (!(cu = qgen_cudrv_get(&why))) {
      printf("test_threads: GPU backend requested: %s — skipped\n", why);
      return 77;
    }
    backend = QGEN_BACKEND_GPU;
  }
  snprintf(cache_dir, sizeof cache_dir, "/tmp/qgen-test-threads-XXXXXX");
  if (!mkdtemp(cache_dir)) return 1;

  /* several qgen_open at once on one (empty) cache directory */
  opener ops[THREADS];
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, open_one, &ops[i]);
  int all = 1;
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL), all &= ops[i].ok;
  check(all, "%d qgen_open in parallel threads on one cache directory", THREADS);
  if (!all) return 1;
  qgen_ctx *ctx = ops[0].ctx;
  for (int i = 1; i < THREADS; i++) qgen_close(ops[i].ctx);

  job serial[THREADS], par[THREADS];
  for (int i = 0; i < THREADS; i++) {
    serial[i] = (job){ctx, i, NULL, 0, 0, 0};
    work(&serial[i]);
  }
  for (int i = 0; i < THREADS; i++) {
    par[i] = (job){ctx, i, NULL, 0, 0, 0};
    pthread_create(&th[i], NULL, work, &par[i]);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  int same = 1, ok = 1, own = 1;
  for (int i = 0; i < THREADS; i++) {
    ok &= serial[i].ok && par[i].ok;
    own &= par[i].own_message;
    same &= serial[i].out && par[i].out && !memcmp(serial[i].out, par[i].out, STEPS * serial[i].qn * 2);
    free(serial[i].out), free(par[i].out);
  }
  check(ok, "%d threads, each with its own cache%s of one context: every call works", THREADS,
        backend == QGEN_BACKEND_GPU ? " and stream" : "");
  check(same, "their outputs equal the serial run's, bit for bit");
  check(own, "each thread's qgen_error is its own failure's message");
  reused_thread_ids(ctx);
  qgen_close(ctx);

  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
  if (system(cmd) != 0) printf("could not remove %s\n", cache_dir);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
