/* private.h — libqgen's private state, shared by the API layer (qgen.c), the backend table
 * (backend.h) and its rows (gpu.c, cpu.c). Not installed; tools and tests reach what they
 * need through runtime/qgen_ext.h.
 */
#ifndef QGEN_PRIVATE_H
#define QGEN_PRIVATE_H

#include "spec/spec.h"
#include "base/layout.h"
#include "base/plan.h"
#include "runtime/qgen.h"

typedef struct qgen_backend_ops qgen_backend_ops;

struct qgen_ctx {
  qgen_spec spec;
  qgen_layout L;
  qgen_tune tune; /* QGEN_TUNE, parsed once at open */
  qgen_plan P;
  qgen_backend backend;
  const qgen_backend_ops *be; /* the backend's row; NULL in a context that failed to open */
  qgen_info info;
  char err[8192];
  void *impl; /* the backend's state (gpu.c: its module and device) */
};

struct qgen_kv {
  qgen_ctx *ctx;
  int max_seqs;
  int64_t max_tokens, pps, n_pages;
  int64_t *len;    /* host mirror of the sequence lengths */
  /* qgen_append_decode was called (or captured): the lengths advance where the backend
     runs, behind the host's back when a graph replays, so every use of len reads them
     again first (qgen.c, refresh). dropped: its tokens not yet reported by qgen_sync;
     sync_buf: the backend's copy of lengths and drops, [2][max_seqs]. */
  int device_len;
  int64_t *dropped;
  int32_t *sync_buf;
  qgen_kvmem host; /* page_table: the host copy (every backend); the rest: the CPU backend's cache */
  void *impl;      /* the backend's state (gpu.c: device memory; cpu.c: selections, scratch) */
};

/* Record a message on ctx (if not NULL) and return st (error.c). */
qgen_status qgen_fail(qgen_ctx *ctx, qgen_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
