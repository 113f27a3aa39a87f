/* bench.h — `qgen bench`'s timing of the decode step on the GPU (bench.c explains how);
 * tools/cmd_bench.c is the command line around it.
 *
 * Every call that can fail without a bug (no GPU, a bad spec) returns an exit code of
 * harness/common.h after saying why; a CUDA or qgen call failing inside the timing ends the
 * process (exit 2) after naming the call.
 */
#ifndef QGEN_BENCH_H
#define QGEN_BENCH_H

#include <stdio.h>

#include "runtime/qgen.h"

/* What every variant's cells share: the lists of the command line, the JSON file and its
   row count. */
typedef struct qgen_bench_cfg {
  const double *ctxs, *batches, *covs, *tokens; /* tokens: query tokens a sequence a step */
  int nctx, nb, ncov, ntok, runs, warmup;
  double mem_gib;  /* cells whose caches need more are skipped */
  FILE *jf;        /* the JSON array's rows go here (NULL: none) */
  int rows;        /* rows written to jf so far */
  const char *tune; /* QGEN_TUNE, recorded in each JSON row */
} qgen_bench_cfg;

/* The streaming-read kernel every cell's floor is measured with, compiled for the device. */
typedef struct qgen_bench_env qgen_bench_env;

/* Compile and load it for a device of sm_count SMs (exits 2 when that fails); free it with
   qgen_bench_env_free. */
qgen_bench_env *qgen_bench_env_new(int sm_count);
void qgen_bench_env_free(qgen_bench_env *b);

/* qgen_open (with sparse.v_tau = v_tau when >= 0): 0, or the exit code after saying why
   (77 without a GPU, on stdout; 1 for a bad spec or bundle, 2 otherwise, on stderr). */
int qgen_bench_open(qgen_ctx **ctx, const char *spec, const qgen_open_opts *o, double v_tau);

/* --jit: a cold qgen_open (empty cache), a warm one, and a warm one with the device's context
   already held, in a fresh cache directory removed afterwards; one line on stdout. 0, or the
   exit code after saying why. */
int qgen_bench_jit(const char *spec, const char *variant);

/* The table's header line on stdout. */
void qgen_bench_print_header(void);

/* Every (context, batch, coverage) cell of the variant open in ctx: its table rows on stdout
   and its JSON rows in c->jf. */
void qgen_bench_variant(qgen_bench_env *b, qgen_ctx *ctx, qgen_bench_cfg *c);

#endif
