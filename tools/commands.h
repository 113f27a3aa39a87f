/* commands.h — the entry points of the qgen commands implemented outside tools/main.c.
 * Each takes the arguments after the command's name and returns the process exit code
 * (0 ok, 1 bad arguments or a failed check, 2 internal error, 77 no GPU).
 */
#ifndef QGEN_COMMANDS_H
#define QGEN_COMMANDS_H

int qgen_check_main(int argc, char **argv); /* `qgen check`, tools/gpucheck.c */
int qgen_bench_main(int argc, char **argv); /* `qgen bench`, tools/bench.c */
int qgen_eval_main(int argc, char **argv);  /* `qgen eval`, tools/eval.c */

#endif
