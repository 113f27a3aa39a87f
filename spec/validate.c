/* validate.c — the fields of a spec: their rules and messages, and spec{} (see spec.h).
 *
 * `spec{...}` validates on the spot (errors carry file:line of the call) and returns its
 * table; every returned table is validated again after the chunk returns (cheap, and
 * catches changes made after the spec{} call). At most QGEN_MAX_VARIANTS variants, names
 * unique.
 *
 * The fields, their kinds, defaults, ranges and the "allowed:" text of their messages are
 * the rows of spec/fields.c (printed as the table of docs/spec.md); this file applies them
 * and holds the rules between fields.
 *
 * A dense spec (sparse absent/false, or enabled = false) has sparse = 0, coverage = 0,
 * budget = 0, sink = recent = 0, bounds f16, and the default block unless given. Integers may be written as
 * floats with an integral value (128.0). Unknown fields, at the top and inside sparse, are
 * errors (with a "did you mean" when a known field is close).
 */
#include "spec/spec.h"

#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "base/arch.h"
#include "base/plan.h"
#include "base/util.h"
#include "spec/fields.h"
#include "spec/spec_int.h"

/* ---------------------------------------------------------------------------------
 * Formatting values for messages
 * ------------------------------------------------------------------------------- */

void spec_fmt_double(char *buf, size_t n, double d) {
  if (isnan(d)) {
    qgen_fmt(buf, n, "%s", signbit(d) ? "-nan" : "nan");
    return;
  }
  if (isinf(d)) {
    qgen_fmt(buf, n, "%s", d < 0 ? "-inf" : "inf");
    return;
  }
  for (int prec = 15; prec <= 17; prec++) {
    qgen_fmt(buf, n, "%.*g", prec, d);
    if (strtod(buf, NULL) == d) break;
  }
  if (!strpbrk(buf, ".eEn")) {
    size_t l = strlen(buf);
    if (l + 2 < n) memcpy(buf + l, ".0", 3);
  }
}

void spec_fmt_value(lua_State *L, int idx, char *buf, size_t n) {
  switch (lua_type(L, idx)) {
  case LUA_TNIL: qgen_fmt(buf, n, "nil"); return;
  case LUA_TBOOLEAN: qgen_fmt(buf, n, "%s", lua_toboolean(L, idx) ? "true" : "false"); return;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx))
      qgen_fmt(buf, n, "%lld", (long long)lua_tointeger(L, idx));
    else
      spec_fmt_double(buf, n, (double)lua_tonumber(L, idx));
    return;
  case LUA_TSTRING: {
    size_t len, o = 0;
    const char *s = lua_tolstring(L, idx, &len);
    const size_t show = 48;
    if (n < 16) { qgen_fmt(buf, n, "\"...\""); return; }
    buf[o++] = '"';
    for (size_t i = 0; i < len && i < show && o + 8 < n; i++) {
      unsigned char c = (unsigned char)s[i];
      if (c == '"' || c == '\\') { buf[o++] = '\\'; buf[o++] = (char)c; }
      else if (c >= 0x20 && c < 0x7f) buf[o++] = (char)c;
      else o += (size_t)snprintf(buf + o, n - o, "\\%u", c);
    }
    if (len > show && o + 5 < n) { memcpy(buf + o, "...", 3); o += 3; }
    buf[o++] = '"';
    buf[o] = 0;
    return;
  }
  case LUA_TTABLE: qgen_fmt(buf, n, "{...}"); return;
  default: qgen_fmt(buf, n, "<%s>", lua_typename(L, lua_type(L, idx))); return;
  }
}

const char *spec_a_type(lua_State *L, int idx) {
  switch (lua_type(L, idx)) {
  case LUA_TNIL: return "nil";
  case LUA_TBOOLEAN: return "a boolean";
  case LUA_TNUMBER: return lua_isinteger(L, idx) ? "an integer" : "a number";
  case LUA_TSTRING: return "a string";
  case LUA_TTABLE: return "a table";
  case LUA_TFUNCTION: return "a function";
  default: return "not a plain value";
  }
}

static int is_ident(const char *s, size_t len) {
  if (len == 0 || len > 64 || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return 0;
  for (size_t i = 1; i < len; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return 0;
  return 1;
}

void spec_fmt_key(lua_State *L, int idx, const char *prefix, char *buf, size_t n) {
  char v[96];
  if (lua_type(L, idx) == LUA_TSTRING) {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (is_ident(s, len)) {
      qgen_fmt(buf, n, "%s%s%.*s", prefix, *prefix ? "." : "", (int)len, s);
      return;
    }
  }
  spec_fmt_value(L, idx, v, sizeof v);
  qgen_fmt(buf, n, "%s[%s]", prefix, v);
}

/* Edit distance (insert, delete, substitute, swap neighbours), for "did you mean". */
static int edit_distance(const char *a, size_t la, const char *b, size_t lb) {
  int d[66][66];
  if (la > 64 || lb > 64) return 99;
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      int m = d[i - 1][j - 1] + cost;
      if (d[i - 1][j] + 1 < m) m = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < m) m = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < m)
        m = d[i - 2][j - 2] + 1;
      d[i][j] = m;
    }
  return d[la][lb];
}

/* The closest of names[0..n) to s, or NULL: at most 1 edit away for names up to 4
   characters, 2 for longer ones (case differences are free). */
static const char *closest(const char *s, size_t len, const char *const *names, int n) {
  const char *best = NULL;
  int bd = len <= 4 ? 2 : 3;
  for (int i = 0; i < n; i++) {
    int d = edit_distance(s, len, names[i], strlen(names[i]));
    if (d < bd) {
      bd = d;
      best = names[i];
    }
  }
  return best;
}

/* ---------------------------------------------------------------------------------
 * Validation. Everything reads tables raw (there are no user metatables anyway) and
 * raises a Lua error with the whole message; it runs inside the load's lua_pcall.
 * ------------------------------------------------------------------------------- */

typedef struct checker {
  lua_State *L;
  int line;         /* line of the spec{} call, 0 when unknown */
  char ctx[96];     /* "variant 2 (\"x\"): " or "" */
} checker;

static _Noreturn void fail(checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void fail(checker *c, const char *fmt, ...) {
  char msg[900], field[128] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* every message about a field starts with it ("sparse.block = 48 ...", "unknown field
     'x'"): the error points at that field's line rather than the spec{} call's */
  static const char unknown[] = "unknown field '";
  const char *f = !strncmp(msg, unknown, sizeof unknown - 1) ? msg + sizeof unknown - 1 : msg;
  const size_t n = strspn(f, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.");
  if (n && n < sizeof field && strncmp(msg, "missing ", 8) != 0 && strchr(f == msg ? " [" : "'[", f[n]))
    memcpy(field, f, n);
  spec_raise_at(c->L, field[0] ? spec_field_line(c->L, c->line, field) : c->line, "%s%s", c->ctx, msg);
}

/* ---- the rows of spec/fields.c ----------------------------------------------------- */

#define F(id) qgen_spec_field_at(id)

/* What the messages about field id say is allowed, into a buffer of the caller's. */
#define ALLOWED(id, buf) qgen_spec_field_allowed(F(id), buf, sizeof buf)

/* The default of field id, its spec text read back: a number, a boolean, a type. */
static double def_number(qgen_field_id id) { return strtod(F(id)->def, NULL); }
static int def_bool(qgen_field_id id) { return !strcmp(F(id)->def, "true"); }
static qgen_type def_type(qgen_field_id id) {
  char name[32];
  qgen_type t = QGEN_TYPE_COUNT;
  qgen_fmt(name, sizeof name, "%.*s", (int)strlen(F(id)->def) - 2, F(id)->def + 1); /* unquoted */
  qgen_type_from_name(name, &t);
  return t;
}
static int def_bounds(void) {
  int b = QGEN_BOUNDS_F16;
  while (b < QGEN_BOUNDS_I8 && strncmp(F(QGEN_F_BOUNDS)->def + 1, qgen_bounds_name(b), strlen(qgen_bounds_name(b)))) b++;
  return b;
}

static int n_archs(void) {
  int n = 0;
  while (qgen_arch_at(n)) n++;
  return n;
}

/* "sm_80, sm_86, ...": the names of the architectures, for messages. */
static void arch_list(char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; qgen_arch_at(i) && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", qgen_arch_at(i)->name);
}

const char *spec_arch_name(int cc) {
  const qgen_arch *a = qgen_arch_of(cc);
  return a ? a->name : "sm_?";
}

static void join(char *buf, size_t n, const char *const *names, int count) {
  buf[0] = 0;
  for (int i = 0; i < count; i++) {
    size_t l = strlen(buf);
    qgen_fmt(buf + l, n - l, "%s%s", i ? ", " : "", names[i]);
  }
}

/* Unknown keys of the table at idx: reports the smallest one (so the message does not
   depend on hash order) with a suggestion and the count of others. */
static void check_keys(checker *c, int idx, const char *prefix) {
  lua_State *L = c->L;
  const char *names[QGEN_F_COUNT];
  const int n = qgen_spec_field_keys(prefix, names, QGEN_F_COUNT);
  char first[128] = "", hint[64] = "", cur[128];
  int unknown = 0;
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int known = 0;
    size_t len = 0;
    const char *s = NULL;
    lua_pop(L, 1); /* the value */
    if (lua_type(L, -1) == LUA_TSTRING) {
      s = lua_tolstring(L, -1, &len);
      for (int i = 0; i < n && !known; i++) known = strlen(names[i]) == len && !memcmp(s, names[i], len);
    }
    if (known) continue;
    unknown++;
    spec_fmt_key(L, -1, prefix, cur, sizeof cur);
    if (!first[0] || strcmp(cur, first) < 0) {
      memcpy(first, cur, sizeof first);
      const char *near = s ? closest(s, len, names, n) : NULL;
      if (near)
        qgen_fmt(hint, sizeof hint, " (did you mean '%s%s%s'?)", prefix, *prefix ? "." : "", near);
      else
        hint[0] = 0;
    }
  }
  if (unknown) {
    char allowed[256], more[64] = "";
    join(allowed, sizeof allowed, names, n);
    if (unknown > 1) qgen_fmt(more, sizeof more, " (and %d more)", unknown - 1);
    fail(c, "unknown field '%s'%s%s; allowed: %s", first, hint, more, allowed);
  }
}

/* Push t[key] (raw) and return its type. */
static int get(checker *c, int t, const char *key) {
  lua_pushstring(c->L, key);
  return lua_rawget(c->L, t);
}

/* The integer at the top of the stack, for the field named `field`; allowed describes
   the valid values. Accepts floats with an integral value. Range is checked here. */
static int64_t to_int(checker *c, const char *field, int64_t lo, int64_t hi, const char *allowed) {
  lua_State *L = c->L;
  char v[96];
  spec_fmt_value(L, -1, v, sizeof v);
  if (lua_type(L, -1) != LUA_TNUMBER)
    fail(c, "%s = %s is %s; allowed: %s", field, v, spec_a_type(L, -1), allowed);
  int64_t x;
  if (lua_isinteger(L, -1)) {
    x = (int64_t)lua_tointeger(L, -1);
  } else {
    double d = (double)lua_tonumber(L, -1);
    if (!isfinite(d) || floor(d) != d) fail(c, "%s = %s is not an integer; allowed: %s", field, v, allowed);
    if (d < (double)lo || d > (double)hi) fail(c, "%s = %s is out of range; allowed: %s", field, v, allowed);
    x = (int64_t)d;
  }
  if (x < lo || x > hi) fail(c, "%s = %s is out of range; allowed: %s", field, v, allowed);
  return x;
}

static double to_number(checker *c, const char *field, const char *allowed) {
  lua_State *L = c->L;
  if (lua_type(L, -1) != LUA_TNUMBER) {
    char v[96];
    spec_fmt_value(L, -1, v, sizeof v);
    fail(c, "%s = %s is %s; allowed: %s", field, v, spec_a_type(L, -1), allowed);
  }
  return (double)lua_tonumber(L, -1);
}

/* The string at the top of the stack (no embedded NUL). */
static const char *to_string(checker *c, const char *field, const char *allowed, size_t *len) {
  lua_State *L = c->L;
  char v[96];
  spec_fmt_value(L, -1, v, sizeof v);
  if (lua_type(L, -1) != LUA_TSTRING) fail(c, "%s = %s is %s; allowed: %s", field, v, spec_a_type(L, -1), allowed);
  const char *s = lua_tolstring(L, -1, len);
  if (strlen(s) != *len) fail(c, "%s = %s contains a NUL byte; allowed: %s", field, v, allowed);
  return s;
}

/* The integer at the top of the stack for field id, in its row's range (and a multiple of
   its row's step: any integer first, then the range, then the step). */
static int64_t int_field(checker *c, qgen_field_id id) {
  const qgen_spec_field *f = F(id);
  char allowed[256], v[96];
  ALLOWED(id, allowed);
  if (!f->multiple) return to_int(c, f->path, (int64_t)f->lo, (int64_t)f->hi, allowed);
  const int64_t x = to_int(c, f->path, INT_MIN, INT_MAX, allowed);
  spec_fmt_value(c->L, -1, v, sizeof v);
  if (x < f->lo || x > f->hi) fail(c, "%s = %s is out of range; allowed: %s", f->path, v, allowed);
  if (x % f->multiple) fail(c, "%s = %s is not a multiple of %d; allowed: %s", f->path, v, f->multiple, allowed);
  return x;
}

/* The number at the top of the stack for field id, in its row's range. */
static double number_field(checker *c, qgen_field_id id) {
  const qgen_spec_field *f = F(id);
  char allowed[256], v[96];
  const double x = to_number(c, f->path, ALLOWED(id, allowed));
  if (!((f->lo_open ? x > f->lo : x >= f->lo) && x <= f->hi)) { /* NaN too */
    spec_fmt_value(c->L, -1, v, sizeof v);
    fail(c, "%s = %s is out of range; allowed: %s", f->path, v, allowed);
  }
  return x;
}

/* A type field (a KV cache type or an input/output type) of the table at t. */
static qgen_type type_field(checker *c, int t, qgen_field_id id, qgen_type dflt) {
  lua_State *L = c->L;
  const char *field = F(id)->path;
  const int which = F(id)->kind == QGEN_FK_KV_TYPE ? 1 : 2;
  char allowed[256];
  ALLOWED(id, allowed);
  const char *what = which == 1 ? "a KV cache type" : "an input/output type";
  qgen_type ty = dflt;
  if (get(c, t, field) != LUA_TNIL) {
    size_t len;
    const char *s = to_string(c, field, allowed, &len);
    const qgen_type_traits *tr = NULL;
    if (qgen_type_from_name(s, &ty) == 0) tr = qgen_type_traits_of(ty);
    if (!tr || !(which == 1 ? tr->kv_ok : tr->io_ok)) {
      const char *names[QGEN_TYPE_COUNT];
      int n = 0;
      for (int i = 0; i < QGEN_TYPE_COUNT; i++) {
        const qgen_type_traits *r = qgen_type_traits_of((qgen_type)i);
        if (r && (which == 1 ? r->kv_ok : r->io_ok)) names[n++] = r->name;
      }
      const char *near = closest(s, len, names, n);
      char v[96], hint[64] = "";
      spec_fmt_value(L, -1, v, sizeof v);
      if (near) qgen_fmt(hint, sizeof hint, " (did you mean \"%s\"?)", near);
      fail(c, "%s = %s is not %s%s; allowed: %s", field, v, what, hint, allowed);
    }
  }
  lua_pop(L, 1);
  return ty;
}

static void check_name(checker *c, int t, qgen_spec *s) {
  lua_State *L = c->L;
  char allowed[256], v[96];
  size_t len;
  ALLOWED(QGEN_F_NAME, allowed);
  if (get(c, t, "name") == LUA_TNIL) fail(c, "missing required field 'name'; allowed: %s", allowed);
  const char *str = to_string(c, "name", allowed, &len);
  spec_fmt_value(L, -1, v, sizeof v);
  if (len == 0) fail(c, "name = %s is empty; allowed: %s", v, allowed);
  if (len > QGEN_NAME_MAX) fail(c, "name = %s is %zu characters long; allowed: %s", v, len, allowed);
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)str[i];
    if (!(isalnum(ch) || ch == '.' || ch == '_' || ch == '-') || ch >= 0x80) {
      char shown[16];
      if (ch >= 0x20 && ch < 0x7f)
        qgen_fmt(shown, sizeof shown, "'%c'", ch);
      else
        qgen_fmt(shown, sizeof shown, "byte %u", ch);
      fail(c, "name = %s contains %s at position %zu; allowed: %s", v, shown, i + 1, allowed);
    }
  }
  /* a name is a file name and a command-line word: no ".", "..", hidden files or "-o" */
  if (!isalnum((unsigned char)str[0])) fail(c, "name = %s starts with '%c'; allowed: %s", v, str[0], allowed);
  memcpy(s->name, str, len);
  s->name[len] = 0;
  lua_pop(L, 1);
}

/* The required integer field id of the table at t. */
static int64_t required_int(checker *c, int t, qgen_field_id id) {
  char allowed[256];
  if (get(c, t, qgen_spec_field_key(F(id))) == LUA_TNIL)
    fail(c, "missing required field '%s'; allowed: %s", F(id)->path, ALLOWED(id, allowed));
  const int64_t x = int_field(c, id);
  lua_pop(c->L, 1);
  return x;
}

/* The value on the stack top (of Lua type ty) must be a table; else fail naming field. */
static void require_table(checker *c, int ty, const char *field, const char *what) {
  if (ty == LUA_TTABLE) return;
  char v[96];
  spec_fmt_value(c->L, -1, v, sizeof v);
  fail(c, "%s = %s is %s; allowed: %s", field, v, spec_a_type(c->L, -1), what);
}

/* sparse.rescore (the table at index sp, on the stack top when present): s->rescore, s->top_p. */
static void check_rescore(checker *c, int sp, qgen_spec *s) {
  lua_State *L = c->L;
  char what[128];
  ALLOWED(QGEN_F_RESCORE, what);
  s->rescore = 1; /* no rescore: one stage */
  s->top_p = def_number(QGEN_F_TOP_P);
  const int ty = get(c, sp, "rescore");
  if (ty == LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  require_table(c, ty, "sparse.rescore", what);
  const int rt = lua_gettop(L);
  check_keys(c, rt, "sparse.rescore");
  s->rescore = (int)required_int(c, rt, QGEN_F_CANDIDATES);
  if (s->rescore > 1 && qgen_type_traits_of(s->k_type)->tensor_scale)
    fail(c, "sparse.rescore.candidates = %d with k_type = \"%s\"; allowed: candidates = 1 (two-stage selection over an "
            "fp8 cache is not supported yet)", s->rescore, qgen_type_traits_of(s->k_type)->name);
  if (get(c, rt, "sketch") != LUA_TNIL) {
    char sk[32];
    const char *kt = qgen_type_traits_of(s->k_type)->name;
    ALLOWED(QGEN_F_SKETCH, sk);
    size_t len;
    const char *v = to_string(c, "sparse.rescore.sketch", sk, &len);
    if (strcmp(v, sk) != 0) fail(c, "sparse.rescore.sketch = \"%s\" is not a sketch type; allowed: \"%s\"", v, sk);
    if (qgen_type_traits_of(s->k_type)->is_quant)
      fail(c, "sparse.rescore.sketch = \"%s\" is set with k_type = \"%s\"; allowed: no sketch on a quantized cache "
              "(its own K is rescored)", v, kt);
  }
  lua_pop(L, 1); /* sketch */
  if (get(c, rt, "top_p") != LUA_TNIL) {
    const double p = number_field(c, QGEN_F_TOP_P);
    char ps[96];
    spec_fmt_value(L, -1, ps, sizeof ps);
    if (p < 1 && s->rescore < 2)
      fail(c, "sparse.rescore.top_p = %s with candidates = %d; allowed: candidates >= 2 (the cut ranks by the stage-2 "
              "scores) or top_p = 1", ps, s->rescore);
    s->top_p = (double)(float)p; /* the kernel compares in f32 */
  }
  lua_pop(L, 2); /* top_p, the rescore table */
}

static void check_sparse(checker *c, int t, qgen_spec *s) {
  lua_State *L = c->L;
  char what[160];
  ALLOWED(QGEN_F_SPARSE, what);
  int ty = get(c, t, "sparse");
  s->block = (int)def_number(QGEN_F_BLOCK);
  s->sparse = 0;
  s->coverage = 0;
  s->budget = 0;
  s->sink = s->recent = 0;
  s->rescore = 1;
  s->top_p = def_number(QGEN_F_TOP_P);
  s->bounds = QGEN_BOUNDS_F16;
  s->v_tau = def_number(QGEN_F_V_TAU);
  if (ty == LUA_TNIL || (ty == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
    lua_pop(L, 1);
    return;
  }
  if (ty == LUA_TBOOLEAN) { /* true */
    s->sparse = 1;
    s->coverage = def_number(QGEN_F_COVERAGE);
    s->sink = s->block;
    s->recent = 2 * s->block;
    s->bounds = def_bounds();
    lua_pop(L, 1);
    return;
  }
  require_table(c, ty, "sparse", what);
  int sp = lua_gettop(L);
  check_keys(c, sp, "sparse");

  int enabled = def_bool(QGEN_F_ENABLED);
  if (get(c, sp, "enabled") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TBOOLEAN) {
      char v[96], allowed[64];
      spec_fmt_value(L, -1, v, sizeof v);
      fail(c, "sparse.enabled = %s is %s; allowed: %s", v, spec_a_type(L, -1), ALLOWED(QGEN_F_ENABLED, allowed));
    }
    enabled = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  if (get(c, sp, "block") != LUA_TNIL) s->block = (int)int_field(c, QGEN_F_BLOCK);
  lua_pop(L, 1);

  int has_cov = get(c, sp, "coverage") != LUA_TNIL;
  double cov = def_number(QGEN_F_COVERAGE);
  char covs[96] = "";
  if (has_cov) {
    cov = number_field(c, QGEN_F_COVERAGE);
    spec_fmt_value(L, -1, covs, sizeof covs);
  }
  lua_pop(L, 1);
  int64_t budget = 0;
  if (get(c, sp, "budget") != LUA_TNIL) {
    char bs[96];
    spec_fmt_value(L, -1, bs, sizeof bs);
    if (has_cov)
      fail(c, "sparse.coverage = %s and sparse.budget = %s are both set; allowed: at most one of coverage and budget",
           covs, bs);
    budget = int_field(c, QGEN_F_BUDGET);
  }
  lua_pop(L, 1);
  int64_t sink = s->block, recent = 2 * (int64_t)s->block;
  if (get(c, sp, "sink") != LUA_TNIL) sink = int_field(c, QGEN_F_SINK);
  lua_pop(L, 1);
  if (get(c, sp, "recent") != LUA_TNIL) recent = int_field(c, QGEN_F_RECENT);
  lua_pop(L, 1);
  check_rescore(c, sp, s);
  int bounds = def_bounds();
  if (get(c, sp, "bounds") != LUA_TNIL) {
    char allowed[64], v[96];
    ALLOWED(QGEN_F_BOUNDS, allowed);
    size_t len;
    const char *str = to_string(c, "sparse.bounds", allowed, &len);
    spec_fmt_value(L, -1, v, sizeof v);
    for (bounds = QGEN_BOUNDS_F16; bounds <= QGEN_BOUNDS_I8 && strcmp(str, qgen_bounds_name(bounds)); bounds++) {}
    if (bounds > QGEN_BOUNDS_I8) fail(c, "sparse.bounds = %s is not a bounds form; allowed: %s", v, allowed);
  }
  lua_pop(L, 1);
  double tau = def_number(QGEN_F_V_TAU);
  if (get(c, sp, "v_tau") != LUA_TNIL) tau = number_field(c, QGEN_F_V_TAU);
  lua_pop(L, 1);
  lua_pop(L, 1); /* the sparse table */

  if (!enabled) { /* dense; only block is kept */
    s->rescore = 1;
    s->top_p = def_number(QGEN_F_TOP_P);
    return;
  }
  s->sparse = 1;
  s->coverage = budget ? 0 : cov;
  s->budget = budget;
  s->sink = (int)sink;
  s->recent = (int)recent;
  s->bounds = bounds;
  s->v_tau = (double)(float)tau; /* the kernels compare in f32 */
}

static void check_archs(checker *c, int t, qgen_spec *s) {
  lua_State *L = c->L;
  char archs[160], what[200];
  arch_list(archs, sizeof archs);
  ALLOWED(QGEN_F_ARCHS, what);
  unsigned long long seen = 0; /* bit i: the table's row i is listed */
  char v[96];
  int ty = get(c, t, "archs");
  if (ty == LUA_TNIL) { /* the default's names, in the table's order */
    s->n_archs = 0;
    for (int i = 0; qgen_arch_at(i) && s->n_archs < QGEN_MAX_ARCHS; i++) {
      char quoted[32];
      qgen_fmt(quoted, sizeof quoted, "\"%s\"", qgen_arch_at(i)->name);
      if (strstr(F(QGEN_F_ARCHS)->def, quoted)) s->archs[s->n_archs++] = qgen_arch_at(i)->sm;
    }
    lua_pop(L, 1);
    return;
  }
  spec_fmt_value(L, -1, v, sizeof v);
  if (ty != LUA_TTABLE) fail(c, "archs = %s is %s; allowed: %s", v, spec_a_type(L, -1), what);
  int a = lua_gettop(L);
  lua_Integer count = 0;
  lua_pushnil(L);
  while (lua_next(L, a)) {
    lua_pop(L, 1);
    count++;
  }
  if (count == 0) fail(c, "archs = {} is empty; allowed: %s", what);
  lua_pushnil(L);
  while (lua_next(L, a)) {
    char key[128];
    spec_fmt_key(L, -2, "archs", key, sizeof key);
    if (!lua_isinteger(L, -2) || lua_tointeger(L, -2) < 1 || lua_tointeger(L, -2) > count)
      fail(c, "%s is not a list entry; allowed: %s", key, what);
    size_t len;
    const char *str = to_string(c, key, what, &len);
    int k = -1;
    for (int i = 0; i < n_archs() && k < 0; i++)
      if (!strcmp(str, qgen_arch_at(i)->name)) k = i;
    if (k < 0) {
      spec_fmt_value(L, -1, v, sizeof v);
      /* "sm_" digits below 80: a real but too old architecture */
      int digits = len > 3 && len < 7 && !strncmp(str, "sm_", 3);
      for (size_t i = 3; digits && i < len; i++) digits = isdigit((unsigned char)str[i]) != 0;
      if (digits && atoi(str + 3) < 80)
        fail(c, "%s = %s is not supported: qgen kernels need sm_80 or newer; allowed: %s", key, v, archs);
      fail(c, "%s = %s is not a known architecture; allowed: %s", key, v, archs);
    }
    seen |= 1ull << k;
    lua_pop(L, 1);
  }
  s->n_archs = 0;
  for (int i = 0; i < n_archs(); i++)
    if ((seen >> i & 1) && s->n_archs < QGEN_MAX_ARCHS) s->archs[s->n_archs++] = qgen_arch_at(i)->sm;
  lua_pop(L, 1);
}

/* Every kernel of s within each listed arch's shared memory a CTA (base/plan.c sizes what
   it can to the arch; what still does not fit is refused here, not at launch). */
static void check_fit(checker *c, const qgen_spec *s) {
  qgen_layout L;
  qgen_spec_layout(s, &L);
  for (int i = 0; i < s->n_archs; i++) {
    qgen_plan P;
    char why[256];
    if (qgen_plan_make(&L, qgen_arch_of(s->archs[i]), NULL, &P, why, sizeof why) != 0)
      fail(c, "archs: this spec does not fit %s: %s (remove %s from archs, or use a smaller head_dim, group or query type)",
           spec_arch_name(s->archs[i]), why, spec_arch_name(s->archs[i]));
  }
}

/* Validate the spec table at t into *s. */
static void check_spec(checker *c, int t, qgen_spec *s) {
  lua_State *L = c->L;
  t = lua_absindex(L, t);
  luaL_checkstack(L, 8, "spec validation");
  memset(s, 0, sizeof *s);
  s->line = c->line;
  check_keys(c, t, "");
  check_name(c, t, s);
  s->head_dim = (int)required_int(c, t, QGEN_F_HEAD_DIM);
  s->n_head = (int)required_int(c, t, QGEN_F_N_HEAD);
  s->n_head_kv = (int)required_int(c, t, QGEN_F_N_HEAD_KV);
  if (s->n_head % s->n_head_kv)
    fail(c, "n_head = %d is not a multiple of n_head_kv = %d", s->n_head, s->n_head_kv);
  if (s->n_head / s->n_head_kv > QGEN_MAX_GROUP)
    fail(c, "n_head / n_head_kv = %d query heads per KV head is unsupported; allowed: at most %d",
         s->n_head / s->n_head_kv, QGEN_MAX_GROUP);
  s->k_type = type_field(c, t, QGEN_F_K_TYPE, def_type(QGEN_F_K_TYPE));
  s->v_type = type_field(c, t, QGEN_F_V_TYPE, s->k_type);
  for (int w = 0; w < 2; w++) { /* attend's tiles of unquantized rows are swizzled in 64- or 128-byte pieces */
    const qgen_type ty = w ? s->v_type : s->k_type;
    const size_t row = qgen_type_row_bytes(ty, s->head_dim);
    if (!qgen_type_traits_of(ty)->is_quant && row % 64)
      fail(c, "%s = \"%s\" needs head_dim a multiple of %zu (its rows, %zu bytes at head_dim = %d, must be a multiple of 64 bytes)",
           w ? "v_type" : "k_type", qgen_type_traits_of(ty)->name, 64 / (row / (size_t)s->head_dim), row, s->head_dim);
  }
  s->in_type = type_field(c, t, QGEN_F_IN_TYPE, def_type(QGEN_F_IN_TYPE));
  s->out_type = type_field(c, t, QGEN_F_OUT_TYPE, def_type(QGEN_F_OUT_TYPE));
  s->scale = 1.0 / sqrt((double)s->head_dim);
  if (get(c, t, "scale") != LUA_TNIL) {
    char allowed[256];
    ALLOWED(QGEN_F_SCALE, allowed);
    double x = to_number(c, "scale", allowed);
    /* the kernels use (float)scale * log2(e) as an f32 literal (common.cuh SCALE_LOG2) */
    const float f = (float)x, f2 = f * 1.4426950408889634f;
    if (!(isfinite(x) && x > 0 && f >= FLT_MIN && isfinite(f2))) {
      char v[96];
      spec_fmt_value(L, -1, v, sizeof v);
      fail(c, "scale = %s is %s; allowed: %s", v,
           !isfinite(x) ? "not finite" : x <= 0 ? "not positive" : f < FLT_MIN ? "below the smallest normal f32" : "too large",
           allowed);
    }
    s->scale = x;
  }
  lua_pop(L, 1);
  check_sparse(c, t, s);
  check_archs(c, t, s);
  check_fit(c, s);
}

/* ---------------------------------------------------------------------------------
 * spec{} and what the chunk returned
 * ------------------------------------------------------------------------------- */

static const char MARKS = 'm'; /* registry[&MARKS] = { [spec table] = line } */

void spec_open_marks(lua_State *L) {
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &MARKS);
}

int spec_l_spec(lua_State *L) {
  checker c = {L, spec_line_at(L, 1), ""};
  if (lua_gettop(L) != 1 || lua_type(L, 1) != LUA_TTABLE)
    spec_raise_at(L, c.line, "spec expects one table, as in spec{ name = ..., ... }; got %s",
                    lua_gettop(L) ? spec_a_type(L, 1) : "nothing");
  qgen_spec s;
  check_spec(&c, 1, &s);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &MARKS);
  lua_pushvalue(L, 1);
  lua_pushinteger(L, c.line);
  lua_rawset(L, -3);
  lua_settop(L, 1);
  return 1;
}

/* Line of a table marked by spec{}, -1 when it is not marked. */
static int mark_of(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &MARKS);
  lua_pushvalue(L, idx);
  int line = lua_rawget(L, -2) == LUA_TNUMBER ? (int)lua_tointeger(L, -1) : -1;
  lua_pop(L, 2);
  return line;
}

void spec_take_result(lua_State *L, int idx, qgen_spec_set *set) {
  checker c = {L, 0, ""};
  int ty = lua_type(L, idx);
  if (ty != LUA_TTABLE)
    fail(&c, "the spec returned %s; allowed: a spec table (spec{...}) or a list of them", spec_a_type(L, idx));
  int line = mark_of(L, idx);
  int is_list = line < 0;
  lua_Integer count = 0, low = 1; /* integer keys, the smallest */
  if (is_list) { /* a list has only integer keys */
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      lua_pop(L, 1);
      if (!lua_isinteger(L, -1)) {
        is_list = 0;
        lua_pop(L, 1);
        break;
      }
      if (lua_tointeger(L, -1) < low) low = lua_tointeger(L, -1);
      count++;
    }
  }
  if (is_list && low < 1)
    fail(&c, "the variant list has the key [%lld], not a positive integer; allowed: a list { spec{...}, spec{...}, ... }",
         (long long)low);
  if (is_list && count == 0)
    fail(&c, "the spec returned an empty table; allowed: a spec table (spec{...}) or a non-empty list of them");
  if (!is_list) {
    c.line = line > 0 ? line : 0;
    check_spec(&c, idx, &set->v[0]);
    set->n = 1;
    return;
  }
  if (count > QGEN_MAX_VARIANTS)
    fail(&c, "the spec returned %lld variants; allowed: at most %d", (long long)count, QGEN_MAX_VARIANTS);
  for (lua_Integer i = 1; i <= count; i++)
    if (lua_rawgeti(L, idx, i) == LUA_TNIL) {
      fail(&c, "the variant list has a hole at [%lld]; allowed: a list { spec{...}, spec{...}, ... }", (long long)i);
    } else {
      lua_pop(L, 1);
    }
  for (int i = 0; i < (int)count; i++) {
    lua_rawgeti(L, idx, i + 1);
    c.line = 0;
    c.ctx[0] = 0;
    if (lua_type(L, -1) != LUA_TTABLE)
      fail(&c, "variant %d is %s; allowed: a spec table (spec{...})", i + 1, spec_a_type(L, -1));
    line = mark_of(L, -1);
    c.line = line > 0 ? line : 0;
    lua_pushliteral(L, "name");
    if (lua_rawget(L, -2) == LUA_TSTRING) {
      char v[96];
      spec_fmt_value(L, -1, v, sizeof v);
      qgen_fmt(c.ctx, sizeof c.ctx, "variant %d (%s): ", i + 1, v);
    } else {
      qgen_fmt(c.ctx, sizeof c.ctx, "variant %d: ", i + 1);
    }
    lua_pop(L, 1);
    qgen_spec *s = &set->v[i];
    check_spec(&c, -1, s);
    for (int k = 0; k < i; k++)
      if (!strcmp(set->v[k].name, s->name)) {
        qgen_fmt(c.ctx, sizeof c.ctx, "variant %d: ", i + 1);
        fail(&c, "name = \"%s\" is already used by variant %d; allowed: a distinct name per variant", s->name,
             k + 1);
      }
    lua_pop(L, 1);
  }
  set->n = (int)count;
}
