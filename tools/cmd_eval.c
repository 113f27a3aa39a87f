/* cmd_eval.c — `qgen eval`'s command line: the options into a qgen_eval_cfg, the checks of
 * the arguments against the spec (before any GPU is looked for), then the run of
 * harness/eval.h, its table on stdout and its JSON file.
 */
#include <stdlib.h>
#include <string.h>

#include "harness/eval.h"
#include "tools/commands.h"
#include "tools/opts.h"
#include "base/util.h"

static const char EVAL_SYNOPSIS[] =
    "usage: qgen eval --spec FILE [--variant V[,V...]] [--backend cpu|gpu] [--task T[,T...]|all]\n"
    "                 [--ctx N[,N...]] [--coverage c[,c...]] [--selector S[,S...]]\n"
    "                 [--trials N] [--margin m[,m...]] [--seed S] [--json FILE] [--threads N]\n"
    "                 [--ref-ctx N] [--chunk N] [--proj-dim R] [--top-p P] [--steps N] [--reselect N]\n"
    "                 [--fresh-haystack] [--wl NAME=VALUE]... [-q]\n"
    "\n"
    "Retrieval quality of the sparse decode path on synthetic long-context workloads (RoPE'd\n"
    "keys with outlier channels, an attention sink, recency, planted needles; harness/workload.h).\n"
    "Per trial and workload: the context is appended to a cache of the backend, qgen_attend runs\n"
    "sparse at each coverage, and its page lists (quest) are compared at equal budget with the\n"
    "oracle (true max logit per page) and a mean-pooled-key selector with a random projection\n"
    "(meanpool): needle recall, attention-mass recall, output error (fp64 reference <= --ref-ctx).\n"
    "Lists are comma-separated; contexts take K/M suffixes (16K = 16384).\n"
    "Synthetic needles at the default margin 4 are easier than a real model's: on SmolLM2's\n"
    "retrieval tasks (docs/real-models-eval.md) Quest alone lost 53-80 points at 50-25 % where\n"
    "two-stage r = 8 matched dense; here --margin 1 (hard needles) is what shows that gap.\n"
    "\n";

/* What each column of the table means (qgen_eval_print writes them; the JSON rows carry
   the same numbers under their long names). */
static const char EVAL_COLUMNS[] =
    "\n"
    "Columns, one row per task, context, variant, margin, coverage and selector:\n"
    "  task      the workload: niah_single, niah_multikey, niah_multivalue, niah_boundary\n"
    "  ctx       context length in tokens\n"
    "  k_type    the variant's K cache type\n"
    "  cov       coverage: the fraction of a sequence's pages each selector keeps\n"
    "  selector  quest: the decode path itself (qgen_attend's own page lists; 2stage-rR\n"
    "            for a variant with two-stage selection), oracle, meanpool, quest-i8,\n"
    "            rescoreR (rescoreR-pP with --top-p): see --selector\n"
    "  margin    the needles' logit over the strongest distractor, in haystack logit stds\n"
    "  trials    workloads in the row (x steps with --steps)\n"
    "  recall    the fraction of trials in which every needle's page was selected in\n"
    "            every KV head that owns the needle\n"
    "  needle    the fraction of (needle, owner head) pairs selected\n"
    "  mass      attention-mass recall: the fp64 full-softmax weight of the selected\n"
    "            pages, averaged over query heads, mean over trials\n"
    "  mass_lo   the lowest trial's mass\n"
    "  rel_err   relative L2 error of the output against dense attention over the cache's\n"
    "            own contents (the selection's error alone), mean over trials: against\n"
    "            the fp64 CPU reference up to --ref-ctx, beyond it (marked *) against the\n"
    "            backend's dense output; '-' when not computed (--ref-ctx -1, --steps)\n"
    "  err_max   the largest trial's rel_err\n"
    "  err_tot   the same outputs against dense attention over the unquantized rows\n"
    "            (selection and cache quantization together); '-' unless the run holds\n"
    "            a lossless variant (k/v type = in_type) for the reference\n"
    "  pages     pages selected per KV head, mean over trials\n"
    "  need      the coverage the selector's own ranking needs to select every needle,\n"
    "            mean over trials: above cov, how far a miss was; below, the slack\n"
    "            (nan for two-stage selectors, which have no single ranking)\n"
    "  need_hi   the largest trial's need\n"
    "  n_mass    the fp64 softmax weight of one needle token (over its owner heads'\n"
    "            query heads), mean over trials\n"
    "With several --margin values, a second table per (task, ctx, k_type, cov, selector):\n"
    "fails_at, the largest margin with recall < 1 ('none'), and full_from, the smallest\n"
    "margin above every failing one ('never': the largest margin fails).\n";

/* The option setters below take the whole configuration (dst) and return 0, or -1 with why. */
static int set_variants(void *dst, const char *v, char *why, size_t n) {
  qgen_eval_cfg *c = dst;
  static char buf[1024]; /* c->variants point into it */
  qgen_fmt(buf, sizeof buf, "%s", v);
  if ((c->n_variants = qgen_opts_split(buf, c->variants, QGEN_EVAL_MAX_LIST)) < 1)
    return qgen_fmt(why, n, "1 to %d distinct, non-empty names expected", QGEN_EVAL_MAX_LIST), -1;
  return 0;
}

static int set_backend(void *dst, const char *v, char *why, size_t n) {
  qgen_eval_cfg *c = dst;
  if (!strcmp(v, "cpu")) c->backend = QGEN_BACKEND_CPU;
  else if (!strcmp(v, "gpu")) c->backend = QGEN_BACKEND_GPU;
  else return qgen_fmt(why, n, "cpu or gpu expected"), -1;
  return 0;
}

static int set_tasks(void *dst, const char *v, char *why, size_t n) {
  qgen_eval_cfg *c = dst;
  char buf[1024];
  const char *names[QGEN_WL_TASK_COUNT];
  int k;
  if (!strcmp(v, "all")) {
    for (k = 0; k < QGEN_WL_TASK_COUNT; k++) c->tasks[k] = k;
    c->n_tasks = QGEN_WL_TASK_COUNT;
    return 0;
  }
  qgen_fmt(buf, sizeof buf, "%s", v);
  const int m = qgen_opts_split(buf, names, QGEN_WL_TASK_COUNT);
  if (m < 1) return qgen_fmt(why, n, "1 to %d distinct, non-empty task names expected", QGEN_WL_TASK_COUNT), -1;
  for (k = 0; k < m; k++) {
    qgen_wl_task t;
    if (qgen_wl_task_from_name(names[k], &t) != 0) return qgen_fmt(why, n, "unknown task '%s'", names[k]), -1;
    c->tasks[k] = t;
  }
  c->n_tasks = m;
  return 0;
}

static int set_selectors(void *dst, const char *v, char *why, size_t n) {
  qgen_eval_cfg *c = dst;
  char buf[256];
  const char *names[QGEN_SEL_COUNT];
  qgen_fmt(buf, sizeof buf, "%s", v);
  const int m = qgen_opts_split(buf, names, QGEN_SEL_COUNT);
  if (m < 1) return qgen_fmt(why, n, "1 to %d distinct, non-empty selectors expected", QGEN_SEL_COUNT), -1;
  for (int k = 0; k < m; k++) {
    int s = -1;
    for (int j = 0; j < QGEN_SEL_COUNT; j++)
      if (!strcmp(names[k], qgen_eval_selector_name(j))) s = j;
    if (s < 0)
      return qgen_fmt(why, n, "unknown selector '%s' (quest, oracle, meanpool, quest-i8, rescore2, rescore4, rescore8, "
                      "rescore16)", names[k]), -1;
    c->selectors[k] = s;
  }
  c->n_sel = m;
  return 0;
}

static int set_knob(void *dst, const char *v, char *why, size_t n) {
  qgen_eval_cfg *c = dst;
  return qgen_wl_params_set(&c->wl, v, why, n);
}

/* What the command line sets: the run's configuration and the command's own options. */
typedef struct {
  qgen_eval_cfg c;
  const char *json;
  int quiet;
} eval_args;

enum { EVAL_MAX_OPTS = 32 }; /* room for the table below and its zero end */

/* The options of `qgen eval` into opts, each writing a field of a. A table, one entry an
   option with its help text, so it is long without being complicated. */
static void eval_options(eval_args *a, qgen_opt opts[EVAL_MAX_OPTS]) {
  qgen_eval_cfg *c = &a->c;
  const qgen_opt t[EVAL_MAX_OPTS] = {
      {.name = "--spec", .arg = "FILE", .kind = QGEN_OPT_STR, .dst = &c->spec},
      {.name = "--variant", .arg = "LIST", .kind = QGEN_OPT_FUNC, .dst = c, .set = set_variants,
       .help = "spec variants to evaluate (cache types), default the first"},
      {.name = "--backend", .arg = "B", .kind = QGEN_OPT_FUNC, .dst = c, .set = set_backend,
       .help = "gpu (default) or cpu (the reference executor)"},
      {.name = "--task", .arg = "LIST", .kind = QGEN_OPT_FUNC, .dst = c, .set = set_tasks,
       .help = "niah_single, niah_multikey, niah_multivalue, niah_boundary, or all (default)"},
      {.name = "--ctx", .arg = "LIST", .kind = QGEN_OPT_TOKENS, .dst = c->ctx, .count = &c->n_ctx,
       .max = QGEN_EVAL_MAX_LIST, .help = "default 16K"},
      {.name = "--coverage", .arg = "LIST", .kind = QGEN_OPT_NUMS, .dst = c->coverage, .count = &c->n_cov,
       .max = QGEN_EVAL_MAX_LIST, .lo = 0, .hi = 1, .open_lo = 1,
       .help = "fractions of the pages, default the spec's own: its coverage, or its\n"
               "token budget over the context (one --ctx then)"},
      {.name = "--selector", .arg = "LIST", .kind = QGEN_OPT_FUNC, .dst = c, .set = set_selectors,
       .help = "default quest,oracle,meanpool; also quest-i8 (Quest over 8-bit\n"
               "page bounds) and rescore2, rescore4, rescore8, rescore16 (two-stage:\n"
               "R x the budget's candidates by Quest, rescored from a q4_0 K)"},
      {.name = "--trials", .arg = "N", .kind = QGEN_OPT_INT, .dst = &c->trials, .help = "workloads per cell, default 10"},
      {.name = "--margin", .arg = "LIST", .kind = QGEN_OPT_NUMS, .dst = c->margin, .count = &c->n_margin,
       .max = QGEN_EVAL_MAX_LIST,
       .help = "needle logit over the strongest distractor, in haystack logit stds; default 4.\n"
               "With several, the margin below which recall < 1 is reported per selector"},
      {.name = "--seed", .arg = "S", .kind = QGEN_OPT_U64, .dst = &c->seed,
       .help = "default 1 (haystack seed; trial t uses a seed derived from S and t)"},
      {.name = "--json", .arg = "FILE", .kind = QGEN_OPT_STR, .dst = &a->json,
       .help = "write {backend, gpu, date, command, ..., rows, thresholds}"},
      {.name = "--threads", .arg = "N", .kind = QGEN_OPT_INT, .dst = &c->threads, .lo = 1, .hi = 4096,
       .help = "host threads (1..4096), default all CPUs"},
      {.name = "--ref-ctx", .arg = "N", .kind = QGEN_OPT_TOKENS, .dst = &c->ref_ctx,
       .help = "fp64 CPU reference up to this context (default 128K); beyond, Quest's\n"
               "error is against the backend's dense output and the others are null;\n"
               "-1: no output errors at all (fast recall and margin sweeps)"},
      {.name = "--chunk", .arg = "N", .kind = QGEN_OPT_TOKENS, .dst = &c->chunk,
       .help = "tokens per qgen_append (default 64K)"},
      {.name = "--proj-dim", .arg = "R", .kind = QGEN_OPT_INT, .dst = &c->proj_dim,
       .help = "meanpool's projection (default 32)"},
      {.name = "--v-tau", .arg = "X", .kind = QGEN_OPT_DOUBLE, .dst = &c->v_tau, .lo = 0, .hi = 1,
       .help = "sparse-V threshold in [0, 1] for every variant (spec sparse.v_tau;\n"
               "default the spec's): its output error on top of the selection's"},
      {.name = "--top-p", .arg = "P", .kind = QGEN_OPT_DOUBLE, .dst = &c->top_p,
       .help = "mass-adaptive budget for the rescoreR selectors (named rescoreR-pP):\n"
               "per KV head the fewest candidates whose estimated softmax mass reaches P,\n"
               "at most the budget's (ref/ref.h qgen_ref_select_top_p); default 1 (off)"},
      {.name = "--steps", .arg = "N", .kind = QGEN_OPT_INT, .dst = &c->steps,
       .help = "decode steps per workload over the same cache, each query drifting from\n"
               "the last (--wl drift=RHO, default 0.9); rows count (workload, step)\n"
               "pairs as trials; no output errors. Default 1"},
      {.name = "--reselect", .arg = "N", .kind = QGEN_OPT_INT, .dst = &c->reselect,
       .help = "with --steps: every selector selects every N-th step and reuses its\n"
               "lists between (sink and recent pages are in every list); default 1"},
      {.name = "--fresh-haystack", .kind = QGEN_OPT_FLAG, .dst = &c->fresh_haystack,
       .help = "a new haystack per trial (default: one per context, needles re-planted)"},
      {.name = "--wl", .arg = "NAME=VALUE", .kind = QGEN_OPT_FUNC, .dst = c, .set = set_knob,
       .help = "a workload knob (harness/workload.h; one out of its range is refused):\n"
               "active_pairs, active_std, inactive_std, outlier_pairs, outlier_mean,\n"
               "rope_base, value_mean, logit_std, head_spread, outlier_logit, sink_mass,\n"
               "recent_window, recent_boost, recent_tau, owners, multikey, multivalue,\n"
               "topic_len, topic_share, drift"},
      {.name = "--quiet", .alias = "-q", .kind = QGEN_OPT_FLAG, .dst = &a->quiet, .help = "no progress lines on stderr"},
      {0}};
  memcpy(opts, t, sizeof t);
}

/* The arguments against the spec, before looking for a GPU: every --variant is one of its
   variants, and without --coverage the spec's own (its coverage, or its token budget over
   the one context). Returns -1 to go on, else the exit code. */
static int check_spec_args(qgen_eval_cfg *c) {
  static qgen_spec_set set;
  if (qgen_harness_spec_set(c->spec, &set) != 0) return -1; /* the run reports it */
  for (int i = 0; i < c->n_variants; i++)
    if (qgen_opts_variant_in(c->spec, &set, c->variants[i]) != 0) return 1;
  const qgen_spec *s = c->n_variants ? qgen_spec_find(&set, c->variants[0]) : &set.v[0];
  if (!c->n_cov && s->sparse && s->budget && c->n_ctx > 1) {
    fprintf(stderr, "qgen: eval: %s has a budget of %lld tokens, another coverage at each context: give --coverage "
            "LIST or one --ctx\n", c->spec, (long long)s->budget);
    return 1;
  }
  if (!c->n_cov && s->sparse) {
    const double cov = s->budget ? (double)s->budget / (double)c->ctx[0] : s->coverage;
    c->coverage[0] = cov < 1 ? cov : 1;
    c->n_cov = 1;
  }
  return -1;
}

/* The command as typed, for the JSON record: "qgen eval" and the arguments, those with
   spaces, quotes or '$' in single quotes. */
static char *command_line(int argc, char **argv) {
  size_t cl = 16;
  for (int i = 0; i < argc; i++) cl += strlen(argv[i]) + 3;
  char *cmd = calloc(cl, 1);
  if (!cmd) {
    fprintf(stderr, "qgen eval: out of memory (%zu x %zu bytes)\n", cl, (size_t)1);
    exit(2);
  }
  strcpy(cmd, "qgen eval");
  for (int i = 0; i < argc; i++) {
    strcat(cmd, " ");
    const int q = strpbrk(argv[i], " \t\"'$") != NULL;
    if (q) strcat(cmd, "'");
    strcat(cmd, argv[i]);
    if (q) strcat(cmd, "'");
  }
  return cmd;
}

/* Run c; print its table on stdout and write its JSON to json (NULL: none). The exit code. */
static int run_and_report(const qgen_eval_cfg *c, const char *json) {
  qgen_eval_result r;
  char err[4096];
  int rc = qgen_eval_run(c, &r, err, sizeof err);
  if (rc == 77) {
    printf("%s — skipped%s\n", err, c->backend == QGEN_BACKEND_GPU ? " (--backend cpu runs it on the CPU reference)" : "");
    return 77;
  }
  if (rc != 0) {
    fprintf(stderr, "%s\n", err);
    return rc;
  }
  printf("qgen eval: %s, backend %s%s%s, %d trials per cell", c->spec, r.backend, r.device[0] ? " " : "", r.device,
         c->trials);
  if (c->steps > 1) printf(" x %d steps (drift %g), selecting every %d", c->steps, c->wl.drift, c->reselect);
  printf("\n");
  qgen_eval_print(&r, stdout);
  if (json) rc = qgen_eval_write_json(c, &r, json);
  qgen_eval_result_free(&r);
  return rc;
}

int qgen_eval_main(int argc, char **argv) {
  eval_args a = {.json = NULL, .quiet = 0};
  qgen_eval_cfg *c = &a.c;
  qgen_eval_cfg_init(c);
  qgen_opt opts[EVAL_MAX_OPTS];
  eval_options(&a, opts);
  const qgen_cmd eval_cmd = {"eval", EVAL_SYNOPSIS, EVAL_COLUMNS, 20, opts};
  c->n_cov = 0; /* none given: the spec's own, below */
  const int done = qgen_opts_parse(&eval_cmd, argc, argv, NULL, 0, NULL);
  if (done >= 0) return done;
  c->log = a.quiet ? NULL : stderr;
  if (!c->spec) {
    fprintf(stderr, "qgen: eval: needs --spec FILE (see qgen eval --help)\n");
    return 1;
  }
  int rc = check_spec_args(c);
  if (rc >= 0) return rc;
  if (!c->n_cov) c->n_cov = 1; /* 0.25; a spec that does not load or is dense is refused by the run */
  char why[4400];
  if (a.json && qgen_dir_writable(a.json, why, sizeof why) != 0) {
    fprintf(stderr, "qgen: eval: --json %s\n", why);
    return 1;
  }
  const int same = a.json ? qgen_opts_not_input("eval", "--json", a.json, c->spec) : 0;
  if (same) return same;
  char *cmd = command_line(argc, argv);
  c->command = cmd;
  rc = run_and_report(c, a.json);
  free(cmd);
  return rc;
}
