/* cpu.c — the CPU reference executor, a row of the backend table (backend.h): the cache in
 * host memory with the GPU's layout (kv->host), every step by the reference kernels
 * (ref/ref.h). Pointers are host addresses; streams are ignored. All memory, the steps'
 * scratch included, is taken at cache creation, so a step never allocates. With 8-bit
 * bounds the reference step estimates over them (qgen_ref_step), and the 8-bit rows, a
 * pure function of the f16 bounds, are made when read rather than kept.
 */
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "runtime/backend.h"

typedef struct cpu_kv {
  qgen_ref_scratch *w;
  int32_t *sel_lists;  /* the last selection [max_seqs][n_head_kv][pps] (sparse specs) */
  int64_t *sel_counts; /* [max_seqs][n_head_kv] */
  int32_t *dropped;    /* [max_seqs]: append_decode's tokens of full sequences since the last sync */
} cpu_kv;

/* The reference needs nothing beyond the spec, layout and plan qgen.c sets. */
static qgen_status cpu_open(qgen_ctx *c, const qgen_open_opts *o, const qgen_artifact *arts, int n_arts) {
  return QGEN_OK;
}

static void cpu_close(qgen_ctx *c) {}

static void cpu_cache_destroy(qgen_kv *kv) {
  cpu_kv *ck = kv->impl;
  if (!kv->is_view) { /* a view's pools and lengths are the caller's */
    free(kv->host.k);
    free(kv->host.v);
    free(kv->host.seq_len);
  }
  free(kv->host.bounds);
  free(kv->host.sketch);
  if (!kv->is_view) kv->host.k = kv->host.v = NULL, kv->host.seq_len = NULL;
  kv->host.bounds = NULL;
  kv->host.sketch = NULL;
  if (ck) {
    qgen_ref_scratch_free(ck->w);
    free(ck->sel_lists);
    free(ck->sel_counts);
    free(ck->dropped);
    free(ck);
  }
  kv->impl = NULL;
}

static qgen_status cpu_cache_create(qgen_kv *kv) {
  qgen_ctx *c = kv->ctx;
  const qgen_layout *L = &c->L;
  cpu_kv *ck = calloc(1, sizeof *ck);
  if (!ck) return qgen_fail(c, QGEN_ERR_OUT_OF_MEMORY, "%s: out of host memory", qgen_kv_api(kv));
  kv->impl = ck;
  const size_t n = (size_t)kv->n_pages, sel = L->sparse ? (size_t)kv->max_seqs * L->n_head_kv : 0;
  if (kv->is_view) { /* the caller's host memory, read in place */
    const qgen_view_desc *d = &kv->view;
    qgen_kvmem *m = &kv->host;
    m->k = (uint8_t *)(uintptr_t)d->k;
    m->v = (uint8_t *)(uintptr_t)d->v;
    m->page_table = (int32_t *)(uintptr_t)d->block_table;
    m->seq_len = (int32_t *)(uintptr_t)d->seq_lens;
    m->page_size = d->page_size;
    m->pt_stride = d->block_table_stride;
    const long long ks[3] = {d->k_page_stride, d->k_token_stride, d->k_head_stride},
                    vs[3] = {d->v_page_stride, d->v_token_stride, d->v_head_stride};
    for (int i = 0; i < 3; i++) m->k_stride[i] = ks[i], m->v_stride[i] = vs[i];
  } else {
    kv->host.k = calloc(n, L->k_page_bytes);
    kv->host.v = calloc(n, L->v_page_bytes);
    kv->host.seq_len = calloc((size_t)kv->max_seqs, sizeof(int32_t));
  }
  if (L->sparse) kv->host.bounds = calloc(n, L->bounds_page_bytes);
  if (L->sketch_page_bytes) kv->host.sketch = calloc(n, L->sketch_page_bytes);
  if (L->sparse) ck->sel_lists = calloc(sel * (size_t)kv->pps, sizeof(int32_t));
  if (L->sparse) ck->sel_counts = calloc(sel, sizeof(int64_t));
  ck->dropped = calloc((size_t)kv->max_seqs, sizeof(int32_t));
  if (!kv->host.k || !kv->host.v || !kv->host.seq_len || !ck->dropped || (L->sparse && (!kv->host.bounds || !ck->sel_lists || !ck->sel_counts)) ||
      (L->sketch_page_bytes && !kv->host.sketch))
    return qgen_fail(c, QGEN_ERR_OUT_OF_MEMORY, "%s: out of host memory for %lld pages (%zu bytes each)",
                     qgen_kv_api(kv), (long long)kv->n_pages,
                     (kv->is_view ? 0 : L->k_page_bytes + L->v_page_bytes) + L->bounds_page_bytes + L->sketch_page_bytes);
  size_t bytes = 0;
  if (!(ck->w = qgen_ref_scratch_new(L, kv->max_tokens, &bytes)))
    return qgen_fail(c, QGEN_ERR_OUT_OF_MEMORY,
                     "%s: out of host memory for the reference's scratch (%zu bytes for sequences of %lld tokens)",
                     qgen_kv_api(kv), bytes, (long long)kv->max_tokens);
  return QGEN_OK;
}

/* n tokens to sequence seq from rows r0.. of k and v */
static void put(qgen_kv *kv, int seq, int n, qgen_ptr k, qgen_ptr v, int64_t r0) {
  const qgen_layout *L = &kv->ctx->L;
  const size_t row = (size_t)L->n_head_kv * L->in_row_bytes;
  qgen_ref_append_in(((cpu_kv *)kv->impl)->w, L, &kv->host, seq, n, (const uint8_t *)(uintptr_t)k + r0 * row,
                     (const uint8_t *)(uintptr_t)v + r0 * row);
}

static qgen_status cpu_append(qgen_kv *kv, const int *seq, int n_seq, const int *n_new, qgen_ptr k, qgen_ptr v,
                              qgen_stream s) {
  int64_t r0 = 0;
  for (int i = 0; i < n_seq; i++) {
    put(kv, seq[i], n_new[i], k, v, r0);
    r0 += n_new[i];
  }
  return QGEN_OK;
}

/* The cache's own lengths are the ones the steps run at: this backend is synchronous. */
static qgen_status cpu_append_decode(qgen_kv *kv, const int *seq, int n_seq, qgen_ptr k, qgen_ptr v, qgen_stream s) {
  cpu_kv *ck = kv->impl;
  for (int i = 0; i < n_seq; i++) {
    if (kv->host.seq_len[seq[i]] < kv->max_tokens) put(kv, seq[i], 1, k, v, i);
    else ck->dropped[seq[i]]++;
  }
  return QGEN_OK;
}

/* A view's lengths and block table entries in range (qgen.h): the GPU kernels cannot check
   them, but here they are host memory, and outside it the reference would read past the
   pool or its scratch. */
static qgen_status check_view(qgen_kv *kv, const int *seq, int n_seq) {
  const qgen_kvmem *m = &kv->host;
  for (int i = 0; i < n_seq; i++) {
    const int64_t len = m->seq_len[seq[i]];
    if (len < 0 || len > kv->max_tokens)
      return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "qgen_attend: seq_lens[%d] = %lld is outside [0, max_blocks * page_size = %lld]",
                       seq[i], (long long)len, (long long)kv->max_tokens);
    const int32_t *bt = m->page_table + (int64_t)seq[i] * m->pt_stride;
    for (int64_t e = 0; e < (len + m->page_size - 1) / m->page_size; e++)
      if (bt[e] < 0 || bt[e] >= kv->n_pages)
        return qgen_fail(kv->ctx, QGEN_ERR_INVALID_ARG, "qgen_attend: block_table[%d][%lld] = %d (a page of seq_lens[%d] = %lld tokens) is outside [0, n_pages = %lld)",
                         seq[i], (long long)e, bt[e], seq[i], (long long)len, (long long)kv->n_pages);
  }
  return QGEN_OK;
}

static qgen_status cpu_attend(qgen_kv *kv, const int *seq, int n_seq, const int *n_q, const qgen_ref_step_opts *x,
                              qgen_ptr q, qgen_ptr out, const qgen_budget *b, qgen_stream s) {
  const qgen_layout *L = &kv->ctx->L;
  cpu_kv *ck = kv->impl;
  qgen_status st = kv->is_view ? check_view(kv, seq, n_seq) : QGEN_OK;
  if (st != QGEN_OK) return st;
  for (int i = 0, row = 0; i < n_seq; i++) {
    const int nq = n_q ? n_q[i] : 1;
    int32_t *lists = b->mode ? ck->sel_lists + (int64_t)seq[i] * L->n_head_kv * kv->pps : NULL;
    int64_t *counts = b->mode ? ck->sel_counts + (int64_t)seq[i] * L->n_head_kv : NULL;
    qgen_ref_step_tokens_in(ck->w, L, &kv->host, seq[i], nq, x, (const uint8_t *)(uintptr_t)q + (size_t)row * L->q_bytes, b,
                            (uint8_t *)(uintptr_t)out + (size_t)row * L->out_bytes, NULL, lists, counts);
    row += nq;
  }
  return QGEN_OK;
}

static qgen_status cpu_view_update(qgen_kv *kv, qgen_ptr slots, int64_t n, int slot_bytes, qgen_stream s) {
  qgen_ref_view_update_in(((cpu_kv *)kv->impl)->w, &kv->ctx->L, &kv->host, (const void *)(uintptr_t)slots, slot_bytes, n);
  return QGEN_OK;
}

static qgen_status cpu_reset(qgen_kv *kv, int seq) {
  kv->host.seq_len[seq] = 0;
  cpu_kv *ck = kv->impl;
  const int64_t nkv = kv->ctx->L.n_head_kv;
  if (ck->sel_counts) { /* its last selection goes with its tokens */
    memset(ck->sel_lists + seq * nkv * kv->pps, 0, (size_t)(nkv * kv->pps) * sizeof *ck->sel_lists);
    memset(ck->sel_counts + seq * nkv, 0, (size_t)nkv * sizeof *ck->sel_counts);
  }
  return QGEN_OK;
}

static qgen_status cpu_rollback(qgen_kv *kv, int seq, int64_t n) {
  qgen_ref_rollback_in(((cpu_kv *)kv->impl)->w, &kv->ctx->L, &kv->host, seq, n);
  return QGEN_OK;
}

static qgen_status cpu_copy_page(qgen_kv *kv, int64_t src, int64_t dst, int keep) {
  qgen_ref_copy_page_in(((cpu_kv *)kv->impl)->w, &kv->ctx->L, &kv->host, src, dst, keep);
  return QGEN_OK;
}

static qgen_status cpu_set_len(qgen_kv *kv, int seq, int64_t len) {
  kv->host.seq_len[seq] = (int32_t)len;
  return QGEN_OK;
}

static qgen_status cpu_sync(qgen_kv *kv, int32_t *len, int32_t *dropped) {
  cpu_kv *ck = kv->impl;
  const size_t n = (size_t)kv->max_seqs * sizeof(int32_t);
  memcpy(len, kv->host.seq_len, n);
  memcpy(dropped, ck->dropped, n);
  memset(ck->dropped, 0, n);
  return QGEN_OK;
}

static qgen_status cpu_read(qgen_kv *kv, int which, void *host, size_t bytes) {
  const qgen_layout *L = &kv->ctx->L;
  if (which == QGEN_KV_BOUNDS_I8) {
    const size_t D = (size_t)L->head_dim;
    for (size_t r = 0; r < bytes / L->bounds_i8_row_bytes; r++)
      qgen_ref_bounds_i8_row(kv->host.bounds + r * 2 * D, L->head_dim, (uint8_t *)host + r * L->bounds_i8_row_bytes);
    return QGEN_OK;
  }
  const void *src = which == QGEN_KV_K ? (const void *)kv->host.k
                    : which == QGEN_KV_V ? (const void *)kv->host.v
                    : which == QGEN_KV_BOUNDS ? (const void *)kv->host.bounds
                    : which == QGEN_KV_PAGE_TABLE ? (const void *)kv->host.page_table
                    : which == QGEN_KV_SKETCH ? (const void *)kv->host.sketch
                    : (const void *)kv->host.seq_len;
  memcpy(host, src, bytes);
  return QGEN_OK;
}

/* The host page table qgen.c writes is this backend's own: nothing more to do. */
static qgen_status cpu_write_pages(qgen_kv *kv, int seq, const int32_t *pages, int64_t n) { return QGEN_OK; }

static qgen_status cpu_selection(qgen_kv *kv, int seq, int32_t *lists, int32_t *counts) {
  const int nkv = kv->ctx->L.n_head_kv;
  const cpu_kv *ck = kv->impl;
  const int64_t n = (int64_t)nkv * kv->pps;
  memcpy(lists, ck->sel_lists + (int64_t)seq * n, (size_t)n * sizeof *lists);
  for (int h = 0; h < nkv; h++) counts[h] = (int)ck->sel_counts[(int64_t)seq * nkv + h];
  return QGEN_OK;
}

static void cpu_set_marks(qgen_ctx *c, struct CUevent_st **marks) {} /* no kernels to mark */

static int cpu_max_splits(const qgen_ctx *c, int nb) { return 1; } /* a row is attended in one piece */

const qgen_backend_ops qgen_cpu_backend = {
    .name = "cpu",
    .runs_kernels = 0,
    .host_pools = 1,
    .max_step_tokens = QGEN_MAX_STEP_TOKENS,
    .windows = 1,
    .sinks = 1,
    .open = cpu_open,
    .close = cpu_close,
    .cache_create = cpu_cache_create,
    .cache_destroy = cpu_cache_destroy,
    .append = cpu_append,
    .append_decode = cpu_append_decode,
    .attend = cpu_attend,
    .reset = cpu_reset,
    .rollback = cpu_rollback,
    .copy_page = cpu_copy_page,
    .set_len = cpu_set_len,
    .view_update = cpu_view_update,
    .sync = cpu_sync,
    .read = cpu_read,
    .write_pages = cpu_write_pages,
    .selection = cpu_selection,
    .set_marks = cpu_set_marks,
    .max_splits = cpu_max_splits,
};
