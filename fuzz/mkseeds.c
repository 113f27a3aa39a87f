/* mkseeds.c — writes the binary seed corpora of the fuzz harnesses (the files under
 * fuzz/corpus/{artifact,cache,bundle}/). Small by design: the cubins are short fake ELF
 * images, the PTX and ptxas logs a few lines, so each seed stays a few KiB.
 *
 *   mkseeds SOURCE_DIR OUT_DIR      (OUT_DIR/{artifact,cache,bundle} must exist)
 *
 * Built by fuzz/CMakeLists.txt against the plain (uninstrumented) qgen_core.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/artifact.h"
#include "jit/cache.h"
#include "jit/bundle.h"
#include "common.h"
#include "base/sha256.h"
#include "spec/spec.h"

static const char *out_dir;
static int written;

static void put(const char *sub, const char *name, const void *data, size_t n) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s/%s", out_dir, sub, name);
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
    fprintf(stderr, "mkseeds: cannot write %s\n", path);
    exit(1);
  }
  written++;
}

/* A small artifact: n kernels of the real names, a fake cubin of cubin_n bytes. */
static void make_art(qgen_artifact *a, int arch, int n_kernels, size_t cubin_n, int with_ptx) {
  static const char *names[] = {"qg_append", "qg_estimate", "qg_select", "qg_attend",
                                "qg_combine", "qg_k5", "qg_k6", "qg_k7"};
  memset(a, 0, sizeof *a);
  a->arch = arch;
  a->n_kernels = n_kernels;
  for (int i = 0; i < n_kernels; i++) {
    snprintf(a->k[i].name, sizeof a->k[i].name, "%s", names[i]);
    a->k[i].regs = 32 + 8 * i;
    a->k[i].smem_static = 1024 * i;
    a->k[i].stack = i == 3 ? 16 : 0;
  }
  a->cubin_size = cubin_n;
  a->cubin = malloc(cubin_n ? cubin_n : 1);
  for (size_t i = 0; i < cubin_n; i++) a->cubin[i] = (uint8_t)(i * 37 + 11);
  if (cubin_n >= 4) memcpy(a->cubin, "\177ELF", 4);
  const char *ptx = with_ptx ? "//\n.version 8.0\n.target sm_90\n.address_size 64\n.visible .entry qg_attend()\n{\n ret;\n}\n" : "";
  a->ptx_size = strlen(ptx);
  a->ptx = strdup(ptx);
  const char *log = "ptxas info    : Compiling entry function 'qg_attend' for 'sm_90'\n"
                    "ptxas info    : Used 96 registers, 16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
  a->log_size = strlen(log);
  a->log = strdup(log);
}

static void cache_seed(const char *name, unsigned mode, const uint8_t key[32], const void *payload, size_t n,
                       size_t keep) {
  enum { HDR = 88 + 80 }; /* the fixed header, then the spec name (jit/cache.c) */
  size_t total = 1 + HDR + n;
  uint8_t *f = calloc(1, total);
  f[0] = (uint8_t)mode;
  uint8_t *h = f + 1;
  memcpy(h, "QGENCACH", 8);
  h[8] = QGEN_CACHE_FORMAT;
  memcpy(h + 16, key, 32);
  for (int i = 0; i < 8; i++) h[48 + i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(h + 88, "seed-spec", 9);
  if (n) memcpy(h + HDR, payload, n);
  qgen_sha256_buf(h + 88, HDR - 88 + n, h + 56);
  put("cache", name, f, keep < total ? keep : total);
  free(f);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: mkseeds SOURCE_DIR OUT_DIR\n");
    return 2;
  }
  const char *src_dir = argv[1];
  out_dir = argv[2];

  qgen_artifact arts[4];
  make_art(&arts[0], 80, 4, 240, 1); /* sparse: append estimate select attend */
  make_art(&arts[1], 90, 4, 320, 1);
  make_art(&arts[2], 90, 0, 0, 1);   /* no kernels, PTX only */
  make_art(&arts[3], 120, 8, 64, 0); /* every kernel slot, cubin only */
  const char *art_names[] = {"art-sm80-4k", "art-sm90-4k", "art-ptx-only", "art-8k-cubin-only"};
  uint8_t *blobs[4];
  size_t sizes[4];
  for (int i = 0; i < 4; i++) {
    blobs[i] = qgen_artifact_pack(&arts[i], &sizes[i]);
    put("artifact", art_names[i], blobs[i], sizes[i]);
  }
  put("artifact", "art-truncated", blobs[1], sizes[1] / 2);

  uint8_t key[32], other[32];
  qgen_sha256_buf(FUZZ_CACHE_KEY, strlen(FUZZ_CACHE_KEY), key);
  qgen_sha256_buf("another key", 11, other);
  cache_seed("entry-valid", 0, key, blobs[1], sizes[1], (size_t)-1);
  cache_seed("entry-valid-fixall", 15, key, blobs[0], sizes[0], (size_t)-1);
  cache_seed("entry-empty-payload", 0, key, "", 0, (size_t)-1);
  cache_seed("entry-other-key", 0, other, blobs[2], sizes[2], (size_t)-1);
  cache_seed("entry-truncated", 0, key, blobs[1], sizes[1], 1 + 88 + sizes[1] / 2);
  cache_seed("entry-header-only-fix", 12, key, blobs[3], sizes[3], 1 + 88);

  /* bundles: the small spec for sm_80 + sm_90, and a dense one for sm_90 only */
  char path[4200], err[1024];
  static qgen_spec_set set;
  snprintf(path, sizeof path, "%s/specs/qwen2.5-0.5b.lua", src_dir);
  if (qgen_spec_load(path, &set, err, sizeof err) != 0) {
    fprintf(stderr, "mkseeds: %s\n", err);
    return 1;
  }
  size_t n;
  uint8_t *b = qgen_bundle_pack(&set.v[0], arts, 2, &n, err, sizeof err);
  if (!b) {
    fprintf(stderr, "mkseeds: %s\n", err);
    return 1;
  }
  put("bundle", "bundle-2arch", b, n);
  put("bundle", "bundle-2arch-truncated", b, n - 100);
  free(b);
  const char dense[] = "return spec{ name = \"d\", head_dim = 64, n_head = 2, n_head_kv = 1 }";
  if (qgen_spec_load_string("dense", dense, strlen(dense), &set, err, sizeof err) != 0) {
    fprintf(stderr, "mkseeds: %s\n", err);
    return 1;
  }
  qgen_artifact dk;
  make_art(&dk, 90, 3, 128, 1);
  snprintf(dk.k[1].name, sizeof dk.k[1].name, "qg_attend");
  snprintf(dk.k[2].name, sizeof dk.k[2].name, "qg_combine");
  b = qgen_bundle_pack(&set.v[0], &dk, 1, &n, err, sizeof err);
  if (!b) {
    fprintf(stderr, "mkseeds: %s\n", err);
    return 1;
  }
  put("bundle", "bundle-dense-1arch", b, n);
  free(b);
  qgen_artifact_free(&dk);
  for (int i = 0; i < 4; i++) {
    free(blobs[i]);
    qgen_artifact_free(&arts[i]);
  }
  printf("mkseeds: wrote %d seeds under %s\n", written, out_dir);
  return 0;
}
