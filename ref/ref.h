/* ref.h — the CPU reference of the decode path: plain C, double accumulation, the
 * semantics of layout.h spelled out as simply as possible. It is the oracle for every GPU
 * test and the CPU backend of the public API (qgen.h), and it is itself tested against a
 * naive fp64 softmax attention (tests/test_ref.c).
 *
 * All functions work on one sequence `seq` of a cache whose memory is `m` (host pointers)
 * and never touch other sequences. Inputs are in the layout's in_type.
 */
#ifndef QGEN_REF_H
#define QGEN_REF_H

#include "base/layout.h"

/* Scratch memory for append and step on one cache's sequences (up to max_tokens tokens
   each), in one block; NULL when it cannot be had, *bytes (if not NULL) then says how much
   was asked for. The CPU backend takes it at cache creation, so its steps never allocate;
   the functions below without `_in` take their own per call and abort when they cannot. */
typedef struct qgen_ref_scratch qgen_ref_scratch;
qgen_ref_scratch *qgen_ref_scratch_new(const qgen_layout *L, int64_t max_tokens, size_t *bytes);
void qgen_ref_scratch_free(qgen_ref_scratch *w);

/* Append n_new tokens to seq: k, v are [n_new][n_head_kv][head_dim] (in_type). Writes the
   rows in k_type/v_type with ggml's quantizers, updates the bounds (sparse layouts) and
   seq_len. The caller has checked capacity. */
void qgen_ref_append(const qgen_layout *L, qgen_kvmem *m, int seq, int64_t n_new,
                     const void *k, const void *v);
void qgen_ref_append_in(qgen_ref_scratch *w, const qgen_layout *L, qgen_kvmem *m, int seq,
                        int64_t n_new, const void *k, const void *v);

/* Quest scores of every page of seq for every KV head: scores[h * n + p], n = pages of
   seq. q is [n_head][head_dim] (in_type). Sparse layouts only. */
void qgen_ref_estimate(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                       double *scores);

/* Select the page list of one (sequence, KV head) from its n scores (layout.h rules).
   Writes the ascending list into list (room for n) and returns its length. scores may be
   NULL only in dense mode. */
int64_t qgen_ref_select(const qgen_budget *b, int64_t len, int block, const double *scores,
                        int32_t *list);

/* Attention of one query over seq restricted, per KV head h, to the logical pages
   lists[h][0..counts[h]) (lists == NULL: every page). q is [n_head][head_dim] (in_type).
   Writes out [n_head][head_dim] in out_type when out != NULL, and the exact result in
   out_f64 when it is not NULL. A sequence of length 0 gives zeros. */
void qgen_ref_attend(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                     const int32_t *const *lists, const int64_t *counts, void *out,
                     double *out_f64);

/* The decode step: estimate + select (sparse budgets) + attend. lists_out, if not NULL,
   receives n_head_kv * pages_per_seq entries (list of head h at h * pages_per_seq) and
   counts_out n_head_kv lengths. */
void qgen_ref_step(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                   const qgen_budget *b, void *out, double *out_f64, int32_t *lists_out,
                   int64_t *counts_out);
void qgen_ref_step_in(qgen_ref_scratch *w, const qgen_layout *L, const qgen_kvmem *m, int seq,
                      const void *q, const qgen_budget *b, void *out, double *out_f64,
                      int32_t *lists_out, int64_t *counts_out);

/* Dequantize the key (which = 0) or value (which = 1) row of token t of seq, KV head h,
   into head_dim doubles. */
void qgen_ref_row(const qgen_layout *L, const qgen_kvmem *m, int which, int seq, int64_t t,
                  int h, double *dst);

#endif
