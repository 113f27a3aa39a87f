/* error.c — statuses and messages: the words of a status, and the message of a context's
 * last failure, which the API layer and every backend record with qgen_fail.
 */
#include <stdarg.h>
#include <stdio.h>

#include "runtime/private.h"
#include "runtime/qgen_ext.h"

qgen_status qgen_fail(qgen_ctx *ctx, qgen_status st, const char *fmt, ...) {
  if (ctx) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
  }
  return st;
}

const char *qgen_status_str(qgen_status s) {
  switch (s) {
  case QGEN_OK: return "ok";
  case QGEN_ERR_INVALID_ARG: return "invalid argument";
  case QGEN_ERR_CAPACITY: return "sequence capacity exceeded";
  case QGEN_ERR_SPEC: return "bad spec";
  case QGEN_ERR_COMPILE: return "kernel compilation failed";
  case QGEN_ERR_NO_DRIVER: return "no CUDA driver";
  case QGEN_ERR_NO_DEVICE: return "no CUDA device";
  case QGEN_ERR_UNSUPPORTED: return "unsupported";
  case QGEN_ERR_OUT_OF_MEMORY: return "out of memory";
  case QGEN_ERR_CUDA: return "CUDA error";
  case QGEN_ERR_BUNDLE: return "bad bundle";
  case QGEN_ERR_IO: return "I/O error";
  }
  return "unknown status";
}

const char *qgen_error(const qgen_ctx *ctx) { return ctx ? ctx->err : "no context"; }

void qgen_ext_clear_error(qgen_ctx *ctx) {
  if (ctx) ctx->err[0] = 0;
}
