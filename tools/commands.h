/* commands.h — the entry points of the qgen commands implemented outside tools/main.c.
 * Each takes the arguments after the command's name and returns the process exit code
 * (QGEN_EXIT_* of tools/opts.h; main turns a failed write to standard output into
 * QGEN_EXIT_WRITE).
 */
#ifndef QGEN_COMMANDS_H
#define QGEN_COMMANDS_H

int qgen_check_main(int argc, char **argv); /* `qgen check`, tools/gpucheck.c */
int qgen_bench_main(int argc, char **argv); /* `qgen bench`, tools/bench.c */
int qgen_eval_main(int argc, char **argv);  /* `qgen eval`, tools/eval.c */

#endif
