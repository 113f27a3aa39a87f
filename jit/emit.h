/* emit.h — expand the CUDA templates into one translation unit for a spec.
 *
 * The unit is a block of generated #defines (the spec's shape, its types as device traits
 * structs, the launch plan of base/plan.c) followed by the templates, each introduced
 * by a #line directive so compiler messages point into templates/. Templates come from the
 * copy embedded at build time, or from $QGEN_TEMPLATE_DIR when it is set (development).
 * A dense spec gets no estimate/select kernels and no bounds code.
 */
#ifndef QGEN_EMIT_H
#define QGEN_EMIT_H

#include <stddef.h>

#include "spec/spec.h"

/* The kernels a spec's unit defines (NULL-terminated list of extern "C" names). */
const char *const *qgen_kernel_names(const qgen_spec *s);

/* The translation unit as a fresh NUL-terminated malloc string (length in *len), or NULL
   with a message in err (a template missing from QGEN_TEMPLATE_DIR, OOM). */
char *qgen_emit_source(const qgen_spec *s, size_t *len, char *err, size_t errlen);

#endif
