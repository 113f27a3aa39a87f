/* error.c — statuses and messages: the words of a status, and the message of a context's
 * last failure, which the API layer and every backend record with qgen_fail. Each thread
 * has its own message on a context, so threads that share one (each on its own cache)
 * neither race on it nor read each other's.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/private.h"
#include "runtime/qgen_ext.h"

void qgen_errs_init(qgen_ctx *ctx) { pthread_mutex_init(&ctx->err_lock, NULL); }

void qgen_errs_free(qgen_ctx *ctx) {
  for (qgen_err_slot *e = ctx->errs, *next; e; e = next) {
    next = e->next;
    free(e);
  }
  ctx->errs = NULL;
  pthread_mutex_destroy(&ctx->err_lock);
}

/* This thread's number: given on first use from a process-wide counter, so, unlike its
   pthread_t, never the number of a thread that has ended. */
static unsigned long long thread_number(void) {
  static unsigned long long next;
  static _Thread_local unsigned long long mine;
  if (!mine) mine = __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
  return mine;
}

/* The calling thread's slot, made if `make` and missing; NULL if none. A slot left by an
   ended thread whose pthread_t this one now has is taken over empty: its message was
   that thread's. */
static qgen_err_slot *slot_of(const qgen_ctx *ctx, int make) {
  qgen_ctx *c = (qgen_ctx *)ctx; /* the lock and the list are not the context's value */
  const pthread_t me = pthread_self();
  const unsigned long long num = thread_number();
  pthread_mutex_lock(&c->err_lock);
  qgen_err_slot *e = c->errs;
  while (e && !pthread_equal(e->thread, me)) e = e->next;
  if (e && e->owner != num) {
    e->owner = num;
    e->msg[0] = 0;
  }
  if (!e && make && (e = malloc(sizeof *e))) {
    e->thread = me;
    e->owner = num;
    e->msg[0] = 0;
    e->next = c->errs;
    c->errs = e;
  }
  pthread_mutex_unlock(&c->err_lock);
  return e;
}

char *qgen_errbuf(qgen_ctx *ctx) {
  static _Thread_local char scratch[QGEN_ERR_MAX];
  qgen_err_slot *e = slot_of(ctx, 1);
  return e ? e->msg : scratch;
}

qgen_status qgen_fail(qgen_ctx *ctx, qgen_status st, const char *fmt, ...) {
  if (ctx) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qgen_errbuf(ctx), QGEN_ERR_MAX, fmt, ap);
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

const char *qgen_error(const qgen_ctx *ctx) {
  if (!ctx) return "no context";
  const qgen_err_slot *e = slot_of(ctx, 0);
  return e ? e->msg : "";
}

void qgen_ext_clear_error(qgen_ctx *ctx) {
  qgen_err_slot *e = ctx ? slot_of(ctx, 0) : NULL;
  if (e) e->msg[0] = 0;
}
