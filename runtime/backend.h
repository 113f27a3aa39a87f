/* backend.h — the backend table of libqgen: one row of functions per executor, the GPU
 * (gpu.c) and the CPU reference (cpu.c). qgen.c checks every argument and keeps the host
 * state every backend shares (sequence lengths, the page table's host copy), then calls
 * the row with no per-backend branch; a row may assume valid arguments, records its own
 * failures on the context (qgen_fail), and changes nothing when it fails before its work.
 */
#ifndef QGEN_BACKEND_H
#define QGEN_BACKEND_H

#include "jit/artifact.h"
#include "ref/ref.h"
#include "runtime/private.h"

struct CUevent_st;

struct qgen_backend_ops {
  const char *name;
  /* It runs the generated kernels: a bundle must come from this qgen version, and a
     bundle's default plan must be the one in use (no kernel-shaping QGEN_TUNE key). */
  int runs_kernels;
  /* Its caches' pools are in host memory (the CPU reference), not the device's. */
  int host_pools;
  /* The most query tokens one sequence may have in an attend (qgen_attend_multi). */
  int max_step_tokens;
  /* It attends within a window, and with sinks (qgen_attend_opts.window, .sinks). */
  int windows, sinks;
  /* Prepare c (spec, layout, plan and info set) from a bundle's artifacts (n_arts > 0) or
     by JIT; on failure it leaves nothing for close. */
  qgen_status (*open)(qgen_ctx *c, const qgen_open_opts *o, const qgen_artifact *arts, int n_arts);
  void (*close)(qgen_ctx *c);
  /* Take the memory of kv (sizes and the host page table are set); on failure
     cache_destroy frees what was taken. cache_destroy also takes a half-made kv. */
  qgen_status (*cache_create)(qgen_kv *kv);
  void (*cache_destroy)(qgen_kv *kv);
  /* Steps (qgen.h): no allocation, no host synchronisation. kv->len is still the length
     before the append. */
  qgen_status (*append)(qgen_kv *kv, const int *seq, int n_seq, const int *n_new, qgen_ptr k, qgen_ptr v,
                        qgen_stream s);
  /* One token for each listed sequence at the length the backend holds when it runs (not
     kv->len); a sequence at max_tokens keeps its length and counts the token as dropped. */
  qgen_status (*append_decode)(qgen_kv *kv, const int *seq, int n_seq, qgen_ptr k, qgen_ptr v, qgen_stream s);
  /* n_q[i] query rows for seq[i], at most max_step_tokens (n_q NULL: one each); x->window
     > 0 only where windows is set (dense), x->sinks only where sinks is. */
  qgen_status (*attend)(qgen_kv *kv, const int *seq, int n_seq, const int *n_q, const qgen_ref_step_opts *x, qgen_ptr q,
                        qgen_ptr out, const qgen_budget *b, qgen_stream s);
  qgen_status (*reset)(qgen_kv *kv, int seq);
  /* Remove the last n tokens of seq (0 < n <= kv->len[seq], the length before): the pages
     they were on cut back with qgen_ref_page_keep's rule, the length lowered. Synchronous. */
  qgen_status (*rollback)(qgen_kv *kv, int seq, int64_t n);
  /* Physical page dst becomes a copy of page src cut back to its first keep tokens
     (0 < keep < block; qgen_ref_page_keep's rule), 8-bit rows included (qgen_share_prefix).
     Synchronous. */
  qgen_status (*copy_page)(qgen_kv *kv, int64_t src, int64_t dst, int keep);
  /* Sequence seq's length where the steps read it becomes len. Synchronous. */
  qgen_status (*set_len)(qgen_kv *kv, int seq, int64_t len);
  /* A sparse view's bounds from the caller's K rows at slots (qgen_view_update). cache_create
     also takes views (kv->is_view): only the side memory, the pools are kv->view's. */
  qgen_status (*view_update)(qgen_kv *kv, qgen_ptr slots, int64_t n, int slot_bytes, qgen_stream s);
  /* Wait for the backend's work, copy out every sequence's length and the tokens
     append_decode dropped since the last sync ([max_seqs] each), and zero the latter. */
  qgen_status (*sync)(qgen_kv *kv, int32_t *len, int32_t *dropped);
  /* Introspection: copy array `which` (QGEN_KV_*) out; take sequence seq's new page map
     (before qgen.c writes the host copy); copy its last selection out. */
  qgen_status (*read)(qgen_kv *kv, int which, void *host, size_t bytes);
  qgen_status (*write_pages)(qgen_kv *kv, int seq, const int32_t *pages, int64_t n);
  qgen_status (*selection)(qgen_kv *kv, int seq, int32_t *lists, int32_t *counts);
  /* Benchmarks (qgen_ext.h): events to record between a step's kernels; the splits an
     attend of nb rows gets. */
  void (*set_marks)(qgen_ctx *c, struct CUevent_st **marks);
  int (*max_splits)(const qgen_ctx *c, int nb);
};

extern const qgen_backend_ops qgen_gpu_backend; /* gpu.c */
extern const qgen_backend_ops qgen_cpu_backend; /* cpu.c */

#endif
