/* layout.h — the paged KV cache's memory layout and the step's budget rules, shared by
 * the CPU reference, the GPU executor and the tests (one definition, so their bytes can be
 * compared directly).
 *
 * Pools (one attention layer):
 *   K pool     [n_pages][n_head_kv][block][k_row_bytes]   rows in k_type (ggml blocks)
 *   V pool     [n_pages][n_head_kv][block][v_row_bytes]
 *   bounds     [n_pages][n_head_kv][2][head_dim] f16      kmin then kmax (sparse only)
 *   page table [max_seqs][pages_per_seq] int32            logical page -> physical page
 *   seq_len    [max_seqs] int32                           tokens held by each sequence
 * Within a page, one KV head's rows are contiguous (block * row_bytes bytes, a multiple of
 * 64), so a split reads one slab per page and head. Offsets are 64-bit everywhere.
 *
 * Inputs: k, v rows given to append are [tokens][n_head_kv][head_dim] in in_type;
 * q is [batch][n_head][head_dim] in in_type; the output is [batch][n_head][head_dim] in
 * out_type. Query head h uses KV head h / group (group = n_head / n_head_kv).
 *
 * Bounds: per (page, kv head, d): min and max over the page's keys as given to append
 * (before quantization), rounded outward to f16 (min toward -inf, max toward +inf). The
 * append that writes a page's first token overwrites them; later appends min/max-merge.
 *
 * Quest score of a page for a KV head: max over the group's query heads g of
 *   sum_d ( q_gd > 0 ? q_gd*kmax_d : q_gd < 0 ? q_gd*kmin_d : 0 )
 * (unscaled). The GPU computes the same sum as a matrix product,
 *   sum_d ( min(q_gd,0)*kmin_d + max(q_gd,0)*kmax_d ),
 * equal for finite bounds; a bound that is infinite (a key beyond +-65504 given as f32 or
 * bf16) makes that page's GPU score NaN, so the GPU always attends it.
 *
 * Selection (per sequence and KV head), n = ceil(len / block) pages:
 *   forced  = pages holding tokens [0, sink) ∪ pages holding tokens [len - recent, len)
 *             ∪ {n - 1} (the last, possibly partial, page is always attended)
 *   K       = coverage mode: ceil(coverage * n) computed in double; token mode:
 *             ceil(budget / block); dense: n. K_eff = min(n, max(K, |forced|)).
 *   the list = forced ∪ the (K_eff - |forced|) best non-forced pages by score, ties to the
 *             lower page index, NaN scores ranked above every number; ascending order.
 *   If K_eff == n the list is every page (the dense step).
 */
#ifndef QGEN_LAYOUT_H
#define QGEN_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/qtypes.h"
#include "base/kargs.h"

typedef struct qgen_layout {
  int head_dim, n_head, n_head_kv, group, block;
  qgen_type k_type, v_type, in_type, out_type;
  double scale;
  int sparse;                       /* bounds are kept */
  size_t k_row_bytes, v_row_bytes;  /* one token, one KV head */
  size_t k_page_bytes, v_page_bytes; /* one physical page, all KV heads */
  size_t bounds_page_bytes;         /* n_head_kv * 2 * head_dim * 2, or 0 when dense */
  size_t in_row_bytes;              /* one KV head's input row (head_dim in in_type) */
  size_t q_bytes, out_bytes;        /* one token's q [n_head][D] and output, in bytes */
} qgen_layout;

/* How much to attend to in one step; mode is one of base/kargs.h's QGEN_BUDGET_*. */
typedef struct qgen_budget {
  int mode;
  double coverage; /* (0, 1] with QGEN_BUDGET_COVERAGE */
  int64_t tokens;  /* > 0 with QGEN_BUDGET_TOKENS */
  int64_t sink, recent;
} qgen_budget;

/* The memory of one cache; host pointers for the CPU backend. */
typedef struct qgen_kvmem {
  uint8_t *k, *v;
  uint16_t *bounds; /* NULL when dense */
  int32_t *page_table;
  int32_t *seq_len;
  int max_seqs;
  int64_t pages_per_seq; /* capacity of each sequence, in pages */
  int64_t n_pages;       /* physical pages in the pools */
  /* A view over a caller's pool (qgen_view_open) when page_size > 0: token t of seq is on
     page page_table[seq * pt_stride + t / page_size], slot t % page_size, its row of KV
     head h at k + page*k_stride[0] + slot*k_stride[1] + h*k_stride[2] (bytes; v alike), and
     bounds are per such page (n_pages of them). page_size 0: the owned layout above. */
  int page_size;
  int64_t k_stride[3], v_stride[3]; /* page, token, head */
  int64_t pt_stride;
} qgen_kvmem;

/* The byte strides (page, token, head) of the owned layout's K (which = 0) or V pool. */
void qgen_owned_strides(const qgen_layout *L, int which, int64_t st[3]);

/* Fill a layout from the spec's numbers; the row/page sizes come from the type table. */
void qgen_layout_init(qgen_layout *L, int head_dim, int n_head, int n_head_kv, int block,
                      qgen_type k_type, qgen_type v_type, qgen_type in_type,
                      qgen_type out_type, double scale, int sparse);

/* Pages a sequence of len tokens occupies. */
static inline int64_t qgen_pages_of(int64_t len, int block) { return (len + block - 1) / block; }

/* The number of pages the budget selects from n (K_eff above, given |forced|). */
int64_t qgen_budget_pages(const qgen_budget *b, int64_t n, int64_t n_forced, int block);

/* Mark the forced pages of a sequence of len tokens (forced[i] = 1); returns their count. */
int64_t qgen_forced_pages(const qgen_budget *b, int64_t len, int block, uint8_t *forced);

#endif
