/* cmd_check.c — `qgen check`'s command line: the options, then the checks of
 * harness/check.h with one header line naming the spec and the seed.
 */
#include <stdio.h>

#include "harness/check.h"
#include "tools/commands.h"
#include "tools/opts.h"
#include "base/util.h"

static const char CHECK_SYNOPSIS[] =
    "usage: qgen check --spec FILE [--variant NAME] [--quick] [--big] [--seed N]\n"
    "\n"
    "Runs the GPU decode path of every variant of FILE against the CPU reference on fresh\n"
    "random data and prints a PASS/FAIL line per check: append bytes, dense and sparse\n"
    "attention at contexts 1..300K and batches of 3 and 8, selected page lists, determinism,\n"
    "sparse-with-full-budget == dense, a reused selection (QGEN_ATTEND_REUSE), CUDA graph\n"
    "replay, views over a caller's pool (NHD, pages of the block and of half of it) == the\n"
    "owned cache. FILE may be a bundle: its kernels run as qgen_open loads them (on a GPU\n"
    "newer than its archs, the older arch's PTX).\n"
    "\n";

int qgen_check_main(int argc, char **argv) {
  qgen_check_opts o = {0};
  const char *spec = NULL;
  uint64_t seed = (uint64_t)qgen_now_ms() ^ 0x5eed;
  const qgen_opt opts[] = {
      {.name = "--spec", .arg = "FILE", .kind = QGEN_OPT_STR, .dst = &spec},
      {.name = "--variant", .arg = "NAME", .kind = QGEN_OPT_STR, .dst = &o.variant},
      {.name = "--quick", .kind = QGEN_OPT_FLAG, .dst = &o.quick,
       .help = "contexts up to a few thousand tokens (fast; for compute-sanitizer)"},
      {.name = "--big", .kind = QGEN_OPT_FLAG, .dst = &o.big,
       .help = "add one sequence whose K cache exceeds 4 GiB (f16 specs; ~2.1M tokens)"},
      {.name = "--seed", .arg = "N", .kind = QGEN_OPT_U64, .dst = &seed,
       .help = "random seed (default: from the clock; printed)"},
      {0}};
  const qgen_cmd cmd = {"check", CHECK_SYNOPSIS,
                        "\nExit status: 0 all passed, 1 a check failed or bad arguments, 2 internal error,\n"
                        "3 standard output could not be written, 77 no GPU or no CUDA driver.\n",
                        14, opts};
  const int done = qgen_opts_parse(&cmd, argc, argv, NULL, 0, NULL);
  if (done >= 0) return done;
  o.seed = seed;
  if (!spec) {
    fprintf(stderr, "qgen: check: --spec FILE is required (see qgen check --help)\n");
    return 1;
  }
  if (qgen_opts_variant(spec, o.variant) != 0) return 1;
  printf("qgen check %s (seed %llu)\n", spec, o.seed);
  fflush(stdout); /* before any error on stderr, also when stdout is a pipe */
  int r = qgen_check_spec(spec, &o);
  return r == 77 ? 77 : r < 0 ? (r == -1 ? 1 : 2) : r > 0 ? 1 : 0;
}
