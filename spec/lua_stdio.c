/* lua_stdio.c — stdin/stdout/stderr for the Lua linked into libqgen.so.
 *
 * Debian's liblua5.4.a is not position-independent: it reaches libc's stdin, stdout and
 * stderr PC-relative, which no shared object can bind. The build links a copy of the
 * archive in which those three names are renamed to the hidden variables below (set from
 * libc's at load time), so libqgen.so carries its own Lua and needs none installed.
 */
#include <stdio.h>

__attribute__((visibility("hidden"))) FILE *qgen_lua_stdin, *qgen_lua_stdout, *qgen_lua_stderr;

__attribute__((constructor)) static void qgen_lua_stdio_init(void) {
  qgen_lua_stdin = stdin;
  qgen_lua_stdout = stdout;
  qgen_lua_stderr = stderr;
}
