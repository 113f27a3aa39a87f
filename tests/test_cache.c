/* test_cache.c — the on-disk kernel cache: hits across instances, corruption and truncation
 * as misses, concurrent writers and readers, unwritable directories, QGEN_CACHE=off, the
 * directory resolution order, clear, and hostile files and names. */
#define _GNU_SOURCE
#include "jit/cache.h"
#include "base/le.h"
#include "base/rng.h"
#include "base/sha256.h"
#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"

#define HDR 168 /* magic 8, version 4, flags 4, key 32, size 8, sha256 32, spec name 80 */
#define HDR_V1 88 /* format 1: no spec name */

static char root[4096]; /* this run's temp dir */


/* ---- helpers ------------------------------------------------------------------------ */

static char *tpath(char *buf, const char *rel) {
  qgen_fmt(buf, 4096, "%s/%s", root, rel);
  return buf;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}
static void rm_rf(const char *p) { nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void make_key(int i, uint8_t key[32]) {
  char s[32];
  int n = snprintf(s, sizeof s, "key-%d", i);
  qgen_sha256_buf(s, (size_t)n, key);
}

/* Deterministic payload for a key: every key has exactly one right content. */
static uint8_t *make_payload(const uint8_t key[32], size_t n) {
  uint8_t *p = malloc(n ? n : 1);
  uint64_t x;
  memcpy(&x, key, 8);
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(qgen_rng_next(&x) >> 24);
  return p;
}

static int write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(p, 1, n, f);
  return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static uint8_t *read_bytes(const char *path, size_t *n) {
  char err[256];
  return (uint8_t *)qgen_read_file(path, 1u << 30, n, err, sizeof err);
}

static int exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* Open a fresh cache on dir and look (name, key) up: a disk read, never the memory of an
   earlier instance. Returns 1 on a hit whose data equals want (NULL: any data), 0 on a
   miss, -1 on a hit with the wrong data. */
static int fresh_get(const char *dir, const char *name, const uint8_t key[32], const void *want,
                     size_t want_n) {
  qgen_cache *c = qgen_cache_open(dir);
  void *d = NULL;
  size_t n = 0;
  int r = qgen_cache_get(c, name, key, &d, &n);
  if (r == 1 && want && (n != want_n || (n && memcmp(d, want, n) != 0))) r = -1;
  free(d);
  qgen_cache_close(c);
  return r;
}

typedef struct {
  int n, ok, bad;
} list_tally;
static void tally_cb(void *ud, const qgen_cache_item *it) {
  list_tally *t = ud;
  t->n++;
  if (!it->problem) t->ok++;
  else t->bad++;
}
static list_tally list_dir(const char *dir) {
  list_tally t = {0, 0, 0};
  qgen_cache *c = qgen_cache_open(dir);
  int r = qgen_cache_list(c, tally_cb, &t);
  if (r != t.n) t.n = -1;
  qgen_cache_close(c);
  return t;
}

/* Count directory entries whose name contains s (NULL: all but . and ..). */
static int count_files(const char *dir, const char *s) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && (!s || strstr(de->d_name, s))) n++;
  closedir(d);
  return n;
}

/* stderr capture into a temp file. */
static int cap_saved = -1;
static FILE *cap_file;
static void capture_begin(void) {
  fflush(stderr);
  cap_file = tmpfile();
  cap_saved = dup(2);
  dup2(fileno(cap_file), 2);
}
static int capture_end_count_warnings(void) {
  fflush(stderr);
  dup2(cap_saved, 2);
  close(cap_saved);
  rewind(cap_file);
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, cap_file)) {
    if (strstr(line, "warning")) n++;
    fprintf(stderr, "      [stderr] %s", line); /* show what was said */
  }
  fclose(cap_file);
  return n;
}

static long vm_peak_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmPeak: %ld kB", &kb) == 1) break;
  fclose(f);
  return kb;
}

/* ---- (1) miss, put, hit; across instances --------------------------------------------- */

static void test_basic(void) {
  char dir[4096], path[4096];
  tpath(dir, "basic/nested/cache"); /* open creates the whole path */
  uint8_t key[32], other[32];
  make_key(1, key);
  make_key(2, other);
  size_t n = 5000;
  uint8_t *pay = make_payload(key, n);

  qgen_cache *a = qgen_cache_open(dir);
  check(a && qgen_cache_dir(a) && strcmp(qgen_cache_dir(a), dir) == 0,
        "open creates the directory and reports it");
  void *d = NULL;
  size_t dn = 0;
  check(qgen_cache_get(a, "model_d128", key, &d, &dn) == 0, "empty cache: miss");
  check(qgen_cache_put(a, "model_d128", NULL, key, pay, n) == 0, "put reaches the disk (returns 0)");
  int r = qgen_cache_get(a, "model_d128", key, &d, &dn);
  check(r == 1 && dn == n && memcmp(d, pay, n) == 0, "same instance: hit, data equal");
  free(d);
  d = NULL;
  qgen_cache_entry_path(a, "model_d128", key, path, sizeof path);
  char hex[65], want_path[4096];
  qgen_hex(key, 8, hex);
  qgen_fmt(want_path, sizeof want_path, "%s/model_d128-%s.qgc", dir, hex);
  check(strcmp(path, want_path) == 0, "entry path is <dir>/<name>-<16 hex>.qgc");
  struct stat st;
  check(stat(path, &st) == 0 && (size_t)st.st_size == HDR + n, "entry file is header + payload");
  qgen_cache_close(a);

  qgen_cache *b = qgen_cache_open(dir);
  r = qgen_cache_get(b, "model_d128", key, &d, &dn);
  check(r == 1 && dn == n && memcmp(d, pay, n) == 0, "second instance: hit from disk, data equal");
  free(d);
  d = NULL;
  check(qgen_cache_get(b, "model_d128", other, &d, &dn) == 0, "other key, same name: miss");
  check(qgen_cache_get(b, "model_d64", key, &d, &dn) == 0, "same key, other name: miss");
  /* Remove the file: the entry read above is still held in memory. */
  unlink(path);
  r = qgen_cache_get(b, "model_d128", key, &d, &dn);
  check(r == 1 && dn == n && memcmp(d, pay, n) == 0, "entry read once stays in memory");
  free(d);
  d = NULL;
  check(qgen_cache_put(b, "model_d128", NULL, key, pay, n) == 0 && fresh_get(dir, "model_d128", key, pay, n) == 1,
        "put after the file vanished writes it again");

  /* Empty payload. */
  check(qgen_cache_put(b, "empty", NULL, other, NULL, 0) == 0, "put of an empty payload");
  qgen_cache_close(b);
  check(fresh_get(dir, "empty", other, "", 0) == 1, "empty payload: hit from disk, size 0");

  list_tally t = list_dir(dir);
  check(t.n == 2 && t.ok == 2, "list: 2 entries, both verify (got %d, %d ok)", t.n, t.ok);

  /* The directory removed under an open cache is made again by the next put. */
  qgen_cache *c = qgen_cache_open(dir);
  rm_rf(dir);
  check(qgen_cache_put(c, "again", NULL, key, pay, n) == 0 && fresh_get(dir, "again", key, pay, n) == 1,
        "directory removed under an open cache: put recreates it");
  qgen_cache_close(c);
  free(pay);
}

/* ---- (2) truncation, bit flips, other key, other version ----------------------------- */

static void test_corruption(void) {
  char dir[4096], path[4096];
  tpath(dir, "corrupt");
  uint8_t key[32];
  make_key(10, key);
  size_t n = 1000;
  uint8_t *pay = make_payload(key, n);
  const char *name = "corrupt-me";

  qgen_cache *c = qgen_cache_open(dir);
  qgen_cache_put(c, name, NULL, key, pay, n);
  qgen_cache_entry_path(c, name, key, path, sizeof path);
  qgen_cache_close(c);
  size_t len = 0;
  uint8_t *good = read_bytes(path, &len);
  check(good && len == HDR + n && fresh_get(dir, name, key, pay, n) == 1, "valid entry written");
  if (!good) return;

  /* Truncations: inside the magic, version, flags, key, size, checksum, payload, and 1 short. */
  static const size_t cuts[] = {0, 1, 7, 8, 11, 12, 16, 30, 47, 48, 55, 56, 70, 87, 88, 89, 500};
  int nmiss = 0, ncut = 0, nbad_list = 0;
  for (size_t i = 0; i <= sizeof cuts / sizeof cuts[0]; i++) {
    size_t at = i < sizeof cuts / sizeof cuts[0] ? cuts[i] : len - 1;
    write_bytes(path, good, at);
    ncut++;
    if (fresh_get(dir, name, key, NULL, 0) == 0) nmiss++;
    else printf("      truncated at %zu: not a miss\n", at);
    list_tally t = list_dir(dir);
    if (t.n == 1 && t.bad == 1) nbad_list++;
  }
  check(nmiss == ncut, "truncated at %d offsets (header, key, checksum, payload, 1 short): all misses",
        ncut);
  check(nbad_list == ncut, "list reports each truncated entry as not ok");
  c = qgen_cache_open(dir);
  int r = qgen_cache_put(c, name, NULL, key, pay, n);
  qgen_cache_close(c);
  list_tally t = list_dir(dir);
  check(r == 0 && fresh_get(dir, name, key, pay, n) == 1 && t.ok == 1 && t.n == 1,
        "put after truncation rebuilds a valid entry");

  /* One bit flipped: magic, version, flags, key, size (low and high), checksum, payload. */
  static const size_t flips[] = {0, 5, 8, 11, 12, 15, 16, 31, 47, 48, 50, 55, 56, 70, 87, 88, 600};
  int nflip = 0;
  nmiss = 0;
  for (size_t i = 0; i <= sizeof flips / sizeof flips[0]; i++) {
    size_t at = i < sizeof flips / sizeof flips[0] ? flips[i] : len - 1;
    uint8_t *bad = malloc(len);
    memcpy(bad, good, len);
    bad[at] ^= (uint8_t)(1u << (at % 8));
    write_bytes(path, bad, len);
    free(bad);
    nflip++;
    if (fresh_get(dir, name, key, NULL, 0) == 0) nmiss++;
    else printf("      bit flipped at %zu: not a miss\n", at);
  }
  check(nmiss == nflip, "a bit flipped at %d places (header, key, checksum, payload): all misses",
        nflip);
  c = qgen_cache_open(dir);
  r = qgen_cache_put(c, name, NULL, key, pay, n);
  qgen_cache_close(c);
  check(r == 0 && fresh_get(dir, name, key, pay, n) == 1, "put after a bit flip rebuilds a valid entry");

  /* One byte too long. */
  uint8_t *longer = malloc(len + 1);
  memcpy(longer, good, len);
  longer[len] = 0;
  write_bytes(path, longer, len + 1);
  free(longer);
  check(fresh_get(dir, name, key, NULL, 0) == 0, "one byte too long: miss");

  /* Another key under the same file name (the same first 8 bytes). */
  uint8_t key2[32];
  memcpy(key2, key, 32);
  key2[31] ^= 1;
  char path2[4096];
  c = qgen_cache_open(dir);
  qgen_cache_entry_path(c, name, key2, path2, sizeof path2);
  check(strcmp(path, path2) == 0, "keys that differ after byte 8 share the file name");
  r = qgen_cache_put(c, name, NULL, key, pay, n);
  qgen_cache_close(c);
  check(r == 0 && fresh_get(dir, name, key2, NULL, 0) == 0,
        "file holding a different key under the same name: miss");
  check(fresh_get(dir, name, key, pay, n) == 1, "... while its own key still hits");

  /* Another format version, the rest of the file consistent. */
  uint8_t *ver = malloc(len);
  memcpy(ver, good, len);
  uint32_t v = QGEN_CACHE_FORMAT + 1;
  qgen_wr32(ver + 8, v);
  write_bytes(path, ver, len);
  check(fresh_get(dir, name, key, NULL, 0) == 0, "format version %u: miss", v);
  ver[8] = ver[9] = ver[10] = ver[11] = 0;
  write_bytes(path, ver, len);
  check(fresh_get(dir, name, key, NULL, 0) == 0, "format version 0: miss");
  ver[8] = QGEN_CACHE_FORMAT;
  ver[12] = 1;
  write_bytes(path, ver, len);
  check(fresh_get(dir, name, key, NULL, 0) == 0, "nonzero flags: miss");
  free(ver);
  c = qgen_cache_open(dir);
  r = qgen_cache_put(c, name, NULL, key, pay, n);
  qgen_cache_close(c);
  check(r == 0 && fresh_get(dir, name, key, pay, n) == 1, "put after a version mismatch rebuilds it");

  /* Sanity: the untouched original bytes are a hit (the tests above were not vacuous). */
  write_bytes(path, good, len);
  check(fresh_get(dir, name, key, pay, n) == 1, "original bytes written back: hit");
  free(good);
  free(pay);
}

/* ---- (3) concurrency ---------------------------------------------------------------- */

#define NSAME 8
#define NDISTINCT 8
#define NREADERS 4
#define WRITES 4
#define READS 25

static size_t conc_size(int k) { return k == 0 ? 300000 : 40000 + 4096 * (size_t)k; }
static void conc_name(int k, char *buf) {
  if (k == 0) strcpy(buf, "shared");
  else sprintf(buf, "distinct%d", k);
}

/* k = 0: the shared key, 1..NDISTINCT: one key per writer. */
static int child_writer(const char *dir, int k) {
  uint8_t key[32];
  char name[32];
  make_key(100 + k, key);
  conc_name(k, name);
  uint8_t *pay = make_payload(key, conc_size(k));
  int bad = 0;
  for (int i = 0; i < WRITES; i++) {
    qgen_cache *c = qgen_cache_open(dir);
    if (qgen_cache_put(c, name, NULL, key, pay, conc_size(k)) != 0) bad = 1;
    qgen_cache_close(c);
  }
  free(pay);
  return bad;
}

static int child_reader(const char *dir) {
  uint8_t *want[NDISTINCT + 1];
  uint8_t keys[NDISTINCT + 1][32];
  for (int k = 0; k <= NDISTINCT; k++) {
    make_key(100 + k, keys[k]);
    want[k] = make_payload(keys[k], conc_size(k));
  }
  int wrong = 0;
  for (int i = 0; i < READS && !wrong; i++)
    for (int k = 0; k <= NDISTINCT; k++) {
      char name[32];
      conc_name(k, name);
      if (fresh_get(dir, name, keys[k], want[k], conc_size(k)) < 0) wrong = 1;
    }
  for (int k = 0; k <= NDISTINCT; k++) free(want[k]);
  return wrong ? 2 : 0;
}

static void test_concurrency(void) {
  int rounds = 3, bad_exit = 0, bad_list = 0, temps = 0, bad_final = 0;
  for (int round = 0; round < rounds; round++) {
    char dir[4096], rel[64];
    qgen_fmt(rel, sizeof rel, "conc%d", round);
    tpath(dir, rel);
    qgen_cache_close(qgen_cache_open(dir)); /* a fresh, empty directory */
    int gate[2];
    if (pipe(gate) != 0) return;
    pid_t pids[NSAME + NDISTINCT + NREADERS];
    int np = 0;
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < NSAME + NDISTINCT + NREADERS; i++) {
      pid_t p = fork();
      if (p == 0) {
        close(gate[1]);
        char b;
        while (read(gate[0], &b, 1) < 0 && errno == EINTR) {
        } /* released together when the parent closes the pipe */
        int rc = i < NSAME ? child_writer(dir, 0)
                 : i < NSAME + NDISTINCT ? child_writer(dir, 1 + i - NSAME)
                                         : child_reader(dir);
        _exit(rc);
      }
      if (p > 0) pids[np++] = p;
    }
    close(gate[0]);
    close(gate[1]); /* go */
    for (int i = 0; i < np; i++) {
      int st;
      if (waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        bad_exit++;
        printf("      round %d child %d: %s %d\n", round, i,
               WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      }
    }
    if (np != NSAME + NDISTINCT + NREADERS) bad_exit++;
    list_tally t = list_dir(dir);
    if (t.n != 1 + NDISTINCT || t.ok != t.n) {
      bad_list++;
      printf("      round %d: list %d entries, %d ok\n", round, t.n, t.ok);
    }
    temps += count_files(dir, ".tmp.");
    for (int k = 0; k <= NDISTINCT; k++) {
      uint8_t key[32];
      char name[32];
      make_key(100 + k, key);
      conc_name(k, name);
      uint8_t *want = make_payload(key, conc_size(k));
      if (fresh_get(dir, name, key, want, conc_size(k)) != 1) bad_final++;
      free(want);
    }
  }
  check(bad_exit == 0, "%d rounds of %d same-key + %d distinct-key writers + %d readers: every "
        "put reached the disk, no reader saw wrong data", rounds, NSAME, NDISTINCT, NREADERS);
  check(bad_list == 0, "after each round every entry verifies (list: %d entries, all ok)",
        1 + NDISTINCT);
  check(temps == 0, "no temp files remain (%d found)", temps);
  check(bad_final == 0, "after each round every key hits with its data");
}

/* ---- (4) unwritable directory -------------------------------------------------------- */

static void test_unwritable(void) {
  char file[4096], dir[4096];
  tpath(file, "plainfile");
  write_bytes(file, "x", 1);
  qgen_fmt(dir, sizeof dir, "%s/cache", file); /* parent is a regular file */
  uint8_t k1[32], k2[32];
  make_key(20, k1);
  make_key(21, k2);
  uint8_t *p1 = make_payload(k1, 777), *p2 = make_payload(k2, 333);

  capture_begin();
  qgen_cache *c = qgen_cache_open(dir);
  const char *cd = qgen_cache_dir(c);
  int r1 = qgen_cache_put(c, "one", NULL, k1, p1, 777);
  int r2 = qgen_cache_put(c, "two", NULL, k2, p2, 333);
  void *d = NULL;
  size_t n = 0;
  int g1 = qgen_cache_get(c, "one", k1, &d, &n) == 1 && n == 777 && memcmp(d, p1, n) == 0;
  free(d);
  d = NULL;
  int g2 = qgen_cache_get(c, "two", k2, &d, &n) == 1 && n == 333 && memcmp(d, p2, n) == 0;
  free(d);
  d = NULL;
  char path[4096] = "x";
  qgen_cache_entry_path(c, "one", k1, path, sizeof path);
  qgen_cache_close(c);
  int warnings = capture_end_count_warnings();
  check(c != NULL && cd == NULL, "directory under a regular file: open succeeds, memory only");
  check(r1 == 1 && r2 == 1, "put returns 1 (held in memory only)");
  check(g1 && g2, "get hits from memory with the right data");
  check(path[0] == 0, "entry path is \"\" when memory-only");
  check(warnings == 1, "exactly one warning (got %d)", warnings);

  /* A directory that is there at open but can't be written later. */
  char gone[4096];
  tpath(gone, "gone");
  capture_begin();
  c = qgen_cache_open(gone);
  int had_dir = qgen_cache_dir(c) != NULL;
  rm_rf(gone);
  write_bytes(gone, "x", 1); /* now a regular file: no put can succeed */
  r1 = qgen_cache_put(c, "one", NULL, k1, p1, 777);
  r2 = qgen_cache_put(c, "two", NULL, k2, p2, 333);
  int r3 = qgen_cache_put(c, "one", NULL, k1, p1, 777);
  g1 = qgen_cache_get(c, "one", k1, &d, &n) == 1 && n == 777 && memcmp(d, p1, n) == 0;
  free(d);
  qgen_cache_close(c);
  warnings = capture_end_count_warnings();
  check(had_dir && r1 == 1 && r2 == 1 && r3 == 1 && g1,
        "directory lost after open: puts return 1, get hits from memory");
  check(warnings == 1, "... with exactly one warning (got %d)", warnings);
  free(p1);
  free(p2);
}

/* ---- (5) QGEN_CACHE=off ------------------------------------------------------------- */

static void test_off(void) {
  char dir[4096];
  tpath(dir, "off-dir");
  uint8_t key[32];
  make_key(30, key);
  uint8_t *pay = make_payload(key, 100);
  setenv("QGEN_CACHE", "off", 1);
  capture_begin();
  qgen_cache *a = qgen_cache_open(NULL);
  qgen_cache *b = qgen_cache_open(dir);
  int dirs_null = qgen_cache_dir(a) == NULL && qgen_cache_dir(b) == NULL;
  int r = qgen_cache_put(b, "k", NULL, key, pay, 100);
  void *d = NULL;
  size_t n = 0;
  int hit = qgen_cache_get(b, "k", key, &d, &n) == 1 && n == 100 && memcmp(d, pay, 100) == 0;
  free(d);
  d = NULL;
  int miss_other = qgen_cache_get(a, "k", key, &d, &n) == 0;
  list_tally t = {0, 0, 0};
  int lr = qgen_cache_list(b, tally_cb, &t);
  int cr = qgen_cache_clear(b, NULL, NULL);
  int after_clear = qgen_cache_get(b, "k", key, &d, &n) == 0;
  qgen_cache_close(a);
  qgen_cache_close(b);
  int warnings = capture_end_count_warnings();
  unsetenv("QGEN_CACHE");
  check(dirs_null, "QGEN_CACHE=off: qgen_cache_dir is NULL (env and explicit dir)");
  check(!exists(dir), "QGEN_CACHE=off: the explicit directory is not created");
  check(r == 1 && hit, "QGEN_CACHE=off: put returns 1, get hits from memory");
  check(miss_other, "QGEN_CACHE=off: another instance does not see it");
  check(lr == 0 && t.n == 0 && cr == 0 && after_clear, "QGEN_CACHE=off: list 0, clear 0 drops memory");
  check(warnings == 0, "QGEN_CACHE=off: no warning (got %d)", warnings);
  free(pay);
}

/* ---- (6) directory resolution ------------------------------------------------------- */

static char *save_env(const char *k) {
  const char *v = getenv(k);
  return v ? strdup(v) : NULL;
}
static void restore_env(const char *k, char *v) {
  if (v) setenv(k, v, 1);
  else unsetenv(k);
  free(v);
}

static int dir_is(const char *want) {
  qgen_cache *c = qgen_cache_open(NULL);
  const char *d = qgen_cache_dir(c);
  int ok = want ? (d && strcmp(d, want) == 0) : d == NULL;
  if (!ok) printf("      dir %s, want %s\n", d ? d : "(null)", want ? want : "(null)");
  qgen_cache_close(c);
  return ok;
}

static void test_env(void) {
  char *s_q = save_env("QGEN_CACHE_DIR"), *s_x = save_env("XDG_CACHE_HOME"), *s_h = save_env("HOME");
  char q[4096], x[4096], h[4096], want[4096];
  tpath(q, "env-q");
  tpath(x, "env-x");
  tpath(h, "env-h");
  setenv("QGEN_CACHE_DIR", q, 1);
  setenv("XDG_CACHE_HOME", x, 1);
  setenv("HOME", h, 1);
  check(dir_is(q), "QGEN_CACHE_DIR first");
  qgen_fmt(want, sizeof want, "%s/", q);
  setenv("QGEN_CACHE_DIR", want, 1);
  check(dir_is(q), "QGEN_CACHE_DIR with a trailing '/': same directory");
  char expl[4096];
  tpath(expl, "env-explicit");
  qgen_cache *c = qgen_cache_open(expl);
  check(strcmp(qgen_cache_dir(c), expl) == 0, "an explicit dir wins over the environment");
  qgen_cache_close(c);

  qgen_fmt(want, sizeof want, "%s/qgen", x);
  setenv("QGEN_CACHE_DIR", "", 1);
  check(dir_is(want), "QGEN_CACHE_DIR empty: $XDG_CACHE_HOME/qgen");
  unsetenv("QGEN_CACHE_DIR");
  check(dir_is(want), "QGEN_CACHE_DIR unset: $XDG_CACHE_HOME/qgen");

  qgen_fmt(want, sizeof want, "%s/.cache/qgen", h);
  setenv("XDG_CACHE_HOME", "relative/path", 1);
  check(dir_is(want), "XDG_CACHE_HOME relative (ignored): $HOME/.cache/qgen");
  unsetenv("XDG_CACHE_HOME");
  check(dir_is(want), "XDG_CACHE_HOME unset: $HOME/.cache/qgen");

  unsetenv("HOME");
  capture_begin();
  int none = dir_is(NULL);
  int warnings = capture_end_count_warnings();
  check(none && warnings == 1, "nothing set: memory only, one warning (got %d)", warnings);

  restore_env("QGEN_CACHE_DIR", s_q);
  restore_env("XDG_CACHE_HOME", s_x);
  restore_env("HOME", s_h);
}

/* ---- (7) clear ---------------------------------------------------------------------- */

static void count_left(void *ud, const char *file) {
  (void)file;
  ++*(int *)ud;
}

static void test_clear(void) {
  char dir[4096], p[4096];
  tpath(dir, "clear");
  qgen_cache *c = qgen_cache_open(dir);
  uint8_t keys[3][32];
  for (int i = 0; i < 3; i++) {
    make_key(40 + i, keys[i]);
    char name[16];
    qgen_fmt(name, sizeof name, "e%d", i);
    qgen_cache_put(c, name, NULL, keys[i], "payload", 7);
  }
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  /* A temp file of a process that is gone, an old one of a live process, and a fresh one
     of a live process (a write in progress: kept). */
  qgen_fmt(p, sizeof p, "%s/e9-0123456789abcdef.qgc.tmp.%ld.0.123", dir, (long)dead);
  write_bytes(p, "partial", 7);
  qgen_fmt(p, sizeof p, "%s/e8-0123456789abcdef.qgc.tmp.%ld.1.456", dir, (long)getpid());
  write_bytes(p, "partial", 7);
  struct timespec old[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
  utimensat(AT_FDCWD, p, old, 0);
  char fresh[4096];
  qgen_fmt(fresh, sizeof fresh, "%s/e7-0123456789abcdef.qgc.tmp.%ld.2.789", dir, (long)getpid());
  write_bytes(fresh, "partial", 7);
  /* Files that are not ours. */
  qgen_fmt(p, sizeof p, "%s/notes.txt", dir);
  write_bytes(p, "keep", 4);
  qgen_fmt(p, sizeof p, "%s/backup.qgc.bak", dir);
  write_bytes(p, "keep", 4);
  qgen_fmt(p, sizeof p, "%s/sub.qgc", dir);
  mkdir(p, 0755);
  /* A user's files that merely look like ours (the cache directory is a project folder),
     old enough for any stale-temp rule: a name ending in .qgc, a backup of a temp file,
     an entry's exact name over other bytes. */
  static const char *const theirs[] = {"thesis.qgc", "chapter1.qgc.tmp.bak", "notes-0123456789abcdef.qgc",
                                       "e8-0123456789abcdef.qgc.tmp.1.2.x"};
  for (size_t i = 0; i < sizeof theirs / sizeof *theirs; i++) {
    qgen_fmt(p, sizeof p, "%s/%s", dir, theirs[i]);
    write_bytes(p, "my own words", 12);
    utimensat(AT_FDCWD, p, old, 0);
  }

  int n_left = 0;
  int removed = qgen_cache_clear(c, count_left, &n_left);
  check(removed == 5, "clear removed 3 entries + 2 stale temp files (returned %d)", removed);
  check(count_files(dir, NULL) == 8, "clear left 8 files (notes.txt, backup.qgc.bak, sub.qgc/, 4 look-alikes, "
        "the fresh temp file): %d", count_files(dir, NULL));
  qgen_fmt(p, sizeof p, "%s/notes.txt", dir);
  int kept = exists(p) && exists(fresh);
  qgen_fmt(p, sizeof p, "%s/backup.qgc.bak", dir);
  kept = kept && exists(p);
  for (size_t i = 0; i < sizeof theirs / sizeof *theirs; i++) {
    qgen_fmt(p, sizeof p, "%s/%s", dir, theirs[i]);
    size_t len = 0;
    uint8_t *b = read_bytes(p, &len);
    kept = kept && b && len == 12 && !memcmp(b, "my own words", 12);
    free(b);
  }
  qgen_fmt(p, sizeof p, "%s/sub.qgc", dir);
  check(kept && exists(p), "other files, the look-alikes and the in-progress temp file are untouched");
  check(n_left == 7, "... and the 7 files that are not the cache's are named to the caller (%d)", n_left);
  void *d = NULL;
  size_t n = 0;
  check(qgen_cache_get(c, "e0", keys[0], &d, &n) == 0, "after clear: miss (memory dropped too)");
  check(fresh_get(dir, "e1", keys[1], NULL, 0) == 0, "after clear: miss from a fresh instance");
  check(qgen_cache_put(c, "e0", NULL, keys[0], "payload", 7) == 0 && fresh_get(dir, "e0", keys[0], "payload", 7) == 1,
        "put after clear works");
  qgen_cache_close(c);
}

/* ---- (8) hostile files and names ----------------------------------------------------- */

static void write_header(uint8_t *h, const uint8_t key[32], uint64_t size) {
  memset(h, 0, HDR);
  memcpy(h, "QGENCACH", 8);
  h[8] = QGEN_CACHE_FORMAT;
  memcpy(h + 16, key, 32);
  for (int i = 0; i < 8; i++) h[48 + i] = (uint8_t)(size >> (8 * i));
}

static void test_hostile(void) {
  char dir[4096], path[4096];
  tpath(dir, "hostile/cache");
  uint8_t key[32];
  make_key(50, key);
  qgen_cache *c = qgen_cache_open(dir);
  qgen_cache_entry_path(c, "big", key, path, sizeof path);
  qgen_cache_close(c);

  long peak0 = vm_peak_kb();
  static const uint64_t sizes[] = {UINT64_MAX, (uint64_t)1 << 40, QGEN_CACHE_MAX_ENTRY + 1ull,
                                   QGEN_CACHE_MAX_ENTRY, 1000};
  int misses = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    uint8_t file[HDR + 100];
    write_header(file, key, sizes[i]);
    memset(file + HDR, 7, 100);
    write_bytes(path, file, sizeof file);
    if (fresh_get(dir, "big", key, NULL, 0) == 0) misses++;
  }
  check(misses == 5, "declared payload sizes 2^64-1, 2^40, MAX+1, MAX, 1000 in a small file: misses");

  /* A sparse file really that large: rejected by its size, never read or allocated. */
  uint8_t h[HDR];
  write_header(h, key, QGEN_CACHE_MAX_ENTRY + 1ull);
  write_bytes(path, h, HDR);
  int tr = truncate(path, (off_t)(HDR + QGEN_CACHE_MAX_ENTRY + 1ull));
  double t0 = qgen_now_ms();
  int r = fresh_get(dir, "big", key, NULL, 0);
  double ms = qgen_now_ms() - t0;
  list_tally t = list_dir(dir);
  long peak1 = vm_peak_kb();
  check(tr == 0 && r == 0 && t.n == 1 && t.bad == 1,
        "a %u MiB + 1 byte (sparse) entry: miss, listed as not ok", QGEN_CACHE_MAX_ENTRY >> 20);
  check(peak0 > 0 && peak1 - peak0 < 128 * 1024 && ms < 500,
        "... without allocating or reading it (peak VM +%ld KiB, %.1f ms)", peak1 - peak0, ms);
  unlink(path);

  /* A FIFO under an entry's name: a miss, not a hang. */
  mkfifo(path, 0644);
  check(fresh_get(dir, "big", key, NULL, 0) == 0, "a FIFO in an entry's place: miss, no hang");
  t = list_dir(dir);
  check(t.n == 1 && t.bad == 1, "... and listed as not ok");
  unlink(path);

  /* Names never leave the directory. */
  static const struct { const char *name, *file; } names[] = {
      {"../../evil", ".._.._evil"},
      {"a/b c\xff\x01", "a_b_c__"},
      {"..", ".."},
      {"/etc/passwd", "_etc_passwd"},
      {"ok.name_1-x", "ok.name_1-x"},
      {"", "entry"},
      {NULL, "entry"},
  };
  char hex[17];
  qgen_hex(key, 8, hex);
  int bad = 0;
  c = qgen_cache_open(dir);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char want[4096];
    qgen_fmt(want, sizeof want, "%s/%s-%s.qgc", dir, names[i].file, hex);
    qgen_cache_entry_path(c, names[i].name, key, path, sizeof path);
    if (strcmp(path, want) != 0) {
      printf("      name \"%s\": path %s, want %s\n", names[i].name ? names[i].name : "(null)",
             path, want);
      bad++;
    }
    qgen_cache_clear(c, NULL, NULL);
    if (qgen_cache_put(c, names[i].name, NULL, key, "x", 1) != 0 || !exists(want) ||
        fresh_get(dir, names[i].name, key, "x", 1) != 1)
      bad++;
  }
  char longname[400];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  qgen_cache_entry_path(c, longname, key, path, sizeof path);
  const char *base = strrchr(path, '/');
  int long_ok = base && strlen(base + 1) == 100 + 1 + 16 + 4 &&
                qgen_cache_put(c, longname, NULL, key, "y", 1) == 0 && fresh_get(dir, longname, key, "y", 1) == 1;
  qgen_cache_close(c);
  check(bad == 0, "names are sanitized to [A-Za-z0-9._-] and stay in the directory");
  char parent[4096];
  tpath(parent, "hostile");
  check(count_files(parent, NULL) == 1 && count_files(root, "evil") == 0 &&
            count_files(parent, "evil") == 0 && count_files(root, "passwd") == 0,
        "nothing written outside the directory (its parents hold nothing new)");
  check(long_ok, "a 399-byte name is cut to a 100-byte prefix (file name %zu bytes)",
        base ? strlen(base + 1) : 0);
}

/* ---- (9) who may write the directory ------------------------------------------------ */

static void test_permissions(void) {
  char dir[4096], path[4096];
  tpath(dir, "perm/cache");
  uint8_t key[32];
  make_key(60, key);
  uint8_t *pay = make_payload(key, 500);
  qgen_cache *c = qgen_cache_open(dir);
  int r = qgen_cache_put(c, "kern", "model-a", key, pay, 500);
  qgen_cache_entry_path(c, "kern", key, path, sizeof path);
  qgen_cache_close(c);
  struct stat st;
  check(r == 0 && stat(dir, &st) == 0 && (st.st_mode & 022) == 0, "a directory the cache makes: mode %04o, no group or "
        "other write, whatever the umask", (unsigned)(st.st_mode & 07777));

  chmod(dir, 0775);
  capture_begin();
  c = qgen_cache_open(dir);
  void *d = NULL;
  size_t n = 0;
  int hit = qgen_cache_get(c, "kern", key, &d, &n);
  free(d);
  d = NULL;
  const int memory_only = qgen_cache_dir(c) == NULL, said = strstr(qgen_cache_problem(c), "chmod go-w") != NULL;
  qgen_cache_close(c);
  int warnings = capture_end_count_warnings();
  check(hit == 0 && memory_only && said && warnings == 1,
        "a group-writable directory: not used (memory only, a miss), one warning that says to chmod go-w");
  chmod(dir, 0757);
  check(fresh_get(dir, "kern", key, pay, 500) == 0, "an other-writable directory: not used either");
  chmod(dir, 0755);
  check(fresh_get(dir, "kern", key, pay, 500) == 1, "chmod go-w: the entry hits again");

  chmod(path, 0666);
  capture_begin();
  c = qgen_cache_open(dir);
  hit = qgen_cache_get(c, "kern", key, &d, &n);
  free(d);
  d = NULL;
  r = qgen_cache_put(c, "kern", "model-a", key, pay, 500);
  qgen_cache_close(c);
  warnings = capture_end_count_warnings();
  check(hit == 0 && warnings == 1, "an entry file others may write: a miss, one warning");
  check(r == 0 && stat(path, &st) == 0 && (st.st_mode & 022) == 0 && fresh_get(dir, "kern", key, pay, 500) == 1,
        "... and the next put replaces it with one of ours (mode %04o), which hits", (unsigned)(st.st_mode & 07777));
  free(pay);
}

/* ---- (10) the spec name in an entry, and format 1 entries -------------------------- */

typedef struct {
  int n;
  char spec[4][96];
} spec_names;
static void spec_cb(void *ud, const qgen_cache_item *it) {
  spec_names *t = ud;
  if (t->n < 4) qgen_fmt(t->spec[t->n], sizeof t->spec[0], "%s%s", it->problem ? "!" : "", it->spec);
  t->n++;
}

static void test_formats(void) {
  char dir[4096], path[4096];
  tpath(dir, "formats");
  uint8_t k1[32], k2[32];
  make_key(70, k1);
  make_key(71, k2);
  uint8_t *p1 = make_payload(k1, 300), *p2 = make_payload(k2, 200);
  qgen_cache *c = qgen_cache_open(dir);
  int r = qgen_cache_put(c, "new", "qwen3/4b x", k1, p1, 300);
  /* a format 1 entry, as an older qgen wrote it: no spec name, the checksum of the payload */
  qgen_cache_entry_path(c, "old", k2, path, sizeof path);
  qgen_cache_close(c);
  uint8_t *f = malloc(HDR_V1 + 200);
  memcpy(f, "QGENCACH", 8);
  qgen_wr32(f + 8, 1);
  qgen_wr32(f + 12, 0);
  memcpy(f + 16, k2, 32);
  qgen_wr64(f + 48, 200);
  qgen_sha256_buf(p2, 200, f + 56);
  memcpy(f + HDR_V1, p2, 200);
  write_bytes(path, f, HDR_V1 + 200);
  free(f);
  spec_names t = {0};
  c = qgen_cache_open(dir);
  qgen_cache_list(c, spec_cb, &t);
  qgen_cache_close(c);
  int new_named = 0, old_unnamed = 0;
  for (int i = 0; i < t.n && i < 4; i++) new_named |= !strcmp(t.spec[i], "qwen3_4b_x"), old_unnamed |= !strcmp(t.spec[i], "");
  check(r == 0 && t.n == 2 && new_named, "an entry records the spec that wrote it, sanitized: \"qwen3_4b_x\"");
  check(old_unnamed && fresh_get(dir, "old", k2, p2, 200) == 1, "a format 1 entry still verifies (no spec name) and hits");
  free(p1);
  free(p2);
}

int main(void) {
  unsetenv("QGEN_QUIET");
  unsetenv("QGEN_CACHE");
  const char *tmp = getenv("TMPDIR");
  qgen_fmt(root, sizeof root, "%s/qgen-test-cache-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 2;
  }
  test_basic();
  test_corruption();
  test_concurrency();
  test_unwritable();
  test_off();
  test_env();
  test_clear();
  test_hostile();
  test_permissions();
  test_formats();
  rm_rf(root);
  check(!exists(root), "temp directory removed");
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
