/* artifact.c — see artifact.h. */
#include "jit/artifact.h"

#include <stdlib.h>
#include <string.h>

#include "base/le.h"
#include "base/util.h"

static const char MAGIC[8] = {'Q', 'G', 'A', 'R', 'T', 0, 0, 0};

void qgen_artifact_free(qgen_artifact *a) {
  free(a->cubin);
  free(a->ptx);
  free(a->log);
  memset(a, 0, sizeof *a);
}

const qgen_kernel_info *qgen_artifact_kernel(const qgen_artifact *a, const char *name) {
  for (int i = 0; i < a->n_kernels; i++)
    if (strcmp(a->k[i].name, name) == 0) return &a->k[i];
  return NULL;
}

static void put32(uint8_t **p, uint32_t v) {
  qgen_wr32(*p, v);
  *p += 4;
}
static void put64(uint8_t **p, uint64_t v) {
  qgen_wr64(*p, v);
  *p += 8;
}
static void putbytes(uint8_t **p, const void *s, size_t n) {
  put64(p, n);
  if (n) memcpy(*p, s, n);
  *p += n;
}

uint8_t *qgen_artifact_pack(const qgen_artifact *a, size_t *size) {
  size_t n = 8 + 12 + (size_t)a->n_kernels * (32 + 20) + 24 + a->cubin_size + a->ptx_size + a->log_size;
  uint8_t *buf = malloc(n), *p = buf;
  if (!buf) return NULL;
  memcpy(p, MAGIC, 8);
  p += 8;
  put32(&p, QGEN_ARTIFACT_VERSION);
  put32(&p, (uint32_t)a->arch);
  put32(&p, (uint32_t)a->n_kernels);
  for (int i = 0; i < a->n_kernels; i++) {
    const qgen_kernel_info *k = &a->k[i];
    memcpy(p, k->name, 32);
    p += 32;
    put32(&p, (uint32_t)k->regs);
    put32(&p, (uint32_t)k->spill_stores);
    put32(&p, (uint32_t)k->spill_loads);
    put32(&p, (uint32_t)k->stack);
    put32(&p, (uint32_t)k->smem_static);
  }
  putbytes(&p, a->cubin, a->cubin_size);
  putbytes(&p, a->ptx, a->ptx_size);
  putbytes(&p, a->log, a->log_size);
  *size = n;
  return buf;
}

/* A cursor that refuses to read past its end. */
typedef struct {
  const uint8_t *p;
  size_t left;
  int bad;
} rd;

static uint64_t get(rd *r, int bytes) {
  if (r->bad || r->left < (size_t)bytes) { r->bad = 1; return 0; }
  const uint64_t v = bytes == 4 ? qgen_rd32(r->p) : qgen_rd64(r->p);
  r->p += bytes;
  r->left -= (size_t)bytes;
  return v;
}

/* A length-prefixed blob as a fresh NUL-terminated copy. */
static void *getbytes(rd *r, size_t *n) {
  uint64_t len = get(r, 8);
  if (r->bad || len > r->left) { r->bad = 1; return NULL; }
  uint8_t *b = malloc((size_t)len + 1);
  if (!b) { r->bad = 1; return NULL; }
  memcpy(b, r->p, (size_t)len);
  b[len] = 0;
  r->p += len;
  r->left -= (size_t)len;
  *n = (size_t)len;
  return b;
}

int qgen_artifact_unpack(const uint8_t *p, size_t size, qgen_artifact *a, char *err, size_t errlen) {
  memset(a, 0, sizeof *a);
  rd r = {p, size, 0};
  if (size < 8 || memcmp(p, MAGIC, 8) != 0) {
    qgen_fmt(err, errlen, "not a qgen artifact (bad magic)");
    return -1;
  }
  r.p += 8;
  r.left -= 8;
  uint32_t version = (uint32_t)get(&r, 4);
  a->arch = (int)get(&r, 4);
  uint32_t nk = (uint32_t)get(&r, 4);
  if (!r.bad && version != QGEN_ARTIFACT_VERSION) {
    qgen_fmt(err, errlen, "artifact version %u, this qgen reads %d", version, QGEN_ARTIFACT_VERSION);
    return -1;
  }
  if (!r.bad && nk > QGEN_MAX_KERNELS) {
    qgen_fmt(err, errlen, "artifact lists %u kernels (at most %d)", nk, QGEN_MAX_KERNELS);
    return -1;
  }
  a->n_kernels = (int)nk;
  for (uint32_t i = 0; i < nk && !r.bad; i++) {
    qgen_kernel_info *k = &a->k[i];
    if (r.left < 32) { r.bad = 1; break; }
    if (r.p[31] != 0) { /* what pack writes always ends in a NUL: anything else is corrupt */
      qgen_artifact_free(a);
      qgen_fmt(err, errlen, "artifact kernel %u: name is not NUL-terminated", i);
      return -1;
    }
    memcpy(k->name, r.p, 32);
    r.p += 32;
    r.left -= 32;
    k->regs = (int)get(&r, 4);
    k->spill_stores = (int)get(&r, 4);
    k->spill_loads = (int)get(&r, 4);
    k->stack = (int)get(&r, 4);
    k->smem_static = (int)get(&r, 4);
  }
  a->cubin = getbytes(&r, &a->cubin_size);
  a->ptx = getbytes(&r, &a->ptx_size);
  a->log = getbytes(&r, &a->log_size);
  if (r.bad || r.left != 0) {
    qgen_artifact_free(a);
    qgen_fmt(err, errlen, "artifact is truncated or has trailing bytes");
    return -1;
  }
  return 0;
}
