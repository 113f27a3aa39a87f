/* opts.c — see opts.h. */
#include "tools/opts.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "jit/bundle.h"

static int is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

/* One number of a list at *s, with an optional K/M suffix; advances *s past it. */
static int number_km(const char **s, double *x) {
  char *end;
  errno = 0;
  *x = strtod(*s, &end);
  if (end == *s || errno == ERANGE || !isfinite(*x)) return -1;
  if (*end == 'K' || *end == 'k') *x *= 1024, end++;
  else if (*end == 'M' || *end == 'm') *x *= 1048576, end++;
  *s = end;
  return 0;
}

/* A comma-separated list of numbers (one when max is 1 and count NULL) into v (doubles) or
   t (whole numbers). */
static int parse_list(const char *s, double *v, long long *t, int max, int *count, char *why, size_t n) {
  int k = 0;
  if (!*s) return qgen_fmt(why, n, "no value"), -1;
  while (*s) {
    double x;
    if (k == max && !count) return qgen_fmt(why, n, "one value expected"), -1;
    if (k == max) return qgen_fmt(why, n, "more than %d values", max), -1;
    if (number_km(&s, &x) != 0 || (*s && *s != ',')) return qgen_fmt(why, n, "not a number"), -1;
    if (t) {
      if (x != floor(x) || fabs(x) > 0x1p62) return qgen_fmt(why, n, "not a whole number"), -1;
      t[k++] = (long long)x;
    } else v[k++] = x;
    if (*s == ',') s++;
  }
  if (count) *count = k;
  return 0;
}

/* Values k of o's list (doubles v or whole numbers t) outside its range: -1 with why. */
static int check_range(const qgen_opt *o, const double *v, const long long *t, int k, char *why, size_t n) {
  if (o->lo == 0 && o->hi == 0) return 0;
  for (int i = 0; i < k; i++) {
    const double x = v ? v[i] : (double)t[i];
    if (x < o->lo || x > o->hi || (o->open_lo && x == o->lo))
      return qgen_fmt(why, n, "%.10g is not in %c%.10g, %.10g]", x, o->open_lo ? '(' : '[', o->lo, o->hi), -1;
  }
  return 0;
}

/* Store value into o's destination; -1 with the reason in why. */
static int set_value(const qgen_opt *o, const char *value, char *why, size_t n) {
  char *end;
  errno = 0;
  switch (o->kind) {
  case QGEN_OPT_STR:
    *(const char **)o->dst = value;
    return 0;
  case QGEN_OPT_INT: {
    long x = strtol(value, &end, 10);
    if (end == value || *end || errno == ERANGE || x < INT_MIN || x > INT_MAX)
      return qgen_fmt(why, n, "not a whole number"), -1;
    const long long t = x;
    if (check_range(o, NULL, &t, 1, why, n) != 0) return -1;
    *(int *)o->dst = (int)x;
    return 0;
  }
  case QGEN_OPT_U64: {
    unsigned long long x = strtoull(value, &end, 0);
    if (end == value || *end || errno == ERANGE || value[strspn(value, " \t")] == '-')
      return qgen_fmt(why, n, "not a non-negative whole number"), -1;
    *(uint64_t *)o->dst = (uint64_t)x;
    return 0;
  }
  case QGEN_OPT_DOUBLE: {
    double x = strtod(value, &end);
    if (end == value || *end || errno == ERANGE || !isfinite(x)) return qgen_fmt(why, n, "not a number"), -1;
    if (check_range(o, &x, NULL, 1, why, n) != 0) return -1;
    *(double *)o->dst = x;
    return 0;
  }
  case QGEN_OPT_NUMS:
  case QGEN_OPT_TOKENS: {
    const int nums = o->kind == QGEN_OPT_NUMS, cap = nums || o->count ? o->max : 1;
    int k = 1;
    if (parse_list(value, nums ? o->dst : NULL, nums ? NULL : o->dst, cap, o->count ? &k : NULL, why, n) != 0 ||
        check_range(o, nums ? o->dst : NULL, nums ? NULL : o->dst, k, why, n) != 0)
      return -1;
    if (o->count) *o->count = k;
    return 0;
  }
  case QGEN_OPT_FUNC: return o->set(o->dst, value, why, n);
  case QGEN_OPT_FLAG:
  case QGEN_OPT_HELP: break;
  }
  return qgen_fmt(why, n, "takes no value"), -1;
}

static int refuse(const qgen_cmd *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(const qgen_cmd *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "qgen: %s: ", c->name);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (see qgen %s --help)\n", c->name);
  va_end(ap);
  return 1;
}

int qgen_opts_parse(const qgen_cmd *c, int argc, char **argv, const char **args, int max_args, int *n_args) {
  int n_pos = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (is_help(a)) {
      qgen_opts_usage(c, stdout);
      return 0;
    }
    if (a[0] != '-' || !a[1]) {
      if (n_pos == max_args) return refuse(c, "unexpected argument '%s'", a);
      args[n_pos++] = a;
      continue;
    }
    /* --name=VALUE: the name is what precedes the '=' */
    const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    const size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const qgen_opt *o = c->opts;
    for (; o->name; o++)
      if ((strlen(o->name) == len && strncmp(o->name, a, len) == 0) ||
          (o->alias && strlen(o->alias) == len && strncmp(o->alias, a, len) == 0))
        break;
    if (!o->name) return refuse(c, "unknown option '%s'", a);
    if (o->kind == QGEN_OPT_FLAG) {
      if (eq) return refuse(c, "%s takes no value", o->name);
      *(int *)o->dst = 1;
      continue;
    }
    const char *value = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
    if (!value) return refuse(c, "%s %s: missing value", o->name, o->arg ? o->arg : "VALUE");
    char why[160];
    if (set_value(o, value, why, sizeof why) != 0) return refuse(c, "%s '%s': %s", o->name, value, why);
  }
  if (n_args) *n_args = n_pos;
  return -1;
}

void qgen_opts_usage(const qgen_cmd *c, FILE *f) {
  fputs(c->synopsis, f);
  for (const qgen_opt *o = c->opts; o->name; o++) {
    if (!o->help) continue;
    char label[96];
    qgen_fmt(label, sizeof label, "%s%s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "", o->name,
             o->arg ? " " : "", o->arg ? o->arg : "");
    fprintf(f, "  %-*s  ", c->col - 4, label); /* two spaces at least */
    for (const char *h = o->help; *h;) { /* continuation lines start at the help column */
      const char *nl = strchr(h, '\n');
      const int n = nl ? (int)(nl - h) : (int)strlen(h);
      fprintf(f, "%.*s\n", n, h);
      if (!nl) break;
      h = nl + 1;
      fprintf(f, "%*s", c->col, "");
    }
  }
  if (c->epilog) fputs(c->epilog, f);
}

int qgen_opts_split(char *s, const char **out, int max) {
  for (int n = 0;; n++) {
    char *comma = strchr(s, ',');
    if (comma) *comma = 0;
    if (!*s || n == max) return -1;
    for (int i = 0; i < n; i++)
      if (!strcmp(out[i], s)) return -1;
    out[n] = s;
    if (!comma) return n + 1;
    s = comma + 1;
  }
}

int qgen_opts_variant_in(const char *path, const qgen_spec_set *set, const char *variant) {
  if (!variant || (*variant && qgen_spec_find(set, variant))) return 0;
  char names[1024];
  size_t k = 0;
  names[0] = 0;
  for (int v = 0; v < set->n && k < sizeof names; v++)
    k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", v ? ", " : "", set->v[v].name);
  fprintf(stderr, "qgen: %s: no variant named '%s'; variants: %s\n", path, variant, names);
  return 1;
}

int qgen_opts_spec_set(const char *path, qgen_spec_set *set) {
  static qgen_bundle b;
  char err[256];
  if (!qgen_bundle_is(path)) return qgen_spec_load(path, set, err, sizeof err);
  if (qgen_bundle_read(path, &b, err, sizeof err) != 0) return -1;
  set->n = 1, set->v[0] = b.spec;
  qgen_bundle_free(&b);
  return 0;
}

qgen_status qgen_opts_open(qgen_ctx **ctx, const char *path, const qgen_open_opts *o, double v_tau) {
  static qgen_spec_set set; /* one open at a time */
  char text[4096];
  const qgen_spec *s = v_tau >= 0 && qgen_opts_spec_set(path, &set) == 0 ? qgen_spec_find(&set, o->variant) : NULL;
  if (!s) return qgen_open(ctx, path, o); /* no threshold, or its own message */
  qgen_spec t = *s;
  t.v_tau = (double)(float)v_tau;
  if (qgen_spec_to_lua(&t, text, sizeof text) < 0) return qgen_open(ctx, path, o);
  qgen_open_opts one = *o;
  one.variant = NULL;
  return qgen_open_text(ctx, text, path, &one);
}

int qgen_opts_open_exit(qgen_status st) {
  return st == QGEN_ERR_NO_DRIVER || st == QGEN_ERR_NO_DEVICE ? 77 : st == QGEN_ERR_SPEC || st == QGEN_ERR_BUNDLE ? 1 : 2;
}

int qgen_opts_variant(const char *path, const char *variant) {
  static qgen_spec_set set;
  if (!variant || qgen_opts_spec_set(path, &set) != 0) return 0;
  return qgen_opts_variant_in(path, &set, variant);
}
