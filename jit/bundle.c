/* bundle.c — see bundle.h for the byte layout. */
#define _GNU_SOURCE
#include "jit/bundle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jit/emit.h"
#include "jit/nvrtc.h"
#include "base/le.h"
#include "base/sha256.h"
#include "base/util.h"

static const char MAGIC[8] = {'Q', 'G', 'E', 'N', 'B', 'N', 'D', 'L'};

enum {
  HDR = 64,         /* fixed header */
  ENTRY = 464,      /* one table entry */
  NAME = 32,        /* one kernel name slot */
  E_NAMES = 80,     /* offset of the names in an entry */
  E_MODULE = 336,   /* offset of the module name in an entry */
  MODULE = 128,     /* its slot */
  VERSION_MAX = 64, /* V, qgen version bytes with the NUL */
};

static int all_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

/* A kernel name slot: [A-Za-z0-9_]+, NUL-terminated inside the slot, zero after the NUL.
   Returns NULL when fine, else what is wrong. */
static const char *bad_name(const uint8_t *slot) {
  size_t len = 0;
  while (len < NAME && slot[len]) len++;
  if (len == NAME) return "is not NUL-terminated";
  if (len == 0) return "is empty";
  for (size_t i = 0; i < len; i++) {
    uint8_t ch = slot[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_'))
      return "has a byte outside [A-Za-z0-9_]";
  }
  return all_zero(slot + len, NAME - len) ? NULL : "has bytes after its NUL";
}

const char *qgen_bundle_kinds_str(unsigned kinds) {
  switch (kinds) {
  case QGEN_BUNDLE_KIND_CUBIN | QGEN_BUNDLE_KIND_PTX: return "cubin+ptx";
  case QGEN_BUNDLE_KIND_CUBIN: return "cubin";
  case QGEN_BUNDLE_KIND_PTX: return "ptx";
  }
  return "none";
}

/* ---- writing ------------------------------------------------------------------------- */

uint8_t *qgen_bundle_pack(const qgen_spec *s, const qgen_artifact *arts, int n, size_t *size, char *err,
                          size_t errlen) {
  if (!s || !arts || !size || n < 1 || n > QGEN_MAX_ARCHS) {
    qgen_fmt(err, errlen, "bundle: need a spec and 1..%d artifacts (got %d)", QGEN_MAX_ARCHS, n);
    return NULL;
  }
  int ord[QGEN_MAX_ARCHS]; /* artifacts by ascending arch */
  for (int i = 0; i < n; i++) {
    int j = i;
    while (j > 0 && arts[ord[j - 1]].arch > arts[i].arch) {
      ord[j] = ord[j - 1];
      j--;
    }
    ord[j] = i;
  }
  for (int i = 0; i < n; i++) {
    const qgen_artifact *a = &arts[ord[i]];
    if (a->arch < 80 || a->arch > 999) {
      qgen_fmt(err, errlen, "bundle: artifact arch %d is outside sm_80..sm_999", a->arch);
      return NULL;
    }
    if (i > 0 && arts[ord[i - 1]].arch == a->arch) {
      qgen_fmt(err, errlen, "bundle: sm_%d is given twice", a->arch);
      return NULL;
    }
    if (a->n_kernels < 0 || a->n_kernels > QGEN_MAX_KERNELS || (!a->cubin_size && !a->ptx_size) ||
        (a->cubin_size && !a->cubin) || (a->ptx_size && !a->ptx) || (a->log_size && !a->log)) {
      qgen_fmt(err, errlen, "bundle: the sm_%d artifact is empty or malformed", a->arch);
      return NULL;
    }
    for (int k = 0; k < a->n_kernels; k++) {
      uint8_t slot[NAME] = {0};
      size_t len = strnlen(a->k[k].name, NAME);
      memcpy(slot, a->k[k].name, len);
      const char *why = bad_name(slot);
      if (why) {
        qgen_fmt(err, errlen, "bundle: the sm_%d artifact's kernel %d name %s", a->arch, k, why);
        return NULL;
      }
    }
  }

  /* The stored spec lists exactly the bundle's archs; it must load back. */
  qgen_spec sp = *s;
  sp.n_archs = n;
  for (int i = 0; i < n; i++) sp.archs[i] = arts[ord[i]].arch;
  char *text = malloc(QGEN_BUNDLE_MAX_SPEC);
  qgen_spec_set *set = malloc(sizeof *set);
  uint8_t *blob[QGEN_MAX_ARCHS] = {0}, *buf = NULL;
  size_t bsz[QGEN_MAX_ARCHS] = {0};
  char lerr[512];
  int tl = -1;
  if (!text || !set) {
    qgen_fmt(err, errlen, "bundle: out of memory");
    goto done;
  }
  tl = qgen_spec_to_lua(&sp, text, QGEN_BUNDLE_MAX_SPEC);
  if (tl <= 0) {
    qgen_fmt(err, errlen, "bundle: spec %s has no canonical text", s->name);
    goto done;
  }
  if (qgen_spec_load_string("bundle spec", text, (size_t)tl, set, lerr, sizeof lerr) != 0) {
    qgen_fmt(err, errlen, "bundle: spec %s does not load back from its canonical text: %s", s->name, lerr);
    goto done;
  }
  if (set->n != 1) {
    qgen_fmt(err, errlen, "bundle: the canonical text of spec %s holds %d variants", s->name, set->n);
    goto done;
  }
  char module[MODULE];
  qgen_spec_uri(&sp, QGEN_URI_MODULE, module, sizeof module);
  const char *ver = QGEN_VERSION;
  const size_t S = (size_t)tl + 1, V = strlen(ver) + 1;
  int major = 0, minor = 0;
  if (qgen_nvrtc_version(&major, &minor, lerr, sizeof lerr) != 0) major = minor = 0;

  const size_t T = HDR + S + V, M = T + (size_t)n * ENTRY + 32;
  uint64_t total = M;
  for (int i = 0; i < n; i++) {
    if (!(blob[i] = qgen_artifact_pack(&arts[ord[i]], &bsz[i]))) {
      qgen_fmt(err, errlen, "bundle: out of memory");
      goto done;
    }
    total += bsz[i];
  }
  if (total > QGEN_BUNDLE_MAX_SIZE) {
    qgen_fmt(err, errlen, "bundle: %llu bytes is more than the %llu a bundle may have", (unsigned long long)total,
             (unsigned long long)QGEN_BUNDLE_MAX_SIZE);
    goto done;
  }
  if (!(buf = calloc(1, (size_t)total))) {
    qgen_fmt(err, errlen, "bundle: out of memory for %llu bytes", (unsigned long long)total);
    goto done;
  }
  memcpy(buf, MAGIC, 8);
  qgen_wr32(buf + 8, QGEN_BUNDLE_VERSION);
  qgen_wr32(buf + 12, 0);
  qgen_wr64(buf + 16, total);
  qgen_wr32(buf + 24, (uint32_t)n);
  qgen_wr32(buf + 28, (uint32_t)S);
  qgen_wr32(buf + 32, (uint32_t)V);
  qgen_wr32(buf + 36, (uint32_t)major);
  qgen_wr32(buf + 40, (uint32_t)minor);
  memcpy(buf + HDR, text, S - 1);
  memcpy(buf + HDR + S, ver, V - 1);
  uint64_t off = M;
  for (int i = 0; i < n; i++) {
    const qgen_artifact *a = &arts[ord[i]];
    uint8_t *e = buf + T + (size_t)i * ENTRY;
    qgen_wr32(e, (uint32_t)a->arch);
    qgen_wr32(e + 4, (a->cubin_size ? QGEN_BUNDLE_KIND_CUBIN : 0) | (a->ptx_size ? QGEN_BUNDLE_KIND_PTX : 0));
    qgen_wr64(e + 8, off);
    qgen_wr64(e + 16, bsz[i]);
    qgen_wr64(e + 24, a->cubin_size);
    qgen_wr64(e + 32, a->ptx_size);
    qgen_wr32(e + 40, (uint32_t)a->n_kernels);
    qgen_sha256_buf(blob[i], bsz[i], e + 48);
    for (int k = 0; k < a->n_kernels; k++) memcpy(e + E_NAMES + k * NAME, a->k[k].name, strnlen(a->k[k].name, NAME));
    memcpy(e + E_MODULE, module, strlen(module));
    memcpy(buf + off, blob[i], bsz[i]);
    off += bsz[i];
  }
  qgen_sha256_buf(buf, M - 32, buf + M - 32);
  *size = (size_t)total;
done:
  for (int i = 0; i < n; i++) free(blob[i]);
  free(text);
  free(set);
  return buf;
}

int qgen_bundle_write(const char *path, const qgen_spec *s, const qgen_artifact *arts, int n, char *err,
                      size_t errlen) {
  size_t size = 0;
  uint8_t *buf = qgen_bundle_pack(s, arts, n, &size, err, errlen);
  if (!buf) return -1;
  int rc = qgen_write_atomic(path, buf, size, err, errlen);
  free(buf);
  return rc;
}

/* ---- reading ------------------------------------------------------------------------- */

void qgen_bundle_free(qgen_bundle *b) {
  if (!b) return;
  for (int i = 0; i < QGEN_MAX_ARCHS; i++) qgen_artifact_free(&b->arts[i]);
  free(b->spec_text);
  memset(b, 0, sizeof *b);
}

#define FAIL(...)                          \
  do {                                     \
    qgen_fmt(err, errlen, __VA_ARGS__);    \
    goto fail;                             \
  } while (0)

/* The fixed header, strings and table of a file of `size` bytes whose first `have` bytes
   are at p (at least the smaller of size and the header, strings and table the header
   declares): every check that needs only those bytes and the file's size, so a reader can
   refuse a file before reading the rest. 0 with *fsize_out, or -1 with the message in err. */
static int check_head(const char *name, const uint8_t *p, size_t have, uint64_t size, uint64_t *fsize_out, char *err,
                      size_t errlen) {
  typedef unsigned long long ull;
  if (size == 0) return qgen_fmt(err, errlen, "%s: empty file (not a qgen bundle)", name), -1;
  if (memcmp(p, MAGIC, have < 8 ? have : 8) != 0) return qgen_fmt(err, errlen, "%s: not a qgen bundle (bad magic)", name), -1;
  if (size < HDR) return qgen_fmt(err, errlen, "%s: truncated at byte %llu (the header needs %d)", name, (ull)size, HDR), -1;
  const uint32_t version = qgen_rd32(p + 8), flags = qgen_rd32(p + 12), n = qgen_rd32(p + 24), S = qgen_rd32(p + 28),
                 V = qgen_rd32(p + 32);
  const uint64_t fsize = qgen_rd64(p + 16);
  if (version != QGEN_BUNDLE_VERSION)
    return qgen_fmt(err, errlen, "%s: bundle format version %u; this qgen reads version %d (write the bundle again with "
                    "this qgen)", name, version, QGEN_BUNDLE_VERSION), -1;
  if (flags != 0) return qgen_fmt(err, errlen, "%s: unknown header flags 0x%x", name, flags), -1;
  if (fsize > QGEN_BUNDLE_MAX_SIZE)
    return qgen_fmt(err, errlen, "%s: the header gives a file size of %llu bytes (at most %llu)", name, (ull)fsize,
                    (ull)QGEN_BUNDLE_MAX_SIZE), -1;
  if (n < 1 || n > QGEN_MAX_ARCHS)
    return qgen_fmt(err, errlen, "%s: the header lists %u entries (1..%d)", name, n, QGEN_MAX_ARCHS), -1;
  if (S < 2 || S > QGEN_BUNDLE_MAX_SPEC)
    return qgen_fmt(err, errlen, "%s: spec text of %u bytes (2..%d)", name, S, QGEN_BUNDLE_MAX_SPEC), -1;
  if (V < 2 || V > VERSION_MAX) return qgen_fmt(err, errlen, "%s: qgen version string of %u bytes (2..%d)", name, V, VERSION_MAX), -1;
  if (!all_zero(p + 44, HDR - 44)) return qgen_fmt(err, errlen, "%s: reserved header bytes are not zero", name), -1;

  /* header + strings + table, then its checksum */
  const size_t M = HDR + (size_t)S + V + (size_t)n * ENTRY + 32;
  if (size < M)
    return qgen_fmt(err, errlen, "%s: truncated at byte %llu (the header, strings and table of %u entr%s need %zu)", name,
                    (ull)size, n, n == 1 ? "y" : "ies", M), -1;
  uint8_t sum[32];
  qgen_sha256_buf(p, M - 32, sum);
  if (memcmp(sum, p + M - 32, 32) != 0)
    return qgen_fmt(err, errlen, "%s: header checksum mismatch (the header or table is corrupt)", name), -1;
  if (fsize < M)
    return qgen_fmt(err, errlen, "%s: the header gives a file size of %llu bytes, less than its own %zu", name, (ull)fsize, M), -1;
  if (size < fsize)
    return qgen_fmt(err, errlen, "%s: truncated at byte %llu (the header says the file has %llu)", name, (ull)size, (ull)fsize), -1;
  if (size > fsize)
    return qgen_fmt(err, errlen, "%s: %llu trailing bytes after the %llu the header declares", name, (ull)(size - fsize),
                    (ull)fsize), -1;
  *fsize_out = fsize;
  return 0;
}

int qgen_bundle_parse(const char *name, const uint8_t *p, size_t size, qgen_bundle *b, char *err, size_t errlen) {
  typedef unsigned long long ull;
  qgen_spec_set *set = NULL;
  char aerr[256];
  if (!name) name = "bundle";
  if (!b) {
    qgen_fmt(err, errlen, "%s: no bundle to fill", name);
    return -1;
  }
  memset(b, 0, sizeof *b);
  if (!p && size) FAIL("%s: no data", name);
  uint64_t fsize;
  if (check_head(name, p, size, size, &fsize, err, errlen) != 0) goto fail;
  const uint32_t n = qgen_rd32(p + 24), S = qgen_rd32(p + 28), V = qgen_rd32(p + 32);
  const size_t T = HDR + (size_t)S + V, M = T + (size_t)n * ENTRY + 32;
  uint8_t sum[32];
  b->file_size = fsize;
  if (qgen_rd32(p + 36) > 999 || qgen_rd32(p + 40) > 999)
    FAIL("%s: NVRTC version %u.%u is not plausible", name, qgen_rd32(p + 36), qgen_rd32(p + 40));
  b->nvrtc_major = (int)qgen_rd32(p + 36);
  b->nvrtc_minor = (int)qgen_rd32(p + 40);

  /* strings */
  const char *text = (const char *)p + HDR, *ver = (const char *)p + HDR + S;
  if (text[S - 1] != 0) FAIL("%s: the spec text is not NUL-terminated", name);
  if (strlen(text) != S - 1) FAIL("%s: the spec text has a NUL at byte %zu of %u", name, strlen(text), S - 1);
  if (ver[V - 1] != 0) FAIL("%s: the qgen version string is not NUL-terminated", name);
  if (strlen(ver) != V - 1) FAIL("%s: the qgen version string has a NUL inside", name);
  for (const char *c = ver; *c; c++)
    if (*c < 0x20 || *c > 0x7e) FAIL("%s: the qgen version string has a non-printable byte", name);
  memcpy(b->qgen_version, ver, V);

  /* the table */
  uint64_t expect = M; /* where the next payload must start */
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *e = p + T + (size_t)i * ENTRY;
    qgen_bundle_entry *E = &b->entry[i];
    const uint32_t arch = qgen_rd32(e), kinds = qgen_rd32(e + 4), nk = qgen_rd32(e + 40);
    const uint64_t off = qgen_rd64(e + 8), len = qgen_rd64(e + 16), cub = qgen_rd64(e + 24), ptx = qgen_rd64(e + 32);
    if (arch < 80 || arch > 999) FAIL("%s: entry %u: arch %u is outside sm_80..sm_999", name, i, arch);
    if (i > 0 && arch <= (uint32_t)b->entry[i - 1].arch)
      FAIL("%s: entry %u (sm_%u) %s", name, i, arch,
           arch == (uint32_t)b->entry[i - 1].arch ? "repeats the arch of the entry before it" : "is out of ascending arch order");
    if (kinds == 0 || kinds > 3) FAIL("%s: entry %u (sm_%u): kind %u (1 cubin, 2 ptx, 3 both)", name, i, arch, kinds);
    if (nk > QGEN_MAX_KERNELS) FAIL("%s: entry %u (sm_%u): %u kernels (at most %d)", name, i, arch, nk, QGEN_MAX_KERNELS);
    if (qgen_rd32(e + 44) != 0) FAIL("%s: entry %u (sm_%u): reserved bytes are not zero", name, i, arch);
    for (uint32_t k = 0; k < QGEN_MAX_KERNELS; k++) {
      const uint8_t *slot = e + E_NAMES + k * NAME;
      const char *why = k < nk ? bad_name(slot) : all_zero(slot, NAME) ? NULL : "is not zero (past the kernel count)";
      if (why) FAIL("%s: entry %u (sm_%u): kernel name slot %u %s", name, i, arch, k, why);
    }
    const char *mod = (const char *)e + E_MODULE;
    const size_t ml = strnlen(mod, MODULE);
    if (ml == 0 || ml == MODULE || !all_zero(e + E_MODULE + ml, MODULE - ml))
      FAIL("%s: entry %u (sm_%u): the module name is %s", name, i, arch, ml == 0 ? "empty" : ml == MODULE ? "not NUL-terminated" : "followed by bytes after its NUL");
    for (size_t k = 0; k < ml; k++)
      if (mod[k] < 0x21 || mod[k] > 0x7e) FAIL("%s: entry %u (sm_%u): the module name has a non-printable byte", name, i, arch);
    if (len == 0) FAIL("%s: entry %u (sm_%u): empty payload", name, i, arch);
    if (off < M) FAIL("%s: entry %u (sm_%u): payload offset %llu points into the header (payloads start at %zu)", name, i, arch, (ull)off, M);
    if (off > fsize || len > fsize - off)
      FAIL("%s: entry %u (sm_%u): payload of %llu bytes at offset %llu runs past the end of the %llu-byte file", name, i, arch,
           (ull)len, (ull)off, (ull)fsize);
    if (off < expect) FAIL("%s: entry %u (sm_%u): payload at bytes %llu..%llu overlaps entry %u's", name, i, arch, (ull)off,
                           (ull)(off + len), i - 1);
    if (off > expect) FAIL("%s: entry %u (sm_%u): %llu unaccounted bytes before its payload", name, i, arch, (ull)(off - expect));
    if ((cub != 0) != ((kinds & QGEN_BUNDLE_KIND_CUBIN) != 0) || (ptx != 0) != ((kinds & QGEN_BUNDLE_KIND_PTX) != 0) ||
        cub >= len || ptx >= len - cub)
      FAIL("%s: entry %u (sm_%u %s): cubin %llu and ptx %llu bytes do not fit its kind and its %llu-byte payload", name, i, arch,
           qgen_bundle_kinds_str(kinds), (ull)cub, (ull)ptx, (ull)len);
    E->arch = (int)arch;
    E->kinds = kinds;
    E->offset = off;
    E->size = len;
    memcpy(E->sha256, e + 48, 32);
    expect = off + len;
  }
  if (expect != fsize) FAIL("%s: %llu unaccounted bytes after the last payload", name, (ull)(fsize - expect));
  b->n = (int)n;

  /* the spec: the sandboxed loader, one variant, archs = the entries' */
  if (!(set = malloc(sizeof *set)) || !(b->spec_text = malloc(S))) FAIL("%s: out of memory", name);
  memcpy(b->spec_text, text, S);
  if (qgen_spec_load_string(name, text, S - 1, set, err, errlen) != 0) goto fail;
  if (set->n != 1) FAIL("%s: the spec text holds %d variants (a bundle holds one)", name, set->n);
  b->spec = set->v[0];
  int same = b->spec.n_archs == (int)n;
  for (uint32_t i = 0; same && i < n; i++) same = b->spec.archs[i] == b->entry[i].arch;
  if (!same) FAIL("%s: the spec's archs differ from the archs of the bundle's entries", name);
  char module[MODULE];
  qgen_spec_uri(&b->spec, QGEN_URI_MODULE, module, sizeof module);
  for (uint32_t i = 0; i < n; i++) {
    const char *mod = (const char *)p + T + (size_t)i * ENTRY + E_MODULE;
    if (strcmp(mod, module) != 0)
      FAIL("%s: entry %u (sm_%d) was compiled for module %s, but the bundle's spec %s is module %s (not this spec's kernels)",
           name, i, b->entry[i].arch, mod, b->spec.name, module);
  }

  /* payloads: checksum, then parse, then agree with the table */
  for (uint32_t i = 0; i < n; i++) {
    const qgen_bundle_entry *E = &b->entry[i];
    const uint8_t *e = p + T + (size_t)i * ENTRY;
    qgen_artifact *a = &b->arts[i];
    const char *ks = qgen_bundle_kinds_str(E->kinds);
    qgen_sha256_buf(p + E->offset, (size_t)E->size, sum);
    if (memcmp(sum, E->sha256, 32) != 0) FAIL("%s: entry %u (sm_%d %s) checksum mismatch", name, i, E->arch, ks);
    if (qgen_artifact_unpack(p + E->offset, (size_t)E->size, a, aerr, sizeof aerr) != 0)
      FAIL("%s: entry %u (sm_%d %s): %s", name, i, E->arch, ks, aerr);
    if (a->arch != E->arch) FAIL("%s: entry %u (sm_%d %s): its payload is for sm_%d", name, i, E->arch, ks, a->arch);
    if (a->cubin_size != qgen_rd64(e + 24) || a->ptx_size != qgen_rd64(e + 32))
      FAIL("%s: entry %u (sm_%d %s): the table says cubin %llu / ptx %llu bytes, the payload has %zu / %zu", name, i, E->arch,
           ks, (ull)qgen_rd64(e + 24), (ull)qgen_rd64(e + 32), a->cubin_size, a->ptx_size);
    if ((uint32_t)a->n_kernels != qgen_rd32(e + 40))
      FAIL("%s: entry %u (sm_%d %s): the table lists %u kernels, the payload %d", name, i, E->arch, ks, qgen_rd32(e + 40),
           a->n_kernels);
    for (int k = 0; k < a->n_kernels; k++)
      if (strcmp(a->k[k].name, (const char *)e + E_NAMES + k * NAME) != 0)
        FAIL("%s: entry %u (sm_%d %s): kernel %d is '%s' in the table but has another name in the payload", name, i,
             E->arch, ks, k, (const char *)e + E_NAMES + k * NAME); /* the table name is checked; the payload's is not */
    a->cache_hit = 1;
  }
  free(set);
  return 0;
fail:
  free(set);
  qgen_bundle_free(b);
  return -1;
}

/* Read from fd until buf holds `upto` bytes (*got of them so far) or the file ends. */
static int read_upto(int fd, uint8_t *buf, size_t *got, size_t upto) {
  while (*got < upto) {
    ssize_t r = read(fd, buf + *got, upto - *got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    *got += (size_t)r;
  }
  return 0;
}

int qgen_bundle_read(const char *path, qgen_bundle *b, char *err, size_t errlen) {
  if (b) memset(b, 0, sizeof *b);
  if (!path) {
    qgen_fmt(err, errlen, "bundle: no path");
    return -1;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block us */
  if (fd < 0) {
    qgen_fmt(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    qgen_fmt(err, errlen, "%s: not a regular file", path);
    return -1;
  }
  if ((unsigned long long)st.st_size > QGEN_BUNDLE_MAX_SIZE) {
    close(fd);
    qgen_fmt(err, errlen, "%s: %lld bytes is more than a bundle may have (%llu)", path, (long long)st.st_size,
             (unsigned long long)QGEN_BUNDLE_MAX_SIZE);
    return -1;
  }
  /* The header, strings and table first (about 72 KiB at most): a file whose size is not
     the one its header declares is refused before the rest is read. */
  const size_t want = (size_t)st.st_size, head = HDR + QGEN_BUNDLE_MAX_SPEC + VERSION_MAX + (size_t)QGEN_MAX_ARCHS * ENTRY + 32,
               first = want < head ? want : head;
  size_t got = 0;
  uint8_t *buf = malloc(first ? first : 1);
  int rc = -1;
  if (!buf) {
    qgen_fmt(err, errlen, "%s: out of memory for %zu bytes", path, first);
    goto done;
  }
  if (read_upto(fd, buf, &got, first) != 0) goto read_error;
  if (got == first && got < want) { /* more to come, and the file did not shrink meanwhile */
    uint64_t fsize;
    if (check_head(path, buf, got, want, &fsize, err, errlen) != 0) goto done;
    uint8_t *all = realloc(buf, want);
    if (!all) {
      qgen_fmt(err, errlen, "%s: out of memory for %zu bytes", path, want);
      goto done;
    }
    buf = all;
    if (read_upto(fd, buf, &got, want) != 0) goto read_error;
  }
  /* a file that shrank meanwhile parses as what is there (it says truncated) */
  rc = qgen_bundle_parse(path, buf, got, b, err, errlen);
  goto done;
read_error:
  qgen_fmt(err, errlen, "%s: read error: %s", path, strerror(errno));
done:
  close(fd);
  free(buf);
  return rc;
}

int qgen_bundle_is(const char *path) {
  if (!path) return 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  struct stat st;
  uint8_t head[8];
  int is = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read(fd, head, 8) == 8 && memcmp(head, MAGIC, 8) == 0;
  close(fd);
  return is;
}
