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

#include <pthread.h>

typedef struct qgen_backend_ops qgen_backend_ops;

/* The longest message qgen_error gives. */
#define QGEN_ERR_MAX 8192

/* One thread's last message on a context (error.c). A slot is found by pthread_t, which
   the system hands out again once a thread has ended; owner, a number no two threads of
   the process ever share, tells the slot's writer apart from a later thread with its id. */
typedef struct qgen_err_slot {
  struct qgen_err_slot *next;
  pthread_t thread;
  unsigned long long owner;
  char msg[QGEN_ERR_MAX];
} qgen_err_slot;

struct qgen_ctx {
  qgen_spec spec;
  qgen_layout L;
  qgen_tune tune; /* QGEN_TUNE, parsed once at open */
  int emulate;    /* QGEN_EMULATE's architecture (sm * 10 + minor), parsed once at open; 0: none */
  qgen_plan P;    /* the GPU backend's, for the architecture its kernels were planned for */
  qgen_backend backend;
  const qgen_backend_ops *be; /* the backend's row; NULL in a context that failed to open */
  qgen_info info;
  /* messages, one per thread that saw a failure (threads attend on their own caches at
     once); the list is guarded by err_lock, a slot is written only by its thread */
  pthread_mutex_t err_lock;
  qgen_err_slot *errs;
  void *impl; /* the backend's state (gpu.c: its module and device) */
  /* The device's memory in bytes, set by the GPU backend's open (0: unknown, or no
     device): qgen_cache_create refuses at once pools that cannot fit in it. */
  unsigned long long device_bytes;
  /* Every cache and view made on the context and not yet destroyed (a list through
     qgen_kv.prev/next, guarded by kv_lock): qgen_close releases their memory, and a closed
     context is freed with the last of them (closed). */
  pthread_mutex_t kv_lock;
  qgen_kv *kvs;
  int closed;
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
  unsigned char *selected; /* a sequence has a sparse selection since its last reset (QGEN_ATTEND_REUSE) */
  int32_t *sync_buf;
  qgen_kvmem host; /* page_table: the host copy (every backend); the rest: the CPU backend's cache */
  int is_view;          /* qgen_view_open: the pools, page table and lengths are view's */
  qgen_view_desc view;
  void *impl;      /* the backend's state (gpu.c: device memory; cpu.c: selections, scratch) */
  /* A physical page a live sequence may write is mapped by no other live sequence (appends
     to one would overwrite the other); the pages of a shared prefix (qgen_share_prefix) are
     whole pages below every sharer's length, written by none. A sequence is live from its
     first append (or its share of a prefix) until its reset: live[s], and page_refs[p] = the
     live sequences whose page table rows hold page p. A sequence that took a shared prefix
     keeps the entries it gave up, saved[s * pps + i] for i < n_shared[s], and gets them back
     when it is reset (owned caches; a view's pages are the caller's). */
  unsigned char *live;
  int32_t *page_refs, *saved;
  int64_t *n_shared;
  qgen_kv *prev, *next; /* the context's list of caches (qgen_ctx.kvs) */
  int released;         /* its context was closed: its memory is gone, only qgen_cache_destroy remains */
};

/* The API call that creates kv, for the backends' messages. */
static inline const char *qgen_kv_api(const qgen_kv *kv) { return kv->is_view ? "qgen_view_open" : "qgen_cache_create"; }
/* The cache keeps 8-bit rows: sparse.bounds = "i8", pages of the spec's block (a view's
   pages of half a block keep only f16 bounds, which estimate merges by pairs). */
static inline int qgen_kv_has_i8(const qgen_kv *kv) {
  return kv->ctx->L.bounds_i8 && (!kv->is_view || kv->view.page_size == kv->ctx->L.block);
}

/* Record a message on ctx (if not NULL) for the calling thread and return st (error.c). */
qgen_status qgen_fail(qgen_ctx *ctx, qgen_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The calling thread's message buffer on ctx (QGEN_ERR_MAX bytes), for functions that
   write their own message; a scratch buffer when no slot can be allocated. */
char *qgen_errbuf(qgen_ctx *ctx);
/* Set up and free a context's messages (qgen_open, qgen_close). */
void qgen_errs_init(qgen_ctx *ctx);
void qgen_errs_free(qgen_ctx *ctx);

#endif
