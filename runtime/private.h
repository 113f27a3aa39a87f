/* private.h — libqgen's private state, shared by the API layer (qgen.c), the GPU executor
 * (gpu.c) and the tools built on them (check.c, bench). Not installed.
 */
#ifndef QGEN_INTERNAL_H
#define QGEN_INTERNAL_H

#include "jit/artifact.h"
#include "spec/spec.h"
#include "base/layout.h"
#include "base/plan.h"
#include "runtime/qgen.h"

typedef struct gpu_ctx gpu_ctx;
typedef struct gpu_kv gpu_kv;

struct qgen_ctx {
  qgen_spec spec;
  qgen_layout L;
  qgen_plan P;
  qgen_backend backend;
  qgen_info info;
  char err[8192];
  gpu_ctx *gpu;
};

struct qgen_kv {
  qgen_ctx *ctx;
  int max_seqs;
  int64_t max_tokens, pps, n_pages;
  int64_t *len;    /* host mirror of the sequence lengths */
  qgen_kvmem host; /* CPU backend: the cache itself */
  int32_t *sel_lists; /* CPU backend: last selection [max_seqs][n_head_kv][pps] */
  int64_t *sel_counts;
  gpu_kv *gpu;
};

/* Record a message on ctx and return st. */
qgen_status qgen_fail(qgen_ctx *ctx, qgen_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* GPU executor (gpu.c). open takes the artifacts of a bundle (n > 0) or JIT-builds. */
qgen_status qgen_gpu_open(qgen_ctx *c, const qgen_open_opts *o, const qgen_artifact *arts, int n_arts);
void qgen_gpu_close(qgen_ctx *c);
qgen_status qgen_gpu_cache_create(qgen_kv *kv);
void qgen_gpu_cache_destroy(qgen_kv *kv);
qgen_status qgen_gpu_append(qgen_kv *kv, const int *seq, int n_seq, const int *n_new, qgen_ptr k, qgen_ptr v,
                            qgen_stream s);
qgen_status qgen_gpu_attend(qgen_kv *kv, const int *seq, int n_seq, qgen_ptr q, qgen_ptr out,
                            const qgen_budget *b, qgen_stream s);
qgen_status qgen_gpu_reset(qgen_kv *kv, int seq);
qgen_status qgen_gpu_read(qgen_kv *kv, int which, void *host, size_t bytes);
qgen_status qgen_gpu_write_pages(qgen_kv *kv, int seq, const int32_t *pages, int64_t n);
qgen_status qgen_gpu_selection(qgen_kv *kv, int seq, int32_t *lists, int32_t *counts);

/* Benchmarks: record marks[0] before select and marks[1] before attend in every step
   (NULL stops it); the splits a batch of nb rows gets. */
struct CUevent_st;
void qgen_gpu_set_marks(qgen_ctx *c, struct CUevent_st **marks);
int qgen_gpu_max_splits(const qgen_ctx *c, int nb);

#endif
