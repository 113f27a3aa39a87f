/* bundle.h — offline bundles (docs/DESIGN.md §5): one file holding one spec variant and its
 * compiled kernels for several archs, so a machine without NVRTC can open it.
 *
 * All integers are little-endian. Offsets are from the start of the file.
 *
 *   off       size     field
 *   0         8        magic "QGENBNDL"
 *   8         4        format version (QGEN_BUNDLE_VERSION = 2; other versions are refused)
 *   12        4        flags (0; any other value is refused)
 *   16        8        file size in bytes (<= QGEN_BUNDLE_MAX_SIZE, 1 GiB)
 *   24        4        N, entry count (1..QGEN_MAX_ARCHS)
 *   28        4        S, spec text bytes including its NUL (2..QGEN_BUNDLE_MAX_SPEC)
 *   32        4        V, qgen version bytes including its NUL (2..64)
 *   36        4        NVRTC major version the kernels were compiled with (0: unknown)
 *   40        4        NVRTC minor version
 *   44        20       reserved, zero
 *   64        S        spec text: qgen_spec_to_lua of the variant, NUL-terminated, no
 *                      other NUL; its archs list = the archs of the entries
 *   64+S      V        qgen version string ("0.1.0"), NUL-terminated, printable ASCII
 *   T=64+S+V  N x 464  the table, one entry per arch, ascending arch, no arch twice:
 *               +0   4    arch (compute capability x 10, 80..999)
 *               +4   4    kinds: bit 0 = cubin, bit 1 = PTX (this writer: 3, both)
 *               +8   8    payload offset
 *               +16  8    payload size (> 0)
 *               +24  8    cubin bytes in the payload (0 iff bit 0 is clear)
 *               +32  8    PTX bytes in the payload (0 iff bit 1 is clear)
 *               +40  4    K, kernel count (0..QGEN_MAX_KERNELS)
 *               +44  4    reserved, zero
 *               +48  32   SHA-256 of the payload
 *               +80  256  kernel names: QGEN_MAX_KERNELS x char[32], [A-Za-z0-9_]+,
 *                         NUL-padded; slots past K are all zero
 *               +336 128  the module the payload was compiled from (qgen_spec_uri's
 *                         QGEN_URI_MODULE name of its spec: every compile-time
 *                         parameter), printable ASCII,
 *                         NUL-padded; it must be the module of the bundle's spec text, so
 *                         a payload cannot run under another spec's shape
 *   T+464N    32       SHA-256 of bytes [0, T+464N): the header, strings and table
 *   M=T+464N+32        payloads, in table order, back to back: entry 0 starts at M, entry
 *                      i+1 where entry i ends, the last one ends at the file size (no
 *                      gaps, no overlaps, no trailing bytes)
 *
 * Payload = a serialized qgen_artifact (artifact.h; the same bytes a cache entry holds):
 *   "QGART\0\0\0", u32 version, u32 arch, u32 n_kernels,
 *   n_kernels x {char name[32]; i32 regs, spill_stores, spill_loads, stack, smem_static},
 *   u64 cubin bytes, cubin, u64 ptx bytes, ptx, u64 log bytes, log (ptxas' report)
 * One entry carries both the cubin and the PTX of its arch ("cubin+ptx"): the runtime loads
 * the cubin on a device of exactly that arch, else the PTX of the newest arch below it.
 * The payload's arch, sizes and kernel names must agree with its table entry.
 *
 * (For comparison, a cache entry file, cache.h: "QGENCACH", u32 format version, u32 flags,
 * key[32], u64 payload size, sha256(payload)[32], payload = the same serialized artifact.)
 *
 * Reading checks every field against the bytes actually present before using it: sizes
 * are capped before any allocation, offsets and sizes are compared without overflow,
 * strings must be NUL-terminated where the header says, the header checksum is verified
 * before the table is trusted, each payload's checksum before it is parsed, and the spec
 * text goes through the sandboxed spec loader. Every error is one line that starts with
 * the file's name, e.g. "x.qgb: truncated at byte 123 (the header, strings and table of
 * 2 entries need 899)" or "x.qgb: entry 1 (sm_90 cubin+ptx) checksum mismatch".
 */
#ifndef QGEN_BUNDLE_H
#define QGEN_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "jit/artifact.h"
#include "spec/spec.h"

#define QGEN_BUNDLE_VERSION 2
#define QGEN_BUNDLE_MAX_SIZE (1ull << 30) /* 1 GiB */
#define QGEN_BUNDLE_MAX_SPEC 65536
#define QGEN_BUNDLE_KIND_CUBIN 1u
#define QGEN_BUNDLE_KIND_PTX 2u

typedef struct qgen_bundle_entry {
  int arch;
  unsigned kinds;        /* QGEN_BUNDLE_KIND_* bits */
  uint64_t offset, size; /* of the payload in the file */
  uint8_t sha256[32];    /* of the payload (verified) */
} qgen_bundle_entry;

typedef struct qgen_bundle {
  qgen_spec spec;                /* the one variant */
  char *spec_text;               /* its canonical Lua text, NUL-terminated (malloc) */
  char qgen_version[64];         /* of the qgen that wrote the bundle */
  int nvrtc_major, nvrtc_minor;  /* 0.0 when unknown */
  uint64_t file_size;
  int n;                                 /* entries, ascending arch */
  qgen_bundle_entry entry[QGEN_MAX_ARCHS];
  qgen_artifact arts[QGEN_MAX_ARCHS];    /* arts[i] is the payload of entry[i] */
} qgen_bundle;

/* Serialize spec s with arts[0..n) (distinct archs, any order; n in 1..QGEN_MAX_ARCHS)
   into a fresh malloc buffer; the stored spec's archs become the artifacts' archs. The
   NVRTC version recorded is the one qgen_nvrtc_version reports (0.0 if unavailable).
   Returns NULL with a message on bad arguments or OOM. */
uint8_t *qgen_bundle_pack(const qgen_spec *s, const qgen_artifact *arts, int n, size_t *size, char *err,
                          size_t errlen);

/* qgen_bundle_pack written to path atomically (temp file + rename). Returns 0 or -1. */
int qgen_bundle_write(const char *path, const qgen_spec *s, const qgen_artifact *arts, int n, char *err,
                      size_t errlen);

/* Parse a bundle held in memory; name is used in messages. Returns 0 (b filled: free it
   with qgen_bundle_free), or -1 with a one-line message (b left empty). Never reads
   outside data[0..size). */
int qgen_bundle_parse(const char *name, const uint8_t *data, size_t size, qgen_bundle *b, char *err,
                      size_t errlen);

/* Read and parse the file at path (a regular file of at most QGEN_BUNDLE_MAX_SIZE). */
int qgen_bundle_read(const char *path, qgen_bundle *b, char *err, size_t errlen);

void qgen_bundle_free(qgen_bundle *b);

/* 1 if the file at path starts with the bundle magic, else 0 (also when unreadable). */
int qgen_bundle_is(const char *path);

/* "cubin+ptx", "cubin", "ptx" or "none" for a kinds value. */
const char *qgen_bundle_kinds_str(unsigned kinds);

#endif
