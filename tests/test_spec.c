/* test_spec.c — unit tests of the sandboxed Lua spec loader (spec/).
 *
 * Covers: every spec in specs/ (loads, documented defaults, canonical text round trip,
 * URI), the field table of spec/fields.c (each default is the one applied, each field
 * reaches the canonical text, exactly the compiled ones reach the module name), every invalid spec in tests/specs_bad (fails with a message that names the file
 * and matches the file's "-- expect: REGEX" line), the defaults and edge cases of each
 * field, the sandbox (missing libraries, print to stderr, determinism, limits), bytecode
 * and file errors. Prints one line per check and "N passed, N failed"; exit 0 on success.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "spec/fields.h"
#include "spec/spec.h"
#include "base/util.h"

#include "testlib.h"

#ifndef QGEN_SOURCE_DIR
#define QGEN_SOURCE_DIR "."
#endif


/* Under valgrind (or with QGEN_TEST_SLOW set) the 30 s wall-clock limit may stop a spec
   before it has filled the 64 MiB memory limit; then that message is accepted too. */
static int slow_run(void) {
  const char *p = getenv("LD_PRELOAD");
  return (p && strstr(p, "vgpreload")) || getenv("QGEN_TEST_SLOW");
}

/* CPU time of this process in ms. The limits bound the work a spec does, so the checks
   that a limit stops it soon measure work too, which a loaded machine does not stretch. */
static double cpu_ms(void) { return 1000.0 * (double)clock() / CLOCKS_PER_SEC; }

/* err says the memory limit tripped (or, on a slow run, the time limit) */
static int memory_limit_hit(const char *e) {
  return strstr(e, "memory limit exceeded") || (slow_run() && strstr(e, "time limit exceeded"));
}


static qgen_spec_set set;
static char err[2048];

/* Load source text named "t.lua"; returns the loader's result. */
static int load(const char *src) {
  return qgen_spec_load_string("t.lua", src, strlen(src), &set, err, sizeof err);
}

/* Load src and expect failure with a message containing `want`. */
static void expect_fail(const char *what, const char *src, const char *want) {
  int rc = load(src);
  check(rc == -1 && set.n == 0 && strstr(err, want) && !strchr(err, '\n'),
        "%s: fails with \"%s\" (got: %s)", what, want, rc ? err : "success");
}

/* Load src and expect success with one variant; returns it (or a zeroed spec). */
static const qgen_spec *expect_ok(const char *what, const char *src) {
  static const qgen_spec none;
  int rc = load(src);
  check(rc == 0 && set.n == 1, "%s: loads (%s)", what, rc ? err : "ok");
  return rc == 0 && set.n >= 1 ? &set.v[0] : &none;
}

static int spec_eq(const qgen_spec *a, const qgen_spec *b) {
  /* every field but line (where the spec was written, not what it specializes) */
  if (strcmp(a->name, b->name) || a->head_dim != b->head_dim || a->n_head != b->n_head ||
      a->n_head_kv != b->n_head_kv || a->k_type != b->k_type || a->v_type != b->v_type ||
      a->in_type != b->in_type || a->out_type != b->out_type || a->block != b->block ||
      a->sparse != b->sparse || a->budget != b->budget || a->sink != b->sink ||
      a->recent != b->recent || a->n_archs != b->n_archs || a->rescore != b->rescore ||
      a->bounds != b->bounds)
    return 0;
  if (memcmp(&a->scale, &b->scale, sizeof a->scale) || memcmp(&a->coverage, &b->coverage, sizeof a->coverage) ||
      memcmp(&a->v_tau, &b->v_tau, sizeof a->v_tau) || memcmp(&a->top_p, &b->top_p, sizeof a->top_p))
    return 0;
  for (int i = 0; i < a->n_archs; i++)
    if (a->archs[i] != b->archs[i]) return 0;
  return 1;
}

static int archs_are(const qgen_spec *s, int n, const int *cc) {
  if (s->n_archs != n) return 0;
  for (int i = 0; i < n; i++)
    if (s->archs[i] != cc[i]) return 0;
  return 1;
}

/* canonical text -> load -> identical struct */
static void round_trip(const qgen_spec *s) {
  char text[4096], e2[1024];
  qgen_spec_set back;
  int n = qgen_spec_to_lua(s, text, sizeof text);
  int rc = n > 0 ? qgen_spec_load_string("canonical", text, (size_t)n, &back, e2, sizeof e2) : -1;
  check(n > 0 && (size_t)n == strlen(text) && rc == 0 && back.n == 1 && spec_eq(s, &back.v[0]),
        "%s: canonical text loads back to the same spec%s%s", s->name, rc ? ": " : "", rc ? e2 : "");
  if (rc == 0) { /* and the canonical text of that is the same text */
    char text2[4096];
    int n2 = qgen_spec_to_lua(&back.v[0], text2, sizeof text2);
    check(n2 == n && !strcmp(text, text2), "%s: canonical text is a fixed point", s->name);
  }
}

/* ---------------------------------------------------------------- specs/ */

static const struct {
  const char *file, *name;
  int head_dim, n_head, n_head_kv, recent;
  qgen_type kv;
  int optional; /* checked when the file has it */
} REAL[] = {
    {"qwen3-4b.lua", "qwen3-4b", 128, 32, 8, 256, QGEN_TYPE_F16, 0},
    {"qwen3-4b.lua", "qwen3-4b-q8_0", 128, 32, 8, 256, QGEN_TYPE_Q8_0, 1},
    {"qwen3-4b.lua", "qwen3-4b-q4_0", 128, 32, 8, 256, QGEN_TYPE_Q4_0, 1},
    {"qwen3-4b.lua", "qwen3-4b-q5_0", 128, 32, 8, 256, QGEN_TYPE_Q5_0, 1},
    {"qwen2.5-14b-1m.lua", "qwen2.5-14b-1m", 128, 40, 8, 128, QGEN_TYPE_F16, 0},
    {"qwen2.5-14b-1m.lua", "qwen2.5-14b-1m-q8_0", 128, 40, 8, 128, QGEN_TYPE_Q8_0, 0},
    {"qwen2.5-14b-1m.lua", "qwen2.5-14b-1m-q4_0", 128, 40, 8, 128, QGEN_TYPE_Q4_0, 0},
    {"llama-3.1-8b.lua", "llama-3.1-8b", 128, 32, 8, 128, QGEN_TYPE_F16, 0},
    {"gemma-3-4b.lua", "gemma-3-4b", 256, 8, 4, 128, QGEN_TYPE_F16, 0},
    {"llama-2-7b.lua", "llama-2-7b", 128, 32, 32, 128, QGEN_TYPE_F16, 0},
    {"qwen2.5-0.5b.lua", "qwen2.5-0.5b", 64, 14, 2, 128, QGEN_TYPE_F16, 0},
    {"phi-3-mini.lua", "phi-3-mini", 96, 32, 32, 128, QGEN_TYPE_F16, 0},
};

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

static int only_lua(const struct dirent *d) { return ends_with(d->d_name, ".lua"); }

static void test_real_specs(void) {
  static const int sm80_90[] = {80, 90};
  char path[4096];
  struct dirent **list;
  int n = scandir(QGEN_SOURCE_DIR "/specs", &list, only_lua, alphasort);
  check(n >= 7, "specs/ holds at least 7 specs (%d)", n);
  for (int i = 0; i < n; i++) {
    qgen_fmt(path, sizeof path, "%s/specs/%s", QGEN_SOURCE_DIR, list[i]->d_name);
    int rc = qgen_spec_load(path, &set, err, sizeof err);
    check(rc == 0 && set.n >= 1, "specs/%s loads (%s)", list[i]->d_name, rc ? err : "ok");
    for (int k = 0; rc == 0 && k < set.n; k++) {
      const qgen_spec *s = &set.v[k];
      check(s->n_head % s->n_head_kv == 0 && s->head_dim % 32 == 0 && s->n_archs >= 1,
            "specs/%s: %s is consistent", list[i]->d_name, s->name);
      round_trip(s);
    }
    free(list[i]);
  }
  if (n >= 0) free(list);

  for (size_t i = 0; i < sizeof REAL / sizeof *REAL; i++) {
    qgen_fmt(path, sizeof path, "%s/specs/%s", QGEN_SOURCE_DIR, REAL[i].file);
    int rc = qgen_spec_load(path, &set, err, sizeof err);
    const qgen_spec *s = rc ? NULL : qgen_spec_find(&set, REAL[i].name);
    if (!s && REAL[i].optional) continue;
    check(s != NULL, "%s has the variant %s", REAL[i].file, REAL[i].name);
    if (!s) continue;
    check(s->head_dim == REAL[i].head_dim && s->n_head == REAL[i].n_head &&
              s->n_head_kv == REAL[i].n_head_kv,
          "%s: d%d h%d kv%d", s->name, s->head_dim, s->n_head, s->n_head_kv);
    check(s->k_type == REAL[i].kv && s->v_type == REAL[i].kv && s->in_type == QGEN_TYPE_F16 &&
              s->out_type == QGEN_TYPE_F16,
          "%s: cache type %s, f16 in/out", s->name, qgen_type_traits_of(REAL[i].kv)->name);
    check(s->sparse == 1 && s->block == 64 && s->coverage == 0.25 && s->budget == 0 &&
              s->sink == 64 && s->recent == REAL[i].recent,
          "%s: sparse, block 64, coverage 0.25, sink 64, recent %d", s->name, REAL[i].recent);
    check(s->scale == 1.0 / sqrt((double)s->head_dim), "%s: scale 1/sqrt(%d)", s->name, s->head_dim);
    check(archs_are(s, 2, sm80_90), "%s: archs sm_80, sm_90", s->name);
    check(s->line > 0, "%s: line of the spec{} call is known (%d)", s->name, s->line);
  }

  qgen_fmt(path, sizeof path, "%s/specs/qwen3-4b.lua", QGEN_SOURCE_DIR);
  if (qgen_spec_load(path, &set, err, sizeof err) == 0) {
    char uri[256];
    qgen_spec_uri(&set.v[0], QGEN_URI_FILE, uri, sizeof uri);
    check(!strcmp(uri, "qwen3-4b_d128_h32_g4_kf16_vf16_if16_of16_b64_sparse_i8"), "uri of qwen3-4b: %s", uri);
  }
  qgen_fmt(path, sizeof path, "%s/specs/qwen2.5-14b-1m.lua", QGEN_SOURCE_DIR);
  if (qgen_spec_load(path, &set, err, sizeof err) == 0) {
    char uri[256];
    check(set.n == 3 && !strcmp(set.v[0].name, "qwen2.5-14b-1m") &&
              !strcmp(set.v[1].name, "qwen2.5-14b-1m-q8_0") && !strcmp(set.v[2].name, "qwen2.5-14b-1m-q4_0"),
          "qwen2.5-14b-1m: three variants in order");
    qgen_spec_uri(&set.v[2], QGEN_URI_FILE, uri, sizeof uri);
    check(!strcmp(uri, "qwen2.5-14b-1m-q4_0_d128_h40_g5_kq4_0_vq4_0_if16_of16_b64_sparse_i8"),
          "uri of the q4_0 variant: %s", uri);
    check(qgen_spec_find(&set, NULL) == &set.v[0] && qgen_spec_find(&set, "") == &set.v[0] &&
              qgen_spec_find(&set, "qwen2.5-14b-1m-q8_0") == &set.v[1] &&
              qgen_spec_find(&set, "qwen2.5-14b-1m-q5_0") == NULL,
          "qgen_spec_find: NULL/\"\" = first, by name, absent = NULL");
  }
}

/* ---------------------------------------------------------------- tests/specs_bad */

/* The regex of the first line "-- expect: REGEX". */
static int read_expect(const char *path, char *re, size_t n) {
  char line[1024];
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  int ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  if (!ok || strncmp(line, "-- expect: ", 11)) return -1;
  line[strcspn(line, "\r\n")] = 0;
  qgen_fmt(re, n, "%s", line + 11);
  return 0;
}

static int matches(const char *re, const char *text) {
  regex_t rx;
  if (regcomp(&rx, re, REG_EXTENDED | REG_NOSUB)) return -1;
  int m = regexec(&rx, text, 0, NULL, 0) == 0;
  regfree(&rx);
  return m;
}

static void test_bad_specs(void) {
  char path[4096], re[1024];
  struct dirent **list;
  int n = scandir(QGEN_SOURCE_DIR "/tests/specs_bad", &list, only_lua, alphasort);
  check(n >= 20, "tests/specs_bad holds at least 20 specs (%d)", n);
  for (int i = 0; i < n; i++) {
    qgen_fmt(path, sizeof path, "%s/tests/specs_bad/%s", QGEN_SOURCE_DIR, list[i]->d_name);
    if (read_expect(path, re, sizeof re)) {
      check(0, "specs_bad/%s: first line is \"-- expect: REGEX\"", list[i]->d_name);
      free(list[i]);
      continue;
    }
    double t0 = cpu_ms();
    int rc = qgen_spec_load(path, &set, err, sizeof err);
    double ms = cpu_ms() - t0;
    int m = rc ? matches(re, err) : 0;
    if (m == 0 && strstr(re, "memory limit exceeded") && memory_limit_hit(err)) m = 1;
    check(rc == -1 && set.n == 0 && m == 1 && strstr(err, path) && !strchr(err, '\n') &&
              (ms < 15000 || slow_run()),
          "specs_bad/%s: rejected in %.0f ms of CPU: %s%s%s", list[i]->d_name, ms, rc ? err : "(loaded!)",
          m == 1 ? "" : "  [want /", m == 1 ? "" : re);
    if (m != 1) printf("       want: /%s/%s\n", re, m < 0 ? " (bad regex)" : "");
    free(list[i]);
  }
  if (n >= 0) free(list);
}

/* ---------------------------------------------------------------- fields and defaults */

#define OK4 "name = \"m\", head_dim = 128, n_head = 32, n_head_kv = 8"

static void test_defaults(void) {
  static const int sm80_90[] = {80, 90};
  const qgen_spec *s = expect_ok("minimal plain table", "return { " OK4 " }");
  check(!strcmp(s->name, "m") && s->head_dim == 128 && s->n_head == 32 && s->n_head_kv == 8,
        "minimal: the four required fields");
  check(s->k_type == QGEN_TYPE_F16 && s->v_type == QGEN_TYPE_F16 && s->in_type == QGEN_TYPE_F16 &&
            s->out_type == QGEN_TYPE_F16,
        "default types: k, v, in, out = f16");
  check(s->scale == 1.0 / sqrt(128.0), "default scale = 1/sqrt(head_dim)");
  check(s->sparse == 0 && s->block == 64 && s->coverage == 0 && s->budget == 0 && s->sink == 0 &&
            s->recent == 0,
        "default: dense, block 64, no budget, sink = recent = 0");
  check(archs_are(s, 2, sm80_90), "default archs: sm_80, sm_90");
  check(s->line == 0, "a plain table has no line (%d)", s->line);

  s = expect_ok("spec{} call", "\n\nreturn spec{\n " OK4 " }");
  check(s->line == 3, "spec{} records the line of the call (%d)", s->line);
  s = expect_ok("#! line", "#!/usr/bin/env lua\nreturn spec{ " OK4 " }");
  check(s->line == 2, "a #! first line is skipped, line numbers kept (%d)", s->line);
  s = expect_ok("UTF-8 BOM", "\xEF\xBB\xBFreturn spec{ " OK4 " }");

  s = expect_ok("k_type only", "return { " OK4 ", k_type = 'q8_0' }");
  check(s->k_type == QGEN_TYPE_Q8_0 && s->v_type == QGEN_TYPE_Q8_0, "v_type defaults to k_type");
  s = expect_ok("mixed types", "return { " OK4 ", k_type = 'q8_0', v_type = 'q5_0', in_type = 'f32', out_type = 'bf16' }");
  check(s->k_type == QGEN_TYPE_Q8_0 && s->v_type == QGEN_TYPE_Q5_0 && s->in_type == QGEN_TYPE_F32 &&
            s->out_type == QGEN_TYPE_BF16,
        "k q8_0, v q5_0, in f32, out bf16");
  expect_fail("k_type f32", "return { " OK4 ", k_type = 'f32' }", "k_type = \"f32\" is not a KV cache type");
  expect_fail("out_type q4_0", "return { " OK4 ", out_type = 'q4_0' }", "out_type = \"q4_0\" is not an input/output type");
  expect_fail("k_type with NUL", "return { " OK4 ", k_type = 'f16\\0' }", "contains a NUL byte");
  expect_fail("type suggestion", "return { " OK4 ", k_type = 'fp16' }", "(did you mean \"f16\"?)");

  s = expect_ok("sparse = true", "return { " OK4 ", sparse = true }");
  check(s->sparse == 1 && s->block == 64 && s->coverage == 0.25 && s->budget == 0 && s->sink == 64 &&
            s->recent == 128,
        "sparse = true: block 64, coverage 0.25, sink 64, recent 128");
  s = expect_ok("sparse = false", "return { " OK4 ", sparse = false }");
  check(s->sparse == 0 && s->block == 64 && s->coverage == 0 && s->sink == 0, "sparse = false: dense");
  s = expect_ok("sparse = {}", "return { " OK4 ", sparse = {} }");
  check(s->sparse == 1 && s->coverage == 0.25 && s->sink == 64 && s->recent == 128, "sparse = {}: the defaults");
  s = expect_ok("sparse block 128", "return { " OK4 ", sparse = { block = 128 } }");
  check(s->block == 128 && s->sink == 128 && s->recent == 256 && s->coverage == 0.25,
        "sink and recent default to block and 2 * block");
  s = expect_ok("budget", "return { " OK4 ", sparse = { budget = 4096, sink = 0, recent = 32 } }");
  check(s->sparse == 1 && s->budget == 4096 && s->coverage == 0 && s->sink == 0 && s->recent == 32,
        "budget 4096 (coverage 0), sink 0, recent 32");
  s = expect_ok("budget 2^62", "return { " OK4 ", sparse = { budget = 2^62 } }");
  check(s->budget == (int64_t)1 << 62, "budget = 2^62 (a float) is accepted");
  expect_fail("budget 2^62 + 1", "return { " OK4 ", sparse = { budget = (1 << 62) + 1 } }", "sparse.budget = 4611686018427387905 is out of range");
  expect_fail("budget 0", "return { " OK4 ", sparse = { budget = 0 } }", "sparse.budget = 0 is out of range");
  expect_fail("sink 2^31", "return { " OK4 ", sparse = { sink = 2^31 } }", "sparse.sink = 2147483648.0 is out of range");
  s = expect_ok("coverage 1", "return { " OK4 ", sparse = { coverage = 1 } }");
  check(s->coverage == 1.0, "coverage = 1 is accepted");
  expect_fail("coverage nan", "return { " OK4 ", sparse = { coverage = 0/0 } }", "nan is out of range");
  expect_fail("coverage string", "return { " OK4 ", sparse = { coverage = '0.5' } }", "sparse.coverage = \"0.5\" is a string");
  s = expect_ok("disabled", "return { " OK4 ", sparse = { enabled = false, block = 128, coverage = 0.5, sink = 7 } }");
  check(s->sparse == 0 && s->block == 128 && s->coverage == 0 && s->budget == 0 && s->sink == 0 && s->recent == 0,
        "enabled = false: dense, block kept, the rest zero");
  expect_fail("enabled = 1", "return { " OK4 ", sparse = { enabled = 1 } }", "sparse.enabled = 1 is an integer; allowed: true or false");
  expect_fail("sparse = 'yes'", "return { " OK4 ", sparse = 'yes' }", "sparse = \"yes\" is a string");
  expect_fail("sparse[1]", "return { " OK4 ", sparse = { 64 } }", "unknown field 'sparse[1]'");

  s = expect_ok("integral floats", "return { name = 'm', head_dim = 128.0, n_head = 32.0, n_head_kv = 8.0, sparse = { block = 32.0 } }");
  check(s->head_dim == 128 && s->n_head == 32 && s->block == 32, "128.0 is the integer 128");
  expect_fail("head_dim 1e300", "return { name = 'm', head_dim = 1e300, n_head = 32, n_head_kv = 8 }", "head_dim = 1e+300 is out of range");
  expect_fail("head_dim inf", "return { name = 'm', head_dim = 1/0, n_head = 32, n_head_kv = 8 }", "head_dim = inf is not an integer");
  expect_fail("head_dim 0", "return { name = 'm', head_dim = 0, n_head = 32, n_head_kv = 8 }", "head_dim = 0 is out of range");
  expect_fail("head_dim missing", "return { name = 'm', n_head = 32, n_head_kv = 8 }", "missing required field 'head_dim'");
  expect_fail("n_head_kv missing", "return { name = 'm', head_dim = 64, n_head = 32 }", "missing required field 'n_head_kv'");
  expect_fail("n_head 0", "return { name = 'm', head_dim = 64, n_head = 0, n_head_kv = 8 }", "n_head = 0 is out of range");
  expect_fail("n_head_kv > n_head", "return { name = 'm', head_dim = 64, n_head = 8, n_head_kv = 32 }", "n_head = 8 is not a multiple of n_head_kv = 32");
  s = expect_ok("group 64", "return { name = 'm', head_dim = 32, n_head = 64, n_head_kv = 1 }");
  check(s->n_head / s->n_head_kv == 64, "a group of 64 is the largest accepted");
  expect_fail("group 65", "return { name = 'm', head_dim = 32, n_head = 65, n_head_kv = 1 }", "65 query heads per KV head is unsupported");
  check(load("return { { name = 'a', head_dim = 32, n_head = 1, n_head_kv = 1 }, { name = 'b', head_dim = 256, n_head = 1, n_head_kv = 1 } }") == 0 &&
            set.n == 2 && set.v[0].head_dim == 32 && set.v[1].head_dim == 256,
        "head_dim 32 and 256 are accepted");

  /* sparse.bounds: i8 (the default of spec/fields.c) or f16; in the canonical text and the names */
  s = expect_ok("bounds default", "return { " OK4 ", sparse = true }");
  check(s->bounds == QGEN_BOUNDS_I8, "sparse = true: bounds %s (the default)", qgen_bounds_name(s->bounds));
  s = expect_ok("bounds default in a table", "return { " OK4 ", sparse = { coverage = 0.5 } }");
  check(s->bounds == QGEN_BOUNDS_I8, "sparse = { coverage = 0.5 }: bounds %s (the default)", qgen_bounds_name(s->bounds));
  s = expect_ok("bounds f16", "return { " OK4 ", sparse = { bounds = 'f16' } }");
  check(s->bounds == QGEN_BOUNDS_F16, "sparse.bounds = 'f16' is f16");
  round_trip(s);
  {
    char uri[256];
    qgen_spec_uri(s, QGEN_URI_FILE, uri, sizeof uri);
    check(ends_with(uri, "_sparse"), "an f16-bounds spec: uri %s", uri);
  }
  s = expect_ok("bounds i8", "return { " OK4 ", sparse = { bounds = 'i8' } }");
  check(s->bounds == QGEN_BOUNDS_I8, "sparse.bounds = 'i8' is i8");
  round_trip(s);
  {
    char uri[256], text[4096];
    qgen_spec_uri(s, QGEN_URI_FILE, uri, sizeof uri);
    qgen_layout L;
    qgen_spec_layout(s, &L);
    check(ends_with(uri, "_sparse_i8") && qgen_spec_to_lua(s, text, sizeof text) > 0 && strstr(text, "bounds = \"i8\""),
          "an i8-bounds spec: uri %s, canonical text names the bounds", uri);
    check(L.bounds_i8 == 1 && L.bounds_i8_row_bytes == 2 * 128 + 16 && L.bounds_i8_page_bytes == 8 * L.bounds_i8_row_bytes,
          "its layout keeps 8-bit rows of 2D + 16 bytes (%zu)", L.bounds_i8_row_bytes);
  }
  s = expect_ok("bounds i8, dense", "return { " OK4 ", sparse = { enabled = false, bounds = 'i8' } }");
  check(s->sparse == 0 && s->bounds == QGEN_BOUNDS_F16, "a dense spec keeps no 8-bit bounds");
  expect_fail("bounds i4", "return { " OK4 ", sparse = { bounds = 'i4' } }",
              "sparse.bounds = \"i4\" is not a bounds form; allowed: \"f16\" or \"i8\" (default \"i8\")");
  expect_fail("bounds I8", "return { " OK4 ", sparse = { bounds = 'I8' } }", "allowed: \"f16\" or \"i8\"");
  expect_fail("bounds 8", "return { " OK4 ", sparse = { bounds = 8 } }", "sparse.bounds = 8 is an integer; allowed: \"f16\" or \"i8\"");
  expect_fail("bounds at the top", "return { " OK4 ", bounds = 'i8' }", "unknown field 'bounds'");

  s = expect_ok("scale integer", "return { " OK4 ", scale = 1 }");
  check(s->scale == 1.0, "scale = 1 is the number 1.0");
  round_trip(s);
  expect_fail("scale 0", "return { " OK4 ", scale = 0 }", "scale = 0 is not positive");
  expect_fail("scale inf", "return { " OK4 ", scale = 1/0 }", "scale = inf is not finite");
  s = expect_ok("scale 0.1 + 0.2", "return { " OK4 ", scale = 0.1 + 0.2 }");
  round_trip(s);
  /* the kernels' f32 literal scale * log2(e) (common.cuh) must be a normal, finite f32 */
  expect_fail("scale denormal", "return { " OK4 ", scale = 5e-324 }", "scale = 4.94065645841247e-324 is below the smallest normal f32");
  expect_fail("scale 1e-38", "return { " OK4 ", scale = 1e-38 }", "below the smallest normal f32");
  s = expect_ok("scale FLT_MIN", "return { " OK4 ", scale = 1.17549435082228751e-38 }");
  round_trip(s);
  s = expect_ok("scale 2.35e38", "return { " OK4 ", scale = 2.35e38 }");
  round_trip(s);
  expect_fail("scale 2.4e38", "return { " OK4 ", scale = 2.4e38 }", "scale = 2.4e+38 is too large");
  expect_fail("scale 3.4e38", "return { " OK4 ", scale = 3.4e38 }", "scale = 3.4e+38 is too large");
  expect_fail("scale 1e300", "return { " OK4 ", scale = 1e300 }", "scale = 1e+300 is too large");

  static const int sorted[] = {80, 90, 121};
  s = expect_ok("archs unsorted", "return { " OK4 ", archs = { 'sm_90', 'sm_80', 'sm_90', 'sm_121', 'sm_80' } }");
  check(archs_are(s, 3, sorted), "archs are sorted and unique");
  static const int all[] = {80, 86, 87, 89, 90, 100, 103, 110, 120, 121};
  s = expect_ok("all archs", "return { " OK4 ", archs = { 'sm_121', 'sm_120', 'sm_110', 'sm_103', 'sm_100', 'sm_90', 'sm_89', 'sm_87', 'sm_86', 'sm_80' } }");
  check(archs_are(s, 10, all), "all ten architectures");
  round_trip(s);
  expect_fail("archs string", "return { " OK4 ", archs = 'sm_80' }", "archs = \"sm_80\" is a string");
  expect_fail("archs number", "return { " OK4 ", archs = { 90 } }", "archs[1] = 90 is an integer");
  expect_fail("archs key", "return { " OK4 ", archs = { x = 'sm_80' } }", "archs.x is not a list entry");
  expect_fail("archs sm_90a", "return { " OK4 ", archs = { 'sm_90a' } }", "archs[1] = \"sm_90a\" is not a known architecture");
  expect_fail("archs sm_70", "return { " OK4 ", archs = { 'sm_80', 'sm_70' } }", "archs[2] = \"sm_70\" is not supported: qgen kernels need sm_80 or newer");

  char name64[80];
  memset(name64, 'a', 64);
  name64[64] = 0;
  char src[512];
  qgen_fmt(src, sizeof src, "return { name = '%s', head_dim = 64, n_head = 1, n_head_kv = 1 }", name64);
  s = expect_ok("name of 64 characters", src);
  check(strlen(s->name) == 64, "a 64-character name is kept");
  qgen_fmt(src, sizeof src, "return { name = '%sb', head_dim = 64, n_head = 1, n_head_kv = 1 }", name64);
  expect_fail("name of 65 characters", src, "is 65 characters long");
  s = expect_ok("name charset", "return { name = 'Az09._-', head_dim = 64, n_head = 1, n_head_kv = 1 }");
  expect_fail("empty name", "return { name = '', head_dim = 64, n_head = 1, n_head_kv = 1 }", "name = \"\" is empty");
  expect_fail("name slash", "return { name = '../x', head_dim = 64, n_head = 1, n_head_kv = 1 }", "name = \"../x\" contains '/' at position 3");
  /* a name is a file name and a command-line word: it starts with a letter or digit */
  expect_fail("name -o", "return { name = '-o', head_dim = 64, n_head = 1, n_head_kv = 1 }", "name = \"-o\" starts with '-'");
  expect_fail("name .", "return { name = '.', head_dim = 64, n_head = 1, n_head_kv = 1 }", "name = \".\" starts with '.'");
  expect_fail("name ..", "return { name = '..', head_dim = 64, n_head = 1, n_head_kv = 1 }", "name = \"..\" starts with '.'");
  expect_fail("name _x", "return { name = '_x', head_dim = 64, n_head = 1, n_head_kv = 1 }", "name = \"_x\" starts with '_'");
  s = expect_ok("name 7b.q-8_0", "return { name = '7b.q-8_0', head_dim = 64, n_head = 1, n_head_kv = 1 }");
  check(!strcmp(s->name, "7b.q-8_0"), "a name may start with a digit and hold . _ -");
  expect_fail("name number", "return { name = 7, head_dim = 64, n_head = 1, n_head_kv = 1 }", "name = 7 is an integer");
  expect_fail("several unknown fields", "return { " OK4 ", zz = 1, aa = 2, [3] = 4 }", "unknown field '[3]' (and 2 more)");

  /* the exact message shape of spec.h */
  load("local a = 1\n\nreturn spec{\n  name = 'x', head_dim = 128, n_head = 30, n_head_kv = 8,\n}\n");
  check(!strcmp(err, "t.lua:4: n_head = 30 is not a multiple of n_head_kv = 8"), "exact message: %s", err);
  load("return { name = 'x', head_dim = 128, n_head = 32, n_head_kv = 8, archs = { 'sm_75' } }");
  check(!strcmp(err, "t.lua: archs[1] = \"sm_75\" is not supported: qgen kernels need sm_80 or newer; allowed: "
                     "sm_80, sm_86, sm_87, sm_89, sm_90, sm_100, sm_103, sm_110, sm_120, sm_121"),
        "exact message: %s", err);
  expect_fail("multi-line error", "error('a\\nb')", "t.lua:1: a b");
  expect_fail("error(x, 0) gets the file name", "error('plain', 0)", "t.lua: plain");
  expect_fail("error(42)", "error(42)", "t.lua: 42");
}

/* ---------------------------------------------------------------- variants */

static void test_variants(void) {
  int rc = load("local v = {}\n"
                "for i, kv in ipairs { 'f16', 'q8_0', 'q4_0', 'q5_0', 'bf16' } do\n"
                "  v[i] = spec{ name = 'm-' .. kv, head_dim = 64, n_head = 8, n_head_kv = 2, k_type = kv }\n"
                "end\n"
                "return v\n");
  check(rc == 0 && set.n == 5 && set.v[3].k_type == QGEN_TYPE_Q5_0 && !strcmp(set.v[4].name, "m-bf16") &&
            set.v[0].line == 3,
        "five variants made in a loop (%s)", rc ? err : "ok");
  char src[8192] = "return {";
  for (int i = 0; i < QGEN_MAX_VARIANTS; i++) {
    size_t l = strlen(src);
    qgen_fmt(src + l, sizeof src - l, "{ name = 'v%d', head_dim = 64, n_head = 1, n_head_kv = 1 },", i);
  }
  strcat(src, "}");
  rc = load(src);
  check(rc == 0 && set.n == QGEN_MAX_VARIANTS, "%d variants are accepted", QGEN_MAX_VARIANTS);
  expect_fail("negative key", "return { [-1] = { " OK4 " } }", "the variant list has the key [-1], not a positive integer");
  expect_fail("key 0", "return { [0] = { " OK4 " }, { name = 'n', head_dim = 64, n_head = 1, n_head_kv = 1 } }",
              "the key [0], not a positive integer");
  expect_fail("hole", "return { [1] = { " OK4 " }, [3] = { name = 'n', head_dim = 64, n_head = 1, n_head_kv = 1 } }",
              "hole at [2]");
  expect_fail("variant error names the variant", "return { { " OK4 " }, { name = 'b', head_dim = 64, n_head = 1 } }",
              "t.lua: variant 2 (\"b\"): missing required field 'n_head_kv'");
  expect_fail("spec{} in a list keeps its line", "return {\n spec{ " OK4 " },\n spec{ name = 'b', head_dim = 64, n_head = 3, n_head_kv = 2 } }",
              "t.lua:3: n_head = 3 is not a multiple of n_head_kv = 2");
}

/* An error about a field names the field's own line, not the spec{} call's: a table
   constructor keeps no positions, so the loader finds the key in the source. */
static void test_field_lines(void) {
  expect_fail("a misspelt field on line 2", "return spec{ name = 'x', head_dim = 64,\n  n_heads_kv = 2,\n  n_head = 4 }\n",
              "t.lua:2: unknown field 'n_heads_kv'");
  expect_fail("a bad value on line 4",
              "-- a comment { n_head = 1 }\nreturn spec{\n  name = 'x', head_dim = 64, n_head_kv = 2,\n  n_head = 3,\n}\n",
              "t.lua:4: n_head = 3 is not a multiple of n_head_kv = 2");
  expect_fail("a nested field",
              "return spec{ name = 'x', head_dim = 64, n_head = 4, n_head_kv = 2,\n"
              "  k_type = [[f16]], -- block = 1\n  sparse = {\n    coverage = 0.5,\n    block = 48,\n  },\n}\n",
              "t.lua:5: sparse.block = 48 is not a multiple of 32");
  expect_fail("a misspelt nested field",
              "return spec{ name = 'x', head_dim = 64, n_head = 4, n_head_kv = 2,\n  sparse = { coverage = 0.5,\n"
              "    covrage = 1 } }\n",
              "t.lua:3: unknown field 'sparse.covrage'");
  expect_fail("a field in the second variant",
              "return {\n  spec{ name = 'a', head_dim = 64, n_head = 4, n_head_kv = 2 },\n  spec{ name = 'b',\n"
              "    head_dim = 64, n_head = 4, n_head_kv = 2,\n    archs = { 'sm_75' } },\n}\n",
              "t.lua:5: archs[1] = \"sm_75\" is not supported");
  expect_fail("a key in brackets", "return spec{ name = 'x', head_dim = 64,\n  [\"n_head\"] = 3, n_head_kv = 2 }\n",
              "t.lua:2: n_head = 3");
  expect_fail("a table built elsewhere: the spec{} line",
              "local t = { name = 'x', head_dim = 64,\n n_head = 3, n_head_kv = 2 }\nreturn spec(t)\n",
              "t.lua:3: n_head = 3");
  expect_fail("a field that is missing: the spec{} line", "return spec{\n  name = 'x',\n  head_dim = 64, n_head = 4 }\n",
              "t.lua:1: missing required field 'n_head_kv'");
}

/* ---------------------------------------------------------------- the sandbox */

/* Run load(src) with stdout and stderr sent to files; returns their sizes. */
static int load_captured(const char *src, long *out_bytes, long *err_bytes, char *err_text, size_t n) {
  char po[] = "/tmp/qgen_spec_outXXXXXX", pe[] = "/tmp/qgen_spec_errXXXXXX";
  int fo = mkstemp(po), fe = mkstemp(pe);
  fflush(stdout);
  fflush(stderr);
  int so = dup(1), se = dup(2);
  dup2(fo, 1);
  dup2(fe, 2);
  int rc = load(src);
  fflush(stdout);
  fflush(stderr);
  dup2(so, 1);
  dup2(se, 2);
  close(so);
  close(se);
  *out_bytes = lseek(fo, 0, SEEK_END);
  *err_bytes = lseek(fe, 0, SEEK_END);
  ssize_t got = pread(fe, err_text, n - 1, 0);
  err_text[got > 0 ? got : 0] = 0;
  close(fo);
  close(fe);
  unlink(po);
  unlink(pe);
  return rc;
}

static void test_sandbox(void) {
  expect_ok("string, table and math work",
            "assert(string.rep('ab', 2, ',') == 'ab,ab')\n"
            "assert(('x'):upper() == 'X' and ('hello'):sub(2, 3) == 'el')\n"
            "assert(string.format('%d-%s', 3, 'a') == '3-a')\n"
            "assert(table.concat({ 1, 2, 3 }, ',') == '1,2,3')\n"
            "local t = { 3, 1, 2 }; table.sort(t); assert(t[1] == 1 and t[3] == 3)\n"
            "local m = table.move({ 1, 2, 3 }, 1, 3, 2, {}); assert(m[2] == 1 and m[4] == 3)\n"
            "assert(select('#', table.unpack({ 1, 2, 3 })) == 3)\n"
            "assert(math.floor(2.5) == 2 and math.max(1, 5) == 5 and math.type(1) == 'integer')\n"
            "assert(tostring(12) == '12' and tonumber('0x10') == 16)\n"
            "assert(pcall(error, 'x') == false)\n"
            "local ok = pcall(spec, { name = 'bad' }); assert(not ok)\n"
            "return spec{ " OK4 " }");
  expect_ok("the removed names are absent",
            "for _, n in ipairs { 'io', 'os', 'package', 'debug', 'coroutine', 'utf8', 'require', 'load',\n"
            "  'loadfile', 'dofile', 'collectgarbage', 'setmetatable', 'warn' } do\n"
            "  assert(rawget(_G, n) == nil, n)\n"
            "end\n"
            "assert(getmetatable('') == false and getmetatable(_G) == false)\n"
            "return { " OK4 " }");
  expect_fail("a global typo", "return { name = nmae }", "t.lua:1: undefined global 'nmae'");
  expect_fail("getmetatable('').__index", "getmetatable('').__index = nil", "attempt to index a boolean value");
  expect_fail("table.remove on a huge border", "local t = {}\nfor k = 0, 62 do t[1 << k] = k end\n"
              "for i = 1, 5 do t[i] = i end\ntable.remove(t, 1)", "t.lua:4: table.remove on a table of length");
  expect_fail("table.sort on a huge border", "local t = {}\nfor k = 0, 62 do t[1 << k] = k end\n"
              "for i = 1, 5 do t[i] = i end\ntable.sort(t, rawequal)", "t.lua:4: table.sort on a table of length");
  expect_ok("table.insert and remove on small lists",
            "local t = { 1, 2 }\ntable.insert(t, 3)\ntable.insert(t, 1, 0)\nassert(table.remove(t) == 3)\n"
            "assert(table.remove(t, 1) == 0 and #t == 2)\nassert(string.rep('', 1 << 62) == '' and string.rep('a', 0) == '')\n"
            "assert(string.rep('', 3, '-') == '--')\nreturn { " OK4 " }");
  expect_fail("string.gsub", "return ('a'):gsub('a', 'b')", "string.gsub is not available in a spec");
  expect_fail("string.match", "return ('a'):match('a')", "string.match is not available");
  expect_fail("string.gmatch", "return ('a'):gmatch('a')", "string.gmatch is not available");

  /* math.random is deterministic */
  char n1[QGEN_NAME_MAX + 1] = "", n2[QGEN_NAME_MAX + 1] = "";
  const char *rnd = "return { name = 'r' .. math.random(1, 1 << 40), head_dim = 64, n_head = 1, n_head_kv = 1 }";
  if (load(rnd) == 0) memcpy(n1, set.v[0].name, sizeof n1);
  if (load(rnd) == 0) memcpy(n2, set.v[0].name, sizeof n2);
  check(n1[0] && !strcmp(n1, n2), "math.random gives the same numbers every load (%s, %s)", n1, n2);

  /* print writes to stderr, at most 64 KiB */
  long ob = -1, eb = -1;
  char text[256];
  int rc = load_captured("print('hello', 42, true, nil)\nreturn { " OK4 " }", &ob, &eb, text, sizeof text);
  check(rc == 0 && ob == 0 && !strcmp(text, "hello\t42\ttrue\tnil\n"), "print writes to stderr, not stdout");
  rc = load_captured("for i = 1, 1000 do print(string.rep('x', 1000)) end\nreturn { " OK4 " }", &ob, &eb, text,
                     sizeof text);
  check(rc == 0 && ob == 0 && eb > 60000 && eb < 70000, "print output is capped (%ld bytes)", eb);

  /* binary chunks */
  static const char fake[] = "\x1bLuaT\x00\x19\x93\r\n\x1a\n";
  rc = qgen_spec_load_string("b.luac", fake, sizeof fake - 1, &set, err, sizeof err);
  check(rc == -1 && strstr(err, "b.luac: this is a precompiled Lua chunk"), "a binary chunk is refused: %s", err);
  rc = qgen_spec_load_string("b.luac", "\xEF\xBB\xBF\x1bLua", 7, &set, err, sizeof err);
  check(rc == -1 && strstr(err, "precompiled"), "a binary chunk after a BOM is refused: %s", err);

  /* API misuse and file errors */
  check(qgen_spec_load_string("x", NULL, 0, &set, err, sizeof err) == -1, "NULL source fails");
  check(qgen_spec_load_string("x", "return 1", 8, NULL, err, sizeof err) == -1, "NULL out fails");
  check(qgen_spec_load_string("x", "return 1", 8, &set, NULL, 0) == -1, "a NULL err buffer is fine");
  char small[8];
  check(qgen_spec_load_string("x", "error('a long message')", 23, &set, small, sizeof small) == -1 &&
            strlen(small) == 7,
        "the message is cut to the buffer (%s)", small);
  rc = qgen_spec_load("/nonexistent/spec.lua", &set, err, sizeof err);
  check(rc == -1 && strstr(err, "/nonexistent/spec.lua") && strstr(err, "cannot open"), "missing file: %s", err);

  /* a long path is named once and whole, with the line; a long message is cut to ~1 KiB */
  static char longname[801], want[900], bigerr[70000];
  memset(longname, 'p', 800);
  memcpy(longname + 794, "/x.lua", 6);
  static const char at3[] = "\n\nreturn spec{ name = 'm', head_dim = 100, n_head = 1, n_head_kv = 1 }", boom[] = "local x\nerror('boom')";
  rc = qgen_spec_load_string(longname, at3, strlen(at3), &set, bigerr, sizeof bigerr);
  snprintf(want, sizeof want, "%s:3: head_dim = 100 is not a multiple of 32", longname);
  check(rc == -1 && !strncmp(bigerr, want, strlen(want)) && !strstr(bigerr + strlen(want), "/x.lua"), "an 800-byte path is named once, with its line (%.40s...)",
        bigerr + 790);
  rc = qgen_spec_load_string(longname, boom, strlen(boom), &set, bigerr, sizeof bigerr);
  snprintf(want, sizeof want, "%s:2: boom", longname);
  check(rc == -1 && !strcmp(bigerr, want), "a Lua error under an 800-byte path: the path whole, the line (%.40s)", bigerr + 790);
  rc = qgen_spec_load_string("t.lua", "error(string.rep('A', 1e5))", 27, &set, bigerr, sizeof bigerr);
  check(rc == -1 && strlen(bigerr) < 1100 && strstr(bigerr, "t.lua:1: AAAA") && strstr(bigerr, "A... (98980 more bytes)"),
        "error(string.rep('A', 1e5)) is cut to 1 KiB (%zu bytes, ends %s)", strlen(bigerr), bigerr + strlen(bigerr) - 24);
  char big[] = "/tmp/qgen_spec_bigXXXXXX";
  int fd = mkstemp(big);
  if (fd >= 0) {
    char line[] = "-- padding padding padding padding padding padding padding padding padding\n";
    for (int i = 0; i < (1 << 20) / (int)(sizeof line - 1) + 2; i++)
      if (write(fd, line, sizeof line - 1) < 0) break;
    close(fd);
    rc = qgen_spec_load(big, &set, err, sizeof err);
    check(rc == -1 && strstr(err, big) && strstr(err, "larger than"), "a file over 1 MiB: %s", err);
    unlink(big);
  }
  rc = qgen_spec_load("/dev/zero", &set, err, sizeof err);
  check(rc == -1 && strstr(err, "/dev/zero"), "/dev/zero: %s", err);
}

/* ---------------------------------------------------------------- limits */

static void test_limits(const char *argv0) {
  double t0 = cpu_ms();
  int rc = load("local i = 0\nwhile true do i = i + 1 end");
  double ms = cpu_ms() - t0;
  check(rc == -1 && strstr(err, "t.lua:2: ") && strstr(err, "limit exceeded") && ms < 8000,
        "an endless loop stops in %.0f ms of CPU: %s", ms, err);
  t0 = cpu_ms();
  rc = load("local t = {}\nwhile true do t[#t + 1] = 'x' .. #t end");
  ms = cpu_ms() - t0;
  check(rc == -1 && memory_limit_hit(err) && ms < 8000, "a growing table stops in %.0f ms of CPU: %s", ms, err);
  t0 = cpu_ms();
  rc = load("local s = string.rep('x', 40 << 20)\nlocal u = s .. s");
  ms = cpu_ms() - t0;
  check(rc == -1 && memory_limit_hit(err) && ms < 8000, "a large string stops in %.0f ms of CPU: %s", ms, err);
  t0 = cpu_ms();
  rc = load("local ok, e = pcall(string.rep, 'x', 1 << 30)\nassert(not ok)\n"
            "local t = {}\nfor i = 1, 1000000 do t[i] = i end\nreturn { " OK4 " }");
  ms = cpu_ms() - t0;
  check(rc == 0, "a caught memory error and a million-element table are fine (%.0f ms of CPU)", ms);
  t0 = cpu_ms();
  rc = load("local function f() return f() end\nreturn f()");
  ms = cpu_ms() - t0;
  check(rc == -1 && strstr(err, "limit exceeded") && ms < 8000, "endless tail calls stop in %.0f ms of CPU: %s", ms, err);
  t0 = cpu_ms();
  rc = load("local ok = xpcall(function() while true do end end, function() while true do end end)\n"
            "while true do end");
  ms = cpu_ms() - t0;
  check(rc == -1 && strstr(err, "limit exceeded") && ms < 8000, "a looping message handler stops in %.0f ms of CPU: %s", ms, err);
  t0 = cpu_ms();
  rc = load("local n = 0\nlocal function h(e) n = n + 1; if n > 3 then while true do end end; return e end\n"
            "while true do xpcall(function() while true do end end, h) end");
  ms = cpu_ms() - t0;
  check(rc == -1 && strstr(err, "limit exceeded") && ms < 8000, "xpcall in a loop stops in %.0f ms of CPU: %s", ms, err);
  rc = load("local ok, e, x = xpcall(function(a, b) return a + b, 'r' end, function(m) return 'h:' .. m end, 2, 3)\n"
            "assert(ok == true and e == 5 and x == 'r')\n"
            "ok, e = xpcall(error, function(m) return 'h:' .. m end, 'boom', 0)\n"
            "assert(ok == false and e == 'h:boom', e)\n"
            "return { " OK4 " }");
  check(rc == 0, "xpcall passes arguments, results and the handler's value (%s)", rc ? err : "ok");
  expect_fail("a caught memory error raised again", "local ok, e = pcall(string.rep, 'x', 1 << 30)\nerror(e)",
              "t.lua:2: memory limit exceeded");
  expect_ok("a load after the limits is normal", "return { " OK4 " }");

  /* a real binary chunk from mkbytecode, next to this test binary */
  char tool[4096], out[] = "/tmp/qgen_spec_bcXXXXXX", cmd[8300];
  const char *slash = strrchr(argv0, '/');
  qgen_fmt(tool, sizeof tool, "%.*smkbytecode", slash ? (int)(slash - argv0 + 1) : 0, argv0);
  int fd = mkstemp(out);
  if (fd >= 0) close(fd);
  if (access(tool, X_OK) == 0 && fd >= 0) {
    qgen_fmt(cmd, sizeof cmd, "'%s' '%s'", tool, out);
    int made = system(cmd) == 0;
    rc = made ? qgen_spec_load(out, &set, err, sizeof err) : 0;
    check(made && rc == -1 && strstr(err, out) && strstr(err, "precompiled"), "real bytecode from mkbytecode: %s", err);
  } else {
    printf("skip real bytecode check: %s not built\n", tool);
  }
  if (fd >= 0) unlink(out);
}

/* ---------------------------------------------------------------- canonical text */

static void test_to_lua(void) {
  const qgen_spec *s0 = expect_ok("budget spec", "return { " OK4 ", k_type = 'q4_0', v_type = 'q8_0', in_type = 'f32', "
                                  "out_type = 'bf16', scale = 0.1, sparse = { budget = 2048, block = 32, sink = 0, recent = 5 }, "
                                  "archs = { 'sm_100' } }");
  qgen_spec s = *s0;
  round_trip(&s);
  char text[4096];
  int n = qgen_spec_to_lua(&s, text, sizeof text);
  check(n > 0 && strstr(text, "budget = 2048") && !strstr(text, "coverage") && strstr(text, "scale = 0.1,") &&
            !strncmp(text, "return spec{\n  name = \"m\",\n", 27),
        "canonical text spells the budget, not coverage; shortest exact numbers");
  check(qgen_spec_to_lua(&s, text, (size_t)n) == -1 && qgen_spec_to_lua(&s, text, (size_t)n + 1) == n &&
            qgen_spec_to_lua(&s, text, 0) == -1,
        "qgen_spec_to_lua: -1 when the buffer is too small, exact fit works");
  s0 = expect_ok("dense spec", "return { " OK4 ", sparse = { enabled = false, block = 256 } }");
  s = *s0;
  round_trip(&s);
  qgen_spec_to_lua(&s, text, sizeof text);
  check(strstr(text, "sparse = { enabled = false, block = 256 }") != NULL, "dense canonical text");
  char uri[256];
  qgen_spec_uri(&s, QGEN_URI_FILE, uri, sizeof uri);
  check(!strcmp(uri, "m_d128_h32_g4_kf16_vf16_if16_of16_b256_dense"), "dense uri: %s", uri);
  qgen_spec_uri(&s, QGEN_URI_FILE, uri, 5);
  check(!strcmp(uri, "m_d1"), "uri is cut to the buffer");
  s0 = expect_ok("sparse-V spec", "return { " OK4 ", sparse = { v_tau = 0.01 } }");
  s = *s0;
  check(s.v_tau == (double)0.01f, "sparse.v_tau is kept as an f32 value (%.17g)", s.v_tau);
  round_trip(&s);
  qgen_spec_to_lua(&s, text, sizeof text);
  qgen_spec_uri(&s, QGEN_URI_FILE, uri, sizeof uri);
  check(strstr(text, ", v_tau = ") != NULL && strstr(uri, "_sparse_i8_vt0.00999999978") != NULL,
        "sparse-V canonical text and uri: %s", uri);
  s0 = expect_ok("sparse-V off", "return { " OK4 ", sparse = { v_tau = 0 } }");
  qgen_spec_to_lua(s0, text, sizeof text);
  qgen_spec_uri(s0, QGEN_URI_FILE, uri, sizeof uri);
  check(s0->v_tau == 0 && !strstr(text, "v_tau") && !strstr(uri, "_vt"), "v_tau = 0: text and uri as without it");
}

/* sparse.rescore (two-stage selection): defaults, canonical text, module names, refusals. */
static void test_rescore(void) {
  char text[4096], t1[4096], uri[256], u0[256];
  const qgen_spec *s0 = expect_ok("rescore over f16", "return { " OK4 ", sparse = { rescore = { candidates = 4 } } }");
  qgen_spec s = *s0;
  check(s.rescore == 4 && s.sparse, "rescore = { candidates = 4 }: r = 4");
  round_trip(&s);
  qgen_spec_to_lua(&s, text, sizeof text);
  check(strstr(text, "rescore = { candidates = 4, sketch = \"q4_0\" }") != NULL, "canonical text names the sketch");
  qgen_layout L;
  qgen_spec_layout(&s, &L);
  check(L.rescore == 4 && L.sketch_row_bytes == 72 && L.sketch_page_bytes == (size_t)8 * 64 * 72,
        "an f16 cache keeps a q4_0 sketch: 72 bytes a row, %zu a page", L.sketch_page_bytes);
  qgen_spec_uri(&s, QGEN_URI_FILE, uri, sizeof uri);
  check(!strcmp(uri, "m_d128_h32_g4_kf16_vf16_if16_of16_b64_sparse_i8_r4"), "rescore uri: %s", uri);
  s0 = expect_ok("rescore over q4_0", "return { " OK4 ", k_type = 'q4_0', sparse = { rescore = { candidates = 8 } } }");
  s = *s0;
  round_trip(&s);
  qgen_spec_to_lua(&s, text, sizeof text);
  qgen_spec_layout(&s, &L);
  check(strstr(text, "rescore = { candidates = 8 }") != NULL && L.sketch_page_bytes == 0,
        "a q4_0 cache rescores its own K: no sketch field, no sketch pool");
  /* r = 1 is Quest: the same canonical text and module as no rescore */
  s0 = expect_ok("rescore r = 1", "return { " OK4 ", sparse = { rescore = { candidates = 1, sketch = 'q4_0' } } }");
  s = *s0;
  qgen_spec_to_lua(&s, t1, sizeof t1);
  qgen_spec_uri(&s, QGEN_URI_FILE, u0, sizeof u0);
  s0 = expect_ok("no rescore", "return { " OK4 ", sparse = true }");
  qgen_spec_to_lua(s0, text, sizeof text);
  qgen_spec_uri(s0, QGEN_URI_FILE, uri, sizeof uri);
  check(s.rescore == 1 && !strcmp(t1, text) && !strcmp(u0, uri), "rescore r = 1 is the Quest spec (%s)", uri);
  s0 = expect_ok("rescore on a dense spec", "return { " OK4 ", sparse = { enabled = false, rescore = { candidates = 4 } } }");
  check(s0->rescore == 1 && !s0->sparse, "a dense spec ignores rescore");

  /* top_p: an f32 value in (0, 1], its own canonical field, uri and module; 1 is no cut */
  s0 = expect_ok("top_p", "return { " OK4 ", sparse = { rescore = { candidates = 4, top_p = 0.9 } } }");
  s = *s0;
  check(s.top_p == (double)0.9f, "top_p = 0.9 is kept as the f32 0.9 (%.17g)", s.top_p);
  qgen_spec_to_lua(&s, text, sizeof text);
  check(strstr(text, "rescore = { candidates = 4, sketch = \"q4_0\", top_p = 0.8999999761581421 }") != NULL,
        "canonical text carries top_p: %s", text);
  qgen_spec_uri(&s, QGEN_URI_FILE, uri, sizeof uri);
  check(!strcmp(uri, "m_d128_h32_g4_kf16_vf16_if16_of16_b64_sparse_i8_r4_p0.899999976"), "top_p uri: %s", uri);
  qgen_spec_layout(&s, &L);
  check(L.top_p == s.top_p && L.rescore == 4, "the layout's top_p");
  round_trip(&s);
  s0 = expect_ok("top_p 1", "return { " OK4 ", sparse = { rescore = { candidates = 4, top_p = 1 } } }");
  s = *s0;
  qgen_spec_uri(&s, QGEN_URI_FILE, u0, sizeof u0);
  check(s.top_p == 1 && !strcmp(u0, "m_d128_h32_g4_kf16_vf16_if16_of16_b64_sparse_i8_r4"), "top_p = 1 is no cut: %s", u0);
  s0 = expect_ok("top_p default", "return { " OK4 ", sparse = true }");
  check(s0->top_p == 1, "top_p defaults to 1");
  s0 = expect_ok("top_p dense", "return { " OK4 " }");
  check(s0->top_p == 1, "a dense spec's top_p is 1");
  /* refusals of sparse.rescore and its top_p: {case, spec, message} */
  static const char *const bad[][3] = {
      {"rescore not a table", "return { " OK4 ", sparse = { rescore = 4 } }",
       "sparse.rescore = 4 is an integer; allowed: a table { candidates, sketch, top_p }"},
      {"rescore without candidates", "return { " OK4 ", sparse = { rescore = { } } }", "missing required field 'sparse.rescore.candidates'"},
      {"rescore candidates 0", "return { " OK4 ", sparse = { rescore = { candidates = 0 } } }",
       "sparse.rescore.candidates = 0 is out of range; allowed: an integer in 1..1024"},
      {"rescore candidates 2.5", "return { " OK4 ", sparse = { rescore = { candidates = 2.5 } } }",
       "sparse.rescore.candidates = 2.5 is not an integer"},
      {"rescore sketch q8_0", "return { " OK4 ", sparse = { rescore = { candidates = 2, sketch = 'q8_0' } } }",
       "sparse.rescore.sketch = \"q8_0\" is not a sketch type; allowed: \"q4_0\""},
      {"rescore sketch on a q8_0 cache", "return { " OK4 ", k_type = 'q8_0', sparse = { rescore = { candidates = 2, sketch = 'q4_0' } } }",
       "sparse.rescore.sketch = \"q4_0\" is set with k_type = \"q8_0\"; allowed: no sketch on a quantized cache"},
      {"rescore unknown field", "return { " OK4 ", sparse = { rescore = { candidate = 2 } } }",
       "unknown field 'sparse.rescore.candidate' (did you mean 'sparse.rescore.candidates'?)"},
      {"top_p 0", "return { " OK4 ", sparse = { rescore = { candidates = 4, top_p = 0 } } }",
       "sparse.rescore.top_p = 0 is out of range; allowed: a number in (0, 1]"},
      {"top_p 1.5", "return { " OK4 ", sparse = { rescore = { candidates = 4, top_p = 1.5 } } }", "sparse.rescore.top_p = 1.5 is out of range"},
      {"top_p string", "return { " OK4 ", sparse = { rescore = { candidates = 4, top_p = 'x' } } }", "sparse.rescore.top_p"},
      {"top_p with r = 1", "return { " OK4 ", sparse = { rescore = { candidates = 1, top_p = 0.9 } } }",
       "sparse.rescore.top_p = 0.9 with candidates = 1; allowed: candidates >= 2"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) expect_fail(bad[i][0], bad[i][1], bad[i][2]);
}

/* ---------------------------------------------------------------- spec/fields.c */

/* A spec that sets every table the fields live in (an f16 two-stage spec), with `path =
   value` assigned after it is built (value NULL: nothing), loaded into *out. */
static int load_with(const char *path, const char *value, qgen_spec *out) {
  char src[1024];
  qgen_fmt(src, sizeof src,
           "local t = { name = 't', head_dim = 128, n_head = 8, n_head_kv = 2, sparse = { rescore = { candidates = 2 } } }\n"
           "%s%s%s%s\nreturn t\n", value ? "t." : "", value ? path : "", value ? " = " : "", value ? value : "");
  const int rc = load(src);
  if (rc == 0) *out = set.v[0];
  return rc;
}

static void test_field_table(void) {
  /* a value of each field other than the base spec's, so that changing it can be seen */
  static const struct { qgen_field_id id; const char *value; } OTHER[] = {
      {QGEN_F_NAME, "'u'"},          {QGEN_F_HEAD_DIM, "64"},         {QGEN_F_N_HEAD, "16"},
      {QGEN_F_N_HEAD_KV, "4"},       {QGEN_F_K_TYPE, "'bf16'"},       {QGEN_F_V_TYPE, "'q8_0'"},
      {QGEN_F_IN_TYPE, "'f32'"},     {QGEN_F_OUT_TYPE, "'bf16'"},     {QGEN_F_SCALE, "0.5"},
      {QGEN_F_SPARSE, "false"},      {QGEN_F_ENABLED, "false"},       {QGEN_F_BLOCK, "128"},
      {QGEN_F_COVERAGE, "0.5"},      {QGEN_F_BUDGET, "4096"},         {QGEN_F_SINK, "0"},
      {QGEN_F_RECENT, "0"},          {QGEN_F_RESCORE, "{ candidates = 4 }"}, {QGEN_F_CANDIDATES, "4"},
      {QGEN_F_SKETCH, NULL /* the one sketch type: no other value */}, {QGEN_F_TOP_P, "0.5"},
      {QGEN_F_BOUNDS, "'f16'"},      {QGEN_F_V_TAU, "0.01"},          {QGEN_F_ARCHS, "{ 'sm_90' }"}};
  check(sizeof OTHER / sizeof *OTHER == QGEN_F_COUNT, "the test has a value for each of the %d fields", QGEN_F_COUNT);
  qgen_spec base, s;
  char t0[4096], t1[4096], m0[256], m1[256], f0[256], f1[256], def[128];
  check(load_with("", NULL, &base) == 0, "the base spec loads (%s)", err);
  qgen_spec_to_lua(&base, t0, sizeof t0);
  qgen_spec_uri(&base, QGEN_URI_MODULE, m0, sizeof m0);
  qgen_spec_uri(&base, QGEN_URI_FILE, f0, sizeof f0);
  for (int i = 0; i < QGEN_F_COUNT; i++) {
    const qgen_spec_field *f = qgen_spec_field_at((qgen_field_id)i);
    /* the row: a unique path whose table is a row of a table kind, listed among its keys */
    char table[64] = "";
    const char *key = qgen_spec_field_key(f), *keys[QGEN_F_COUNT];
    if (key != f->path) qgen_fmt(table, sizeof table, "%.*s", (int)(key - f->path - 1), f->path);
    const qgen_spec_field *up = table[0] ? qgen_spec_field_named(table) : NULL;
    const int nk = qgen_spec_field_keys(table, keys, QGEN_F_COUNT);
    int listed = 0;
    for (int k = 0; k < nk; k++) listed += !strcmp(keys[k], key);
    check(qgen_spec_field_named(f->path) == f && listed == 1 &&
              (!table[0] || (up && (up->kind == QGEN_FK_SPARSE || up->kind == QGEN_FK_TABLE) && up < f)),
          "field %s: a unique path, after its table, among its table's keys", f->path);
    /* the default the table names is the one applied */
    if (qgen_spec_field_default(f, def, sizeof def)) {
      qgen_spec with, without;
      const int a = load_with(f->path, def, &with), b = load_with(f->path, "nil", &without);
      check(a == 0 && b == 0 && spec_eq(&with, &without), "field %s: %s = %s is what leaving it out gives", f->path,
            f->path, def);
    }
    /* another value reaches the canonical text and, exactly for a compiled field, the module name */
    if (!OTHER[i].value) {
      check(f->kind == QGEN_FK_SKETCH, "field %s: has another value to test", f->path);
      continue;
    }
    if (OTHER[i].id != (qgen_field_id)i || load_with(f->path, OTHER[i].value, &s) != 0) {
      check(0, "field %s = %s loads (%s)", f->path, OTHER[i].value, err);
      continue;
    }
    qgen_spec_to_lua(&s, t1, sizeof t1);
    qgen_spec_uri(&s, QGEN_URI_MODULE, m1, sizeof m1);
    qgen_spec_uri(&s, QGEN_URI_FILE, f1, sizeof f1);
    check(strcmp(t0, t1) != 0, "field %s = %s changes the canonical text", f->path, OTHER[i].value);
    round_trip(&s);
    const int compiled = f->role == QGEN_FR_COMPILED;
    check((strcmp(m0, m1) != 0) == compiled, "field %s = %s %s the module name (%s)", f->path, OTHER[i].value,
          compiled ? "changes" : "leaves", m1);
    if (f->role == QGEN_FR_LABEL) check(strcmp(f0, f1) != 0, "field %s = %s changes the file name (%s)", f->path, OTHER[i].value, f1);
  }
}

int main(int argc, char **argv) {
  (void)argc;
  test_field_table();
  test_rescore();
  test_real_specs();
  test_defaults();
  test_variants();
  test_field_lines();
  test_to_lua();
  test_sandbox();
  test_limits(argv[0]);
  test_bad_specs();
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
