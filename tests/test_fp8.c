/* test_fp8.c — fp8 KV caches (e4m3, e5m2) on the CPU backend, through the public API.
 *
 *   1. For (k, v) pairs mixing fp8 with f16 / q8_0 and with each other, per-tensor scales
 *      != 1 (K's putting values in the subnormals, V's saturating e4m3): the K and V pools
 *      hold exactly fp8(x / scale) (base/qtypes.c's conversion, tested exhaustively by
 *      test_quant) at the rows the layout gives, other types their own encoding, and a dense
 *      attend equals a softmax computed here in double over code * scale. A sparse attend
 *      whose budget covers every page equals the dense one bit for bit.
 *   2. qgen_cache_set_scales refuses a scale != 1 on a type without one, and 0, negative,
 *      infinite and NaN scales, with a message naming the function, changing nothing.
 *   3. The spec names: e4m3 / e5m2 are KV types, not input/output types; a near miss is
 *      pointed at the right name.
 * Prints one line per check and "N passed, N failed".
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/layout.h"
#include "base/qtypes.h"
#include "base/rng.h"
#include "runtime/qgen.h"
#include "runtime/qgen_ext.h"

#include "testlib.h"

enum { D = 64, NH = 4, NKV = 2, BLOCK = 32, NSEQ = 2, LEN = 100 };
static const float K_SCALE = 0.3f, V_SCALE = 1.0f / 160.0f;

static uint64_t rng = 0x243f6a8885a308d3ull;
/* Roughly normal (a sum of four uniforms), sigma 1: tails reach V's saturation. */
static float gauss(void) {
  double s = 0;
  for (int i = 0; i < 4; i++) s += qgen_rng_signed(&rng);
  return (float)(s * 0.8660254037844386);
}

static qgen_ctx *open_spec(const char *k, const char *v, const char *in_type) {
  char text[512];
  snprintf(text, sizeof text,
           "return spec{ name = 'fp8-%s-%s', head_dim = %d, n_head = %d, n_head_kv = %d, k_type = '%s', v_type = '%s',"
           " in_type = '%s', out_type = 'f32', sparse = { block = %d, coverage = 0.5 } }",
           k, v, D, NH, NKV, k, v, in_type, BLOCK);
  qgen_open_opts o = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  qgen_ctx *c = NULL;
  const qgen_status st = qgen_open_text(&c, text, "<fp8>", &o);
  if (st != QGEN_OK) {
    printf("     open %s/%s: %s\n", k, v, qgen_error(c));
    qgen_close(c);
    return NULL;
  }
  return c;
}

/* Row (seq, t, h) of the K (which = 0) or V pool: sequence s owns pages s*pps.. at creation. */
static const uint8_t *pool_row(const qgen_layout *L, const uint8_t *pool, int which, int64_t pps, int s, int t, int h) {
  const size_t page_bytes = which ? L->v_page_bytes : L->k_page_bytes, row = which ? L->v_row_bytes : L->k_row_bytes;
  return pool + (size_t)(s * pps + t / BLOCK) * page_bytes + ((size_t)h * BLOCK + (size_t)(t % BLOCK)) * row;
}

static void check_pair(const char *kn, const char *vn) {
  qgen_ctx *c = open_spec(kn, vn, "f32");
  check(c != NULL, "%s/%s: spec opens on the CPU backend", kn, vn);
  if (!c) return;
  const qgen_layout *L = qgen_ext_layout(c);
  const qgen_type kt = L->k_type, vt = L->v_type;
  const qgen_type_traits *tk = qgen_type_traits_of(kt), *tv = qgen_type_traits_of(vt);
  const float ks = tk->tensor_scale ? K_SCALE : 1.0f, vs = tv->tensor_scale ? V_SCALE : 1.0f;
  qgen_kv *kv = NULL;
  check(qgen_cache_create(c, &kv, NSEQ, LEN) == QGEN_OK && qgen_cache_set_scales(kv, ks, vs) == QGEN_OK,
        "%s/%s: cache with scales k %g, v %g", kn, vn, ks, vs);
  if (!kv) {
    qgen_close(c);
    return;
  }
  const size_t n = (size_t)NSEQ * LEN * NKV * D;
  float *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++) k[i] = gauss(), v[i] = gauss();
  int seq[NSEQ] = {0, 1}, nn[NSEQ] = {LEN, LEN};
  check(qgen_append(kv, seq, NSEQ, nn, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL) == QGEN_OK, "%s/%s: append",
        kn, vn);

  /* 1a. the pools' bytes */
  const int64_t pps = qgen_kv_pages_per_seq(kv);
  const size_t kb = qgen_kv_size(kv, QGEN_KV_K), vb = qgen_kv_size(kv, QGEN_KV_V);
  uint8_t *kp = malloc(kb), *vp = malloc(vb), *want = malloc(L->k_row_bytes + L->v_row_bytes);
  qgen_kv_read(kv, QGEN_KV_K, kp, kb);
  qgen_kv_read(kv, QGEN_KV_V, vp, vb);
  int bad = 0, sat = 0, sub = 0;
  float x[D];
  for (int s = 0; s < NSEQ; s++)
    for (int t = 0; t < LEN; t++)
      for (int h = 0; h < NKV; h++)
        for (int w = 0; w < 2; w++) {
          const float *src = (w ? v : k) + (((size_t)s * LEN + t) * NKV + h) * D;
          const qgen_type_traits *tr = w ? tv : tk;
          const float sc = w ? vs : ks;
          for (int d = 0; d < D; d++) x[d] = src[d] / sc;
          const int e4 = (w ? vt : kt) == QGEN_TYPE_E4M3;
          if (tr->tensor_scale)
            for (int d = 0; d < D; d++) {
              const uint8_t code = e4 ? qgen_f32_to_e4m3(x[d]) : qgen_f32_to_e5m2(x[d]);
              want[d] = code;
              sat += e4 && (code & 0x7f) == 0x7e;
              sub += e4 && (code & 0x78) == 0 && (code & 7);
            }
          else
            tr->from_f32(x, want, D);
          const size_t rb = w ? L->v_row_bytes : L->k_row_bytes;
          bad += memcmp(pool_row(L, w ? vp : kp, w, pps, s, t, h), want, rb) != 0;
        }
  check(bad == 0, "%s/%s: K and V pools hold fp8(x / scale) (other types their encoding): %d rows differ; "
        "%d e4m3 codes saturated, %d subnormal", kn, vn, bad, sat, sub);

  /* 1b. dense attend against a softmax in double over code * scale */
  float *q = malloc((size_t)NSEQ * NH * D * sizeof *q), *out = malloc((size_t)NSEQ * NH * D * sizeof *out);
  float *out2 = malloc((size_t)NSEQ * NH * D * sizeof *out2);
  for (int i = 0; i < NSEQ * NH * D; i++) q[i] = gauss();
  qgen_attend_opts dense = qgen_attend_defaults(c), full = dense;
  dense.mode = QGEN_ATTEND_DENSE;
  full.coverage = 1.0;
  check(qgen_attend(kv, seq, NSEQ, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)out, &dense, NULL) == QGEN_OK &&
            qgen_attend(kv, seq, NSEQ, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)out2, &full, NULL) == QGEN_OK,
        "%s/%s: dense and full-coverage sparse attend", kn, vn);
  double err = 0;
  float krow[D], vrow[D];
  static double sc[LEN], o[D];
  for (int s = 0; s < NSEQ; s++)
    for (int hq = 0; hq < NH; hq++) {
      const int h = hq / (NH / NKV);
      const float *qq = q + ((size_t)s * NH + hq) * D;
      double mx = -INFINITY, sum = 0;
      for (int t = 0; t < LEN; t++) {
        tk->to_f32(pool_row(L, kp, 0, pps, s, t, h), krow, D);
        double dot = 0;
        for (int d = 0; d < D; d++) dot += (double)qq[d] * ((double)krow[d] * ks);
        sc[t] = dot * L->scale;
        if (sc[t] > mx) mx = sc[t];
      }
      memset(o, 0, sizeof o);
      for (int t = 0; t < LEN; t++) {
        tv->to_f32(pool_row(L, vp, 1, pps, s, t, h), vrow, D);
        const double p = exp(sc[t] - mx);
        sum += p;
        for (int d = 0; d < D; d++) o[d] += p * ((double)vrow[d] * vs);
      }
      for (int d = 0; d < D; d++) {
        const double e = fabs(out[((size_t)s * NH + hq) * D + d] - o[d] / sum) / (fabs(o[d] / sum) + 1e-3);
        if (!(e <= err)) err = e;
      }
    }
  check(err < 1e-5, "%s/%s: dense attend == softmax over code * scale here (max rel err %.2e)", kn, vn, err);
  check(memcmp(out, out2, (size_t)NSEQ * NH * D * sizeof *out) == 0, "%s/%s: sparse at full coverage == dense, bit for bit",
        kn, vn);

  free(k), free(v), free(kp), free(vp), free(want), free(q), free(out), free(out2);
  qgen_cache_destroy(kv);
  qgen_close(c);
}

static void check_refusals(void) {
  qgen_ctx *c = open_spec("e4m3", "f16", "f16");
  qgen_kv *kv = NULL;
  if (!c || qgen_cache_create(c, &kv, 1, 64) != QGEN_OK) {
    check(0, "refusals: e4m3/f16 cache");
    qgen_close(c);
    return;
  }
  const float bad_k[] = {0.0f, -1.0f, INFINITY, NAN};
  int ok = 1;
  for (int i = 0; i < 4; i++)
    ok &= qgen_cache_set_scales(kv, bad_k[i], 1.0f) == QGEN_ERR_INVALID_ARG && strstr(qgen_error(c), "qgen_cache_set_scales") &&
          strstr(qgen_error(c), "finite number > 0");
  check(ok, "k_scale 0, -1, inf, NaN refused (\"%s\")", qgen_error(c));
  check(qgen_cache_set_scales(kv, 2.0f, 0.5f) == QGEN_ERR_INVALID_ARG && strstr(qgen_error(c), "only fp8 caches"),
        "v_scale 0.5 on an f16 V cache refused (\"%s\")", qgen_error(c));
  check(qgen_cache_set_scales(kv, 2.0f, 1.0f) == QGEN_OK && qgen_ext_host_cache(kv)->k_scale == 2.0f &&
            qgen_cache_set_scales(kv, 3.0f, -1.0f) == QGEN_ERR_INVALID_ARG && qgen_ext_host_cache(kv)->k_scale == 2.0f,
        "a scale of 1 on f16 is taken; a failed call changes neither scale");
  check(qgen_cache_set_scales(NULL, 1.0f, 1.0f) == QGEN_ERR_INVALID_ARG, "NULL cache refused");
  qgen_cache_destroy(kv);
  qgen_close(c);
}

static void check_names(void) {
  qgen_open_opts o = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  qgen_ctx *c = NULL;
  qgen_status st = qgen_open_text(&c, "return spec{ name = 'x', head_dim = 64, n_head = 2, n_head_kv = 2, k_type = 'e4m3fn' }",
                                  NULL, &o);
  check(st == QGEN_ERR_SPEC && strstr(qgen_error(c), "did you mean \"e4m3\"") && strstr(qgen_error(c), "e5m2"),
        "k_type 'e4m3fn': a spec error pointing at e4m3 (\"%s\")", qgen_error(c));
  qgen_close(c);
  c = NULL;
  st = qgen_open_text(&c, "return spec{ name = 'x', head_dim = 64, n_head = 2, n_head_kv = 2, in_type = 'e4m3' }", NULL, &o);
  check(st == QGEN_ERR_SPEC && strstr(qgen_error(c), "not an input/output type"), "in_type 'e4m3' refused (\"%s\")",
        qgen_error(c));
  qgen_close(c);
}

int main(void) {
  static const char *const pairs[][2] = {{"e4m3", "e5m2"}, {"e5m2", "q8_0"}, {"f16", "e4m3"}, {"e4m3", "e4m3"}, {"q4_0", "e5m2"}};
  for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) check_pair(pairs[i][0], pairs[i][1]);
  check_refusals();
  check_names();
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
