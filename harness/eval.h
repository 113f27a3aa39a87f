/* eval.h — `qgen eval`: retrieval quality of the sparse decode path on the synthetic
 * workloads of workload.h, for either backend (GPU, or the CPU reference executor).
 *
 * qgen_eval_run() is the evaluation as a library call (tests/test_quality.c uses it);
 * qgen_eval_main() (tools/cmd_eval.c) is the command line around it (table on stdout, JSON
 * with --json).
 * harness/eval.c explains the method.
 */
#ifndef QGEN_EVAL_H
#define QGEN_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "runtime/qgen.h"
#include "harness/workload.h"

/* The selectors. The first QGEN_SEL_DEFAULTS run by default; the others are the host-side
   previews of the 8-bit page bounds (quest-i8) and of two-stage selection
   (rescoreR: R times the budget's candidates by the Quest bound, rescored from a q4_0 K). */
enum {
  QGEN_SEL_QUEST = 0,
  QGEN_SEL_ORACLE,
  QGEN_SEL_MEANPOOL,
  QGEN_SEL_DEFAULTS,
  QGEN_SEL_QUEST_I8 = QGEN_SEL_DEFAULTS,
  QGEN_SEL_RESCORE2,
  QGEN_SEL_RESCORE4,
  QGEN_SEL_RESCORE8,
  QGEN_SEL_RESCORE16,
  QGEN_SEL_COUNT
};
const char *qgen_eval_selector_name(int sel);
/* The name of a row's selector: that of sel, but the decode path (quest) of a variant
   with two-stage selection (its spec's sparse.rescore r > 1) is "2stage-r<r>" (with its
   top-p cut, "2stage-r<r>-p<top_p>"), and a two-stage selector with top_p < 1 (--top-p)
   is "rescore<R>-p<top_p>". */
const char *qgen_eval_row_selector(int sel, int rescore, double top_p, char *buf, size_t n);

#define QGEN_EVAL_MAX_LIST 16

typedef struct qgen_eval_cfg {
  const char *spec;
  const char *variants[QGEN_EVAL_MAX_LIST]; /* spec variants (cache types); none = the first */
  int n_variants;
  qgen_backend backend;
  int tasks[QGEN_WL_TASK_COUNT];
  int n_tasks;
  long long ctx[QGEN_EVAL_MAX_LIST];
  int n_ctx;
  double coverage[QGEN_EVAL_MAX_LIST];
  int n_cov;
  int selectors[QGEN_SEL_COUNT];
  int n_sel;
  double margin[QGEN_EVAL_MAX_LIST];
  int n_margin;
  int trials;
  uint64_t seed;
  int threads;            /* host threads; 0 = every online CPU */
  long long ref_ctx;      /* fp64 CPU reference (and oracle/meanpool errors) up to this context;
                             beyond it Quest against the backend's dense output; < 0: no errors */
  long long chunk;        /* tokens per qgen_append call */
  int fresh_haystack;     /* a new haystack per trial (default: one per context, re-planted) */
  int proj_dim;           /* meanpool's random projection (32) */
  double v_tau;           /* sparse-V threshold given to every variant (spec sparse.v_tau); < 0: the spec's */
  double top_p;           /* the rescoreR selectors' mass-adaptive cut (qgen_ref_select_top_p); 1: none */
  int steps;              /* decode steps per workload, the queries drifting (qgen_wl_drift); 1: one query */
  int reselect;           /* with steps > 1: select every reselect-th step, reuse the lists between */
  qgen_wl_params wl;
  const char *command;    /* recorded in the JSON */
  FILE *log;              /* progress lines; NULL = quiet */
} qgen_eval_cfg;

/* Defaults: every task, ctx 16K, coverage 0.25, the default selectors, margin 4, 10 trials, seed 1,
   ref_ctx 128K, chunk 64K, projection 32, the workload defaults, GPU backend. */
void qgen_eval_cfg_init(qgen_eval_cfg *c);

typedef struct qgen_eval_row {
  int task, selector;
  long long ctx;
  char k_type[16], variant[72];
  double coverage, margin;
  int trials;
  double recall;        /* fraction of trials where every needle's page was selected in every owner KV head */
  double needle_recall; /* fraction of (needle, owner head) pairs selected */
  double mass_recall;   /* mean over trials of the fp64 softmax mass of the selected pages (mean over query heads) */
  double mass_min;      /* the lowest trial */
  double rel_err;       /* mean relative L2 output error; NAN when not computed */
  double rel_err_max;
  int err_fp64;         /* 1: against the fp64 CPU reference; 0: against the backend's dense output */
  double rel_err_total, rel_err_total_max; /* against the dense attention of the unquantized rows
                            (selection + cache quantization): the fp64 (or dense) reference of a
                            lossless variant of the same run (k/v type = in_type); NAN without one */
  double pages;         /* mean pages selected per KV head */
  double needle_mass;   /* mean fp64 softmax weight of one needle token (its owner heads' query heads) */
  double need, need_max; /* coverage the selector's ranking needs to select every needle (mean, max
                            over trials); Quest's ranking is the reference estimate of the cache;
                            NAN for the two-stage selectors (no single ranking) */
  int rescore;          /* the variant's two-stage candidates per budget page (1: Quest) */
  double top_p;         /* the selector's top-p cut (1: none) */
} qgen_eval_row;

typedef struct qgen_eval_threshold {
  int task, selector;
  long long ctx;
  char k_type[16];
  double coverage;
  double below;     /* the largest swept margin with recall < 1 (NAN: none) */
  double full_from; /* the smallest swept margin above every failing one (NAN: the largest fails) */
  int rescore;      /* as in qgen_eval_row */
  double top_p;
} qgen_eval_threshold;

typedef struct qgen_eval_result {
  qgen_eval_row *rows;
  int n_rows;
  qgen_eval_threshold *thr;
  int n_thr;
  char backend[8], device[128];
  int threads;
  double seconds;                    /* wall time of the whole run */
  double t_haystack, t_stats, t_plant, t_host_sel, t_backend, t_ref; /* phases, seconds */
  long long workloads;               /* (trial, task, margin) workloads run */
} qgen_eval_result;

/* Run the evaluation. Returns 0; 77 when the GPU backend has no driver/device; 1 for a bad
   configuration and 2 for a failure (message in err either way). */
int qgen_eval_run(const qgen_eval_cfg *c, qgen_eval_result *r, char *err, size_t errn);
void qgen_eval_result_free(qgen_eval_result *r);

/* Print the table, and write the JSON document: 0, or QGEN_EXIT_WRITE (harness/common.h)
   after saying why it could not be written. */
void qgen_eval_print(const qgen_eval_result *r, FILE *f);
int qgen_eval_write_json(const qgen_eval_cfg *c, const qgen_eval_result *r, const char *path);

#endif
