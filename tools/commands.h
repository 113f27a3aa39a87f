/* commands.h — the entry points of the qgen commands implemented outside tools/main.c.
 * Each takes the arguments after the command's name and returns the process exit code
 * (QGEN_EXIT_* of harness/common.h; main turns a failed write to standard output into
 * QGEN_EXIT_WRITE).
 */
#ifndef QGEN_COMMANDS_H
#define QGEN_COMMANDS_H

int qgen_check_main(int argc, char **argv); /* `qgen check`, tools/cmd_check.c */
int qgen_bench_main(int argc, char **argv); /* `qgen bench`, tools/cmd_bench.c */
int qgen_eval_main(int argc, char **argv);  /* `qgen eval`, tools/cmd_eval.c */

#endif
