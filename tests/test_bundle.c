/* test_bundle.c — offline bundles (jit/bundle.h): build qwen2.5-0.5b for sm_80 + sm_90,
 * write a bundle, read it back (spec and kernels identical to the JIT path's), open it
 * with the CPU backend (and with NVRTC hidden: QGEN_NVRTC=none, in a child process), and
 * throw hostile files at the reader: truncation at every offset, every bit of the header
 * and table flipped, payload bits flipped, every field forged to bad values with the header
 * checksum recomputed, structural forgeries (overlaps, gaps, swapped payloads, bad spec
 * text), random garbage and random mutations. CPU only; exits 77 without NVRTC.
 *
 * QGEN_TEST_QUICK=1 (for valgrind) truncates at a stride outside the header region and
 * runs fewer random cases. QGEN_TEST_CACHE_DIR reuses a kernel cache (kept), so a
 * valgrind run need not compile.
 */
#define _GNU_SOURCE
#include "jit/build.h"
#include "jit/bundle.h"
#include "jit/cache.h"
#include "jit/emit.h"
#include "jit/nvrtc.h"
#include "runtime/qgen.h"
#include "base/le.h"
#include "base/rng.h"
#include "base/sha256.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"

/* The kernels of a spec's module (kargs.h's list: qg_append first, qg_attend last). */
static int n_kernels(const qgen_spec *s) {
  int n = 0;
  for (const char *const *k = qgen_kernel_names(s, 0); *k; k++) n++;
  return n;
}

#define SPEC_PATH QGEN_SOURCE_DIR "/specs/qwen2.5-0.5b.lua"
#define ENTRY 464

static int quick;
static char root[4096];


/* ---- helpers ------------------------------------------------------------------------ */

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

static char *tpath(char *buf, const char *rel) { return qgen_fmt(buf, 4096, "%s/%s", root, rel); }

static int write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = n ? fwrite(p, 1, n, f) : 0;
  return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { return qgen_rng_next(&rng); }

/* The layout as bundle.h documents it (computed here, not taken from bundle.c). */
static size_t T_of(const uint8_t *b) { return 64 + (size_t)qgen_rd32(b + 28) + qgen_rd32(b + 32); }
static size_t M_of(const uint8_t *b) { return T_of(b) + (size_t)qgen_rd32(b + 24) * ENTRY + 32; }
static uint8_t *entry_of(uint8_t *b, int i) { return b + T_of(b) + (size_t)i * ENTRY; }
/* Recompute the header checksum after a forgery (layout read from the forged header;
   nothing to do when that layout does not fit in the n bytes). */
static void reseal(uint8_t *b, size_t n) {
  if (qgen_rd32(b + 24) > 1000 || qgen_rd32(b + 28) > (1u << 20) || qgen_rd32(b + 32) > (1u << 20)) return;
  size_t M = M_of(b);
  if (M <= n) qgen_sha256_buf(b, M - 32, b + M - 32);
}

static int spec_equal(const qgen_spec *a, const qgen_spec *b) {
  int same = !strcmp(a->name, b->name) && a->head_dim == b->head_dim && a->n_head == b->n_head &&
             a->n_head_kv == b->n_head_kv && a->k_type == b->k_type && a->v_type == b->v_type &&
             a->in_type == b->in_type && a->out_type == b->out_type && a->scale == b->scale && a->block == b->block &&
             a->sparse == b->sparse && a->coverage == b->coverage && a->budget == b->budget && a->sink == b->sink &&
             a->recent == b->recent && a->n_archs == b->n_archs;
  for (int i = 0; same && i < a->n_archs; i++) same = a->archs[i] == b->archs[i];
  return same;
}

static int art_equal(const qgen_artifact *a, const qgen_artifact *b) {
  if (a->arch != b->arch || a->n_kernels != b->n_kernels || a->cubin_size != b->cubin_size ||
      a->ptx_size != b->ptx_size || a->log_size != b->log_size)
    return 0;
  for (int k = 0; k < a->n_kernels; k++) {
    const qgen_kernel_info *x = &a->k[k], *y = &b->k[k];
    if (strcmp(x->name, y->name) || x->regs != y->regs || x->spill_stores != y->spill_stores ||
        x->spill_loads != y->spill_loads || x->stack != y->stack || x->smem_static != y->smem_static)
      return 0;
  }
  return !memcmp(a->cubin, b->cubin, a->cubin_size) && !memcmp(a->ptx, b->ptx, a->ptx_size) &&
         !memcmp(a->log, b->log, a->log_size);
}

/* Parse buf as the bundle "NAME"; 1 when it is rejected with a one-line message that
   starts with "NAME:" and contains want (NULL: anything). The message goes to msg. */
static const char *NAME = "/some/dir/x.qgb";
static char msg[4096];
static int rejects(const uint8_t *buf, size_t n, const char *want) {
  qgen_bundle *b = malloc(sizeof *b);
  int rc = qgen_bundle_parse(NAME, buf, n, b, msg, sizeof msg);
  if (rc == 0) {
    qgen_bundle_free(b);
    free(b);
    qgen_fmt(msg, sizeof msg, "(accepted)");
    return 0;
  }
  int ok = b->n == 0 && b->spec_text == NULL; /* left empty */
  free(b);
  size_t nl = strlen(NAME);
  return ok && !strncmp(msg, NAME, nl) && msg[nl] == ':' && (!want || strstr(msg, want)) &&
         !strchr(msg, '\n');
}

static int accepts(const uint8_t *buf, size_t n, qgen_bundle *b) {
  return qgen_bundle_parse(NAME, buf, n, b, msg, sizeof msg) == 0;
}

/* A bundle assembled here from parts, after the documented layout. */
typedef struct {
  const char *text, *version;
  int n;
  uint32_t arch[QGEN_MAX_ARCHS], kinds[QGEN_MAX_ARCHS];
  const uint8_t *blob[QGEN_MAX_ARCHS];
  size_t bsz[QGEN_MAX_ARCHS];
  const qgen_artifact *info[QGEN_MAX_ARCHS]; /* names, cubin and ptx sizes for the table */
  uint32_t nv_major, nv_minor;
  const char *module; /* the entries' module name */
} parts;

static uint8_t *forge(const parts *P, size_t *size) {
  size_t S = strlen(P->text) + 1, V = strlen(P->version) + 1, T = 64 + S + V, M = T + (size_t)P->n * ENTRY + 32;
  size_t total = M;
  for (int i = 0; i < P->n; i++) total += P->bsz[i];
  uint8_t *b = calloc(1, total);
  memcpy(b, "QGENBNDL", 8);
  qgen_wr32(b + 8, 2);
  qgen_wr64(b + 16, total);
  qgen_wr32(b + 24, (uint32_t)P->n);
  qgen_wr32(b + 28, (uint32_t)S);
  qgen_wr32(b + 32, (uint32_t)V);
  qgen_wr32(b + 36, P->nv_major);
  qgen_wr32(b + 40, P->nv_minor);
  memcpy(b + 64, P->text, S);
  memcpy(b + 64 + S, P->version, V);
  size_t off = M;
  for (int i = 0; i < P->n; i++) {
    uint8_t *e = b + T + (size_t)i * ENTRY;
    const qgen_artifact *a = P->info[i];
    qgen_wr32(e, P->arch[i]);
    qgen_wr32(e + 4, P->kinds[i]);
    qgen_wr64(e + 8, off);
    qgen_wr64(e + 16, P->bsz[i]);
    qgen_wr64(e + 24, a->cubin_size);
    qgen_wr64(e + 32, a->ptx_size);
    qgen_wr32(e + 40, (uint32_t)a->n_kernels);
    qgen_sha256_buf(P->blob[i], P->bsz[i], e + 48);
    for (int k = 0; k < a->n_kernels; k++) memcpy(e + 80 + 32 * k, a->k[k].name, strlen(a->k[k].name));
    memcpy(e + 336, P->module, strlen(P->module));
    memcpy(b + off, P->blob[i], P->bsz[i]);
    off += P->bsz[i];
  }
  reseal(b, total);
  *size = total;
  return b;
}

/* f16 bits of a random finite value of magnitude about 2^-4 .. 2^1. */
static uint16_t rnd_f16(void) {
  uint64_t r = rnd();
  return (uint16_t)(((r >> 40) & 1) << 15 | (11 + (r >> 20) % 6) << 10 | (r & 0x3ff));
}

/* Append 300 random tokens to sequence 0 and attend once; out receives the result. */
static qgen_status step(qgen_ctx *c, uint16_t *out, size_t out_n) {
  qgen_info in;
  qgen_get_info(c, &in);
  const int ntok = 300;
  const size_t kv_n = (size_t)ntok * in.n_head_kv * in.head_dim, q_n = (size_t)in.n_head * in.head_dim;
  uint16_t *k = malloc(kv_n * 2), *v = malloc(kv_n * 2), *q = malloc(q_n * 2);
  rng = 12345;
  for (size_t i = 0; i < kv_n; i++) k[i] = rnd_f16(), v[i] = rnd_f16();
  for (size_t i = 0; i < q_n; i++) q[i] = rnd_f16();
  qgen_kv *kv = NULL;
  int seq = 0;
  qgen_status st = q_n == out_n ? qgen_cache_create(c, &kv, 2, 1024) : QGEN_ERR_INVALID_ARG;
  if (st == QGEN_OK) st = qgen_append(kv, &seq, 1, &ntok, (qgen_ptr)(uintptr_t)k, (qgen_ptr)(uintptr_t)v, NULL);
  if (st == QGEN_OK) st = qgen_attend(kv, &seq, 1, (qgen_ptr)(uintptr_t)q, (qgen_ptr)(uintptr_t)out, NULL, NULL);
  qgen_cache_destroy(kv);
  free(k), free(v), free(q);
  return st;
}

/* ---- the child run with NVRTC hidden -------------------------------------------------- */

static int child_no_nvrtc(const char *bundle) {
  int major, minor;
  char err[512];
  check(qgen_nvrtc_version(&major, &minor, err, sizeof err) != 0 && strstr(err, "QGEN_NVRTC=none"),
        "[child] QGEN_NVRTC=none: NVRTC is not loaded (%s)", err);
  qgen_bundle *b = malloc(sizeof *b);
  int rc = qgen_bundle_read(bundle, b, err, sizeof err);
  check(rc == 0 && b->n == 2 && b->arts[0].cubin_size > 0, "[child] the bundle reads without NVRTC%s%s", rc ? ": " : "",
        rc ? err : "");
  if (rc == 0) qgen_bundle_free(b);
  free(b);
  qgen_open_opts o = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  qgen_ctx *c = NULL;
  qgen_status st = qgen_open(&c, bundle, &o);
  qgen_info info = {0};
  qgen_get_info(c, &info);
  check(st == QGEN_OK && info.name && !strcmp(info.name, "qwen2.5-0.5b"), "[child] qgen_open(CPU) of the bundle: %s%s%s",
        qgen_status_str(st), st ? ": " : "", st ? qgen_error(c) : "");
  uint16_t out[14 * 64];
  check(st == QGEN_OK && step(c, out, 14 * 64) == QGEN_OK, "[child] a decode step on the CPU backend runs");
  qgen_close(c);
  o.backend = QGEN_BACKEND_GPU;
  st = qgen_open(&c, bundle, &o);
  if (st == QGEN_OK) {
    qgen_get_info(c, &info);
    check(info.cache_hit == 1, "[child] qgen_open(GPU) of the bundle with no NVRTC: %s, sm_%d, %s", info.device_name, info.arch,
          info.from_ptx ? "from PTX" : "cubin");
    memset(out, 0, sizeof out);
  } else {
    check(st == QGEN_ERR_NO_DRIVER || st == QGEN_ERR_NO_DEVICE || st == QGEN_ERR_UNSUPPORTED,
          "[child] qgen_open(GPU) of the bundle fails only for want of a device, not NVRTC: %s: %s", qgen_status_str(st),
          qgen_error(c));
  }
  qgen_close(c);
  /* the spec itself needs NVRTC on the GPU backend: the error must say so */
  st = qgen_open(&c, SPEC_PATH, &o);
  check(st != QGEN_OK, "[child] qgen_open(GPU) of the .lua without NVRTC fails: %s: %s", qgen_status_str(st), qgen_error(c));
  qgen_close(c);
  printf("[child] %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

/* ---- the tests ------------------------------------------------------------------------ */

static qgen_spec spec;
static qgen_artifact arts[2];
static uint8_t *bun;
static size_t bsize;
static char bpath[4096];

static void test_roundtrip(void) {
  char err[65536];
  check(qgen_bundle_write(bpath, &spec, arts, 2, err, sizeof err) == 0, "qgen_bundle_write %s", bpath);
  size_t n = 0;
  bun = (uint8_t *)qgen_read_file(bpath, 1u << 30, &n, err, sizeof err);
  bsize = n;
  check(bun && n > 100000, "bundle file is %zu bytes", n);
  if (!bun) exit(1);
  /* the order of the artifacts given does not matter */
  qgen_artifact rev[2] = {arts[1], arts[0]};
  size_t n2 = 0;
  uint8_t *again = qgen_bundle_pack(&spec, rev, 2, &n2, err, sizeof err);
  check(again && n2 == n && !memcmp(again, bun, n), "packing again (artifacts in reverse order) gives the same bytes");
  free(again);

  /* the documented layout */
  const size_t M = M_of(bun), T = T_of(bun);
  uint8_t *e0 = entry_of(bun, 0), *e1 = entry_of(bun, 1), sum[32];
  char text[4096];
  int tl = qgen_spec_to_lua(&spec, text, sizeof text);
  qgen_sha256_buf(bun, M - 32, sum);
  check(!memcmp(bun, "QGENBNDL", 8) && qgen_rd32(bun + 8) == 2 && qgen_rd32(bun + 12) == 0 && qgen_rd64(bun + 16) == n &&
            qgen_rd32(bun + 24) == 2 && qgen_rd32(bun + 28) == (uint32_t)tl + 1 && !memcmp(bun + 64, text, (size_t)tl + 1) &&
            !memcmp(sum, bun + M - 32, 32),
        "header as documented: magic, version 2, flags 0, size, 2 entries, canonical spec text, checksum");
  size_t s0, s1;
  uint8_t *a0 = qgen_artifact_pack(&arts[0], &s0), *a1 = qgen_artifact_pack(&arts[1], &s1), h0[32], h1[32];
  qgen_sha256_buf(a0, s0, h0);
  qgen_sha256_buf(a1, s1, h1);
  check(qgen_rd32(e0) == 80 && qgen_rd32(e1) == 90 && qgen_rd32(e0 + 4) == 3 && qgen_rd32(e1 + 4) == 3 && qgen_rd64(e0 + 8) == M &&
            qgen_rd64(e0 + 16) == s0 && qgen_rd64(e1 + 8) == M + s0 && qgen_rd64(e1 + 16) == s1 && M + s0 + s1 == n &&
            qgen_rd64(e0 + 24) == arts[0].cubin_size && qgen_rd64(e0 + 32) == arts[0].ptx_size && qgen_rd32(e0 + 40) == (uint32_t)n_kernels(&spec) &&
            !strcmp((char *)e0 + 80, "qg_append") && !strcmp((char *)e0 + 80 + (n_kernels(&spec) - 1) * 32, "qg_attend") &&
            !memcmp(e0 + 48, h0, 32) && !memcmp(e1 + 48, h1, 32) && !memcmp(bun + M, a0, s0) && !memcmp(bun + M + s0, a1, s1),
        "table as documented: sm_80, sm_90 cubin+ptx, contiguous payloads = serialized artifacts, names, sha256 (T=%zu M=%zu)",
        T, M);
  int major = 0, minor = 0;
  qgen_nvrtc_version(&major, &minor, err, sizeof err);
  char module[128];
  qgen_spec_uri(&spec, QGEN_URI_MODULE, module, sizeof module);
  check(!strcmp((char *)e0 + 336, module) && !strcmp((char *)e1 + 336, module), "each entry records its module, %s", module);
  parts P = {text, (const char *)bun + 64 + tl + 1, 2, {80, 90}, {3, 3}, {a0, a1}, {s0, s1}, {&arts[0], &arts[1]},
             (uint32_t)major, (uint32_t)minor, module};
  size_t fn;
  uint8_t *f = forge(&P, &fn);
  check(fn == n && !memcmp(f, bun, n), "the test's own assembler (from the documented layout) gives the same bytes");
  free(f);
  free(a0), free(a1);

  qgen_bundle *b = malloc(sizeof *b);
  int rc = qgen_bundle_read(bpath, b, err, sizeof err);
  check(rc == 0, "qgen_bundle_read: %s", rc ? err : "ok");
  if (rc == 0) {
    check(spec_equal(&b->spec, &spec), "spec read back is identical (all fields but line)");
    check(b->n == 2 && art_equal(&b->arts[0], &arts[0]) && art_equal(&b->arts[1], &arts[1]),
          "cubins, PTX, logs and kernel infos are byte-equal to the JIT path's");
    check(b->nvrtc_major == major && b->nvrtc_minor == minor && b->qgen_version[0] && b->file_size == n &&
              b->entry[0].kinds == 3 && !strcmp(qgen_bundle_kinds_str(b->entry[0].kinds), "cubin+ptx"),
          "versions (qgen %s, NVRTC %d.%d), size and kinds recorded", b->qgen_version, b->nvrtc_major, b->nvrtc_minor);
    check(!strcmp(b->spec_text, text), "canonical spec text kept");
    qgen_bundle_free(b);
  }
  free(b);

  char other[4096];
  check(qgen_bundle_is(bpath) && !qgen_bundle_is(SPEC_PATH) && !qgen_bundle_is(tpath(other, "nope")) && !qgen_bundle_is(root),
        "qgen_bundle_is: the bundle yes; a spec, a missing file, a directory no");

  /* a bundle of one arch stores a spec listing that one arch */
  b = malloc(sizeof *b);
  uint8_t *one = qgen_bundle_pack(&spec, &arts[1], 1, &n2, err, sizeof err);
  check(one && accepts(one, n2, b) && b->n == 1 && b->spec.n_archs == 1 && b->spec.archs[0] == 90,
        "a one-arch bundle (sm_90) reads back with archs = { sm_90 }");
  if (one) qgen_bundle_free(b);
  free(one);
  free(b);

  /* bad arguments to the writer */
  qgen_artifact dup[2] = {arts[0], arts[0]}, old = arts[0];
  old.arch = 75;
  check(!qgen_bundle_pack(&spec, arts, 0, &n2, err, sizeof err) && !qgen_bundle_pack(&spec, dup, 2, &n2, err, sizeof err) &&
            strstr(err, "twice") && !qgen_bundle_pack(&spec, &old, 1, &n2, err, sizeof err) && strstr(err, "sm_80"),
        "qgen_bundle_pack refuses no artifacts, an arch twice, sm_75 (%s)", err);
  qgen_fmt(other, sizeof other, "%s/no/such/dir/x.qgb", root);
  check(qgen_bundle_write(other, &spec, arts, 2, err, sizeof err) != 0 && strstr(err, other),
        "qgen_bundle_write to a missing directory: %s", err);
}

static void test_open(void) {
  qgen_open_opts o = {QGEN_BACKEND_CPU, 0, NULL, NULL};
  qgen_ctx *cb = NULL, *cl = NULL;
  qgen_status sb = qgen_open(&cb, bpath, &o), sl = qgen_open(&cl, SPEC_PATH, &o);
  qgen_info ib = {0}, il = {0};
  qgen_get_info(cb, &ib);
  qgen_get_info(cl, &il);
  check(sb == QGEN_OK && sl == QGEN_OK && !strcmp(ib.name, "qwen2.5-0.5b"), "qgen_open(CPU) of the bundle: %s%s%s",
        qgen_status_str(sb), sb ? ": " : "", sb ? qgen_error(cb) : "");
  check(sb == QGEN_OK && ib.head_dim == il.head_dim && ib.n_head == il.n_head && ib.n_head_kv == il.n_head_kv &&
            ib.block == il.block && ib.sparse == il.sparse && ib.scale == il.scale && ib.coverage == il.coverage &&
            ib.sink == il.sink && ib.recent == il.recent && ib.k_row_bytes == il.k_row_bytes && !strcmp(ib.k_type, il.k_type),
        "its info equals the .lua's");
  static uint16_t ob[14 * 64], ol[14 * 64];
  qgen_status st1 = sb == QGEN_OK ? step(cb, ob, 14 * 64) : sb, st2 = sl == QGEN_OK ? step(cl, ol, 14 * 64) : sl;
  int nonzero = 0;
  for (int i = 0; i < 14 * 64; i++) nonzero += ob[i] != 0;
  check(st1 == QGEN_OK && st2 == QGEN_OK && !memcmp(ob, ol, sizeof ob) && nonzero > 100,
        "a sparse decode step (300 tokens) from the bundle equals the .lua's on the CPU backend");
  qgen_close(cb);
  qgen_close(cl);

  o.variant = "qwen2.5-0.5b";
  sb = qgen_open(&cb, bpath, &o);
  check(sb == QGEN_OK, "qgen_open with variant = the bundle's name");
  qgen_close(cb);
  o.variant = "other";
  sb = qgen_open(&cb, bpath, &o);
  check(sb == QGEN_ERR_SPEC && strstr(qgen_error(cb), "'other'"), "qgen_open with another variant: %s", qgen_error(cb));
  qgen_close(cb);

  /* a bundle under any name is found by its magic; a .qgb that is a spec is a spec */
  char p[4096], err[512];
  size_t n;
  char *lua = qgen_read_file(SPEC_PATH, 1 << 20, &n, err, sizeof err);
  write_bytes(tpath(p, "spec-named.qgb"), lua, n);
  free(lua);
  o.variant = NULL;
  sb = qgen_open(&cb, p, &o);
  check(sb == QGEN_OK, "a spec file named *.qgb opens as a spec");
  qgen_close(cb);
  write_bytes(tpath(p, "bundle-named.lua"), bun, bsize);
  sb = qgen_open(&cb, p, &o);
  check(sb == QGEN_OK, "a bundle named *.lua opens as a bundle");
  qgen_close(cb);
  write_bytes(tpath(p, "trunc.qgb"), bun, bsize / 2);
  sb = qgen_open(&cb, p, &o);
  check(sb == QGEN_ERR_BUNDLE && strstr(qgen_error(cb), p) && strstr(qgen_error(cb), "truncated"),
        "qgen_open of a truncated bundle: %s: %s", qgen_status_str(sb), qgen_error(cb));
  qgen_close(cb);

  /* GPU backend: no device here (the lead's GPU run covers the rest) */
  o.backend = QGEN_BACKEND_GPU;
  sb = qgen_open(&cb, bpath, &o);
  if (sb == QGEN_OK) {
    qgen_get_info(cb, &ib);
    check(ib.cache_hit == 1 && ib.from_ptx == (ib.arch != 80 && ib.arch != 90),
          "qgen_open(GPU) of the bundle: %s sm_%d, %s", ib.device_name, ib.arch, ib.from_ptx ? "PTX" : "cubin");
  } else {
    check(sb == QGEN_ERR_NO_DRIVER || sb == QGEN_ERR_NO_DEVICE, "qgen_open(GPU) of the bundle without a GPU: %s: %s",
          qgen_status_str(sb), qgen_error(cb));
  }
  qgen_close(cb);
}

/* Truncation at every length (QGEN_TEST_QUICK: every length in the header region and a
   stride elsewhere), in memory; then through files at a stride. */
static void test_truncation(void) {
  const size_t M = M_of(bun), stride = quick ? 997 : 1;
  char want[64];
  double t0 = qgen_now_ms();
  size_t tried = 0, bad = 0, first_bad = 0;
  for (size_t len = 0; len < bsize; len += len < M + 64 ? 1 : stride) {
    if (len == 0) qgen_fmt(want, sizeof want, "empty file");
    else qgen_fmt(want, sizeof want, "truncated at byte %zu ", len);
    tried++;
    if (!rejects(bun, len, want) && bad++ == 0) first_bad = len;
  }
  check(bad == 0, "truncated at %zu lengths (of %zu bytes%s): each rejected with \"NAME: truncated at byte N (...)\"%s (%.0f ms)",
        tried, bsize, quick ? ", stride 997 past the header" : "", bad ? ", first failure at" : "", qgen_now_ms() - t0);
  if (bad) printf("      length %zu: %s\n", first_bad, msg);
  rejects(bun, 500, NULL);
  printf("      e.g. %s\n", msg);
  rejects(bun, M + 1000, NULL);
  printf("      e.g. %s\n", msg);

  /* through the file system */
  char p[4096], err[1024];
  tpath(p, "t.qgb");
  write_bytes(p, bun, bsize);
  qgen_bundle *b = malloc(sizeof *b);
  bad = tried = 0;
  for (size_t len = bsize; len-- > 0;) {
    if (!(len < M + 8 || len % (quick ? 49999 : 4999) == 0 || len == bsize - 1)) continue;
    tried++;
    if (truncate(p, (off_t)len) != 0 || qgen_bundle_read(p, b, err, sizeof err) == 0 || strncmp(err, p, strlen(p)) != 0) {
      if (!bad++) printf("      length %zu: %s\n", len, err);
    }
  }
  free(b);
  check(bad == 0, "%zu truncated files rejected by qgen_bundle_read, the message naming the file", tried);
}

/* A file of 1 GiB (sparse) whose header declares the bundle's own size: refused from its
   header with "N trailing bytes", without reading the rest. In a child whose address
   space allows 256 MiB more than it holds, so reading the whole file could not even
   start. */
static void test_oversized(void) {
  char p[4096];
  tpath(p, "big.qgb");
  if (write_bytes(p, bun, bsize) != 0 || truncate(p, (off_t)QGEN_BUNDLE_MAX_SIZE) != 0) {
    check(0, "a 1 GiB sparse file");
    return;
  }
  fflush(stdout);
  int out[2];
  if (pipe(out) != 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    long vm = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &vm) != 1) _exit(3);
    fclose(f);
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = (rlim_t)vm * (rlim_t)sysconf(_SC_PAGESIZE) + (256u << 20);
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
    static qgen_bundle b;
    char err[1024] = "";
    const double t0 = qgen_now_ms();
    int rc = qgen_bundle_read(p, &b, err, sizeof err);
    dprintf(out[1], "%.1f ms: %s", qgen_now_ms() - t0, err);
    _exit(rc == 0 ? 1 : 0);
  }
  close(out[1]);
  char said[1200] = "";
  ssize_t got = read(out[0], said, sizeof said - 1);
  said[got > 0 ? got : 0] = 0;
  close(out[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  char want[128];
  qgen_fmt(want, sizeof want, "%llu trailing bytes after the %zu the header declares",
           (unsigned long long)(QGEN_BUNDLE_MAX_SIZE - bsize), bsize);
  check(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(said, want),
        "qgen_bundle_read of a 1 GiB file whose header says %zu bytes: refused from the header -- %s", bsize, said);
  unlink(p);
}

static void test_flips(void) {
  const size_t M = M_of(bun);
  uint8_t *c = malloc(bsize);
  memcpy(c, bun, bsize);
  size_t bad = 0, tried = 0;
  double t0 = qgen_now_ms();
  for (size_t i = 0; i < M; i++)
    for (int bit = 0; bit < 8; bit++) {
      c[i] ^= (uint8_t)(1u << bit);
      tried++;
      if (!rejects(c, bsize, NULL) && !bad++) printf("      byte %zu bit %d: %s\n", i, bit, msg);
      c[i] ^= (uint8_t)(1u << bit);
    }
  check(bad == 0, "every one of the %zu bits of the header, strings, table and checksum flipped: rejected (%.0f ms)", tried,
        qgen_now_ms() - t0);
  rejects(c, bsize, NULL);
  c[100] ^= 1;
  rejects(c, bsize, NULL);
  printf("      e.g. %s\n", msg);
  c[100] ^= 1;

  /* payload bits: the checksum of the right entry catches them */
  const uint64_t off1 = qgen_rd64(entry_of(bun, 1) + 8);
  const int n_pos = quick ? 24 : 400;
  bad = 0;
  t0 = qgen_now_ms();
  for (int k = 0; k < n_pos + 4; k++) {
    size_t pos = k == n_pos ? M : k == n_pos + 1 ? (size_t)off1 - 1 : k == n_pos + 2 ? (size_t)off1 : k == n_pos + 3 ? bsize - 1
               : M + (size_t)(rnd() % (bsize - M));
    char want[64];
    qgen_fmt(want, sizeof want, "entry %d (sm_%d cubin+ptx) checksum mismatch", pos < off1 ? 0 : 1, pos < off1 ? 80 : 90);
    c[pos] ^= (uint8_t)(1u << (rnd() % 8));
    if (!rejects(c, bsize, want) && !bad++) printf("      byte %zu: %s\n", pos, msg);
    memcpy(c + pos, bun + pos, 1);
  }
  check(bad == 0, "%d payload bit flips (random bytes and each payload's first and last): \"entry N (sm_XX cubin+ptx) checksum mismatch\" (%.0f ms)",
        n_pos + 4, qgen_now_ms() - t0);
  c[bsize - 1] ^= 0x10;
  rejects(c, bsize, NULL);
  printf("      e.g. %s\n", msg);
  free(c);
}

/* One forged field: apply f to a fresh copy, reseal, expect a rejection containing want. */
typedef void (*mutator)(uint8_t *c);
static uint8_t *fresh(void) {
  uint8_t *c = malloc(bsize);
  memcpy(c, bun, bsize);
  return c;
}
static void forged(const char *what, const char *want, void (*f)(uint8_t *c, size_t *n), int seal) {
  uint8_t *c = fresh();
  size_t n = bsize;
  f(c, &n);
  if (seal) reseal(c, n);
  int ok = rejects(c, n, want);
  check(ok, "%s: %s", what, msg);
  free(c);
}

#define E0 (entry_of(c, 0))
#define E1 (entry_of(c, 1))
static void m_version(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 8, 1); }
static void m_flags(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 12, 1); }
static void m_fsize_huge(uint8_t *c, size_t *n) { (void)n, qgen_wr64(c + 16, ~0ull); }
static void m_fsize_gib(uint8_t *c, size_t *n) { (void)n, qgen_wr64(c + 16, (1ull << 30) + 1); }
static void m_fsize_more(uint8_t *c, size_t *n) { qgen_wr64(c + 16, *n + 1); }
static void m_fsize_less(uint8_t *c, size_t *n) { qgen_wr64(c + 16, *n - 1); }
static void m_fsize_tiny(uint8_t *c, size_t *n) { (void)n, qgen_wr64(c + 16, 100); }
static void m_count0(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 24, 0); }
static void m_count17(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 24, 17); }
static void m_count_huge(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 24, 0xffffffffu); }
static void m_count1(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 24, 1); } /* the layout shifts */
static void m_count3(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 24, 3); }
static void m_spec0(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 28, 0); }
static void m_spec_huge(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 28, 0xffffffffu); }
static void m_spec_shift(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 28, qgen_rd32(c + 28) - 1); }
static void m_ver_huge(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 32, 0xfffffff0u); }
static void m_reserved(uint8_t *c, size_t *n) { (void)n, c[50] = 1; }
static void m_nvrtc(uint8_t *c, size_t *n) { (void)n, qgen_wr32(c + 36, 0xffffffffu); }
static void m_spec_nonul(uint8_t *c, size_t *n) { (void)n, c[64 + qgen_rd32(c + 28) - 1] = ' '; }
static void m_spec_nul(uint8_t *c, size_t *n) { (void)n, c[64 + 10] = 0; }
static void m_ver_nonul(uint8_t *c, size_t *n) { (void)n, c[T_of(c) - 1] = '9'; }
static void m_ver_ctrl(uint8_t *c, size_t *n) { (void)n, c[64 + qgen_rd32(c + 28)] = 1; }
static void m_arch75(uint8_t *c, size_t *n) { (void)n, qgen_wr32(E0, 75); }
static void m_arch_huge(uint8_t *c, size_t *n) { (void)n, qgen_wr32(E0, 0xffffffffu); }
static void m_arch_dup(uint8_t *c, size_t *n) { (void)n, qgen_wr32(E1, 80); }
static void m_arch_order(uint8_t *c, size_t *n) { (void)n, qgen_wr32(E0, 90), qgen_wr32(E1, 80); }
static void m_kind0(uint8_t *c, size_t *n) { (void)n, qgen_wr32(E0 + 4, 0); }
static void m_kind4(uint8_t *c, size_t *n) { (void)n, qgen_wr32(E0 + 4, 4); }
static void m_kind1(uint8_t *c, size_t *n) { (void)n, qgen_wr32(E1 + 4, 1); }
static void m_nk9(uint8_t *c, size_t *n) { (void)n, qgen_wr32(E0 + 40, 9); }
static void m_nk_huge(uint8_t *c, size_t *n) { (void)n, qgen_wr32(E0 + 40, 0xffffffffu); }
static void m_nk3(uint8_t *c, size_t *n) { (void)n, qgen_wr32(E0 + 40, 3); }
static void m_nk8(uint8_t *c, size_t *n) { (void)n, qgen_wr32(E0 + 40, 8); } /* one past a sparse module's 7 */
static void m_name_nonul(uint8_t *c, size_t *n) { (void)n, memset(E0 + 80, 'A', 32); }
static void m_name_slash(uint8_t *c, size_t *n) { (void)n, E0[80 + 32 + 2] = '/'; }
static void m_name_tail(uint8_t *c, size_t *n) { (void)n, E0[80 + 31] = 'x'; }
static void m_name_other(uint8_t *c, size_t *n) { (void)n, E1[80 + 3] = 'X'; }
static void m_e_reserved(uint8_t *c, size_t *n) { (void)n, E1[44] = 7; }
static void m_off_huge(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E0 + 8, ~0ull); }
static void m_size_huge(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E1 + 16, ~0ull); }
static void m_off_eof(uint8_t *c, size_t *n) { qgen_wr64(E1 + 8, *n), qgen_wr64(E1 + 16, 1); }
static void m_off_header(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E0 + 8, 10); }
static void m_overlap(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E1 + 8, qgen_rd64(E0 + 8)); }
static void m_size_plus(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E0 + 16, qgen_rd64(E0 + 16) + 1); }
static void m_size_minus(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E0 + 16, qgen_rd64(E0 + 16) - 1); }
static void m_last_short(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E1 + 16, qgen_rd64(E1 + 16) - 1); }
static void m_size0(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E0 + 16, 0); }
static void m_cubin0(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E0 + 24, 0); }
static void m_cubin_all(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E0 + 24, qgen_rd64(E0 + 16)); }
static void m_cubin_plus(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E0 + 24, qgen_rd64(E0 + 24) + 1); }
static void m_ptx_huge(uint8_t *c, size_t *n) { (void)n, qgen_wr64(E0 + 32, ~0ull); }
static void m_headdim(uint8_t *c, size_t *n) {
  (void)n;
  char *s = strstr((char *)c + 64, "head_dim = 64");
  if (s) s[12] = '5';
}
static void m_archs(uint8_t *c, size_t *n) {
  (void)n;
  char *s = strstr((char *)c + 64, "\"sm_90\"");
  if (s) s[5] = '6';
}
static void m_spec_lua(uint8_t *c, size_t *n) {
  (void)n;
  char *s = strstr((char *)c + 64, "return spec{");
  if (s) memcpy(s, "return spec(", 12);
}
static void m_payload_sha(uint8_t *c, size_t *n) { (void)n, E1[48 + 5] ^= 0x40; }
static void m_checksum(uint8_t *c, size_t *n) { (void)n, c[M_of(c) - 1] ^= 0x80; }

static void test_forged(void) {
  /* without resealing, the header checksum catches a field change */
  forged("count 1 without a new checksum", "header checksum mismatch", m_count1, 0);
  forged("checksum byte changed", "header checksum mismatch", m_checksum, 0);
  /* with the checksum recomputed (as a hostile file would), each field check must hold */
  forged("format version 1 (before the module names)", "format version 1; this qgen reads version 2 (write the bundle again", m_version, 1);
  forged("flags 1", "flags", m_flags, 1);
  forged("file size 2^64-1", "file size", m_fsize_huge, 1);
  forged("file size 1 GiB + 1", "file size", m_fsize_gib, 1);
  forged("file size one more than the file", "truncated at byte", m_fsize_more, 1);
  forged("file size one less than the file", "1 trailing bytes", m_fsize_less, 1);
  forged("file size smaller than the header", "less than its own", m_fsize_tiny, 1);
  forged("entry count 0", "lists 0 entries", m_count0, 1);
  forged("entry count 17", "lists 17 entries", m_count17, 1);
  forged("entry count 2^32-1", "lists 4294967295 entries", m_count_huge, 1);
  forged("entry count 1 (table shorter, payloads unaccounted)", "unaccounted", m_count1, 1);
  forged("entry count 3 (table reaches into the payload)", NULL, m_count3, 1);
  forged("spec text length 0", "spec text of 0 bytes", m_spec0, 1);
  forged("spec text length 2^32-1", "spec text of 4294967295 bytes", m_spec_huge, 1);
  forged("spec text length one short", "not NUL-terminated", m_spec_shift, 1);
  forged("version string length huge", "version string of", m_ver_huge, 1);
  forged("reserved header byte set", "reserved header bytes", m_reserved, 1);
  forged("NVRTC major 2^32-1", "not plausible", m_nvrtc, 1);
  forged("spec text without its NUL", "spec text is not NUL-terminated", m_spec_nonul, 1);
  forged("spec text with a NUL inside", "spec text has a NUL", m_spec_nul, 1);
  forged("version string without its NUL", "version string is not NUL-terminated", m_ver_nonul, 1);
  forged("version string with a control byte", "non-printable", m_ver_ctrl, 1);
  forged("entry 0 arch 75", "entry 0: arch 75", m_arch75, 1);
  forged("entry 0 arch 2^32-1", "arch 4294967295", m_arch_huge, 1);
  forged("entry 1 repeats sm_80", "repeats the arch", m_arch_dup, 1);
  forged("entries in descending arch order", "ascending arch order", m_arch_order, 1);
  forged("entry 0 kind 0", "kind 0", m_kind0, 1);
  forged("entry 0 kind 4", "kind 4", m_kind4, 1);
  forged("entry 1 kind cubin only while the payload has PTX", "do not fit", m_kind1, 1);
  forged("entry 0 lists 9 kernels", "9 kernels (at most 8)", m_nk9, 1);
  forged("entry 0 lists 2^32-1 kernels", "4294967295 kernels", m_nk_huge, 1);
  forged("entry 0 lists 3 kernels (slot 3 is then not empty)", "past the kernel count", m_nk3, 1);
  forged("entry 0 lists 8 kernels (slot 7 empty)", "slot 7 is empty", m_nk8, 1);
  forged("kernel name without a NUL", "not NUL-terminated", m_name_nonul, 1);
  forged("kernel name with a '/'", "outside [A-Za-z0-9_]", m_name_slash, 1);
  forged("kernel name slot with a byte after the NUL", "after its NUL", m_name_tail, 1);
  forged("kernel name differs from the payload's", "in the table but", m_name_other, 1);
  forged("entry reserved bytes set", "reserved bytes", m_e_reserved, 1);
  forged("entry 0 offset 2^64-1", "runs past the end", m_off_huge, 1);
  forged("entry 1 size 2^64-1", "runs past the end", m_size_huge, 1);
  forged("entry 1 offset at EOF", "runs past the end", m_off_eof, 1);
  forged("entry 0 offset into the header", "points into the header", m_off_header, 1);
  forged("entry 1 at entry 0's offset (overlap)", "overlaps entry 0", m_overlap, 1);
  forged("entry 0 one byte longer (overlaps entry 1)", "overlaps", m_size_plus, 1);
  forged("entry 0 one byte shorter (a gap)", "unaccounted bytes before", m_size_minus, 1);
  forged("last entry one byte shorter", "unaccounted bytes after", m_last_short, 1);
  forged("entry 0 size 0", "empty payload", m_size0, 1);
  forged("entry 0 cubin size 0 with kind cubin+ptx", "do not fit", m_cubin0, 1);
  forged("entry 0 cubin size = payload size", "do not fit", m_cubin_all, 1);
  forged("entry 0 cubin size one off", "the table says cubin", m_cubin_plus, 1);
  forged("entry 0 ptx size 2^64-1", "do not fit", m_ptx_huge, 1);
  forged("entry 1 payload checksum changed", "entry 1 (sm_90 cubin+ptx) checksum mismatch", m_payload_sha, 1);
  forged("spec text head_dim = 65", "x.qgb:3: head_dim = 65", m_headdim, 1); /* the field's line in the text */
  forged("spec text lists sm_96", "sm_96", m_archs, 1);
  forged("spec text with a Lua syntax error", "x.qgb:", m_spec_lua, 1);
}

/* Forgeries that change the shape: assembled from parts. */
static void test_assembled(void) {
  char text[4096], err[512], *big = NULL;
  int tl = qgen_spec_to_lua(&spec, text, sizeof text);
  size_t s0, s1, n;
  uint8_t *a0 = qgen_artifact_pack(&arts[0], &s0), *a1 = qgen_artifact_pack(&arts[1], &s1);
  char module[128];
  qgen_spec_uri(&spec, QGEN_URI_MODULE, module, sizeof module);
  parts base = {text, "0.1.0", 2, {80, 90}, {3, 3}, {a0, a1}, {s0, s1}, {&arts[0], &arts[1]}, 13, 0, module};
  qgen_bundle *b = malloc(sizeof *b);
  uint8_t *f;

  parts P = base;
  f = forge(&P, &n);
  int ok = accepts(f, n, b);
  check(ok, "assembled from parts: accepted%s%s", ok ? "" : ": ", ok ? "" : msg);
  if (ok) qgen_bundle_free(b);
  free(f);

  P = base;
  P.blob[0] = a1, P.bsz[0] = s1, P.blob[1] = a0, P.bsz[1] = s0, P.info[0] = &arts[1], P.info[1] = &arts[0];
  f = forge(&P, &n);
  check(rejects(f, n, "payload is for sm_90"), "payloads swapped between sm_80 and sm_90: %s", msg);
  free(f);

  /* a payload that is not an artifact, or a broken one, with a correct checksum */
  uint8_t *junk = malloc(s0);
  for (size_t i = 0; i < s0; i++) junk[i] = (uint8_t)rnd();
  P = base;
  P.blob[0] = junk;
  f = forge(&P, &n);
  check(rejects(f, n, "entry 0 (sm_80 cubin+ptx): not a qgen artifact"), "random payload with a valid checksum: %s", msg);
  free(f);
  memcpy(junk, a0, s0);
  qgen_wr32(junk + 16, 0xffffffffu); /* artifact's kernel count */
  P.blob[0] = junk;
  f = forge(&P, &n);
  check(rejects(f, n, "kernels"), "artifact with a huge kernel count: %s", msg);
  free(f);
  memcpy(junk, a0, s0);
  qgen_wr64(junk + 20 + (size_t)arts[0].n_kernels * 52, ~0ull); /* artifact's cubin length */
  f = forge(&P, &n);
  check(rejects(f, n, "truncated"), "artifact with a cubin length of 2^64-1: %s", msg);
  free(f);
  P.bsz[0] = s0 - 1;
  memcpy(junk, a0, s0);
  f = forge(&P, &n);
  check(rejects(f, n, "entry 0"), "artifact one byte short: %s", msg);
  free(f);
  free(junk);

  /* a cubin-only and a PTX-only entry are valid */
  qgen_artifact co = arts[0], po = arts[1];
  co.ptx_size = 0;
  po.cubin_size = 0;
  size_t sc, sp;
  uint8_t *bc = qgen_artifact_pack(&co, &sc), *bp = qgen_artifact_pack(&po, &sp);
  P = base;
  P.kinds[0] = 1, P.kinds[1] = 2, P.blob[0] = bc, P.bsz[0] = sc, P.blob[1] = bp, P.bsz[1] = sp, P.info[0] = &co, P.info[1] = &po;
  f = forge(&P, &n);
  ok = accepts(f, n, b);
  check(ok && b->arts[0].ptx_size == 0 && b->arts[1].cubin_size == 0 && b->entry[0].kinds == 1 && b->entry[1].kinds == 2,
        "a cubin-only sm_80 entry and a PTX-only sm_90 entry read back%s%s", ok ? "" : ": ", ok ? "" : msg);
  if (ok) qgen_bundle_free(b);
  free(f);
  P.kinds[0] = 3;
  f = forge(&P, &n);
  check(rejects(f, n, "do not fit its kind"), "a cubin-only payload listed as cubin+ptx: %s", msg);
  free(f);
  free(bc), free(bp);

  /* another spec's text over these payloads, every checksum recomputed, so only the module
     check can catch it: the entries' module is not the spec's */
  qgen_spec sp2 = spec;
  sp2.head_dim = spec.head_dim == 64 ? 128 : 64;
  sp2.scale = 1.0 / sqrt((double)sp2.head_dim);
  char text2[4096];
  check(qgen_spec_to_lua(&sp2, text2, sizeof text2) > 0, "another spec's canonical text");
  P = base;
  P.text = text2;
  f = forge(&P, &n);
  check(rejects(f, n, "entry 0 (sm_80) was compiled for module"), "another spec's text with these payloads: %s", msg);
  free(f);
  P = base;
  P.module = "d1_h1_g1_kf16_vf16_if16_of16_b16_s1_dense";
  f = forge(&P, &n);
  check(rejects(f, n, "not this spec's kernels"), "entries naming another module: %s", msg);
  free(f);
  P.module = "bad\nname";
  f = forge(&P, &n);
  check(rejects(f, n, "non-printable"), "a module name with a newline: %s", msg);
  free(f);

  /* hostile spec texts */
  const char *body = text + 7; /* after "return " */
  char two[9000], loop[5000], other[4096];
  snprintf(other, sizeof other, "%s", body);
  char *nm = strstr(other, "qwen2.5-0.5b");
  if (nm) nm[11] = 'c';
  snprintf(two, sizeof two, "local t = {}\nt[1] = %st[2] = %sreturn t\n", body, other);
  P = base;
  P.text = two;
  f = forge(&P, &n);
  check(rejects(f, n, "holds 2 variants"), "spec text with two variants: %s", msg);
  free(f);
  snprintf(loop, sizeof loop, "while true do end\n%s", text);
  P.text = loop;
  double t0 = qgen_now_ms();
  f = forge(&P, &n);
  ok = rejects(f, n, "limit exceeded"); /* instructions, or time under valgrind */
  check(ok, "spec text that loops forever: stopped in %.0f ms: %s", qgen_now_ms() - t0, msg);
  free(f);
  P.text = "return string.rep('x', 1 << 30)";
  f = forge(&P, &n);
  check(rejects(f, n, "memory limit"), "spec text that allocates 1 GiB: %s", msg);
  free(f);
  P.text = "os.execute('touch /tmp/pwned') return nil";
  f = forge(&P, &n);
  check(rejects(f, n, "'os' is not available"), "spec text calling os.execute: %s", msg);
  free(f);
  big = malloc(QGEN_BUNDLE_MAX_SPEC + 2);
  memset(big, ' ', QGEN_BUNDLE_MAX_SPEC + 1);
  memcpy(big + QGEN_BUNDLE_MAX_SPEC - 1 - tl, text, (size_t)tl);
  big[QGEN_BUNDLE_MAX_SPEC - 1] = 0; /* S = the limit exactly */
  P.text = big;
  f = forge(&P, &n);
  ok = accepts(f, n, b);
  check(ok && spec_equal(&b->spec, &spec), "spec text of exactly %d bytes (padded): accepted%s%s", QGEN_BUNDLE_MAX_SPEC,
        ok ? "" : ": ", ok ? "" : msg);
  if (ok) qgen_bundle_free(b);
  free(f);
  big[QGEN_BUNDLE_MAX_SPEC - 1] = ' '; /* one more */
  big[QGEN_BUNDLE_MAX_SPEC] = 0;
  f = forge(&P, &n);
  check(rejects(f, n, "spec text of 65537 bytes"), "spec text one byte over the limit: %s", msg);
  free(f);
  free(big);
  P = base;
  P.version = "";
  f = forge(&P, &n);
  check(rejects(f, n, "version string of 1 bytes"), "empty qgen version string: %s", msg);
  free(f);

  /* all 16 entries (the spec loader knows only some archs: the archs check must fire) */
  P = base;
  P.n = 16;
  for (int i = 0; i < 16; i++) P.arch[i] = 80 + (uint32_t)i, P.kinds[i] = 3, P.blob[i] = a0, P.bsz[i] = s0, P.info[i] = &arts[0];
  f = forge(&P, &n);
  check(rejects(f, n, NULL), "16 entries with archs the spec does not list: %s", msg);
  free(f);
  (void)err;
  free(b);
  free(a0), free(a1);
}

static void test_garbage(void) {
  char p[4096], err[1024];
  const int N = quick ? 60 : 600;
  size_t bad = 0;
  static uint8_t buf[70000];
  for (int i = 0; i < N; i++) {
    size_t n = (size_t)(rnd() % (i % 3 == 2 ? sizeof buf : 2000));
    for (size_t k = 0; k < n; k++) buf[k] = (uint8_t)rnd();
    if (i % 3 >= 1 && n >= 8) memcpy(buf, "QGENBNDL", 8);          /* magic + garbage */
    if (i % 3 == 2 && n >= 64) memcpy(buf, bun, 64), qgen_wr64(buf + 16, n); /* a real header + garbage */
    if (!rejects(buf, n, NULL) && !bad++) printf("      case %d: %s\n", i, msg);
  }
  check(bad == 0, "%d random buffers (plain, magic + garbage, real header + garbage) rejected", N);

  /* random mutations of the header region, checksum recomputed: never a crash; what
     passes must be a consistent bundle */
  const size_t M = M_of(bun);
  const int R = quick ? 150 : 2000;
  int acc = 0, inconsistent = 0;
  uint8_t *c = malloc(bsize);
  qgen_bundle *b = malloc(sizeof *b);
  double t0 = qgen_now_ms();
  memcpy(c, bun, bsize);
  for (int i = 0; i < R; i++) {
    memcpy(c, bun, M);
    int k = 1 + (int)(rnd() % 4);
    for (int j = 0; j < k; j++) {
      size_t at = (size_t)(rnd() % (M - 32));
      switch (rnd() % 4) {
      case 0: c[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
      case 1: c[at] = (uint8_t)rnd(); break;
      case 2: c[at] = 0; break;
      default: c[at] = 0xff; break;
      }
    }
    if (M_of(c) != M) continue; /* a shifted layout: the checksum would land elsewhere */
    reseal(c, bsize);
    if (accepts(c, bsize, b)) {
      acc++;
      inconsistent += b->n < 1 || b->n > QGEN_MAX_ARCHS || b->spec.n_archs != b->n || !b->spec_text;
      qgen_bundle_free(b);
    }
  }
  check(inconsistent == 0, "%d random mutations of the header and table (resealed): %d accepted, all consistent (%.0f ms)", R,
        acc, qgen_now_ms() - t0);
  free(c);

  /* files that are not bundles */
  write_bytes(tpath(p, "empty.qgb"), "", 0);
  int rc = qgen_bundle_read(p, b, err, sizeof err);
  check(rc != 0 && strstr(err, p) && strstr(err, "empty file"), "empty file: %s", err);
  rc = qgen_bundle_read(tpath(p, "missing.qgb"), b, err, sizeof err);
  check(rc != 0 && strstr(err, "cannot open"), "missing file: %s", err);
  rc = qgen_bundle_read(root, b, err, sizeof err);
  check(rc != 0 && strstr(err, "not a regular file"), "a directory: %s", err);
  rc = qgen_bundle_read("/dev/zero", b, err, sizeof err);
  check(rc != 0 && strstr(err, "not a regular file"), "/dev/zero: %s", err);
  tpath(p, "fifo.qgb");
  rc = mkfifo(p, 0600) == 0 ? qgen_bundle_read(p, b, err, sizeof err) : 0;
  check(rc != 0 && strstr(err, "not a regular file") && !qgen_bundle_is(p), "a FIFO (no writer): rejected without blocking: %s", err);
  tpath(p, "huge.qgb");
  int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd >= 0) {
    if (write(fd, bun, 64) != 64 || ftruncate(fd, (off_t)(1ull << 30) + 1) != 0) /* sparse: no disk used */
      printf("      (could not make the 1 GiB file)\n");
    close(fd);
  }
  rc = qgen_bundle_read(p, b, err, sizeof err);
  check(rc != 0 && strstr(err, "more than a bundle may have"), "a 1 GiB + 1 file: refused before reading: %s", err);
  unlink(p);
  write_bytes(tpath(p, "text.qgb"), "hello, world\n", 13);
  rc = qgen_bundle_read(p, b, err, sizeof err);
  check(rc != 0 && strstr(err, "bad magic"), "a text file: %s", err);
  free(b);
}

static void test_no_nvrtc(const char *self) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("QGEN_NVRTC", "none", 1);
    execl(self, self, "--no-nvrtc", bpath, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  check(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "QGEN_NVRTC=none: the child's checks pass (exit %d)",
        WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--no-nvrtc")) return child_no_nvrtc(argv[2]);
  setenv("QGEN_QUIET", "1", 1);
  quick = getenv("QGEN_TEST_QUICK") && *getenv("QGEN_TEST_QUICK") && strcmp(getenv("QGEN_TEST_QUICK"), "0");
  const char *tmp = getenv("TMPDIR");
  qgen_fmt(root, sizeof root, "%s/qgen-test-bundle-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 2;
  }
  double t0 = qgen_now_ms();
  static char err[65536];
  static qgen_spec_set set;
  if (qgen_spec_load(SPEC_PATH, &set, err, sizeof err) != 0) {
    printf("FAIL: %s\n", err);
    return 1;
  }
  spec = set.v[0];
  int major, minor;
  if (qgen_nvrtc_version(&major, &minor, err, sizeof err) != 0) {
    printf("skip: %s\n", err);
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 77;
  }
  const char *cdir = getenv("QGEN_TEST_CACHE_DIR");
  char cpath[4096];
  qgen_cache *cache = qgen_cache_open(cdir && *cdir ? cdir : tpath(cpath, "cache"));
  int archs[2] = {80, 90};
  int rc = qgen_build(&spec, NULL, archs, 2, cache, arts, NULL, err, sizeof err);
  check(rc == 0 && arts[0].arch == 80 && arts[1].arch == 90 && arts[0].n_kernels == n_kernels(&spec),
        "qgen_build qwen2.5-0.5b for sm_80, sm_90 (%s, %.0f ms)%s%s", arts[0].cache_hit ? "cache" : "NVRTC",
        qgen_now_ms() - t0, rc ? ": " : "", rc ? err : "");
  qgen_cache_close(cache);
  if (rc != 0) return 1;
  tpath(bpath, "qwen2.5-0.5b.qgb");

  test_roundtrip();
  test_open();
  test_truncation();
  test_oversized();
  test_flips();
  test_forged();
  test_assembled();
  test_garbage();
  test_no_nvrtc(argv[0]);

  qgen_artifact_free(&arts[0]);
  qgen_artifact_free(&arts[1]);
  free(bun);
  nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  struct stat st;
  check(stat(root, &st) != 0, "temp directory removed");
  printf("%d passed, %d failed (%.1f s)\n", passed, failed, (qgen_now_ms() - t0) / 1e3);
  return failed ? 1 : 0;
}
