/* common.h — what the harness's parts (check, bench, eval) share: the exit codes their runs
 * return, the check of a qgen API call, and opening a spec's variant.
 *
 * Their API calls cannot fail in a correct program, so a failure is reported with the call
 * itself, the status and the context's last error, and ends the run.
 */
#ifndef QGEN_HARNESS_COMMON_H
#define QGEN_HARNESS_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "runtime/qgen.h"
#include "spec/spec.h"

/* The exit codes of every qgen command (qgen --help lists them); the harness's runs return
   them too, so a command passes them on unchanged. */
enum {
  QGEN_EXIT_OK = 0,
  QGEN_EXIT_USER = 1,     /* a bad spec, bundle or arguments; a failed check */
  QGEN_EXIT_INTERNAL = 2, /* an internal or toolchain error (NVRTC, CUDA) */
  QGEN_EXIT_WRITE = 3,    /* an output could not be written: stdout or a file (a full disk, a closed pipe) */
  QGEN_EXIT_NO_GPU = 77,  /* no GPU or no CUDA driver (check, bench, eval) */
};

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

/* The variants of the spec or bundle at path (a bundle holds one): 0, or -1 when it does
   not load (the command reports that as it opens it). */
int qgen_harness_spec_set(const char *path, qgen_spec_set *set);

/* qgen_open of path's variant o->variant, with spec sparse.v_tau set to v_tau when v_tau
   >= 0 (the variant written back as Lua with it: --v-tau of eval and bench). */
qgen_status qgen_harness_open(qgen_ctx **ctx, const char *path, const qgen_open_opts *o, double v_tau);

/* The exit code of a failed qgen_open: QGEN_EXIT_NO_GPU without a GPU, QGEN_EXIT_USER for a
   bad spec or bundle, QGEN_EXIT_INTERNAL otherwise. */
int qgen_harness_open_exit(qgen_status st);

/* Close f, a file an option named (path), after writing it: 0, or QGEN_EXIT_WRITE after
   "qgen: CMD: cannot write PATH: reason" when a write or the close failed. */
int qgen_harness_close_output(const char *cmd, FILE *f, const char *path);

#endif
