/* workload.h — seeded, streamable, synthetic long-context attention workloads for one
 * attention layer (one sequence): the inputs of `qgen eval` (harness/eval.c) and of
 * tests/test_quality.c.
 *
 * No model weights are reachable here, so the workloads are synthetic but shaped like
 * real decode-time attention (docs/DESIGN.md §7 "Quality"). Everything is expressed in the
 * *final* (post-RoPE) space the cache sees, and every random number is a pure function of
 * (seed, stream, index) — splitmix64 of a counter — so any token range [t0, t1) can be
 * generated on its own, in any order, by any thread, bit for bit the same: a 1M-token
 * context is appended chunk by chunk without ever being held in memory.
 *
 * Three levels, each deterministic in its seed:
 *
 *   haystack (qgen_wl, seed)      the base key/value rows of every token.
 *   trial (qgen_wl_trial, seed)   a query, plus the tokens that depend on it: the
 *                                 attention sink (token 0) and the recency window.
 *   plan (qgen_wl_plan)           one task's planted tokens (needles, near-duplicate
 *                                 distractors) at one margin.
 *
 * A trial's planted positions depend on (trial seed, task), not on the margin, so a margin
 * sweep moves the same needles up and down (paired comparisons).
 *
 * ---- the haystack -------------------------------------------------------------------
 * KV head h, token t, channel pairs (2i, 2i+1), i < D/2 (GPT-J-style interleaved RoPE):
 *
 *   k_t = R(t) (mu_h + a·s_h ⊙ z_t) + b·s_h ⊙ y_seg(t)     v_t = m_h + z'_t
 *
 *   z, z', y ~ N(0, I); a² + b² = 1, b² = `topic_share` (0.5).
 *   y_seg  local coherence: tokens are grouped into segments ("topics") of random length
 *          (one boundary at a seeded offset in every cell of `topic_len` tokens, so lengths
 *          spread over (0, 2·topic_len), mean topic_len, never aligned with pages) and share
 *          half of their key variance — neighbouring tokens get related scores, as in real
 *          attention, instead of independent ones. The shared part is in the post-RoPE space.
 *   R(t)   rotates pair i by the angle t·θ_i, θ_i = rope_base^(-2i/D)  (rope_base 10000).
 *   s_h    per-pair standard deviation: `active_pairs` (head_dim / 8) random pairs get
 *          `active_std`, the others `inactive_std` — keys of trained models are low-rank;
 *          with the defaults 32 of 128 channels carry ~90 % of the variance. This is the
 *          knob Quest is most sensitive to: its page bound loosens with the number of
 *          channels the query weighs (sweep it with `qgen eval --wl active_pairs=N`).
 *   mu_h   zero except `outlier_pairs` pairs chosen in the lowest-frequency quarter, which
 *          get a mean of magnitude `outlier_mean` (x active_std) at a random phase: a few
 *          fixed channels with a large mean that RoPE turns only slowly (the "massive"
 *          key channels of real models; they also set the ggml block scales of q8_0/q4_0).
 *   m_h    a per-head value mean, N(0, value_mean^2) per channel.
 *   z      each N(0,1) is the Irwin–Hall sum of four 16-bit uniforms of one splitmix64
 *          output, rescaled to unit variance (bounded at ±3.46; the logits are sums over
 *          many channels, so their distribution is near-normal anyway).
 *
 * Every value produced is rounded through `round_type` (the cache's input type, f16 for
 * the specs here), so the keys the oracle scores are exactly the rows appended.
 *
 * ---- the query (one per trial; query head g of KV head h, position N) --------------
 *   q~_g = c_h + head_spread · w_g,   c_h, w_g ~ s_h ⊙ N(0, I) outside the outlier pairs
 *   (queries live where keys vary), rescaled so that the noise part of the logits has
 *   standard deviation `logit_std`: scale·|s_h ⊙ q~_g| = logit_std; plus a component along
 *   the key mean of the outlier pairs worth `outlier_logit` x logit_std of logit at
 *   distance 0 (RoPE makes it a slow, position-dependent swell of the haystack's logits);
 *   q_g = R(N) q~_g. Logits are l_g(t) = scale · q_g·k_t (scale from the spec).
 *   u_h = the unit vector of sum_g q_g: the group's common direction. Every planted key is
 *   "base row + alpha·u_h", so alpha moves the logits of all G heads together.
 *
 * ---- per-trial structure --------------------------------------------------------------
 *   statistics  one pass over the base haystack: per (page, query head) the max and the
 *               log-sum-exp of the logits; per head the standard deviation S_g of the logits
 *               of the body tokens [1, N - recent_window) ("the score std").
 *   recency     tokens t in the last `recent_window` (W): k_t += beta_t·u_h, with beta_t
 *               raising the group's mean logit by recent_boost·S·exp(-(N-1-t)/recent_tau)
 *               (S = the group's mean S_g): the last few hundred tokens correlate with the
 *               query.
 *   sink        token 0: k_0 += alpha·u_h so that it takes `sink_mass` of the softmax mass
 *               against the rest of the context (alpha averaged over the group's heads, so
 *               the fraction is approximate per head); v_0 = 0 (a no-op sink).
 *
 * ---- tasks (after RULER's needle-in-a-haystack family) ---------------------------------
 * A needle is a token whose key, in each of its `owners` KV heads (random, distinct), is
 * moved along u_h until, for every query head g of that group,
 *
 *     l_g(needle) >= M_g + margin · S_g,  with equality for the tightest head,
 *
 * where M_g is the strongest distractor: the largest logit over every other token of the
 * context except the sink and the planted tokens (the recency window included). So margin
 * is "needle over the strongest distractor, in units of the haystack's logit std". In the
 * KV heads that do not own it, a needle token is plain haystack.
 *   niah_single      one needle.
 *   niah_multikey    one needle and multikey - 1 near-duplicates (same owners, same
 *                    direction u_h) placed `margin` below it: every distractor has
 *                    l_g <= l_g(needle) - margin·S_g in every head, with equality in one.
 *   niah_multivalue  `multivalue` needles, each at the margin; all of them are needed.
 *   niah_boundary    one needle on the first or the last token of its page (a coin).
 * Planted tokens sit in distinct pages, uniformly among the body pages: pages entirely
 * inside [block, N - W) — never the sink page nor the recency window, so a needle is never
 * selected merely because a budget forces the first or the last pages.
 *
 * Logits are computed in double from the f32 rows. Planting solves alpha from the rows
 * before their final rounding to round_type, so a margin holds up to that rounding
 * (about 1e-3 of a logit for f16).
 */
#ifndef QGEN_WORKLOAD_H
#define QGEN_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "base/qtypes.h"

typedef enum qgen_wl_task {
  QGEN_WL_NIAH_SINGLE = 0,
  QGEN_WL_NIAH_MULTIKEY,
  QGEN_WL_NIAH_MULTIVALUE,
  QGEN_WL_NIAH_BOUNDARY,
  QGEN_WL_TASK_COUNT
} qgen_wl_task;

const char *qgen_wl_task_name(qgen_wl_task t);
/* Returns 0 and sets *t, or -1 for an unknown name. */
int qgen_wl_task_from_name(const char *name, qgen_wl_task *t);

#define QGEN_WL_MAX_PLANTED 16

/* Knobs of the generator; qgen_wl_defaults() gives the documented defaults. */
typedef struct qgen_wl_params {
  int active_pairs;     /* pairs with the large key variance; 0 = head_dim / 8 */
  double active_std;    /* 1.0 */
  double inactive_std;  /* 0.2 */
  int outlier_pairs;    /* 2 */
  double outlier_mean;  /* 8.0 (x active_std) */
  double rope_base;     /* 10000 */
  double value_mean;    /* 0.5 */
  double logit_std;     /* 1.5: std of the query's noise logits */
  double head_spread;   /* 0.3: per-head deviation from the group's query */
  double outlier_logit; /* 0.5 (x logit_std) */
  double sink_mass;     /* 0.3 */
  int recent_window;    /* 512 tokens */
  double recent_boost;  /* 3.0 (x S) */
  double recent_tau;    /* 128 tokens */
  int owners;           /* KV heads owning each needle; 0 = max(1, n_head_kv / 4) */
  int multikey;         /* keys in niah_multikey (1 needle + multikey - 1 distractors): 4 */
  int multivalue;       /* needles in niah_multivalue: 4 */
  int topic_len;        /* mean segment length in tokens: 256 */
  double topic_share;   /* share of the key variance common to a segment: 0.5 */
  double drift;         /* rho of the drifting queries (qgen_wl_drift): 0.9 */
} qgen_wl_params;

qgen_wl_params qgen_wl_defaults(void);
/* Set one knob from "name=value" (the names of qgen_wl_params, each within its range:
   workload.c's table). 0, or -1 with the reason in why (n bytes) if unknown or out of range. */
int qgen_wl_params_set(qgen_wl_params *p, const char *assignment, char *why, size_t n);
/* 0 if every knob of p is within its range, else -1 with the first one out of it in why. */
int qgen_wl_params_check(const qgen_wl_params *p, char *why, size_t n);
/* The knobs as a JSON object (no newline) into buf. */
void qgen_wl_params_json(const qgen_wl_params *p, char *buf, size_t n);

typedef struct qgen_wl_shape {
  int head_dim, n_head, n_head_kv, block; /* head_dim even; n_head % n_head_kv == 0 */
  double scale;                           /* softmax scale of the logits */
  int64_t n_tokens;                       /* N */
  qgen_type round_type;                   /* values are rounded through it (f32 = none) */
} qgen_wl_shape;

/* The haystack. */
typedef struct qgen_wl {
  qgen_wl_shape s;
  qgen_wl_params p;
  uint64_t seed;
  int group;          /* n_head / n_head_kv */
  int64_t n_pages;    /* ceil(N / block) */
  int64_t window;     /* recency window actually used: min(recent_window, N - 1) */
  int64_t body_end;   /* body tokens are [1, body_end): body_end = N - window */
  double *theta;      /* [D/2] RoPE frequencies */
  float *kstd;        /* [Hkv][D] per-channel key std */
  float *kmean;       /* [Hkv][D] unrotated key mean (outlier pairs) */
  float *vmean;       /* [Hkv][D] value mean */
  uint8_t *outlier;   /* [Hkv][D/2] 1 for an outlier pair */
} qgen_wl;

/* Set a haystack up (small: per-head tables only). 0, or -1 with a message in err. */
int qgen_wl_init(qgen_wl *w, const qgen_wl_shape *s, const qgen_wl_params *p, uint64_t seed,
                 char *err, size_t errn);
void qgen_wl_free(qgen_wl *w);

/* The base rows of tokens [t0, t1): k and v (either may be NULL) receive
   [t1 - t0][n_head_kv][head_dim] floats, rounded through round_type. Thread-safe. */
void qgen_wl_haystack(const qgen_wl *w, int64_t t0, int64_t t1, float *k, float *v);

/* Where the statistics pass reads the base keys from. keys() returns a pointer to the rows
   of [t0, t1) (layout as qgen_wl_haystack), either into memory it holds or after filling
   scratch (room for the rows); it must return exactly qgen_wl_haystack's values and be
   safe to call from several threads. A NULL source regenerates the rows. */
typedef struct qgen_wl_source {
  const float *(*keys)(void *ctx, int64_t t0, int64_t t1, float *scratch);
  void *ctx;
} qgen_wl_source;

/* One trial: the query and everything that depends on it. */
typedef struct qgen_wl_trial {
  const qgen_wl *w;
  uint64_t seed;
  float *q;        /* [n_head][D] the (rotated) query, in_type-rounded */
  float *u;        /* [Hkv][D] unit group directions */
  double *qu;      /* [n_head] scale · q_g·u_h */
  double *S;       /* [n_head] std of the body logits */
  double *pmax;    /* [n_pages][n_head] max logit of each page (sink, recency applied) */
  double *plse;    /* [n_pages][n_head] log-sum-exp of the page's logits */
  double *dmax0;   /* [n_head] max logit of page 0 without the sink token */
  double *beta;    /* [window][Hkv] recency shifts along u_h */
  double *alpha0;  /* [Hkv] the sink's shift along u_h */
} qgen_wl_trial;

/* Make a trial: the query, the statistics pass over the base haystack (read from src,
   on `threads` threads; the result does not depend on the thread count), the recency
   window and the sink. 0, or -1 for more than 1024 query heads (out of memory aborts). */
int qgen_wl_trial_init(qgen_wl_trial *T, const qgen_wl *w, uint64_t trial_seed,
                       const qgen_wl_source *src, int threads);
void qgen_wl_trial_free(qgen_wl_trial *T);

typedef struct qgen_wl_planted {
  int64_t pos;       /* token */
  uint32_t owners;   /* bit h: KV head h holds the planted key */
  int needle;        /* 1: a needle (must be found); 0: a multikey distractor */
} qgen_wl_planted;

/* One task's planted tokens at one margin. */
typedef struct qgen_wl_plan {
  qgen_wl_task task;
  double margin;
  int n;                                    /* planted tokens, ascending positions */
  qgen_wl_planted at[QGEN_WL_MAX_PLANTED];
  float *rows;                              /* [n][Hkv][D] their final keys */
  double *M;                                /* [n_head] the strongest distractor M_g */
  int n_pages;                              /* pages holding planted tokens */
  int64_t page[QGEN_WL_MAX_PLANTED];        /* ascending */
  double *pmax, *plse;                      /* [n_pages][n_head] their final statistics */
} qgen_wl_plan;

/* Plant task's tokens for trial T at margin (in units of S_g; may be 0 or negative).
   0, or -1 with a message in err (context too short for the task). */
int qgen_wl_plant(qgen_wl_plan *P, const qgen_wl_trial *T, qgen_wl_task task, double margin,
                  char *err, size_t errn);
void qgen_wl_plan_free(qgen_wl_plan *P);

/* Drifting queries (consecutive decode steps over the same cache; `qgen eval --steps`):
   the query of step + 1 from that of step (prev; step 0's is T->q), per query head
     x = m + rho (prev - m) + sqrt(1 - rho^2) (f - m),   next = x + (q0·u_h - x·u_h) u_h,
   rho = the `drift` knob (clamped to [0, 1]), f a fresh query of the trial's distribution (its own seed per
   step), m that distribution's deterministic part (the outlier component), q0 = T->q: an
   AR(1) walk that stays in the query distribution, with the component along the group's
   direction u_h held at the trial's, so the sink, recency and planted keys (all shifted
   along u_h) keep their boost; the haystack's logits, and so the needles' margins over it,
   drift. Rounded through round_type. */
void qgen_wl_drift(const qgen_wl_trial *T, int step, const float *prev, float *next);

/* qgen_wl_page_stats for another query q of the trial (e.g. qgen_wl_drift's): per page and
   query head the max and log-sum-exp of the logits over the final rows (T, P), by a fresh
   pass over the whole context on `threads` threads. */
void qgen_wl_query_stats(const qgen_wl_trial *T, const qgen_wl_plan *P, const float *q, double *pmax,
                         double *plse, int threads);

/* The final rows of tokens [t0, t1): the haystack with the trial's sink and recency
   tokens and the plan's planted keys (P may be NULL: the trial alone). Thread-safe. */
void qgen_wl_rows(const qgen_wl_trial *T, const qgen_wl_plan *P, int64_t t0, int64_t t1,
                  float *k, float *v);

/* The tokens whose rows differ from the base haystack (token 0, the recency window, the
   planted tokens), ascending, into pos (room for 1 + window + QGEN_WL_MAX_PLANTED).
   Returns their count. */
int64_t qgen_wl_specials(const qgen_wl_trial *T, const qgen_wl_plan *P, int64_t *pos);

/* The final per-(page, query head) max and log-sum-exp of the logits ([n_pages][n_head]
   each): the trial's arrays with the plan's pages overlaid. */
void qgen_wl_page_stats(const qgen_wl_trial *T, const qgen_wl_plan *P, double *pmax,
                        double *plse);

/* Logits of one token's key rows k ([Hkv][D]) for every query head: out[n_head]. */
void qgen_wl_logits(const qgen_wl_trial *T, const float *k, double *out);

/* Run fn(ctx, i) for i in [0, n) on `threads` threads (the caller's thread included);
   items are handed out in order by an atomic counter. */
void qgen_wl_parallel(int64_t n, int threads, void (*fn)(void *ctx, int64_t i), void *ctx);

/* The segment ("topic") token t belongs to. */
int64_t qgen_wl_segment(const qgen_wl *w, int64_t t);

/* A counter-based N(0,1) draw (the one the haystack uses). */
float qgen_wl_gauss(uint64_t seed, uint64_t stream, uint64_t i);

#endif
