/* mkbytecode.c — compile Lua source to a real binary chunk (lua_dump), so the tests can
 * show that the spec loader refuses precompiled specs.
 *
 *   mkbytecode OUT [SOURCE]
 *
 * SOURCE is Lua text (default: a valid spec); OUT receives the binary chunk.
 * Exit status 0 on success, 1 on any error (message on stderr).
 */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

static const char DEFAULT_SOURCE[] =
    "return { name = \"bytecode\", head_dim = 128, n_head = 32, n_head_kv = 8 }\n";

static int writer(lua_State *L, const void *p, size_t size, void *ud) {
  (void)L;
  return fwrite(p, 1, size, (FILE *)ud) != size;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: mkbytecode OUT [SOURCE]\n");
    return 1;
  }
  const char *src = argc == 3 ? argv[2] : DEFAULT_SOURCE;
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "mkbytecode: cannot create a Lua state\n");
    return 1;
  }
  int rc = 1;
  FILE *f = NULL;
  if (luaL_loadbufferx(L, src, strlen(src), "=mkbytecode", "t") != LUA_OK) {
    fprintf(stderr, "mkbytecode: %s\n", lua_tostring(L, -1));
  } else if (!(f = fopen(argv[1], "wb"))) {
    perror(argv[1]);
  } else if (lua_dump(L, writer, f, 0) != 0 || ferror(f)) {
    fprintf(stderr, "mkbytecode: %s: write error\n", argv[1]);
  } else {
    rc = 0;
  }
  if (f && fclose(f) != 0) rc = 1;
  lua_close(L);
  return rc;
}
