/* artifact.h — what one compile produces: cubin + PTX for one (spec, arch), with ptxas'
 * resource report per kernel. Serialized (little-endian, bounds-checked on read) as the
 * payload of cache entries and of bundle records:
 *   "QGART\0\0\0", u32 version, u32 arch, u32 n_kernels,
 *   n_kernels x {char name[32]; i32 regs, spill_stores, spill_loads, stack, smem_static},
 *   u64 cubin bytes, cubin, u64 ptx bytes, ptx, u64 log bytes, log
 */
#ifndef QGEN_ARTIFACT_H
#define QGEN_ARTIFACT_H

#include <stddef.h>
#include <stdint.h>

#define QGEN_ARTIFACT_VERSION 1
#define QGEN_MAX_KERNELS 8

typedef struct qgen_kernel_info {
  char name[32];
  int regs, spill_stores, spill_loads, stack, smem_static;
} qgen_kernel_info;

typedef struct qgen_artifact {
  int arch;
  int n_kernels;
  qgen_kernel_info k[QGEN_MAX_KERNELS];
  uint8_t *cubin;
  size_t cubin_size;
  char *ptx; /* NUL-terminated */
  size_t ptx_size;
  char *log; /* ptxas' report, NUL-terminated */
  size_t log_size;
  /* not serialized: how this process got it */
  double ms;
  int cache_hit;
} qgen_artifact;

void qgen_artifact_free(qgen_artifact *a);
/* Serialize into a fresh malloc buffer; NULL on OOM. */
uint8_t *qgen_artifact_pack(const qgen_artifact *a, size_t *size);
/* Parse; returns 0, or -1 with a message for any malformed input (never reads past size):
   a bad magic or version, more than QGEN_MAX_KERNELS kernels, a kernel name whose 32 bytes
   hold no terminating NUL, a length past the end, or trailing bytes. Whatever it accepts,
   qgen_artifact_pack gives back byte for byte. */
int qgen_artifact_unpack(const uint8_t *p, size_t size, qgen_artifact *a, char *err, size_t errlen);
/* The info of kernel name, or NULL. */
const qgen_kernel_info *qgen_artifact_kernel(const qgen_artifact *a, const char *name);

#endif
