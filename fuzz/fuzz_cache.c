/* fuzz_cache.c — libFuzzer harness for the cache entry reader (jit/cache.c).
 *
 * Input: one mode byte, then the bytes of an entry file. The mode's low bits repair parts
 * of the file before it is written, so the fuzzer also reaches the paths past each check:
 *   bit 0: magic, format version and flags made right     bit 1: the key made right
 *   bit 2: the size field made right                       bit 3: the checksum made right
 * The file is written under the entry's expected name in a temp directory, and a fresh
 * qgen_cache (nothing in memory) looks it up. The oracle is the file format itself: the
 * lookup must hit exactly when the file is a valid entry for that key (then with exactly
 * its payload), a lookup under another key must miss, and qgen_cache_list must call it
 * valid exactly when it is a valid entry whose key matches the file name's 16 hex digits. A hit's payload also goes through qgen_artifact_unpack, as a build
 * would do with it.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jit/artifact.h"
#include "jit/cache.h"
#include "common.h"
#include "base/le.h"
#include "base/sha256.h"

#define HDR_V1 88 /* format 1: no spec name */
#define SLOT 80    /* format 2: the spec name after HDR_V1 */
#define HDR (HDR_V1 + SLOT)
static const char NAME[] = "fuzz_d128_h32_g4_kf16_vf16_if16_of16_b64_sparse_sm90";
static char dir[64];
static uint8_t key[32], other[32];
static char path[4200];

static void die(const char *what) {
  fprintf(stderr, "fuzz_cache: %s\n", what);
  abort();
}

static void rm_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "fuzz_cache: could not remove %s\n", dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  snprintf(dir, sizeof dir, "/tmp/qgen-fuzz-cache-XXXXXX");
  if (!mkdtemp(dir)) die("mkdtemp");
  atexit(rm_dir);
  setenv("QGEN_QUIET", "1", 1);
  unsetenv("QGEN_CACHE");
  qgen_sha256_buf(FUZZ_CACHE_KEY, strlen(FUZZ_CACHE_KEY), key);
  qgen_sha256_buf("other-key", 9, other);
  qgen_cache *c = qgen_cache_open(dir);
  qgen_cache_entry_path(c, NAME, key, path, sizeof path);
  qgen_cache_close(c);
  if (!path[0]) die("no entry path");
  return 0;
}

/* What the reader must conclude, from the format alone. key_bytes: how much of the key
   must match (32 for a lookup; 8 for a listing, which only knows the file name's 16 hex). */
/* The header size the file's version gives (format 1: no spec name). */
static size_t hdr_of(const uint8_t *f, size_t n) { return n > 8 && f[8] == 1 ? HDR_V1 : HDR; }

static int valid_entry(const uint8_t *f, size_t n, size_t key_bytes) {
  if (n < HDR_V1 || memcmp(f, "QGENCACH", 8) != 0) return 0;
  if ((f[8] != QGEN_CACHE_FORMAT && f[8] != 1) || f[9] || f[10] || f[11] || f[12] || f[13] || f[14] || f[15]) return 0;
  const size_t h = hdr_of(f, n);
  if (n < h || memcmp(f + 16, key, key_bytes) != 0 || qgen_rd64(f + 48) != n - h || n - h > QGEN_CACHE_MAX_ENTRY) return 0;
  if (h == HDR) { /* the spec name: [A-Za-z0-9._-]*, then NULs only (one at least) */
    size_t k = 0;
    while (k < SLOT && f[HDR_V1 + k] && (isalnum(f[HDR_V1 + k]) || strchr("._-", f[HDR_V1 + k]))) k++;
    if (k == SLOT) return 0;
    for (; k < SLOT; k++)
      if (f[HDR_V1 + k]) return 0;
  }
  uint8_t sum[32];
  qgen_sha256_buf(f + HDR_V1, n - HDR_V1, sum);
  return memcmp(sum, f + 56, 32) == 0;
}

static int listed_ok;
static void list_cb(void *ud, const qgen_cache_item *it) {
  (void)ud;
  if (strstr(path, it->file)) listed_ok = it->problem == NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const unsigned mode = data[0];
  size_t n = size - 1;
  uint8_t *f = malloc(n ? n : 1);
  if (!f) return 0;
  if (n) memcpy(f, data + 1, n);
  if ((mode & 1) && n >= 16) {
    memcpy(f, "QGENCACH", 8);
    memset(f + 8, 0, 8);
    f[8] = QGEN_CACHE_FORMAT;
  }
  if ((mode & 2) && n >= 48) memcpy(f + 16, key, 32);
  if ((mode & 4) && n >= hdr_of(f, n)) qgen_wr64(f + 48, n - hdr_of(f, n));
  if ((mode & 8) && n >= hdr_of(f, n)) qgen_sha256_buf(f + HDR_V1, n - HDR_V1, f + 56);

  FILE *fp = fopen(path, "wb");
  if (!fp) die("cannot write the entry file");
  if (n && fwrite(f, 1, n, fp) != n) die("short write");
  if (fclose(fp) != 0) die("close");

  const int want = valid_entry(f, n, 32), want_listed = valid_entry(f, n, 8);
  qgen_cache *c = qgen_cache_open(dir);
  if (!c || !qgen_cache_dir(c)) die("the cache has no directory");
  void *got = NULL;
  size_t got_n = 0;
  int hit = qgen_cache_get(c, NAME, key, &got, &got_n);
  if (hit != want) die(hit ? "an invalid entry was a hit" : "a valid entry was a miss");
  if (hit) {
    if (got_n != n - hdr_of(f, n) || memcmp(got, f + hdr_of(f, n), got_n) != 0) die("a hit returned other bytes than the payload");
    qgen_artifact a;
    char err[256];
    if (qgen_artifact_unpack(got, got_n, &a, err, sizeof err) == 0) qgen_artifact_free(&a);
    free(got);
    /* a second get is served from memory: the same bytes */
    if (qgen_cache_get(c, NAME, key, &got, &got_n) != 1 || got_n != n - hdr_of(f, n) || memcmp(got, f + hdr_of(f, n), got_n) != 0)
      die("the in-memory copy differs");
    free(got);
  }
  void *o = NULL;
  size_t on = 0;
  if (qgen_cache_get(c, NAME, other, &o, &on) != 0) die("a lookup under another key hit");
  listed_ok = -1;
  if (qgen_cache_list(c, list_cb, NULL) < 1 || listed_ok != want_listed) die("qgen_cache_list disagrees with the format");
  qgen_cache_close(c);
  unlink(path);
  free(f);
  return 0;
}
