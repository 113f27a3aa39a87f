/* emit.c — see emit.h. */
#include "jit/emit.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kargs.h"
#include "base/plan.h"
#include "base/util.h"

/* templates_embed.c, from jit/embed.cmake: the base/ headers both compilers read, and the
   templates of templates/LIST in their order, each flagged when only sparse units (1) or
   only two-stage ones (2) have it. */
struct qgen_embedded {
  const char *name, *text;
  size_t len;
  int sparse;
};

/* The units that hold template (or kernel) flag f: 0 all, 1 sparse, 2 two-stage, 3 two-stage
   with a top-p cut. */
static int unit_has(const qgen_spec *s, int f) {
  const int two = s->sparse && s->rescore > 1;
  return f == 0 || (f == 1 && s->sparse) || (f == 2 && two) || (f == 3 && two && s->top_p < 1);
}
extern const struct qgen_embedded qgen_headers[], qgen_templates[];

/* The kernels of each kind of unit: IN_<unit>_<kernel's units>(k) names k or nothing. */
#define NAMED(k) QGEN_KERNEL_NAME(k),
#define UNNAMED(k)
#define IN_DENSE_ALL NAMED
#define IN_DENSE_SPARSE UNNAMED
#define IN_DENSE_RESCORE UNNAMED
#define IN_DENSE_TOPP UNNAMED
#define IN_DENSE_QUEST UNNAMED
#define IN_SPARSE_QUEST NAMED
#define IN_RESCORE_QUEST UNNAMED
#define IN_TOPP_QUEST UNNAMED
#define IN_SPARSE_ALL NAMED
#define IN_SPARSE_SPARSE NAMED
#define IN_SPARSE_RESCORE UNNAMED
#define IN_SPARSE_TOPP UNNAMED
#define IN_RESCORE_ALL NAMED
#define IN_RESCORE_SPARSE NAMED
#define IN_RESCORE_RESCORE NAMED
#define IN_RESCORE_TOPP UNNAMED
#define IN_TOPP_ALL NAMED
#define IN_TOPP_SPARSE NAMED
#define IN_TOPP_RESCORE NAMED
#define IN_TOPP_TOPP NAMED
#define IN_DENSE_UNIT(k, units) IN_DENSE_##units(k)
#define IN_SPARSE_UNIT(k, units) IN_SPARSE_##units(k)
#define IN_RESCORE_UNIT(k, units) IN_RESCORE_##units(k)
#define IN_TOPP_UNIT(k, units) IN_TOPP_##units(k)
/* [0]: the unit's kernels; [1]: the same and qg_combine (a plan with merge_rows) */
static const char *const KERNELS_DENSE[2][10] = {{QGEN_KERNELS(IN_DENSE_UNIT) NULL}, {QGEN_KERNELS(IN_DENSE_UNIT) QGEN_MERGE_KERNEL, NULL}};
static const char *const KERNELS_SPARSE[2][10] = {{QGEN_KERNELS(IN_SPARSE_UNIT) NULL}, {QGEN_KERNELS(IN_SPARSE_UNIT) QGEN_MERGE_KERNEL, NULL}};
static const char *const KERNELS_RESCORE[2][10] = {{QGEN_KERNELS(IN_RESCORE_UNIT) NULL}, {QGEN_KERNELS(IN_RESCORE_UNIT) QGEN_MERGE_KERNEL, NULL}};
static const char *const KERNELS_TOPP[2][10] = {{QGEN_KERNELS(IN_TOPP_UNIT) NULL}, {QGEN_KERNELS(IN_TOPP_UNIT) QGEN_MERGE_KERNEL, NULL}};

const char *const *qgen_kernel_names(const qgen_spec *s, int merge_kernel) {
  const int m = merge_kernel != 0;
  if (!s->sparse) return KERNELS_DENSE[m];
  if (s->rescore < 2) return KERNELS_SPARSE[m];
  return s->top_p < 1 ? KERNELS_TOPP[m] : KERNELS_RESCORE[m];
}

/* A growing string. */
typedef struct {
  char *p;
  size_t n, cap;
  int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) { b->oom = 1; return; }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Append template t: from $QGEN_TEMPLATE_DIR if set, else the embedded copy. */
static int put_template(sbuf *b, const struct qgen_embedded *t, char *err, size_t errlen) {
  const char *dir = getenv("QGEN_TEMPLATE_DIR");
  sb_printf(b, "#line 1 \"templates/%s\"\n", t->name);
  if (dir && *dir) {
    char path[4096];
    size_t n;
    qgen_fmt(path, sizeof path, "%s/%s", dir, t->name);
    char *text = qgen_read_file(path, 4u << 20, &n, err, errlen);
    if (!text) return -1;
    sb_put(b, text, n);
    free(text);
  } else sb_put(b, t->text, t->len);
  sb_put(b, "\n", 1);
  return 0;
}

/* "#define QG_<FIELD> value" for a plan field that is a constant of the unit. */
static void put_plan_field(sbuf *b, const char *field, int value) {
  char up[64];
  size_t i = 0;
  for (; field[i] && i + 1 < sizeof up; i++) up[i] = (char)toupper((unsigned char)field[i]);
  up[i] = 0;
  sb_printf(b, "#define QG_%s %d\n", up, value);
}

/* "#define name xf" for a float of the spec: 9 digits keep every float, and a whole number
   gets ".0" ("1f" is no C++ literal). */
static void put_float(sbuf *b, const char *name, double x) {
  char num[32];
  qgen_fmt(num, sizeof num, "%.9g", x);
  sb_printf(b, "#define %s %s%sf\n", name, num, strpbrk(num, ".e") ? "" : ".0");
}

static const char *device_type(qgen_type t) { return qgen_type_traits_of(t)->device; }

char *qgen_emit_source(const qgen_spec *s, const qgen_arch *A, const qgen_tune *tune, size_t *len, char *err, size_t errlen) {
  qgen_layout L;
  qgen_plan P;
  qgen_spec_layout(s, &L);
  char module[256];
  qgen_spec_uri(s, QGEN_URI_MODULE, module, sizeof module);
  char why[256];
  if (qgen_plan_make(&L, A, tune, &P, why, sizeof why) != 0) {
    qgen_fmt(err, errlen, "%s does not fit %s: %s", module, A->name, why);
    return NULL;
  }

  sbuf b = {0};
  const int step = tune ? tune->step : 0; /* an engine module's query tokens a row (plan.h qgen_tune) */
  sb_printf(&b, "// generated by qgen " QGEN_VERSION " for %s%s — do not edit\n", module, step ? " (engine module)" : "");
  sb_printf(&b, "#define QG_HEAD_DIM %d\n#define QG_N_HEAD %d\n#define QG_N_HEAD_KV %d\n#define QG_HEADS %d\n#define QG_STEP %d\n"
            "#define QG_GROUP %d\n", s->head_dim, s->n_head, s->n_head_kv, L.group, step, L.group * (step > 1 ? step : 1));
  sb_printf(&b, "#define QG_BLOCK %d\n#define QG_SPARSE %d\n", s->block, s->sparse);
  put_float(&b, "QG_SCALE", (double)(float)s->scale);
  sb_printf(&b, "#define QG_BOUNDS_I8 %d\n", L.bounds_i8);
  sb_printf(&b, "#define QG_K_TYPE %s\n#define QG_V_TYPE %s\n#define QG_IN_TYPE %s\n#define QG_OUT_TYPE %s\n",
            device_type(s->k_type), device_type(s->v_type), device_type(s->in_type), device_type(s->out_type));
  sb_printf(&b, "#define QG_K_ROW %zu\n#define QG_V_ROW %zu\n", L.k_row_bytes, L.v_row_bytes);
  if (L.rescore > 1) { /* two-stage: the compact K rescore reads (the sketch, or K itself) and its plan */
    const qgen_type sk = L.sketch_row_bytes ? QGEN_SKETCH_TYPE : s->k_type;
    sb_printf(&b, "#define QG_SKETCH %d\n#define QG_SK_TYPE %s\n#define QG_SK_ROW %zu\n", L.sketch_row_bytes > 0,
              device_type(sk), qgen_type_row_bytes(sk, s->head_dim));
    sb_printf(&b, "#define QG_RESC_THREADS %d\n#define QG_RESC_STAGES %d\n#define QG_RESC_TILE %d\n#define QG_RESC_SMEM %d\n",
              P.resc_threads, P.resc_stages, P.resc_tile, P.resc_smem);
    if (L.top_p < 1) put_float(&b, "QG_TOP_P", L.top_p); /* only in top-p units, with qg_topp */
  }
  if (s->v_tau > 0) put_float(&b, "QG_V_TAU", s->v_tau); /* absent at 0: the same unit as without it */
  sb_printf(&b, "#define QG_SEL_BINS %d\n#define QG_MAX_SPLITS %d\n", QGEN_SEL_BINS, QGEN_MAX_SPLITS);
#define PUT_PLAN_FIELD(field, unit) \
  if (unit) put_plan_field(&b, #field, P.field);
  QGEN_PLAN_FIELDS(PUT_PLAN_FIELD)
#undef PUT_PLAN_FIELD

  for (const struct qgen_embedded *h = qgen_headers; h->name; h++) {
    sb_printf(&b, "#line 1 \"%s\"\n", h->name);
    sb_put(&b, h->text, h->len);
  }
  for (const struct qgen_embedded *t = qgen_templates; t->name; t++)
    if (unit_has(s, t->sparse) && put_template(&b, t, err, errlen) != 0) {
      free(b.p);
      return NULL;
    }
  if (b.oom) {
    free(b.p);
    qgen_fmt(err, errlen, "out of memory emitting %s", module);
    return NULL;
  }
  if (len) *len = b.n;
  return b.p;
}
