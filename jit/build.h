/* build.h — from a spec to loaded-ready artifacts: emit (one unit per arch, planned for
 * its limits), hash, look up the cache, compile with NVRTC on a miss (the archs of one spec
 * in parallel threads), check the kernels fit, store.
 *
 * Cache key = SHA-256 over {cache format, qgen version, artifact version, emitted source,
 * NVRTC version, options}; the entry name is "<spec uri>_sm<arch>".
 */
#ifndef QGEN_BUILD_H
#define QGEN_BUILD_H

#include "base/plan.h"
#include "jit/artifact.h"
#include "jit/cache.h"
#include "spec/spec.h"

/* The cache key of the emitted unit src compiled for sm_<arch> by qgen version
   qgen_version with NVRTC nvrtc_major.nvrtc_minor: SHA-256 over {cache format, qgen
   version, artifact version, NVRTC version, compile options of arch, src}. qgen_build uses
   it with this build's QGEN_VERSION and the loaded NVRTC's version, so an entry written by
   another qgen or another NVRTC is a miss. */
void qgen_build_key(const char *src, int arch, const char *qgen_version, int nvrtc_major, int nvrtc_minor,
                    uint8_t key[32]);

/* Build spec under the plan overrides tune (NULL: none) for each of archs[0..n) into
   out[0..n), each unit planned for its own arch's limits (base/arch.h) (cache may be NULL:
   no cache). Every kernel's static + dynamic shared memory is checked against its arch's
   per-CTA limit: a spec that does not fit is an error naming the kernel, the bytes and
   the limit. Returns 0, or -1 with a message (err should hold 64 KiB: it may carry
   NVRTC's log). srcs_out, if not NULL, receives the n emitted units (caller frees each). */
int qgen_build(const qgen_spec *s, const qgen_tune *tune, const int *archs, int n, qgen_cache *cache,
               qgen_artifact *out, char **srcs_out, char *err, size_t errlen);

/* The same for one unit planned for architecture plan_arch and compiled for sm_<code_arch>:
   how the runtime emulates a smaller architecture on a larger GPU (QGEN_EMULATE). Its cache
   entry is named "<uri>_sm<code>_plan<plan>". */
int qgen_build_emulated(const qgen_spec *s, const qgen_tune *tune, int plan_arch, int code_arch, qgen_cache *cache,
                        qgen_artifact *out, char *err, size_t errlen);

#endif
