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
   rows in k_type/v_type with ggml's quantizers, updates the bounds (sparse layouts), the
   sketch (m->sketch, a layout with sketch_page_bytes: the QGEN_SKETCH_TYPE form of each
   stored K row) and seq_len. The caller has checked capacity. */
void qgen_ref_append(const qgen_layout *L, qgen_kvmem *m, int seq, int64_t n_new,
                     const void *k, const void *v);
void qgen_ref_append_in(qgen_ref_scratch *w, const qgen_layout *L, qgen_kvmem *m, int seq,
                        int64_t n_new, const void *k, const void *v);

/* A view's bounds (m->page_size > 0) after the caller wrote the K rows at slots[0..n)
   (4- or 8-byte signed integers, slot = page * page_size + offset; negative or past the
   pool: skipped): a page whose offset-0 slot is listed starts empty, then every listed
   row's keys (dequantized from k_type) min/max-merge into its page's bounds, rounded
   outward to f16, as append's do. */
void qgen_ref_view_update_in(qgen_ref_scratch *w, const qgen_layout *L, qgen_kvmem *m,
                             const void *slots, int slot_bytes, int64_t n);

/* One physical page of an owned cache cut back to its first r tokens (0 <= r <= block; a
   rollback, qgen_rollback): the rows of slots [r, block) of every KV head are zeroed in
   k_page, v_page and sketch_page (NULL: no sketch pool), as in a cache that never held them,
   and bnd_page (NULL: a dense layout), the page's [n_head_kv][2][head_dim] f16 bounds, is
   made again from the stored keys of slots [0, r): decoded (times k_scale for an fp8 K),
   rounded outward to f16, NaN keys ignored; all zero when r = 0. Append's bounds come from
   the input keys, so these are the same bytes when K holds its inputs exactly (an f16 K
   fed f16 keys, a bf16 K fed bf16 keys); otherwise they are the tightest f16 bounds of the
   keys attention reads (which input-key bounds of a lossy K need not contain), and never
   the bounds of a removed key.
   x: head_dim floats of scratch. The 8-bit rows are a function of these bounds
   (qgen_ref_bounds_i8_row). */
void qgen_ref_page_keep(const qgen_layout *L, float k_scale, int r, uint8_t *k_page, uint8_t *v_page,
                        uint8_t *sketch_page, uint16_t *bnd_page, float *x);

/* Physical page dst of an owned cache becomes a copy of page src cut back to its first keep
   tokens (qgen_ref_page_keep): a shared prefix's last, partial page (qgen_share_prefix). */
void qgen_ref_copy_page_in(qgen_ref_scratch *w, const qgen_layout *L, qgen_kvmem *m, int64_t src, int64_t dst, int keep);

/* Remove the last n tokens of seq (0 <= n <= its length; the caller checked) of an owned
   cache: qgen_ref_page_keep on every page that held one of them, then seq_len -= n. */
void qgen_ref_rollback_in(qgen_ref_scratch *w, const qgen_layout *L, qgen_kvmem *m, int seq, int64_t n);

/* Quest scores of every page of seq for every KV head: scores[h * n + p], n = pages of
   seq. q is [n_head][head_dim] (in_type). Sparse layouts only. */
void qgen_ref_estimate(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                       double *scores);

/* Select the page list of one (sequence, KV head) from its n scores (layout.h rules).
   Writes the ascending list into list (room for n) and returns its length. scores may be
   NULL only in dense mode. */
int64_t qgen_ref_select(const qgen_budget *b, int64_t len, int block, const double *scores,
                        int32_t *list);

/* Two-stage selection (sparse.rescore), stage 2: the exact page scores of KV head h from a compact
   copy of K. For every page p of seq with want[p] (want NULL: every page), scores[p] = max
   over the group's query heads g and the page's tokens t of q_g·k_t (unscaled, double, d
   increasing), k_t the cache's own K row when k_type is a quant block type (q8_0, q4_0,
   q5_0: no extra memory), else the q4_0 round trip of the cache's row (the sketch an f16,
   bf16 or f32 cache would keep beside it). Other entries are left alone. q is
   [n_head][head_dim] (in_type). */
void qgen_ref_sketch_scores(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                            int h, const uint8_t *want, double *scores);

/* Two-stage selection of one (sequence, KV head): the forced pages as in qgen_ref_select;
   stage 1 keeps the C = r * K best non-forced pages by the Quest bound `bound` (K = the
   budget's non-forced count K_eff - |forced|; C capped at the non-forced pages); stage 3
   keeps the K best of those by `exact` (qgen_ref_sketch_scores; read only at the
   candidates). Both rankings: NaN first, then larger scores, ties to the lower page. Writes
   the ascending list into list (room for n) and returns its length. r = 1 is
   qgen_ref_select's list; a budget covering the context lists every page. r >= 1. */
int64_t qgen_ref_select_rescore(const qgen_budget *b, int64_t len, int block, int r,
                                const double *bound, const double *exact, int32_t *list);

/* Mass-adaptive two-stage selection (sparse.rescore.top_p) of one (sequence, KV head): the forced
   pages, plus qgen_ref_select_rescore's C candidates in its stage-3 order kept best first
   (NaN ones always) until their estimated softmax mass reaches p of that of all C, at most
   the budget's K: the fewest candidates that hold p of the mass the candidates can reach
   (the forced pages are read anyway, and the sink's huge single logit would otherwise make
   them seem to hold everything). Estimator of a page's mass: its token count times
   exp(scale * exact) — every token at the page's exact max logit: only a page max per KV
   head is at hand (the group's heads already folded into it); the count makes a partial
   last page weigh less. p >= 1 (and a budget covering the context) is
   qgen_ref_select_rescore's list; a larger p never gives a shorter list. Ascending list
   into list (room for n), returns its length. */
int64_t qgen_ref_select_top_p(const qgen_budget *b, int64_t len, int block, int r, double p,
                              double scale, const double *bound, const double *exact, int32_t *list);

/* 8-bit page bounds (sparse.bounds = "i8") of one (page, KV head), from its f16 bounds bnd (kmin at
   [0, D), kmax at [D, 2D)): so[0] = offset, so[1] = scale (f16), codes[d] = kmin code,
   codes[D + d] = kmax code, with offset + code * scale (exact in double) <= kmin_d for the
   kmin codes and >= kmax_d for the kmax codes: the bounds only widen, so the Quest score
   over them stays a true upper bound. offset = the smallest kmin, scale = the range / 255
   rounded up. Returns 0, or -1 when a bound is not finite (an empty channel, or a key f16
   cannot hold): such a page has no 8-bit form and its score is NaN (always attended). */
int qgen_ref_bounds_i8(const uint16_t *bnd, int D, uint16_t so[2], uint8_t *codes);

/* The decoded 8-bit bounds: lo[d] = offset + codes[d] * scale, hi[d] = offset + codes[D + d]
   * scale. */
void qgen_ref_bounds_i8_decode(const uint16_t so[2], const uint8_t *codes, int D, double *lo,
                               double *hi);

/* The 8-bit bounds row of base/layout.h (2D + 16 bytes) of one (page, KV head) from its f16
   bounds bnd: what append writes into the bounds_i8 pool (the GPU's must be these bytes). */
void qgen_ref_bounds_i8_row(const uint16_t *bnd, int D, uint8_t *row);

/* qgen_ref_estimate over the 8-bit form of the cache's bounds (qgen_ref_bounds_i8; NaN for
   a page without one); a view of half-block pages has none: qgen_ref_estimate's scores. */
void qgen_ref_estimate_i8(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                          double *scores);

/* Attention of one query over seq restricted, per KV head h, to the logical pages
   lists[h][0..counts[h]) (lists == NULL: every page). q is [n_head][head_dim] (in_type).
   Writes out [n_head][head_dim] in out_type when out != NULL, and the exact result in
   out_f64 when it is not NULL. A sequence of length 0 gives zeros. */
void qgen_ref_attend(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                     const int32_t *const *lists, const int64_t *counts, void *out,
                     double *out_f64);

/* Sparse-V (L->v_tau > 0): the order in which the online softmax meets a list's 16-token
   sub-tiles, which decides what is skipped (templates/attend.cu): the list of n pages is cut
   into ns = min(max_splits, ceil(n / max(1, min_split_tokens / block))) (at least 1) shares
   [n*s/ns, n*(s+1)/ns), each walked sub-tile by sub-tile, sub-tile j of a share by token
   group j % groups, each group with its own running max per query head; a sub-tile's V is
   left out of a 16-head m-tile's output when every weight exp(s - running max) of those
   heads (the heads of the group in it) is below v_tau; the denominator keeps them. The
   plain entry points use {1, 1, 1}: one online softmax in list order. */
typedef struct qgen_ref_order {
  int max_splits, min_split_tokens, groups;
} qgen_ref_order;

/* qgen_ref_attend in the order ord (NULL: {1, 1, 1}). */
void qgen_ref_attend_order(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                           const int32_t *const *lists, const int64_t *counts,
                           const qgen_ref_order *ord, void *out, double *out_f64);

/* A reused selection brought to a sequence of len tokens (QGEN_BUDGET_REUSE): of the
   ascending list of count logical pages, entries at or past its pages are dropped, then
   every page after the last entry (from 0 if none is left) is appended, at most max_pages
   in all. Returns the new count. */
int64_t qgen_ref_extend_list(int32_t *list, int64_t count, int64_t len, int block, int64_t max_pages);

/* The decode step: estimate (over the 8-bit bounds when L->bounds_i8) + select (sparse
   budgets; two-stage, qgen_ref_select_rescore's list, when the layout's rescore > 1) +
   attend. lists_out, if not NULL,
   receives n_head_kv * pages_per_seq entries (list of head h at h * pages_per_seq) and
   counts_out n_head_kv lengths. With b->mode QGEN_BUDGET_REUSE they are also the input:
   the last selection, extended in place (qgen_ref_extend_list) and attended, with no
   estimate or select. */
void qgen_ref_step(const qgen_layout *L, const qgen_kvmem *m, int seq, const void *q,
                   const qgen_budget *b, void *out, double *out_f64, int32_t *lists_out,
                   int64_t *counts_out);
void qgen_ref_step_in(qgen_ref_scratch *w, const qgen_layout *L, const qgen_kvmem *m, int seq,
                      const void *q, const qgen_budget *b, void *out, double *out_f64,
                      int32_t *lists_out, int64_t *counts_out);

/* A step of nq query tokens of seq (q, out: [nq][n_head][head_dim]), the last nq tokens it
   holds (a speculative verify step: the draft tokens appended first). One selection for all
   of them per KV head, as qgen_ref_step's with a page's score (the Quest bound, and the
   exact score of a two-stage layout) the max over the step's tokens as well as the group's
   heads, and the forced pages of the whole length; then token j attends over it causally:
   the listed tokens among the first len - (nq - 1 - j), with so (NULL: none of these):
   window > 0 (a sliding-window layer): of those, only the last window tokens, itself
   included; sinks (gpt-oss's learned attention sinks): one logit a query head, a softmax
   term in each head's denominator that weighs no value. Both need the layout's v_tau 0.
   nq = 1 and so NULL is qgen_ref_step. */
typedef struct qgen_ref_step_opts {
  int64_t window;      /* 0: every token */
  const float *sinks;  /* [n_head], or NULL */
} qgen_ref_step_opts;
void qgen_ref_step_tokens_in(qgen_ref_scratch *w, const qgen_layout *L, const qgen_kvmem *m, int seq, int nq,
                             const qgen_ref_step_opts *so, const void *q, const qgen_budget *b, void *out,
                             double *out_f64, int32_t *lists_out, int64_t *counts_out);

/* Dequantize the key (which = 0) or value (which = 1) row of token t of seq, KV head h,
   into head_dim doubles. */
void qgen_ref_row(const qgen_layout *L, const qgen_kvmem *m, int which, int seq, int64_t t,
                  int h, double *dst);

#endif
