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
 * the bytes the step must read gives the practical floor at that size.
 *
 * Several --variant names are timed one after another in this process (all opened first, so
 * a bad one fails before any time is spent), into one table and one JSON array.
 *
 * Output: a table on stdout and, with --json FILE, one JSON object per cell (an array).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/commands.h"
#include "tools/common.h"
#include "tools/opts.h"
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

enum { BENCH_MAX_VARIANTS = 16 };

static const char BENCH_SYNOPSIS[] =
    "usage: qgen bench --spec FILE [--variant LIST] [--ctx LIST] [--batch LIST] [--coverage LIST]\n"
    "                  [--runs N] [--warmup N] [--json FILE] [--jit]\n"
    "\n"
    "Times one decode step (estimate + select + attend, or attend alone when dense; attend\n"
    "merges its splits itself) per layer on the GPU, for every context x batch x coverage;\n"
    "coverage 1 = dense. A sparse coverage is also timed as a reuse step (QGEN_ATTEND_REUSE:\n"
    "the last selection, no estimate or select), printed on a line of its own.\n"
    "Lists are comma-separated; contexts take K/M suffixes (16K = 16384).\n"
    "\n";

typedef struct {
  const qgen_cudrv *cu;
  CUfunction stream;
  CUmodule mod;
  CUdeviceptr sink;
  int sm_count;
} benv;

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

/* ex[r] = the step (attend with o) of cache kv[r], captured on cs, for each of R caches. */
static void capture_steps(benv *b, qgen_ctx *ctx, qgen_kv **kv, int R, const int *seq, int B, CUdeviceptr dq,
                          CUdeviceptr dout, const qgen_attend_opts *o, CUstream cs, CUgraphExec *ex) {
  for (int r = 0; r < R; r++) {
    CUgraph gr;
    CK(b->cu->cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
    API(qgen_attend(kv[r], seq, B, dq, dout, o, cs));
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

static void setup_stream(benv *b) {
  static char err[65536];
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

/* qgen_open for bench: 0, or the exit code after saying why (77 without a GPU, 1 for a bad
   spec or bundle, 2 otherwise). */
static int open_spec(qgen_ctx **ctx, const char *spec, const qgen_open_opts *o, double v_tau) {
  const qgen_status st = qgen_opts_open(ctx, spec, o, v_tau);
  if (st == QGEN_OK) return 0;
  const int code = qgen_opts_open_exit(st);
  if (code == 77) printf("qgen bench: %s — skipped\n", qgen_error(*ctx));
  else fprintf(stderr, "qgen: bench: %s\n", qgen_error(*ctx));
  qgen_close(*ctx);
  return code;
}

/* The --jit timings in a fresh cache directory, removed afterwards. Returns 0 or the exit
   code after saying why. */
static int cmd_jit(const char *spec, const char *variant) {
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
  int rc = open_spec(&ctx, spec, &o, -1);
  if (rc == 0) {
    cold = qgen_now_ms() - t0;
    qgen_close(ctx);
    t0 = qgen_now_ms();
    rc = open_spec(&ctx, spec, &o, -1);
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
      if ((rc = open_spec(&ctx, spec, &o, -1)) == 0) {
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

/* What every variant's cells share: the lists of the command line, the JSON file and its
   row count. */
typedef struct {
  const double *ctxs, *batches, *covs;
  int nctx, nb, ncov, runs, warmup;
  double mem_gib;
  FILE *jf;
  int rows;
  const char *tune;
} bcfg;

/* Every (context, batch, coverage) cell of the variant open in ctx: its table rows and JSON rows. */
static void bench_variant(benv *b, qgen_ctx *ctx, bcfg *c) {
  const qgen_layout *L = qgen_ext_layout(ctx);
  qgen_info info;
  qgen_get_info(ctx, &info);
  /* A random chunk of K/V rows (in_type) to fill caches with. */
  const int64_t chunk = 32768;
  const size_t rowb = (size_t)L->n_head_kv * L->in_row_bytes;
  CUdeviceptr dk, dv, dq, dout;
  {
    uint8_t *h = malloc((size_t)chunk * rowb);
    float *f = malloc(sizeof(float) * (size_t)L->head_dim);
    uint64_t x = 0x243f6a8885a308d3ull;
    for (int w = 0; w < 2; w++) {
      for (int64_t r = 0; r < chunk * L->n_head_kv; r++) {
        for (int d = 0; d < L->head_dim; d++) {
          f[d] = (float)qgen_rng_signed(&x);
        }
        qgen_type_traits_of(L->in_type)->from_f32(f, h + r * L->in_row_bytes, L->head_dim);
      }
      CK(b->cu->cuMemAlloc(w ? &dv : &dk, (size_t)chunk * rowb));
      CK(b->cu->cuMemcpyHtoD(w ? dv : dk, h, (size_t)chunk * rowb));
    }
    free(h);
    free(f);
  }
  CUevent e0, e1, marks[2];
  CUstream cs; /* the stream steps run (and are captured) on */
  CK(b->cu->cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  CK(b->cu->cuEventCreate(&e0, 0));
  CK(b->cu->cuEventCreate(&e1, 0));
  CK(b->cu->cuEventCreate(&marks[0], 0));
  CK(b->cu->cuEventCreate(&marks[1], 0));
  float *t = malloc(sizeof(float) * (size_t)c->runs * 4);

  for (int ci = 0; ci < c->nctx; ci++)
    for (int bi = 0; bi < c->nb; bi++) {
      const int64_t C = (int64_t)c->ctxs[ci];
      const int B = (int)c->batches[bi];
      const double cache_bytes = step_bytes(L, C, B, 1.0) + (double)qgen_pages_of(C, L->block) * B * (L->bounds_page_bytes + L->bounds_i8_page_bytes);
      if (cache_bytes > c->mem_gib * (1u << 30)) {
        printf("%-22s %4d %8lld   skip (cache %.1f GiB > --mem-gib)\n", info.name, B,
               (long long)C, cache_bytes / (1u << 30));
        continue;
      }
      int R = (int)ceil(4.0 * 64e6 / cache_bytes); /* caches to rotate: >= 4x a 60 MB L2 */
      if (R < 1) R = 1;
      if (R > 16) R = 16;
      qgen_kv **kv = calloc((size_t)R, sizeof *kv);
      int *seq = malloc(sizeof(int) * (size_t)B), *nn = malloc(sizeof(int) * (size_t)B);
      for (int i = 0; i < B; i++) seq[i] = i;
      double fill_ms = 0;
      for (int r = 0; r < R; r++) {
        API(qgen_cache_create(ctx, &kv[r], B, C));
        /* fill: each call appends one chunk slice per sequence; K and V rows of a call are
           contiguous, so give the sequences consecutive slices of the random chunk */
        CK(b->cu->cuEventRecord(e0, NULL));
        for (int64_t done = 0; done < C;) {
          int64_t take = C - done < chunk / B ? C - done : chunk / B;
          if (take < 1) take = 1;
          for (int i = 0; i < B; i++) nn[i] = (int)take;
          API(qgen_append(kv[r], seq, B, nn, dk, dv, NULL));
          done += take;
        }
        CK(b->cu->cuEventRecord(e1, NULL));
        CK(b->cu->cuEventSynchronize(e1));
        float ms;
        CK(b->cu->cuEventElapsedTime(&ms, e0, e1));
        if (r == 0) fill_ms = ms;
      }
      const size_t qb = (size_t)B * L->q_bytes, ob = (size_t)B * L->out_bytes;
      CK(b->cu->cuMemAlloc(&dq, qb));
      CK(b->cu->cuMemAlloc(&dout, ob));
      CK(b->cu->cuMemcpyDtoD(dq, dk, qb < (size_t)chunk * rowb ? qb : (size_t)chunk * rowb));
      double dense_us = NAN;
      for (int vi = 0; vi < c->ncov; vi++) {
        qgen_attend_opts ao = qgen_attend_defaults(ctx);
        if (c->covs[vi] >= 1.0) ao.mode = QGEN_ATTEND_DENSE;
        else ao.mode = QGEN_ATTEND_SPARSE, ao.coverage = c->covs[vi], ao.budget = 0;
        /* eager: what a caller that launches each step pays, host launch latency included */
        for (int i = 0; i < c->warmup; i++) API(qgen_attend(kv[i % R], seq, B, dq, dout, &ao, cs));
        for (int i = 0; i < c->runs; i++) {
          CK(b->cu->cuEventRecord(e0, cs));
          API(qgen_attend(kv[i % R], seq, B, dq, dout, &ao, cs));
          CK(b->cu->cuEventRecord(e1, cs));
          CK(b->cu->cuEventSynchronize(e1));
          CK(b->cu->cuEventElapsedTime(&t[i], e0, e1));
        }
        const double eager = 1e3 * median(t, c->runs);
        /* the step as an engine runs it: captured once per cache, replayed (with and
           without events between the kernels for the breakdown) */
        CUgraphExec *ex = calloc(2 * (size_t)R, sizeof *ex);
        for (int m = 0; m < 2; m++) {
          qgen_ext_set_marks(ctx, m ? marks : NULL);
          capture_steps(b, ctx, kv, R, seq, B, dq, dout, &ao, cs, ex + m * R);
        }
        qgen_ext_set_marks(ctx, NULL);
        const double step = replay_us(b, ex, R, cs, e0, e1, t, c->warmup, c->runs);
        float *ts = t + c->runs, *ta = t + 2 * c->runs, *tc = t + 3 * c->runs;
        for (int i = 0; i < c->runs; i++) {
          CK(b->cu->cuEventRecord(e0, cs));
          CK(b->cu->cuGraphLaunch(ex[R + i % R], cs));
          CK(b->cu->cuEventRecord(e1, cs));
          CK(b->cu->cuEventSynchronize(e1));
          CK(b->cu->cuEventElapsedTime(&ts[i], e0, marks[0]));
          CK(b->cu->cuEventElapsedTime(&ta[i], marks[0], marks[1]));
          CK(b->cu->cuEventElapsedTime(&tc[i], marks[1], e1));
        }
        for (int r = 0; r < 2 * R; r++) CK(b->cu->cuGraphExecDestroy(ex[r]));
        /* a reuse step (QGEN_ATTEND_REUSE: the last selection extended, no estimate or
           select) of each cache, captured and replayed the same way */
        double reuse = NAN;
        if (c->covs[vi] < 1.0) {
          qgen_attend_opts ro = ao;
          ro.mode = QGEN_ATTEND_REUSE;
          for (int r = 0; r < R; r++) API(qgen_attend(kv[r], seq, B, dq, dout, &ao, cs)); /* each cache's selection */
          capture_steps(b, ctx, kv, R, seq, B, dq, dout, &ro, cs, ex);
          reuse = replay_us(b, ex, R, cs, e0, e1, t, c->warmup, c->runs);
          for (int r = 0; r < R; r++) CK(b->cu->cuGraphExecDestroy(ex[r]));
        }
        free(ex);
        const double est = 1e3 * median(ts, c->runs), sel = 1e3 * median(ta, c->runs), att = 1e3 * median(tc, c->runs);
        const double bytes = step_bytes(L, C, B, c->covs[vi]);
        const double sus = stream_us(b, (size_t)bytes, c->runs), floor_us = bytes / 4.3e6;
        if (c->covs[vi] >= 1.0) dense_us = step;
        printf("%-22s %4d %8lld %6.4g | %9.1f %9.1f %9.1f %9.1f %9.1f | %9.1f %9.1f %8.0f %8.2f\n", info.name, B,
               (long long)C, c->covs[vi], step, est, sel, att, eager, sus, floor_us, bytes / step / 1e3, step / sus);
        if (c->covs[vi] < 1.0)
          printf("%-22s %4d %8lld %6.4g   reuse: %.1f us a step over the last selection (no estimate or select)\n", info.name,
                 B, (long long)C, c->covs[vi], reuse);
        fflush(stdout);
        char selj[32] = "null", reusej[32] = "null";
        if (c->covs[vi] < 1.0) snprintf(selj, sizeof selj, "%.2f", est + sel), snprintf(reusej, sizeof reusej, "%.2f", reuse);
        if (c->jf)
          fprintf(c->jf,
                  "%s  {\"spec\": \"%s\", \"n_head\": %d, \"k_type\": \"%s\", \"v_type\": \"%s\", \"batch\": %d, \"ctx\": %lld, "
                  "\"coverage\": %g, \"qgen_us\": %.2f, \"select_us\": %s, \"estimate_us\": %.2f, \"attend_us\": %.2f, "
                  "\"eager_us\": %.2f, \"dense_us\": %.2f, \"stream_us\": %.2f, \"floor_us\": %.2f, \"bytes\": %.0f, \"gbps\": %.1f, "
                  "\"splits\": %d, \"append_tok_s\": %.4g, \"reuse_us\": %s, \"tune\": \"%s\"}",
                  c->rows ? ",\n" : "", info.name, L->n_head, info.k_type, info.v_type, B, (long long)C, c->covs[vi], step,
                  selj, est, att, eager, isnan(dense_us) ? step : dense_us, sus, floor_us,
                  bytes, bytes / step / 1e3, qgen_ext_max_splits(ctx, B), (double)C * B / (fill_ms * 1e-3), reusej, c->tune);
        c->rows++;
      }
      for (int r = 0; r < R; r++) qgen_cache_destroy(kv[r]);
      free(kv);
      free(seq);
      free(nn);
      b->cu->cuMemFree(dq);
      b->cu->cuMemFree(dout);
      printf("%-22s %4d %8lld   append: %.3g tokens/s filling in %d-token chunks per sequence\n", info.name, B,
             (long long)C, (double)C * B / (fill_ms * 1e-3), (int)(chunk / B));
    }
  free(t);
  b->cu->cuEventDestroy(e0);
  b->cu->cuEventDestroy(e1);
  b->cu->cuEventDestroy(marks[0]);
  b->cu->cuEventDestroy(marks[1]);
  b->cu->cuStreamDestroy(cs);
  b->cu->cuMemFree(dk);
  b->cu->cuMemFree(dv);
}

int qgen_bench_main(int argc, char **argv) {
  const char *spec = NULL, *variant = NULL, *json = NULL;
  double ctxs[32] = {16384, 131072}, batches[16] = {1}, covs[16] = {1, 0.25}, mem_gib = 100, v_tau = -1;
  int nctx = 2, nb = 1, ncov = 2, runs = 50, warmup = 10, jit = 0;
  const qgen_opt opts[] = {
      {.name = "--spec", .arg = "FILE", .kind = QGEN_OPT_STR, .dst = &spec},
      {.name = "--variant", .arg = "LIST", .kind = QGEN_OPT_STR, .dst = &variant,
       .help = "variants to time, one after another in this process (default the first)"},
      {.name = "--ctx", .arg = "LIST", .kind = QGEN_OPT_NUMS, .dst = ctxs, .count = &nctx, .max = 32,
       .lo = 1, .hi = INT32_MAX, .help = "default 16K,128K"},
      {.name = "--batch", .arg = "LIST", .kind = QGEN_OPT_NUMS, .dst = batches, .count = &nb, .max = 16,
       .lo = 1, .hi = 65536, .help = "default 1"},
      {.name = "--coverage", .arg = "LIST", .kind = QGEN_OPT_NUMS, .dst = covs, .count = &ncov, .max = 16,
       .lo = 0, .hi = 1, .open_lo = 1, .help = "default 1,0.25 (sparse rows need a sparse spec)"},
      {.name = "--runs", .arg = "N", .kind = QGEN_OPT_INT, .dst = &runs, .lo = 1, .hi = 1000000,
       .help = "timed steps per cell (median reported), default 50"},
      {.name = "--warmup", .arg = "N", .kind = QGEN_OPT_INT, .dst = &warmup, .lo = 0, .hi = 1000000,
       .help = "untimed steps first, default 10"},
      {.name = "--json", .arg = "FILE", .kind = QGEN_OPT_STR, .dst = &json, .help = "write the rows as a JSON array"},
      {.name = "--jit", .kind = QGEN_OPT_FLAG, .dst = &jit,
       .help = "also time a cold qgen_open (empty cache), a warm one, and a warm one\n"
               "with the device's context already held (as an engine holds it)"},
      {.name = "--v-tau", .arg = "X", .kind = QGEN_OPT_DOUBLE, .dst = &v_tau, .lo = 0, .hi = 1,
       .help = "sparse-V threshold in [0, 1] (spec sparse.v_tau; default the spec's)"},
      {.name = "--mem-gib", .arg = "N", .kind = QGEN_OPT_DOUBLE, .dst = &mem_gib, .lo = 0, .hi = 1e9, .open_lo = 1,
       .help = "skip cells whose caches need more than N GiB (default 100)"},
      {0}};
  const qgen_cmd cmd = {"bench", BENCH_SYNOPSIS, NULL, 20, opts};
  const int done = qgen_opts_parse(&cmd, argc, argv, NULL, 0, NULL);
  if (done >= 0) return done;
  if (!spec) {
    fprintf(stderr, "qgen: bench: --spec FILE is required (see qgen bench --help)\n");
    return 1;
  }
  /* the arguments, before looking for a GPU */
  char why[4400];
  const char *names[BENCH_MAX_VARIANTS] = {NULL};
  char vbuf[1024];
  int nv = 1;
  names[0] = variant; /* NULL (the first) or "" (refused as every command refuses it) */
  if (variant && *variant) {
    qgen_fmt(vbuf, sizeof vbuf, "%s", variant);
    if ((nv = qgen_opts_split(vbuf, names, BENCH_MAX_VARIANTS)) < 1) {
      fprintf(stderr, "qgen: bench: --variant: 1 to %d distinct, non-empty names expected (see qgen bench --help)\n",
              BENCH_MAX_VARIANTS);
      return 1;
    }
  }
  for (int i = 0; i < nv; i++)
    if (qgen_opts_variant(spec, names[i]) != 0) return 1;
  if (json && qgen_dir_writable(json, why, sizeof why) != 0) {
    fprintf(stderr, "qgen: bench: --json %s\n", why);
    return 1;
  }
  int rc = json ? qgen_opts_not_input("bench", "--json", json, spec) : 0;
  if (rc != 0) return rc;
  for (int i = 0; i < nv && jit && rc == 0; i++) rc = cmd_jit(spec, names[i]);
  if (rc != 0) return rc;
  qgen_ctx *ctxv[BENCH_MAX_VARIANTS] = {NULL};
  for (int i = 0; i < nv && rc == 0; i++) {
    qgen_open_opts o = {QGEN_BACKEND_GPU, 0, names[i], NULL};
    if ((rc = open_spec(&ctxv[i], spec, &o, v_tau)) != 0) ctxv[i] = NULL;
    for (int k = 0; k < ncov && rc == 0; k++)
      if (covs[k] < 1.0 && !qgen_ext_layout(ctxv[i])->sparse) {
        qgen_info vi;
        qgen_get_info(ctxv[i], &vi);
        fprintf(stderr, "qgen: bench: coverage %g needs a sparse spec (variant %s is dense)\n", covs[k], vi.name);
        rc = 1;
      }
  }
  if (rc != 0) {
    for (int i = 0; i < nv; i++) qgen_close(ctxv[i]);
    return rc;
  }
  qgen_info info;
  qgen_get_info(ctxv[0], &info);
  benv b = {qgen_cudrv_get(NULL), 0, 0, 0, info.sm_count};
  setup_stream(&b);
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) {
    fprintf(stderr, "qgen: bench: cannot write %s: %s\n", json, strerror(errno));
    for (int i = 0; i < nv; i++) qgen_close(ctxv[i]);
    return QGEN_EXIT_WRITE;
  }
  if (jf) fprintf(jf, "[\n");
  const char *tune = getenv("QGEN_TUNE") ? getenv("QGEN_TUNE") : ""; /* validated by main */
  printf("%-22s %4s %8s %6s | %9s %9s %9s %9s %9s | %9s %9s %8s %8s\n", "spec", "B", "ctx", "cov", "step_us", "est_us",
         "sel_us", "attend_us", "eager_us", "stream_us", "floor_us", "GB/s", "x_stream");

  bcfg c = {ctxs, batches, covs, nctx, nb, ncov, runs, warmup, mem_gib, jf, 0, tune};
  for (int i = 0; i < nv; i++) bench_variant(&b, ctxv[i], &c);
  if (jf) {
    fprintf(jf, "\n]\n");
    rc = qgen_opts_close_output("bench", jf, json);
  }
  for (int i = 0; i < nv; i++) qgen_close(ctxv[i]);
  return rc;
}
