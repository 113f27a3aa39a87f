/* test_build.c — the build's cache key and its compile-error report (jit/build.h):
 *   - qgen_build_key changes with the qgen version, the NVRTC version, the arch and the
 *     source, and with nothing else;
 *   - an entry stored under the key of another qgen or NVRTC version is a miss (cache level,
 *     and end to end through qgen_build: a planted entry is used only under the right key);
 *   - a unit that fails to compile is written to $QGEN_DUMP_SOURCE as <name>.cu and the
 *     message says where (a template with a syntax error, via QGEN_TEMPLATE_DIR);
 *   - a build that fails before its jobs write the artifacts leaves them zeroed, whatever
 *     the caller passed in.
 * The parts that compile need NVRTC; without it they are skipped (the rest still runs).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jit/build.h"
#include "jit/cache.h"
#include "jit/emit.h"
#include "jit/nvrtc.h" /* not the toolkit's nvrtc.h */
#include "spec/spec.h"
#include "base/util.h"

#include "testlib.h"

#ifndef QGEN_SOURCE_DIR
#define QGEN_SOURCE_DIR "."
#endif
#ifndef QGEN_VERSION
#error "QGEN_VERSION must be defined (tests/CMakeLists.txt passes the project version)"
#endif

static int skipped;
static char root[] = "/tmp/qgen-test-build-XXXXXX";


static void skip(const char *why) {
  printf("skip %s\n", why);
  skipped++;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}
static void rm_rf(const char *p) { nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static int write_file(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(text, 1, n, f) == n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

static int count_files(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  if (!d) return -1;
  while ((de = readdir(d)))
    if (de->d_name[0] != '.' && (!needle || strstr(de->d_name, needle))) n++;
  closedir(d);
  return n;
}

/* ---- the key ------------------------------------------------------------------------ */

static void key_tests(void) {
  const char *src = "extern \"C\" __global__ void k() {}\n";
  uint8_t base[32], k[32];
  qgen_build_key(src, 90, "0.1.0", 13, 0, base);
  qgen_build_key(src, 90, "0.1.0", 13, 0, k);
  check(!memcmp(base, k, 32), "key: the same inputs give the same key");
  qgen_build_key(src, 90, "0.1.1", 13, 0, k);
  check(memcmp(base, k, 32) != 0, "key: another qgen version (0.1.1) changes it");
  qgen_build_key(src, 90, "0.1.0-dirty", 13, 0, k);
  check(memcmp(base, k, 32) != 0, "key: a qgen version with a suffix changes it");
  qgen_build_key(src, 90, "", 13, 0, k);
  check(memcmp(base, k, 32) != 0, "key: an empty qgen version changes it");
  qgen_build_key(src, 90, "0.1.0", 13, 1, k);
  check(memcmp(base, k, 32) != 0, "key: another NVRTC minor (13.1) changes it");
  qgen_build_key(src, 90, "0.1.0", 12, 0, k);
  check(memcmp(base, k, 32) != 0, "key: another NVRTC major (12.0) changes it");
  qgen_build_key(src, 90, "0.1.0", 1, 30, k);
  uint8_t k2[32];
  qgen_build_key(src, 90, "0.1.0", 13, 0, k2);
  check(memcmp(k2, k, 32) != 0, "key: NVRTC 1.30 and 13.0 differ (no digit run-together)");
  qgen_build_key(src, 80, "0.1.0", 13, 0, k);
  check(memcmp(base, k, 32) != 0, "key: another arch changes it");
  qgen_build_key("extern \"C\" __global__ void k() {} \n", 90, "0.1.0", 13, 0, k);
  check(memcmp(base, k, 32) != 0, "key: one more byte of source changes it");
  qgen_build_key(src, 90, NULL, 13, 0, k);
  check(1, "key: a NULL version does not crash");
  char longv[1000];
  memset(longv, 'v', sizeof longv - 1);
  longv[sizeof longv - 1] = 0;
  qgen_build_key(src, 90, longv, 13, 0, k);
  check(memcmp(base, k, 32) != 0, "key: a 999-byte version string is handled");
}

/* An entry stored under another version's key is not found under this version's. */
static void cache_version_miss(void) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/cache-a", root);
  qgen_cache *c = qgen_cache_open(dir);
  const char *src = "unit", *name = "spec_d128_sm90";
  uint8_t mine[32], other_qgen[32], other_nvrtc[32];
  qgen_build_key(src, 90, QGEN_VERSION, 13, 0, mine);
  qgen_build_key(src, 90, "0.0.1", 13, 0, other_qgen);
  qgen_build_key(src, 90, QGEN_VERSION, 12, 8, other_nvrtc);
  int r1 = qgen_cache_put(c, name, NULL, other_qgen, "old-qgen", 8);
  int r2 = qgen_cache_put(c, name, NULL, other_nvrtc, "old-nvrtc", 9);
  check(r1 == 0 && r2 == 0, "cache: entries under two other versions' keys reach the disk");
  qgen_cache_close(c);
  c = qgen_cache_open(dir); /* a new process: nothing in memory */
  void *data = NULL;
  size_t size = 0;
  int hit = qgen_cache_get(c, name, mine, &data, &size);
  check(hit == 0, "cache: this version's key misses although the same name was stored under other versions");
  if (hit) free(data);
  hit = qgen_cache_get(c, name, other_qgen, &data, &size);
  check(hit == 1 && size == 8 && !memcmp(data, "old-qgen", 8), "cache: (the other qgen version's key itself hits)");
  if (hit) free(data);
  /* the same file renamed to this version's name: the key inside still says no */
  char from[4200], to[4200];
  qgen_cache_entry_path(c, name, other_qgen, from, sizeof from);
  qgen_cache_entry_path(c, name, mine, to, sizeof to);
  qgen_cache_close(c);
  c = qgen_cache_open(dir);
  int mv = rename(from, to);
  hit = qgen_cache_get(c, name, mine, &data, &size);
  check(mv == 0 && hit == 0, "cache: another version's entry renamed to this version's file name is still a miss");
  if (hit) free(data);
  qgen_cache_close(c);
}

/* ---- artifacts: what unpack accepts, pack gives back byte for byte ------------------ */

static void artifact_tests(void) {
  qgen_artifact a, b;
  memset(&a, 0, sizeof a);
  a.arch = 90;
  a.n_kernels = 2;
  snprintf(a.k[0].name, sizeof a.k[0].name, "qg_append");
  snprintf(a.k[1].name, sizeof a.k[1].name, "qg_attend");
  a.k[1].regs = 96;
  a.cubin = (uint8_t *)"\177ELFcubin";
  a.cubin_size = 9;
  a.ptx = ".version 8.0\n";
  a.ptx_size = strlen(a.ptx);
  a.log = "";
  size_t n = 0;
  uint8_t *blob = qgen_artifact_pack(&a, &n);
  char err[256];
  int rc = qgen_artifact_unpack(blob, n, &b, err, sizeof err);
  size_t n2 = 0;
  uint8_t *again = rc == 0 ? qgen_artifact_pack(&b, &n2) : NULL;
  check(rc == 0 && again && n2 == n && !memcmp(again, blob, n) && !strcmp(b.k[1].name, "qg_attend") && b.k[1].regs == 96,
        "artifact: pack -> unpack -> pack gives the same bytes");
  free(again);
  if (rc == 0) qgen_artifact_free(&b);
  /* found by fuzz_artifact: a kernel name filling all 32 bytes was cut at byte 31 on
     unpack, so pack(unpack(x)) != x; such a name is now refused as corrupt */
  const size_t name1 = 8 + 12 + 52; /* magic, version/arch/count, kernel 0: kernel 1's name */
  memset(blob + name1, 'x', 32);
  memset(&b, 0x5a, sizeof b);
  rc = qgen_artifact_unpack(blob, n, &b, err, sizeof err);
  check(rc == -1 && strstr(err, "not NUL-terminated") && b.n_kernels == 0 && !b.cubin && !b.ptx && !b.log,
        "artifact: a kernel name without its NUL is refused, leaving nothing behind: \"%s\"", err);
  blob[name1 + 31] = 0;
  rc = qgen_artifact_unpack(blob, n, &b, err, sizeof err);
  check(rc == 0 && strlen(b.k[1].name) == 31, "artifact: a 31-byte name with its NUL is fine");
  if (rc == 0) qgen_artifact_free(&b);
  size_t accepted = 0;
  for (size_t cut = 0; cut < n && !accepted; cut++)
    if (qgen_artifact_unpack(blob, cut, &b, err, sizeof err) == 0) {
      accepted = cut + 1;
      qgen_artifact_free(&b);
    }
  check(!accepted, "artifact: no proper prefix of the %zu bytes is accepted", n);
  free(blob);
}

/* ---- through qgen_build ------------------------------------------------------------- */

static const char TINY[] =
    "return spec{ name = \"build-tiny\", head_dim = 64, n_head = 2, n_head_kv = 1, archs = { \"sm_90\" } }\n";

static int load_tiny(qgen_spec *s) {
  qgen_spec_set set;
  char err[512];
  if (qgen_spec_load_string("tiny.lua", TINY, strlen(TINY), &set, err, sizeof err) != 0) {
    printf("tiny spec: %s\n", err);
    return -1;
  }
  *s = set.v[0];
  return 0;
}

/* Two-stage selection: candidates = 1 emits exactly the Quest unit under the Quest name;
   r > 1 its own module with the rescore kernel (and a sketch write for an f16 K). */
static void rescore_units(void) {
  static const char *const src[4] = {
      "return spec{ name = 'r', head_dim = 64, n_head = 4, n_head_kv = 2, sparse = true }",
      "return spec{ name = 'r', head_dim = 64, n_head = 4, n_head_kv = 2, sparse = { rescore = { candidates = 1 } } }",
      "return spec{ name = 'r', head_dim = 64, n_head = 4, n_head_kv = 2, sparse = { rescore = { candidates = 4 } } }",
      "return spec{ name = 'r', head_dim = 64, n_head = 4, n_head_kv = 2, sparse = { rescore = { candidates = 4, top_p = 0.9 } } }"};
  char *unit[4] = {0}, mod[4][256], err[512];
  int nk[4] = {0};
  for (int i = 0; i < 4; i++) {
    qgen_spec_set set;
    size_t len;
    if (qgen_spec_load_string("r.lua", src[i], strlen(src[i]), &set, err, sizeof err) != 0) {
      check(0, "rescore spec %d: %s", i, err);
      return;
    }
    qgen_spec_uri(&set.v[0], QGEN_URI_MODULE, mod[i], sizeof mod[i]);
    unit[i] = qgen_emit_source(&set.v[0], qgen_arch_of(90), NULL, &len, err, sizeof err);
    int has = 0, topp = 0;
    for (const char *const *k = qgen_kernel_names(&set.v[0], 0); *k; k++)
      has |= !strcmp(*k, "qg_rescore"), topp |= !strcmp(*k, "qg_topp"), nk[i]++;
    check(has == (i >= 2) && topp == (i == 3), "rescore spec %d: qg_rescore %s, qg_topp %s the kernel list", i, has ? "in" : "not in",
          topp ? "in" : "not in");
  }
  check(unit[3] && strstr(mod[3], "_r4_p0.899999976") && strstr(unit[3], "qg_topp(qg_cache c") &&
            strstr(unit[3], "#define QG_TOP_P 0.899999976f") && nk[3] == nk[2] + 1 && unit[2] && !strstr(unit[2], "QG_TOP_P"),
        "top_p = 0.9: module %s, the unit of candidates = 4 plus qg_topp", mod[3]);
  check(unit[0] && unit[1] && !strcmp(unit[0], unit[1]) && !strcmp(mod[0], mod[1]),
        "candidates = 1 emits the Quest unit as module %s", mod[1]);
  check(unit[2] && strstr(mod[2], "_r4") && strstr(unit[2], "qg_rescore(qg_cache c") && strstr(unit[2], "#define QG_SKETCH 1"),
        "candidates = 4: module %s with the rescore kernel and the sketch", mod[2]);
  for (int i = 0; i < 4; i++) free(unit[i]);
}

/* A valid artifact whose cubin says POISON: recognisable when a build returns it. */
static uint8_t *poison(size_t *n) {
  qgen_artifact a;
  memset(&a, 0, sizeof a);
  a.arch = 90;
  a.cubin = (uint8_t *)"POISON";
  a.cubin_size = 6;
  a.ptx = "";
  a.log = "";
  return qgen_artifact_pack(&a, n);
}

static void build_version_miss(int have_nvrtc, int major, int minor) {
  qgen_spec s;
  if (load_tiny(&s) != 0) {
    check(0, "load the tiny spec");
    return;
  }
  char err[65536], uri[256], name[300], dir[4200];
  size_t len;
  char *src = qgen_emit_source(&s, qgen_arch_of(90), NULL, &len, err, sizeof err);
  if (!src) {
    check(0, "emit: %s", err);
    return;
  }
  qgen_spec_uri(&s, QGEN_URI_MODULE, uri, sizeof uri);
  snprintf(name, sizeof name, "%s_sm%d", uri, 90);
  snprintf(dir, sizeof dir, "%s/cache-b", root);
  if (!have_nvrtc) {
    skip("qgen_build with planted entries (no NVRTC)");
    free(src);
    return;
  }
  size_t pn;
  uint8_t *blob = poison(&pn);
  uint8_t key[32];
  int arch = 90;
  qgen_artifact a;

  /* 1. planted under this version's key: qgen_build takes it (so the key is the one it uses) */
  qgen_cache *c = qgen_cache_open(dir);
  qgen_build_key(src, 90, QGEN_VERSION, major, minor, key);
  qgen_cache_put(c, name, NULL, key, blob, pn);
  qgen_cache_close(c);
  c = qgen_cache_open(dir);
  int rc = qgen_build(&s, NULL, &arch, 1, c, &a, NULL, err, sizeof err);
  check(rc == 0 && a.cache_hit && a.cubin_size == 6 && !memcmp(a.cubin, "POISON", 6),
        "qgen_build: an entry under qgen_build_key(this qgen, this NVRTC %d.%d) is a hit", major, minor);
  if (rc == 0) qgen_artifact_free(&a);
  qgen_cache_clear(c, NULL, NULL);
  qgen_cache_close(c);

  /* 2. planted under another qgen's and another NVRTC's keys: both are misses, it compiles */
  c = qgen_cache_open(dir);
  qgen_build_key(src, 90, "0.0.0-other", major, minor, key);
  qgen_cache_put(c, name, NULL, key, blob, pn);
  qgen_build_key(src, 90, QGEN_VERSION, major, minor + 1, key);
  qgen_cache_put(c, name, NULL, key, blob, pn);
  qgen_build_key(src, 90, QGEN_VERSION, major - 1, minor, key);
  qgen_cache_put(c, name, NULL, key, blob, pn);
  qgen_cache_close(c);
  c = qgen_cache_open(dir);
  rc = qgen_build(&s, NULL, &arch, 1, c, &a, NULL, err, sizeof err);
  check(rc == 0 && !a.cache_hit && a.cubin_size > 4 && !memcmp(a.cubin, "\177ELF", 4),
        "qgen_build: entries under other qgen / NVRTC versions' keys are misses; it compiled a real cubin%s%s",
        rc ? ": " : "", rc ? err : "");
  if (rc == 0) qgen_artifact_free(&a);
  qgen_cache_close(c);
  c = qgen_cache_open(dir);
  rc = qgen_build(&s, NULL, &arch, 1, c, &a, NULL, err, sizeof err);
  check(rc == 0 && a.cache_hit && a.cubin_size > 4 && !memcmp(a.cubin, "\177ELF", 4),
        "qgen_build: the next build hits the entry it stored");
  if (rc == 0) qgen_artifact_free(&a);
  check(count_files(dir, ".qgc") == 4 && count_files(dir, ".tmp.") == 0,
        "the directory holds the 3 planted entries and the real one, no temp files");
  qgen_cache_close(c);
  free(blob);
  free(src);
}

/* ---- QGEN_DUMP_SOURCE --------------------------------------------------------------- */

static int copy_templates(const char *to, const char *bad_file, const char *bad_text) {
  static const char *files[] = {"common.cuh", "qtypes.cuh", "append.cu", "estimate.cu", "select.cu", "attend.cu", "combine.cu"};
  char from[4200], dst[4400], err[256];
  if (mkdir(to, 0755) != 0) return -1;
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    size_t n;
    snprintf(from, sizeof from, "%s/templates/%s", QGEN_SOURCE_DIR, files[i]);
    char *text = qgen_read_file(from, 1 << 20, &n, err, sizeof err);
    if (!text) return -1;
    snprintf(dst, sizeof dst, "%s/%s", to, files[i]);
    int rc = write_file(dst, text, n);
    if (rc == 0 && !strcmp(files[i], bad_file)) {
      FILE *f = fopen(dst, "ab");
      rc = f && fputs(bad_text, f) >= 0 ? 0 : -1;
      if (f) fclose(f);
    }
    free(text);
    if (rc != 0) return -1;
  }
  return 0;
}

static void dump_tests(int have_nvrtc) {
  if (!have_nvrtc) {
    skip("QGEN_DUMP_SOURCE (no NVRTC)");
    return;
  }
  qgen_spec s;
  if (load_tiny(&s) != 0) {
    check(0, "load the tiny spec");
    return;
  }
  char tdir[4200], ddir[4200], want_path[4600], uri[256];
  snprintf(tdir, sizeof tdir, "%s/templates", root);
  snprintf(ddir, sizeof ddir, "%s/dump", root);
  const char *old_tdir = getenv("QGEN_TEMPLATE_DIR");
  char *saved = old_tdir ? strdup(old_tdir) : NULL;
  if (copy_templates(tdir, "attend.cu", "\nthis is not C++ @@ qgen_injected_error;\n") != 0 || mkdir(ddir, 0755) != 0) {
    check(0, "set up a template dir with an error");
    free(saved);
    return;
  }
  setenv("QGEN_TEMPLATE_DIR", tdir, 1);
  qgen_spec_uri(&s, QGEN_URI_MODULE, uri, sizeof uri);
  snprintf(want_path, sizeof want_path, "%s/%s_sm90.cu", ddir, uri);
  int arch = 90;
  qgen_artifact a;
  char *err = malloc(65536), *src;
  size_t len;

  unsetenv("QGEN_DUMP_SOURCE");
  int rc = qgen_build(&s, NULL, &arch, 1, NULL, &a, NULL, err, 65536);
  check(rc == -1 && strstr(err, "NVRTC failed") && !strstr(err, "source written") && strstr(err, "attend.cu"),
        "a template with a syntax error fails to compile, naming attend.cu; without QGEN_DUMP_SOURCE nothing is written");
  check(count_files(ddir, NULL) == 0, "  (the dump directory is still empty)");

  setenv("QGEN_DUMP_SOURCE", ddir, 1);
  rc = qgen_build(&s, NULL, &arch, 1, NULL, &a, NULL, err, 65536);
  char *nl = strchr(err, '\n');
  char first[4600];
  snprintf(first, sizeof first, "%.*s", nl ? (int)(nl - err) : (int)strlen(err), err);
  char want_msg[4700];
  snprintf(want_msg, sizeof want_msg, "source written to %s", want_path);
  check(rc == -1 && strstr(first, want_msg) != NULL, "with QGEN_DUMP_SOURCE the first line says \"%s\": \"%s\"", want_msg, first);
  src = qgen_emit_source(&s, qgen_arch_of(90), NULL, &len, err, 65536);
  size_t n = 0;
  char rerr[256];
  char *dumped = qgen_read_file(want_path, 1 << 24, &n, rerr, sizeof rerr);
  check(src && dumped && n == len && !memcmp(src, dumped, len) && strstr(dumped, "qgen_injected_error"),
        "the file holds exactly the emitted unit (%zu bytes), injected error included", n);
  check(count_files(ddir, NULL) == 1, "no temp files next to it");
  free(dumped);
  free(src);

  /* a second failure overwrites it atomically */
  rc = qgen_build(&s, NULL, &arch, 1, NULL, &a, NULL, err, 65536);
  check(rc == -1 && strstr(err, want_path) && count_files(ddir, NULL) == 1, "a second failure rewrites the same file");

  char notdir[4200];
  snprintf(notdir, sizeof notdir, "%s/no/such/dir", root);
  setenv("QGEN_DUMP_SOURCE", notdir, 1);
  rc = qgen_build(&s, NULL, &arch, 1, NULL, &a, NULL, err, 65536);
  check(rc == -1 && strstr(err, "not a directory") && strstr(err, "NVRTC failed") && strstr(err, "qgen_injected_error"),
        "QGEN_DUMP_SOURCE naming no directory: the compile error is still reported, with a note");
  snprintf(notdir, sizeof notdir, "%s/dump/%s_sm90.cu", root, uri); /* a file, not a dir */
  setenv("QGEN_DUMP_SOURCE", notdir, 1);
  rc = qgen_build(&s, NULL, &arch, 1, NULL, &a, NULL, err, 65536);
  check(rc == -1 && strstr(err, "not a directory"), "QGEN_DUMP_SOURCE naming a file: a note, no crash");

  unsetenv("QGEN_DUMP_SOURCE");
  if (saved) setenv("QGEN_TEMPLATE_DIR", saved, 1);
  else unsetenv("QGEN_TEMPLATE_DIR");
  free(saved);
  free(err);
}

/* A build that fails before any job writes its artifact (here: a template directory without
   the templates) frees nothing the caller handed it uninitialised: the artifacts, poisoned
   first, come back zeroed (the error path freed them as they were; qgen emit crashed under
   ASan). No NVRTC needed: the unit is never emitted. */
static void failed_build_tests(void) {
  qgen_spec_set set = {0};
  char err[4096];
  if (qgen_spec_load(QGEN_SOURCE_DIR "/specs/qwen2.5-0.5b.lua", &set, err, sizeof err) != 0) {
    check(0, "load qwen2.5-0.5b: %s", err);
    return;
  }
  char *saved = getenv("QGEN_TEMPLATE_DIR") ? strdup(getenv("QGEN_TEMPLATE_DIR")) : NULL;
  char empty[4200];
  snprintf(empty, sizeof empty, "%s/no-templates", root);
  mkdir(empty, 0700);
  setenv("QGEN_TEMPLATE_DIR", empty, 1);
  qgen_artifact a[2];
  memset(a, 0xA5, sizeof a);
  const int archs[2] = {80, 90};
  const int rc = qgen_build(&set.v[0], NULL, archs, 2, NULL, a, NULL, err, sizeof err);
  static const qgen_artifact zero;
  check(rc == -1 && strstr(err, "cannot open") && !memcmp(&a[0], &zero, sizeof zero) && !memcmp(&a[1], &zero, sizeof zero),
        "a build failing before its jobs write an artifact: -1, the missing template named, the poisoned artifacts zeroed (%s)", err);
  if (saved) setenv("QGEN_TEMPLATE_DIR", saved, 1);
  else unsetenv("QGEN_TEMPLATE_DIR");
  free(saved);
}

int main(void) {
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("QGEN_QUIET", "1", 1);
  key_tests();
  cache_version_miss();
  artifact_tests();
  rescore_units();
  failed_build_tests();
  int major = 0, minor = 0;
  char err[512];
  int have = qgen_nvrtc_version(&major, &minor, err, sizeof err) == 0;
  if (!have) printf("NVRTC unavailable: %s\n", err);
  else printf("NVRTC %d.%d\n", major, minor);
  build_version_miss(have, major, minor);
  dump_tests(have);
  rm_rf(root);
  printf("%d passed, %d failed", passed, failed);
  if (skipped) printf(", %d skipped", skipped);
  printf("\n");
  return failed ? 1 : 0;
}
