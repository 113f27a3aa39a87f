/* opts.h — the command line of every qgen command: a table of options, one parser.
 *
 * A command describes its options once (name, value kind, destination, help line); the
 * parser accepts `--name VALUE` and `--name=VALUE`, checks every value (numbers must be
 * whole numbers of their kind, lists must not be empty or too long), refuses unknown options
 * and missing values with "qgen: CMD: ... (see qgen CMD --help)", and prints the usage:
 * the command's synopsis, then the listed options with their help aligned, then its epilog.
 */
#ifndef QGEN_OPTS_H
#define QGEN_OPTS_H

#include <stdio.h>

#include "harness/common.h" /* the exit codes (QGEN_EXIT_*) */
#include "runtime/qgen.h"
#include "spec/spec.h"

typedef enum qgen_opt_kind {
  QGEN_OPT_FLAG,   /* int: set to 1; takes no value */
  QGEN_OPT_STR,    /* const char *: the value itself */
  QGEN_OPT_INT,    /* int, decimal */
  QGEN_OPT_U64,    /* uint64_t: decimal, or 0x hex */
  QGEN_OPT_DOUBLE, /* double */
  QGEN_OPT_NUMS,   /* double[max] with *count: comma-separated, K/M suffixes (x1024, x1048576) */
  QGEN_OPT_TOKENS, /* long long[max] with *count (or one long long when count is NULL): whole
                      numbers with K/M suffixes, comma-separated when count is set */
  QGEN_OPT_FUNC,   /* set(dst, value, why, n): 0, or -1 with the reason in why */
  QGEN_OPT_HELP,   /* -h/--help (always recognised): only says where the usage lists it */
} qgen_opt_kind;

typedef struct qgen_opt {
  const char *name;  /* "--spec" */
  const char *alias; /* a second spelling ("-o"), or NULL */
  const char *arg;   /* the value's placeholder in the usage ("FILE"), or NULL */
  qgen_opt_kind kind;
  void *dst;
  int *count;        /* NUMS, TOKENS: number of values stored */
  int max;           /* NUMS, TOKENS with count: capacity of dst */
  int (*set)(void *dst, const char *value, char *why, size_t n); /* FUNC */
  double lo, hi;     /* INT, DOUBLE, NUMS, TOKENS: every value in [lo, hi] ((lo, hi] with
                        open_lo); both 0: any value of the kind */
  int open_lo;
  const char *help;  /* usage text (lines after the first start at the help column); NULL:
                        not listed (the synopsis shows it) */
} qgen_opt;

typedef struct qgen_cmd {
  const char *name;     /* "emit": messages read "qgen: emit: ..." */
  const char *synopsis; /* the usage before the option list */
  const char *epilog;   /* after it, or NULL */
  int col;              /* column of the options' help text */
  const qgen_opt *opts; /* ends with an entry whose name is NULL */
} qgen_cmd;

/* Parse argv[0..argc) (the arguments after the command's name). Arguments that are not
   options go to args[0..max_args) (*n_args of them; args may be NULL when max_args is 0).
   Returns -1 when the command should run, 0 after printing the usage for -h/--help, and 1
   after printing why the arguments are wrong: the command returns any value >= 0 as its
   exit code. */
int qgen_opts_parse(const qgen_cmd *c, int argc, char **argv, const char **args, int max_args, int *n_args);

/* The usage text of c. */
void qgen_opts_usage(const qgen_cmd *c, FILE *f);

/* The one of names[0..n) closest to word, close enough to be the word mistyped (a few
   edits for its length), or NULL. */
const char *qgen_opts_closest(const char *word, const char *const *names, int n);

/* Whether writing the file at out would write over the file at in: the same file (device
   and inode, when both exist) or the same path once resolved. */
int qgen_opts_same_file(const char *out, const char *in);

/* Refuse an output that is the input: 0, or QGEN_EXIT_USER after "qgen: CMD: OPT OUT is
   the input IN; refusing to write over it". out NULL: standard output (a redirection). */
int qgen_opts_not_input(const char *cmd, const char *opt, const char *out, const char *in);

/* Split a comma-separated list in place into out[0..max): the count, or -1 for an empty item
   ("a,,b", as the numeric lists refuse it), more than max items or one given twice (its rows
   would be counted twice). */
int qgen_opts_split(char *s, const char **out, int max);

/* --variant V of the spec set loaded from path: 0 when V is NULL or names one of its
   variants, else 1 after "qgen: PATH: no variant named 'V'; variants: a, b, c". */
int qgen_opts_variant_in(const char *path, const qgen_spec_set *set, const char *variant);

/* qgen_opts_variant_in for the spec or bundle at path, loaded here (before a command looks for a GPU);
   a file that does not load returns 0: the command reports it as it opens it. */
int qgen_opts_variant(const char *path, const char *variant);

#endif
