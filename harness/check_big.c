/* check_big.c — `qgen check --big`: one sequence whose K cache exceeds 4 GiB, dense and
 * sparse, against a streaming fp64 reference over the same generated data (the data is a
 * function of its index, so nothing that size is held on the host).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "harness/check_int.h"
#include "base/util.h"

/* Values of the big sequence are generated, not stored: element (t, h, d) of K (which 0) or
   V (1) is f16(check_gauss_at(seed + which, (t * n_kv + h) * D + d)). */
typedef struct {
  const qgen_layout *L;
  uint64_t seed;
  int64_t t0, t1;
  const float *q;            /* [n_head][D], f16-exact */
  const int *const *lists;   /* per KV head, or NULL = every page */
  const int *counts;
  int64_t len;
  double *m, *l, *o;         /* per query head: running max, sum, [D] accumulator */
  /* sparse scoring */
  double *scores;            /* [n_kv][n_pages], filled for pages in [t0/B, t1/B) */
} big_job;

static float big_val(const qgen_layout *L, uint64_t seed, int which, int64_t t, int h, int d) {
  return qgen_f16_to_f32(qgen_f32_to_f16(check_gauss_at(seed + (uint64_t)which, ((uint64_t)t * L->n_head_kv + h) * L->head_dim + d)));
}

static void *big_scores(void *arg) { /* Quest scores of whole pages [t0/B, t1/B) */
  big_job *j = arg;
  const qgen_layout *L = j->L;
  const int B = L->block, D = L->head_dim;
  const int64_t n = qgen_pages_of(j->len, B);
  double *mn = malloc(sizeof(double) * D), *mx = malloc(sizeof(double) * D);
  uint16_t *bnd = malloc(sizeof(uint16_t) * 2 * D), so[2];
  uint8_t *codes = malloc((size_t)2 * D);
  for (int64_t p = j->t0 / B; p < j->t1 / B && p < n; p++)
    for (int h = 0; h < L->n_head_kv; h++) {
      for (int d = 0; d < D; d++) mn[d] = INFINITY, mx[d] = -INFINITY;
      for (int64_t t = p * B; t < (p + 1) * B && t < j->len; t++)
        for (int d = 0; d < D; d++) {
          float x = big_val(L, j->seed, 0, t, h, d);
          if (x < mn[d]) mn[d] = x;
          if (x > mx[d]) mx[d] = x;
        }
      if (L->bounds_i8) { /* the keys are f16 values, so these are the f16 bounds */
        for (int d = 0; d < D; d++) bnd[d] = qgen_f32_to_f16((float)mn[d]), bnd[D + d] = qgen_f32_to_f16((float)mx[d]);
        qgen_ref_bounds_i8(bnd, D, so, codes); /* finite: N(0,1) keys */
        qgen_ref_bounds_i8_decode(so, codes, D, mn, mx);
      }
      double best = -INFINITY;
      for (int g = 0; g < L->group; g++) {
        double s = 0;
        for (int d = 0; d < D; d++) {
          double qv = j->q[(h * L->group + g) * D + d];
          s += qv > 0 ? qv * mx[d] : qv < 0 ? qv * mn[d] : 0;
        }
        if (g == 0 || s > best) best = s;
      }
      j->scores[h * n + p] = best;
    }
  free(mn);
  free(mx);
  free(bnd);
  free(codes);
  return NULL;
}

static void *big_attend(void *arg) { /* online fp64 softmax over tokens [t0, t1) of the listed pages */
  big_job *j = arg;
  const qgen_layout *L = j->L;
  const int D = L->head_dim;
  float *k = malloc(sizeof(float) * D), *v = malloc(sizeof(float) * D);
  uint8_t **on = malloc(sizeof(uint8_t *) * L->n_head_kv);
  const int64_t n = qgen_pages_of(j->len, L->block);
  for (int h = 0; h < L->n_head_kv; h++) {
    on[h] = calloc((size_t)n, 1);
    for (int i = 0; i < (j->lists ? j->counts[h] : n); i++) on[h][j->lists ? j->lists[h][i] : i] = 1;
  }
  for (int64_t t = j->t0; t < j->t1; t++)
    for (int h = 0; h < L->n_head_kv; h++) {
      if (!on[h][t / L->block]) continue;
      for (int d = 0; d < D; d++) k[d] = big_val(L, j->seed, 0, t, h, d), v[d] = big_val(L, j->seed, 1, t, h, d);
      for (int g = 0; g < L->group; g++) {
        const int hq = h * L->group + g;
        double s = 0;
        for (int d = 0; d < D; d++) s += (double)j->q[hq * D + d] * k[d];
        s *= L->scale;
        double *o = j->o + (int64_t)hq * D;
        if (s > j->m[hq]) {
          double f = exp(j->m[hq] - s);
          j->l[hq] *= f;
          for (int d = 0; d < D; d++) o[d] *= f;
          j->m[hq] = s;
        }
        double p = exp(s - j->m[hq]);
        j->l[hq] += p;
        for (int d = 0; d < D; d++) o[d] += p * v[d];
      }
    }
  for (int h = 0; h < L->n_head_kv; h++) free(on[h]);
  free(on);
  free(k);
  free(v);
  return NULL;
}

#define BIG_THREADS 16

/* Elements [i0, i1) of a chunk of the big sequence (element 0 = global index base). */
typedef struct {
  uint64_t seed, base;
  size_t i0, i1;
  uint16_t *k, *v;
} gen_job;
static void *gen_f16(void *arg) {
  gen_job *j = arg;
  for (size_t i = j->i0; i < j->i1; i++) {
    j->k[i] = qgen_f32_to_f16(check_gauss_at(j->seed, j->base + i));
    j->v[i] = qgen_f32_to_f16(check_gauss_at(j->seed + 1, j->base + i));
  }
  return NULL;
}

/* Streaming fp64 attention of the whole generated sequence (lists NULL = dense). */
static void big_reference(const qgen_layout *L, uint64_t seed, int64_t len, const float *q, const int *const *lists,
                          const int *counts, double *out) {
  big_job jobs[BIG_THREADS];
  pthread_t th[BIG_THREADS];
  const int NH = L->n_head, D = L->head_dim;
  const int64_t per = (len + BIG_THREADS - 1) / BIG_THREADS;
  for (int i = 0; i < BIG_THREADS; i++) {
    big_job *j = &jobs[i];
    *j = (big_job){L, seed, i * per, (i + 1) * per < len ? (i + 1) * per : len, q, lists, counts, len, NULL, NULL, NULL, NULL};
    j->m = malloc(sizeof(double) * NH);
    j->l = calloc((size_t)NH, sizeof(double));
    j->o = calloc((size_t)NH * D, sizeof(double));
    for (int h = 0; h < NH; h++) j->m[h] = -INFINITY;
    pthread_create(&th[i], NULL, big_attend, j);
  }
  for (int i = 0; i < BIG_THREADS; i++) pthread_join(th[i], NULL);
  for (int hq = 0; hq < NH; hq++) {
    double m = -INFINITY, l = 0;
    for (int i = 0; i < BIG_THREADS; i++) if (jobs[i].m[hq] > m) m = jobs[i].m[hq];
    for (int d = 0; d < D; d++) out[hq * D + d] = 0;
    for (int i = 0; i < BIG_THREADS; i++) {
      if (jobs[i].m[hq] == -INFINITY) continue;
      double f = exp(jobs[i].m[hq] - m);
      l += f * jobs[i].l[hq];
      for (int d = 0; d < D; d++) out[hq * D + d] += f * jobs[i].o[(int64_t)hq * D + d];
    }
    for (int d = 0; d < D; d++) out[hq * D + d] /= l;
  }
  for (int i = 0; i < BIG_THREADS; i++) free(jobs[i].m), free(jobs[i].l), free(jobs[i].o);
}

/* Append the len generated tokens to kv in chunks (generated on BIG_THREADS threads), and
   say how long it took. */
static void big_append(env *e, qgen_ctx *gc, qgen_kv *kv, uint64_t seed, int64_t len) {
  const qgen_layout *L = qgen_ext_layout(gc);
  const int64_t per_token = (int64_t)L->n_head_kv * (int64_t)L->k_row_bytes;
  const int64_t chunk = 32768;
  const size_t rowb = (size_t)L->n_head_kv * L->in_row_bytes;
  uint16_t *hk = malloc((size_t)chunk * rowb), *hv = malloc((size_t)chunk * rowb);
  CUdeviceptr dk = check_dalloc(e, (size_t)chunk * rowb), dv = check_dalloc(e, (size_t)chunk * rowb);
  double t0 = qgen_now_ms();
  for (int64_t s = 0; s < len; s += chunk) {
    const int64_t nt = len - s < chunk ? len - s : chunk;
    gen_job gj[BIG_THREADS];
    pthread_t gt[BIG_THREADS];
    const size_t nv = (size_t)nt * L->n_head_kv * L->head_dim, per = (nv + BIG_THREADS - 1) / BIG_THREADS;
    for (int i = 0; i < BIG_THREADS; i++) {
      gj[i] = (gen_job){seed, (uint64_t)s * L->n_head_kv * L->head_dim, i * per, (i + 1) * per < nv ? (i + 1) * per : nv, hk, hv};
      pthread_create(&gt[i], NULL, gen_f16, &gj[i]);
    }
    for (int i = 0; i < BIG_THREADS; i++) pthread_join(gt[i], NULL);
    check_upload(e, dk, hk, (size_t)nt * rowb);
    check_upload(e, dv, hv, (size_t)nt * rowb);
    int zero = 0, n = (int)nt;
    API(qgen_append(kv, &zero, 1, &n, dk, dv, NULL));
  }
  printf("        big      appended %lld tokens (K cache %.2f GiB) in %.1f s\n", (long long)len,
         (double)len * per_token / (1u << 30), (qgen_now_ms() - t0) / 1e3);
  free(hk);
  free(hv);
  e->cu->cuMemFree(dk);
  e->cu->cuMemFree(dv);
}

/* The sparse step of kv (the query dq, qf as f32) into out: its lists against the reference
   selection over the streamed Quest scores, its output against the streamed reference
   attention over the GPU's lists (ref receives it). */
static void big_sparse(env *e, qgen_ctx *gc, qgen_kv *kv, uint64_t seed, int64_t len, const float *qf, CUdeviceptr dq,
                       CUdeviceptr dout, uint8_t *out, double *ref) {
  const qgen_layout *L = qgen_ext_layout(gc);
  const int NH = L->n_head, D = L->head_dim;
  int zero = 0;
  qgen_attend_opts os = qgen_attend_defaults(gc);
  check_poison(e, dout, L->out_bytes);
  API(qgen_attend(kv, &zero, 1, dq, dout, &os, NULL));
  check_download(e, out, dout, L->out_bytes);
  const int64_t pps = qgen_kv_pages_per_seq(kv), n = qgen_pages_of(len, L->block);
  int *lists = malloc(sizeof(int) * (size_t)(L->n_head_kv * pps)), *counts = malloc(sizeof(int) * L->n_head_kv);
  API(qgen_kv_selection(kv, 0, lists, counts));
  /* reference scores, threaded by page ranges */
  double *scores = malloc(sizeof(double) * (size_t)(n * L->n_head_kv));
  big_job jobs[BIG_THREADS];
  pthread_t th[BIG_THREADS];
  const int64_t per = (n + BIG_THREADS - 1) / BIG_THREADS * L->block;
  for (int i = 0; i < BIG_THREADS; i++) {
    jobs[i] = (big_job){L, seed, i * per, (i + 1) * per, qf, NULL, NULL, len, NULL, NULL, NULL, scores};
    pthread_create(&th[i], NULL, big_scores, &jobs[i]);
  }
  for (int i = 0; i < BIG_THREADS; i++) pthread_join(th[i], NULL);
  qgen_budget bs = {os.budget > 0 ? QGEN_BUDGET_TOKENS : QGEN_BUDGET_COVERAGE, os.coverage, os.budget, os.sink, os.recent};
  int32_t *rl = malloc(sizeof(int32_t) * (size_t)n);
  int differ = 0, bad = 0;
  for (int h = 0; h < L->n_head_kv; h++) {
    int64_t rc = qgen_ref_select(&bs, len, L->block, scores + h * n, rl);
    if (rc != counts[h]) bad = 1;
    for (int64_t i = 0; i < rc && !bad; i++) differ += rl[i] != lists[h * pps + i];
  }
  const int **lp = malloc(sizeof(int *) * L->n_head_kv);
  for (int h = 0; h < L->n_head_kv; h++) lp[h] = lists + h * pps;
  big_reference(L, seed, len, qf, lp, counts, ref);
  free(lp);
  double rs = check_rel_err(L, out, ref, NH * D);
  check_verdict(e, !bad && rs <= check_tolerance(L), "big      sparse  ctx %lld rel err %.2e, %d of %lld list entries differ from the reference (near-ties)",
                (long long)len, rs, differ, (long long)counts[0] * L->n_head_kv);
  free(lists);
  free(counts);
  free(scores);
  free(rl);
}

void check_big(env *e, qgen_ctx *gc, uint64_t seed) {
  const qgen_layout *L = qgen_ext_layout(gc);
  if (L->k_type != QGEN_TYPE_F16 || L->v_type != QGEN_TYPE_F16 || L->in_type != QGEN_TYPE_F16) {
    printf("  skip  big      (needs an f16 spec with f16 inputs)\n");
    return;
  }
  if (L->rescore > 1) { /* its streamed reference ranks by Quest alone */
    printf("  skip  big      (two-stage selection: the checks above cover it)\n");
    return;
  }
  const int64_t per_token = (int64_t)L->n_head_kv * (int64_t)L->k_row_bytes;
  const int64_t len = ((int64_t)1 << 32) / per_token + 12345; /* K cache just over 4 GiB */
  qgen_kv *kv;
  check_new_cache(gc, &kv, 1, len);
  big_append(e, gc, kv, seed, len);
  /* a query that also looks for a planted pattern: the key of the last token */
  const int NH = L->n_head, D = L->head_dim;
  float *qf = malloc(sizeof(float) * NH * D);
  uint16_t *qh = malloc(sizeof(uint16_t) * NH * D);
  for (int hq = 0; hq < NH; hq++)
    for (int d = 0; d < D; d++) {
      float x = 1.5f * check_gauss_at(seed + 7, (uint64_t)hq * D + d) + 0.3f * big_val(L, seed, 0, len - 1, hq / L->group, d);
      qh[hq * D + d] = qgen_f32_to_f16(x);
      qf[hq * D + d] = qgen_f16_to_f32(qh[hq * D + d]);
    }
  CUdeviceptr dq = check_dalloc(e, L->q_bytes), dout = check_dalloc(e, L->out_bytes);
  check_upload(e, dq, qh, L->q_bytes);
  uint8_t *out = malloc(L->out_bytes);
  double *ref = malloc(sizeof(double) * NH * D);
  int zero = 0;
  qgen_attend_opts od = qgen_attend_defaults(gc);
  od.mode = QGEN_ATTEND_DENSE;
  check_poison(e, dout, L->out_bytes);
  API(qgen_attend(kv, &zero, 1, dq, dout, &od, NULL));
  check_download(e, out, dout, L->out_bytes);
  double t0 = qgen_now_ms();
  big_reference(L, seed, len, qf, NULL, NULL, ref);
  double rd = check_rel_err(L, out, ref, NH * D);
  check_verdict(e, rd <= check_tolerance(L), "big      dense   ctx %lld (K cache > 4 GiB) rel err %.2e (reference %.1f s)", (long long)len, rd,
                (qgen_now_ms() - t0) / 1e3);
  if (L->sparse) big_sparse(e, gc, kv, seed, len, qf, dq, dout, out, ref);
  free(qf);
  free(qh);
  free(out);
  free(ref);
  e->cu->cuMemFree(dq);
  e->cu->cuMemFree(dout);
  qgen_cache_destroy(kv);
}
