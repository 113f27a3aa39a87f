/* fuzz_artifact.c — libFuzzer harness for the artifact reader (jit/artifact.c), the payload
 * of every cache entry and bundle record.
 *
 * qgen_artifact_unpack on the input must return 0 or -1 with a message and never read past
 * the input. When it accepts, the parsed artifact must be consistent (sizes match the
 * NUL-terminated copies, kernel names are terminated) and qgen_artifact_pack must give back
 * the input byte for byte; unpacking that again gives the same artifact.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/artifact.h"

static void die(const char *what) {
  fprintf(stderr, "fuzz_artifact: %s\n", what);
  abort();
}

static void check_sane(const qgen_artifact *a) {
  if (a->n_kernels < 0 || a->n_kernels > QGEN_MAX_KERNELS) die("n_kernels out of range");
  if (!a->cubin || !a->ptx || !a->log) die("a blob pointer is NULL after a successful unpack");
  if (a->ptx[a->ptx_size] != 0 || a->log[a->log_size] != 0) die("ptx/log are not NUL-terminated");
  for (int i = 0; i < a->n_kernels; i++) {
    if (memchr(a->k[i].name, 0, sizeof a->k[i].name) == NULL) die("a kernel name is not terminated");
    if (a->k[i].name[0] && qgen_artifact_kernel(a, a->k[i].name) == NULL) die("qgen_artifact_kernel misses a name");
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  qgen_artifact a, b;
  char err[256];
  err[0] = 0;
  if (qgen_artifact_unpack(data, size, &a, err, sizeof err) != 0) {
    if (!err[0]) die("a rejected artifact left no message");
    if (a.cubin || a.ptx || a.log || a.n_kernels) die("a rejected artifact left data behind");
    return 0;
  }
  check_sane(&a);
  size_t n = 0;
  uint8_t *packed = qgen_artifact_pack(&a, &n);
  if (!packed) die("pack failed");
  if (n != size || memcmp(packed, data, size) != 0) die("pack(unpack(x)) != x");
  if (qgen_artifact_unpack(packed, n, &b, err, sizeof err) != 0) die("unpack(pack(a)) failed");
  if (b.arch != a.arch || b.n_kernels != a.n_kernels || b.cubin_size != a.cubin_size || b.ptx_size != a.ptx_size ||
      b.log_size != a.log_size || memcmp(b.k, a.k, sizeof a.k) != 0 || memcmp(b.cubin, a.cubin, a.cubin_size) != 0 ||
      memcmp(b.ptx, a.ptx, a.ptx_size) != 0 || memcmp(b.log, a.log, a.log_size) != 0)
    die("unpack(pack(a)) != a");
  free(packed);
  qgen_artifact_free(&b);
  qgen_artifact_free(&a);
  return 0;
}
