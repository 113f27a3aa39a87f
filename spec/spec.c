/* spec.c — the sandboxed Lua spec loader (see spec.h, docs/DESIGN.md §4).
 *
 * A spec file returns one spec table or a non-empty list of them (variants; names
 * unique; at most QGEN_MAX_VARIANTS). `spec{...}` validates on the spot (errors carry
 * file:line of the call) and returns its table; every returned table is validated again
 * after the chunk returns (cheap, and catches changes made after the spec{} call).
 *
 *  field            default                allowed
 *  ---------------  ---------------------  ---------------------------------------------
 *  name             (required)             1..64 characters of A-Z a-z 0-9 . _ -
 *  head_dim         (required)             integer, a multiple of 32 in 32..256
 *  n_head           (required)             integer in 1..65536
 *  n_head_kv        (required)             integer in 1..65536; n_head % n_head_kv == 0
 *                                          and n_head / n_head_kv <= 64 (QGEN_MAX_GROUP)
 *  k_type           "f16"                  a KV cache type: f16, bf16, q8_0, q4_0, q5_0
 *  v_type           = k_type               a KV cache type
 *  in_type          "f16"                  an input/output type: f32, f16, bf16
 *  out_type         "f16"                  an input/output type
 *  scale            1/sqrt(head_dim)       a finite number > 0
 *  sparse           absent = false         false: dense; true: sparse with the defaults
 *                                          below; or a table of:
 *    enabled        true                   boolean (false: dense, but block is kept)
 *    block          64                     integer, a multiple of 32 in 32..256
 *    coverage       0.25 (if no budget)    number in (0, 1]: fraction of pages attended
 *    budget         (none)                 integer tokens in 1..2^62; not with coverage
 *    sink           = block                integer tokens in 0..2^31-1
 *    recent         = 2 * block            integer tokens in 0..2^31-1
 *  archs            { "sm_80", "sm_90" }   non-empty list of sm_80, sm_86, sm_87, sm_89,
 *                                          sm_90, sm_100, sm_103, sm_110, sm_120, sm_121
 *                                          (stored sorted, duplicates dropped)
 *
 * A dense spec (sparse absent/false, or enabled = false) has sparse = 0, coverage = 0,
 * budget = 0, sink = recent = 0, and block = 64 unless given. Integers may be written as
 * floats with an integral value (128.0). Unknown fields, at the top and inside sparse, are
 * errors (with a "did you mean" when a known field is close).
 *
 * The sandbox: a fresh lua_State per load with an allocator capped at 64 MiB; only the
 * base, string, table and math libraries; no dofile, loadfile, load, require,
 * collectgarbage, setmetatable, warn or string.dump; no io, os, package, debug, coroutine,
 * utf8. Reading an undefined global is an error (it catches `k_type = q8_0`). print writes
 * to stderr (64 KiB at most). Source text only (1 MiB at most): a precompiled chunk is
 * refused. At most 50 million VM instructions and 5 s of wall time, checked by a count
 * hook, a call hook (so slow library calls in a short loop meet the clock) and the
 * allocator; once a limit trips, every instruction and call raises again, so pcall cannot
 * swallow it, and xpcall skips its handler (which would run with hooks off).
 *
 * A single library call must not run long without allocating, since no hook runs inside
 * it. So string.find/match/gmatch/gsub are not available (backtracking patterns, and even
 * a plain find, can take far more than linear time); table.move refuses ranges over 2^24
 * elements; table.insert/remove/sort refuse tables whose border #t is over 2^24 (a few
 * entries t[1], t[2], t[4], ... make #t near 2^62); string.rep of nothing returns at once.
 * Without setmetatable there are no user metatables: no __gc finalizers (they run with
 * hooks off), no __index/__len tricks that turn table functions into endless C loops; the
 * string metatable is locked. math.random is seeded with 0: a spec is deterministic.
 */
#include "spec/spec.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "base/util.h"

#define SPEC_FILE_MAX ((size_t)1 << 20)     /* bytes of source */
#ifndef QGEN_SPEC_FUZZ_LIMITS
#define SPEC_MEM_LIMIT ((size_t)64 << 20)   /* bytes held by the Lua state */
#define SPEC_STEP_LIMIT 50000000LL          /* VM instructions */
#define SPEC_TIME_LIMIT_MS 5000.0           /* wall time of one load */
#else /* fuzz/ builds: the same checks with smaller budgets, so a slow input stays cheap */
#define SPEC_MEM_LIMIT ((size_t)16 << 20)
#define SPEC_STEP_LIMIT 2000000LL
#define SPEC_TIME_LIMIT_MS 250.0
#endif
#define SPEC_HOOK_EVERY 1000                /* instructions between count hooks */
#define SPEC_HOOK_MASK (LUA_MASKCOUNT | LUA_MASKCALL)
#define SPEC_PRINT_MAX ((size_t)64 << 10)   /* bytes print may write */
#define SPEC_ELEMS_MAX ((lua_Integer)1 << 24) /* elements one table function may touch */
#define SPEC_HEADS_MAX 65536
#define SPEC_BUDGET_MAX ((int64_t)1 << 62)

/* ---------------------------------------------------------------------------------
 * The sandbox state: reached from any lua_State through lua_getallocf.
 * ------------------------------------------------------------------------------- */

enum { TRIP_NONE, TRIP_STEPS, TRIP_TIME };

typedef struct sandbox {
  size_t mem, mem_limit;
  int mem_refused;          /* the allocator said no at least once */
  long long steps;          /* VM instructions so far (in SPEC_HOOK_EVERY units) */
  double t0;                /* qgen_now_ms() at the start */
  int tripped;              /* TRIP_*: sticky */
  lua_State *L;             /* set while the chunk runs (hook installed) */
  size_t printed;           /* bytes written by print */
  const char *path;         /* chunk name as given, used in every message */
  char short_src[LUA_IDSIZE]; /* Lua's (maybe shortened) spelling of path */
} sandbox;

static sandbox *sb_of(lua_State *L) {
  void *ud = NULL;
  lua_getallocf(L, &ud);
  return ud;
}

static void sb_hook(lua_State *L, lua_Debug *ar);

/* The wall-clock check of the allocator: slow library calls allocate, and near the
   memory limit every allocation runs an emergency collection, so a loop of a few
   instructions can take long between two calls of the count hook. Once the time is up,
   the hook is set to run at every instruction (lua_sethook is safe anywhere). */
static void sb_check_time(sandbox *sb) {
  if (sb->tripped || !sb->L || qgen_now_ms() - sb->t0 <= SPEC_TIME_LIMIT_MS) return;
  sb->tripped = TRIP_TIME;
  lua_sethook(sb->L, sb_hook, SPEC_HOOK_MASK, 1);
}

static void *sb_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  sandbox *sb = ud;
  size_t old = ptr ? osize : 0; /* with ptr NULL, osize is a type tag */
  if (nsize == 0) {
    free(ptr);
    sb->mem -= old;
    return NULL;
  }
  if (nsize > old && nsize - old > sb->mem_limit - sb->mem) {
    sb->mem_refused = 1;
    sb_check_time(sb);
    return NULL;
  }
  if (nsize >= ((size_t)64 << 10)) sb_check_time(sb);
  void *p = realloc(ptr, nsize);
  if (!p && nsize <= old) p = ptr; /* Lua assumes shrinking never fails: keep the block */
  if (!p) {
    sb->mem_refused = 1;
    return NULL;
  }
  sb->mem = sb->mem - old + nsize;
  return p;
}

/* Current line of the function at stack level `level`, 0 when unknown (a C function). */
static int line_at(lua_State *L, int level) {
  lua_Debug ar;
  if (!lua_getstack(L, level, &ar) || !lua_getinfo(L, "l", &ar)) return 0;
  return ar.currentline > 0 ? ar.currentline : 0;
}

/* "path:line: " or "path: " */
static void where(char *buf, size_t n, const char *path, int line) {
  if (line > 0)
    qgen_fmt(buf, n, "%s:%d: ", path, line);
  else
    qgen_fmt(buf, n, "%s: ", path);
}

/* Raise "path[:line]: message" as a Lua error. */
static _Noreturn void raise_at(lua_State *L, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static _Noreturn void raise_at(lua_State *L, int line, const char *fmt, ...) {
  char pre[512], msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  where(pre, sizeof pre, sb_of(L)->path, line);
  lua_pushfstring(L, "%s%s", pre, msg);
  lua_error(L);
  abort(); /* not reached: lua_error does not return */
}

static const char *trip_message(const sandbox *sb, char *buf, size_t n) {
  if (sb->tripped == TRIP_STEPS)
    return qgen_fmt(buf, n, "instruction limit exceeded (%lld VM instructions; infinite loop?)",
                    (long long)SPEC_STEP_LIMIT);
  return qgen_fmt(buf, n, "time limit exceeded (%.0f s; infinite loop?)", SPEC_TIME_LIMIT_MS / 1000);
}

/* The limits. The count hook runs every SPEC_HOOK_EVERY instructions; the call hook on
   every call, so a loop of a few instructions around a slow library call (table.sort of
   a large table, say) still meets the clock often. Once a limit trips, every instruction
   and every call raises again: pcall cannot swallow it. */
static void sb_hook(lua_State *L, lua_Debug *ar) {
  sandbox *sb = sb_of(L);
  if (!sb->tripped) {
    if (ar->event == LUA_HOOKCOUNT) sb->steps += SPEC_HOOK_EVERY;
    if (sb->steps > SPEC_STEP_LIMIT)
      sb->tripped = TRIP_STEPS;
    else if (qgen_now_ms() - sb->t0 > SPEC_TIME_LIMIT_MS)
      sb->tripped = TRIP_TIME;
    else
      return;
    lua_sethook(L, sb_hook, SPEC_HOOK_MASK, 1);
  }
  char msg[128];
  int line = line_at(L, 0); /* the running function; for a call event, maybe a C one */
  raise_at(L, line ? line : line_at(L, 1), "%s", trip_message(sb, msg, sizeof msg));
}

/* ---------------------------------------------------------------------------------
 * Formatting values for messages
 * ------------------------------------------------------------------------------- */

/* Shortest "%.{15,16,17}g" that reads back to d, with ".0" added where Lua would read
   an integer. */
static void fmt_double(char *buf, size_t n, double d) {
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

/* A Lua-looking rendering of any value, one line, at most about 60 characters. */
static void fmt_value(lua_State *L, int idx, char *buf, size_t n) {
  switch (lua_type(L, idx)) {
  case LUA_TNIL: qgen_fmt(buf, n, "nil"); return;
  case LUA_TBOOLEAN: qgen_fmt(buf, n, "%s", lua_toboolean(L, idx) ? "true" : "false"); return;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx))
      qgen_fmt(buf, n, "%lld", (long long)lua_tointeger(L, idx));
    else
      fmt_double(buf, n, (double)lua_tonumber(L, idx));
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

static const char *a_type(lua_State *L, int idx) {
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

/* A table key as it would follow "prefix": "name", "[1]", "[\"a b\"]". */
static void fmt_key(lua_State *L, int idx, const char *prefix, char *buf, size_t n) {
  char v[96];
  if (lua_type(L, idx) == LUA_TSTRING) {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (is_ident(s, len)) {
      qgen_fmt(buf, n, "%s%s%.*s", prefix, *prefix ? "." : "", (int)len, s);
      return;
    }
  }
  fmt_value(L, idx, v, sizeof v);
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
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  raise_at(c->L, c->line, "%s%s", c->ctx, msg);
}

static const char *const SPEC_FIELDS[] = {"name",     "head_dim", "n_head", "n_head_kv",
                                          "k_type",   "v_type",   "in_type", "out_type",
                                          "scale",    "sparse",   "archs"};
static const char *const SPARSE_FIELDS[] = {"enabled", "block", "coverage",
                                            "budget",  "sink",  "recent"};
#define N_SPEC_FIELDS ((int)(sizeof SPEC_FIELDS / sizeof *SPEC_FIELDS))
#define N_SPARSE_FIELDS ((int)(sizeof SPARSE_FIELDS / sizeof *SPARSE_FIELDS))

static const struct { const char *name; int cc; } ARCHS[] = {
    {"sm_80", 80},   {"sm_86", 86},   {"sm_87", 87},   {"sm_89", 89},   {"sm_90", 90},
    {"sm_100", 100}, {"sm_103", 103}, {"sm_110", 110}, {"sm_120", 120}, {"sm_121", 121},
};
#define N_ARCHS ((int)(sizeof ARCHS / sizeof *ARCHS))

/* "sm_80, sm_86, ...": the names of ARCHS, for messages. */
static void arch_list(char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < N_ARCHS && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", ARCHS[i].name);
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
    fmt_key(L, -1, prefix, cur, sizeof cur);
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
  fmt_value(L, -1, v, sizeof v);
  if (lua_type(L, -1) != LUA_TNUMBER)
    fail(c, "%s = %s is %s; allowed: %s", field, v, a_type(L, -1), allowed);
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
    fmt_value(L, -1, v, sizeof v);
    fail(c, "%s = %s is %s; allowed: %s", field, v, a_type(L, -1), allowed);
  }
  return (double)lua_tonumber(L, -1);
}

/* The string at the top of the stack (no embedded NUL). */
static const char *to_string(checker *c, const char *field, const char *allowed, size_t *len) {
  lua_State *L = c->L;
  char v[96];
  fmt_value(L, -1, v, sizeof v);
  if (lua_type(L, -1) != LUA_TSTRING) fail(c, "%s = %s is %s; allowed: %s", field, v, a_type(L, -1), allowed);
  const char *s = lua_tolstring(L, -1, len);
  if (strlen(s) != *len) fail(c, "%s = %s contains a NUL byte; allowed: %s", field, v, allowed);
  return s;
}

static int head_sized(checker *c, const char *field) {
  const char *allowed = "a multiple of 32 in 32..256";
  int64_t x = to_int(c, field, INT_MIN, INT_MAX, allowed);
  char v[96];
  fmt_value(c->L, -1, v, sizeof v);
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
      fmt_value(L, -1, v, sizeof v);
      if (near) qgen_fmt(hint, sizeof hint, " (did you mean \"%s\"?)", near);
      fail(c, "%s = %s is not %s%s; allowed: %s", field, v, what, hint, allowed);
    }
  }
  lua_pop(L, 1);
  return ty;
}

static void check_name(checker *c, int t, qgen_spec *s) {
  lua_State *L = c->L;
  const char *allowed = "1..64 characters of A-Z a-z 0-9 . _ -";
  char v[96];
  size_t len;
  if (get(c, t, "name") == LUA_TNIL) fail(c, "missing required field 'name'; allowed: %s", allowed);
  const char *str = to_string(c, "name", allowed, &len);
  fmt_value(L, -1, v, sizeof v);
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

static void check_sparse(checker *c, int t, qgen_spec *s) {
  lua_State *L = c->L;
  const char *what = "true, false or a table { enabled, block, coverage | budget, sink, recent }";
  int ty = get(c, t, "sparse");
  s->block = 64;
  s->sparse = 0;
  s->coverage = 0;
  s->budget = 0;
  s->sink = s->recent = 0;
  if (ty == LUA_TNIL || (ty == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
    lua_pop(L, 1);
    return;
  }
  if (ty == LUA_TBOOLEAN) { /* true */
    s->sparse = 1;
    s->coverage = 0.25;
    s->sink = s->block;
    s->recent = 2 * s->block;
    lua_pop(L, 1);
    return;
  }
  if (ty != LUA_TTABLE) {
    char v[96];
    fmt_value(L, -1, v, sizeof v);
    fail(c, "sparse = %s is %s; allowed: %s", v, a_type(L, -1), what);
  }
  int sp = lua_gettop(L);
  check_keys(c, sp, "sparse", SPARSE_FIELDS, N_SPARSE_FIELDS);

  int enabled = 1;
  if (get(c, sp, "enabled") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TBOOLEAN) {
      char v[96];
      fmt_value(L, -1, v, sizeof v);
      fail(c, "sparse.enabled = %s is %s; allowed: true or false", v, a_type(L, -1));
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
    fmt_value(L, -1, covs, sizeof covs);
    if (!(cov > 0 && cov <= 1)) fail(c, "sparse.coverage = %s is out of range; allowed: %s", covs, allowed);
  }
  lua_pop(L, 1);
  int64_t budget = 0;
  if (get(c, sp, "budget") != LUA_TNIL) {
    char bs[96];
    fmt_value(L, -1, bs, sizeof bs);
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
  lua_pop(L, 1); /* the sparse table */

  if (!enabled) return; /* dense; only block is kept */
  s->sparse = 1;
  s->coverage = budget ? 0 : cov;
  s->budget = budget;
  s->sink = (int)sink;
  s->recent = (int)recent;
}

static void check_archs(checker *c, int t, qgen_spec *s) {
  lua_State *L = c->L;
  char archs[160], what[200];
  arch_list(archs, sizeof archs);
  snprintf(what, sizeof what, "a list of one or more of %s", archs);
  int seen[N_ARCHS] = {0};
  char v[96];
  int ty = get(c, t, "archs");
  if (ty == LUA_TNIL) {
    s->n_archs = 2;
    s->archs[0] = 80;
    s->archs[1] = 90;
    lua_pop(L, 1);
    return;
  }
  fmt_value(L, -1, v, sizeof v);
  if (ty != LUA_TTABLE) fail(c, "archs = %s is %s; allowed: %s", v, a_type(L, -1), what);
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
    fmt_key(L, -2, "archs", key, sizeof key);
    if (!lua_isinteger(L, -2) || lua_tointeger(L, -2) < 1 || lua_tointeger(L, -2) > count)
      fail(c, "%s is not a list entry; allowed: %s", key, what);
    size_t len;
    const char *str = to_string(c, key, what, &len);
    int k = -1;
    for (int i = 0; i < N_ARCHS && k < 0; i++)
      if (!strcmp(str, ARCHS[i].name)) k = i;
    if (k < 0) {
      fmt_value(L, -1, v, sizeof v);
      /* "sm_" digits below 80: a real but too old architecture */
      int digits = len > 3 && len < 7 && !strncmp(str, "sm_", 3);
      for (size_t i = 3; digits && i < len; i++) digits = isdigit((unsigned char)str[i]) != 0;
      if (digits && atoi(str + 3) < 80)
        fail(c, "%s = %s is not supported: qgen kernels need sm_80 or newer; allowed: %s", key, v, archs);
      fail(c, "%s = %s is not a known architecture; allowed: %s", key, v, archs);
    }
    seen[k] = 1;
    lua_pop(L, 1);
  }
  s->n_archs = 0;
  for (int i = 0; i < N_ARCHS; i++)
    if (seen[i] && s->n_archs < QGEN_MAX_ARCHS) s->archs[s->n_archs++] = ARCHS[i].cc;
  lua_pop(L, 1);
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
  s->in_type = type_field(c, t, "in_type", 2, QGEN_TYPE_F16);
  s->out_type = type_field(c, t, "out_type", 2, QGEN_TYPE_F16);
  s->scale = 1.0 / sqrt((double)s->head_dim);
  if (get(c, t, "scale") != LUA_TNIL) {
    const char *allowed = "a finite number > 0 (default: 1/sqrt(head_dim))";
    double x = to_number(c, "scale", allowed);
    if (!(isfinite(x) && x > 0)) {
      char v[96];
      fmt_value(L, -1, v, sizeof v);
      fail(c, "scale = %s is %s; allowed: %s", v, isfinite(x) ? "not positive" : "not finite", allowed);
    }
    s->scale = x;
  }
  lua_pop(L, 1);
  check_sparse(c, t, s);
  check_archs(c, t, s);
}

/* ---------------------------------------------------------------------------------
 * The sandbox's own functions
 * ------------------------------------------------------------------------------- */

static const char MARKS = 'm'; /* registry[&MARKS] = { [spec table] = line } */

/* spec{...}: validate now, remember the line, return the table. */
static int l_spec(lua_State *L) {
  checker c = {L, line_at(L, 1), ""};
  if (lua_gettop(L) != 1 || lua_type(L, 1) != LUA_TTABLE)
    raise_at(L, c.line, "spec expects one table, as in spec{ name = ..., ... }; got %s",
                    lua_gettop(L) ? a_type(L, 1) : "nothing");
  qgen_spec s;
  check_spec(&c, 1, &s);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &MARKS);
  lua_pushvalue(L, 1);
  lua_pushinteger(L, c.line);
  lua_rawset(L, -3);
  lua_settop(L, 1);
  return 1;
}

static void print_out(sandbox *sb, const char *s, size_t len) {
  if (sb->printed >= SPEC_PRINT_MAX) return;
  size_t room = SPEC_PRINT_MAX - sb->printed;
  fwrite(s, 1, len < room ? len : room, stderr);
  sb->printed += len < room ? len : room;
  if (len >= room) {
    fputs("\n[print output truncated]\n", stderr);
    sb->printed = SPEC_PRINT_MAX;
  }
}

static int l_print(lua_State *L) {
  sandbox *sb = sb_of(L);
  int n = lua_gettop(L);
  for (int i = 1; i <= n; i++) {
    size_t len;
    const char *s = luaL_tolstring(L, i, &len);
    if (i > 1) print_out(sb, "\t", 1);
    print_out(sb, s, len);
    lua_pop(L, 1);
  }
  print_out(sb, "\n", 1);
  return 0;
}

/* string.dump, string.find, ...: raise "<name> is not available in a spec (<why>)" */
static int l_unavailable(lua_State *L) {
  raise_at(L, line_at(L, 1), "%s is not available in a spec (%s)",
                  lua_tostring(L, lua_upvalueindex(1)), lua_tostring(L, lua_upvalueindex(2)));
}

/* Call the original library function (upvalue 1) with the same arguments. */
static int call_original(lua_State *L) {
  int n = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, n, LUA_MULTRET);
  return lua_gettop(L);
}

/* Library calls that could loop for long without allocating anything (so neither the
   memory limit nor the hooks, which run between calls, would stop them) get a bound:
   - table.move moves nils between plain tables for free, over any range;
   - table.insert/remove/sort walk #t, and a table holding only t[1], t[2], t[4], ...,
     t[2^62] has a border #t near 2^62;
   - string.rep of an empty string (and separator) loops n times making nothing. */
static int l_move(lua_State *L) {
  lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
  if (e >= f && (lua_Unsigned)e - (lua_Unsigned)f >= (lua_Unsigned)SPEC_ELEMS_MAX)
    raise_at(L, line_at(L, 1), "table.move of elements %lld..%lld is too many; allowed: at most %lld",
             (long long)f, (long long)e, (long long)SPEC_ELEMS_MAX);
  return call_original(L);
}

static int l_walk_list(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Unsigned n = lua_rawlen(L, 1); /* = #t: there are no metatables */
  if (n > (lua_Unsigned)SPEC_ELEMS_MAX)
    raise_at(L, line_at(L, 1), "%s on a table of length %llu; allowed: a length of at most %lld",
             lua_tostring(L, lua_upvalueindex(2)), (unsigned long long)n, (long long)SPEC_ELEMS_MAX);
  return call_original(L);
}

static int l_rep(lua_State *L) {
  size_t l, lsep;
  luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_optlstring(L, 3, "", &lsep);
  if (n <= 0 || l + lsep == 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  return call_original(L);
}

/* xpcall's message handler runs where the error was raised. For the limit error that is
   inside the count hook, where hooks are off: a handler that loops would never stop. So
   the user's handler is skipped once a limit has tripped. */
static int l_msgh(lua_State *L) {
  if (sb_of(L)->tripped) return 1;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

static int l_xpcall(lua_State *L) {
  int n = lua_gettop(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, l_msgh, 1);
  lua_replace(L, 2);                 /* f, msgh, args... */
  lua_pushvalue(L, 1);               /* f */
  lua_pushvalue(L, 2);               /* msgh */
  lua_replace(L, 1);                 /* msgh, msgh, args..., f */
  lua_replace(L, 2);                 /* msgh, f, args... */
  int st = lua_pcall(L, n - 2, LUA_MULTRET, 1);
  lua_pushboolean(L, st == LUA_OK);
  lua_replace(L, 1);
  return lua_gettop(L);
}

static const char *const GONE[] = {"io", "os", "package", "debug", "coroutine", "utf8",
                                   "require", "load", "loadfile", "dofile", "loadstring",
                                   "collectgarbage", "setmetatable", "warn", "module", NULL};

/* __index of _G: reading an undefined global is an error. */
static int l_global(lua_State *L) {
  char v[96];
  if (lua_type(L, 2) == LUA_TSTRING) {
    const char *k = lua_tostring(L, 2);
    for (int i = 0; GONE[i]; i++)
      if (!strcmp(k, GONE[i]))
        raise_at(L, line_at(L, 1),
                        "'%s' is not available in a spec (the sandbox has only base, string, table and math)",
                        k);
  }
  fmt_key(L, 2, "", v, sizeof v);
  raise_at(L, line_at(L, 1), "undefined global '%s' (a string needs quotes: \"...\")", v);
}

static void open_sandbox(lua_State *L) {
  static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},
                                  {LUA_STRLIBNAME, luaopen_string},
                                  {LUA_TABLIBNAME, luaopen_table},
                                  {LUA_MATHLIBNAME, luaopen_math},
                                  {NULL, NULL}};
  for (const luaL_Reg *l = libs; l->name; l++) {
    luaL_requiref(L, l->name, l->func, 1);
    lua_pop(L, 1);
  }
  lua_pushglobaltable(L);
  int g = lua_gettop(L);
  for (int i = 0; GONE[i]; i++) {
    lua_pushnil(L);
    lua_setfield(L, g, GONE[i]);
  }
  lua_pushcfunction(L, l_print);
  lua_setfield(L, g, "print");
  lua_pushcfunction(L, l_spec);
  lua_setfield(L, g, "spec");
  lua_pushcfunction(L, l_xpcall);
  lua_setfield(L, g, "xpcall");

  static const struct { const char *name, *why; } str_gone[] = {
      {"dump", "bytecode is not allowed"},
      {"find", "pattern matching has no time bound"},
      {"match", "pattern matching has no time bound"},
      {"gmatch", "pattern matching has no time bound"},
      {"gsub", "pattern matching has no time bound"},
  };
  lua_getfield(L, g, LUA_STRLIBNAME);
  for (size_t i = 0; i < sizeof str_gone / sizeof *str_gone; i++) {
    lua_pushfstring(L, "string.%s", str_gone[i].name);
    lua_pushstring(L, str_gone[i].why);
    lua_pushcclosure(L, l_unavailable, 2);
    lua_setfield(L, -2, str_gone[i].name);
  }

  lua_getfield(L, -1, "rep");
  lua_pushcclosure(L, l_rep, 1);
  lua_setfield(L, -2, "rep");
  lua_pop(L, 1);

  lua_getfield(L, g, LUA_TABLIBNAME);
  lua_getfield(L, -1, "move");
  lua_pushcclosure(L, l_move, 1);
  lua_setfield(L, -2, "move");
  static const char *const walkers[] = {"insert", "remove", "sort"};
  for (int i = 0; i < 3; i++) {
    lua_getfield(L, -1, walkers[i]);
    lua_pushfstring(L, "table.%s", walkers[i]);
    lua_pushcclosure(L, l_walk_list, 2);
    lua_setfield(L, -2, walkers[i]);
  }
  lua_pop(L, 1);

  lua_getfield(L, g, LUA_MATHLIBNAME); /* deterministic math.random */
  lua_getfield(L, -1, "randomseed");
  lua_pushinteger(L, 0);
  lua_call(L, 1, 0);
  lua_pop(L, 1);

  lua_pushliteral(L, ""); /* lock the string metatable */
  if (lua_getmetatable(L, -1)) {
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
  }
  lua_pop(L, 1);

  lua_newtable(L); /* strict globals */
  lua_pushcfunction(L, l_global);
  lua_setfield(L, -2, "__index");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, g);
  lua_pop(L, 1);

  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &MARKS);
}

/* ---------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------- */

typedef struct job {
  const char *src;
  size_t len;
  qgen_spec_set *set;
} job;

/* Line of a table marked by spec{}, -1 when it is not marked. */
static int mark_of(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &MARKS);
  lua_pushvalue(L, idx);
  int line = lua_rawget(L, -2) == LUA_TNUMBER ? (int)lua_tointeger(L, -1) : -1;
  lua_pop(L, 2);
  return line;
}

/* Validate what the chunk returned (at idx) into j->set. */
static void take_result(lua_State *L, int idx, job *j) {
  checker c = {L, 0, ""};
  int ty = lua_type(L, idx);
  if (ty != LUA_TTABLE)
    fail(&c, "the spec returned %s; allowed: a spec table (spec{...}) or a list of them", a_type(L, idx));
  int line = mark_of(L, idx);
  int is_list = line < 0;
  lua_Integer count = 0;
  if (is_list) { /* a list has only integer keys */
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      lua_pop(L, 1);
      if (!lua_isinteger(L, -1)) {
        is_list = 0;
        lua_pop(L, 1);
        break;
      }
      count++;
    }
  }
  if (is_list && count == 0)
    fail(&c, "the spec returned an empty table; allowed: a spec table (spec{...}) or a non-empty list of them");
  if (!is_list) {
    c.line = line > 0 ? line : 0;
    check_spec(&c, idx, &j->set->v[0]);
    j->set->n = 1;
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
      fail(&c, "variant %d is %s; allowed: a spec table (spec{...})", i + 1, a_type(L, -1));
    line = mark_of(L, -1);
    c.line = line > 0 ? line : 0;
    lua_pushliteral(L, "name");
    if (lua_rawget(L, -2) == LUA_TSTRING) {
      char v[96];
      fmt_value(L, -1, v, sizeof v);
      qgen_fmt(c.ctx, sizeof c.ctx, "variant %d (%s): ", i + 1, v);
    } else {
      qgen_fmt(c.ctx, sizeof c.ctx, "variant %d: ", i + 1);
    }
    lua_pop(L, 1);
    qgen_spec *s = &j->set->v[i];
    check_spec(&c, -1, s);
    for (int k = 0; k < i; k++)
      if (!strcmp(j->set->v[k].name, s->name)) {
        qgen_fmt(c.ctx, sizeof c.ctx, "variant %d: ", i + 1);
        fail(&c, "name = \"%s\" is already used by variant %d; allowed: a distinct name per variant", s->name,
             k + 1);
      }
    lua_pop(L, 1);
  }
  j->set->n = (int)count;
}

static int pmain(lua_State *L) {
  job *j = lua_touserdata(L, 1);
  sandbox *sb = sb_of(L);
  lua_settop(L, 0);
  open_sandbox(L);

  char chunkname[4096 + 2];
  qgen_fmt(chunkname, sizeof chunkname, "@%s", sb->path);
  /* Lua's spelling of the chunk name in its own messages (shortened when long) */
  if (luaL_loadbufferx(L, "return", 6, chunkname, "t") == LUA_OK) {
    lua_Debug ar;
    if (lua_getinfo(L, ">S", &ar)) memcpy(sb->short_src, ar.short_src, sizeof sb->short_src);
  }
  lua_settop(L, 0);

  const char *src = j->src;
  size_t len = j->len;
  if (len >= 3 && !memcmp(src, "\xEF\xBB\xBF", 3)) src += 3, len -= 3; /* UTF-8 BOM */
  if (len && src[0] == LUA_SIGNATURE[0])
    raise_at(L, 0, "this is a precompiled Lua chunk (binary); specs must be Lua source text");
  if (len && src[0] == '#') /* a #! line: skip it but keep its newline for line numbers */
    while (len && *src != '\n') src++, len--;
  if (luaL_loadbufferx(L, src, len, chunkname, "t") != LUA_OK) return lua_error(L);

  sb->steps = 0;
  lua_sethook(L, sb_hook, SPEC_HOOK_MASK, SPEC_HOOK_EVERY);
  sb->L = L;
  lua_call(L, 0, LUA_MULTRET);
  sb->L = NULL;
  lua_sethook(L, NULL, 0, 0);
  if (sb->tripped) {
    char msg[128];
    raise_at(L, 0, "%s", trip_message(sb, msg, sizeof msg));
  }
  int n = lua_gettop(L);
  checker c = {L, 0, ""};
  if (n == 0) fail(&c, "the spec returned nothing; allowed: return spec{...} or a list of them");
  if (n > 1)
    fail(&c, "the spec returned %d values; allowed: one spec table, or a list of variants: return { spec{...}, spec{...} }",
         n);
  take_result(L, 1, j);
  return 0;
}

/* Copy msg into err as one line; a message that does not start with the path gets
   "path: " in front, and Lua's shortened spelling of a long path is replaced. */
static void set_error(char *err, size_t errlen, const sandbox *sb, const char *msg, size_t len) {
  if (!err || !errlen) return;
  size_t sl = strlen(sb->short_src), pl = strlen(sb->path);
  if (sl && len > sl && !memcmp(msg, sb->short_src, sl) && msg[sl] == ':' &&
      !(len > pl && !memcmp(msg, sb->path, pl) && msg[pl] == ':')) {
    msg += sl;
    len -= sl;
    qgen_fmt(err, errlen, "%s%.*s", sb->path, (int)(len > INT_MAX ? INT_MAX : len), msg);
  } else if (len > pl && !memcmp(msg, sb->path, pl) && msg[pl] == ':') {
    qgen_fmt(err, errlen, "%.*s", (int)(len > INT_MAX ? INT_MAX : len), msg);
  } else {
    qgen_fmt(err, errlen, "%s: %.*s", sb->path, (int)(len > INT_MAX ? INT_MAX : len), msg);
  }
  for (char *p = err; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
}

int qgen_spec_load_string(const char *chunkname, const char *src, size_t len, qgen_spec_set *out,
                          char *err, size_t errlen) {
  sandbox sb;
  job j;
  qgen_spec_set *set = malloc(sizeof *set);
  if (err && errlen) err[0] = 0;
  if (out) out->n = 0;
  if (!chunkname) chunkname = "spec";
  memset(&sb, 0, sizeof sb);
  sb.mem_limit = SPEC_MEM_LIMIT;
  sb.path = chunkname;
  sb.t0 = qgen_now_ms();
  if (!set || !src || !out) {
    free(set);
    qgen_fmt(err, errlen, "%s: %s", chunkname, set ? "no spec source" : "out of memory");
    return -1;
  }
  memset(set, 0, sizeof *set);
  j.src = src;
  j.len = len;
  j.set = set;
  lua_State *L = lua_newstate(sb_alloc, &sb);
  if (!L) {
    free(set);
    qgen_fmt(err, errlen, "%s: cannot create a Lua state (out of memory)", chunkname);
    return -1;
  }
  lua_pushcfunction(L, pmain);
  lua_pushlightuserdata(L, &j);
  int st = lua_pcall(L, 1, 0, 0);
  if (st != LUA_OK) {
    char buf[512];
    const char *msg = buf;
    size_t mlen;
    if (st == LUA_ERRMEM && sb.tripped) { /* could not even raise the limit error */
      trip_message(&sb, buf, sizeof buf);
    } else if (st == LUA_ERRMEM) {
      qgen_fmt(buf, sizeof buf, "memory limit exceeded (the spec used more than %zu MiB)",
               (size_t)(SPEC_MEM_LIMIT >> 20));
    } else if (lua_type(L, -1) == LUA_TSTRING) {
      msg = lua_tolstring(L, -1, &mlen);
    } else if (lua_type(L, -1) == LUA_TNUMBER) { /* no lua_tostring: it would allocate */
      if (lua_isinteger(L, -1))
        qgen_fmt(buf, sizeof buf, "%lld", (long long)lua_tointeger(L, -1));
      else
        fmt_double(buf, sizeof buf, (double)lua_tonumber(L, -1));
    } else {
      qgen_fmt(buf, sizeof buf, "error object is %s value", a_type(L, -1));
    }
    if (msg == buf) mlen = strlen(buf);
    static const char nem[] = "not enough memory"; /* a memory error raised again by error() */
    const size_t nl = sizeof nem - 1;
    if (sb.mem_refused && msg != buf && mlen >= nl && !memcmp(msg + mlen - nl, nem, nl)) {
      qgen_fmt(buf, sizeof buf, "%.*smemory limit exceeded (the spec used more than %zu MiB)",
               (int)(mlen - nl < 400 ? mlen - nl : 0), msg, (size_t)(SPEC_MEM_LIMIT >> 20));
      msg = buf;
      mlen = strlen(buf);
    }
    set_error(err, errlen, &sb, msg, mlen);
  } else {
    memcpy(out, set, sizeof *set);
  }
  sb.L = NULL;
  lua_close(L);
  free(set);
  return st == LUA_OK ? 0 : -1;
}

int qgen_spec_load(const char *path, qgen_spec_set *out, char *err, size_t errlen) {
  size_t len = 0;
  char rerr[512];
  if (out) out->n = 0;
  char *src = qgen_read_file(path, SPEC_FILE_MAX, &len, rerr, sizeof rerr);
  if (!src) {
    qgen_fmt(err, errlen, "%s", rerr);
    return -1;
  }
  int rc = qgen_spec_load_string(path, src, len, out, err, errlen);
  free(src);
  return rc;
}

const qgen_spec *qgen_spec_find(const qgen_spec_set *set, const char *name) {
  if (!set || set->n <= 0) return NULL;
  if (!name || !*name) return &set->v[0];
  for (int i = 0; i < set->n && i < QGEN_MAX_VARIANTS; i++)
    if (!strcmp(set->v[i].name, name)) return &set->v[i];
  return NULL;
}

static const char *type_name(qgen_type t) {
  const qgen_type_traits *tr = qgen_type_traits_of(t);
  return tr ? tr->name : "?";
}

static const char *arch_name(int cc) {
  for (int i = 0; i < N_ARCHS; i++)
    if (ARCHS[i].cc == cc) return ARCHS[i].name;
  return "sm_?";
}

int qgen_spec_to_lua(const qgen_spec *s, char *buf, size_t n) {
  char scale[40], cov[40], tail[96];
  size_t o = 0;
  int w;
  if (!s || !buf) return -1;
#define PUT(...)                                                   \
  do {                                                             \
    w = snprintf(buf + o, o < n ? n - o : 0, __VA_ARGS__);         \
    if (w < 0) return -1;                                          \
    o += (size_t)w;                                                \
  } while (0)
  fmt_double(scale, sizeof scale, s->scale);
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
      fmt_double(cov, sizeof cov, s->coverage);
      qgen_fmt(tail, sizeof tail, "coverage = %s", cov);
    }
    PUT("  sparse = { enabled = true, block = %d, %s, sink = %d, recent = %d },\n", s->block, tail,
        s->sink, s->recent);
  }
  PUT("  archs = {");
  for (int i = 0; i < s->n_archs && i < QGEN_MAX_ARCHS; i++) PUT("%s\"%s\"", i ? ", " : " ", arch_name(s->archs[i]));
  PUT(" },\n}\n");
#undef PUT
  return o < n ? (int)o : -1;
}

void qgen_spec_uri(const qgen_spec *s, char *buf, size_t n) {
  if (!buf || !n) return;
  qgen_fmt(buf, n, "%s_d%d_h%d_g%d_k%s_v%s_i%s_o%s_b%d_%s", s->name, s->head_dim, s->n_head,
           s->n_head_kv > 0 ? s->n_head / s->n_head_kv : 0, type_name(s->k_type), type_name(s->v_type),
           type_name(s->in_type), type_name(s->out_type), s->block, s->sparse ? "sparse" : "dense");
}
