/* nvrtc.h — compile an emitted unit to cubin (+ PTX) with NVRTC, loaded lazily.
 *
 * libnvrtc is opened with dlopen on first use, so qgen and libqgen start (and open bundles)
 * where NVRTC is not installed. Search: $QGEN_NVRTC (a path, or a name for the loader),
 * $CUDA_HOME/lib64, $CUDA_PATH/lib64, the toolkit qgen was built against, then the loader's
 * own path.
 * A QGEN_NVRTC that cannot be loaded (missing, not a library, not NVRTC) is an error
 * naming it: no other NVRTC is used instead.
 * QGEN_NVRTC=none (exactly) never loads NVRTC: every call fails as if it were absent.
 * NVRTC needs the toolkit's include directory for cuda_fp16.h/cuda_bf16.h: $CUDA_HOME,
 * $CUDA_PATH, then the build-time toolkit. ptxas reports registers, spills, stack and
 * shared memory per kernel; they are parsed from its log.
 */
#ifndef QGEN_NVRTC_H
#define QGEN_NVRTC_H

#include <stddef.h>

#include "jit/artifact.h"

/* NVRTC's version, or -1 with a message when it cannot be loaded. */
int qgen_nvrtc_version(int *major, int *minor, char *err, size_t errlen);

/* The file the NVRTC in use was loaded from, or NULL when it cannot be loaded. */
const char *qgen_nvrtc_path(void);

/* Architectures NVRTC can target (compute capability * 10 + minor, e.g. 90); returns the
   count written, or -1 when NVRTC is unavailable. */
int qgen_nvrtc_archs(int *archs, int max);

/* The compile options used for arch (for cache keys): writes them space-separated. */
void qgen_nvrtc_options(int arch, char *buf, size_t n);

/* Compile src for sm_<arch>: fills a->arch, cubin, ptx, kernel infos and log. On failure
   returns -1 and err holds NVRTC's log with the offending source lines numbered; when
   $QGEN_DUMP_SOURCE names a directory, the unit is also written there as <name>.cu and
   the message's first line says "source written to PATH". */
int qgen_nvrtc_compile(const char *src, const char *name, int arch, const char *const *kernels,
                       qgen_artifact *a, char *err, size_t errlen);

#endif
