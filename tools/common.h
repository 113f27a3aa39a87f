/* common.h — what the GPU tools (check, bench, eval) share: the check of a qgen API call.
 *
 * Their API calls cannot fail in a correct program, so a failure is reported with the call
 * itself, the status and the context's last error, and ends the run.
 */
#ifndef QGEN_TOOLS_COMMON_H
#define QGEN_TOOLS_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "runtime/qgen.h"

/* Run `call`; when it does not return QGEN_OK, run `fail` (a statement that exits or returns)
   with `why` in scope: "call: status (the last error of ctx)". */
#define QGEN_API_CHECK(ctx, call, fail)                                                    \
  do {                                                                                     \
    const qgen_status s_ = (call);                                                         \
    if (s_ != QGEN_OK) {                                                                   \
      char why[4096];                                                                      \
      snprintf(why, sizeof why, "%s: %s (%s)", #call, qgen_status_str(s_), qgen_error(ctx)); \
      fail;                                                                                \
    }                                                                                      \
  } while (0)

/* `fail` for a command that stops: "qgen CMD: why" on stderr, exit 2. */
#define QGEN_API_FATAL(cmd) (fprintf(stderr, "qgen %s: %s\n", cmd, why), exit(2))

#endif
