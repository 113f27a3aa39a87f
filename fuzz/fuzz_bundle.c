/* fuzz_bundle.c — libFuzzer harness for the bundle reader (jit/bundle.c).
 *
 * The input is parsed twice with qgen_bundle_parse: as it is, and with its checksums
 * repaired (the header/table SHA-256 and each payload's SHA-256 at the offsets its table
 * gives, and the file-size field set to the input's size), so the fuzzer also explores the
 * checks past the checksums. Either parse must return 0 or -1 with a one-line message
 * starting with the name, never read outside the input (ASan) and leave nothing behind.
 * An accepted bundle must be consistent with its table, and packing its spec and
 * artifacts again must give a bundle that parses back to the same content.
 *
 * qgen_nvrtc_version is replaced here (the pack records it): the harness never loads NVRTC.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/bundle.h"
#include "common.h"
#include "base/le.h"
#include "base/sha256.h"

int qgen_nvrtc_version(int *major, int *minor, char *err, size_t errlen) {
  (void)err, (void)errlen;
  *major = 13, *minor = 0;
  return 0;
}

#define HDR 64
#define ENTRY 464

static void die(const char *what, const char *err) {
  fprintf(stderr, "fuzz_bundle: %s%s%s\n", what, err ? ": " : "", err ? err : "");
  abort();
}

/* Repair the checksums (and the size field) of a copy, where the layout allows it. */
static void fix_sums(uint8_t *p, size_t size) {
  if (size < HDR) return;
  qgen_wr64(p + 16, size);
  uint64_t n = qgen_rd32(p + 24), S = qgen_rd32(p + 28), V = qgen_rd32(p + 32);
  if (n < 1 || n > QGEN_MAX_ARCHS) return;
  uint64_t T = HDR + S + V, M = T + n * ENTRY + 32;
  if (M > size) return;
  for (uint64_t i = 0; i < n; i++) {
    uint8_t *e = p + T + i * ENTRY;
    uint64_t off = qgen_rd64(e + 8), len = qgen_rd64(e + 16);
    if (off <= size && len <= size - off) qgen_sha256_buf(p + off, (size_t)len, e + 48);
  }
  qgen_sha256_buf(p, (size_t)(M - 32), p + M - 32);
}

static void check_parsed(const qgen_bundle *b) {
  if (b->n < 1 || b->n > QGEN_MAX_ARCHS) die("entry count out of range", NULL);
  if (!b->spec_text || b->spec.n_archs != b->n) die("spec text missing or archs differ", NULL);
  for (int i = 0; i < b->n; i++) {
    const qgen_artifact *a = &b->arts[i];
    if (a->arch != b->entry[i].arch || (i && b->entry[i].arch <= b->entry[i - 1].arch)) die("archs inconsistent", NULL);
    if (b->entry[i].offset > b->file_size || b->entry[i].size > b->file_size - b->entry[i].offset)
      die("an entry lies outside the file", NULL);
    if (!a->cubin_size && !a->ptx_size) die("an accepted entry has neither cubin nor PTX", NULL);
  }
}

static int parse(const char *name, const uint8_t *p, size_t size, qgen_bundle *b) {
  char err[1024];
  err[0] = 0;
  if (qgen_bundle_parse(name, p, size, b, err, sizeof err) == 0) {
    check_parsed(b);
    return 0;
  }
  if (!err[0] || strchr(err, '\n')) die("a rejected bundle's message is empty or not one line", err);
  if (strncmp(err, name, strlen(name)) != 0) die("the message does not start with the name", err);
  if (b->n || b->spec_text || b->arts[0].cubin) die("a rejected bundle left data behind", err);
  return -1;
}

static void round_trip(const qgen_bundle *b) {
  static qgen_bundle c;
  char err[1024];
  size_t n = 0;
  uint8_t *blob = qgen_bundle_pack(&b->spec, b->arts, b->n, &n, err, sizeof err);
  if (!blob) die("an accepted bundle does not pack again", err);
  if (qgen_bundle_parse("repacked.qgb", blob, n, &c, err, sizeof err) != 0) die("a repacked bundle does not parse", err);
  if (c.n != b->n || !fuzz_same_spec(&c.spec, &b->spec)) die("the repacked bundle differs (spec or count)", NULL);
  for (int i = 0; i < b->n; i++) {
    const qgen_artifact *x = &b->arts[i], *y = &c.arts[i];
    if (x->arch != y->arch || x->n_kernels != y->n_kernels || x->cubin_size != y->cubin_size ||
        x->ptx_size != y->ptx_size || x->log_size != y->log_size || memcmp(x->cubin, y->cubin, x->cubin_size) != 0 ||
        memcmp(x->ptx, y->ptx, x->ptx_size) != 0 || memcmp(x->log, y->log, x->log_size) != 0)
      die("the repacked bundle differs (an artifact)", NULL);
    for (int k = 0; k < x->n_kernels; k++)
      if (strcmp(x->k[k].name, y->k[k].name) != 0) die("the repacked bundle differs (a kernel name)", NULL);
  }
  qgen_bundle_free(&c);
  free(blob);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static qgen_bundle b;
  if (parse("fuzz.qgb", data, size, &b) == 0) {
    round_trip(&b);
    qgen_bundle_free(&b);
  }
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  if (size) memcpy(copy, data, size);
  fix_sums(copy, size);
  if (parse("fixed.qgb", copy, size, &b) == 0) {
    round_trip(&b);
    qgen_bundle_free(&b);
  }
  free(copy);
  return 0;
}
