/* kargs.h — what the host and the generated kernels must agree on, written once and read
 * by both compilers: the C compiler (runtime/gpu.c fills these structs, jit/emit.c names
 * the kernels) and NVRTC (jit/emit.c puts this file, the copy embedded when qgen was built,
 * at the top of every generated unit, ahead of the templates; QGEN_TEMPLATE_DIR does not
 * replace it, as the host was compiled against this copy).
 *
 * It holds the launch limits, the step's budget and its rule, the structs the step kernels
 * take by value, and the kernels with their signatures. Under NVRTC nothing is included: the
 * shim below supplies the fixed-width types, and a device pointer field (one a QG_DPTR) is a
 * typed pointer there and a CUdeviceptr (64 bits) on the host. A function here (QG_HOSTDEV)
 * is compiled by both: an inline device function in the kernels, a static inline one on the
 * host, so the CPU reference and the kernels apply one rule.
 */
#ifndef QGEN_KARGS_H
#define QGEN_KARGS_H

#ifdef __CUDACC__
typedef int qg_i32;
typedef long long qg_i64;
#define QG_DPTR(T) T *
#define QG_STATIC_ASSERT static_assert
#define QG_HOSTDEV __device__ __forceinline__
#define qg_min64 min /* CUDA's overloads, which the kernels' other code uses too */
#define qg_max64 max
#else
#include <math.h> /* ceil: NVRTC has it built in */
#include <stdint.h>
typedef int32_t qg_i32;
typedef int64_t qg_i64;
typedef unsigned long long qgen_dptr; /* a device address (CUdeviceptr) */
#define QG_DPTR(T) qgen_dptr
#define QG_STATIC_ASSERT _Static_assert
#define QG_HOSTDEV static inline
static inline qg_i64 qg_min64(qg_i64 a, qg_i64 b) { return a < b ? a : b; }
static inline qg_i64 qg_max64(qg_i64 a, qg_i64 b) { return a > b ? a : b; }
#endif

#define QGEN_MAX_BATCH 256 /* sequences per attend launch (qg_batch) */
/* the persistent attend's mailbox, shared-memory bytes (attend.cu attend_persistent; the
   plan counts them in its shared memory) */
#define QGEN_PERSIST_BOX 256
#define QGEN_APPEND_MAX 64 /* sequences per append launch (qg_append_args) */
#define QGEN_VIEW_SLOTS 4  /* slots of a qg_view CTA, one warp each */

/* Budget modes (qgen_budget.mode): dense ignores the rest of the budget; reuse attends each
   sequence's last sparse selection extended by the pages after its last
   (qgen_ref_extend_list; QGEN_ATTEND_REUSE), running no estimate or select. */
enum { QGEN_BUDGET_DENSE = 0, QGEN_BUDGET_COVERAGE = 1, QGEN_BUDGET_TOKENS = 2, QGEN_BUDGET_REUSE = 3 };

/* How much to attend to in one step: what the host's step takes (runtime, the CPU
   reference) and, the same bytes, what estimate, select, rescore and topp take by value. */
typedef struct qgen_budget {
  qg_i32 mode;     /* QGEN_BUDGET_* */
  double coverage; /* (0, 1] with QGEN_BUDGET_COVERAGE */
  qg_i64 tokens;   /* > 0 with QGEN_BUDGET_TOKENS */
  qg_i64 sink, recent;
} qgen_budget;

/* The selection rule of base/layout.h, once for both compilers. A sequence of len tokens
   in pages of block tokens (n = ceil(len / block) > 0 of them) must attend [0, *sp) (the
   sink's pages) and [*rf, n) (the recent tokens' pages and the last page); its candidates
   for the budget are [*sp, *rf). */
QG_HOSTDEV void qgen_forced_ranges(const qgen_budget *b, qg_i64 len, int block, qg_i64 *sp, qg_i64 *rf) {
  const qg_i64 n = (len + block - 1) / block;
  *sp = (qg_min64(b->sink, len) + block - 1) / block;
  *rf = b->recent > 0 ? qg_max64((qg_i64)0, len - b->recent) / block : n - 1;
  *rf = qg_min64(*rf, n - 1);
  if (*rf < *sp) *rf = *sp;
}

/* The number of pages the budget b selects from n, n_forced of them forced (K_eff of
   base/layout.h). */
QG_HOSTDEV qg_i64 qgen_budget_pages(const qgen_budget *b, qg_i64 n, qg_i64 n_forced, int block) {
  qg_i64 k = n;
  if (b->mode == QGEN_BUDGET_COVERAGE) k = (qg_i64)ceil(b->coverage * (double)n);
  else if (b->mode == QGEN_BUDGET_TOKENS) k = (b->tokens + block - 1) / block;
  k = qg_max64(k, n_forced);
  return qg_min64(k, n);
}

/* The cache of one layer, as every step kernel sees it. */
typedef struct qg_cache {
  QG_DPTR(unsigned char) k;           /* [n_pages][N_KV][BLOCK][K_ROW] */
  QG_DPTR(unsigned char) v;           /* [n_pages][N_KV][BLOCK][V_ROW] */
  QG_DPTR(unsigned short) bounds;     /* [n_pages][N_KV][2][D] f16 (sparse) */
  QG_DPTR(const qg_i32) page_table;   /* [max_seqs][pages_per_seq] */
  QG_DPTR(qg_i32) seq_len;            /* [max_seqs] */
  qg_i64 pages_per_seq;               /* selection pages a sequence can hold (sizes wk's rows) */
  float k_scale, v_scale; /* per-tensor scales of fp8 K/V (qgen_kvmem), 1 for other types */
  QG_DPTR(unsigned char) sketch;      /* [n_pages][N_KV][BLOCK][SK_ROW] q4_0 of K (two-stage over f16/bf16) */
  QG_DPTR(unsigned char) bounds_i8;   /* [n_pages][N_KV][2D + 16] (sparse.bounds = "i8"; layout.h) */
  /* Where the rows are, for an owned cache and a view over a caller's pool alike: token t of
     sequence s is on physical page page_table[s * pt_stride + t / page_size], slot
     t % page_size; its K row of KV head h at k + page*k_page + slot*k_token + h*k_head
     (bytes; V the same). An owned cache: page_size = BLOCK, its own layout's strides. A
     view's bounds are per physical page of the caller's (page_size tokens). */
  qg_i64 k_page, k_token, k_head, v_page, v_token, v_head;
  qg_i64 pt_stride;  /* page-table entries between sequences */
  qg_i32 page_size;  /* BLOCK, or a divisor of it that is a multiple of 16 (a view) */
  qg_i32 flags;      /* QG_CACHE_* */
} qg_cache;

/* qg_cache.flags. K_SLAB / V_SLAB: a 16-token run of rows is one contiguous, 16-byte
   aligned slab (token stride = row bytes), copied whole. VIEW: the pool is the caller's,
   so rows past a sequence's end may hold anything and pages past it may be unmapped:
   attend zero-fills those rows instead of reading them. */
enum { QG_CACHE_K_SLAB = 1, QG_CACHE_V_SLAB = 2, QG_CACHE_VIEW = 4 };

/* The step's scratch: page lists, scores, split partials (sized by the runtime). */
typedef struct qg_work {
  QG_DPTR(float) scores;   /* [max_seqs][N_KV][pages_per_seq] */
  QG_DPTR(qg_i32) list;    /* [max_seqs][N_KV][pages_per_seq] */
  QG_DPTR(qg_i32) count;   /* [max_seqs][N_KV] */
  QG_DPTR(float) part_o;   /* [MAX_BATCH][N_HEAD][max_splits][D] */
  QG_DPTR(float) part_ml;  /* [MAX_BATCH][N_HEAD][max_splits][2] */
  QG_DPTR(qg_i32) ticket;  /* [MAX_BATCH][N_KV]: splits done; then 2: the persistent attend's
                              shares claimed and CTAs run out (QGEN_PERSIST_BOX); zero between steps */
  QG_DPTR(unsigned) hist;  /* [MAX_BATCH][N_KV][2048]: top-11-bit key histogram of the candidates; zero between steps */
  qg_i32 max_splits;
  /* Two-stage selection (layout.h): select keeps cand x the budget's non-forced pages and,
     with exact set, writes QG_NOT_CAND there for every non-forced page it leaves out;
     rescore writes the candidates' exact scores into exact and counts their first radix
     digit into hist2 (zero between steps), which the second select reads as its scores
     and hist. */
  QG_DPTR(float) exact;    /* [max_seqs][N_KV][pages_per_seq] */
  QG_DPTR(unsigned) hist2; /* [MAX_BATCH][N_KV][2048] */
  qg_i32 cand;             /* 1: one stage */
} qg_work;

typedef struct qg_batch {
  qg_i32 n;                   /* sequences in this launch */
  qg_i32 seq[QGEN_MAX_BATCH]; /* cache slot of each batch row */
  /* Read by engine modules only (QG_STEP > 0: several query tokens a row, windows, sinks;
     runtime/gpu.c): row b's query tokens are q's rows tok[b] .. tok[b + 1] - 1, the last
     of the sequence, each attending causally; window > 0: each only its last window
     tokens (dense); sinks: n_head f32 logits, one more softmax term a head. */
  qg_i32 tok[QGEN_MAX_BATCH + 1];
  qg_i32 window;
  qg_i32 pad_;
  QG_DPTR(const float) sinks;
} qg_batch;

/* One append launch. */
typedef struct qg_append_args {
  QG_DPTR(const unsigned char) k_in; /* [tokens][N_KV][D] in the input type */
  QG_DPTR(const unsigned char) v_in; /* the same */
  qg_i32 n_seq;
  qg_i32 seq[QGEN_APPEND_MAX];      /* cache slot */
  qg_i32 start[QGEN_APPEND_MAX];    /* tokens the sequence held before this call */
  qg_i32 n_new[QGEN_APPEND_MAX];
  qg_i32 work[QGEN_APPEND_MAX + 1]; /* prefix sum of pages touched: CTA x belongs to seq i when work[i] <= x < work[i+1] */
  qg_i64 row0[QGEN_APPEND_MAX];     /* first input row of each sequence */
  /* qgen_append_decode: non-NULL arrive says each sequence's one token goes at the length
     the device holds when the kernel runs (start unused); arrive[seq] counts the CTAs of
     seq that have read it, so the last one publishes the new length; dropped[seq] counts
     tokens not written because the sequence held cap tokens. Both [max_seqs], zero at
     creation; arrive is zero again after each launch. */
  QG_DPTR(qg_i32) arrive;
  QG_DPTR(qg_i32) dropped;
  qg_i64 cap;
} qg_append_args;

/* Sizes and key offsets: both compilers read this text, and these pin the layout each must
   give it (a launch passes exactly these bytes). */
QG_STATIC_ASSERT(sizeof(qg_cache) == 136 && sizeof(qg_work) == 88 && sizeof(qgen_budget) == 40 &&
                     sizeof(qg_batch) == 4 * (4 + 2 * QGEN_MAX_BATCH) + 8 && sizeof(qg_append_args) == 48 + 24 * QGEN_APPEND_MAX,
                 "a kernel argument struct is laid out with unexpected padding");
#ifndef __CUDACC__
#include <stddef.h> /* offsetof: NVRTC has none; the sizes above cover the device side */
_Static_assert(offsetof(qg_cache, pages_per_seq) == 40 && offsetof(qg_cache, k_scale) == 48 && offsetof(qg_cache, sketch) == 56 &&
                   offsetof(qg_cache, bounds_i8) == 64 && offsetof(qg_cache, pt_stride) == 120 &&
                   offsetof(qg_cache, flags) == 132 &&
                   offsetof(qg_work, max_splits) == 56 && offsetof(qg_work, exact) == 64 && offsetof(qg_work, cand) == 80 &&
                   offsetof(qgen_budget, coverage) == 8 && offsetof(qg_batch, sinks) == 4 * (4 + 2 * QGEN_MAX_BATCH) && offsetof(qg_append_args, work) == 20 + 12 * QGEN_APPEND_MAX &&
                   offsetof(qg_append_args, row0) == 24 + 16 * QGEN_APPEND_MAX &&
                   offsetof(qg_append_args, arrive) == 24 + 24 * QGEN_APPEND_MAX,
               "a kernel argument struct is laid out with unexpected offsets");
#endif

/* The step kernels in launch order, X(name, units): extern "C" qg_<name>, defined in the
   template <name>.cu; units SPARSE: only in the units of sparse specs, QUEST: of sparse
   specs with one-stage selection (qg_estsel: in place of estimate and select where it
   fits), RESCORE: of sparse specs with two-stage selection (rescore > 1), TOPP: of those
   with a top-p cut (top_p < 1; after the second select). A unit whose plan sets merge_rows (an engine module of
   >= 16 query rows) has qg_combine after attend too (QGEN_MERGE_KERNEL). Under NVRTC each
   is declared here with its whole signature, which its definition must match. */
#define QGEN_KERNELS(X) \
  X(append, ALL) X(view, SPARSE) X(estimate, SPARSE) X(select, SPARSE) X(estsel, QUEST) X(rescore, RESCORE) X(topp, TOPP) X(extend, SPARSE) X(attend, ALL)
#define QGEN_KERNEL_NAME(k) "qg_" #k
#define QGEN_MERGE_KERNEL QGEN_KERNEL_NAME(combine)
#ifdef __CUDACC__
extern "C" __global__ void qg_append(qg_cache c, qg_append_args a);
extern "C" __global__ void qg_view(qg_cache c, const void *slots, qg_i64 n, qg_i64 n_pages, qg_i32 slot_bytes, qg_i32 pass);
extern "C" __global__ void qg_estimate(qg_cache c, qg_work wk, qg_batch bt, qgen_budget bg, const void *q);
extern "C" __global__ void qg_estsel(qg_cache c, qg_work wk, qg_batch bt, qgen_budget bg, const void *q);
extern "C" __global__ void qg_select(qg_cache c, qg_work wk, qg_batch bt, qgen_budget bg);
extern "C" __global__ void qg_rescore(qg_cache c, qg_work wk, qg_batch bt, qgen_budget bg, const void *q);
extern "C" __global__ void qg_topp(qg_cache c, qg_work wk, qg_batch bt, qgen_budget bg);
extern "C" __global__ void qg_extend(qg_cache c, qg_work wk, qg_batch bt);
extern "C" __global__ void qg_attend(qg_cache c, qg_work wk, qg_batch bt, const void *q, void *out, int dense, int bulk);
extern "C" __global__ void qg_combine(qg_cache c, qg_work wk, qg_batch bt, void *out, int dense);
#endif

#endif
