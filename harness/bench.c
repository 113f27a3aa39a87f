/* bench.c — `qgen bench`: time the decode step of a spec on the GPU.
 *
 * For every (context, batch) cell the KV caches are filled by appending a random 32K-token
 * chunk repeatedly (the fill rate is reported as append tokens/s); enough caches are made
 * that one pass over them is >= 4x the L2, and the timed runs rotate through them, so small
 * cells are not served from L2. Each coverage is timed as a whole step captured in a CUDA
 * graph per cache and replayed (events around each replay after warm-up; the median of
 * --runs; also eagerly, host launch latency included), then again with events between the
 * kernels for the breakdown: estimate, select, attend (with its fused combine); a sparse
 * coverage also as a reuse step (QGEN_ATTEND_REUSE over the last selection), captured and
 * replayed the same way, on its own line and as reuse_us in the JSON. In the same cell a plain
 * streaming read (16-byte loads, 4 in flight per thread, grid sized to the SMs) of exactly
 * the bytes the step must read gives the practical floor at that size. With --tokens, each
 * coverage is timed again as a step of T query tokens a sequence (the last T of each:
 * qgen_attend_multi, a speculative verify step), which reads the same bytes.
 *
 * Several --variant names are timed one after another in this process (all opened first, so
 * a bad one fails before any time is spent), into one table and one JSON array.
 *
 * Output: a table on stdout and, with --json FILE, one JSON object per cell (an array).
 */
#include "harness/bench.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/common.h"
#include "jit/artifact.h"
#include "jit/nvrtc.h"
#include "base/util.h"
#include "base/cudrv.h"
#include "base/rng.h"
#include "runtime/qgen_ext.h"

static const char STREAM_SRC[] =
    "extern \"C\" __global__ void stream_read(const uint4 *p, unsigned long long n, unsigned *sink) {\n"
    "  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;\n"
    "  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  unsigned acc = 0;\n"
    "  for (; i + 3 * stride < n; i += 4 * stride) {\n"
    "    uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);\n"
    "    acc ^= a.x ^ b.y ^ c.z ^ d.w ^ a.w ^ b.x ^ c.y ^ d.z;\n"
    "  }\n"
    "  for (; i < n; i += stride) { uint4 a = __ldcs(p + i); acc ^= a.x ^ a.w; }\n"
    "  if (acc == 0x9e3779b9u) *sink = acc;\n"
    "}\n";

struct qgen_bench_env {
  const qgen_cudrv *cu;
  CUfunction stream;
  CUmodule mod;
  CUdeviceptr sink;
  int sm_count;
};
typedef qgen_bench_env benv;

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}
static float median(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_f);
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

#define CK(call)                                                                   \
  do {                                                                             \
    CUresult r_ = (call);                                                          \
    if (r_ != CUDA_SUCCESS) {                                                      \
      fprintf(stderr, "qgen bench: %s: %s\n", #call, qgen_cu_errstr(r_));         \
      exit(2);                                                                     \
    }                                                                              \
  } while (0)
#define API(call) QGEN_API_CHECK(ctx, call, QGEN_API_FATAL("bench"))

/* One step of B sequences with nq query tokens each (NULL: one) on stream s. */
static qgen_status step(qgen_kv *kv, const int *seq, int B, const int *nq, CUdeviceptr dq, CUdeviceptr dout,
                        const qgen_attend_opts *o, CUstream s) {
  return nq ? qgen_attend_multi(kv, seq, B, nq, dq, dout, o, s) : qgen_attend(kv, seq, B, dq, dout, o, s);
}

/* ex[r] = the step (attend with o, nq tokens a sequence) of cache kv[r], captured on cs with
   the benchmark marks (NULL: none), for each of R caches. */
static void capture_steps(benv *b, qgen_ctx *ctx, qgen_kv **kv, int R, const int *seq, int B, const int *nq, CUdeviceptr dq,
                          CUdeviceptr dout, const qgen_attend_opts *o, CUevent *marks, CUstream cs, CUgraphExec *ex) {
  for (int r = 0; r < R; r++) {
    CUgraph gr;
    /* once eagerly, with the benchmark marks off (they are recorded as graph nodes): a step of
       several tokens builds its kernels on first use, which a capture cannot */
    qgen_ext_set_marks(ctx, NULL);
    API(step(kv[r], seq, B, nq, dq, dout, o, cs));
    CK(b->cu->cuStreamSynchronize(cs));
    qgen_ext_set_marks(ctx, marks);
    CK(b->cu->cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
    API(step(kv[r], seq, B, nq, dq, dout, o, cs));
    CK(b->cu->cuStreamEndCapture(cs, &gr));
    CK(b->cu->cuGraphInstantiate(&ex[r], gr, 0));
    CK(b->cu->cuGraphDestroy(gr));
  }
}

/* The median µs of runs replays of ex[i % R] on cs (events around each), after warmup. */
static double replay_us(benv *b, CUgraphExec *ex, int R, CUstream cs, CUevent e0, CUevent e1, float *t, int warmup,
                        int runs) {
  for (int i = 0; i < warmup; i++) CK(b->cu->cuGraphLaunch(ex[i % R], cs));
  for (int i = 0; i < runs; i++) {
    CK(b->cu->cuEventRecord(e0, cs));
    CK(b->cu->cuGraphLaunch(ex[i % R], cs));
    CK(b->cu->cuEventRecord(e1, cs));
    CK(b->cu->cuEventSynchronize(e1));
    CK(b->cu->cuEventElapsedTime(&t[i], e0, e1));
  }
  return 1e3 * median(t, runs);
}

/* Median time in us of a streaming read of `bytes`, at rotating offsets of a buffer of at
   least 4x the L2 (and at least bytes). */
static double stream_us(benv *b, size_t bytes, int runs) {
  bytes = (bytes + 15) / 16 * 16;
  size_t cap = bytes < (256u << 20) ? (size_t)(256u << 20) + bytes : bytes;
  CUdeviceptr buf;
  CK(b->cu->cuMemAlloc(&buf, cap));
  CK(b->cu->cuMemsetD8(buf, 1, cap));
  CUevent e0, e1;
  CK(b->cu->cuEventCreate(&e0, 0));
  CK(b->cu->cuEventCreate(&e1, 0));
  float *t = malloc(sizeof(float) * (size_t)runs);
  const size_t slots = cap / bytes;
  for (int i = -5; i < runs; i++) {
    CUdeviceptr p = buf + (size_t)((i + 5) % (int)slots) * bytes;
    unsigned long long n16 = bytes / 16;
    void *args[] = {&p, &n16, &b->sink};
    CK(b->cu->cuEventRecord(e0, NULL));
    CK(b->cu->cuLaunchKernel(b->stream, (unsigned)b->sm_count * 4, 1, 1, 512, 1, 1, 0, NULL, args, NULL));
    CK(b->cu->cuEventRecord(e1, NULL));
    CK(b->cu->cuEventSynchronize(e1));
    if (i >= 0) CK(b->cu->cuEventElapsedTime(&t[i], e0, e1));
  }
  double us = 1e3 * median(t, runs);
  free(t);
  b->cu->cuEventDestroy(e0);
  b->cu->cuEventDestroy(e1);
  b->cu->cuMemFree(buf);
  return us;
}

qgen_bench_env *qgen_bench_env_new(int sm_count) {
  static char err[65536];
  benv *b = calloc(1, sizeof *b);
  if (!b) {
    fprintf(stderr, "qgen bench: out of memory\n");
    exit(2);
  }
  b->cu = qgen_cudrv_get(NULL);
  b->sm_count = sm_count;
  qgen_artifact a;
  const char *names[] = {"stream_read", NULL};
  int major = 0, minor = 0;
  CK(b->cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  CK(b->cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
  if (qgen_nvrtc_compile(STREAM_SRC, "stream_read.cu", major * 10 + minor, names, &a, err, sizeof err) != 0) {
    fprintf(stderr, "qgen bench: %s\n", err);
    exit(2);
  }
  CK(b->cu->cuModuleLoadData(&b->mod, a.cubin));
  CK(b->cu->cuModuleGetFunction(&b->stream, b->mod, "stream_read"));
  CK(b->cu->cuMemAlloc(&b->sink, 16));
  qgen_artifact_free(&a);
  return b;
}

void qgen_bench_env_free(qgen_bench_env *b) {
  if (!b) return;
  b->cu->cuMemFree(b->sink);
  b->cu->cuModuleUnload(b->mod);
  free(b);
}

/* The bytes a step must read: K and V of the attended pages (every KV head), plus the
   bounds estimate reads of every page when sparse (the 8-bit rows with sparse.bounds = "i8"),
   plus, with two-stage selection, the compact K (sketch or the cache's own K) of rescore x
   the attended pages (at most every page). */
static double step_bytes(const qgen_layout *L, int64_t ctx, int batch, double cov) {
  const int64_t n = qgen_pages_of(ctx, L->block);
  const double per_tok = (double)L->n_head_kv * (double)(L->k_row_bytes + L->v_row_bytes);
  if (cov >= 1.0) return per_tok * (double)ctx * batch;
  double sel = ceil(cov * (double)n), cand = L->rescore > 1 ? fmin((double)n, sel * L->rescore) : 0;
  const double rescore_row = (double)(L->sketch_row_bytes ? L->sketch_row_bytes : L->k_row_bytes);
  return batch * (per_tok * L->block * sel + (double)n * (L->bounds_i8 ? L->bounds_i8_page_bytes : L->bounds_page_bytes) + cand * L->n_head_kv * L->block * rescore_row);
}

int qgen_bench_open(qgen_ctx **ctx, const char *spec, const qgen_open_opts *o, double v_tau) {
  const qgen_status st = qgen_harness_open(ctx, spec, o, v_tau);
  if (st == QGEN_OK) return 0;
  const int code = qgen_harness_open_exit(st);
  if (code == 77) printf("qgen bench: %s — skipped\n", qgen_error(*ctx));
  else fprintf(stderr, "qgen: bench: %s\n", qgen_error(*ctx));
  qgen_close(*ctx);
  return code;
}

int qgen_bench_jit(const char *spec, const char *variant) {
  char dir[] = "/tmp/qgen-bench-jit-XXXXXX", cmd[200];
  if (!mkdtemp(dir)) {
    fprintf(stderr, "qgen: bench: cannot make a temporary cache directory in /tmp: %s\n", strerror(errno));
    return 2;
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  qgen_open_opts o = {QGEN_BACKEND_GPU, 0, variant, dir};
  qgen_ctx *ctx;
  qgen_info info;
  double t0 = qgen_now_ms(), cold = 0, warm = 0, held = -1;
  int rc = qgen_bench_open(&ctx, spec, &o, -1);
  if (rc == 0) {
    cold = qgen_now_ms() - t0;
    qgen_close(ctx);
    t0 = qgen_now_ms();
    rc = qgen_bench_open(&ctx, spec, &o, -1);
  }
  if (rc == 0) {
    warm = qgen_now_ms() - t0;
    qgen_get_info(ctx, &info);
    qgen_close(ctx);
    /* Both opens above create the device's primary context (qgen_close released it): ~0.1 s
       of driver work a process pays once. An engine that loads qgen already holds that
       context, so the open it pays is this one. */
    const qgen_cudrv *cu = qgen_cudrv_get(NULL);
    CUdevice dev;
    CUcontext pc;
    if (cu && cu->cuDeviceGet(&dev, 0) == CUDA_SUCCESS && cu->cuDevicePrimaryCtxRetain(&pc, dev) == CUDA_SUCCESS) {
      t0 = qgen_now_ms();
      if ((rc = qgen_bench_open(&ctx, spec, &o, -1)) == 0) {
        held = qgen_now_ms() - t0;
        qgen_close(ctx);
      }
      cu->cuDevicePrimaryCtxRelease(dev);
    }
  }
  if (rc == 0)
    printf("jit: cold qgen_open %.1f ms (NVRTC for sm_%d, empty cache), warm qgen_open %.1f ms (cache %s); "
           "warm with the device's context already held by the process: %.1f ms\n",
           cold, info.arch, warm, info.cache_hit ? "hit" : "miss", held);
  if (system(cmd) != 0) fprintf(stderr, "qgen bench: could not remove %s\n", dir);
  return rc;
}

void qgen_bench_print_header(void) {
  printf("%-22s %4s %8s %6s %2s | %9s %9s %9s %9s %9s | %9s %9s %8s %8s\n", "spec", "B", "ctx", "cov", "T", "step_us", "est_us",
         "sel_us", "attend_us", "eager_us", "stream_us", "floor_us", "GB/s", "x_stream");
}

/* Tokens of the random K/V chunk the caches are filled from. */
#define BENCH_CHUNK ((int64_t)32768)

/* The timing state of one variant: its random chunk of K/V rows (in_type, on the device),
   the stream steps run (and are captured) on, events, and room for 4 x runs samples. */
typedef struct {
  benv *b;
  qgen_ctx *ctx;
  const qgen_layout *L;
  qgen_info info;
  size_t rowb;           /* in_type bytes per token (every KV head) */
  CUdeviceptr dk, dv;
  CUevent e0, e1, marks[2];
  CUstream cs;
  float *t;
} bvar;

/* One (context, batch) cell: R caches of batch B filled to C tokens each, the step's
   query and output, the first cache's fill time and the dense step's time. */
typedef struct {
  int64_t C;
  int B, R, T; /* T: the query tokens a sequence of the step being timed */
  qgen_kv **kv;
  int *seq, *nq; /* nq: T for each sequence, or NULL while T is 1 */
  CUdeviceptr dq, dout; /* room for the most tokens of --tokens */
  double fill_ms, dense_us;
} bcell;

/* The random chunk of K and V rows the caches are filled from. */
static void random_chunk(bvar *v) {
  const qgen_layout *L = v->L;
  uint8_t *h = malloc((size_t)BENCH_CHUNK * v->rowb);
  float *f = malloc(sizeof(float) * (size_t)L->head_dim);
  uint64_t x = 0x243f6a8885a308d3ull;
  for (int w = 0; w < 2; w++) {
    for (int64_t r = 0; r < BENCH_CHUNK * L->n_head_kv; r++) {
      for (int d = 0; d < L->head_dim; d++) {
        f[d] = (float)qgen_rng_signed(&x);
      }
      qgen_type_traits_of(L->in_type)->from_f32(f, h + r * L->in_row_bytes, L->head_dim);
    }
    CK(v->b->cu->cuMemAlloc(w ? &v->dv : &v->dk, (size_t)BENCH_CHUNK * v->rowb));
    CK(v->b->cu->cuMemcpyHtoD(w ? v->dv : v->dk, h, (size_t)BENCH_CHUNK * v->rowb));
  }
  free(h);
  free(f);
}

/* Set cell k up for context C and batch B: 0 after printing a skip line when its caches
   would need more than --mem-gib, else 1 with its caches filled (the first one timed). */
static int cell_begin(bvar *v, const qgen_bench_cfg *c, bcell *k, int64_t C, int B) {
  benv *b = v->b;
  qgen_ctx *ctx = v->ctx;
  const qgen_layout *L = v->L;
  *k = (bcell){.C = C, .B = B, .T = 1, .dense_us = NAN};
  const double cache_bytes = step_bytes(L, C, B, 1.0) + (double)qgen_pages_of(C, L->block) * B * (L->bounds_page_bytes + L->bounds_i8_page_bytes);
  if (cache_bytes > c->mem_gib * (1u << 30)) {
    printf("%-22s %4d %8lld   skip (cache %.1f GiB > --mem-gib)\n", v->info.name, B,
           (long long)C, cache_bytes / (1u << 30));
    return 0;
  }
  int R = (int)ceil(4.0 * 64e6 / cache_bytes); /* caches to rotate: >= 4x a 60 MB L2 */
  if (R < 1) R = 1;
  if (R > 16) R = 16;
  k->R = R;
  k->kv = calloc((size_t)R, sizeof *k->kv);
  k->seq = malloc(sizeof(int) * (size_t)B);
  int *nn = malloc(sizeof(int) * (size_t)B);
  for (int i = 0; i < B; i++) k->seq[i] = i;
  for (int r = 0; r < R; r++) {
    API(qgen_cache_create(ctx, &k->kv[r], B, C));
    /* fill: each call appends one chunk slice per sequence; K and V rows of a call are
       contiguous, so give the sequences consecutive slices of the random chunk */
    CK(b->cu->cuEventRecord(v->e0, NULL));
    for (int64_t done = 0; done < C;) {
      int64_t take = C - done < BENCH_CHUNK / B ? C - done : BENCH_CHUNK / B;
      if (take < 1) take = 1;
      for (int i = 0; i < B; i++) nn[i] = (int)take;
      API(qgen_append(k->kv[r], k->seq, B, nn, v->dk, v->dv, NULL));
      done += take;
    }
    CK(b->cu->cuEventRecord(v->e1, NULL));
    CK(b->cu->cuEventSynchronize(v->e1));
    float ms;
    CK(b->cu->cuEventElapsedTime(&ms, v->e0, v->e1));
    if (r == 0) k->fill_ms = ms;
  }
  free(nn);
  int tmax = 1;
  for (int i = 0; i < c->ntok; i++) tmax = (int)c->tokens[i] > tmax ? (int)c->tokens[i] : tmax;
  k->nq = malloc(sizeof(int) * (size_t)B);
  const size_t qb = (size_t)B * tmax * L->q_bytes, ob = (size_t)B * tmax * L->out_bytes;
  CK(b->cu->cuMemAlloc(&k->dq, qb));
  CK(b->cu->cuMemAlloc(&k->dout, ob));
  CK(b->cu->cuMemcpyDtoD(k->dq, v->dk, qb < (size_t)BENCH_CHUNK * v->rowb ? qb : (size_t)BENCH_CHUNK * v->rowb));
  return 1;
}

/* Release cell k and print its append line. */
static void cell_end(bvar *v, bcell *k) {
  for (int r = 0; r < k->R; r++) qgen_cache_destroy(k->kv[r]);
  free(k->kv);
  free(k->seq);
  free(k->nq);
  v->b->cu->cuMemFree(k->dq);
  v->b->cu->cuMemFree(k->dout);
  printf("%-22s %4d %8lld   append: %.3g tokens/s filling in %d-token chunks per sequence\n", v->info.name, k->B,
         (long long)k->C, (double)k->C * k->B / (k->fill_ms * 1e-3), (int)(BENCH_CHUNK / k->B));
}

/* The median µs of the step ao launched eagerly (what a caller that launches each step
   pays, host launch latency included), after warm-up. */
static double time_eager(bvar *v, const bcell *k, const qgen_attend_opts *ao, const qgen_bench_cfg *c) {
  benv *b = v->b;
  qgen_ctx *ctx = v->ctx;
  const int *nq = k->T > 1 ? k->nq : NULL;
  for (int i = 0; i < c->warmup; i++) API(step(k->kv[i % k->R], k->seq, k->B, nq, k->dq, k->dout, ao, v->cs));
  for (int i = 0; i < c->runs; i++) {
    CK(b->cu->cuEventRecord(v->e0, v->cs));
    API(step(k->kv[i % k->R], k->seq, k->B, nq, k->dq, k->dout, ao, v->cs));
    CK(b->cu->cuEventRecord(v->e1, v->cs));
    CK(b->cu->cuEventSynchronize(v->e1));
    CK(b->cu->cuEventElapsedTime(&v->t[i], v->e0, v->e1));
  }
  return 1e3 * median(v->t, c->runs);
}

/* The step ao as an engine runs it: captured once per cache and replayed; its median µs,
   then replayed again with events between the kernels, whose samples go to v->t[runs ..
   4 runs) (estimate, select, attend). */
static double time_graph(bvar *v, const bcell *k, const qgen_attend_opts *ao, const qgen_bench_cfg *c) {
  benv *b = v->b;
  const int R = k->R;
  CUgraphExec *ex = calloc(2 * (size_t)R, sizeof *ex);
  for (int m = 0; m < 2; m++)
    capture_steps(b, v->ctx, k->kv, R, k->seq, k->B, k->T > 1 ? k->nq : NULL, k->dq, k->dout, ao, m ? v->marks : NULL, v->cs,
                  ex + m * R);
  qgen_ext_set_marks(v->ctx, NULL);
  const double step = replay_us(b, ex, R, v->cs, v->e0, v->e1, v->t, c->warmup, c->runs);
  float *ts = v->t + c->runs, *ta = v->t + 2 * c->runs, *tc = v->t + 3 * c->runs;
  for (int i = 0; i < c->runs; i++) {
    CK(b->cu->cuEventRecord(v->e0, v->cs));
    CK(b->cu->cuGraphLaunch(ex[R + i % R], v->cs));
    CK(b->cu->cuEventRecord(v->e1, v->cs));
    CK(b->cu->cuEventSynchronize(v->e1));
    CK(b->cu->cuEventElapsedTime(&ts[i], v->e0, v->marks[0]));
    CK(b->cu->cuEventElapsedTime(&ta[i], v->marks[0], v->marks[1]));
    CK(b->cu->cuEventElapsedTime(&tc[i], v->marks[1], v->e1));
  }
  for (int r = 0; r < 2 * R; r++) CK(b->cu->cuGraphExecDestroy(ex[r]));
  free(ex);
  return step;
}

/* A reuse step (QGEN_ATTEND_REUSE: the last selection extended, no estimate or select) of
   each cache after one step ao has selected, captured and replayed as time_graph does:
   its median µs. */
static double time_reuse(bvar *v, const bcell *k, const qgen_attend_opts *ao, const qgen_bench_cfg *c) {
  benv *b = v->b;
  qgen_ctx *ctx = v->ctx;
  const int R = k->R;
  CUgraphExec *ex = calloc((size_t)R, sizeof *ex);
  qgen_attend_opts ro = *ao;
  ro.mode = QGEN_ATTEND_REUSE;
  const int *nq = k->T > 1 ? k->nq : NULL;
  for (int r = 0; r < R; r++) API(step(k->kv[r], k->seq, k->B, nq, k->dq, k->dout, ao, v->cs)); /* each cache's selection */
  capture_steps(b, ctx, k->kv, R, k->seq, k->B, nq, k->dq, k->dout, &ro, NULL, v->cs, ex);
  const double reuse = replay_us(b, ex, R, v->cs, v->e0, v->e1, v->t, c->warmup, c->runs);
  for (int r = 0; r < R; r++) CK(b->cu->cuGraphExecDestroy(ex[r]));
  free(ex);
  return reuse;
}

/* What one coverage of a cell measured (µs, but bytes). */
typedef struct {
  double cov, step, est, sel, att, eager, reuse, sus, floor_us, bytes;
} brow;

/* Row w of cell k: its table line (and the reuse line of a sparse coverage) on stdout and
   its JSON object. */
static void report_row(bvar *v, const bcell *k, qgen_bench_cfg *c, const brow *w) {
  const qgen_layout *L = v->L;
  const char *name = v->info.name;
  printf("%-22s %4d %8lld %6.4g %2d | %9.1f %9.1f %9.1f %9.1f %9.1f | %9.1f %9.1f %8.0f %8.2f\n", name, k->B,
         (long long)k->C, w->cov, k->T, w->step, w->est, w->sel, w->att, w->eager, w->sus, w->floor_us, w->bytes / w->step / 1e3,
         w->step / w->sus);
  if (w->cov < 1.0)
    printf("%-22s %4d %8lld %6.4g %2d   reuse: %.1f us a step over the last selection (no estimate or select)\n", name,
           k->B, (long long)k->C, w->cov, k->T, w->reuse);
  fflush(stdout);
  char selj[32] = "null", reusej[32] = "null";
  if (w->cov < 1.0) snprintf(selj, sizeof selj, "%.2f", w->est + w->sel), snprintf(reusej, sizeof reusej, "%.2f", w->reuse);
  if (c->jf)
    fprintf(c->jf,
            "%s  {\"spec\": \"%s\", \"n_head\": %d, \"k_type\": \"%s\", \"v_type\": \"%s\", \"batch\": %d, \"ctx\": %lld, "
            "\"coverage\": %g, \"tokens\": %d, \"qgen_us\": %.2f, \"select_us\": %s, \"estimate_us\": %.2f, \"attend_us\": %.2f, "
            "\"eager_us\": %.2f, \"dense_us\": %.2f, \"stream_us\": %.2f, \"floor_us\": %.2f, \"bytes\": %.0f, \"gbps\": %.1f, "
            "\"splits\": %d, \"append_tok_s\": %.4g, \"reuse_us\": %s, \"tune\": \"%s\"}",
            c->rows ? ",\n" : "", name, L->n_head, v->info.k_type, v->info.v_type, k->B, (long long)k->C, w->cov, k->T, w->step,
            selj, w->est, w->att, w->eager, isnan(k->dense_us) ? w->step : k->dense_us, w->sus, w->floor_us,
            w->bytes, w->bytes / w->step / 1e3, qgen_ext_max_splits(v->ctx, k->B), (double)k->C * k->B / (k->fill_ms * 1e-3),
            reusej, c->tune);
  c->rows++;
}

/* Coverage cov of cell k (1: dense): timed eagerly, as a replayed graph with its
   breakdown, as a reuse step when sparse, and against a streaming read of its bytes. */
static void time_coverage(bvar *v, bcell *k, qgen_bench_cfg *c, double cov) {
  qgen_attend_opts ao = qgen_attend_defaults(v->ctx);
  if (cov >= 1.0) ao.mode = QGEN_ATTEND_DENSE;
  else ao.mode = QGEN_ATTEND_SPARSE, ao.coverage = cov, ao.budget = 0;
  brow w = {.cov = cov, .reuse = NAN};
  w.eager = time_eager(v, k, &ao, c);
  w.step = time_graph(v, k, &ao, c);
  if (cov < 1.0) w.reuse = time_reuse(v, k, &ao, c);
  w.est = 1e3 * median(v->t + c->runs, c->runs);
  w.sel = 1e3 * median(v->t + 2 * c->runs, c->runs);
  w.att = 1e3 * median(v->t + 3 * c->runs, c->runs);
  w.bytes = step_bytes(v->L, k->C, k->B, cov);
  w.sus = stream_us(v->b, (size_t)w.bytes, c->runs), w.floor_us = w.bytes / 4.3e6;
  if (cov >= 1.0 && k->T == 1) k->dense_us = w.step;
  report_row(v, k, c, &w);
}

void qgen_bench_variant(qgen_bench_env *b, qgen_ctx *ctx, qgen_bench_cfg *c) {
  bvar v = {.b = b, .ctx = ctx, .L = qgen_ext_layout(ctx)};
  qgen_get_info(ctx, &v.info);
  v.rowb = (size_t)v.L->n_head_kv * v.L->in_row_bytes;
  random_chunk(&v);
  CK(b->cu->cuStreamCreate(&v.cs, CU_STREAM_NON_BLOCKING));
  CK(b->cu->cuEventCreate(&v.e0, 0));
  CK(b->cu->cuEventCreate(&v.e1, 0));
  CK(b->cu->cuEventCreate(&v.marks[0], 0));
  CK(b->cu->cuEventCreate(&v.marks[1], 0));
  v.t = malloc(sizeof(float) * (size_t)c->runs * 4);
  for (int ci = 0; ci < c->nctx; ci++)
    for (int bi = 0; bi < c->nb; bi++) {
      bcell k;
      if (!cell_begin(&v, c, &k, (int64_t)c->ctxs[ci], (int)c->batches[bi])) continue;
      for (int vi = 0; vi < c->ncov; vi++)
        for (int ti = 0; ti < c->ntok; ti++) {
          k.T = (int)c->tokens[ti];
          for (int i = 0; i < k.B; i++) k.nq[i] = k.T;
          time_coverage(&v, &k, c, c->covs[vi]);
        }
      cell_end(&v, &k);
    }
  free(v.t);
  b->cu->cuEventDestroy(v.e0);
  b->cu->cuEventDestroy(v.e1);
  b->cu->cuEventDestroy(v.marks[0]);
  b->cu->cuEventDestroy(v.marks[1]);
  b->cu->cuStreamDestroy(v.cs);
  b->cu->cuMemFree(v.dk);
  b->cu->cuMemFree(v.dv);
}
