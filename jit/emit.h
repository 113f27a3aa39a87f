/* emit.h — expand the CUDA templates into one translation unit for a spec.
 *
 * The unit is a block of generated #defines (the spec's shape, its types as device traits
 * structs, the launch plan of base/plan.c), then base/kargs.h and base/qblocks.h (the
 * structs, lists and quant block layouts the host shares with the kernels), then the
 * templates of templates/LIST, each introduced by a #line directive so compiler messages
 * point into templates/. Templates come from the copy embedded at build time, or from
 * $QGEN_TEMPLATE_DIR when it is set (development).
 * A dense spec gets no estimate/select kernels and no bounds code.
 */
#ifndef QGEN_EMIT_H
#define QGEN_EMIT_H

#include <stddef.h>

#include "base/plan.h"
#include "spec/spec.h"

/* The kernels a spec's unit defines (NULL-terminated list of extern "C" names); merge_kernel:
   its plan sets merge_rows, so qg_combine follows qg_attend. */
const char *const *qgen_kernel_names(const qgen_spec *s, int merge_kernel);

/* The translation unit planned for architecture A (its shared-memory limits size the
   plan; base/arch.h) under the plan overrides tune (NULL: none) as a fresh NUL-terminated
   malloc string (length in *len), or NULL with a message in err (the spec does not fit A,
   a template missing from QGEN_TEMPLATE_DIR, OOM). Architectures of the same limits get the
   same unit. */
char *qgen_emit_source(const qgen_spec *s, const qgen_arch *A, const qgen_tune *tune, size_t *len, char *err, size_t errlen);

#endif
