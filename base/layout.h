/* layout.h — the paged KV cache's memory layout and the step's budget rules, shared by
 * the CPU reference, the GPU executor and the tests (one definition, so their bytes can be
 * compared directly).
 *
 * Pools (one attention layer):
 *   K pool     [n_pages][n_head_kv][block][k_row_bytes]   rows in k_type (ggml blocks)
 *   V pool     [n_pages][n_head_kv][block][v_row_bytes]
 *   bounds     [n_pages][n_head_kv][2][head_dim] f16      kmin then kmax (sparse only)
 *   bounds_i8  [n_pages][n_head_kv][2 * head_dim + 16] u8 the 8-bit bounds (bounds = "i8")
 *   page table [max_seqs][pages_per_seq] int32            logical page -> physical page
 *   seq_len    [max_seqs] int32                           tokens held by each sequence
 *   sketch     [n_pages][n_head_kv][block][sketch_row_bytes] two-stage selection over an
 *              unquantized K (f16, bf16): the QGEN_SKETCH_TYPE (q4_0) form of each stored K
 *              row, written by append; n_head_kv * head_dim / 32 * 18 bytes a token (0.28
 *              of an f16 K, 0.14 of f16 K + V). A q8_0/q4_0/q5_0 cache has none: its own
 *              K is rescored.
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
 * 8-bit bounds (spec sparse.bounds = "i8"): the f16 bounds above stay the source of truth
 * (append merges them as always); append also writes, for every page it touches, the row
 * qgen_ref_bounds_i8_row (ref/ref.h) makes of that page's f16 bounds, and estimate reads
 * only these rows. A view (page_size > 0 below) keeps them for pages of the block, written
 * by qgen_view_update; its pages of half a block keep none, and estimate reads the merged
 * f16 bounds of their pairs instead. One row (2D + 16 bytes, a multiple of 16 for wide loads):
 *   [0, D)        kmin codes u8        lo_d = offset + code * scale <= kmin_d
 *   [D, 2D)       kmax codes u8        hi_d = offset + code * scale >= kmax_d
 *   [2D, 2D + 2)  offset f16 (little-endian), the smallest kmin
 *   [2D+2, 2D+4)  scale f16, the smallest f16 >= (max kmax - offset) / 255
 *   [2D+4, 2D+16) zero
 * A page with a non-finite f16 bound has codes 0 and offset = scale = NaN (0x7e00): its
 * score is NaN, so it is always attended. Extra memory: (2D + 16) / (4D) of the f16 bounds
 * (0.53 at D = 128); estimate reads these instead, so its bytes drop to that share.
 *
 * Quest score of a page for a KV head: max over the group's query heads g of
 *   sum_d ( q_gd > 0 ? q_gd*kmax_d : q_gd < 0 ? q_gd*kmin_d : 0 )
 * (unscaled). The GPU computes the same sum as a matrix product,
 *   sum_d ( min(q_gd,0)*kmin_d + max(q_gd,0)*kmax_d ),
 * equal for finite bounds; a bound that is infinite (a key beyond +-65504 given as f32 or
 * bf16) makes that page's GPU score NaN, so the GPU always attends it. Over 8-bit bounds the
 * same sum is offset * sum_d q_gd + scale * sum_d (min(q_gd,0)*clo_d + max(q_gd,0)*chi_d),
 * the second sum one matrix product over the codes (exact in f16).
 *
 * Selection (per sequence and KV head), n = ceil(len / block) pages:
 *   forced  = pages holding tokens [0, sink) ∪ pages holding tokens [len - recent, len)
 *             ∪ {n - 1} (the last, possibly partial, page is always attended)
 *   K       = coverage mode: ceil(coverage * n) computed in double; token mode:
 *             ceil(budget / block); dense: n. K_eff = min(n, max(K, |forced|)).
 *   the list = forced ∪ the (K_eff - |forced|) best non-forced pages by score, ties to the
 *             lower page index, NaN scores ranked above every number; ascending order.
 *   If K_eff == n the list is every page (the dense step).
 *
 * Two-stage selection (rescore = r > 1): stage 1 keeps the C = min(r * (K_eff - |forced|),
 *   non-forced pages) best non-forced pages by the Quest score (the rules above); stage 2
 *   scores each of them exactly, max over the group's query heads and the page's tokens of
 *   q·k with k from the sketch (or the cache's own quantized K); stage 3 keeps the
 *   K_eff - |forced| best candidates by that score (same order: NaN first, ties to the
 *   lower page). The list is forced ∪ those; a page outside the candidates is never in it.
 *   r = 1 is the one-stage rule above.
 *   Top-p (top_p = p < 1, r > 1): of those kept candidates, in the same order, only the
 *   fewest whose estimated softmax mass reaches p of the mass of all C candidates (NaN ones
 *   always, with no mass); a page's estimated mass is its token count times
 *   exp(scale * (its exact score - the candidates' largest finite exact score)). With no
 *   finite positive total every kept candidate stays (ref/ref.h qgen_ref_select_top_p).
 */
#ifndef QGEN_LAYOUT_H
#define QGEN_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/qtypes.h"
#include "base/kargs.h"

/* The form of the page bounds estimate reads (spec sparse.bounds). */
enum { QGEN_BOUNDS_F16 = 0, QGEN_BOUNDS_I8 = 1 };

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
  int rescore;                      /* two-stage candidates per budget page (1: Quest) */
  double top_p;                     /* two-stage's mass-adaptive cut (1: none; spec sparse.rescore.top_p) */
  size_t sketch_row_bytes, sketch_page_bytes; /* the sketch pool's rows and pages, or 0 */
  int bounds_i8;                    /* the 8-bit bounds are kept too (qgen_layout_set_bounds) */
  size_t bounds_i8_row_bytes;       /* 2 * head_dim + 16 when bounds_i8, else 0 */
  size_t bounds_i8_page_bytes;      /* n_head_kv rows, or 0 */
  double v_tau;                     /* sparse-V threshold (spec sparse.v_tau; 0 = off, the init's) */
} qgen_layout;

/* The type of the sketch an unquantized cache keeps for two-stage selection. */
#define QGEN_SKETCH_TYPE QGEN_TYPE_Q4_0

/* The memory of one cache; host pointers for the CPU backend. */
typedef struct qgen_kvmem {
  uint8_t *k, *v;
  uint16_t *bounds; /* NULL when dense */
  int32_t *page_table;
  int32_t *seq_len;
  int max_seqs;
  int64_t pages_per_seq; /* capacity of each sequence, in pages */
  int64_t n_pages;       /* physical pages in the pools */
  /* Per-tensor scales of the K and V caches, read only for a type that takes one (the
     traits' tensor_scale: fp8): stored = fp8(x / scale), read = fp8 * scale. */
  float k_scale, v_scale;
  uint8_t *sketch;       /* NULL without a sketch pool (layout sketch_page_bytes == 0) */
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

/* Two-stage selection with r candidates per budget page (r >= 1; sparse layouts): a
   sketch pool when K is not a quant block type. */
void qgen_layout_set_rescore(qgen_layout *L, int r);
/* Choose the bounds' form (QGEN_BOUNDS_*) of a sparse layout L; init leaves it f16. */
void qgen_layout_set_bounds(qgen_layout *L, int bounds);

/* Pages a sequence of len tokens occupies. */
static inline int64_t qgen_pages_of(int64_t len, int block) { return (len + block - 1) / block; }

/* The step's budget (qgen_budget), its forced pages (qgen_forced_ranges) and K_eff
   (qgen_budget_pages) are base/kargs.h's: the kernels compile the same definitions. */

/* Mark the forced pages of a sequence of len tokens (forced[i] = 1); returns their count. */
int64_t qgen_forced_pages(const qgen_budget *b, int64_t len, int block, uint8_t *forced);

#endif
