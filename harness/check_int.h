/* check_int.h — what the files of `qgen check` share (check.h is the interface): the run's
 * counters, device buffers that end the run when CUDA fails, the PASS/FAIL line, test data,
 * pairs of caches (GPU and reference) holding the same sequences, and the checks each file
 * holds. Not for outside harness/.
 */
#ifndef QGEN_CHECK_INT_H
#define QGEN_CHECK_INT_H

#include <stdint.h>
#include <stdio.h>

#include "harness/check.h"
#include "harness/common.h"
#include "base/cudrv.h"
#include "base/layout.h"
#include "ref/ref.h"
#include "runtime/qgen_ext.h"

/* The run of one variant: its driver table and the checks counted so far. */
typedef struct {
  const qgen_cudrv *cu;
  int fails, checks;
} env;

/* A qgen call that must succeed; gc is the context whose last error explains a failure. */
#define API(call) QGEN_API_CHECK(gc, call, QGEN_API_FATAL("check"))

/* The per-tensor scales every cache of this check gets where its K / V type takes one (fp8):
   not powers of two (the division rounds), K's putting some values in the subnormals and
   V's saturating e4m3 beyond about 2.8 sigma. */
static const float CHECK_K_SCALE = 0.3f, CHECK_V_SCALE = 1.0f / 160.0f;

/* A pair of caches (GPU, reference) holding the same random sequences of lengths lens. */
typedef struct {
  qgen_kv *g, *c;
  int nb;
  const int64_t *lens;
  int *seq;
} pair;

/* ---- check.c: data, buffers, verdicts ---------------------------------------------------- */

/* A value of mean 0 and variance 1 that depends only on (seed, i). */
float check_gauss_at(uint64_t seed, uint64_t i);
/* rows x head_dim values of the in_type into dst, N(0, sigma^2). */
void check_fill(const qgen_layout *L, uint64_t seed, void *dst, int64_t rows, float sigma);
/* Device memory and copies; each ends the run (exit 2) when CUDA fails. */
CUdeviceptr check_dalloc(env *e, size_t n);
void check_upload(env *e, CUdeviceptr d, const void *h, size_t n);
void check_download(env *e, void *h, CUdeviceptr d, size_t n);
/* NaN bytes over an output before a GPU call writes it. */
void check_poison(env *e, CUdeviceptr d, size_t n);
/* One PASS/FAIL line, counted in e. */
void check_verdict(env *e, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Relative L2 error of a GPU output (out_type bytes) against fp64; NaN => +inf. */
double check_rel_err(const qgen_layout *L, const void *gpu, const double *ref, int64_t n);
/* The largest rel_err an output of L's out_type may have. */
double check_tolerance(const qgen_layout *L);
/* The check's per-tensor scales on a cache or view of gc; a cache of gc with them. */
void check_set_scales(qgen_ctx *gc, qgen_kv *kv);
void check_new_cache(qgen_ctx *gc, qgen_kv **kv, int max_seqs, int64_t max_tokens);
/* Two caches (GPU gc, reference cc) holding the same nb random sequences of lengths lens
   (pages shuffled the same way in both with shuffle_pages). */
void check_make_pair(env *e, qgen_ctx *gc, qgen_ctx *cc, pair *pr, int nb, const int64_t *lens, uint64_t seed,
                     int shuffle_pages);
void check_free_pair(pair *pr);

/* ---- check_lists.c: page lists against the reference ------------------------------------- */

/* The sparse step kv just took (GPU) against the reference over the host cache m: every
   sequence's lists (ranked by the 8-bit bounds when i8), and in ref the reference attention
   over the GPU's lists. Returns whether every list matched; near, total, cut and why
   describe them. */
int check_sparse_vs_ref(qgen_ctx *gc, const qgen_layout *L, qgen_kv *kv, const qgen_kvmem *m, int nb, const int64_t *lens,
                        const uint8_t *q, const qgen_budget *bs, const qgen_ref_order *ord, int i8, double *ref, int *near,
                        int *total, int *cut, char *why, size_t wn);

/* The same for a step of nq[i] query tokens of sequence i (q: their rows, sequence after
   sequence): its lists against the reference selection whose page scores are the max over
   the step's tokens, and in ref the reference step over the GPU's lists (each token causal). */
int check_steps_vs_ref(qgen_ctx *gc, const qgen_layout *L, qgen_kv *kv, const qgen_kvmem *m, int nb, const int64_t *lens,
                       const int *nq, const uint8_t *q, const qgen_budget *bs, int i8, double *ref, int *near, int *total,
                       int *cut, char *why, size_t wn);

/* ---- the checks: check_cases.c, check_views.c, check_big.c ------------------------------- */

void check_append(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed);
void check_attend(env *e, qgen_ctx *gc, qgen_ctx *cc, int nb, const int64_t *lens, uint64_t seed);
void check_reuse(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed);
void check_bits(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed, int quick);
void check_decode_graph(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed);
void check_steps(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed, int quick);
void check_views(env *e, qgen_ctx *gc, qgen_ctx *cc, uint64_t seed);
void check_big(env *e, qgen_ctx *gc, uint64_t seed);

#endif
