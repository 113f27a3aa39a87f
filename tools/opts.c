/* opts.c — see opts.h. */
#include "tools/opts.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

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

/* The fewest edits (insert, delete, replace a byte, swap two neighbours) from a to b;
   words of 40 bytes or more are never close. */
static int edits(const char *a, const char *b) {
  enum { MAX = 40 };
  const size_t n = strlen(a), m = strlen(b);
  if (n >= MAX || m >= MAX) return MAX;
  int d[MAX][MAX];
  for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      int x = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < x) x = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < x) x = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < x) x = d[i - 2][j - 2] + 1;
      d[i][j] = x;
    }
  return d[n][m];
}

const char *qgen_opts_closest(const char *word, const char *const *names, int n) {
  const size_t len = strlen(word);
  const int most = len <= 3 ? 1 : len <= 8 ? 2 : 3; /* a typo, not another word */
  const char *best = NULL;
  int bd = most + 1;
  for (int i = 0; i < n; i++) {
    const int d = names[i] ? edits(word, names[i]) : bd;
    if (d < bd) bd = d, best = names[i];
  }
  return best;
}

/* The option of c closest to a mistyped one, or NULL. */
static const char *closest_option(const qgen_cmd *c, const char *a, size_t len) {
  const char *names[128];
  char word[64];
  int n = 0;
  for (const qgen_opt *o = c->opts; o->name && n < 126; o++) {
    names[n++] = o->name;
    if (o->alias) names[n++] = o->alias;
  }
  qgen_fmt(word, sizeof word, "%.*s", (int)(len < sizeof word ? len : sizeof word - 1), a);
  return qgen_opts_closest(word, names, n);
}

/* A word that looks like a spec or bundle path (a command with --spec wants it there). */
static int looks_like_spec(const char *a) {
  const size_t n = strlen(a);
  struct stat st;
  return (n > 4 && (!strcmp(a + n - 4, ".lua") || !strcmp(a + n - 4, ".qgb"))) || (stat(a, &st) == 0 && S_ISREG(st.st_mode));
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
      if (n_pos == max_args) {
        int has_spec = 0;
        for (const qgen_opt *o = c->opts; o->name; o++) has_spec |= !strcmp(o->name, "--spec");
        if (has_spec && looks_like_spec(a)) return refuse(c, "unexpected argument '%s'; did you mean --spec %s?", a, a);
        return refuse(c, "unexpected argument '%s'", a);
      }
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
    if (!o->name) {
      const char *near = closest_option(c, a, len);
      if (near) return refuse(c, "unknown option '%.*s'; did you mean %s?", (int)len, a, near);
      return refuse(c, "unknown option '%s'", a);
    }
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

int qgen_opts_variant(const char *path, const char *variant) {
  static qgen_spec_set set;
  if (!variant || qgen_harness_spec_set(path, &set) != 0) return 0;
  return qgen_opts_variant_in(path, &set, variant);
}

int qgen_opts_same_file(const char *out, const char *in) {
  struct stat so, si;
  if (stat(out, &so) == 0 && stat(in, &si) == 0) return so.st_dev == si.st_dev && so.st_ino == si.st_ino;
  /* one is missing: the same name once the directory part is resolved */
  char ro[8192], ri[8192];
  const char *const p[2] = {out, in};
  char *const r[2] = {ro, ri};
  for (int k = 0; k < 2; k++) {
    const char *slash = strrchr(p[k], '/');
    char dir[4096], real[4096];
    qgen_fmt(dir, sizeof dir, "%.*s", slash ? (int)(slash - p[k]) + (slash == p[k]) : 1, slash ? p[k] : ".");
    if (!realpath(dir, real)) return 0;
    qgen_fmt(r[k], sizeof ro, "%s/%s", real, slash ? slash + 1 : p[k]);
  }
  return strcmp(ro, ri) == 0;
}

int qgen_opts_not_input(const char *cmd, const char *opt, const char *out, const char *in) {
  if (!in) return 0;
  if (!out) { /* stdout redirected onto the input: the shell may already have emptied it */
    struct stat so, si;
    if (fstat(STDOUT_FILENO, &so) != 0 || !S_ISREG(so.st_mode) || stat(in, &si) != 0 || so.st_dev != si.st_dev ||
        so.st_ino != si.st_ino)
      return 0;
    fprintf(stderr, "qgen: %s: standard output is the input %s; refusing to write over it\n", cmd, in);
    return QGEN_EXIT_USER;
  }
  if (!qgen_opts_same_file(out, in)) return 0;
  fprintf(stderr, "qgen: %s: %s %s is the input %s; refusing to write over it\n", cmd, opt, out, in);
  return QGEN_EXIT_USER;
}
