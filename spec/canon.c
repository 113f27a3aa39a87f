/* canon.c — a spec written back as text: canonical Lua source and the names of its
 * specialization (see spec.h). */
#include "spec/spec.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "spec/spec_int.h"

static const char *type_name(qgen_type t) {
  const qgen_type_traits *tr = qgen_type_traits_of(t);
  return tr ? tr->name : "?";
}

const char *qgen_bounds_name(int bounds) { return bounds == QGEN_BOUNDS_I8 ? "i8" : "f16"; }

const char *qgen_spec_mode(const qgen_spec *s) {
  return !s->sparse ? "dense" : s->bounds == QGEN_BOUNDS_I8 ? "sparse_i8" : "sparse";
}

int qgen_spec_to_lua(const qgen_spec *s, char *buf, size_t n) {
  char scale[40], cov[40], tail[96], two[96] = "";
  size_t o = 0;
  int w;
  if (!s || !buf) return -1;
#define PUT(...)                                                   \
  do {                                                             \
    w = snprintf(buf + o, o < n ? n - o : 0, __VA_ARGS__);         \
    if (w < 0) return -1;                                          \
    o += (size_t)w;                                                \
  } while (0)
  spec_fmt_double(scale, sizeof scale, s->scale);
  PUT("return spec{\n  name = \"%s\",\n  head_dim = %d,\n  n_head = %d,\n  n_head_kv = %d,\n",
      s->name, s->head_dim, s->n_head, s->n_head_kv);
  PUT("  k_type = \"%s\",\n  v_type = \"%s\",\n  in_type = \"%s\",\n  out_type = \"%s\",\n",
      type_name(s->k_type), type_name(s->v_type), type_name(s->in_type), type_name(s->out_type));
  PUT("  scale = %s,\n", scale);
  if (!s->sparse) {
    PUT("  sparse = { enabled = false, block = %d },\n", s->block);
  } else {
    if (s->budget > 0) {
      qgen_fmt(tail, sizeof tail, "budget = %lld", (long long)s->budget);
    } else {
      spec_fmt_double(cov, sizeof cov, s->coverage);
      qgen_fmt(tail, sizeof tail, "coverage = %s", cov);
    }
    /* r = 1 is Quest: written as no rescore, so it names the same module */
    if (s->rescore > 1) {
      char sk[32] = "", tp[48] = "";
      if (!qgen_type_traits_of(s->k_type)->is_quant) qgen_fmt(sk, sizeof sk, ", sketch = \"%s\"", type_name(QGEN_SKETCH_TYPE));
      if (s->top_p < 1) {
        spec_fmt_double(cov, sizeof cov, s->top_p);
        qgen_fmt(tp, sizeof tp, ", top_p = %s", cov);
      }
      qgen_fmt(two, sizeof two, ", rescore = { candidates = %d%s%s }", s->rescore, sk, tp);
    }
    PUT("  sparse = { enabled = true, block = %d, %s, sink = %d, recent = %d, bounds = \"%s\"%s", s->block, tail,
        s->sink, s->recent, qgen_bounds_name(s->bounds), two);
    if (s->v_tau > 0) {
      spec_fmt_double(cov, sizeof cov, s->v_tau);
      PUT(", v_tau = %s", cov);
    }
    PUT(" },\n");
  }
  PUT("  archs = {");
  for (int i = 0; i < s->n_archs && i < QGEN_MAX_ARCHS; i++) PUT("%s\"%s\"", i ? ", " : " ", spec_arch_name(s->archs[i]));
  PUT(" },\n}\n");
#undef PUT
  return o < n ? (int)o : -1;
}

void qgen_spec_uri(const qgen_spec *s, int form, char *buf, size_t n) {
  if (!buf || !n) return;
  char head[QGEN_NAME_MAX + 2] = "", scale[40] = "", two[48] = "", vt[32] = "";
  if (form == QGEN_URI_FILE) qgen_fmt(head, sizeof head, "%s_", s->name);
  else qgen_fmt(scale, sizeof scale, "_s%.9g", (double)(float)s->scale); /* the kernels' f32 constant */
  /* two-stage selection has kernels of its own; r = 1 is Quest, the one-stage module */
  if (s->sparse && s->rescore > 1 && s->top_p < 1) qgen_fmt(two, sizeof two, "_r%d_p%.9g", s->rescore, s->top_p);
  else if (s->sparse && s->rescore > 1) qgen_fmt(two, sizeof two, "_r%d", s->rescore);
  if (s->v_tau > 0) qgen_fmt(vt, sizeof vt, "_vt%.9g", s->v_tau);
  qgen_fmt(buf, n, "%sd%d_h%d_g%d_k%s_v%s_i%s_o%s_b%d%s_%s%s%s", head, s->head_dim, s->n_head,
           s->n_head_kv > 0 ? s->n_head / s->n_head_kv : 0, type_name(s->k_type), type_name(s->v_type),
           type_name(s->in_type), type_name(s->out_type), s->block, scale, qgen_spec_mode(s), two, vt);
}
