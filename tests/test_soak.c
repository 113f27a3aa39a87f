/* test_soak.c — a long decode: one token per sequence per step across 8 ragged sequences
 * (appends + attends, dense and sparse steps alternating, pages filling and crossing; a
 * sequence that reaches its capacity is reset and starts again; every 7th step one sequence
 * rolls back 1 to 3 tokens, as a rejected draft would), with spot checks every
 * few thousand steps and at the end, and no growth in host or device memory.
 *
 *   test_soak [STEPS]    default 20000 (2000 with QGEN_TEST_QUICK); CPU backend
 *   QGEN_TEST_BACKEND=gpu test_soak 1000000   the GPU backend (exit 77 without a GPU)
 *
 * CPU backend: every spot check compares the step's outputs with the fp64 reference of
 * the same cache (ref/ref.h) and its page lists with the reference's. GPU backend: a
 * CPU-backend cache is fed the same tokens, and a spot check attends both: outputs within
 * tolerance, bounds byte-equal, page lists equal. Memory: resident host pages
 * (/proc/self/statm) and free device memory (cuMemGetInfo) after the first spot check and
 * at the end. Prints steps, the max error seen and both memories.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cudrv.h"
#include "base/qtypes.h"
#include "base/rng.h"
#include "ref/ref.h"
#include "runtime/qgen.h"
#include "runtime/qgen_ext.h"

#include "testlib.h"

#define NSEQ 8
#define MAX_TOKENS 400 /* 13 pages of 32: the cycles cross every page boundary */
#define TOL 2e-2       /* f16 output against fp64 (or the GPU against the CPU backend) */

static const char *SPEC = "return spec{ name = \"soak\", head_dim = 64, n_head = 4, n_head_kv = 2,\n"
                          "  sparse = { block = 32, coverage = 0.5, sink = 32, recent = 32 }, archs = { \"sm_90\" } }\n";

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) { return (float)qgen_rng_signed(&rng); } /* uniform in [-1, 1) */

static long host_rss_kib(void) {
  long pages = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
  if (f) fclose(f);
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

typedef struct {
  qgen_backend be;
  qgen_ctx *ctx;
  qgen_kv *kv;
} side;

static int open_side(side *s, qgen_backend be) {
  qgen_open_opts o = {be, 0, NULL, NULL};
  s->be = be;
  qgen_status st = qgen_open_text(&s->ctx, SPEC, "<soak>", &o);
  if (st == QGEN_OK) st = qgen_cache_create(s->ctx, &s->kv, NSEQ, MAX_TOKENS);
  if (st != QGEN_OK) printf("open (%s backend): %s: %s\n", be ? "cpu" : "gpu", qgen_status_str(st), qgen_error(s->ctx));
  return st == QGEN_OK ? 0 : -1;
}

/* Device memory (GPU side) or host addresses (CPU side) for a host buffer. */
typedef struct {
  void *h;
  size_t n;
  CUdeviceptr d;
} buf;

static qgen_ptr ptr(const side *s, buf *b) { return s->be == QGEN_BACKEND_CPU ? (qgen_ptr)(uintptr_t)b->h : b->d; }

int main(int argc, char **argv) {
  const char *bes = getenv("QGEN_TEST_BACKEND");
  const int gpu = bes && !strcmp(bes, "gpu");
  long steps = argc > 1 ? atol(argv[1]) : getenv("QGEN_TEST_QUICK") ? 2000 : 20000;
  if (steps < 1) steps = 1;
  const qgen_cudrv *cu = NULL;
  if (gpu) {
    const char *why = "";
    if (!(cu = qgen_cudrv_get(&why))) {
      printf("test_soak: GPU backend requested: %s — skipped\n", why);
      return 77;
    }
  }
  side main_side = {0}, cpu = {0};
  if (open_side(&main_side, gpu ? QGEN_BACKEND_GPU : QGEN_BACKEND_CPU) != 0 || (gpu && open_side(&cpu, QGEN_BACKEND_CPU) != 0))
    return 1;
  side *ref = gpu ? &cpu : &main_side; /* the cache whose host copy the reference reads */
  const qgen_layout *L = qgen_ext_layout(main_side.ctx);
  const size_t row = (size_t)L->n_head_kv * L->head_dim, qn = (size_t)L->n_head * L->head_dim;
  const long long pps = qgen_kv_pages_per_seq(main_side.kv);
  buf k = {calloc(NSEQ * row, 2), NSEQ * row * 2, 0}, v = {calloc(NSEQ * row, 2), NSEQ * row * 2, 0},
      q = {calloc(NSEQ * qn, 2), NSEQ * qn * 2, 0}, out = {calloc(NSEQ * qn, 2), NSEQ * qn * 2, 0};
  uint16_t *out_cpu = calloc(NSEQ * qn, 2);
  double *f64 = calloc(qn, sizeof *f64);
  int *lists = calloc((size_t)(L->n_head_kv * pps), sizeof(int)), counts[8];
  int *lists2 = calloc((size_t)(L->n_head_kv * pps), sizeof(int)), counts2[8];
  int32_t *rlists = calloc((size_t)(L->n_head_kv * pps), sizeof(int32_t));
  int64_t rcounts[8];
  uint8_t *bnd = NULL, *bnd2 = NULL;
  if (gpu) {
    buf *all[] = {&k, &v, &q, &out};
    for (int i = 0; i < 4; i++)
      if (cu->cuMemAlloc(&all[i]->d, all[i]->n) != CUDA_SUCCESS) return 1;
    bnd = malloc(qgen_kv_size(main_side.kv, QGEN_KV_BOUNDS));
    bnd2 = malloc(qgen_kv_size(cpu.kv, QGEN_KV_BOUNDS));
  }
  const qgen_attend_opts sparse = qgen_attend_defaults(main_side.ctx);
  qgen_attend_opts dense = sparse;
  dense.mode = QGEN_ATTEND_DENSE;
  qgen_budget bsp = {QGEN_BUDGET_COVERAGE, sparse.coverage, 0, sparse.sink, sparse.recent};
  const qgen_budget bdn = {QGEN_BUDGET_DENSE, 0, 0, 0, 0};

  /* ragged: sequence i starts 23 i tokens in, so the sequences fill and reset apart */
  int seqs[NSEQ], ones[NSEQ];
  for (int i = 0; i < NSEQ; i++) seqs[i] = i, ones[i] = 1;
  for (int i = 0; i < NSEQ; i++) {
    int n = 23 * i;
    uint16_t *kk = malloc((size_t)(n ? n : 1) * row * 2), *vv = malloc((size_t)(n ? n : 1) * row * 2);
    for (size_t j = 0; j < (size_t)n * row; j++) kk[j] = qgen_f32_to_f16(frand()), vv[j] = qgen_f32_to_f16(frand());
    buf kb = {kk, (size_t)n * row * 2, 0}, vb = {vv, (size_t)n * row * 2, 0};
    side *sides[2] = {&main_side, gpu ? &cpu : NULL};
    for (int si = 0; si < 2 && sides[si] && n; si++) {
      if (sides[si]->be == QGEN_BACKEND_GPU) {
        cu->cuMemAlloc(&kb.d, kb.n), cu->cuMemAlloc(&vb.d, vb.n);
        cu->cuMemcpyHtoD(kb.d, kk, kb.n), cu->cuMemcpyHtoD(vb.d, vv, vb.n);
      }
      if (qgen_append(sides[si]->kv, &i, 1, &n, ptr(sides[si], &kb), ptr(sides[si], &vb), NULL) != QGEN_OK) return 1;
      if (kb.d) cu->cuCtxSynchronize(), cu->cuMemFree(kb.d), cu->cuMemFree(vb.d), kb.d = vb.d = 0;
    }
    free(kk), free(vv);
  }

  const long every = steps < 4000 ? (steps + 3) / 4 : 2500 + (long)(rng % 1000); /* every few thousand steps */
  long next = every, checks = 0, resets = 0, list_checks = 0, list_diff = 0;
  double max_err = 0;
  long rss0 = 0;
  size_t free0 = 0, total = 0;
  int bad = 0;
  for (long step = 1; step <= steps && !bad; step++) {
    for (int i = 0; i < NSEQ; i++) /* a full sequence starts again */
      if (qgen_seq_len(main_side.kv, i) == MAX_TOKENS) {
        bad |= qgen_reset(main_side.kv, i) != QGEN_OK || (gpu && qgen_reset(cpu.kv, i) != QGEN_OK);
        resets++;
      }
    if (step % 7 == 0) { /* a verify step's rejected tokens */
      const int s = (int)(step / 7 % NSEQ);
      const long long n = 1 + step % 3;
      if (qgen_seq_len(main_side.kv, s) >= n)
        bad |= qgen_rollback(main_side.kv, s, n) != QGEN_OK || (gpu && qgen_rollback(cpu.kv, s, n) != QGEN_OK);
    }
    for (size_t j = 0; j < NSEQ * row; j++) ((uint16_t *)k.h)[j] = qgen_f32_to_f16(frand()), ((uint16_t *)v.h)[j] = qgen_f32_to_f16(frand());
    for (size_t j = 0; j < NSEQ * qn; j++) ((uint16_t *)q.h)[j] = qgen_f32_to_f16(frand());
    if (gpu) cu->cuMemcpyHtoD(k.d, k.h, k.n), cu->cuMemcpyHtoD(v.d, v.h, v.n), cu->cuMemcpyHtoD(q.d, q.h, q.n);
    const int is_sparse = step & 1;
    const qgen_attend_opts *o = is_sparse ? &sparse : &dense;
    qgen_status st = qgen_append(main_side.kv, seqs, NSEQ, ones, ptr(&main_side, &k), ptr(&main_side, &v), NULL);
    if (st == QGEN_OK && gpu) st = qgen_append(cpu.kv, seqs, NSEQ, ones, ptr(&cpu, &k), ptr(&cpu, &v), NULL);
    if (st == QGEN_OK) st = qgen_attend(main_side.kv, seqs, NSEQ, ptr(&main_side, &q), ptr(&main_side, &out), o, NULL);
    if (st != QGEN_OK) {
      check(0, "step %ld: %s: %s", step, qgen_status_str(st), qgen_error(main_side.ctx));
      break;
    }
    if (step != next && step != steps) continue;
    /* a spot check of this step */
    next += every;
    checks++;
    if (gpu) {
      cu->cuCtxSynchronize();
      cu->cuMemcpyDtoH(out.h, out.d, out.n);
      bad |= qgen_attend(cpu.kv, seqs, NSEQ, ptr(&cpu, &q), (qgen_ptr)(uintptr_t)out_cpu, o, NULL) != QGEN_OK;
      bad |= qgen_kv_read(main_side.kv, QGEN_KV_BOUNDS, bnd, qgen_kv_size(main_side.kv, QGEN_KV_BOUNDS)) != QGEN_OK ||
             qgen_kv_read(cpu.kv, QGEN_KV_BOUNDS, bnd2, qgen_kv_size(cpu.kv, QGEN_KV_BOUNDS)) != QGEN_OK;
      if (!bad && memcmp(bnd, bnd2, qgen_kv_size(cpu.kv, QGEN_KV_BOUNDS)) != 0) {
        check(0, "step %ld: the GPU's bounds differ from the CPU backend's", step);
        bad = 1;
      }
    }
    for (int i = 0; i < NSEQ && !bad; i++) {
      const uint16_t *got = (const uint16_t *)out.h + (size_t)i * qn;
      if (gpu) { /* against the CPU backend, and its lists */
        for (size_t j = 0; j < qn; j++) {
          double e = fabs((double)qgen_f16_to_f32(got[j]) - qgen_f16_to_f32(out_cpu[(size_t)i * qn + j]));
          if (e > max_err) max_err = e;
        }
        if (is_sparse) {
          bad |= qgen_kv_selection(main_side.kv, i, lists, counts) != QGEN_OK || qgen_kv_selection(cpu.kv, i, lists2, counts2) != QGEN_OK;
          for (int h = 0; h < L->n_head_kv; h++, list_checks++)
            list_diff += counts[h] != counts2[h] || memcmp(lists + h * pps, lists2 + h * pps, (size_t)counts[h] * sizeof(int)) != 0;
        }
        continue;
      }
      /* CPU backend: the fp64 reference over the same cache */
      qgen_ref_step(L, qgen_ext_host_cache(ref->kv), i, (const uint8_t *)q.h + (size_t)i * L->q_bytes, is_sparse ? &bsp : &bdn,
                    NULL, f64, rlists, rcounts);
      for (size_t j = 0; j < qn; j++) {
        double e = fabs((double)qgen_f16_to_f32(got[j]) - f64[j]);
        if (e > max_err) max_err = e;
      }
      if (is_sparse) {
        bad |= qgen_kv_selection(main_side.kv, i, lists, counts) != QGEN_OK;
        for (int h = 0; h < L->n_head_kv; h++, list_checks++)
          list_diff += counts[h] != rcounts[h] || memcmp(lists + h * pps, rlists + h * pps, (size_t)counts[h] * sizeof(int)) != 0;
      }
    }
    if (checks == 1) { /* the baseline, once everything is allocated and warm */
      rss0 = host_rss_kib();
      if (gpu) cu->cuMemGetInfo(&free0, &total);
    }
  }
  long rss1 = host_rss_kib();
  size_t free1 = 0;
  if (gpu) cu->cuMemGetInfo(&free1, &total);
  printf("soak: %s backend, %ld steps, %d sequences, %ld spot checks, %ld resets; max error %.3g; %ld/%ld lists differ\n",
         gpu ? "GPU" : "CPU", steps, NSEQ, checks, resets, max_err, list_diff, list_checks);
  printf("soak: host resident %ld KiB at the first check, %ld KiB at the end", rss0, rss1);
  if (gpu) printf("; device free %zu MiB then %zu MiB", free0 >> 20, free1 >> 20);
  printf("\n");
  check(!bad && checks >= 2, "every step and spot check ran (%ld checks)", checks);
  check(max_err <= TOL, "outputs within %.0e of the %s (max %.3g)", TOL, gpu ? "CPU backend" : "fp64 reference", max_err);
  check(list_diff == 0, "page lists equal to the %s (%ld of %ld differ)", gpu ? "CPU backend's" : "reference's", list_diff, list_checks);
  check(resets > 0, "sequences filled to capacity and started again (%ld resets)", resets);
  check(rss1 - rss0 <= 1024, "no host memory growth (%+ld KiB)", rss1 - rss0);
  if (gpu) check(free1 == free0, "no device memory growth (%+lld bytes)", (long long)free0 - (long long)free1);
  if (gpu) {
    buf *all[] = {&k, &v, &q, &out};
    for (int i = 0; i < 4; i++) cu->cuMemFree(all[i]->d);
  }
  free(k.h), free(v.h), free(q.h), free(out.h), free(out_cpu), free(f64), free(lists), free(lists2), free(rlists), free(bnd), free(bnd2);
  qgen_cache_destroy(main_side.kv), qgen_close(main_side.ctx);
  if (gpu) qgen_cache_destroy(cpu.kv), qgen_close(cpu.ctx);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
