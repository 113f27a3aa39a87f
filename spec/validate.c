/* validate.c — the fields of a spec: their rules and messages, and spec{} (see spec.h).
 *
 * `spec{...}` validates on the spot (errors carry file:line of the call) and returns its
 * table; every returned table is validated again after the chunk returns (cheap, and
 * catches changes made after the spec{} call). At most QGEN_MAX_VARIANTS variants, names
 * unique.
 *
 *  field            default                allowed
 *  ---------------  ---------------------  ---------------------------------------------
 *  name             (required)             1..64 characters of A-Z a-z 0-9 . _ -, the first
 *                                          a letter or digit (not "-o", ".", "..")
 *  head_dim         (required)             integer, a multiple of 32 in 32..256
 *  n_head           (required)             integer in 1..65536
 *  n_head_kv        (required)             integer in 1..65536; n_head % n_head_kv == 0
 *                                          and n_head / n_head_kv <= 64 (QGEN_MAX_GROUP)
 *  k_type           "f16"                  a KV cache type: f16, bf16, q8_0, q4_0, q5_0, e4m3, e5m2
 *                                          (fp8, e4m3 / e5m2: head_dim a multiple of 64)
 *  v_type           = k_type               a KV cache type
 *  in_type          "f16"                  an input/output type: f32, f16, bf16
 *  out_type         "f16"                  an input/output type
 *  scale            1/sqrt(head_dim)       a number > 0 that is a normal f32 (>= FLT_MIN)
 *                                          with scale * log2(e) finite in f32 (the kernels'
 *                                          softmax constant): at most ~2.36e38
 *  sparse           absent = false         false: dense; true: sparse with the defaults
 *                                          below; or a table of:
 *    enabled        true                   boolean (false: dense, but block is kept)
 *    block          64                     integer, a multiple of 32 in 32..256
 *    coverage       0.25 (if no budget)    number in (0, 1]: fraction of pages attended
 *    budget         (none)                 integer tokens in 1..2^62; not with coverage
 *    sink           = block                integer tokens in 0..2^31-1
 *    recent         = 2 * block            integer tokens in 0..2^31-1
 *    rescore        (none)                 two-stage selection (base/layout.h), a table of:
 *      candidates   (required)             integer in 1..1024: pages kept by the Quest
 *                                          bound per budget page, rescored exactly; 1 is
 *                                          Quest (the same module as no rescore)
 *      sketch       "q4_0"                 the compact K an f16/bf16 cache keeps for it
 *                                          (only q4_0); not with a q8_0/q4_0/q5_0 cache,
 *                                          whose own K is rescored
 *      top_p        1                      number in (0, 1]: keep the fewest kept candidates
 *                                          whose estimated softmax mass reaches top_p of all
 *                                          the candidates' (base/layout.h); 1 = off; < 1
 *                                          needs candidates >= 2
 *    bounds         "i8"                   "f16" or "i8": the page bounds estimate reads
 *                   (QGEN_SPEC_BOUNDS_DEFAULT) (i8: 8-bit codes, base/layout.h)
 *    v_tau          0                      number in [0, 1]: sparse-V, attend skips the V of a
 *                                          16-token sub-tile whose softmax weights (relative
 *                                          to the running max) are all below it; 0 = off
 *  archs            { "sm_80", "sm_90" }   non-empty list of sm_80, sm_86, sm_87, sm_89,
 *                                          sm_90, sm_100, sm_103, sm_110, sm_120, sm_121
 *                                          (stored sorted, duplicates dropped)
 *
 * A dense spec (sparse absent/false, or enabled = false) has sparse = 0, coverage = 0,
 * budget = 0, sink = recent = 0, bounds f16, and block = 64 unless given. Integers may be written as
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
#include "spec/spec_int.h"

#define SPEC_HEADS_MAX 65536
#define SPEC_BUDGET_MAX ((int64_t)1 << 62)

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

static const char *const SPEC_FIELDS[] = {"name",     "head_dim", "n_head", "n_head_kv",
                                          "k_type",   "v_type",   "in_type", "out_type",
                                          "scale",    "sparse",   "archs"};
static const char *const SPARSE_FIELDS[] = {"enabled", "block", "coverage",
                                            "budget",  "sink",  "recent", "rescore", "bounds", "v_tau"};
static const char *const RESCORE_FIELDS[] = {"candidates", "sketch", "top_p"};
#define N_SPEC_FIELDS ((int)(sizeof SPEC_FIELDS / sizeof *SPEC_FIELDS))
#define N_SPARSE_FIELDS ((int)(sizeof SPARSE_FIELDS / sizeof *SPARSE_FIELDS))

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
static void check_keys(checker *c, int idx, const char *prefix, const char *const *names,
                       int n) {
  lua_State *L = c->L;
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

static int head_sized(checker *c, const char *field) {
  const char *allowed = "a multiple of 32 in 32..256";
  int64_t x = to_int(c, field, INT_MIN, INT_MAX, allowed);
  char v[96];
  spec_fmt_value(c->L, -1, v, sizeof v);
  if (x < 32 || x > 256) fail(c, "%s = %s is out of range; allowed: %s", field, v, allowed);
  if (x % 32) fail(c, "%s = %s is not a multiple of 32; allowed: %s", field, v, allowed);
  return (int)x;
}

/* which: 1 kv types, 2 io types */
static qgen_type type_field(checker *c, int t, const char *field, int which, qgen_type dflt) {
  lua_State *L = c->L;
  const char *allowed = qgen_type_names(which);
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
  const char *allowed = "1..64 characters of A-Z a-z 0-9 . _ -, the first a letter or digit";
  char v[96];
  size_t len;
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

static int64_t required_int(checker *c, int t, const char *field, int64_t lo, int64_t hi,
                            const char *allowed) {
  if (get(c, t, field) == LUA_TNIL) fail(c, "missing required field '%s'; allowed: %s", field, allowed);
  int64_t x = to_int(c, field, lo, hi, allowed);
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
  const char *what = "a table { candidates, sketch, top_p }";
  s->rescore = 1;
  s->top_p = 1;
  const int ty = get(c, sp, "rescore");
  if (ty == LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  require_table(c, ty, "sparse.rescore", what);
  const int rt = lua_gettop(L);
  check_keys(c, rt, "sparse.rescore", RESCORE_FIELDS, (int)(sizeof RESCORE_FIELDS / sizeof *RESCORE_FIELDS));
  const char *allowed = "an integer in 1..1024 (candidate pages per budget page; 1 = Quest)";
  if (get(c, rt, "candidates") == LUA_TNIL) fail(c, "missing required field 'sparse.rescore.candidates'; allowed: %s", allowed);
  s->rescore = (int)to_int(c, "sparse.rescore.candidates", 1, 1024, allowed);
  lua_pop(L, 1);
  if (s->rescore > 1 && qgen_type_traits_of(s->k_type)->tensor_scale)
    fail(c, "sparse.rescore.candidates = %d with k_type = \"%s\"; allowed: candidates = 1 (two-stage selection over an "
            "fp8 cache is not supported yet)", s->rescore, qgen_type_traits_of(s->k_type)->name);
  if (get(c, rt, "sketch") != LUA_TNIL) {
    const char *sk = qgen_type_traits_of(QGEN_SKETCH_TYPE)->name, *kt = qgen_type_traits_of(s->k_type)->name;
    size_t len;
    const char *v = to_string(c, "sparse.rescore.sketch", sk, &len);
    if (strcmp(v, sk) != 0) fail(c, "sparse.rescore.sketch = \"%s\" is not a sketch type; allowed: \"%s\"", v, sk);
    if (qgen_type_traits_of(s->k_type)->is_quant)
      fail(c, "sparse.rescore.sketch = \"%s\" is set with k_type = \"%s\"; allowed: no sketch on a quantized cache "
              "(its own K is rescored)", v, kt);
  }
  lua_pop(L, 1); /* sketch */
  if (get(c, rt, "top_p") != LUA_TNIL) {
    const char *allowed_p = "a number in (0, 1], the share of the candidates' estimated softmax mass to keep (1 = off)";
    const double p = to_number(c, "sparse.rescore.top_p", allowed_p);
    char ps[96];
    spec_fmt_value(L, -1, ps, sizeof ps);
    if (!(p > 0 && p <= 1)) fail(c, "sparse.rescore.top_p = %s is out of range; allowed: %s", ps, allowed_p);
    if (p < 1 && s->rescore < 2)
      fail(c, "sparse.rescore.top_p = %s with candidates = %d; allowed: candidates >= 2 (the cut ranks by the stage-2 "
              "scores) or top_p = 1", ps, s->rescore);
    s->top_p = (double)(float)p; /* the kernel compares in f32 */
  }
  lua_pop(L, 2); /* top_p, the rescore table */
}

static void check_sparse(checker *c, int t, qgen_spec *s) {
  lua_State *L = c->L;
  const char *what = "true, false or a table { enabled, block, coverage | budget, sink, recent, rescore, bounds, v_tau }";
  int ty = get(c, t, "sparse");
  s->block = 64;
  s->sparse = 0;
  s->coverage = 0;
  s->budget = 0;
  s->sink = s->recent = 0;
  s->rescore = 1;
  s->top_p = 1;
  s->bounds = QGEN_BOUNDS_F16;
  s->v_tau = 0;
  if (ty == LUA_TNIL || (ty == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
    lua_pop(L, 1);
    return;
  }
  if (ty == LUA_TBOOLEAN) { /* true */
    s->sparse = 1;
    s->coverage = 0.25;
    s->sink = s->block;
    s->recent = 2 * s->block;
    s->bounds = QGEN_SPEC_BOUNDS_DEFAULT;
    lua_pop(L, 1);
    return;
  }
  require_table(c, ty, "sparse", what);
  int sp = lua_gettop(L);
  check_keys(c, sp, "sparse", SPARSE_FIELDS, N_SPARSE_FIELDS);

  int enabled = 1;
  if (get(c, sp, "enabled") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TBOOLEAN) {
      char v[96];
      spec_fmt_value(L, -1, v, sizeof v);
      fail(c, "sparse.enabled = %s is %s; allowed: true or false", v, spec_a_type(L, -1));
    }
    enabled = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  if (get(c, sp, "block") != LUA_TNIL) s->block = head_sized(c, "sparse.block");
  lua_pop(L, 1);

  int has_cov = get(c, sp, "coverage") != LUA_TNIL;
  double cov = 0.25;
  char covs[96] = "";
  if (has_cov) {
    const char *allowed = "a number in (0, 1], the fraction of pages attended";
    cov = to_number(c, "sparse.coverage", allowed);
    spec_fmt_value(L, -1, covs, sizeof covs);
    if (!(cov > 0 && cov <= 1)) fail(c, "sparse.coverage = %s is out of range; allowed: %s", covs, allowed);
  }
  lua_pop(L, 1);
  int64_t budget = 0;
  if (get(c, sp, "budget") != LUA_TNIL) {
    char bs[96];
    spec_fmt_value(L, -1, bs, sizeof bs);
    if (has_cov)
      fail(c, "sparse.coverage = %s and sparse.budget = %s are both set; allowed: at most one of coverage and budget",
           covs, bs);
    budget = to_int(c, "sparse.budget", 1, SPEC_BUDGET_MAX, "an integer number of tokens in 1..2^62");
  }
  lua_pop(L, 1);
  int64_t sink = s->block, recent = 2 * (int64_t)s->block;
  if (get(c, sp, "sink") != LUA_TNIL)
    sink = to_int(c, "sparse.sink", 0, INT_MAX, "an integer number of tokens >= 0 (default: block)");
  lua_pop(L, 1);
  if (get(c, sp, "recent") != LUA_TNIL)
    recent = to_int(c, "sparse.recent", 0, INT_MAX, "an integer number of tokens >= 0 (default: 2 * block)");
  lua_pop(L, 1);
  check_rescore(c, sp, s);
  int bounds = QGEN_SPEC_BOUNDS_DEFAULT;
  if (get(c, sp, "bounds") != LUA_TNIL) {
    char allowed[64], v[96];
    qgen_fmt(allowed, sizeof allowed, "\"%s\" or \"%s\" (default \"%s\")", qgen_bounds_name(QGEN_BOUNDS_F16),
             qgen_bounds_name(QGEN_BOUNDS_I8), qgen_bounds_name(QGEN_SPEC_BOUNDS_DEFAULT));
    size_t len;
    const char *str = to_string(c, "sparse.bounds", allowed, &len);
    spec_fmt_value(L, -1, v, sizeof v);
    for (bounds = QGEN_BOUNDS_F16; bounds <= QGEN_BOUNDS_I8 && strcmp(str, qgen_bounds_name(bounds)); bounds++) {}
    if (bounds > QGEN_BOUNDS_I8) fail(c, "sparse.bounds = %s is not a bounds form; allowed: %s", v, allowed);
  }
  lua_pop(L, 1);
  double tau = 0;
  if (get(c, sp, "v_tau") != LUA_TNIL) {
    const char *allowed = "a number in [0, 1], the sparse-V weight threshold (0 = off)";
    tau = to_number(c, "sparse.v_tau", allowed);
    char ts[96];
    spec_fmt_value(L, -1, ts, sizeof ts);
    if (!(tau >= 0 && tau <= 1)) fail(c, "sparse.v_tau = %s is out of range; allowed: %s", ts, allowed);
  }
  lua_pop(L, 1);
  lua_pop(L, 1); /* the sparse table */

  if (!enabled) { /* dense; only block is kept */
    s->rescore = 1;
    s->top_p = 1;
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
  snprintf(what, sizeof what, "a list of one or more of %s", archs);
  unsigned long long seen = 0; /* bit i: the table's row i is listed */
  char v[96];
  int ty = get(c, t, "archs");
  if (ty == LUA_TNIL) {
    s->n_archs = 2;
    s->archs[0] = 80;
    s->archs[1] = 90;
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
  check_keys(c, t, "", SPEC_FIELDS, N_SPEC_FIELDS);
  check_name(c, t, s);
  if (get(c, t, "head_dim") == LUA_TNIL) fail(c, "missing required field 'head_dim'; allowed: a multiple of 32 in 32..256");
  s->head_dim = head_sized(c, "head_dim");
  lua_pop(L, 1);
  s->n_head = (int)required_int(c, t, "n_head", 1, SPEC_HEADS_MAX, "an integer in 1..65536");
  s->n_head_kv = (int)required_int(c, t, "n_head_kv", 1, SPEC_HEADS_MAX, "an integer in 1..65536");
  if (s->n_head % s->n_head_kv)
    fail(c, "n_head = %d is not a multiple of n_head_kv = %d", s->n_head, s->n_head_kv);
  if (s->n_head / s->n_head_kv > QGEN_MAX_GROUP)
    fail(c, "n_head / n_head_kv = %d query heads per KV head is unsupported; allowed: at most %d",
         s->n_head / s->n_head_kv, QGEN_MAX_GROUP);
  s->k_type = type_field(c, t, "k_type", 1, QGEN_TYPE_F16);
  s->v_type = type_field(c, t, "v_type", 1, s->k_type);
  for (int w = 0; w < 2; w++) { /* attend's tiles of unquantized rows are swizzled in 64- or 128-byte pieces */
    const qgen_type ty = w ? s->v_type : s->k_type;
    const size_t row = qgen_type_row_bytes(ty, s->head_dim);
    if (!qgen_type_traits_of(ty)->is_quant && row % 64)
      fail(c, "%s = \"%s\" needs head_dim a multiple of %zu (its rows, %zu bytes at head_dim = %d, must be a multiple of 64 bytes)",
           w ? "v_type" : "k_type", qgen_type_traits_of(ty)->name, 64 / (row / (size_t)s->head_dim), row, s->head_dim);
  }
  s->in_type = type_field(c, t, "in_type", 2, QGEN_TYPE_F16);
  s->out_type = type_field(c, t, "out_type", 2, QGEN_TYPE_F16);
  s->scale = 1.0 / sqrt((double)s->head_dim);
  if (get(c, t, "scale") != LUA_TNIL) {
    const char *allowed = "a number > 0, a normal f32 with scale * log2(e) finite: 1.17549435e-38 .. ~2.36e38 "
                          "(default: 1/sqrt(head_dim))";
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
