/* sandbox.c — the Lua sandbox a spec runs in, and loading (see spec.h, DESIGN.md §4).
 *
 * A load runs the chunk here and hands what it returned to validate.c.
 *
 * The sandbox: a fresh lua_State per load with an allocator capped at 64 MiB; only the
 * base, string, table and math libraries; no dofile, loadfile, load, require,
 * collectgarbage, setmetatable, warn or string.dump; no io, os, package, debug, coroutine,
 * utf8. Reading an undefined global is an error (it catches `k_type = q8_0`). print writes
 * to stderr (64 KiB at most). Source text only (1 MiB at most): a precompiled chunk is
 * refused. At most 50 million VM instructions, where work done inside one instruction
 * counts too: 16 bytes allocated count as one, and table.move/insert/remove/sort count
 * the elements they move or compare. A spec that keeps running into the 64 MiB (each
 * refusal forces a full collection) is out of memory once those collections have walked
 * 16 times the limit. So the outcome depends on the spec, not on how loaded the machine
 * is; 30 s of wall time is a last resort for work nothing counts (comparing long strings).
 * The limits are checked by a count hook, a call hook and the allocator; once one trips,
 * every instruction and call raises again, so pcall cannot swallow it, and xpcall skips
 * its handler (which would run with hooks off).
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "base/util.h"
#include "spec/spec_int.h"

#define SPEC_FILE_MAX ((size_t)1 << 20)     /* bytes of source */
#define SPEC_MSG_MAX 1024                   /* bytes of an error message shown after the path */
#ifndef QGEN_SPEC_FUZZ_LIMITS
#define SPEC_MEM_LIMIT ((size_t)64 << 20)   /* bytes held by the Lua state */
#define SPEC_STEP_LIMIT 50000000LL          /* VM instructions */
#define SPEC_TIME_LIMIT_MS 30000.0          /* wall time of one load: a last resort */
#else /* fuzz/ builds: the same checks with smaller budgets, so a slow input stays cheap */
#define SPEC_MEM_LIMIT ((size_t)16 << 20)
#define SPEC_STEP_LIMIT 2000000LL
#define SPEC_TIME_LIMIT_MS 250.0
#endif
#define SPEC_HOOK_EVERY 1000                /* instructions between count hooks */
#define SPEC_HOOK_MASK (LUA_MASKCOUNT | LUA_MASKCALL)
#define SPEC_PRINT_MAX ((size_t)64 << 10)   /* bytes print may write */
#define SPEC_ELEMS_MAX ((lua_Integer)1 << 24) /* elements one table function may touch */
#define SPEC_BYTES_PER_STEP 16              /* bytes allocated that count as one instruction */
#define SPEC_GC_WALK_MAX (16 * (long long)SPEC_MEM_LIMIT) /* heap bytes forced collections walk */
#define MEM_LIMIT_TEXT "memory limit exceeded (the spec used more than %zu MiB)"

/* ---------------------------------------------------------------------------------
 * The sandbox state: reached from any lua_State through lua_getallocf.
 * ------------------------------------------------------------------------------- */

enum { TRIP_NONE, TRIP_STEPS, TRIP_MEM, TRIP_TIME };

typedef struct sandbox {
  size_t mem, mem_limit;
  int mem_refused;          /* the allocator said no at least once */
  long long steps;          /* VM instructions so far, and work charged as instructions */
  long long gc_walked;      /* heap bytes that collections forced by a refusal walked */
  double t0;                /* qgen_now_ms() at the start */
  int tripped;              /* TRIP_*: sticky */
  lua_State *L;             /* set while the chunk runs (hook installed) */
  size_t printed;           /* bytes written by print */
  const char *path;         /* chunk name as given, used in every message */
  const char *src;          /* the chunk's source as Lua reads it (lines from 1), while it runs */
  size_t src_len;
  char short_src[LUA_IDSIZE]; /* Lua's (maybe shortened) spelling of path */
} sandbox;

static sandbox *box_of(lua_State *L) {
  void *ud = NULL;
  lua_getallocf(L, &ud);
  return ud;
}

static void box_hook(lua_State *L, lua_Debug *ar);

/* Trip a limit (sticky): from now on the hook runs at every instruction and call, and
   raises (lua_sethook is safe anywhere, the allocator included). */
static void box_trip(sandbox *box, lua_State *L, int why) {
  box->tripped = why;
  lua_sethook(L, box_hook, SPEC_HOOK_MASK, 1);
}

/* Work done inside one instruction (a library call allocating or walking a table) counts
   against the instruction budget, so a loop of a few slow instructions stops after as
   much work as a long loop of fast ones, however loaded the machine is. */
static void box_charge(sandbox *box, long long steps) {
  if (box->tripped || !box->L) return;
  box->steps += steps;
  if (box->steps > SPEC_STEP_LIMIT) box_trip(box, box->L, TRIP_STEPS);
}

/* The wall-clock check of the allocator, a last resort: a slow library call allocates,
   so a loop of a few instructions meets the clock between two count hooks. */
static void box_check_time(sandbox *box) {
  if (box->tripped || !box->L || qgen_now_ms() - box->t0 <= SPEC_TIME_LIMIT_MS) return;
  box_trip(box, box->L, TRIP_TIME);
}

/* A refused allocation makes Lua run a full collection and try again. A spec that lives
   at the memory limit (freeing a little, refused again) would spend its time there, so
   once those collections have walked SPEC_GC_WALK_MAX bytes the memory limit counts as
   exceeded, even where a caller (pcall, the string table's resize) survived each one. */
static void box_refused(sandbox *box) {
  box->mem_refused = 1;
  if (box->tripped || !box->L) return;
  box->gc_walked += (long long)box->mem;
  if (box->gc_walked > SPEC_GC_WALK_MAX) box_trip(box, box->L, TRIP_MEM);
}

static void *box_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  sandbox *box = ud;
  size_t old = ptr ? osize : 0; /* with ptr NULL, osize is a type tag */
  if (nsize == 0) {
    free(ptr);
    box->mem -= old;
    return NULL;
  }
  if (nsize > old && nsize - old > box->mem_limit - box->mem) {
    box_refused(box);
    box_check_time(box);
    return NULL;
  }
  if (nsize > old) box_charge(box, (long long)((nsize - old) / SPEC_BYTES_PER_STEP));
  if (nsize >= ((size_t)64 << 10)) box_check_time(box);
  void *p = realloc(ptr, nsize);
  if (!p && nsize <= old) p = ptr; /* Lua assumes shrinking never fails: keep the block */
  if (!p) {
    box_refused(box);
    return NULL;
  }
  box->mem = box->mem - old + nsize;
  return p;
}

int spec_line_at(lua_State *L, int level) {
  lua_Debug ar;
  if (!lua_getstack(L, level, &ar) || !lua_getinfo(L, "l", &ar)) return 0;
  return ar.currentline > 0 ? ar.currentline : 0;
}

/* "path:line: msg" or "path: msg" (the path whole, however long) */
_Noreturn void spec_raise_at(lua_State *L, int line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (line > 0)
    lua_pushfstring(L, "%s:%d: %s", box_of(L)->path, line, msg);
  else
    lua_pushfstring(L, "%s: %s", box_of(L)->path, msg);
  lua_error(L);
  abort(); /* not reached: lua_error does not return */
}

/* ---------------------------------------------------------------------------------
 * Lines of fields. A table constructor keeps no positions, so a field's line comes from
 * the source text: a small Lua lexer finds the spec{} call's constructor and, in it, the
 * field's key.
 * ------------------------------------------------------------------------------- */

enum { TOK_END, TOK_NAME, TOK_STRING, TOK_EQ, TOK_OTHER };

typedef struct lexer {
  const char *p, *end;
  int line;
  /* the token read last */
  int tok, tok_line;
  const char *text;
  size_t len;
  char ch; /* TOK_OTHER: the character */
} lexer;

static void lx_newline(lexer *x) {
  const char c = *x->p++;
  if (x->p < x->end && (*x->p == '\n' || *x->p == '\r') && *x->p != c) x->p++; /* \r\n, \n\r: one line */
  x->line++;
}

/* At "[" "="* "[": skip the long bracket and return 1; else 0, nothing moved. */
static int lx_long(lexer *x) {
  const char *q = x->p + 1;
  while (q < x->end && *q == '=') q++;
  if (q >= x->end || *q != '[') return 0;
  const size_t level = (size_t)(q - x->p - 1);
  x->p = q + 1;
  while (x->p < x->end) {
    if (*x->p == '\n' || *x->p == '\r') {
      lx_newline(x);
      continue;
    }
    if (*x->p == ']') {
      const char *r = x->p + 1;
      while (r < x->end && *r == '=') r++;
      if (r < x->end && *r == ']' && (size_t)(r - x->p - 1) == level) {
        x->p = r + 1;
        return 1;
      }
    }
    x->p++;
  }
  return 1;
}

static void lx_next(lexer *x) {
  for (;;) {
    while (x->p < x->end && (*x->p == ' ' || *x->p == '\t' || *x->p == '\f' || *x->p == '\v' || *x->p == '\n' || *x->p == '\r')) {
      if (*x->p == '\n' || *x->p == '\r') lx_newline(x);
      else x->p++;
    }
    if (x->p + 1 < x->end && x->p[0] == '-' && x->p[1] == '-') { /* a comment */
      x->p += 2;
      if (x->p < x->end && *x->p == '[' && lx_long(x)) continue;
      while (x->p < x->end && *x->p != '\n' && *x->p != '\r') x->p++;
      continue;
    }
    break;
  }
  x->tok_line = x->line;
  x->text = x->p;
  x->len = 0;
  if (x->p >= x->end) {
    x->tok = TOK_END;
    return;
  }
  const char c = *x->p;
  if (isalpha((unsigned char)c) || c == '_') {
    while (x->p < x->end && (isalnum((unsigned char)*x->p) || *x->p == '_')) x->p++;
    x->tok = TOK_NAME;
  } else if (isdigit((unsigned char)c) || (c == '.' && x->p + 1 < x->end && isdigit((unsigned char)x->p[1]))) {
    while (x->p < x->end && (isalnum((unsigned char)*x->p) || *x->p == '.' ||
                             ((*x->p == '+' || *x->p == '-') && strchr("eEpP", x->p[-1]))))
      x->p++;
    x->tok = TOK_OTHER, x->ch = '0';
  } else if (c == '"' || c == '\'') {
    x->p++;
    x->text = x->p;
    while (x->p < x->end && *x->p != c && *x->p != '\n' && *x->p != '\r') {
      if (*x->p == '\\' && x->p + 1 < x->end) {
        x->p++;
        if (*x->p == '\n' || *x->p == '\r') {
          lx_newline(x);
          continue;
        }
        if (*x->p == 'z') { /* \z skips the white space after it, newlines too */
          x->p++;
          while (x->p < x->end && isspace((unsigned char)*x->p)) {
            if (*x->p == '\n' || *x->p == '\r') lx_newline(x);
            else x->p++;
          }
          continue;
        }
      }
      x->p++;
    }
    x->len = (size_t)(x->p - x->text);
    if (x->p < x->end && *x->p == c) x->p++;
    x->tok = TOK_STRING;
    return;
  } else if (c == '[' && lx_long(x)) {
    x->tok = TOK_STRING; /* a long string; its text is not needed */
    return;
  } else if (c == '=') {
    x->p++;
    if (x->p < x->end && *x->p == '=') x->p++, x->tok = TOK_OTHER, x->ch = '~'; /* == */
    else x->tok = TOK_EQ;
    return;
  } else {
    x->p++;
    x->tok = TOK_OTHER, x->ch = c;
    return;
  }
  x->len = (size_t)(x->p - x->text);
}

int spec_field_line(lua_State *L, int call_line, const char *path) {
  const sandbox *box = box_of(L);
  if (!box->src || call_line <= 0 || !path || !*path) return call_line;
  lexer x = {box->src, box->src + box->src_len, 1, TOK_END, 0, NULL, 0, 0};
  /* the constructor of the first spec{...} or spec({...}) on call_line */
  lx_next(&x);
  for (;;) {
    if (x.tok == TOK_END || x.tok_line > call_line) return call_line;
    if (x.tok == TOK_NAME && x.tok_line == call_line && x.len == 4 && !memcmp(x.text, "spec", 4)) {
      lx_next(&x);
      if (x.tok == TOK_OTHER && x.ch == '(') lx_next(&x);
      if (x.tok == TOK_OTHER && x.ch == '{') break;
      continue;
    }
    lx_next(&x);
  }
  /* down the path, one table constructor per component: at the constructor's own depth, a
     key is a name (or a ["string"]) after '{', ',' or ';' and before '=' */
  int line = call_line, depth = 1, want = 1;
  const char *comp = path;
  char prev = '{';
  lx_next(&x);
  while (x.tok != TOK_END && depth >= want) {
    const size_t clen = strcspn(comp, ".[");
    if (depth == want && (prev == '{' || prev == ',' || prev == ';') && (x.tok == TOK_NAME || (x.tok == TOK_OTHER && x.ch == '['))) {
      const char *key = NULL;
      size_t klen = 0;
      int kline = x.tok_line;
      if (x.tok == TOK_NAME) {
        key = x.text, klen = x.len;
        lx_next(&x);
      } else {
        lx_next(&x);
        if (x.tok == TOK_STRING) key = x.text, klen = x.len, lx_next(&x);
        if (key && x.tok == TOK_OTHER && x.ch == ']') lx_next(&x);
        else key = NULL;
      }
      if (x.tok == TOK_EQ && key && klen == clen && !memcmp(key, comp, clen)) {
        line = kline;
        if (comp[clen] != '.') return line; /* the last component (or an index into it) */
        comp += clen + 1;
        lx_next(&x);
        if (!(x.tok == TOK_OTHER && x.ch == '{')) return line; /* its value is not written here */
        want = ++depth;
        prev = '{';
        lx_next(&x);
        continue;
      }
      prev = 0;
      continue; /* x holds the token after the key: look at it again */
    }
    if (x.tok == TOK_OTHER && (x.ch == '{' || x.ch == '(' || x.ch == '[')) depth++;
    else if (x.tok == TOK_OTHER && (x.ch == '}' || x.ch == ')' || x.ch == ']')) depth--;
    prev = x.tok == TOK_OTHER ? x.ch : x.tok == TOK_EQ ? '=' : 0;
    lx_next(&x);
  }
  return line;
}

static const char *trip_message(const sandbox *box, char *buf, size_t n) {
  if (box->tripped == TRIP_STEPS)
    return qgen_fmt(buf, n, "instruction limit exceeded (%lld VM instructions; infinite loop?)",
                    (long long)SPEC_STEP_LIMIT);
  if (box->tripped == TRIP_MEM) return qgen_fmt(buf, n, MEM_LIMIT_TEXT, (size_t)(SPEC_MEM_LIMIT >> 20));
  return qgen_fmt(buf, n, "time limit exceeded (%.0f s; infinite loop?)", SPEC_TIME_LIMIT_MS / 1000);
}

/* Raise the tripped limit's error at the running Lua function's line. */
static _Noreturn void raise_trip(lua_State *L, const sandbox *box) {
  char msg[128];
  int line = spec_line_at(L, 0); /* the running function; for a call event, maybe a C one */
  spec_raise_at(L, line ? line : spec_line_at(L, 1), "%s", trip_message(box, msg, sizeof msg));
}

/* The limits. The count hook runs every SPEC_HOOK_EVERY instructions; the call hook on
   every call, so a loop of a few instructions around a slow library call still meets the
   limits often. Once a limit trips, every instruction and every call raises again: pcall
   cannot swallow it. */
static void box_hook(lua_State *L, lua_Debug *ar) {
  sandbox *box = box_of(L);
  if (!box->tripped) {
    if (ar->event == LUA_HOOKCOUNT) box->steps += SPEC_HOOK_EVERY;
    if (box->steps > SPEC_STEP_LIMIT)
      box_trip(box, L, TRIP_STEPS);
    else if (qgen_now_ms() - box->t0 > SPEC_TIME_LIMIT_MS)
      box_trip(box, L, TRIP_TIME);
    else
      return;
  }
  raise_trip(L, box);
}

/* ---------------------------------------------------------------------------------
 * The sandbox's own functions
 * ------------------------------------------------------------------------------- */

static void print_out(sandbox *box, const char *s, size_t len) {
  if (box->printed >= SPEC_PRINT_MAX) return;
  size_t room = SPEC_PRINT_MAX - box->printed;
  fwrite(s, 1, len < room ? len : room, stderr);
  box->printed += len < room ? len : room;
  if (len >= room) {
    fputs("\n[print output truncated]\n", stderr);
    box->printed = SPEC_PRINT_MAX;
  }
}

static int l_print(lua_State *L) {
  sandbox *box = box_of(L);
  int n = lua_gettop(L);
  for (int i = 1; i <= n; i++) {
    size_t len;
    const char *s = luaL_tolstring(L, i, &len);
    if (i > 1) print_out(box, "\t", 1);
    print_out(box, s, len);
    lua_pop(L, 1);
  }
  print_out(box, "\n", 1);
  return 0;
}

/* string.dump, string.find, ...: raise "<name> is not available in a spec (<why>)" */
static int l_unavailable(lua_State *L) {
  spec_raise_at(L, spec_line_at(L, 1), "%s is not available in a spec (%s)",
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
   - string.rep of an empty string (and separator) loops n times making nothing.
   Within the bound, the elements they touch are charged as instructions (box_charge). */
static void charge_call(lua_State *L, long long steps) {
  sandbox *box = box_of(L);
  box_charge(box, steps);
  if (box->tripped) raise_trip(L, box);
}

static int l_move(lua_State *L) {
  lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
  if (e >= f && (lua_Unsigned)e - (lua_Unsigned)f >= (lua_Unsigned)SPEC_ELEMS_MAX)
    spec_raise_at(L, spec_line_at(L, 1), "table.move of elements %lld..%lld is too many; allowed: at most %lld",
             (long long)f, (long long)e, (long long)SPEC_ELEMS_MAX);
  if (e >= f) charge_call(L, (long long)(e - f) + 1);
  return call_original(L);
}

enum { WALK_INSERT, WALK_REMOVE, WALK_SORT };
static const char *const WALKERS[] = {"insert", "remove", "sort"};

/* The elements a walker of a list of length n touches: insert(t, pos, v) and
   remove(t, pos) shift the entries from pos up; sort compares about n log2 n pairs. */
static long long walk_cost(lua_State *L, int kind, lua_Unsigned n) {
  long long cost = 0;
  if (kind == WALK_SORT) {
    for (lua_Unsigned m = n; m > 1; m >>= 1) cost += (long long)n;
    return cost;
  }
  int isnum = 0;
  lua_Integer pos = lua_gettop(L) >= (kind == WALK_INSERT ? 3 : 2) ? lua_tointegerx(L, 2, &isnum) : 0;
  if (isnum && pos >= 1 && (lua_Unsigned)pos <= n) cost = (long long)(n - (lua_Unsigned)pos) + 1;
  return cost;
}

static int l_walk_list(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Unsigned n = lua_rawlen(L, 1); /* = #t: there are no metatables */
  if (n > (lua_Unsigned)SPEC_ELEMS_MAX)
    spec_raise_at(L, spec_line_at(L, 1), "%s on a table of length %llu; allowed: a length of at most %lld",
             lua_tostring(L, lua_upvalueindex(2)), (unsigned long long)n, (long long)SPEC_ELEMS_MAX);
  charge_call(L, walk_cost(L, (int)lua_tointeger(L, lua_upvalueindex(3)), n));
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
  if (box_of(L)->tripped) return 1;
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
        spec_raise_at(L, spec_line_at(L, 1),
                        "'%s' is not available in a spec (the sandbox has only base, string, table and math)",
                        k);
  }
  spec_fmt_key(L, 2, "", v, sizeof v);
  spec_raise_at(L, spec_line_at(L, 1), "undefined global '%s' (a string needs quotes: \"...\")", v);
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
  lua_pushcfunction(L, spec_l_spec);
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
  for (int i = 0; i < (int)(sizeof WALKERS / sizeof *WALKERS); i++) {
    lua_getfield(L, -1, WALKERS[i]);
    lua_pushfstring(L, "table.%s", WALKERS[i]);
    lua_pushinteger(L, i);
    lua_pushcclosure(L, l_walk_list, 3);
    lua_setfield(L, -2, WALKERS[i]);
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

  spec_open_marks(L);
}

/* ---------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------- */

typedef struct job {
  const char *src;
  size_t len;
  qgen_spec_set *set;
} job;

static int pmain(lua_State *L) {
  job *j = lua_touserdata(L, 1);
  sandbox *box = box_of(L);
  lua_settop(L, 0);
  open_sandbox(L);

  char chunkname[4096 + 2];
  qgen_fmt(chunkname, sizeof chunkname, "@%s", box->path);
  /* Lua's spelling of the chunk name in its own messages (shortened when long) */
  if (luaL_loadbufferx(L, "return", 6, chunkname, "t") == LUA_OK) {
    lua_Debug ar;
    if (lua_getinfo(L, ">S", &ar)) memcpy(box->short_src, ar.short_src, sizeof box->short_src);
  }
  lua_settop(L, 0);

  const char *src = j->src;
  size_t len = j->len;
  if (len >= 3 && !memcmp(src, "\xEF\xBB\xBF", 3)) src += 3, len -= 3; /* UTF-8 BOM */
  if (len && src[0] == LUA_SIGNATURE[0])
    spec_raise_at(L, 0, "this is a precompiled Lua chunk (binary); specs must be Lua source text");
  if (len && src[0] == '#') /* a #! line: skip it but keep its newline for line numbers */
    while (len && *src != '\n') src++, len--;
  if (luaL_loadbufferx(L, src, len, chunkname, "t") != LUA_OK) return lua_error(L);
  box->src = src;
  box->src_len = len;

  box->steps = 0;
  lua_sethook(L, box_hook, SPEC_HOOK_MASK, SPEC_HOOK_EVERY);
  box->L = L;
  lua_call(L, 0, LUA_MULTRET);
  box->L = NULL;
  lua_sethook(L, NULL, 0, 0);
  if (box->tripped) {
    char msg[128];
    spec_raise_at(L, 0, "%s", trip_message(box, msg, sizeof msg));
  }
  int n = lua_gettop(L);
  if (n == 0) spec_raise_at(L, 0, "the spec returned nothing; allowed: return spec{...} or a list of them");
  if (n > 1)
    spec_raise_at(L, 0, "the spec returned %d values; allowed: one spec table, or a list of variants: return { spec{...}, spec{...} }",
         n);
  spec_take_result(L, 1, j->set);
  return 0;
}

/* Copy msg into err as one line: the path (whole: Lua's shortened spelling of a long one
   is replaced; "path: " in front of a message that names none), then the rest of the
   message, of which at most SPEC_MSG_MAX bytes (a spec's error() may raise any string). */
static void set_error(char *err, size_t errlen, const sandbox *box, const char *msg, size_t len) {
  if (!err || !errlen) return;
  size_t sl = strlen(box->short_src), pl = strlen(box->path);
  const char *sep = "";
  if (len > pl && !memcmp(msg, box->path, pl) && msg[pl] == ':')
    msg += pl, len -= pl;
  else if (sl && len > sl && !memcmp(msg, box->short_src, sl) && msg[sl] == ':')
    msg += sl, len -= sl;
  else
    sep = ": ";
  size_t keep = len;
  if (keep > SPEC_MSG_MAX) {
    keep = SPEC_MSG_MAX;
    while (keep && ((unsigned char)msg[keep] & 0xC0) == 0x80) keep--; /* not inside a UTF-8 character */
  }
  qgen_fmt(err, errlen, keep < len ? "%s%s%.*s... (%zu more bytes)" : "%s%s%.*s", box->path, sep, (int)keep, msg, len - keep);
  for (char *p = err; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
}

int qgen_spec_load_string(const char *chunkname, const char *src, size_t len, qgen_spec_set *out,
                          char *err, size_t errlen) {
  sandbox box;
  job j;
  qgen_spec_set *set = malloc(sizeof *set);
  if (err && errlen) err[0] = 0;
  if (out) out->n = 0;
  if (!chunkname) chunkname = "spec";
  memset(&box, 0, sizeof box);
  box.mem_limit = SPEC_MEM_LIMIT;
  box.path = chunkname;
  box.t0 = qgen_now_ms();
  if (!set || !src || !out) {
    free(set);
    qgen_fmt(err, errlen, "%s: %s", chunkname, set ? "no spec source" : "out of memory");
    return -1;
  }
  memset(set, 0, sizeof *set);
  j.src = src;
  j.len = len;
  j.set = set;
  lua_State *L = lua_newstate(box_alloc, &box);
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
    if (st == LUA_ERRMEM) { /* out of memory, or could not even raise the limit error */
      if (!box.tripped) box.tripped = TRIP_MEM;
      trip_message(&box, buf, sizeof buf);
    } else if (lua_type(L, -1) == LUA_TSTRING) {
      msg = lua_tolstring(L, -1, &mlen);
    } else if (lua_type(L, -1) == LUA_TNUMBER) { /* no lua_tostring: it would allocate */
      if (lua_isinteger(L, -1))
        qgen_fmt(buf, sizeof buf, "%lld", (long long)lua_tointeger(L, -1));
      else
        spec_fmt_double(buf, sizeof buf, (double)lua_tonumber(L, -1));
    } else {
      qgen_fmt(buf, sizeof buf, "error object is %s value", spec_a_type(L, -1));
    }
    if (msg == buf) mlen = strlen(buf);
    static const char nem[] = "not enough memory"; /* a memory error raised again by error() */
    const size_t nl = sizeof nem - 1;
    if (box.mem_refused && msg != buf && mlen >= nl && !memcmp(msg + mlen - nl, nem, nl)) {
      qgen_fmt(buf, sizeof buf, "%.*s" MEM_LIMIT_TEXT,
               (int)(mlen - nl < 400 ? mlen - nl : 0), msg, (size_t)(SPEC_MEM_LIMIT >> 20));
      msg = buf;
      mlen = strlen(buf);
    }
    set_error(err, errlen, &box, msg, mlen);
  } else {
    memcpy(out, set, sizeof *set);
  }
  box.L = NULL;
  lua_close(L);
  free(set);
  return st == LUA_OK ? 0 : -1;
}

int qgen_spec_load(const char *path, qgen_spec_set *out, char *err, size_t errlen) {
  size_t len = 0;
  char rerr[4096 + 256];
  if (out) out->n = 0;
  char *src = qgen_read_file(path, SPEC_FILE_MAX, &len, rerr, sizeof rerr);
  if (!src) {
    qgen_fmt(err, errlen, "%s", rerr);
    return -1;
  }
  struct stat st;
  if (len == 0 && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) { /* a FIFO nobody writes reads as empty */
    free(src);
    qgen_fmt(err, errlen, "%s: is not a regular file and nothing was read from it (a FIFO without a writer?)", path);
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
