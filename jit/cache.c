/* cache.c — the on-disk kernel cache (see cache.h for the contract and the file format).
 *
 * Layout of an entry file (all integers little-endian):
 *   0  magic "QGENCACH"      8 bytes
 *   8  format version        u32 (2; format 1 files are still read)
 *  12  flags (0)             u32
 *  16  key                   32 bytes
 *  48  payload size          u64
 *  56  sha256(bytes 88..end) 32 bytes
 *  88  spec name             80 bytes: the spec that wrote the entry, [A-Za-z0-9._-]*,
 *                            NUL-padded (format 1 has no such field)
 * 168  payload
 * A reader trusts nothing in the header: the declared size must equal the file's size
 * less the header (checked against fstat before anything is allocated), and the bytes
 * after the fixed header must hash to the stored checksum.
 */
#define _GNU_SOURCE
#include "jit/cache.h"

#include "base/le.h"
#include "base/sha256.h"
#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HDR_V1 88                /* format 1: no spec name */
#define SPEC_SLOT 80
#define HDR_SIZE (HDR_V1 + SPEC_SLOT) /* format 2 */
#define NAME_MAX_PREFIX 100 /* readable prefix; "-<16 hex>.qgc" follows */
#define FILE_MAX (NAME_MAX_PREFIX + 1 + 16 + 4 + 1)
#define DIR_MAX 3800 /* leaves room for "/<file>" and the temp suffix in a 4096 path */
#define TEMP_STALE_S 60

static const char MAGIC[8] = {'Q', 'G', 'E', 'N', 'C', 'A', 'C', 'H'};

typedef struct mem_entry {
  struct mem_entry *next;
  uint8_t key[32];
  void *data;
  size_t size;
  char file[FILE_MAX];
} mem_entry;

struct qgen_cache {
  char *dir;       /* NULL: memory only. Never changes after open. */
  char problem[4400]; /* why a directory asked for is not used ("" when it is, or none was) */
  int readonly;    /* a write failed: entries are still read from dir, no longer written */
  int warned;      /* the one warning has been printed */
  int warned_file; /* the one warning about an entry others could have written */
  mem_entry *mem;  /* every entry read or written by this process */
  pthread_mutex_t mu; /* guards readonly, warned, mem */
};

/* ---- small helpers ------------------------------------------------------------------ */

/* A byte kept in names: [A-Za-z0-9._-]. */
static int name_byte(unsigned ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
         ch == '-';
}

/* name with every byte outside [A-Za-z0-9._-] turned into '_', cut to max bytes, into out
   (max + 1 bytes); returns its length. */
static size_t sanitize(const char *name, char *out, size_t max) {
  size_t n = 0;
  if (name)
    for (const unsigned char *p = (const unsigned char *)name; *p && n < max; p++) out[n++] = name_byte(*p) ? (char)*p : '_';
  out[n] = 0;
  return n;
}

/* "<sanitized name>-<first 16 hex of key>.qgc". The name keeps [A-Za-z0-9._-] and turns
   every other byte into '_', so it can never hold a '/' (no path escapes; ".." stays a
   plain prefix of a longer name). Empty or NULL names become "entry". */
static void entry_file(const char *name, const uint8_t key[32], char out[FILE_MAX]) {
  size_t n = sanitize(name, out, NAME_MAX_PREFIX);
  if (n == 0) {
    memcpy(out, "entry", 5);
    n = 5;
  }
  out[n++] = '-';
  qgen_hex(key, 8, out + n);
  memcpy(out + n + 16, ".qgc", 5);
}

/* Read exactly n bytes (fewer only at end of file). Returns the count, or -1. */
static ssize_t read_full(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

/* Who may have written a file or directory of this stat besides its owner: NULL when
   only the owner (this user, or root) can, else why not, into why. */
static const char *unsafe(const struct stat *st, char *why, size_t n) {
  if (st->st_mode & (S_IWGRP | S_IWOTH))
    return qgen_fmt(why, n, "is writable by %s (mode %04o)",
                    (st->st_mode & S_IWGRP) && (st->st_mode & S_IWOTH) ? "group and others" : st->st_mode & S_IWGRP ? "its group" : "others",
                    (unsigned)(st->st_mode & 07777));
  if (st->st_uid != geteuid() && st->st_uid != 0)
    return qgen_fmt(why, n, "belongs to user %ld, not to this one (%ld)", (long)st->st_uid, (long)geteuid());
  return NULL;
}

/* What read_entry learned of a file besides its payload. */
typedef struct entry_info {
  uint64_t file_size;   /* on disk */
  uint8_t key[32];
  char spec[SPEC_SLOT]; /* the spec that wrote it; "" for format 1 */
  char why[96];         /* read_entry returned ENTRY_UNSAFE: unsafe()'s reason */
} entry_info;

enum { ENTRY_ABSENT = -1, ENTRY_BAD = 0, ENTRY_OK = 1, ENTRY_UNSAFE = 2 };

/* A format 2 spec slot: [A-Za-z0-9._-]*, then only NULs (at least one). */
static int good_spec_slot(const uint8_t *p) {
  size_t n = 0;
  while (n < SPEC_SLOT && p[n] && name_byte(p[n])) n++;
  if (n == SPEC_SLOT) return 0;
  for (size_t i = n; i < SPEC_SLOT; i++)
    if (p[i]) return 0;
  return 1;
}

/* Check the entry file at path. want_key: the key it must hold (NULL: any key). data:
   where to return the payload (NULL: only verify, streaming, without holding the payload).
   Returns ENTRY_OK when the entry is valid, ENTRY_BAD when it is not (corrupt, truncated,
   other version/key, not a regular file, too large), ENTRY_ABSENT when it does not
   exist, ENTRY_UNSAFE (read no further) when someone else could have written it. info
   (may be NULL) gets the size on disk when known, and for a valid entry its key and spec. */
static int read_entry(const char *path, const uint8_t *want_key, void **data, size_t *size, entry_info *info) {
  entry_info scratch;
  if (!info) info = &scratch;
  memset(info, 0, sizeof *info);
  /* O_NONBLOCK: a FIFO planted under an entry's name must not block the open. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno == ENOENT ? ENTRY_ABSENT : ENTRY_BAD;
  int ok = ENTRY_BAD;
  uint8_t *payload = NULL;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) goto done;
  info->file_size = (uint64_t)st.st_size;
  if (unsafe(&st, info->why, sizeof info->why)) {
    ok = ENTRY_UNSAFE;
    goto done;
  }
  if (st.st_size < HDR_V1) goto done;

  uint8_t h[HDR_SIZE];
  if (read_full(fd, h, HDR_V1) != HDR_V1 || memcmp(h, MAGIC, 8) != 0 || qgen_rd32(h + 12) != 0) goto done;
  const uint32_t version = qgen_rd32(h + 8);
  const size_t hdr = version == QGEN_CACHE_FORMAT ? HDR_SIZE : version == 1 ? HDR_V1 : 0;
  if (!hdr || (uint64_t)st.st_size < hdr || (uint64_t)st.st_size - hdr > QGEN_CACHE_MAX_ENTRY) goto done;
  uint64_t n = qgen_rd64(h + 48);
  if (n != (uint64_t)st.st_size - hdr) goto done;
  if (want_key && memcmp(h + 16, want_key, 32) != 0) goto done;

  qgen_sha256 sc;
  qgen_sha256_init(&sc);
  if (hdr > HDR_V1) { /* the spec slot, under the checksum */
    if (read_full(fd, h + HDR_V1, SPEC_SLOT) != SPEC_SLOT || !good_spec_slot(h + HDR_V1)) goto done;
    qgen_sha256_update(&sc, h + HDR_V1, SPEC_SLOT);
  }
  if (data) {
    payload = malloc(n ? (size_t)n : 1);
    if (!payload) goto done;
    if (read_full(fd, payload, (size_t)n) != (ssize_t)n) goto done;
    qgen_sha256_update(&sc, payload, (size_t)n);
  } else {
    uint8_t chunk[65536];
    for (uint64_t left = n; left;) {
      size_t want = left < sizeof chunk ? (size_t)left : sizeof chunk;
      if (read_full(fd, chunk, want) != (ssize_t)want) goto done;
      qgen_sha256_update(&sc, chunk, want);
      left -= want;
    }
  }
  uint8_t extra;
  if (read_full(fd, &extra, 1) != 0) goto done; /* grew since fstat: not an entry we wrote */
  uint8_t sum[32];
  qgen_sha256_final(&sc, sum);
  if (memcmp(sum, h + 56, 32) != 0) goto done;

  memcpy(info->key, h + 16, 32);
  if (hdr > HDR_V1) memcpy(info->spec, h + HDR_V1, SPEC_SLOT);
  if (data) {
    *data = payload;
    payload = NULL;
    *size = (size_t)n;
  }
  ok = ENTRY_OK;
done:
  free(payload);
  close(fd);
  return ok;
}

static int path_of(const qgen_cache *c, const char *file, char *buf, size_t n) {
  int w = snprintf(buf, n, "%s/%s", c->dir, file);
  return w >= 0 && (size_t)w < n;
}

/* Warn once per cache ("PATH: why"). Caller holds c->mu. */
static void warn_once(qgen_cache *c, const char *why) {
  if (c->warned) return;
  c->warned = 1;
  qgen_warn("kernel cache: %s; caching in memory only", why);
}

/* ---- memory store (caller holds c->mu) ---------------------------------------------- */

static mem_entry *mem_find(qgen_cache *c, const char *file, const uint8_t key[32]) {
  for (mem_entry *e = c->mem; e; e = e->next)
    if (memcmp(e->key, key, 32) == 0 && strcmp(e->file, file) == 0) return e;
  return NULL;
}

/* Store (file, key) -> data, taking ownership of data. */
static int mem_store(qgen_cache *c, const char *file, const uint8_t key[32], void *data,
                     size_t size) {
  mem_entry *e = mem_find(c, file, key);
  if (!e) {
    e = calloc(1, sizeof *e);
    if (!e) return -1;
    memcpy(e->key, key, 32);
    strcpy(e->file, file);
    e->next = c->mem;
    c->mem = e;
  } else {
    free(e->data);
  }
  e->data = data;
  e->size = size;
  return 0;
}

static void mem_clear(qgen_cache *c) {
  for (mem_entry *e = c->mem, *next; e; e = next) {
    next = e->next;
    free(e->data);
    free(e);
  }
  c->mem = NULL;
}

static void *dup_bytes(const void *p, size_t n) {
  void *q = malloc(n ? n : 1);
  if (q && n) memcpy(q, p, n);
  return q;
}

/* ---- open / close ------------------------------------------------------------------- */

static int env_set(const char *v) { return v && *v; }

int qgen_cache_env(char *err, size_t errlen) {
  const char *v = getenv("QGEN_CACHE");
  if (!env_set(v) || strcasecmp(v, "on") == 0 || strcmp(v, "1") == 0) return 1;
  if (strcasecmp(v, "off") == 0 || strcmp(v, "0") == 0) return 0;
  qgen_fmt(err, errlen, "QGEN_CACHE='%s': expected on, off, 1 or 0", v);
  return -1;
}

int qgen_cache_resolve(const char *dir, char *buf, size_t n, char *why, size_t whyn) {
  char env[4096];
  const int on = qgen_cache_env(why, whyn);
  if (on < 0) qgen_warn("%s; the cache stays on", why);
  why[0] = 0;
  if (!on) return -1;
  if (!env_set(dir)) {
    const char *v;
    if (env_set(v = getenv("QGEN_CACHE_DIR")))
      dir = v;
    else if (env_set(v = getenv("XDG_CACHE_HOME")) && v[0] == '/') /* XDG: relative = unset */
      dir = qgen_fmt(env, sizeof env, "%s/qgen", v);
    else if (env_set(v = getenv("HOME")))
      dir = qgen_fmt(env, sizeof env, "%s/.cache/qgen", v);
    else
      return qgen_fmt(why, whyn, "no directory (set QGEN_CACHE_DIR or HOME)"), -1;
  }
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/') len--; /* "a/b/" -> "a/b", "/" stays */
  /* a relative directory is taken from the current one, once: the cache keeps its place
     when the process changes directory */
  char cwd[4096];
  if (dir[0] != '/' && !getcwd(cwd, sizeof cwd))
    return qgen_fmt(why, whyn, "relative directory %s and no current directory (%s)", dir, strerror(errno)), -1;
  const int w = dir[0] != '/' ? snprintf(buf, n, "%s/%.*s", cwd, (int)len, dir) : snprintf(buf, n, "%.*s", (int)len, dir);
  if (w < 0 || (size_t)w >= n || (size_t)w > DIR_MAX)
    return qgen_fmt(why, whyn, "directory name too long (%d bytes)", w), -1;
  return 0;
}

qgen_cache *qgen_cache_open(const char *dir) {
  qgen_cache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  pthread_mutex_init(&c->mu, NULL);
  char d[4096], why[4200];
  if (qgen_cache_resolve(dir, d, sizeof d, why, sizeof why) != 0) {
    if (why[0]) {
      c->warned = 1;
      qgen_fmt(c->problem, sizeof c->problem, "%s", why);
      qgen_warn("kernel cache: %s; caching in memory only", why);
    }
    return c;
  }
  if (qgen_mkdir_p(d, 0755) != 0) {
    c->warned = 1;
    qgen_fmt(c->problem, sizeof c->problem, "cannot create directory %s: %s", d, strerror(errno));
    qgen_warn("kernel cache: %s; caching in memory only", c->problem);
    return c;
  }
  /* Loading an entry runs its code: like ssh with its keys, a directory that someone
     besides its owner can write is not used (another user could plant kernels there). */
  struct stat st;
  if (stat(d, &st) == 0 && unsafe(&st, why, sizeof why)) {
    c->warned = 1;
    char fix[4200];
    if (st.st_mode & (S_IWGRP | S_IWOTH)) qgen_fmt(fix, sizeof fix, "chmod go-w %s", d);
    else qgen_fmt(fix, sizeof fix, "set QGEN_CACHE_DIR to a directory of your own");
    qgen_fmt(c->problem, sizeof c->problem, "%s %s, so another user could plant compiled kernels in it; not used (%s)", d,
             why, fix);
    qgen_warn("kernel cache: %s; caching in memory only", c->problem);
    return c;
  }
  if (!(c->dir = strdup(d))) {
    qgen_cache_close(c);
    return NULL;
  }
  return c;
}

void qgen_cache_close(qgen_cache *c) {
  if (!c) return;
  mem_clear(c);
  free(c->dir);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

const char *qgen_cache_dir(const qgen_cache *c) { return c ? c->dir : NULL; }

const char *qgen_cache_problem(const qgen_cache *c) { return c ? c->problem : ""; }

void qgen_cache_entry_path(const qgen_cache *c, const char *name, const uint8_t key[32],
                           char *buf, size_t n) {
  if (!n) return;
  buf[0] = 0;
  if (!c || !c->dir) return;
  char file[FILE_MAX];
  entry_file(name, key, file);
  if (!path_of(c, file, buf, n)) buf[0] = 0;
}

/* ---- get / put ---------------------------------------------------------------------- */

int qgen_cache_get(qgen_cache *c, const char *name, const uint8_t key[32], void **data,
                   size_t *size) {
  if (!c || !key || !data || !size) return 0;
  char file[FILE_MAX];
  entry_file(name, key, file);

  pthread_mutex_lock(&c->mu);
  mem_entry *e = mem_find(c, file, key);
  if (e) {
    void *copy = dup_bytes(e->data, e->size);
    size_t n = e->size;
    pthread_mutex_unlock(&c->mu);
    if (!copy) return 0;
    *data = copy;
    *size = n;
    return 1;
  }
  pthread_mutex_unlock(&c->mu);

  char path[4096];
  if (!c->dir || !path_of(c, file, path, sizeof path)) return 0;
  void *payload = NULL;
  size_t n = 0;
  entry_info info;
  const int r = read_entry(path, key, &payload, &n, &info);
  if (r == ENTRY_UNSAFE) {
    char why[4400];
    pthread_mutex_lock(&c->mu);
    if (!c->warned_file) /* once: the next put replaces the file with one of ours */
      qgen_warn("kernel cache: %s %s, so another user could have written it; not loaded (%s)", path, info.why,
                qgen_fmt(why, sizeof why, "chmod go-w %s, or qgen cache clear", path));
    c->warned_file = 1;
    pthread_mutex_unlock(&c->mu);
  }
  if (r != ENTRY_OK) return 0;
  void *copy = dup_bytes(payload, n);
  if (!copy) {
    free(payload);
    return 0;
  }
  pthread_mutex_lock(&c->mu);
  if (mem_store(c, file, key, payload, n) != 0) free(payload); /* still a hit */
  pthread_mutex_unlock(&c->mu);
  *data = copy;
  *size = n;
  return 1;
}

int qgen_cache_put(qgen_cache *c, const char *name, const char *spec, const uint8_t key[32], const void *data,
                   size_t size) {
  if (!c || !key || (!data && size)) return -1;
  char file[FILE_MAX];
  entry_file(name, key, file);

  void *copy = dup_bytes(data, size);
  if (!copy) return -1;
  pthread_mutex_lock(&c->mu);
  if (mem_store(c, file, key, copy, size) != 0) {
    pthread_mutex_unlock(&c->mu);
    free(copy);
    return -1;
  }
  int skip_disk = !c->dir || c->readonly;
  pthread_mutex_unlock(&c->mu);
  /* An entry too large to be read back is kept in memory only. */
  if (skip_disk || size > QGEN_CACHE_MAX_ENTRY) return 1;

  char path[4096];
  if (!path_of(c, file, path, sizeof path)) return 1;
  uint8_t *buf = malloc(HDR_SIZE + size);
  if (!buf) return 1;
  memcpy(buf, MAGIC, 8);
  qgen_wr32(buf + 8, QGEN_CACHE_FORMAT);
  qgen_wr32(buf + 12, 0);
  memcpy(buf + 16, key, 32);
  qgen_wr64(buf + 48, size);
  memset(buf + HDR_V1, 0, SPEC_SLOT);
  sanitize(spec, (char *)buf + HDR_V1, SPEC_SLOT - 1);
  if (size) memcpy(buf + HDR_SIZE, data, size);
  qgen_sha256_buf(buf + HDR_V1, SPEC_SLOT + size, buf + 56);

  char why[4200];
  int rc = qgen_write_atomic(path, buf, HDR_SIZE + size, why, sizeof why);
  if (rc != 0 && (errno == ENOENT || errno == ENOTDIR)) {
    /* The directory went away under us (rm -rf of the cache): make it again, once. */
    if (qgen_mkdir_p(c->dir, 0755) == 0) rc = qgen_write_atomic(path, buf, HDR_SIZE + size, why, sizeof why);
  }
  free(buf);
  if (rc == 0) return 0;
  pthread_mutex_lock(&c->mu);
  c->readonly = 1;
  warn_once(c, why);
  pthread_mutex_unlock(&c->mu);
  return 1;
}

/* ---- list / clear ------------------------------------------------------------------- */

/* An entry file name: "<prefix>-<16 lower hex>.qgc", the prefix 1..100 bytes of
   [A-Za-z0-9._-] (entry_file's names). Returns 1 and the 8 key bytes it names. */
static int parse_entry_name(const char *file, size_t n, uint8_t key8[8]) {
  if (n < 1 + 1 + 16 + 4 || n > NAME_MAX_PREFIX + 1 + 16 + 4 || memcmp(file + n - 4, ".qgc", 4) != 0 ||
      file[n - 4 - 16 - 1] != '-')
    return 0;
  for (size_t i = 0; i < n - 4 - 16 - 1; i++)
    if (!name_byte((unsigned char)file[i])) return 0;
  const char *hex = file + n - 4 - 16;
  for (int i = 0; i < 16; i++) {
    char ch = hex[i];
    int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (v < 0) return 0;
    if (i % 2 == 0) key8[i / 2] = (uint8_t)(v << 4);
    else key8[i / 2] |= (uint8_t)v;
  }
  return 1;
}

/* A temp file of qgen_write_atomic over an entry: "<entry name>.tmp.<pid>.<n>.<ns>", each
   number decimal digits. Returns the pid, or 0 when file is not one. */
static long parse_temp_name(const char *file) {
  const char *t = strstr(file, ".qgc.tmp.");
  uint8_t key8[8];
  if (!t || !parse_entry_name(file, (size_t)(t - file) + 4, key8)) return 0;
  const char *p = t + 9;
  long pid = 0;
  for (int field = 0; field < 3; field++) {
    const char *start = p;
    while (*p >= '0' && *p <= '9') {
      if (field == 0 && pid < 100000000) pid = pid * 10 + (*p - '0');
      p++;
    }
    if (p == start || *p != (field < 2 ? '.' : 0)) return 0;
    if (field < 2) p++;
  }
  return pid > 0 ? pid : 0;
}

int qgen_cache_list(qgen_cache *c, void (*cb)(void *ud, const qgen_cache_item *it), void *ud) {
  if (!c || !c->dir) return 0;
  DIR *d = opendir(c->dir);
  if (!d) return errno == ENOENT ? 0 : -1; /* not made yet: empty */
  int count = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    uint8_t named[8];
    if (!parse_entry_name(de->d_name, strlen(de->d_name), named)) continue;
    char path[4096];
    if (!path_of(c, de->d_name, path, sizeof path)) continue;
    entry_info info;
    int r = read_entry(path, NULL, NULL, NULL, &info);
    if (r == ENTRY_ABSENT) continue; /* removed since readdir */
    const int ok = r == ENTRY_OK && memcmp(named, info.key, 8) == 0;
    const qgen_cache_item it = {de->d_name, ok ? info.spec : "", info.file_size,
                                ok ? NULL : r == ENTRY_UNSAFE ? info.why : "does not verify"};
    if (cb) cb(ud, &it);
    count++;
  }
  closedir(d);
  return count;
}

/* Stale: its writer is gone from this host, or it is older than any write can take (the
   pid test says nothing about writers on other hosts of a shared file system). */
static int stale_temp(long pid, const struct stat *st) {
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 1;
  return time(NULL) - st->st_mtime >= TEMP_STALE_S;
}

/* A regular file that starts with the entry magic. */
static int has_magic(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return 0;
  struct stat st;
  uint8_t m[8];
  const int is = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read_full(fd, m, 8) == 8 && memcmp(m, MAGIC, 8) == 0;
  close(fd);
  return is;
}

int qgen_cache_clear(qgen_cache *c, void (*left)(void *ud, const char *file), void *ud) {
  if (!c) return -1;
  pthread_mutex_lock(&c->mu);
  mem_clear(c);
  pthread_mutex_unlock(&c->mu);
  if (!c->dir) return 0;
  DIR *d = opendir(c->dir);
  if (!d) return errno == ENOENT ? 0 : -1;
  int count = 0, failed = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    const char *f = de->d_name;
    if (!strcmp(f, ".") || !strcmp(f, "..")) continue;
    char path[4096];
    struct stat st;
    uint8_t key8[8];
    if (!path_of(c, f, path, sizeof path) || lstat(path, &st) != 0) continue; /* gone since readdir */
    const long pid = S_ISREG(st.st_mode) ? parse_temp_name(f) : 0;
    const int entry = S_ISREG(st.st_mode) && parse_entry_name(f, strlen(f), key8) && has_magic(path);
    if (!entry && !pid) {
      if (left) left(ud, f); /* not ours: named by the caller, never removed */
      continue;
    }
    if (pid && !stale_temp(pid, &st)) continue; /* a write in progress */
    if (unlink(path) == 0) count++;
    else if (errno != ENOENT && !failed) failed = errno;
  }
  closedir(d);
  errno = failed;
  return failed ? -1 : count;
}
