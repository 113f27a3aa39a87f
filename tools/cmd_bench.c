/* cmd_bench.c — `qgen bench`'s command line: the options, the checks of the arguments
 * (before any GPU is looked for), opening every variant, then the timing of harness/bench.h
 * into one table and one JSON array.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/bench.h"
#include "tools/commands.h"
#include "tools/opts.h"
#include "base/util.h"
#include "runtime/qgen_ext.h"

enum { BENCH_MAX_VARIANTS = 16 };

static const char BENCH_SYNOPSIS[] =
    "usage: qgen bench --spec FILE [--variant LIST] [--ctx LIST] [--batch LIST] [--coverage LIST]\n"
    "                  [--tokens LIST] [--runs N] [--warmup N] [--json FILE] [--jit]\n"
    "\n"
    "Times one decode step (estimate + select + attend, or attend alone when dense; attend\n"
    "merges its splits itself) per layer on the GPU, for every context x batch x coverage;\n"
    "coverage 1 = dense. A sparse coverage is also timed as a reuse step (QGEN_ATTEND_REUSE:\n"
    "the last selection, no estimate or select), printed on a line of its own. --tokens times\n"
    "steps of several query tokens a sequence too (a speculative verify step: the last T\n"
    "tokens of each sequence, qgen_attend_multi), in the T column.\n"
    "Lists are comma-separated; contexts take K/M suffixes (16K = 16384).\n"
    "\n";

/* What the command line sets. */
typedef struct {
  const char *spec, *variant, *json;
  double ctxs[32], batches[16], covs[16], tokens[8], mem_gib, v_tau;
  int nctx, nb, ncov, ntok, runs, warmup, jit;
} bench_args;

enum { BENCH_MAX_OPTS = 16 }; /* room for the table below and its zero end */

/* The options of `qgen bench` into opts, each writing a field of a: a table, one entry an
   option with its help text. */
static void bench_options(bench_args *a, qgen_opt opts[BENCH_MAX_OPTS]) {
  const qgen_opt t[BENCH_MAX_OPTS] = {
      {.name = "--spec", .arg = "FILE", .kind = QGEN_OPT_STR, .dst = &a->spec},
      {.name = "--variant", .arg = "LIST", .kind = QGEN_OPT_STR, .dst = &a->variant,
       .help = "variants to time, one after another in this process (default the first)"},
      {.name = "--ctx", .arg = "LIST", .kind = QGEN_OPT_NUMS, .dst = a->ctxs, .count = &a->nctx, .max = 32,
       .lo = 1, .hi = INT32_MAX, .help = "default 16K,128K"},
      {.name = "--batch", .arg = "LIST", .kind = QGEN_OPT_NUMS, .dst = a->batches, .count = &a->nb, .max = 16,
       .lo = 1, .hi = 65536, .help = "default 1"},
      {.name = "--coverage", .arg = "LIST", .kind = QGEN_OPT_NUMS, .dst = a->covs, .count = &a->ncov, .max = 16,
       .lo = 0, .hi = 1, .open_lo = 1, .help = "default 1,0.25 (sparse rows need a sparse spec)"},
      {.name = "--tokens", .arg = "LIST", .kind = QGEN_OPT_NUMS, .dst = a->tokens, .count = &a->ntok, .max = 8, .lo = 1,
       .hi = QGEN_MAX_STEP_TOKENS, .help = "query tokens a sequence a step (1..16), default 1"},
      {.name = "--runs", .arg = "N", .kind = QGEN_OPT_INT, .dst = &a->runs, .lo = 1, .hi = 1000000,
       .help = "timed steps per cell (median reported), default 50"},
      {.name = "--warmup", .arg = "N", .kind = QGEN_OPT_INT, .dst = &a->warmup, .lo = 0, .hi = 1000000,
       .help = "untimed steps first, default 10"},
      {.name = "--json", .arg = "FILE", .kind = QGEN_OPT_STR, .dst = &a->json, .help = "write the rows as a JSON array"},
      {.name = "--jit", .kind = QGEN_OPT_FLAG, .dst = &a->jit,
       .help = "also time a cold qgen_open (empty cache), a warm one, and a warm one\n"
               "with the device's context already held (as an engine holds it)"},
      {.name = "--v-tau", .arg = "X", .kind = QGEN_OPT_DOUBLE, .dst = &a->v_tau, .lo = 0, .hi = 1,
       .help = "sparse-V threshold in [0, 1] (spec sparse.v_tau; default the spec's)"},
      {.name = "--mem-gib", .arg = "N", .kind = QGEN_OPT_DOUBLE, .dst = &a->mem_gib, .lo = 0, .hi = 1e9, .open_lo = 1,
       .help = "skip cells whose caches need more than N GiB (default 100)"},
      {0}};
  memcpy(opts, t, sizeof t);
}

/* The variants --variant names, into names (pointing into vbuf, n bytes): their count, or -1
   after saying why. No --variant is one NULL name (the first variant); an empty one is
   passed on to be refused as every command refuses it. */
static int variant_names(const char *variant, const char **names, char *vbuf, size_t n) {
  int nv = 1;
  names[0] = variant;
  if (variant && *variant) {
    qgen_fmt(vbuf, n, "%s", variant);
    if ((nv = qgen_opts_split(vbuf, names, BENCH_MAX_VARIANTS)) < 1) {
      fprintf(stderr, "qgen: bench: --variant: 1 to %d distinct, non-empty names expected (see qgen bench --help)\n",
              BENCH_MAX_VARIANTS);
      return -1;
    }
  }
  return nv;
}

/* Open every variant before any is timed, so a bad one fails first; a sparse coverage
   needs every variant sparse. 0, or the exit code with every context closed. */
static int open_variants(const bench_args *a, const char *const *names, int nv, qgen_ctx **ctxv) {
  int rc = 0;
  for (int i = 0; i < nv && rc == 0; i++) {
    qgen_open_opts o = {QGEN_BACKEND_GPU, 0, names[i], NULL};
    if ((rc = qgen_bench_open(&ctxv[i], a->spec, &o, a->v_tau)) != 0) ctxv[i] = NULL;
    for (int k = 0; k < a->ncov && rc == 0; k++)
      if (a->covs[k] < 1.0 && !qgen_ext_layout(ctxv[i])->sparse) {
        qgen_info vi;
        qgen_get_info(ctxv[i], &vi);
        fprintf(stderr, "qgen: bench: coverage %g needs a sparse spec (variant %s is dense)\n", a->covs[k], vi.name);
        rc = 1;
      }
  }
  if (rc != 0)
    for (int i = 0; i < nv; i++) qgen_close(ctxv[i]);
  return rc;
}

/* Time the nv open variants into the table on stdout and the JSON array: the exit code. */
static int run_bench(const bench_args *a, qgen_ctx **ctxv, int nv) {
  int rc = 0;
  qgen_info info;
  qgen_get_info(ctxv[0], &info);
  qgen_bench_env *b = qgen_bench_env_new(info.sm_count);
  FILE *jf = a->json ? fopen(a->json, "w") : NULL;
  if (a->json && !jf) {
    fprintf(stderr, "qgen: bench: cannot write %s: %s\n", a->json, strerror(errno));
    qgen_bench_env_free(b);
    return QGEN_EXIT_WRITE;
  }
  if (jf) fprintf(jf, "[\n");
  const char *tune = getenv("QGEN_TUNE") ? getenv("QGEN_TUNE") : ""; /* validated by main */
  qgen_bench_print_header();
  qgen_bench_cfg c = {a->ctxs, a->batches, a->covs, a->tokens, a->nctx, a->nb, a->ncov, a->ntok, a->runs, a->warmup, a->mem_gib, jf, 0,
                      tune};
  for (int i = 0; i < nv; i++) qgen_bench_variant(b, ctxv[i], &c);
  if (jf) {
    fprintf(jf, "\n]\n");
    rc = qgen_harness_close_output("bench", jf, a->json);
  }
  qgen_bench_env_free(b);
  return rc;
}

int qgen_bench_main(int argc, char **argv) {
  bench_args a = {.ctxs = {16384, 131072}, .batches = {1}, .covs = {1, 0.25}, .tokens = {1}, .mem_gib = 100, .v_tau = -1,
                  .nctx = 2, .nb = 1, .ncov = 2, .ntok = 1, .runs = 50, .warmup = 10};
  qgen_opt opts[BENCH_MAX_OPTS];
  bench_options(&a, opts);
  const qgen_cmd cmd = {"bench", BENCH_SYNOPSIS, NULL, 20, opts};
  const int done = qgen_opts_parse(&cmd, argc, argv, NULL, 0, NULL);
  if (done >= 0) return done;
  if (!a.spec) {
    fprintf(stderr, "qgen: bench: --spec FILE is required (see qgen bench --help)\n");
    return 1;
  }
  /* the arguments, before looking for a GPU */
  char why[4400], vbuf[1024];
  const char *names[BENCH_MAX_VARIANTS] = {NULL};
  const int nv = variant_names(a.variant, names, vbuf, sizeof vbuf);
  if (nv < 0) return 1;
  for (int i = 0; i < nv; i++)
    if (qgen_opts_variant(a.spec, names[i]) != 0) return 1;
  if (a.json && qgen_dir_writable(a.json, why, sizeof why) != 0) {
    fprintf(stderr, "qgen: bench: --json %s\n", why);
    return 1;
  }
  int rc = a.json ? qgen_opts_not_input("bench", "--json", a.json, a.spec) : 0;
  if (rc != 0) return rc;
  for (int i = 0; i < nv && a.jit && rc == 0; i++) rc = qgen_bench_jit(a.spec, names[i]);
  if (rc != 0) return rc;
  qgen_ctx *ctxv[BENCH_MAX_VARIANTS] = {NULL};
  if ((rc = open_variants(&a, names, nv, ctxv)) != 0) return rc;
  rc = run_bench(&a, ctxv, nv);
  for (int i = 0; i < nv; i++) qgen_close(ctxv[i]);
  return rc;
}
